// The RDA's and RWA's pointwise kernels in the stable form of cells/rda.rs (its doc comment has
// the equations and the form; cells/gpu.rs the slots). xp[t] rows are the pre-activations
// [u | p_g | p_a | p_γ] (p_γ with the discount only), left as they are by forward and replaced
// by their gradients in backward; act[t] rows (slot 16) are the tape [tanh g | λ' | 1−γ | σ | o]
// (rda.rs's CPU tape is σ alone, its backward computing the rest again; `gpu_cell` gives this
// width): only the blocks backward reads, side by side: λ' for attention
// other than exp, 1−γ with the discount, o with f_o = tanh; σ = −α when m_t = λ_t (then β = 1)
// else β (then α = 1), its sign bit set through bitcast so that a zero keeps it. The state is
// four [B, H] blocks [n' | d' | m | h]. Option bits: 1-2 the attention (0 exp, 1 sigmoid,
// 2 relu, 3 softplus), 4 f_h = tanh, 8 f_o = tanh, 16 the discount.

fn att() -> u32 { return pu(P_OPTS) & 3u; }
fn fh(x: f32) -> f32 { if ((pu(P_OPTS) & 4u) != 0u) { return tanh_safe(x); } return x; }
fn dfh(y: f32) -> f32 { if ((pu(P_OPTS) & 4u) != 0u) { return 1.0 - y * y; } return 1.0; }
fn fo_tanh() -> bool { return (pu(P_OPTS) & 8u) != 0u; }
fn fo(x: f32) -> f32 { if (fo_tanh()) { return tanh_safe(x); } return x; }
fn dfo(y: f32) -> f32 { if (fo_tanh()) { return 1.0 - y * y; } return 1.0; }
fn disc() -> bool { return (pu(P_OPTS) & 16u) != 0u; }
// The tape's blocks, in units of H: tanh g at 0, then λ' (not for exp), 1−γ, σ, o.
fn t_omg() -> u32 { return select(1u, 2u, att() != 0u); }
fn t_sg() -> u32 { return t_omg() + select(0u, 1u, disc()); }
fn t_width() -> u32 { return t_sg() + select(1u, 2u, fo_tanh()); }

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h; let bh = nb * h;
    let p = pu(P_XP) + b * pu(P_XP_WIDTH); let a = pu(P_ACT) + b * t_width() * h;
    let sp = pu(P_S_PREV); let sn = pu(P_S_NEXT);
    let u = A[p + j];
    let pg = A[p + h + j];
    let eg = exp(-2.0 * abs(pg));
    let tg = sign(pg) * (1.0 - eg) / (1.0 + eg);
    let z = u * tg;
    // The log-attention λ and dλ/dp_a; a relu at or below zero adds nothing.
    let pa = A[p + 2u * h + j];
    var contrib = true; var lam = pa; var lp = 1.0;
    let kind = att();
    if (kind == 1u) {
        let ea = exp(-abs(pa));
        let inv = 1.0 / (1.0 + ea);
        lam = min(pa, 0.0) - log(1.0 + ea);
        lp = select(inv, ea * inv, pa >= 0.0);
    } else if (kind == 2u) {
        if (pa > 0.0) { lam = log(pa); lp = 1.0 / pa; } else { contrib = false; lam = 0.0; lp = 0.0; }
    } else if (kind == 3u) {
        let ea = exp(-abs(pa));
        if (pa < -20.0) {
            let hf = 0.5 * ea;
            lam = pa - hf; lp = 1.0 - hf;
        } else {
            let sp_ = max(pa, 0.0) + log(1.0 + ea);
            let sg = select(ea / (1.0 + ea), 1.0 / (1.0 + ea), pa >= 0.0);
            lam = log(sp_); lp = sg / sp_;
        }
    }
    var lg = 0.0; var omg = 0.0;
    if (disc()) {
        let pgm = A[p + 3u * h + j];
        let eq = exp(-abs(pgm));
        let inv = 1.0 / (1.0 + eq);
        lg = min(pgm, 0.0) - log(1.0 + eq);
        omg = select(inv, eq * inv, pgm >= 0.0);
    }
    let np = A[sp + id]; let dp = A[sp + bh + id]; let mp = A[sp + 2u * bh + id];
    let c = mp + lg;
    let first = dp == 0.0;
    let lam_wins = first || lam >= c;
    let ex = exp(-abs(lam - c));
    var m = c; var al = 1.0; var be = 0.0; var ka = 0.0;
    if (contrib && lam_wins) { m = lam; al = select(ex, 0.0, first); be = 1.0; ka = 1.0; }
    if (contrib && !lam_wins) { m = c; al = 1.0; be = ex; ka = 0.0; }
    let nn = al * np + be * z;
    let dd = al * dp + be;
    var hv = A[sp + 3u * bh + id];
    if (dd != 0.0) { hv = fh(nn / dd); }
    let o = fo(hv);
    A[sn + id] = nn; A[sn + bh + id] = dd; A[sn + 2u * bh + id] = m; A[sn + 3u * bh + id] = hv;
    A[a + j] = tg;
    if (kind != 0u) { A[a + h + j] = lp; }
    if (disc()) { A[a + t_omg() * h + j] = omg; }
    A[a + t_sg() * h + j] = select(be, bitcast<f32>(bitcast<u32>(al) | 0x80000000u), ka == 1.0);
    if (fo_tanh()) { A[a + (t_sg() + 1u) * h + j] = o; }
    A[pu(P_Y) + id] = o;
    A[pu(P_RIN) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h; let bh = nb * h;
    let p = pu(P_XP) + b * pu(P_XP_WIDTH); let a = pu(P_ACT) + b * t_width() * h;
    let sp = pu(P_S_PREV); let sn = pu(P_S_NEXT); let ds = pu(P_DS);
    let tg = A[a + j];
    var lp = 1.0;
    if (att() != 0u) { lp = A[a + h + j]; }
    let sg = A[a + t_sg() * h + j];
    let ka = (bitcast<u32>(sg) & 0x80000000u) != 0u;
    var al = 1.0; var be = sg;
    if (ka) { al = abs(sg); be = 1.0; }
    var o = 0.0;
    if (fo_tanh()) { o = A[a + (t_sg() + 1u) * h + j]; }
    let u = A[p + j];
    let z = u * tg;
    // The total gradient of h_t: the carried state's, the next step's gates', the output's.
    let dh = A[ds + 3u * bh + id] + A[pu(P_DR) + id] * rec_mask(id) + A[pu(P_DY) + id] * dfo(o);
    let nn = A[sn + id]; let dd = A[sn + bh + id]; let hv = A[sn + 3u * bh + id];
    let silent = dd == 0.0;
    var inv = 0.0;
    if (!silent) { inv = 1.0 / dd; }
    let r = dh * dfh(hv) * inv;
    let dn = A[ds + id] + r;
    let ddd = A[ds + bh + id] - r * nn * inv;
    let dz = dn * be;
    let dal = (dn * A[sp + id] + ddd * A[sp + bh + id]) * al;
    let dbe = (dn * z + ddd) * be;
    let dm = A[ds + 2u * bh + id] - dal - dbe;
    var dc = dal; var dlam = dbe + dm;
    if (!ka) { dc = dal + dm; dlam = dbe; }
    A[ds + id] = dn * al;
    A[ds + bh + id] = ddd * al;
    A[ds + 2u * bh + id] = dc;
    A[ds + 3u * bh + id] = select(0.0, dh, silent);
    A[p + j] = dz * tg;
    A[p + h + j] = dz * u * (1.0 - tg * tg);
    A[p + 2u * h + j] = dlam * lp;
    if (disc()) { A[p + 3u * h + j] = dc * A[a + t_omg() * h + j]; }
}

