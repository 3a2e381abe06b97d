//! Input Switched Affine Network (Foerster et al.). STUB: to be written following `ran.rs`.
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct Isan {
    /// `K`: number of input symbols (the vocabulary)
    pub symbols: usize,
    pub hidden: usize,
    /// `false`: the purely linear ISAN without biases `b_x`
    pub biases: bool,
}

impl Recurrent for Isan {
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
