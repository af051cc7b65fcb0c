//! The data plane: the agent listener and the pipeline every tool call goes through.

pub mod action;
pub mod anonymous;
pub mod backend;
pub mod body;
pub mod call;
pub mod conventions;
pub mod decide;
pub mod detach;
pub mod forward;
pub mod gate;
pub mod govern;
pub mod headers;
pub mod inline_wake;
pub mod mcp;
pub mod media;
pub mod outcome;
pub mod path_check;
pub mod pipeline;
pub mod refund;
pub mod render;
pub mod rest;
pub mod seeds;
pub mod server;
pub mod stage;
pub mod task_token;

pub use gate::Gate;
