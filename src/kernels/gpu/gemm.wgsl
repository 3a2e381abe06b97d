// C = op(A) · op(B) (+ C when accumulating) (+ one or two bias rows from W), f32 throughout.
// A tile of BM x BN outputs per 256-thread workgroup, TM x TN per thread, K in slices of BK
// through workgroup memory. The host makes one pipeline per (BM, BN) and per choice of the
// buffers A, B and C live in (SRC_A, SRC_B, DST_C are replaced by W, G or A).
// Parameters: 0 m, 1 n, 2 k, 3 a offset, 4 lda, 5 b offset, 6 ldb, 7 c offset, 8 ldc,
// 9 flags (1: A is stored transposed [k, m]; 2: B is stored transposed [n, k]; 4: accumulate;
// 8: add the bias row at 10; 16: add the bias row at 11), 10, 11: bias offsets in W.
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const TM: u32 = BM / 16u;
const TN: u32 = BN / 16u;
var<workgroup> As: array<f32, 1024>; // BK * BM at most
var<workgroup> Bs: array<f32, 1024>; // BK * BN at most

@compute @workgroup_size(256)
fn gemm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let m = pu(0u); let n = pu(1u); let k = pu(2u);
    let ao = pu(3u); let lda = pu(4u); let bo = pu(5u); let ldb = pu(6u);
    let co = pu(7u); let ldc = pu(8u); let flags = pu(9u);
    let ta = (flags & 1u) != 0u; let tb = (flags & 2u) != 0u;
    let row0 = wg.y * BM; let col0 = wg.x * BN;
    let tx = tid % 16u; let ty = tid / 16u;
    var acc: array<f32, 16>; // TM * TN at most
    for (var i = 0u; i < TM * TN; i++) { acc[i] = 0.0; }
    for (var k0 = 0u; k0 < k; k0 += BK) {
        for (var e = tid; e < BK * BM; e += 256u) {
            var kk: u32; var r: u32;
            if (ta) { kk = e / BM; r = e % BM; } else { r = e / BK; kk = e % BK; }
            let gr = row0 + r; let gk = k0 + kk;
            var v = 0.0;
            if (gr < m && gk < k) {
                if (ta) { v = SRC_A[ao + gk * lda + gr]; } else { v = SRC_A[ao + gr * lda + gk]; }
            }
            As[kk * BM + r] = v;
        }
        for (var e = tid; e < BK * BN; e += 256u) {
            var kk: u32; var c: u32;
            if (tb) { c = e / BK; kk = e % BK; } else { kk = e / BN; c = e % BN; }
            let gc = col0 + c; let gk = k0 + kk;
            var v = 0.0;
            if (gc < n && gk < k) {
                if (tb) { v = SRC_B[bo + gc * ldb + gk]; } else { v = SRC_B[bo + gk * ldb + gc]; }
            }
            Bs[kk * BN + c] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < TM; i++) { a[i] = As[kk * BM + ty + 16u * i]; }
            for (var j = 0u; j < TN; j++) { b[j] = Bs[kk * BN + tx + 16u * j]; }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) { acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]); }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < TM; i++) {
        let r = row0 + ty + 16u * i;
        if (r >= m) { continue; }
        for (var j = 0u; j < TN; j++) {
            let c = col0 + tx + 16u * j;
            if (c >= n) { continue; }
            var v = acc[i * TN + j];
            if ((flags & 8u) != 0u) { v += W[pu(10u) + c]; }
            if ((flags & 16u) != 0u) { v += W[pu(11u) + c]; }
            let at = co + r * ldc + c;
            if ((flags & 4u) != 0u) { v += DST_C[at]; }
            DST_C[at] = v;
        }
    }
}
