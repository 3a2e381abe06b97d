// The explorer's page: asks the server (/api/...) and draws what it answers. Figures that the
// static report also has come drawn from the server (the same code); the interactive ones
// (heat maps with hover, the token strip, the κ map) are drawn here.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { model: null, last: null, text: "", span: null, pending: 0, key: null, timer: null };

async function api(path, body) {
  const opt = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const r = await fetch(path, opt);
  let j;
  try { j = await r.json(); } catch (e) { throw new Error(`the server answered ${r.status} without JSON`); }
  if (!r.ok) throw new Error(j.error || `error ${r.status}`);
  return j;
}

function floats(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Float32Array(bytes.buffer);
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function showError(id, msg) { const e = $(id); e.textContent = msg; e.hidden = !msg; }

// ---- tooltips -------------------------------------------------------------------------------
function tip(ev, text) {
  const t = $("tip");
  if (!text) { t.hidden = true; return; }
  t.textContent = text; t.hidden = false;
  t.style.left = (ev.clientX + 12) + "px"; t.style.top = (ev.clientY + 12) + "px";
}

// ---- colours --------------------------------------------------------------------------------
function blue(v) { // 0..1 white to dark blue
  v = Math.max(0, Math.min(1, v));
  const mix = (a, b) => Math.round(a + (b - a) * v);
  return `rgb(${mix(255, 8)},${mix(255, 48)},${mix(255, 107)})`;
}
function diverging(x, m) { // blue (negative) to white to red (positive)
  if (!isFinite(x)) return "#fff";
  const a = Math.max(-1, Math.min(1, x / (m || 1e-12)));
  return a >= 0 ? `rgb(255,${Math.round(255 * (1 - a))},${Math.round(255 * (1 - a))})`
                : `rgb(${Math.round(255 * (1 + a))},${Math.round(255 * (1 + a))},255)`;
}
function fmt(x) { return Math.abs(x) >= 0.01 && Math.abs(x) < 1e4 ? (Math.round(x * 1000) / 1000).toString() : x.toExponential(2); }

// A heat map on a canvas: rows × cols, value(r, c) (null: blank), labels for both axes, a colour
// scale (diverging around 0, or 0..max), and the value under the pointer in a tooltip.
function heatmap(canvas, rows, cols, value, opt) {
  const cell = Math.max(2, Math.min(14, Math.floor(900 / Math.max(cols, 1))));
  const ch = Math.max(2, Math.min(14, Math.floor(600 / Math.max(rows, 1))));
  const left = 90, top = 70, legend = 70;
  canvas.width = left + cols * cell + legend; canvas.height = top + rows * ch + 20;
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, canvas.width, canvas.height);
  let mx = 0;
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) { const v = value(r, c); if (v !== null && isFinite(v)) mx = Math.max(mx, Math.abs(v)); }
  if (mx === 0) mx = 1;
  const colour = opt.diverging ? (v) => diverging(v, mx) : (v) => blue(v / mx);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
    const v = value(r, c);
    if (v === null) continue;
    g.fillStyle = colour(v); g.fillRect(left + c * cell, top + r * ch, cell, ch);
  }
  g.strokeStyle = "#999"; g.strokeRect(left, top, cols * cell, rows * ch);
  g.fillStyle = "#222"; g.font = "10px monospace";
  const everyR = Math.ceil(11 / ch), everyC = Math.ceil(11 / cell);
  g.textAlign = "right";
  for (let r = 0; r < rows; r += everyR) g.fillText(opt.rowLabel(r).slice(0, 12), left - 3, top + r * ch + ch / 2 + 3);
  for (let c = 0; c < cols; c += everyC) {
    g.save(); g.translate(left + c * cell + cell / 2 + 3, top - 3); g.rotate(-Math.PI / 3);
    g.textAlign = "left"; g.fillText(opt.colLabel(c).slice(0, 12), 0, 0); g.restore();
  }
  // colour scale
  const lx = left + cols * cell + 12;
  for (let k = 0; k < 20; k++) {
    const v = opt.diverging ? mx * (1 - 2 * k / 19) : mx * (1 - k / 19);
    g.fillStyle = colour(v); g.fillRect(lx, top + k * 8, 14, 8);
  }
  g.fillStyle = "#222"; g.textAlign = "left";
  g.fillText(fmt(mx), lx + 18, top + 8);
  g.fillText(opt.diverging ? fmt(-mx) : "0", lx + 18, top + 160);
  if (opt.title) { g.font = "12px sans-serif"; g.fillText(opt.title, 4, 14); }
  canvas.onmousemove = (ev) => {
    const b = canvas.getBoundingClientRect();
    const c = Math.floor((ev.clientX - b.left - left) / cell), r = Math.floor((ev.clientY - b.top - top) / ch);
    if (r < 0 || c < 0 || r >= rows || c >= cols) return tip(ev, null);
    const v = value(r, c);
    tip(ev, v === null ? null : `${opt.rowName(r)}\n${opt.colName(c)}\n${opt.valueName}: ${v}`);
  };
  canvas.onmouseleave = (ev) => tip(ev, null);
}

