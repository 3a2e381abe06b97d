// C = op(A) · op(B) (+ C when accumulating) (+ one or two bias rows from W), f32 throughout.
// A 64 x 64 tile of C per 256-thread workgroup, 4 x 4 per thread in four vec4 registers; K in
// slices of 16 through workgroup memory, A's slice k-major so that a thread reads its four rows
// as one vec4. No array is indexed by a loop variable in the inner loop: a GPU compiler that
// does not unroll such a loop would put the array in local memory (the first version did, and
// reached 0.3 TFLOP/s on an H200; docs/gpu.md). SRC_A, SRC_B, DST_C are replaced by W, G or A.
// Parameters: 0 m, 1 n, 2 k, 3 a offset, 4 lda, 5 b offset, 6 ldb, 7 c offset, 8 ldc,
// 9 flags (1: A is stored transposed [k, m]; 2: B is stored transposed [n, k]; 4: accumulate;
// 8: add the bias row at 10; 16: add the bias row at 11; 32: split K), 10, 11: bias offsets in
// W, 12: K per split (workgroup z takes slice z), 13: the splits' partial products (in A).
// Split K serves products with few output tiles and a long K (a recurrent step's backward:
// 64 x 512 outputs, K = 2048, eight tiles on a 132-processor GPU): each split writes its partial
// product, and `reduce` sums them in order (deterministic) and finishes as the plain kernel does.
// this workgroup's split of K
var<private> split_z: u32;
var<workgroup> As: array<vec4<f32>, 256>; // [16 k][64 rows] as 16 vec4 per k
var<workgroup> Bs: array<vec4<f32>, 256>; // [16 k][64 cols]

fn load_a(ta: bool, r: u32, kk: u32, m: u32, ke: u32, ao: u32, lda: u32) -> f32 {
    if (r >= m || kk >= ke) { return 0.0; }
    if (ta) { return SRC_A[ao + kk * lda + r]; }
    return SRC_A[ao + r * lda + kk];
}

fn load_b(tb: bool, kk: u32, c: u32, n: u32, ke: u32, bo: u32, ldb: u32) -> f32 {
    if (c >= n || kk >= ke) { return 0.0; }
    if (tb) { return SRC_B[bo + c * ldb + kk]; }
    return SRC_B[bo + kk * ldb + c];
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
