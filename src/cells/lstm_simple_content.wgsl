// The LSTM with the RAN's simplified content layer: pointwise kernels (cells/lstm_simple_content.rs
// has the equations; cells/gpu.rs the slots; plain_start.wgsl, appended, the first step's).
// xp[t] rows are [c~ | i | f | o]: c~ is the input's projection alone, the recurrent GEMM has
// added the gates' recurrent parts; forward leaves c~ and writes the gates over their
// pre-activations, backward the four gradients. The state is [h | c], two [B, H] blocks.

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 4u * h;
    let ct = A[a + j];
    let i = sigmoid(A[a + h + j]);
    let f = sigmoid(A[a + 2u * h + j]);
    let o = sigmoid(A[a + 3u * h + j]);
    A[a + h + j] = i; A[a + 2u * h + j] = f; A[a + 3u * h + j] = o;
    let c = i * ct + f * A[pu(P_S_PREV) + nb * h + id];
    let hv = o * tanh_safe(c);
    A[pu(P_S_NEXT) + nb * h + id] = c;
    A[pu(P_S_NEXT) + id] = hv;
    A[pu(P_Y) + id] = hv;
    A[pu(P_RIN) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 4u * h;
    let ds = pu(P_DS);
    // ∂L/∂h_t: from above, from the next step's GEMM, and (last step only) the final state's.
    let dh = A[pu(P_DY) + id] + A[pu(P_DR) + id] * rec_mask(id) + A[ds + id];
    A[ds + id] = 0.0;
    let ct = A[a + j]; let i = A[a + h + j]; let f = A[a + 2u * h + j]; let o = A[a + 3u * h + j];
    let tc = tanh_safe(A[pu(P_S_NEXT) + nb * h + id]);
    let cp = A[pu(P_S_PREV) + nb * h + id];
    let dc = A[ds + nb * h + id] + dh * o * (1.0 - tc * tc);
    A[a + j] = dc * i;
    A[a + h + j] = dc * ct * i * (1.0 - i);
    A[a + 2u * h + j] = dc * cp * f * (1.0 - f);
    A[a + 3u * h + j] = dh * tc * o * (1.0 - o);
    A[ds + nb * h + id] = dc * f;
}
