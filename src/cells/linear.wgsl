// The linear RNNs' pointwise kernels (cells/linear.rs has the equations; cells/gpu.rs the slots;
// plain_start.wgsl, appended, the first step's). xp[t] rows are h_t's pre-readout value: the
// symbol's bias b_x gathered into it (cells/gpu.rs, `gather`), then W h̃_{t-1} added by the
// recurrent GEMM; backward writes its gradient there (which W, b_x and the state share). The
// state is h [B, H]; the layer's own start is the learned h0. Option bit 1: readout g = tanh.

fn tanh_readout() -> bool { return (pu(9u) & 1u) != 0u; }

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(0u) * pu(1u)) { return; }
    let hv = A[pu(2u) + id];
    A[pu(4u) + id] = hv;
    if (tanh_readout()) { A[pu(5u) + id] = tanh_safe(hv); } else { A[pu(5u) + id] = hv; }
    A[pu(6u) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(0u) * pu(1u)) { return; }
    var dy = A[pu(7u) + id];
    if (tanh_readout()) { let y = tanh_safe(A[pu(4u) + id]); dy *= 1.0 - y * y; }
    // ∂L/∂h_t: through the readout, the next step's GEMM, and (last step only) the final state.
    A[pu(2u) + id] = dy + A[pu(6u) + id] * rec_mask(id) + A[pu(8u) + id];
    A[pu(8u) + id] = 0.0;
}

// Every row of st[0] becomes the learned h0 (slot 18 the layer's parameters, 19 h0's offset).
@compute @workgroup_size(256)
fn fresh(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(1u);
    if (id >= pu(0u) * h) { return; }
    A[pu(3u) + id] = W[pu(18u) + pu(19u) + id % h];
}

// Where the window started from h0 (the flag at slot 17), h0 gains ∂L/∂st[0]'s rows in order.
@compute @workgroup_size(256)
fn s0_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let h = pu(1u);
    if (id >= h || A[pu(17u)] == 0.0) { return; }
    var t = G[pu(18u) + pu(19u) + id];
    for (var b = 0u; b < pu(0u); b++) { t += A[pu(8u) + b * h + id]; }
    G[pu(18u) + pu(19u) + id] = t;
}
