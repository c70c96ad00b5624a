//! Job names where an id goes: `baton wait train-lr3`, `baton cancel 'sweep-*'`. A number is an
//! id and is sent as it is; anything else is a name or glob of one of the caller's own jobs,
//! resolved by the daemon (`POST /v1/resolve`): a name is the newest job that has it, a glob
//! every match where the command takes several jobs, and exactly one where it takes one.

use crate::api::ResolveRequest;
use crate::api::client::{Client, ClientError};

/// How many jobs a command's argument may stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// One job (`logs`, `report`, `update`): a glob must match exactly one.
    One,
    /// Several, of any state (`wait`, `status`).
    Many,
    /// Several, only queued or running ones (`cancel`, `hold`, `release`).
    Active,
}

/// The ids `refs` stand for, in order, repeats removed; all numbers: no call to the daemon.
pub fn job_ids(client: &Client, refs: &[String], takes: Takes) -> Result<Vec<u64>, ClientError> {
    if let Some(ids) = refs
        .iter()
        .map(|r| r.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()
    {
        return Ok(ids);
    }
    let req = ResolveRequest {
        refs: refs.to_vec(),
        many: takes != Takes::One,
        active_only: takes == Takes::Active,
    };
    Ok(client.resolve(&req)?.ids)
}

/// The one id `r` stands for.
pub fn job_id(client: &Client, r: &str) -> Result<u64, ClientError> {
    let ids = job_ids(client, &[r.to_string()], Takes::One)?;
    Ok(ids.first().copied().unwrap_or_default())
}
