// `--precision f16` on tensor cores: C = op(A) · op(B) (+ C) (+ bias rows) with both operands
// rounded to f16 and the sums in f32, through cooperative matrices (wgpu's experimental
// `wgpu_cooperative_matrix`: VK_KHR_cooperative_matrix on NVIDIA, simdgroup matrices on Apple).
// Appended to gemm.wgsl (its `load_a`, `load_b` with OPERAND = to_f16, and `store`), after the
// two `enable`s that `Program::record_gemm` puts first; used only where the adapter lists a
// 16 x 16 x 16 configuration of f16 operands and f32 sums (`Gpu::coop_f16`).
//
// One workgroup of 32 threads (one subgroup on NVIDIA, where the matrices are the subgroup's)
// makes a 32 x 32 tile of C as four 16 x 16 accumulators; K in slices of 16: the slice of A
// (32 x 16) and of B (16 x 32) are read from memory as the other kernels read them (guarded,
// zero outside the product), rounded to f16 into workgroup memory, then each accumulator
// gains one product of two 16 x 16 fragments. At the end the accumulators go through workgroup
// memory to `store`, which adds the bias rows and C where asked, inside C only.
// As the module has no added bounds checks (`Gpu::trusted_pipeline`): the workgroup arrays are
// indexed by the thread's index (< 32) and constants, the fragments' pointers are constants
// inside them, and every read and write of a buffer is guarded in `load_a`, `load_b`, `store`.
// Never split along K (the fold and the reduction are the other kernels'). Checked only on a
// device with the feature (tests/gpu.rs, ignored elsewhere; scripts/gpu-device-check.sh).

var<workgroup> Ah: array<f16, 512>; // [32 rows][16 k]
var<workgroup> Bh: array<f16, 512>; // [16 k][32 cols]
var<workgroup> Cs: array<f32, 1024>; // [32 rows][32 cols]

@compute @workgroup_size(32)
fn gemm_coop(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let m = pu(0u); let n = pu(1u); let k = pu(2u);
    let ao = pu(3u); let lda = pu(4u); let bo = pu(5u); let ldb = pu(6u);
    let co = pu(7u); let ldc = pu(8u); let flags = pu(9u) & ~32u;
    let ta = (flags & 1u) != 0u; let tb = (flags & 2u) != 0u;
    let row0 = wg.y * 32u; let col0 = wg.x * 32u;
    var c00 = coop_mat16x16<f32, C>(); var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>(); var c11 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < k; k0 += 16u) {
        for (var i = 0u; i < 16u; i++) {
            // A stored [m, k]: consecutive threads read consecutive k of a row; [k, m]:
            // consecutive rows of one k
            let e = i * 32u + tid;
            var r = e / 16u; var kk = e % 16u;
            if (ta) { r = e % 32u; kk = e / 32u; }
            Ah[r * 16u + kk] = f16(load_a(ta, row0 + r, k0 + kk, m, k, ao, lda));
            // B stored [k, n]: consecutive columns of one k; [n, k]: consecutive k of a column
            var kb = e / 32u; var c = e % 32u;
            if (tb) { c = e / 16u; kb = e % 16u; }
            Bh[kb * 32u + c] = f16(load_b(tb, k0 + kb, col0 + c, n, k, bo, ldb));
        }
        workgroupBarrier();
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&Ah[0], 16u);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&Ah[256], 16u);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bh[0], 32u);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bh[16], 32u);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        workgroupBarrier();
    }
    coopStoreT(c00, &Cs[0], 32u);
    coopStoreT(c01, &Cs[16], 32u);
    coopStoreT(c10, &Cs[512], 32u);
    coopStoreT(c11, &Cs[528], 32u);
    workgroupBarrier();
    for (var i = 0u; i < 32u; i++) {
        let e = i * 32u + tid;
        let r = row0 + e / 32u; let c = col0 + e % 32u;
        if (r < m && c < n) { store(r, c, Cs[e], flags, co, ldc); }
    }
}
