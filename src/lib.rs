//! rnnlens: train, evaluate and look inside recurrent sequence models whose state can be read.

pub mod cells;
pub mod linalg;
pub mod model;
pub mod num;
pub mod optim;
pub mod rng;
pub mod checkpoint;
