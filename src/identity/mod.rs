//! Who is calling: bearer tokens today; JWTs and client certificates as they land.

pub mod tokens;

pub use tokens::Tokens;
