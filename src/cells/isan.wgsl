// The ISAN's recurrence switched by the input symbol (cells/isan.rs has the equations;
// cells/gpu.rs, `switched`, the slots). Appended to linear.wgsl, whose pointwise kernels it
// shares (h_t = its pre-readout value, identity readout; the learned h0): here each row's step
// product uses its symbol's matrix W_x[k] ([K, H, H] at the start of the layer's parameters,
// slot 18), so it is a kernel rather than one GEMM.

// xp[t] (slot 2) += W_x[x_t] rin[t] (slot 6), x_t the row's symbol (I, slot 15).
@compute @workgroup_size(256)
fn switch_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(P_H);
    if (id >= pu(P_B) * h) { return; }
    let b = id / h; let i = id % h;
    let w = pu(P_PARAMS) + I[pu(P_SYMBOLS) + b] * h * h + i * h;
    let r = pu(P_RIN) + b * h;
    var s = 0.0;
    for (var j = 0u; j < h; j++) { s += W[w + j] * A[r + j]; }
    A[pu(P_XP) + id] += s;
}

// dr (slot 6) = W_x[x_t]ᵀ ∂L/∂h_t (xp[t], slot 2): what reaches rin[t].
@compute @workgroup_size(256)
fn switch_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(P_H);
    if (id >= pu(P_B) * h) { return; }
    let b = id / h; let j = id % h;
    let w = pu(P_PARAMS) + I[pu(P_SYMBOLS) + b] * h * h + j;
    let d = pu(P_XP) + b * h;
    var s = 0.0;
    for (var i = 0u; i < h; i++) { s += W[w + i * h] * A[d + i]; }
    A[pu(P_DR) + id] = s;
}

// ∂L/∂W_x[k][i][j] += Σ over the positions p of symbol k, in order, of ∂L/∂h_p[i] · rin_p[j]
// (xp and rin over all T·B positions, slots 2 and 6; the symbols' ranges and sorted positions
// in I, slots 13 and 14; K, slot 15). One thread per element of W_x.
@compute @workgroup_size(256)
fn switch_dw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(P_H);
    if (id >= pu(P_SYM_COUNT) * h * h) { return; }
    let k = id / (h * h); let i = (id / h) % h; let j = id % h;
    var s = G[pu(P_PARAMS) + id];
    for (var q = I[pu(P_SYM_STARTS) + k]; q < I[pu(P_SYM_STARTS) + k + 1u]; q++) {
        let pos = I[pu(P_SYM_POSITIONS) + q];
        s += A[pu(P_XP) + pos * h + i] * A[pu(P_RIN) + pos * h + j];
    }
    G[pu(P_PARAMS) + id] = s;
}
