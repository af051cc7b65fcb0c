//! What toolgate takes in from outside its own settings — files, URLs, and what parsers
//! say about them — read boundedly and shown without their content.
//!
//! - [`file`]: the one place a file is read: regular files only (a FIFO, device or socket
//!   is an error and is never opened for reading), and never more than a bound. Every
//!   reader of a policy, settings, token, key, certificate or label file goes through it.
//! - [`quiet`]: a parser's message (serde, YAML, JSON) with the values it quotes taken
//!   out, so an error about a file that is not what it should be (a secret named as a
//!   policy) keeps its position and kind but never echoes the file.
//! - [`url`]: a URL as logs and errors may show it: without userinfo and query values.
//! - [`kube_client`]: a Kubernetes API client from a kubeconfig setting, its file read
//!   as every file is.
//!
//! Sits at the bottom of the layer graph with [`crate::vocab`]: it imports nothing of
//! toolgate's own.

pub mod file;
pub mod kube_client;
pub mod quiet;
pub mod url;
