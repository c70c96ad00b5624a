//! History that scales: the pure decisions behind job listings and retention, shared by the
//! CLI (which checks what the user typed before sending it), the daemon's listing handlers and
//! its retention loop. `filter` reads what a listing asks for (states, names, owners, a time
//! window, a workflow; times such as `1d`, `2026-11-30` or RFC 3339) into a [`Filter`];
//! `retention` decides which ended jobs and which output files are due to go, and when the
//! next ones are. Nothing here reads a clock, a file or the store: the time is passed in.

pub mod filter;
pub mod retention;

pub use filter::Filter;
