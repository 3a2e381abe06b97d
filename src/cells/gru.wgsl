// The GRU's pointwise kernels in PyTorch's form (cells/gru.rs has the equations; cells/gpu.rs
// the slots; plain_start.wgsl, appended, the first step's). xp[t] rows are [r | z | n] input parts (with bias_ih): forward writes the gates
// r, z and the candidate n over them, backward their pre-activations' gradients. The recurrent
// products (with bias_hh) have their own rows rp[t] (slot 15), [r | z | n] too, because the
// reset multiplies the candidate's alone: forward keeps W_hn h + b_hn there, backward writes
// the gradients of all three. The state is h [B, H]; the dropout mask applies where h enters
// the recurrent GEMM, not to the z ∘ h carry.

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(0u); let h = pu(1u);
    if (id >= nb * h) { return; }
    let b = id / h; let j = id % h;
    let a = pu(2u) + b * 3u * h; let q = pu(15u) + b * 3u * h;
    let r = sigmoid(A[a + j] + A[q + j]);
    let z = sigmoid(A[a + h + j] + A[q + h + j]);
    let n = tanh_safe(A[a + 2u * h + j] + r * A[q + 2u * h + j]);
    A[a + j] = r; A[a + h + j] = z; A[a + 2u * h + j] = n;
    let hv = (1.0 - z) * n + z * A[pu(3u) + id];
    A[pu(4u) + id] = hv;
    A[pu(5u) + id] = hv;
    A[pu(6u) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(0u); let h = pu(1u);
    if (id >= nb * h) { return; }
    let b = id / h; let j = id % h;
    let a = pu(2u) + b * 3u * h; let q = pu(15u) + b * 3u * h;
    // ∂L/∂h_t: from above, through the next step's GEMM, and through its z ∘ h carry (ds).
    let dh = A[pu(7u) + id] + A[pu(6u) + id] * rec_mask(id) + A[pu(8u) + id];
    let r = A[a + j]; let z = A[a + h + j]; let n = A[a + 2u * h + j];
    let rn = A[q + 2u * h + j];
    let hp = A[pu(3u) + id];
    let dan = dh * (1.0 - z) * (1.0 - n * n);
    let dar = dan * rn * r * (1.0 - r);
    let daz = dh * (hp - n) * z * (1.0 - z);
    A[a + j] = dar; A[a + h + j] = daz; A[a + 2u * h + j] = dan;
    A[q + j] = dar; A[q + h + j] = daz; A[q + 2u * h + j] = dan * r;
    A[pu(8u) + id] = dh * z;
}