// rin[0] = h_0, the h block of the initial state.
@compute @workgroup_size(256)
fn init_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let bh = pu(P_B) * pu(P_H);
    if (id >= bh) { return; }
    A[pu(P_RIN) + id] = A[pu(P_S_PREV) + 3u * bh + id] * rec_mask(id);
}

// h_0 also fed the first step's gates.
@compute @workgroup_size(256)
fn init_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let bh = pu(P_B) * pu(P_H);
    if (id >= bh) { return; }
    A[pu(P_DS) + 3u * bh + id] += A[pu(P_DR) + id] * rec_mask(id);
}

// The cell's own start on every row: n' = d' = m = 0 (written before), h = f_h(s0).
@compute @workgroup_size(256)
fn fresh(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(P_H); let bh = pu(P_B) * h;
    if (id >= bh) { return; }
    A[pu(P_S_PREV) + 3u * bh + id] = fh(W[pu(P_PARAMS) + pu(P_OWN_START) + id % h]);
}

// When the window started from the cell's own start (the flag at slot 17), s0's gradient: the
// sum over the rows of h_0's, in row order.
@compute @workgroup_size(256)
fn s0_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = flat_id(gid, nwg); let h = pu(P_H); let nb = pu(P_B);
    if (j >= h || A[pu(P_FRESH)] == 0.0) { return; }
    let at = pu(P_PARAMS) + pu(P_OWN_START) + j;
    let d = dfh(fh(W[at]));
    var s = 0.0;
    for (var b = 0u; b < nb; b++) { s += A[pu(P_DS) + 3u * nb * h + b * h + j]; }
    G[at] += s * d;
}
