//! The ISAN's readout basis and its affine-to-linear expansion (eq. 7), and the logits kept
//! to the `k` most recent contributions.

use super::*;


/// The affine-to-linear expansion (eq. 7) `W' = [[W_x, b_x], [0, 1]]`, `(H+1) × (H+1)`, of
/// `symbol`, so that `W' [h; 1] = [W_x h + b_x; 1]`.
pub fn affine_expansion(lm: &Lm, symbol: u32) -> Result<Vec<Vec<f64>>> {
    let p = IsanWeights::from_lm(lm)?;
    if symbol as usize >= p.symbols {
        bail!(
            "symbol {symbol} is out of range (the ISAN has {} symbols)",
            p.symbols
        );
    }
    Ok(expansion(&p, symbol))
}

pub(crate) fn expansion(p: &IsanWeights, symbol: u32) -> Vec<Vec<f64>> {
    let h = p.hidden;
    let (w, b) = (p.w(symbol), p.b(symbol));
    let mut m: Vec<Vec<f64>> = (0..h)
        .map(|r| {
            let mut row = w[r * h..(r + 1) * h].to_vec();
            row.push(b[r]);
            row
        })
        .collect();
    let mut last = vec![0.0; h + 1];
    last[h] = 1.0;
    m.push(last);
    m
}

/// The readout basis of the expanded state `[h; 1]` (eq. 9): the `V` rows of `[W_ro, b_ro]`
/// followed by an orthonormal basis `O` of their orthogonal complement (the null space of the
/// expanded readout), `(H+1) × (H+1)`. In this basis the first `V` coordinates of `[h; 1]` are
/// the logits. An error if `V > H + 1` or the rows are linearly dependent (no basis then).
pub fn readout_basis(lm: &Lm) -> Result<Vec<Vec<f64>>> {
    readout_basis_of(&IsanWeights::from_lm(lm)?)
}

pub(crate) fn readout_basis_of(p: &IsanWeights) -> Result<Vec<Vec<f64>>> {
    let (h, v) = (p.hidden, p.vocab);
    let d = h + 1;
    if v > d {
        bail!("the readout basis needs V ≤ H + 1 (V = {v}, H = {h})");
    }
    let rows: Vec<Vec<f64>> = (0..v)
        .map(|j| {
            let mut r = p.w_ro[j * h..(j + 1) * h].to_vec();
            r.push(p.b_ro[j]);
            r
        })
        .collect();
    let mut q: Vec<Vec<f64>> = Vec::new();
    for r in &rows {
        let mut u = r.clone();
        orthogonalize(&mut u, &q);
        let nu = norm(&u);
        if nu <= 1e-9 * norm(r).max(f64::MIN_POSITIVE) {
            bail!("the rows of [W_ro, b_ro] are linearly dependent: no readout basis");
        }
        u.iter_mut().for_each(|a| *a /= nu);
        q.push(u);
    }
    let mut basis = rows;
    for i in 0..d {
        if basis.len() == d {
            break;
        }
        let mut u = vec![0.0; d];
        u[i] = 1.0;
        orthogonalize(&mut u, &q);
        let nu = norm(&u);
        if nu > 1e-6 {
            u.iter_mut().for_each(|a| *a /= nu);
            q.push(u.clone());
            basis.push(u);
        }
    }
    Ok(basis)
}

/// The dynamics of `symbol` in the readout basis (eq. 10): `W'_ro W' (W'_ro)^{-1}`, so that
/// it maps the readout coordinates of `[h; 1]` to those of `[W_x h + b_x; 1]`.
pub fn readout_basis_dynamics(lm: &Lm, symbol: u32) -> Result<Vec<Vec<f64>>> {
    let p = IsanWeights::from_lm(lm)?;
    if symbol as usize >= p.symbols {
        bail!(
            "symbol {symbol} is out of range (the ISAN has {} symbols)",
            p.symbols
        );
    }
    let b = readout_basis_of(&p)?;
    Ok(matmul(&matmul(&b, &expansion(&p, symbol)), &invert(&b)?))
}

/// The logits at each position when only the `k` most recent contributions (plus `b_ro`) are
/// kept: `b_ro + Σ_{j > i−k} κ_j^i`, plus `κ_{h0}^i` when `k > i + 1`. `[n][V]`.
pub fn truncated_logits(lm: &Lm, tokens: &[u32], k: usize) -> Result<Vec<Vec<f64>>> {
    let p = IsanWeights::from_lm(lm)?;
    check_tokens(&p, tokens)?;
    let h = p.hidden;
    let mut out = Vec::with_capacity(tokens.len());
    let mut tmp = vec![0.0; h];
    for i in 0..tokens.len() {
        let lo = (i + 1).saturating_sub(k);
        let mut u = if k > i + 1 {
            p.h0.clone()
        } else {
            vec![0.0; h]
        };
        for &x in &tokens[lo..=i] {
            p.apply(x, &u, &mut tmp);
            u.iter_mut()
                .zip(&tmp)
                .zip(p.b(x))
                .for_each(|((a, &t), &b)| *a = t + b);
        }
        out.push(p.logits(&u));
    }
    Ok(out)
}
