//! Reading what Slurm's commands print. Pure functions over text, tested on output captured from
//! Slurm 22.05 (`../shared/slurm/`). Times are asked for as Unix seconds (`SLURM_TIME_FORMAT=%s`,
//! set by every command baton runs), so no time zone is guessed.

use baton_core::Millis;

/// A job as `squeue` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLine {
    pub id: u64,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...
    pub state: String,
    pub reason: String,
    pub nodes: String,
    pub name: String,
    pub comment: String,
}

/// The fields of `squeue -o`, in this order.
pub const QUEUE_FORMAT: &str = "%i|%T|%r|%N|%j|%k";

/// One `squeue -h -o QUEUE_FORMAT` listing.
pub fn queue(text: &str) -> Vec<QueueLine> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().splitn(6, '|');
            // A heterogeneous job's components are listed as `ID+OFFSET`.
            let id = f.next()?.trim().split('+').next()?.parse().ok()?;
            Some(QueueLine {
                id,
                state: f.next()?.to_string(),
                reason: f.next().unwrap_or("").to_string(),
                nodes: f.next().unwrap_or("").to_string(),
                name: f.next().unwrap_or("").to_string(),
                comment: f.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// What Slurm knows of one job (`scontrol show job -d -o`, or `sacct`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobInfo {
    pub id: u64,
    pub state: String,
    pub reason: String,
    /// The exit code of the batch script, and the signal that ended it (`ExitCode=3:0`).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub start: Option<Millis>,
    pub end: Option<Millis>,
    pub nodes: String,
    /// GPU indices on its node, while it runs (`GRES=gpu:2(IDX:0-1)`).
    pub gpus: Vec<u32>,
    pub comment: String,
    pub name: String,
}

impl JobInfo {
    /// Slurm is done with it.
    pub fn ended(&self) -> bool {
        is_final(&self.state)
    }
}

/// States after which a job never runs again.
pub fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "OUT_OF_MEMORY"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "SPECIAL_EXIT"
            | "REVOKED"
    )
}

/// One line of `scontrol show job -d -o ID`.
pub fn show(line: &str) -> Option<JobInfo> {
    let mut info = JobInfo::default();
    let mut seen_id = false;
    for field in line.split_whitespace() {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        match key {
            "JobId" => {
                info.id = value.parse().ok()?;
                seen_id = true;
            }
            "JobName" => info.name = value.to_string(),
            "JobState" => info.state = value.to_string(),
            "Reason" => info.reason = value.to_string(),
            "ExitCode" => (info.exit_code, info.signal) = exit_code(value),
            "StartTime" => info.start = seconds(value),
            "EndTime" => info.end = seconds(value),
            "NodeList" => info.nodes = value.to_string(),
            "GRES" => info.gpus = gpu_indices(value),
            "Comment" => info.comment = value.to_string(),
            _ => {}
        }
    }
    seen_id.then_some(info)
}

/// `sacct -n -P -X -o JobID,JobName,State,ExitCode,Start,End,NodeList,Comment`.
pub const SACCT_FORMAT: &str = "JobID,JobName,State,ExitCode,Start,End,NodeList,Comment";

/// The first job of a `sacct -n -P -X -o SACCT_FORMAT -j ID` listing.
pub fn accounting(text: &str) -> Option<JobInfo> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let f: Vec<&str> = line.split('|').collect();
    let (exit_code, signal) = exit_code(f.get(3)?);
    Some(JobInfo {
        id: f.first()?.parse().ok()?,
        name: f.get(1)?.to_string(),
        // "CANCELLED by 0"
        state: f.get(2)?.split_whitespace().next()?.to_string(),
        reason: String::new(),
        exit_code,
        signal,
        start: seconds(f.get(4)?),
        end: seconds(f.get(5)?),
        nodes: f.get(6).unwrap_or(&"").to_string(),
        gpus: Vec::new(),
        comment: f.get(7).unwrap_or(&"").to_string(),
    })
}

/// `3:0` → exit 3; `0:15` → signal 15.
fn exit_code(value: &str) -> (Option<i32>, Option<i32>) {
    let (code, signal) = value.split_once(':').unwrap_or((value, "0"));
    let code = code.parse().ok();
    let signal = signal.parse().ok().filter(|&s| s != 0);
    match signal {
        Some(s) => (None, Some(s)),
        None => (code, None),
    }
}

/// Unix seconds (`SLURM_TIME_FORMAT=%s`) to milliseconds; `Unknown`, `None` and `N/A` to none.
fn seconds(value: &str) -> Option<Millis> {
    value
        .parse::<i64>()
        .ok()
        .filter(|&s| s > 0)
        .map(|s| s * 1000)
}

