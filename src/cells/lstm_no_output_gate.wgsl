// The LSTM without its output gate: pointwise kernels (cells/lstm_no_output_gate.rs has the
// equations; cells/gpu.rs the slots). xp[t] rows are [c~ | i | f]: the recurrent GEMM has added
// all three recurrent parts; forward writes c~ = tanh(.), i and f over their pre-activations,
// backward the three gradients. The state is c [B, H]; the recurrent input is h = tanh(c).

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h;
    let ct = tanh_safe(A[a + j]);
    let i = sigmoid(A[a + h + j]);
    let f = sigmoid(A[a + 2u * h + j]);
    A[a + j] = ct; A[a + h + j] = i; A[a + 2u * h + j] = f;
    let c = i * ct + f * A[pu(P_S_PREV) + id];
    let hv = tanh_safe(c);
    A[pu(P_S_NEXT) + id] = c;
    A[pu(P_Y) + id] = hv;
    A[pu(P_RIN) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h;
    // ∂L/∂h_t: from above and through the next step's GEMM; then through h = tanh(c).
    let dh = A[pu(P_DY) + id] + A[pu(P_DR) + id] * rec_mask(id);
    let hv = tanh_safe(A[pu(P_S_NEXT) + id]);
    let dc = A[pu(P_DS) + id] + dh * (1.0 - hv * hv);
    let ct = A[a + j]; let i = A[a + h + j]; let f = A[a + 2u * h + j];
    let cp = A[pu(P_S_PREV) + id];
    A[a + j] = dc * i * (1.0 - ct * ct);
    A[a + h + j] = dc * ct * i * (1.0 - i);
    A[a + 2u * h + j] = dc * cp * f * (1.0 - f);
    A[pu(P_DS) + id] = dc * f;
}

// rin[0] = mask ∘ tanh(c_{-1}).
@compute @workgroup_size(256)
fn init_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    A[pu(P_RIN) + id] = tanh_safe(A[pu(P_S_PREV) + id]) * rec_mask(id);
}

// What the first step's GEMM sent back reaches c_{-1} through tanh.
@compute @workgroup_size(256)
fn init_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    let hv = tanh_safe(A[pu(P_S_PREV) + id]);
    A[pu(P_DS) + id] += A[pu(P_DR) + id] * rec_mask(id) * (1.0 - hv * hv);
}
