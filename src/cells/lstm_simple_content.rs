//! LSTM with the RAN's simplified content layer (later RAN paper, equation 5). STUB.
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct LstmSimpleContent {
    pub input: usize,
    pub hidden: usize,
}

impl Recurrent for LstmSimpleContent {
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