/// `gpu:2(IDX:0-1)`, `gpu:fake:3(IDX:0,2-3)` → the indices; anything else → none.
pub fn gpu_indices(value: &str) -> Vec<u32> {
    let Some(start) = value.find("IDX:") else {
        return Vec::new();
    };
    let list = &value[start + 4..];
    let list = list.split(')').next().unwrap_or("");
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b.min(a + 1024));
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

/// `sbatch --parsable` prints `ID` or `ID;cluster`.
pub fn sbatch_id(text: &str) -> Option<u64> {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())?
        .trim()
        .split(';')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from Slurm 22.05.8 (the shared test cluster), with SLURM_TIME_FORMAT=%s.
    const RUNNING: &str = "JobId=2 JobName=baton-7 UserId=root(0) GroupId=root(0) MCS_label=N/A \
        Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None \
        Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 \
        DerivedExitCode=0:0 RunTime=00:00:00 TimeLimit=365-00:00:00 TimeMin=N/A \
        SubmitTime=1796063791 EligibleTime=1796063791 AccrueTime=1796063791 \
        StartTime=1796063792 EndTime=1827599792 Deadline=N/A SuspendTime=None SecsPreSuspend=0 \
        Partition=debug NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 JOB_GRES=gpu:2   \
        Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1) MinCPUsNode=1 WorkDir=/tmp \
        Comment=baton:abc:7:1  StdErr=/tmp/s2.out StdIn=/dev/null StdOut=/tmp/s2.out Power= \
        TresPerNode=gres:gpu:2 ";

    #[test]
    fn a_running_job_shows_its_gpus_and_start() {
        let info = show(RUNNING).unwrap();
        assert_eq!(info.id, 2);
        assert_eq!(info.state, "RUNNING");
        assert_eq!(info.gpus, vec![0, 1]);
        assert_eq!(info.start, Some(1_796_063_792_000));
        assert_eq!(info.nodes, "vm");
        assert_eq!(info.comment, "baton:abc:7:1");
        assert_eq!((info.exit_code, info.signal), (Some(0), None));
        assert!(!info.ended());
    }

    #[test]
    fn an_ended_job_shows_its_exit_code_or_signal() {
        let failed = RUNNING
            .replace(
                "JobState=RUNNING Reason=None",
                "JobState=FAILED Reason=NonZeroExitCode",
            )
            .replace("ExitCode=0:0 \\", "ExitCode=3:0")
            .replace(" ExitCode=0:0 ", " ExitCode=3:0 ");
        let info = show(&failed).unwrap();
        assert_eq!(
            (info.state.as_str(), info.exit_code, info.signal),
            ("FAILED", Some(3), None)
        );
        assert!(info.ended());
        let cancelled = RUNNING
            .replace("JobState=RUNNING", "JobState=CANCELLED")
            .replace(" ExitCode=0:0 ", " ExitCode=0:15 ");
        let info = show(&cancelled).unwrap();
        assert_eq!((info.exit_code, info.signal), (None, Some(15)));
        assert!(show("slurm_load_jobs error: Invalid job id specified").is_none());
    }

    #[test]
    fn queue_lines_and_sbatch_ids_parse() {
        let q =
            queue("1|COMPLETED|None|vm|wrap|(null)\n2|PENDING|Resources||baton-7|baton:abc:7:1\n");
        assert_eq!(q.len(), 2);
        assert_eq!(q[1].state, "PENDING");
        assert_eq!(q[1].reason, "Resources");
        assert_eq!(q[1].comment, "baton:abc:7:1");
        let het = queue("403+0|RUNNING|None|vm1|baton-w3|c\n403+1|RUNNING|None|vm2|baton-w3|c\n");
        assert_eq!((het[0].id, het[1].id), (403, 403));
        assert_eq!(sbatch_id("42\n"), Some(42));
        assert_eq!(sbatch_id("43;cluster\n"), Some(43));
        assert_eq!(sbatch_id("Submitted batch job 44"), None);
    }

    #[test]
    fn gpu_index_lists_expand() {
        assert_eq!(gpu_indices("gpu:2(IDX:0-1)"), vec![0, 1]);
        assert_eq!(gpu_indices("gpu:fake:3(IDX:0,2-3)"), vec![0, 2, 3]);
        assert_eq!(gpu_indices(""), Vec::<u32>::new());
        assert_eq!(gpu_indices("gpu:1(IDX:N/A)"), Vec::<u32>::new());
    }

    #[test]
    fn accounting_lines_parse() {
        let info =
            accounting("12|baton-3|CANCELLED by 0|0:15|1796063792|1796063795|vm|baton:x:3:1\n")
                .unwrap();
        assert_eq!(info.id, 12);
        assert_eq!(info.state, "CANCELLED");
        assert_eq!(info.signal, Some(15));
        assert_eq!(info.end, Some(1_796_063_795_000));
        assert_eq!(accounting(""), None);
    }
}
