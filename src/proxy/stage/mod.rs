//! The pipeline's stages, in the order the pipeline runs them. Each takes explicit inputs
//! and returns the next stage's input or a [`Reject`](crate::vocab::Reject).

pub mod authorize;
pub mod call_order;
pub mod identify;
pub mod rules;
pub mod shape;
pub mod spend;
pub mod task_scope;
pub mod validate;