// ---- the model ------------------------------------------------------------------------------
async function loadModel() {
  try {
    const m = await api("/api/model");
    state.model = m;
    const layers = m.layers.map((l) => `${l.cell} ${l.hidden}`).join(", ");
    if (m.task) {
      // A task model: its input is the task's, typed or drawn from a seed; no corpus to search.
      $("model").textContent = `${m.checkpoint}: ${m.cell} [${layers}], the ${m.task.name} task (length ${m.task.length}), trained ${m.task.steps_run} steps`;
      $("input").placeholder = m.task.input.charAt(0).toUpperCase() + m.task.input.slice(1);
      $("tokens-title").textContent = "Outputs";
      $("tokens-hint").textContent = "Each step of the input, green where the task scores the output and it is right, red where it is wrong. Hover for the output there.";
      document.querySelector('nav button[data-view="search"]').hidden = true;
    } else {
      $("model").textContent = `${m.checkpoint}: ${m.cell} [${layers}], ${m.level} level, ${m.vocab} tokens` +
        (m.corpus ? `; corpus ${m.corpus.name} (${m.corpus.tokens} tokens)` : "; no corpus (start with --corpus FILE to search)") +
        (m.isan ? `; unigram and bigram counted on ${m.distributions ? `${m.distributions.of} (${m.distributions.tokens} tokens)` : "each explained text (--distributions train: the training split)"}` : "");
    }
    document.querySelector('nav button[data-view="map"]').hidden = !m.isan;
  } catch (e) { $("model").textContent = "cannot reach the server: " + e.message; }
}

// ---- the text view --------------------------------------------------------------------------
async function read() {
  clearTimeout(state.timer); // Read pressed before the typing pause ran out: one read, not two
  const text = $("input").value;
  if (!text.trim()) return;
  const components = $("components").value.split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  // The same text read again would only redraw it and drop the span the user selected.
  const key = JSON.stringify([text, components]);
  if (key === state.key) return;
  state.key = key;
  const ticket = ++state.pending;
  $("status").textContent = "reading…";
  const t0 = performance.now();
  try {
    const r = await api("/api/explain", { text, components });
    if (ticket !== state.pending) return; // a newer text is on its way
    state.last = r; state.text = text; state.span = null;
    showError("error", "");
    render(r);
    const unk = r.unknown_share == null ? "" :
      `; <unk> ${(100 * r.unknown_share).toFixed(1)}% (outside the ${state.model ? state.model.vocab : ""}-token vocabulary; words cut by the ${r.split} rule)`;
    $("status").textContent = `${r.labels.length} tokens read in ${Math.round(performance.now() - t0)} ms${unk}`;
  } catch (e) {
    if (ticket !== state.pending) return;
    // The results on screen are an older text's: hidden, not left as if they were this one's.
    state.last = null; state.span = null; state.key = null;
    $("results").hidden = true;
    showError("error", e.message + " (the results of the previous text are cleared)");
    $("status").textContent = "";
  }
}

function render(r) {
  $("results").hidden = false;
  renderTokens(r);
  const sel = $("state-layer");
  sel.replaceChildren(...r.states.map((s) => el("option", { value: s.layer, text: `${s.layer} (${s.width} units)` })));
  sel.onchange = () => renderState(r, +sel.value);
  renderState(r, r.states.length - 1);
  sel.value = r.states.length - 1;
  renderCell(r);
  $("pca").innerHTML = r.pca.svg;
  $("summary").textContent = r.summary;
}

function renderTokens(r) {
  const box = $("tokens");
  box.replaceChildren();
  r.labels.forEach((lab, t) => {
    const s = el("span", { class: "tok", "data-t": t, text: lab });
    if (r.task) {
      const o = r.task.steps[t];
      if (o.right !== undefined) s.classList.add(o.right ? "right" : "wrong");
    } else if (t > 0) {
      // colour: ln p from 0 (white) down to −12 (red)
      const lnp = r.predictions[t - 1].next_lnp;
      s.style.background = diverging(Math.min(12, -lnp), 12);
      s.dataset.lnp = lnp;
    }
    s.onmouseenter = () => showCandidates(r, t);
    s.onclick = () => pick(r, t);
    box.append(s);
  });
  $("selection").textContent = "Click a token to start a span, another to end it.";
}

