// The model's kernels around the cells: the embedding both ways, bias gradients, the softmax
// with its cross-entropy, the global norm and Adam. Parameter slots are listed per entry point.

// 0 rows, 1 E, 2 tokens (I), 3 table (W), 4 out (A), 5 dropout mask (A) if 6 is 1:
// out[i] = table[tokens[i]] (∘ mask[i]).
@compute @workgroup_size(256)
fn embed_gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let e = pu(1u);
    if (id >= pu(0u) * e) { return; }
    let row = id / e; let d = id % e;
    var v = W[pu(3u) + I[pu(2u) + row] * e + d];
    if (pu(6u) == 1u) { v *= A[pu(5u) + id]; }
    A[pu(4u) + id] = v;
}

// 0 n, 1 x (A), 2 mask (A): x ∘= mask (dropout on a layer's output, and on its gradient).
@compute @workgroup_size(256)
fn mul_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(0u)) { return; }
    A[pu(1u) + id] *= A[pu(2u) + id];
}

// 0 V, 1 E, 2 starts (I, V+1 entries), 3 positions (I), 4 table gradient (G), 5 row gradients (A),
// 6 their dropout mask (A) if 7 is 1: each symbol's row of the table gradient gains its
// positions' rows (∘ mask), in position order.
@compute @workgroup_size(256)
fn embed_scatter(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let e = pu(1u);
    if (id >= pu(0u) * e) { return; }
    let v = id / e; let d = id % e;
    var s = G[pu(4u) + id];
    for (var j = I[pu(2u) + v]; j < I[pu(2u) + v + 1u]; j++) {
        let at = I[pu(3u) + j] * e + d;
        var x = A[pu(5u) + at];
        if (pu(7u) == 1u) { x *= A[pu(6u) + at]; }
        s += x;
    }
    G[pu(4u) + id] = s;
}

// 0 m, 1 n, 2 src (A), 3 ld, 4 dst (G), 5 second dst (G) when flag 6 is 1: the column sums of
// an [m, n] block, added to one or two bias gradients. 64 columns a workgroup, 4 row groups.
var<workgroup> part: array<f32, 256>;
@compute @workgroup_size(256)
fn colsum(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let m = pu(0u); let n = pu(1u); let ld = pu(3u);
    let c = wg.x * 64u + tid % 64u; let rg = tid / 64u;
    var s = 0.0;
    if (c < n) {
        for (var r = rg; r < m; r += 4u) { s += A[pu(2u) + r * ld + c]; }
    }
    part[tid] = s;
    workgroupBarrier();
    if (rg == 0u && c < n) {
        let t = (part[tid] + part[tid + 64u]) + (part[tid + 128u] + part[tid + 192u]);
        G[pu(4u) + c] += t;
        if (pu(6u) == 1u) { G[pu(5u) + c] += t; }
    }
}

// 0 rows, 1 V, 2 logits (A), 3 targets (I), 4 nll out (A), 5 scale (f32), 6 grad: one row a
// workgroup. The row's NLL of its target; with grad, the row becomes scale · (softmax − one-hot).
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256)
fn softmax_xent(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row = wg.x + wg.y * nwg.x;
    if (row >= pu(0u)) { return; }
    let v = pu(1u); let base = pu(2u) + row * v; let tgt = I[pu(3u) + row];
    var mx = -3.4e38;
    for (var j = tid; j < v; j += 256u) { mx = max(mx, A[base + j]); }
    red[tid] = mx;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
        workgroupBarrier();
    }
    mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var j = tid; j < v; j += 256u) { sum += exp(A[base + j] - mx); }
    red[tid] = sum;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
    sum = red[0];
    let zt = A[base + tgt] - mx;
    workgroupBarrier();
    if (pu(6u) == 1u) {
        let inv = pf(5u) / sum;
        for (var j = tid; j < v; j += 256u) {
            var gj = exp(A[base + j] - mx) * inv;
            if (j == tgt) { gj -= pf(5u); }
            A[base + j] = gj;
        }
    }
    if (tid == 0u) { A[pu(4u) + row] = log(sum) - zt; }
}

// 0 len, 1 partials out (A), 2 clip value (f32, 0: none): values clipped to ±clip in place,
// then each workgroup's sum of squares of its 256·16 elements.
@compute @workgroup_size(256)
fn sumsq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let blk = wg.x + wg.y * nwg.x; let len = pu(0u); let cv = pf(2u);
    var s = 0.0;
    for (var i = 0u; i < 16u; i++) {
        let at = blk * 4096u + i * 256u + tid;
        if (at < len) {
            var x = G[at];
            if (cv > 0.0) { x = clamp(x, -cv, cv); G[at] = x; }
            s = fma(x, x, s);
        }
    }
    red[tid] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (tid < k) { red[tid] += red[tid + k]; }
        workgroupBarrier();
    }
    if (tid == 0u) { A[pu(1u) + blk] = red[0]; }
}

