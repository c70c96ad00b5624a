//! The client edge: what the CLI (the `cli` module) and the MCP server (`mcp`) share to
//! speak to the daemon, so that neither depends on the other and both behave alike. The wire
//! protocol itself is `crate::api::client`; this is what sits between it and a caller:
//!
//! - [`connect`]: reaching the daemon, and starting the user's own when none runs;
//! - [`request`]: building requests from the caller's inputs and context;
//! - [`workflow`]: reading and checking a workflow file before it is sent;
//! - [`present`]: the words of tables, summaries, queue notes and errors;
//! - [`resolve`]: job names and globs where an id goes.

pub mod connect;
pub mod present;
pub mod request;
pub mod resolve;
pub mod workflow;