function showCandidates(r, t) {
  if (r.task) {
    const o = r.task.steps[t];
    $("candidates").textContent = `Step ${t} (${r.labels[t]}): output ${o.answer}` + (o.target === undefined ? " (not scored)" : `, target ${o.target}${o.right ? "" : " ✗"}`);
    return;
  }
  const p = r.predictions[t];
  const here = t > 0 ? `ln p(${r.labels[t]}) = ${fmt(r.predictions[t - 1].next_lnp)}. ` : "";
  $("candidates").textContent = `${here}After “${r.labels[t]}” the model expects: ` + p.top.map(([w, lp]) => `${w} (${fmt(lp)})`).join(", ");
}

function pick(r, t) {
  if (!state.span || state.span.done) state.span = { start: t, end: t + 1, done: false };
  else { const a = Math.min(state.span.start, t), b = Math.max(state.span.start, t) + 1; state.span = { start: a, end: b, done: true }; }
  document.querySelectorAll(".tok").forEach((e) => e.classList.toggle("sel", +e.dataset.t >= state.span.start && +e.dataset.t < state.span.end));
  const words = r.labels.slice(state.span.start, state.span.end).join(" ");
  if (r.task) { $("selection").textContent = `span ${state.span.start}..${state.span.end}: “${words}”`; return; }
  $("selection").replaceChildren(`span ${state.span.start}..${state.span.end}: “${words}” `,
    el("button", { id: "search-this", text: "search the corpus for it" }));
  $("search-this").onclick = () => { show("search"); search(); };
  $("search-span").textContent = `span ${state.span.start}..${state.span.end}: “${words}”`;
}

function renderState(r, layer) {
  const s = r.states[layer];
  const v = floats(s.values), T = r.labels.length, W = s.width;
  heatmap($("state-heat"), W, T, (u, t) => v[t * W + u], {
    diverging: true, title: `layer ${layer}: output per unit (rows) after each token (columns)`,
    rowLabel: (u) => (u % 5 === 0 ? `unit ${u}` : ""), colLabel: (t) => r.labels[t],
    rowName: (u) => `unit ${u}`, colName: (t) => `token ${t} ${r.labels[t]}`, valueName: "value",
  });
}

function renderCell(r) {
  const box = $("cell");
  box.replaceChildren();
  const groups = [["ran", "RAN weights w_j^t over past content layers", "weight"], ["attention", "Effective attention of the state over past steps", "attention"]];
  for (const [key, title, what] of groups) {
    if (!r[key]) continue;
    box.append(el("h2", { text: title }));
    for (const L of r[key]) renderInfluence(box, r, L, what);
  }
  if (r.isan) renderIsan(box, r);
  if (r.not_applicable.length) {
    box.append(el("h3", { text: "Not applicable to this model" }));
    const ul = el("ul", { class: "hint" });
    r.not_applicable.forEach((n) => ul.append(el("li", { text: n })));
    box.append(ul);
  }
}

function renderInfluence(box, r, L, what) {
  const T = L.steps;
  box.append(el("h3", { text: `layer ${L.layer} (${L.cell}, ${L.hidden} units): reconstruction error ${L.reconstruction_relative_error.toExponential(2)} relative` }));
  box.append(el("p", { class: "hint", text: "Each arc joins a token to its most influential predecessor (the largest w_j^t(m) over units m and j < t)." }));
  const arcs = el("div", { class: "fig" }); arcs.innerHTML = L.arcs_svg; box.append(arcs);
  const choice = el("select", {});
  choice.append(el("option", { value: "mean", text: "mean over units" }), el("option", { value: "max", text: "maximum over units" }));
  L.components.forEach((c, k) => choice.append(el("option", { value: "c" + k, text: `unit ${c.unit}` })));
  box.append(el("p", { class: "hint" }, `Heat map of the ${what}s: rows t (the current token), columns j (the past token); show `, choice,
    ". (Name units above, e.g. 3,17, to see them one by one.)"));
  const canvas = el("canvas", {}); const sc = el("div", { class: "scroll" }, canvas); box.append(sc);
  const mats = { mean: floats(L.mean_w), max: floats(L.max_w) };
  L.components.forEach((c, k) => { mats["c" + k] = floats(c.w); });
  const draw = () => {
    const m = mats[choice.value];
    heatmap(canvas, T, T, (t, j) => (j <= t ? m[t * T + j] : null), {
      title: `layer ${L.layer}: ${choice.options[choice.selectedIndex].text}`, rowLabel: (t) => r.labels[t], colLabel: (j) => r.labels[j],
      rowName: (t) => `t=${t} ${r.labels[t]}`, colName: (j) => `j=${j} ${r.labels[j]}`, valueName: what,
    });
  };
  choice.onchange = draw; draw();
  // The arrows, as explain's JSON lists them.
  const tb = el("table", { id: `arrows-${L.layer}` });
  tb.append(el("tr", {}, el("th", { text: "t" }), el("th", { text: "token" }), el("th", { text: "most influential predecessor" }), el("th", { text: what })));
  for (const a of L.arrows) {
    if (a.predecessor === null) continue;
    tb.append(el("tr", { "data-t": a.t }, el("td", { class: "num", text: a.t }), el("td", { text: a.token }),
      el("td", { class: "pred", text: `${a.predecessor} ${a.predecessor_token}` }), el("td", { class: "num weight", text: String(a.predecessor_weight) })));
  }
  box.append(el("div", { class: "tablebox" }, tb));
}

