//! Reading what Slurm's commands print. Pure functions over text, tested on output captured from
//! Slurm 22.05 (`../shared/slurm/`). Times are asked for as Unix seconds (`SLURM_TIME_FORMAT=%s`,
//! set by every command baton runs), so no time zone is guessed.

use baton_core::Millis;

/// One Slurm job, or one element (`123_4`) of a job array: what a baton job is tracked by and
/// what `scancel`, `scontrol` and `squeue` are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlurmRef {
    /// The job id (an array's: its `ArrayJobId`).
    pub id: u64,
    /// The array task (`SLURM_ARRAY_TASK_ID`) of an element.
    pub task: Option<u32>,
}

impl std::fmt::Display for SlurmRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.task {
            Some(t) => write!(f, "{}_{t}", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// The most tasks one listed range expands to (Slurm's own MaxArraySize ceiling is 4000001):
/// a garbled line cannot make baton allocate without bound.
const MAX_RANGE: usize = 4_000_001;

/// A job id as Slurm prints it: `123`, `123+1` (a heterogeneous component: the job), `123_4`
/// (an array element), or `123_[3-9%2]` / `123_[1,3,5-7]` (an array's still-pending elements,
/// which Slurm lists as one line): the job, and the tasks the line stands for (none for a job
/// that is not an array).
pub fn job_id(text: &str) -> Option<(u64, Vec<u32>)> {
    let text = text.trim();
    let (id, tasks) = match text.split_once('_') {
        Some((id, tasks)) => (id, Some(tasks)),
        None => (text.split('+').next()?, None),
    };
    let id = id.parse().ok()?;
    match tasks {
        None => Some((id, Vec::new())),
        Some(t) => Some((
            id,
            array_tasks(t.trim_start_matches('[').trim_end_matches(']'))?,
        )),
    }
}

/// An array's task list as Slurm writes it (`ArrayTaskId=`, `--array=`): `4`, `3-9`, `1-9:2`,
/// `1,3,5-7`, with an optional `%K` throttle at the end; expanded, in order.
pub fn array_tasks(spec: &str) -> Option<Vec<u32>> {
    let spec = spec.split('%').next()?.trim();
    if spec.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|&s| s > 0)?),
            None => (part, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = range.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if b < a || out.len() + ((b - a) / step) as usize >= MAX_RANGE {
            return None;
        }
        out.extend((a..=b).step_by(step as usize));
    }
    Some(out)
}

/// A job as `squeue` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLine {
    pub id: u64,
    /// The array tasks the line stands for: one element, or the still-pending ones that
    /// Slurm lists together; empty for a job that is not an array.
    pub tasks: Vec<u32>,
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
            // A heterogeneous job's components are listed as `ID+OFFSET`, an array's elements
            // as `ID_TASK` and its pending ones as `ID_[RANGES]`.
            let (id, tasks) = job_id(f.next()?)?;
            Some(QueueLine {
                id,
                tasks,
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
    /// An array's element (or its pending elements): the array's id and the tasks.
    pub array: Option<(u64, Vec<u32>)>,
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
    let mut array_job = None;
    let mut array_tasks_field = None;
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
            "ArrayJobId" => array_job = value.parse::<u64>().ok(),
            "ArrayTaskId" => array_tasks_field = array_tasks(value),
            _ => {}
        }
    }
    info.array = array_job.zip(array_tasks_field);
    seen_id.then_some(info)
}

/// `sacct -n -P -X -o JobID,JobName,State,ExitCode,Start,End,NodeList,Comment`.
pub const SACCT_FORMAT: &str = "JobID,JobName,State,ExitCode,Start,End,NodeList,Comment";

/// The first job of a `sacct -n -P -X -o SACCT_FORMAT -j ID` listing.
pub fn accounting(text: &str) -> Option<JobInfo> {
    accounting_all(text).into_iter().next()
}

/// Every job of a `sacct -n -P -X -o SACCT_FORMAT` listing (an array's: one per element, its
/// id the array's).
pub fn accounting_all(text: &str) -> Vec<JobInfo> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(accounting_line)
        .collect()
}

