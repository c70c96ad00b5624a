//! The GPU monitor's building blocks that need no daemon: finding the job of a GPU process
//! (`attribution`) and bounded in-memory series (`series`). The sampling loop that uses them,
//! the waste engine's decisions and the actions live in `daemon::monitor`.

pub mod attribution;
pub mod series;
