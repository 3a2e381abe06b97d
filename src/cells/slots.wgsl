// Shared by every cell's kernels (cells/gpu.rs prepends it, after the slots' constants P_*
// that it declares from its `slots!` table: the one list of what each slot holds).

// A cell's recurrent-dropout mask ([B, R]; 1 without dropout).
fn rec_mask(i: u32) -> f32 {
    if (pu(P_MASKED) == 0u) { return 1.0; }
    return A[pu(P_MASK) + i];
}