function renderIsan(box, r) {
  const I = r.isan, W = I.kappa_next.length;
  box.append(el("h2", { text: "ISAN: contributions κ_s^t to the logit of the next symbol" }));
  box.append(el("p", { class: "hint", text: `Rows: position t (the last ${W} of the text); columns: the symbol s ≤ t whose contribution it is; the colour: κ_s^t on the logit of the symbol that actually follows t (red raises it, blue lowers it).` }));
  const canvas = el("canvas", {}); box.append(el("div", { class: "scroll" }, canvas));
  const lab = (i) => r.labels[I.window_start + i];
  heatmap(canvas, W, W, (t, s) => {
    const k = I.kappa_next[t];
    return k.contributions && s <= t ? k.contributions[s] : null;
  }, {
    diverging: true, title: "κ_s^t[next symbol]", rowLabel: (t) => `${lab(t)}→${I.kappa_next[t].next ?? ""}`, colLabel: lab,
    rowName: (t) => `t=${I.window_start + t} ${lab(t)}, next ${I.kappa_next[t].next}`, colName: (s) => `s=${I.window_start + s} ${lab(s)}`, valueName: "κ",
  });
  const sec = el("div", {}); sec.innerHTML = I.html; box.append(sec);
}

// ---- search ---------------------------------------------------------------------------------
async function search() {
  showError("search-error", "");
  if (!state.span) return showError("search-error", "Select a span first: in the Text view, click a token, then another.");
  const units = $("search-units").value.split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  const req = { text: state.text, start: state.span.start, end: state.span.end, layer: state.last.states.length - 1, top: +$("search-top").value || 10 };
  if (units.length) req.units = units; else req.threshold = +$("search-threshold").value;
  $("search-results").textContent = "searching…";
  try {
    const r = await api("/api/search", req);
    const box = $("search-results");
    box.replaceChildren(el("p", { class: "hint", text: `${r.matches.length} matches of “${r.span.join(" ")}” on ${r.units.length} units of layer ${r.layer} (${r.units.slice(0, 20).join(", ")}${r.units.length > 20 ? ", …" : ""}) in ${r.corpus_tokens} corpus tokens, ${r.milliseconds.toFixed(1)} ms` }));
    const sep = state.last.word_level ? " " : "";
    r.matches.forEach((m) => box.append(el("div", { class: "match", "data-start": m.start },
      el("span", { class: "dist", text: m.distance.toFixed(4) }), m.before.join(sep) + sep,
      el("span", { class: "span", text: m.span.join(sep) }), sep + m.after.join(sep), el("span", { class: "hint", text: `  @${m.start}` }))));
  } catch (e) { $("search-results").textContent = ""; showError("search-error", e.message); }
}

// ---- κ map ----------------------------------------------------------------------------------
async function loadMap() {
  if ($("map").dataset.done) return;
  showError("map-error", "");
  $("map").textContent = "computing the map (seconds)…";
  try {
    const r = await api("/api/kappa-map");
    $("map").dataset.done = "1";
    drawMap(r);
  } catch (e) { $("map").textContent = ""; showError("map-error", e.message); }
}

