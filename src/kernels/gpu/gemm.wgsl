// C = op(A) · op(B) (+ C when accumulating) (+ one or two bias rows from W), f32 accumulation.
// Two kernels, chosen by shape on the host (`gemm_tile` in mod.rs), each in f32 or with its
// operands rounded to f16 (`operand` below):
// - `gemm`: a 64 x 64 tile of C per 256-thread workgroup, 4 x 4 per thread in four vec4
//   registers; K in slices of 16 through workgroup memory, A's slice k-major so that a thread
//   reads its four rows as one vec4; K may be split over workgroups (below).
// - `gemm128`: a 128 x 128 tile per 256-thread workgroup, 8 x 8 per thread in sixteen vec4
//   registers (four times the products per value read from workgroup memory), K in slices of 8
//   through two buffers of workgroup memory (16 KiB, WebGPU's guaranteed minimum): a thread
//   fetches the next slice from memory into registers while the workgroup multiplies the
//   current one, so one barrier a slice suffices. For products of many output tiles.
// No array is indexed by a loop variable in an inner loop: a GPU compiler that does not
// unroll such a loop would put the array in local memory (the first version did, and reached
// 0.3 TFLOP/s on an H200; docs/gpu.md). SRC_A, SRC_B, DST_C are replaced by W, G or A.
// Parameters: 0 m, 1 n, 2 k, 3 a offset, 4 lda, 5 b offset, 6 ldb, 7 c offset, 8 ldc,
// 9 flags (1: A is stored transposed [k, m]; 2: B is stored transposed [n, k]; 4: accumulate;
// 8: add the bias row at 10; 16: add the bias row at 11; 32: split K), 10, 11: bias offsets in
// W, 12: K per split (workgroup z takes slice z), 13: the splits' partial products (in A).
// Split K serves products with few output tiles and a long K (a recurrent step's backward:
// 64 x 512 outputs, K = 2048, eight tiles on a 132-processor GPU): each split writes its partial
// product, and `reduce` sums them in order (deterministic) and finishes as the plain kernel does.
// The module is compiled without wgpu's added bounds checks (`Gpu::trusted_pipeline`): every
// read and write below is guarded by the product's own sizes (r < m, c < n, kk < k), and the
// host checks before the first run that each recorded product's operands, output, bias rows and
// partial products lie inside their buffers (`Program::run`); workgroup arrays are indexed by
// the thread's index (< 256) and constants only; every loop ends (K < 2^31, host-checked).
// this workgroup's split of K
var<private> split_z: u32;
var<workgroup> As: array<vec4<f32>, 256>; // [16 k][64 rows] as 16 vec4 per k
var<workgroup> Bs: array<vec4<f32>, 256>; // [16 k][64 cols]

// An operand as the product reads it: as stored (f32), or, for `--precision f16`, rounded to
// f16 (OPERAND is replaced by `x` or `to_f16(x)` on the host: `Program::half`). An f16 times an
// f16 is exact in f32, so with f32 accumulation this computes what a tensor core's f16 product
// with f32 accumulation does, up to the order of the sums.
fn operand(x: f32) -> f32 { return OPERAND; }

// x rounded to the nearest f16, as f32. pack2x16float leaves values beyond f16's range
// undefined: there f16 overflows to ±inf (and NaN stays NaN), which the loss scaling then sees.
fn to_f16(x: f32) -> f32 {
    if (!(abs(x) <= 65504.0)) { return x * 1.0e38 * 1.0e38; }
    return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;
}

fn load_a(ta: bool, r: u32, kk: u32, m: u32, ke: u32, ao: u32, lda: u32) -> f32 {
    if (r >= m || kk >= ke) { return 0.0; }
    if (ta) { return operand(SRC_A[ao + kk * lda + r]); }
    return operand(SRC_A[ao + r * lda + kk]);
}

fn load_b(tb: bool, kk: u32, c: u32, n: u32, ke: u32, bo: u32, ldb: u32) -> f32 {
    if (c >= n || kk >= ke) { return 0.0; }
    if (tb) { return operand(SRC_B[bo + c * ldb + kk]); }
    return operand(SRC_B[bo + kk * ldb + c]);
}

fn store(r: u32, c: u32, v: f32, flags: u32, co: u32, ldc: u32) {
    if ((flags & 32u) != 0u) {
        // a split's partial product
        A[pu(13u) + (split_z * pu(0u) + r) * pu(1u) + c] = v;
        return;
    }
    var x = v;
    if ((flags & 8u) != 0u) { x += W[pu(10u) + c]; }
    if ((flags & 16u) != 0u) { x += W[pu(11u) + c]; }
    let at = co + r * ldc + c;
    if ((flags & 4u) != 0u) { x += DST_C[at]; }
    DST_C[at] = x;
}

