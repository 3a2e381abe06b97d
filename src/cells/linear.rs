//! Linear RNN baselines of the ISAN paper. STUB: to be written following `ran.rs`.
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    /// `K`: number of input symbols (the vocabulary)
    pub symbols: usize,
    pub hidden: usize,
    /// the function applied to `h` before the softmax readout: identity or tanh
    pub readout: crate::num::Act,
}

impl Recurrent for Linear {
    fn sizes(&self) -> Sizes {
        todo!()
    }
    fn tensors(&self) -> Vec<TensorSpec> {
        todo!()
    }
    fn ws_dims(&self) -> WsDims {
        todo!()
    }
    fn forward<T: Float>(&self, _w: &[T], _seq: &Seq<T>, _ws: &mut Workspace<T>, _y: &mut [T]) {
        todo!()
    }
    fn backward<T: Float>(&self, _w: &[T], _g: &mut [T], _seq: &Seq<T>, _ws: &mut Workspace<T>, _grads: Grads<T>) {
        todo!()
    }
}