function drawMap(r) {
  const ns = "http://www.w3.org/2000/svg";
  const W = 800, H = 800;
  const xs = r.words.map((w) => w.x), ys = r.words.map((w) => w.y);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const pad = 0.05 * Math.max(x1 - x0, y1 - y0, 1e-9);
  // A square view, so that both axes keep the map's distances and labels their size.
  const side = Math.max(x1 - x0, y1 - y0) + 2 * pad;
  let vb = [(x0 + x1 - side) / 2, (y0 + y1 - side) / 2, side, side];
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const setVb = () => svg.setAttribute("viewBox", vb.join(" "));
  setVb();
  const cmax = Math.max(...r.words.map((w) => w.count));
  const g = document.createElementNS(ns, "g");
  r.words.forEach((w, i) => {
    const c = document.createElementNS(ns, "circle");
    c.setAttribute("cx", w.x); c.setAttribute("cy", w.y);
    c.setAttribute("r", (0.004 + 0.006 * Math.sqrt(w.count / cmax)) * vb[2]);
    c.setAttribute("fill", "#2c7fb8"); c.setAttribute("fill-opacity", "0.6");
    c.onmousemove = (ev) => tip(ev, `${w.word} (seen ${w.count} times)`);
    c.onmouseleave = (ev) => tip(ev, null);
    g.append(c);
    if (i < 40) { // the most frequent words are labelled; the others on hover
      const t = document.createElementNS(ns, "text");
      t.setAttribute("x", w.x); t.setAttribute("y", w.y); t.setAttribute("font-size", 0.018 * vb[2]);
      t.textContent = w.word; t.setAttribute("pointer-events", "none"); g.append(t);
    }
  });
  svg.append(g);
  svg.onwheel = (ev) => {
    ev.preventDefault();
    const b = svg.getBoundingClientRect(), k = ev.deltaY > 0 ? 1.2 : 1 / 1.2;
    const px = vb[0] + (ev.clientX - b.left) / W * vb[2], py = vb[1] + (ev.clientY - b.top) / H * vb[3];
    vb = [px - (px - vb[0]) * k, py - (py - vb[1]) * k, vb[2] * k, vb[3] * k]; setVb();
  };
  let drag = null;
  svg.onmousedown = (ev) => { drag = [ev.clientX, ev.clientY, vb[0], vb[1]]; };
  window.addEventListener("mouseup", () => { drag = null; });
  svg.onmousemove = (ev) => {
    if (!drag) return;
    vb[0] = drag[2] - (ev.clientX - drag[0]) / W * vb[2]; vb[1] = drag[3] - (ev.clientY - drag[1]) / H * vb[3]; setVb();
  };
  $("map").replaceChildren(el("p", { class: "hint", text: `${r.words.length} words of the corpus's first ${r.tokens} tokens, t-SNE perplexity ${r.perplexity}.` }), svg);
}

// ---- runs -----------------------------------------------------------------------------------
async function loadRuns(select) {
  showError("runs-error", "");
  try {
    const q = select && select.length ? "?select=" + encodeURIComponent(select.join(",")) : "";
    const r = await api("/api/runs" + q);
    if (!select) {
      const list = $("runs-list");
      list.replaceChildren(el("p", { class: "hint", text: `${r.runs.length} runs under ${r.folder}` }));
      const tb = el("table", {});
      tb.append(el("tr", {}, el("th", { text: "" }), el("th", { text: "run" }), el("th", { text: "cell" }), el("th", { text: "steps" }), el("th", { text: "last validation" })));
      r.runs.forEach((run, i) => {
        const v = run.valid ? (run.valid.perplexity ? `perplexity ${fmt(run.valid.perplexity)}` : `${fmt(run.valid.bpc)} BPC`) : (run.error || "");
        const box = el("input", { type: "checkbox", value: run.name });
        if (i < 4) box.checked = true;
        tb.append(el("tr", {}, el("td", {}, box), el("td", { text: run.name }), el("td", { text: run.cell || "" }), el("td", { class: "num", text: run.steps ?? "" }), el("td", { text: v })));
      });
      list.append(tb);
    }
    $("runs-svg").innerHTML = r.svg || "";
    $("runs-table").textContent = r.table || "";
  } catch (e) { showError("runs-error", e.message); }
}

// ---- views ----------------------------------------------------------------------------------
function show(view) {
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("on", b.dataset.view === view);
  for (const v of ["text", "search", "map", "runs"]) $("view-" + v).hidden = v !== view;
  if (view === "map") loadMap();
  if (view === "runs" && !$("runs-list").childElementCount) loadRuns(null);
}

window.addEventListener("DOMContentLoaded", () => {
  for (const b of document.querySelectorAll("nav button")) b.onclick = () => show(b.dataset.view);
  $("read").onclick = read;
  $("input").oninput = () => { clearTimeout(state.timer); state.timer = setTimeout(read, 600); };
  $("search-go").onclick = search;
  $("runs-go").onclick = () => loadRuns([...document.querySelectorAll("#runs-list input:checked")].map((b) => b.value));
  loadModel();
});
