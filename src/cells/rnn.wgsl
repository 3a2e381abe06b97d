// The simple RNN's pointwise kernels (cells/rnn.rs has the equations; cells/gpu.rs the slots;
// plain_start.wgsl, appended, the first step's).
// xp[t] holds the full pre-activation after the recurrent GEMM; forward writes h_t over it
// (backward takes φ' from h), backward its gradient. The state is h [B, H]. Option bit 1:
// φ = relu (else tanh).

fn phi(z: f32) -> f32 { if ((pu(P_OPTS) & 1u) != 0u) { return max(z, 0.0); } return tanh_safe(z); }
fn dphi(hv: f32) -> f32 {
    if ((pu(P_OPTS) & 1u) != 0u) { return select(0.0, 1.0, hv > 0.0); }
    return 1.0 - hv * hv;
}

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    fold_split(id / pu(P_H), id % pu(P_H), pu(P_H));
    let hv = phi(A[pu(P_XP) + id]);
    A[pu(P_XP) + id] = hv;
    A[pu(P_S_NEXT) + id] = hv;
    A[pu(P_Y) + id] = hv;
    A[pu(P_RIN) + id] = hv * rec_mask(id);
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    fold_split(id / pu(P_H), id % pu(P_H), pu(P_H));
    let dh = A[pu(P_DY) + id] + A[pu(P_DR) + id] * rec_mask(id) + A[pu(P_DS) + id];
    A[pu(P_DS) + id] = 0.0;
    A[pu(P_XP) + id] = dh * dphi(A[pu(P_XP) + id]);
}