// 0 partials, 1 partials offset (A), 2 out (A: norm, then the scale to apply), 3 max norm (f32, 0: none).
@compute @workgroup_size(256)
fn clip_scale(@builtin(local_invocation_index) tid: u32) {
    var s = 0.0;
    for (var j = tid; j < pu(0u); j += 256u) { s += A[pu(1u) + j]; }
    red[tid] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (tid < k) { red[tid] += red[tid + k]; }
        workgroupBarrier();
    }
    if (tid == 0u) {
        let norm = sqrt(red[0]);
        let mx = pf(3u);
        var scale = 1.0;
        if (mx > 0.0 && norm > mx) { scale = mx / norm; }
        A[pu(2u)] = norm;
        A[pu(2u) + 1u] = scale;
    }
}

fn finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }

// f16's dynamic loss scaling (`--precision f16`), three kernels around the backward. Its state
// follows the norm in A: [norm, clip scale, loss scale S, steps since S last changed, flag,
// steps skipped].
// 0 n, 1 x (A), 2 the state (A): x ∘= S, the loss's gradient made large enough that the
// backward's f16 operands keep the small gradients (beside f16's 6e-8 and below).
@compute @workgroup_size(256)
fn loss_scale_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < pu(0u)) { A[pu(1u) + i] *= A[pu(2u) + 2u]; }
}

// 0 n, 1 the state (A): every gradient divided by S; the flag set where one is not finite (an
// f16 operand overflowed), before any clipping could hide it.
@compute @workgroup_size(256)
fn loss_unscale_g(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i >= pu(0u)) { return; }
    let g = G[i] / A[pu(1u) + 2u];
    G[i] = g;
    if (!finite(g)) { A[pu(1u) + 4u] = 1.0; }
}

// 0 the state (A), 1 the steps after which S doubles: after the norm, one thread. Where a
// gradient was not finite, S halves and the norm becomes -1, which the update skips (as
// PyTorch's GradScaler skips the optimizer's step) and the trainers read as a step f16's
// scaling skipped, not as a divergence; else after that many steps in a row without one, S
// doubles (PyTorch's GradScaler: 2^16 to start, 2000 steps).
@compute @workgroup_size(1)
fn loss_scale_step() {
    let at = pu(0u);
    if (A[at + 4u] != 0.0 || !finite(A[at])) {
        A[at] = -1.0;
        A[at + 2u] = max(A[at + 2u] * 0.5, 1.0 / 16777216.0);
        A[at + 3u] = 0.0;
        A[at + 5u] += 1.0;
    } else {
        A[at + 3u] += 1.0;
        if (A[at + 3u] >= f32(pu(1u))) {
            A[at + 2u] = min(A[at + 2u] * 2.0, 16777216.0);
            A[at + 3u] = 0.0;
        }
    }
    A[at + 4u] = 0.0;
}

// 0 len, 1 norm and scale (A), 2 step size (f32), 3 eps (f32), 4 β1, 5 β2, 6 sgd (1) or adam (0):
// the update of the CPU's Optimizer::step after the clipping of optim::clip; nothing moves
// when the norm is not finite (the CPU trainer skips such a batch) or is -1 (a step f16's
// loss scaling skipped).
@compute @workgroup_size(256)
fn update(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg); let len = pu(0u);
    if (i >= len || !finite(A[pu(1u)]) || A[pu(1u)] < 0.0) { return; }
    let g = G[i] * A[pu(1u) + 1u];
    if (pu(6u) == 1u) { W[i] -= pf(2u) * g; return; }
    let b1 = pf(4u); let b2 = pf(5u);
    let m = b1 * O[i] + (1.0 - b1) * g;
    let v = b2 * O[len + i] + (1.0 - b2) * g * g;
    O[i] = m; O[len + i] = v;
    W[i] -= pf(2u) * m / (sqrt(v) + pf(3u));
}

// 0 n, 1 from (A), 2 to (A): a copy inside the activations (wgpu refuses a buffer copy onto
// itself).
@compute @workgroup_size(256)
fn copy_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(0u)) { return; }
    A[pu(2u) + id] = A[pu(1u) + id];
}

// 0 rows B, 1 S, 2 src (W, [S]), 3 dst (A, [B, S]): every row of dst becomes src (a layer's
// learned initial state, written where a window starts fresh).
@compute @workgroup_size(256)
fn rows_from_w(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let s = pu(1u);
    if (id >= pu(0u) * s) { return; }
    A[pu(3u) + id] = W[pu(2u) + id % s];
}

// 0 rows B, 1 S, 2 src (A, [B, S]), 3 dst (G, [S]), 4 flag (A): where the flag is not 0, dst
// gains src's rows one after the other, in row order (the gradient of a learned initial state,
// when the window started from it), as the CPU engine adds them.
@compute @workgroup_size(256)
fn rows_sum_if(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let s = pu(1u);
    if (id >= s || A[pu(4u)] == 0.0) { return; }
    var t = G[pu(3u) + id];
    for (var b = 0u; b < pu(0u); b++) { t += A[pu(2u) + b * s + id]; }
    G[pu(3u) + id] = t;
}

// 0 rows S, 1 width, 2 positions (I, [S]), 3 src (A), 4 dst (A, [S, width]): dst's row k becomes
// src's row positions[k] (a task's readout reads its scored positions).
@compute @workgroup_size(256)
fn rows_gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let w = pu(1u);
    if (id >= pu(0u) * w) { return; }
    let k = id / w; let d = id % w;
    A[pu(4u) + id] = A[pu(3u) + I[pu(2u) + k] * w + d];
}

// 0 rows S, 1 width, 2 positions (I, [S], distinct), 3 src (A, [S, width]), 4 dst (A): dst's row
// positions[k] becomes src's row k (the readout's gradient back to the scored positions).
@compute @workgroup_size(256)
fn rows_scatter(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let w = pu(1u);
    if (id >= pu(0u) * w) { return; }
    let k = id / w; let d = id % w;
    A[pu(4u) + I[pu(2u) + k] * w + d] = A[pu(3u) + id];
}

// The sampled softmax (training/sampled.rs). 0 C (the padded candidate count), 1 top,
// 2 candidates (I, [C], 0xffffffff for padding), 3 their bias corrections (A, [C]), 4 decoder
// weight (W, [V, top]), 5 decoder bias (W), 6 rows out (A, [C, top]), 7 biases out (A, [C]):
// each candidate's decoder row and its bias plus correction; a padding candidate gets a zero row
// and a bias so low that its softmax share is exactly 0.
@compute @workgroup_size(256)
fn cand_gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let top = pu(1u); let c = pu(0u);
    if (id >= c * (top + 1u)) { return; }
    if (id < c * top) {
        let j = id / top; let cls = I[pu(2u) + j];
        var v = 0.0;
        if (cls != 0xffffffffu) { v = W[pu(4u) + cls * top + id % top]; }
        A[pu(6u) + id] = v;
    } else {
        let j = id - c * top; let cls = I[pu(2u) + j];
        var b = -1e30;
        if (cls != 0xffffffffu) { b = W[pu(5u) + cls] + A[pu(3u) + j]; }
        A[pu(7u) + j] = b;
    }
}

// 0 rows, 1 C, 2 logits (A, [rows, C]), 3 bias (A, [C]): every row gains the bias.
@compute @workgroup_size(256)
fn bias_rows_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let c = pu(1u);
    if (id >= pu(0u) * c) { return; }
    A[pu(2u) + id] += A[pu(3u) + id % c];
}

// 0 C, 1 top, 2 candidates (I), 3 their rows' gradients (A, [C, top]), 4 decoder weight's
// gradient (G), 5 decoder bias's (G), 6 rows n, 7 logits' gradient (A, [n, C]): each real
// candidate's row and bias gradient (the column's sum over the rows, in row order) added at its
// class (the candidates are distinct, so no two threads add to one element).
@compute @workgroup_size(256)
fn cand_scatter(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let top = pu(1u); let c = pu(0u);
    if (id >= c * (top + 1u)) { return; }
    if (id < c * top) {
        let j = id / top; let cls = I[pu(2u) + j];
        if (cls == 0xffffffffu) { return; }
        G[pu(4u) + cls * top + id % top] += A[pu(3u) + id];
    } else {
        let j = id - c * top; let cls = I[pu(2u) + j];
        if (cls == 0xffffffffu) { return; }
        var s = 0.0;
        for (var i = 0u; i < pu(6u); i++) { s += A[pu(7u) + i * c + j]; }
        G[pu(5u) + cls] += s;
    }
}
