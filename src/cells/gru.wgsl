// The GRU's pointwise kernels in PyTorch's form (cells/gru.rs has the equations; cells/gpu.rs
// the slots; plain_start.wgsl, appended, the first step's). xp[t] rows are [r | z | n] input parts (with bias_ih): forward writes the gates
// r, z and the candidate n over them, backward their pre-activations' gradients. The recurrent
// products (with bias_hh) have their own rows rp[t] (slot 15), [r | z | n] too, because the
// reset multiplies the candidate's alone: forward keeps W_hn h + b_hn there, backward writes
// the gradients of all three. The state is h [B, H]; the dropout mask applies where h enters
// the recurrent GEMM, not to the z ∘ h carry.
//
// Option bit 1: the papers' form, n = tanh(W_in x + b_in + W_hn (r ∘ h̃) + b_hn). Its xp[t]
// holds every bias; the first GEMM adds W_h{r,z} h̃ to the r, z columns, `gate` writes r, z and
// the second GEMM's input r ∘ h̃ (rp[t]), the second GEMM adds W_hn (r ∘ h̃) to the n columns,
// then `fwd`. Backward: `bwd` writes the z and n gradients, the second GEMM's backward puts
// ∂L/∂(r ∘ h̃) in act[t], `bwd_gate` writes r's gradient and dr's share through r ∘ h̃.

fn papers() -> bool { return (pu(P_OPTS) & 1u) != 0u; }

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h; let q = pu(P_RP) + b * 3u * h;
    if (papers()) {
        let z = A[a + h + j];
        let n = tanh_safe(A[a + 2u * h + j]);
        A[a + 2u * h + j] = n;
        let hv = (1.0 - z) * n + z * A[pu(P_S_PREV) + id];
        A[pu(P_S_NEXT) + id] = hv;
        A[pu(P_Y) + id] = hv;
        A[pu(P_RIN) + id] = hv * rec_mask(id);
        return;
    }
    let r = sigmoid(A[a + j] + A[q + j]);
    let z = sigmoid(A[a + h + j] + A[q + h + j]);
    let n = tanh_safe(A[a + 2u * h + j] + r * A[q + 2u * h + j]);
    A[a + j] = r; A[a + h + j] = z; A[a + 2u * h + j] = n;
    let hv = (1.0 - z) * n + z * A[pu(P_S_PREV) + id];
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
    let a = pu(P_XP) + b * 3u * h; let q = pu(P_RP) + b * 3u * h;
    // ∂L/∂h_t: from above, through the next step's GEMM, and through its z ∘ h carry (ds).
    let dh = A[pu(P_DY) + id] + A[pu(P_DR) + id] * rec_mask(id) + A[pu(P_DS) + id];
    if (papers()) {
        let z = A[a + h + j]; let n = A[a + 2u * h + j];
        A[a + h + j] = dh * (A[pu(P_S_PREV) + id] - n) * z * (1.0 - z);
        A[a + 2u * h + j] = dh * (1.0 - z) * (1.0 - n * n);
        A[pu(P_DS) + id] = dh * z;
        return;
    }
    let r = A[a + j]; let z = A[a + h + j]; let n = A[a + 2u * h + j];
    let rn = A[q + 2u * h + j];
    let hp = A[pu(P_S_PREV) + id];
    let dan = dh * (1.0 - z) * (1.0 - n * n);
    let dar = dan * rn * r * (1.0 - r);
    let daz = dh * (hp - n) * z * (1.0 - z);
    A[a + j] = dar; A[a + h + j] = daz; A[a + 2u * h + j] = dan;
    A[q + j] = dar; A[q + h + j] = daz; A[q + 2u * h + j] = dan * r;
    A[pu(P_DS) + id] = dh * z;
}

// The papers' form: the gates r and z over their pre-activations (the first GEMM has added their
// recurrent parts), and the second GEMM's input r ∘ h̃ in rp[t] (slot 15), h̃ = mask ∘ h_{t-1}.
@compute @workgroup_size(256)
fn gate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h;
    let r = sigmoid(A[a + j]);
    A[a + j] = r;
    A[a + h + j] = sigmoid(A[a + h + j]);
    A[pu(P_RP) + id] = r * A[pu(P_S_PREV) + id] * rec_mask(id);
}

// The papers' form, with ∂L/∂(r ∘ h̃) in act[t] (slot 16): r's pre-activation gradient, and the
// share of ∂L/∂h̃_{t-1} that goes through r ∘ h̃, written to dr (slot 6), which the first
// GEMM's backward then adds to.
@compute @workgroup_size(256)
fn bwd_gate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h;
    let d = A[pu(P_ACT) + id];
    let r = A[a + j];
    A[a + j] = d * A[pu(P_S_PREV) + id] * rec_mask(id) * r * (1.0 - r);
    A[pu(P_DR) + id] = d * r;
}