@compute @workgroup_size(256)
fn gemm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let m = pu(0u); let n = pu(1u);
    var kb = 0u; var k = pu(2u);
    if ((pu(9u) & 32u) != 0u) { kb = wg.z * pu(12u); k = min(k, kb + pu(12u)); }
    let ao = pu(3u); let lda = pu(4u); let bo = pu(5u); let ldb = pu(6u);
    let co = pu(7u); let ldc = pu(8u); let flags = pu(9u);
    let ta = (flags & 1u) != 0u; let tb = (flags & 2u) != 0u;
    let row0 = wg.y * 64u; let col0 = wg.x * 64u;
    let tx = tid % 16u; let ty = tid / 16u;
    var c0 = vec4<f32>(0.0); var c1 = vec4<f32>(0.0); var c2 = vec4<f32>(0.0); var c3 = vec4<f32>(0.0);
    for (var k0 = kb; k0 < k; k0 += 16u) {
        // A's slice: 64 rows x 16 k, four elements a thread.
        if (ta) {
            // stored [k, m]: a thread reads four consecutive rows of one k
            let kk = tid / 16u; let r = (tid % 16u) * 4u;
            As[kk * 16u + tid % 16u] = vec4<f32>(
                load_a(true, row0 + r, k0 + kk, m, k, ao, lda), load_a(true, row0 + r + 1u, k0 + kk, m, k, ao, lda),
                load_a(true, row0 + r + 2u, k0 + kk, m, k, ao, lda), load_a(true, row0 + r + 3u, k0 + kk, m, k, ao, lda));
        } else {
            // stored [m, k]: a thread reads four consecutive k of one row
            let r = tid / 4u; let q = (tid % 4u) * 4u;
            let v = vec4<f32>(
                load_a(false, row0 + r, k0 + q, m, k, ao, lda), load_a(false, row0 + r, k0 + q + 1u, m, k, ao, lda),
                load_a(false, row0 + r, k0 + q + 2u, m, k, ao, lda), load_a(false, row0 + r, k0 + q + 3u, m, k, ao, lda));
            As[q * 16u + r / 4u][r % 4u] = v.x;
            As[(q + 1u) * 16u + r / 4u][r % 4u] = v.y;
            As[(q + 2u) * 16u + r / 4u][r % 4u] = v.z;
            As[(q + 3u) * 16u + r / 4u][r % 4u] = v.w;
        }
        // B's slice: 16 k x 64 columns.
        if (tb) {
            let c = tid / 4u; let q = (tid % 4u) * 4u;
            let v = vec4<f32>(
                load_b(true, k0 + q, col0 + c, n, k, bo, ldb), load_b(true, k0 + q + 1u, col0 + c, n, k, bo, ldb),
                load_b(true, k0 + q + 2u, col0 + c, n, k, bo, ldb), load_b(true, k0 + q + 3u, col0 + c, n, k, bo, ldb));
            Bs[q * 16u + c / 4u][c % 4u] = v.x;
            Bs[(q + 1u) * 16u + c / 4u][c % 4u] = v.y;
            Bs[(q + 2u) * 16u + c / 4u][c % 4u] = v.z;
            Bs[(q + 3u) * 16u + c / 4u][c % 4u] = v.w;
        } else {
            let kk = tid / 16u; let c = (tid % 16u) * 4u;
            Bs[kk * 16u + tid % 16u] = vec4<f32>(
                load_b(false, k0 + kk, col0 + c, n, k, bo, ldb), load_b(false, k0 + kk, col0 + c + 1u, n, k, bo, ldb),
                load_b(false, k0 + kk, col0 + c + 2u, n, k, bo, ldb), load_b(false, k0 + kk, col0 + c + 3u, n, k, bo, ldb));
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            let a = As[kk * 16u + ty];
            let b = Bs[kk * 16u + tx];
            c0 = fma(vec4<f32>(a.x), b, c0);
            c1 = fma(vec4<f32>(a.y), b, c1);
            c2 = fma(vec4<f32>(a.z), b, c2);
            c3 = fma(vec4<f32>(a.w), b, c3);
        }
        workgroupBarrier();
    }
    let r = row0 + ty * 4u; let c = col0 + tx * 4u;
    split_z = wg.z;
    var rows = array<vec4<f32>, 4>(c0, c1, c2, c3);
    for (var i = 0u; i < 4u; i++) {
        if (r + i >= m) { break; }
        let v = rows[i];
        if (c < n) { store(r + i, c, v.x, flags, co, ldc); }
        if (c + 1u < n) { store(r + i, c + 1u, v.y, flags, co, ldc); }
        if (c + 2u < n) { store(r + i, c + 2u, v.z, flags, co, ldc); }
        if (c + 3u < n) { store(r + i, c + 3u, v.w, flags, co, ldc); }
    }
}

