"""Learning-curve figures for docs/paper.md, as plain SVG (no plotting library: the page's test
runs on a bare machine, and the same records must always give the same bytes).

`plot(...)` draws one figure: a line per run, the x axis linear from 0, the y axis either
logarithmic (whole decades) or linear; horizontal dashed lines (a threshold) and triangles on
the x axis (the paper's step counts) in the cells' colours.
"""

import math

COLORS = {
    "gru": "#1f77b4", "lstm": "#d62728", "rda-exp-tanh": "#2ca02c", "rda-sigmoid-id": "#9467bd", "rwa": "#ff7f0e",
    "isan": "#17becf", "rnn": "#8c564b", "irnn": "#e377c2", "linear": "#7f7f7f",
    "ran-tanh": "#000000", "ran-identity": "#bcbd22", "lstm-simple-content": "#ad494a", "lstm-no-output-gate": "#e7ba52",
    "isan-nobias": "#0e6f78", "linear-tanh": "#393b79",
}
W, H = 760, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 34, 46


def nice_step(span, ticks=6):
    """A round tick spacing (1, 2 or 5 times a power of ten) giving about `ticks` ticks."""
    raw = span / ticks
    p = 10 ** math.floor(math.log10(raw))
    return next(m * p for m in (1, 2, 5, 10) if m * p >= raw)


def fmt(v):
    """A tick label: 12000 -> 12k, 0.001 -> 1e-3, 2.5 -> 2.5."""
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    if abs(v) < 0.01:
        return f"1e{round(math.log10(v))}"
    return f"{v:g}"


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def smooth(points, k):
    """Running mean of y over `k` neighbouring points (fewer at the ends), the last point kept as
    it is: a run that stops at a threshold ends on the value that stopped it."""
    if k <= 1 or len(points) < 2:
        return points
    h = k // 2
    out = []
    for i, (x, _) in enumerate(points[:-1]):
        ys = [y for _, y in points[max(0, i - h):i + h + 1]]
        out.append((x, sum(ys) / len(ys)))
    return out + [points[-1]]


def plot(title, xlabel, ylabel, series, ylog, floor=None, hlines=(), marks=(), legend=()):
    """One figure as SVG text.

    series: (cell, [(x, y)], strong[, dashed]) a line each (`strong`: the row's main run, drawn
    opaque; `dashed`: a run beside the row's set-up);
    floor: the smallest y drawn on a log axis (lower values, exact zeros included, sit on it);
    hlines: (y, text) dashed lines across; marks: (cell, x) triangles on the x axis;
    legend: (cell, text) lines of the legend, in order."""
    pts = [(x, y) for _, p, *_ in series for x, y in p]
    xmax = max([x for x, _ in pts] + [x for _, x in marks] + [1])
    xstep = nice_step(xmax)
    xmax = math.ceil(xmax / xstep) * xstep
    if ylog:
        ys = [max(y, floor) for _, y in pts]
        lo = 10 ** math.floor(math.log10(min(ys + [y for y, _ in hlines])))
        hi = 10 ** math.ceil(math.log10(max(ys + [y for y, _ in hlines])))
        if hi <= lo:
            hi = lo * 10
        fy = lambda y: (math.log10(max(y, floor)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        yticks = [10 ** e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]
    else:
        ys = [y for _, y in pts] + [y for y, _ in hlines]
        ystep = nice_step(max(ys) - min(ys) or 1, 5)
        lo, hi = math.floor(min(ys) / ystep) * ystep, math.ceil(max(ys) / ystep) * ystep
        if hi <= lo:
            hi = lo + ystep
        fy = lambda y: (y - lo) / (hi - lo)
        n = round((hi - lo) / ystep)
        yticks = [lo + i * ystep for i in range(n + 1)]
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    X = lambda x: LEFT + pw * x / xmax
    Y = lambda y: TOP + ph * (1 - fy(y))
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{LEFT}" y="20" font-size="14">{esc(title)}</text>']
    for v in yticks:
        o.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#e4e4e4"/>')
        o.append(f'<text x="{LEFT - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    x = 0
    while x <= xmax + 1e-9:
        o.append(f'<line x1="{X(x):.1f}" x2="{X(x):.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="#f0f0f0"/>')
        o.append(f'<text x="{X(x):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{fmt(x)}</text>')
        x += xstep
    o.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    o.append(f'<text x="{LEFT + pw / 2:.1f}" y="{H - 8}" text-anchor="middle">{esc(xlabel)}</text>')
    o.append(f'<text transform="translate(16 {TOP + ph / 2:.1f}) rotate(-90)" text-anchor="middle">{esc(ylabel)}</text>')
    for y, text in hlines:
        o.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{Y(y):.1f}" y2="{Y(y):.1f}" stroke="#444" stroke-dasharray="6 4"/>')
        o.append(f'<text x="{LEFT + pw - 4}" y="{Y(y) - 5:.1f}" text-anchor="end" fill="#444">{esc(text)}</text>')
    for cell, p, strong, *dashed in sorted(series, key=lambda s: s[2]):
        if not p:
            continue
        d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in p)
        style = 'stroke-width="1.6"' if strong else 'stroke-width="1" stroke-opacity="0.45"'
        if dashed and dashed[0]:
            style = 'stroke-width="1.3" stroke-dasharray="5 3"'
        o.append(f'<polyline fill="none" stroke="{COLORS[cell]}" {style} points="{d}"/>')
    for cell, x in marks:
        px, py = X(x), TOP + ph
        o.append(f'<path d="M{px:.1f},{py - 9:.1f} L{px - 5:.1f},{py:.1f} L{px + 5:.1f},{py:.1f} Z" fill="{COLORS[cell]}"/>')
    for i, (cell, text) in enumerate(legend):
        ly = TOP + 10 + 18 * i
        o.append(f'<line x1="{LEFT + pw + 14}" x2="{LEFT + pw + 34}" y1="{ly}" y2="{ly}" stroke="{COLORS[cell]}" stroke-width="2.5"/>')
        o.append(f'<text x="{LEFT + pw + 40}" y="{ly + 4}">{esc(text)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"
