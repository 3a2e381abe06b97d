//! LSTM without its output gate (first RAN paper, section 4.2, first step). STUB.
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct LstmNoOutputGate {
    pub input: usize,
    pub hidden: usize,
}

impl Recurrent for LstmNoOutputGate {
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
