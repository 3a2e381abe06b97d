// The first step's recurrent input and its gradient for a cell whose recurrent input is the
// first [B, R] block of its state as it is (LSTM's y, the GRU's and the simple RNN's h),
// appended to those cells' kernels (cells/gpu.rs has the slots).

// rin[0] = mask ∘ the state's first block.
@compute @workgroup_size(256)
fn init_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_R)) { return; }
    A[pu(P_RIN) + id] = A[pu(P_S_PREV) + id] * rec_mask(id);
}

// What the first step's GEMM sent back reaches that block of the initial state's gradient.
@compute @workgroup_size(256)
fn init_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_R)) { return; }
    A[pu(P_DS) + id] += A[pu(P_DR) + id] * rec_mask(id);
}
