// The simple RNN's pointwise kernels (cells/rnn.rs has the equations; cells/gpu.rs the slots;
// plain_start.wgsl, appended, the first step's).
// xp[t] holds the full pre-activation after the recurrent GEMM; forward writes h_t over it
// (backward takes φ' from h), backward its gradient. The state is h [B, H]. Option bit 1:
// φ = relu (else tanh).

fn phi(z: f32) -> f32 { if ((pu(9u) & 1u) != 0u) { return max(z, 0.0); } return tanh_safe(z); }
fn dphi(hv: f32) -> f32 {
    if ((pu(9u) & 1u) != 0u) { return select(0.0, 1.0, hv > 0.0); }
    return 1.0 - hv * hv;
}

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(0u) * pu(1u)) { return; }
    let hv = phi(A[pu(2u) + id]);
    A[pu(2u) + id] = hv;
    A[pu(4u) + id] = hv;
    A[pu(5u) + id] = hv;
    A[pu(6u) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(0u) * pu(1u)) { return; }
    let dh = A[pu(7u) + id] + A[pu(6u) + id] * rec_mask(id) + A[pu(8u) + id];
    A[pu(8u) + id] = 0.0;
    A[pu(2u) + id] = dh * dphi(A[pu(2u) + id]);
}
