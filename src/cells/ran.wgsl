// The RAN's pointwise kernels (cells/ran.rs has the equations; cells/gpu.rs the slots).
// xp[t] rows are [c~ | i | f]: the recurrent GEMM has added the gates' recurrent parts; forward
// leaves c~ and writes the gates i, f over their pre-activations; backward writes the three
// gradients. The state is c [B, H]. Option bits: 1 g = tanh (else identity), 2 the gates read
// c_{t-1} (else h_{t-1}).

fn g_of(c: f32) -> f32 { if ((pu(P_OPTS) & 1u) != 0u) { return tanh_safe(c); } return c; }
// g' expressed through h = g(c)
fn dg(hv: f32) -> f32 { if ((pu(P_OPTS) & 1u) != 0u) { return 1.0 - hv * hv; } return 1.0; }
fn reads_c() -> bool { return (pu(P_OPTS) & 2u) != 0u; }
// Option bit 4, an output projection (cells/gpu.rs, ProjRec with from_state): the gates read
// y_{t-1} = W_proj h_{t-1}; fwd writes h_t to act[t] (slot 16) and proj_post makes rin[t+1]
// from y_t; bwd reads ∂L/∂h_t from slot 7, which proj_pre and a GEMM made.
fn projected() -> bool { return (pu(P_OPTS) & 4u) != 0u; }

@compute @workgroup_size(256)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h;
    let i = sigmoid(A[a + h + j]);
    let f = sigmoid(A[a + 2u * h + j]);
    A[a + h + j] = i; A[a + 2u * h + j] = f;
    let c = i * A[a + j] + f * A[pu(P_S_PREV) + id];
    let hv = g_of(c);
    A[pu(P_S_NEXT) + id] = c;
    if (projected()) {
        A[pu(P_ACT) + id] = hv;
        return;
    }
    A[pu(P_Y) + id] = hv;
    if (reads_c()) { A[pu(P_RIN) + id] = c * rec_mask(id); } else { A[pu(P_RIN) + id] = hv * rec_mask(id); }
}

@compute @workgroup_size(256)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg); let nb = pu(P_B); let h = pu(P_H);
    if (id >= nb * h) { return; }
    fold_split(id / h, id % h, h);
    let b = id / h; let j = id % h;
    let a = pu(P_XP) + b * 3u * h;
    var dh = A[pu(P_DY) + id];
    var dc = A[pu(P_DS) + id];
    if (!projected()) {
        let dr = A[pu(P_DR) + id] * rec_mask(id);
        if (reads_c()) { dc += dr; } else { dh += dr; }
    }
    dc += dh * dg(g_of(A[pu(P_S_NEXT) + id]));
    let ct = A[a + j]; let i = A[a + h + j]; let f = A[a + 2u * h + j];
    let cp = A[pu(P_S_PREV) + id];
    A[a + j] = dc * i;
    A[a + h + j] = dc * ct * i * (1.0 - i);
    A[a + 2u * h + j] = dc * cp * f * (1.0 - f);
    A[pu(P_DS) + id] = dc * f;
}

// rin[0]: c_{-1} or g(c_{-1}); with a projection, W_proj g(c_{-1}) (a GEMM wrote it) masked.
@compute @workgroup_size(256)
fn init_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (projected()) {
        if (id < pu(P_B) * pu(P_R)) { A[pu(P_RIN) + id] *= rec_mask(id); }
        return;
    }
    if (id >= pu(P_B) * pu(P_H)) { return; }
    let c = A[pu(P_S_PREV) + id];
    if (reads_c()) { A[pu(P_RIN) + id] = c * rec_mask(id); } else { A[pu(P_RIN) + id] = g_of(c) * rec_mask(id); }
}

// With a projection, dr is masked in place (then cells/gpu.rs takes it through W_proj).
@compute @workgroup_size(256)
fn init_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (projected()) {
        if (id < pu(P_B) * pu(P_R)) { A[pu(P_DR) + id] *= rec_mask(id); }
        return;
    }
    if (id >= pu(P_B) * pu(P_H)) { return; }
    var d = A[pu(P_DR) + id] * rec_mask(id);
    if (!reads_c()) { d *= dg(g_of(A[pu(P_S_PREV) + id])); }
    A[pu(P_DS) + id] += d;
}

// With a projection, after y_t = W_proj h_t (slot 5, [B, P]): the next step's recurrent input.
@compute @workgroup_size(256)
fn proj_post(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_R)) { return; }
    A[pu(P_RIN) + id] = A[pu(P_Y) + id] * rec_mask(id);
}

// With a projection, before the step's backward: ∂L/∂y_t, from above and through the next
// step's GEMM, kept in rp[t] (slot 15) for W_proj's gradient.
@compute @workgroup_size(256)
fn proj_pre(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_R)) { return; }
    A[pu(P_RP) + id] = A[pu(P_DY) + id] + A[pu(P_DR) + id] * rec_mask(id);
}

// g(c_{-1}) into the [B, H] scratch (slot 7), the first recurrent input's factor.
@compute @workgroup_size(256)
fn proj_init(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    A[pu(P_SCRATCH) + id] = g_of(A[pu(P_S_PREV) + id]);
}

// ∂L/∂g(c_{-1}) (slot 7, dr · W_proj) through g into ∂L/∂c_{-1}.
@compute @workgroup_size(256)
fn proj_init_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = flat_id(gid, nwg);
    if (id >= pu(P_B) * pu(P_H)) { return; }
    A[pu(P_DS) + id] += A[pu(P_SCRATCH) + id] * dg(g_of(A[pu(P_S_PREV) + id]));
}
