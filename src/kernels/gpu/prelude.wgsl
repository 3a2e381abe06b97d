// Shared by every rnnlens compute shader (prepended to each source by kernels/gpu/mod.rs).
// One bind group for everything: the dispatch's parameters (a 256-byte slot of one uniform
// buffer, chosen by a dynamic offset), then the four float buffers and the integer one.
// Offsets and sizes are in elements; the host writes them (`Dispatch::params`).
struct Params { u: array<vec4<u32>, 8> }
@group(0) @binding(0) var<uniform> P: Params;
// the parameters, in the CPU engine's flat layout
@group(0) @binding(1) var<storage, read_write> W: array<f32>;
// their gradients, same layout
@group(0) @binding(2) var<storage, read_write> G: array<f32>;
// the optimizer's moments: Adam's m then v
@group(0) @binding(3) var<storage, read_write> O: array<f32>;
// activations and every workspace
@group(0) @binding(4) var<storage, read_write> A: array<f32>;
// tokens, targets and the embedding gradient's positions by symbol
@group(0) @binding(5) var<storage, read_write> I: array<u32>;

fn pu(i: u32) -> u32 { return P.u[i / 4u][i % 4u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }

fn sigmoid(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
// tanh through exp of a non-positive argument: no overflow for any input.
fn tanh_safe(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}
// A flat thread index over a 2-D grid of 256-thread workgroups (a grid's x is capped at 65,535).
fn flat_id(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }
