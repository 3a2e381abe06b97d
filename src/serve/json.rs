//! The JSON forms the page reads, shared by the language-model and task-model answers.

use crate::explain::figures;
use crate::explain::ran::Influence;
use crate::explain::report;
use crate::model::Model;
use base64::Engine as _;
use serde_json::{json, Value};

/// f32 values as base64 of their little-endian bytes (the page reads them as a Float32Array).
pub fn b64(values: &[f32]) -> String {
    let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The top layer's principal components, for the page's PCA view.
pub fn pca_json(ex: &report::Explanation) -> Value {
    json!({"layer": ex.pca.layer, "fractions": ex.pca.fractions(), "participation_ratio": ex.pca.participation_ratio(), "svg": ex.pca.html()})
}

/// Each layer's outputs after each of the `n` positions, for the page's state view.
pub fn states_json(model: &Model, ys: &[Vec<f32>], n: usize) -> Vec<Value> {
    ys.iter()
        .take(model.cells.len())
        .enumerate()
        .map(|(l, y)| {
            let w = model.cells[l].sizes().output;
            json!({"layer": l, "width": w, "values": b64(&y[..n * w])})
        })
        .collect()
}

/// The RAN's or the RWA/RDA's weights of each layer over the positions `labels`, as the page
/// draws them (the arrows, the matrices, the chosen units' own weights, the arcs).
pub fn influence_json(layers: &[Influence], labels: &[String]) -> Vec<Value> {
    layers
        .iter()
        .map(|i| {
            let mut doc = i.arrows_json(labels);
            doc["steps"] = json!(i.steps);
            doc["max_w"] = json!(b64(&i.max_w));
            doc["mean_w"] = json!(b64(&i.mean_w));
            doc["components"] = json!(i.components.iter().map(|(m, w)| json!({"unit": m, "w": b64(w)})).collect::<Vec<_>>());
            doc["arcs_svg"] = json!(figures::arcs_svg(labels, &i.predecessors));
            doc
        })
        .collect()
}

