// The linear RNNs' pointwise kernels (cells/linear.rs has the equations; cells/gpu.rs the slots;
// plain_start.wgsl, appended, the first step's). xp[t] rows are h_t's pre-readout value: the
// symbol's bias b_x gathered into it (cells/gpu.rs, `gather`), then W h̃_{t-1} added by the
// recurrent GEMM; backward writes its gradient there (which W, b_x and the state share). The
// state is h [B, H]; the layer's own start is the learned h0. Option bit 1: readout g = tanh.

fn tanh_readout() -> bool { return (pu(P_OPTS) & 1u) != 0u; }

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    fold_split(id / pu(P_H), id % pu(P_H), pu(P_H));
    let hv = A[pu(P_XP) + id];
    A[pu(P_S_NEXT) + id] = hv;
    if (tanh_readout()) { A[pu(P_Y) + id] = tanh_safe(hv); } else { A[pu(P_Y) + id] = hv; }
    A[pu(P_RIN) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    fold_split(id / pu(P_H), id % pu(P_H), pu(P_H));
    var dy = A[pu(P_DY) + id];
    if (tanh_readout()) { let y = tanh_safe(A[pu(P_S_NEXT) + id]); dy *= 1.0 - y * y; }
    // ∂L/∂h_t: through the readout, the next step's GEMM, and (last step only) the final state.
    A[pu(P_XP) + id] = dy + A[pu(P_DR) + id] * rec_mask(id) + A[pu(P_DS) + id];
    A[pu(P_DS) + id] = 0.0;
}

// Every row of st[0] becomes the learned h0 (slot 18 the layer's parameters, 19 h0's offset).
@compute @workgroup_size(256)
fn fresh(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(P_H);
    if (id >= pu(P_B) * h) { return; }
    A[pu(P_S_PREV) + id] = W[pu(P_PARAMS) + pu(P_OWN_START) + id % h];
}

// Where the window started from h0 (the flag at slot 17), h0 gains ∂L/∂st[0]'s rows in order.
@compute @workgroup_size(256)
fn s0_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(P_H);
    if (id >= h || A[pu(P_FRESH)] == 0.0) { return; }
    var t = G[pu(P_PARAMS) + pu(P_OWN_START) + id];
    for (var b = 0u; b < pu(P_B); b++) { t += A[pu(P_DS) + b * h + id]; }
    G[pu(P_PARAMS) + pu(P_OWN_START) + id] = t;
}