// The sum of the splits' partial products, in split order, finished as `gemm` finishes a tile;
// one thread an output. Parameters as `gemm`'s, 12: the number of splits.
@compute @workgroup_size(256)
fn reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let m = pu(0u); let n = pu(1u);
    if (id >= m * n) { return; }
    var s = 0.0;
    for (var z = 0u; z < pu(12u); z++) { s += A[pu(13u) + z * m * n + id]; }
    store(id / n, id % n, s, pu(9u) & ~32u, pu(7u), pu(8u));
}

// ---- gemm128 ----
var<workgroup> Ab: array<vec4<f32>, 512>; // two buffers of [8 k][128 rows], 32 vec4 per k
var<workgroup> Bb: array<vec4<f32>, 512>; // two buffers of [8 k][128 cols]

// One thread's share of a K slice: four of A's elements and four of B's.
struct Slice { a: vec4<f32>, b: vec4<f32> }

fn fetch(ta: bool, tb: bool, k0: u32, row0: u32, col0: u32, tid: u32) -> Slice {
    let m = pu(0u); let n = pu(1u); let k = pu(2u);
    let ao = pu(3u); let lda = pu(4u); let bo = pu(5u); let ldb = pu(6u);
    var s: Slice;
    if (ta) {
        // [k, m]: four consecutive rows of one k
        let kk = k0 + tid / 32u; let r = row0 + (tid % 32u) * 4u;
        s.a = vec4<f32>(load_a(true, r, kk, m, k, ao, lda), load_a(true, r + 1u, kk, m, k, ao, lda),
            load_a(true, r + 2u, kk, m, k, ao, lda), load_a(true, r + 3u, kk, m, k, ao, lda));
    } else {
        // [m, k]: four consecutive k of one row
        let r = row0 + tid / 2u; let q = k0 + (tid % 2u) * 4u;
        s.a = vec4<f32>(load_a(false, r, q, m, k, ao, lda), load_a(false, r, q + 1u, m, k, ao, lda),
            load_a(false, r, q + 2u, m, k, ao, lda), load_a(false, r, q + 3u, m, k, ao, lda));
    }
    if (tb) {
        // [n, k]: four consecutive k of one column
        let c = col0 + tid / 2u; let q = k0 + (tid % 2u) * 4u;
        s.b = vec4<f32>(load_b(true, q, c, n, k, bo, ldb), load_b(true, q + 1u, c, n, k, bo, ldb),
            load_b(true, q + 2u, c, n, k, bo, ldb), load_b(true, q + 3u, c, n, k, bo, ldb));
    } else {
        // [k, n]: four consecutive columns of one k
        let kk = k0 + tid / 32u; let c = col0 + (tid % 32u) * 4u;
        s.b = vec4<f32>(load_b(false, kk, c, n, k, bo, ldb), load_b(false, kk, c + 1u, n, k, bo, ldb),
            load_b(false, kk, c + 2u, n, k, bo, ldb), load_b(false, kk, c + 3u, n, k, bo, ldb));
    }
    return s;
}

// Store a fetched slice into buffer `buf` (0 or 1), k-major.
fn put(s: Slice, buf: u32, ta: bool, tb: bool, tid: u32) {
    let base = buf * 256u;
    if (ta) {
        Ab[base + tid] = s.a;
    } else {
        let r = tid / 2u; let q = (tid % 2u) * 4u; let at = base + r / 4u; let j = r % 4u;
        Ab[at + q * 32u][j] = s.a.x;
        Ab[at + (q + 1u) * 32u][j] = s.a.y;
        Ab[at + (q + 2u) * 32u][j] = s.a.z;
        Ab[at + (q + 3u) * 32u][j] = s.a.w;
    }
    if (tb) {
        let c = tid / 2u; let q = (tid % 2u) * 4u; let at = base + c / 4u; let j = c % 4u;
        Bb[at + q * 32u][j] = s.b.x;
        Bb[at + (q + 1u) * 32u][j] = s.b.y;
        Bb[at + (q + 2u) * 32u][j] = s.b.z;
        Bb[at + (q + 3u) * 32u][j] = s.b.w;
    } else {
        Bb[base + tid] = s.b;
    }
}

