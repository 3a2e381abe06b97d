//! `rnnlens explain`: the papers' interpretability analyses of a trained model on a text.
//!
//! - [`ran`]: the RAN's weights `w_j^t` over past content layers, influence arrows, heat map;
//! - [`attention`]: the effective weight of each past step in an RWA's or RDA's state (ours);
//! - [`isan`]: the ISAN's contribution decomposition κ and the analyses built on it;
//! - [`pca`]: the PCA spectrum of hidden states, for every cell;
//! - [`tsne`]: t-SNE maps (the ISAN's κ_word, in the explorer);
//! - [`report`]: the text summary and the self-contained HTML report with SVG figures.

pub mod attention;
pub mod isan;
pub mod pca;
pub mod ran;
pub mod figures;
pub mod report;
pub mod tsne;
