// The LSTM's pointwise kernels (cells/lstm.rs has the equations; cells/gpu.rs the slots;
// plain_start.wgsl, appended, the first step's).
// xp[t] rows are [i | f | g | o]: pre-activations in, gates out in forward, their gradients
// out in backward. The state is [y | c]: a [B, R] block, then a [B, H] block (R = H, or P).
// Option bit 1, a projection (cells/gpu.rs, ProjRec): fwd writes h_t to act[t] (slot 16) and
// leaves y, the state's y block and rin to proj_post after the GEMM y = W_proj h; bwd reads
// ∂L/∂h_t from slot 7, which proj_pre and a GEMM made.

fn projected() -> bool { return (pu(P_OPTS) & 1u) != 0u; }

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h; let r = pu(P_R);
    let a = pu(P_XP) + b * 4u * h;
    let i = sigmoid(A[a + j]);
    let f = sigmoid(A[a + h + j]);
    let g = tanh_safe(A[a + 2u * h + j]);
    let o = sigmoid(A[a + 3u * h + j]);
    A[a + j] = i; A[a + h + j] = f; A[a + 2u * h + j] = g; A[a + 3u * h + j] = o;
    let cp = A[pu(P_S_PREV) + nb * r + id];
    let c = f * cp + i * g;
    let hv = o * tanh_safe(c);
    A[pu(P_S_NEXT) + nb * r + id] = c;
    if (projected()) {
        A[pu(P_ACT) + id] = hv;
        return;
    }
    A[pu(P_S_NEXT) + b * r + j] = hv;
    A[pu(P_Y) + id] = hv;
    A[pu(P_RIN) + b * r + j] = hv * rec_mask(b * r + j);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h; let r = pu(P_R);
    let a = pu(P_XP) + b * 4u * h;
    let ds = pu(P_DS);
    // ∂L/∂h_t: from above, from the next step's GEMM, and (last step only) the final state's.
    var dh = A[pu(P_DY) + id];
    if (!projected()) {
        dh += A[pu(P_DR) + b * r + j] * rec_mask(b * r + j) + A[ds + b * r + j];
        A[ds + b * r + j] = 0.0;
    }
    let i = A[a + j]; let f = A[a + h + j]; let g = A[a + 2u * h + j]; let o = A[a + 3u * h + j];
    let tc = tanh_safe(A[pu(P_S_NEXT) + nb * r + id]);
    let cp = A[pu(P_S_PREV) + nb * r + id];
    let dc = A[ds + nb * r + id] + dh * o * (1.0 - tc * tc);
    A[a + j] = dc * g * i * (1.0 - i);
    A[a + h + j] = dc * cp * f * (1.0 - f);
    A[a + 2u * h + j] = dc * i * (1.0 - g * g);
    A[a + 3u * h + j] = dh * tc * o * (1.0 - o);
    A[ds + nb * r + id] = dc * f;
}

// With a projection, after y_t = W_proj h_t (slot 5, [B, P]): the state's y block and the next
// step's recurrent input. One thread per element of y_t.
@compute @workgroup_size(256)
fn proj_post(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_R)) { return; }
    let y = A[pu(P_Y) + id];
    A[pu(P_S_NEXT) + id] = y;
    A[pu(P_RIN) + id] = y * rec_mask(id);
}

// With a projection, before the step's backward: ∂L/∂y_t from above, through the next step's
// GEMM and (last step only) the final state's, kept in rp[t] (slot 15) for W_proj's gradient.
@compute @workgroup_size(256)
fn proj_pre(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_R)) { return; }
    let ds = pu(P_DS);
    A[pu(P_RP) + id] = A[pu(P_DY) + id] + A[pu(P_DR) + id] * rec_mask(id) + A[ds + id];
    A[ds + id] = 0.0;
}