// Four columns of one output row, those inside C.
fn store4(r: u32, c: u32, v: vec4<f32>, flags: u32, co: u32, ldc: u32) {
    let m = pu(0u); let n = pu(1u);
    if (r >= m) { return; }
    if (c < n) { store(r, c, v.x, flags, co, ldc); }
    if (c + 1u < n) { store(r, c + 1u, v.y, flags, co, ldc); }
    if (c + 2u < n) { store(r, c + 2u, v.z, flags, co, ldc); }
    if (c + 3u < n) { store(r, c + 3u, v.w, flags, co, ldc); }
}

// A thread owns rows ty*4 .. +3 and 64 + ty*4 .. +3 of the tile, and columns tx*4 .. +3 and
// 64 + tx*4 .. +3: two vec4 of A and two of B a k, read as whole vec4 from workgroup memory.
// The accumulators are named: c<row><half>, rows 0-3 from a0, 4-7 from a1; halves from b0, b1.
@compute @workgroup_size(256)
fn gemm128(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let k = pu(2u); let flags = pu(9u);
    let ta = (flags & 1u) != 0u; let tb = (flags & 2u) != 0u;
    let row0 = wg.y * 128u; let col0 = wg.x * 128u;
    let tx = tid % 16u; let ty = tid / 16u;
    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0); var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0); var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0); var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0); var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);
    var s = fetch(ta, tb, 0u, row0, col0, tid);
    put(s, 0u, ta, tb, tid);
    workgroupBarrier();
    var buf = 0u;
    for (var k0 = 0u; k0 < k; k0 += 8u) {
        let more = k0 + 8u < k;
        if (more) { s = fetch(ta, tb, k0 + 8u, row0, col0, tid); }
        let base = buf * 256u;
        for (var kk = 0u; kk < 8u; kk++) {
            let a0 = Ab[base + kk * 32u + ty]; let a1 = Ab[base + kk * 32u + 16u + ty];
            let b0 = Bb[base + kk * 32u + tx]; let b1 = Bb[base + kk * 32u + 16u + tx];
            c00 = fma(vec4<f32>(a0.x), b0, c00); c01 = fma(vec4<f32>(a0.x), b1, c01);
            c10 = fma(vec4<f32>(a0.y), b0, c10); c11 = fma(vec4<f32>(a0.y), b1, c11);
            c20 = fma(vec4<f32>(a0.z), b0, c20); c21 = fma(vec4<f32>(a0.z), b1, c21);
            c30 = fma(vec4<f32>(a0.w), b0, c30); c31 = fma(vec4<f32>(a0.w), b1, c31);
            c40 = fma(vec4<f32>(a1.x), b0, c40); c41 = fma(vec4<f32>(a1.x), b1, c41);
            c50 = fma(vec4<f32>(a1.y), b0, c50); c51 = fma(vec4<f32>(a1.y), b1, c51);
            c60 = fma(vec4<f32>(a1.z), b0, c60); c61 = fma(vec4<f32>(a1.z), b1, c61);
            c70 = fma(vec4<f32>(a1.w), b0, c70); c71 = fma(vec4<f32>(a1.w), b1, c71);
        }
        // The other buffer was last read in the slice before this one, which the barrier
        // that ended it closed; this slice's buffer is written again only after the next one.
        if (more) { put(s, 1u - buf, ta, tb, tid); }
        workgroupBarrier();
        buf = 1u - buf;
    }
    let co = pu(7u); let ldc = pu(8u);
    let r = row0 + ty * 4u; let r2 = r + 64u; let c = col0 + tx * 4u; let c2 = c + 64u;
    store4(r, c, c00, flags, co, ldc); store4(r, c2, c01, flags, co, ldc);
    store4(r + 1u, c, c10, flags, co, ldc); store4(r + 1u, c2, c11, flags, co, ldc);
    store4(r + 2u, c, c20, flags, co, ldc); store4(r + 2u, c2, c21, flags, co, ldc);
    store4(r + 3u, c, c30, flags, co, ldc); store4(r + 3u, c2, c31, flags, co, ldc);
    store4(r2, c, c40, flags, co, ldc); store4(r2, c2, c41, flags, co, ldc);
    store4(r2 + 1u, c, c50, flags, co, ldc); store4(r2 + 1u, c2, c51, flags, co, ldc);
    store4(r2 + 2u, c, c60, flags, co, ldc); store4(r2 + 2u, c2, c61, flags, co, ldc);
    store4(r2 + 3u, c, c70, flags, co, ldc); store4(r2 + 3u, c2, c71, flags, co, ldc);
}
