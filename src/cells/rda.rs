//! Recurrent Discounted Attention unit. STUB: to be written following `ran.rs`.
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::num::Float;

/// The attention function `f_a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    Exp,
    Relu,
    Softplus,
    Sigmoid,
}

impl Attention {
    pub fn name(self) -> &'static str {
        match self {
            Attention::Exp => "exp",
            Attention::Relu => "relu",
            Attention::Softplus => "softplus",
            Attention::Sigmoid => "sigmoid",
        }
    }
    pub fn parse(s: &str) -> Option<Attention> {
        [Attention::Exp, Attention::Relu, Attention::Softplus, Attention::Sigmoid].into_iter().find(|a| a.name() == s)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rda {
    pub input: usize,
    pub hidden: usize,
    pub attention: Attention,
    /// `f_h`: identity or tanh
    pub hidden_fn: crate::num::Act,
    /// `f_o`: identity or tanh
    pub output_fn: crate::num::Act,
}

impl Recurrent for Rda {
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
