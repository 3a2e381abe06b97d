//! Inference through composed affine maps, for the cells whose step is affine in the state
//! (ISAN, linear RNN): [`table`] precomputes the maps of frequent n-grams, [`scan`] composes a
//! sequence's maps in parallel.

pub mod scan;
pub mod table;
