// Shared by every cell's kernels (cells/gpu.rs prepends it, after the slots' constants P_*
// that it declares from its `slots!` table: the one list of what each slot holds).

// A cell's recurrent-dropout mask ([B, R]; 1 without dropout).
fn rec_mask(i: u32) -> f32 {
    if (pu(P_MASKED) == 0u) { return 1.0; }
    return A[pu(P_MASK) + i];
}

// The split-K reduction of the product this kernel reads first, done by the threads that read
// it instead of a dispatch of its own (`Program::gemm_folded`; FOLD_SPLITS is 0 when the product
// came whole): thread (b, j) finishes columns j, j + stride, ... of the product's row b, the
// columns it reads itself, so no other thread waits on them. As gemm.wgsl's `reduce` finishes an
// element, in the same order: the partial products summed in split order, then the bias rows,
// then (accumulating) the output's value; the same bits.
fn fold_split(b: u32, j: u32, stride: u32) {
    let splits = pu(P_FOLD_SPLITS);
    if (splits == 0u) { return; }
    let m = pu(P_B); let n = pu(P_FOLD_N); let flags = pu(P_FOLD_FLAGS);
    for (var c = j; c < n; c += stride) {
        var s = 0.0;
        for (var z = 0u; z < splits; z++) { s += A[pu(P_FOLD_AT) + (z * m + b) * n + c]; }
        if ((flags & 8u) != 0u) { s += W[pu(P_FOLD_BIAS0) + c]; }
        if ((flags & 16u) != 0u) { s += W[pu(P_FOLD_BIAS1) + c]; }
        let at = pu(P_FOLD_C) + b * pu(P_FOLD_LDC) + c;
        if ((flags & 4u) != 0u) { s += A[at]; }
        A[at] = s;
    }
}