fn accounting_line(line: &str) -> Option<JobInfo> {
    let f: Vec<&str> = line.split('|').collect();
    let (exit_code, signal) = exit_code(f.get(3)?);
    let (id, tasks) = job_id(f.first()?)?;
    Some(JobInfo {
        id,
        array: (!tasks.is_empty()).then_some((id, tasks)),
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

/// `MaxArraySize` in `scontrol show config` (`MaxArraySize           = 1001`).
pub fn max_array_size(text: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "MaxArraySize").then(|| value.trim().parse().ok())?
    })
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

    #[test]
    fn the_clusters_array_limit_parses() {
        let config = "MailProg                = /x/mail\nMaxArraySize            = 1001\n\
                      MaxJobCount             = 10000\n";
        assert_eq!(max_array_size(config), Some(1001));
        assert_eq!(max_array_size("MaxJobCount = 3\n"), None);
    }

    #[test]
    fn array_ids_and_pending_ranges_expand() {
        assert_eq!(job_id("123"), Some((123, vec![])));
        assert_eq!(job_id("403+1"), Some((403, vec![])));
        assert_eq!(job_id("123_4"), Some((123, vec![4])));
        assert_eq!(
            job_id("123_[3-9%2]"),
            Some((123, vec![3, 4, 5, 6, 7, 8, 9]))
        );
        assert_eq!(job_id("123_[1,3,5-7]"), Some((123, vec![1, 3, 5, 6, 7])));
        assert_eq!(job_id("9_[0-8:4]"), Some((9, vec![0, 4, 8])));
        assert_eq!(job_id("123_[9-3]"), None);
        assert_eq!(job_id("123_[x]"), None);
        assert_eq!(job_id("123_[0-4294967295]"), None, "too many to expand");
        assert_eq!(array_tasks("2-4%2"), Some(vec![2, 3, 4]));
        assert_eq!(array_tasks(""), None);
        let r = SlurmRef {
            id: 5,
            task: Some(3),
        };
        assert_eq!(r.to_string(), "5_3");
        assert_eq!(SlurmRef { id: 5, task: None }.to_string(), "5");
    }

    #[test]
    fn an_arrays_listing_has_its_elements_and_its_pending_range() {
        // squeue -h -t all -o QUEUE_FORMAT -j 1 on Slurm 22.05, `--array=0-5%2`, two running.
        let q = queue(
            "1_[2-5%2]|PENDING|JobArrayTaskLimit||baton-s3|baton:h:s3:9\n\
             1_1|RUNNING|None|vm1|baton-s3|baton:h:s3:9\n1_0|COMPLETED|None|vm1|baton-s3|x\n",
        );
        assert_eq!(q.len(), 3);
        assert!(q.iter().all(|l| l.id == 1));
        assert_eq!(q[0].tasks, vec![2, 3, 4, 5]);
        assert_eq!(q[0].reason, "JobArrayTaskLimit");
        assert_eq!(
            (q[1].tasks.as_slice(), q[1].state.as_str()),
            (&[1][..], "RUNNING")
        );
        // scontrol show job -o 1: the pending record and an ended element.
        let pending = show(
            "JobId=1 ArrayJobId=1 ArrayTaskId=2-5%2 ArrayTaskThrottle=2 JobName=baton-s3 \
             JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0",
        )
        .unwrap();
        assert_eq!(pending.array, Some((1, vec![2, 3, 4, 5])));
        let element = show(
            "JobId=5 ArrayJobId=1 ArrayTaskId=3 ArrayTaskThrottle=2 JobName=baton-s3 \
             JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 StartTime=1796222736 \
             EndTime=1796222738 NodeList=vm1",
        )
        .unwrap();
        assert_eq!((element.id, element.array), (5, Some((1, vec![3]))));
        assert_eq!(element.exit_code, Some(3));
        assert_eq!(show(RUNNING).unwrap().array, None);
        let acct = accounting_all(
            "7_0|baton-s3|COMPLETED|0:0|1796063792|1796063795|vm1|c\n\
             7_1|baton-s3|FAILED|2:0|1796063792|1796063795|vm1|c\n",
        );
        assert_eq!(acct.len(), 2);
        assert_eq!(acct[1].array, Some((7, vec![1])));
        assert_eq!(acct[1].exit_code, Some(2));
    }
}
