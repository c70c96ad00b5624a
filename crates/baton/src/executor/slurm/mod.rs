//! Driving a real Slurm cluster (DESIGN §8): with `[backend] kind = "slurm"` in config.toml a job
//! becomes an `sbatch` submission instead of a local process, its state comes from `squeue` and
//! `scontrol` (`sacct` once Slurm has forgotten it), and cancel is `scancel`. This module runs
//! those commands and builds what goes into them (`array` builds a sweep's one job array);
//! `parse` reads what they print; `backend` decides when to call them.
//!
//! Nothing from a job reaches a shell unquoted: the job's command goes into its batch script as
//! single-quoted words, and every other value is one argument of an exec.

pub mod array;
pub mod backend;
pub mod parse;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::executor::RunAs;
pub use backend::SlurmBackend;
pub use parse::{JobInfo, QueueLine, SlurmRef};

/// `[backend]` in config.toml.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackendSettings {
    pub kind: BackendKind,
    /// `sbatch --partition`.
    pub partition: Option<String>,
    /// `sbatch --account`.
    pub account: Option<String>,
    /// `sbatch --qos`.
    pub qos: Option<String>,
    /// More `sbatch` arguments, each one word (`["--constraint=a100", "--mem=64G"]`).
    pub sbatch_args: Vec<String>,
    /// Where `sbatch`, `squeue`, `scontrol`, `scancel` and `sacct` are (default: the PATH).
    pub bin_dir: Option<PathBuf>,
    /// The cluster's `MailProg` is `baton slurm-mail`: jobs ask Slurm to "mail" their end to the
    /// daemon's socket, which then looks at once instead of at its next poll.
    pub mail_hook: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Jobs run on this machine under baton's own supervisors.
    #[default]
    Local,
    Slurm,
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The controller did not answer, or the command is missing: worth retrying later.
    #[error("Slurm is unreachable: {0}")]
    Unreachable(String),
    /// Slurm answered no (sbatch's own message).
    #[error("Slurm refused the job: {0}")]
    Refused(String),
}

/// The Slurm commands, as configured.
#[derive(Clone, Debug)]
pub struct Slurm {
    pub settings: BackendSettings,
    /// Marks this daemon's jobs (`--comment=baton:TAG:JOB:ATTEMPT`), so that a restarted daemon
    /// finds its own interrupted submissions and nobody else's.
    pub tag: String,
}

/// One `sbatch` to make.
pub struct Submission<'a> {
    pub job: u64,
    pub attempt: u32,
    pub command: &'a [String],
    pub cwd: &'a str,
    pub gpus: u32,
    /// Cores and bytes of memory (0: the cluster's default).
    pub cpus: u32,
    pub mem: u64,
    pub time_limit_ms: Option<i64>,
    /// Its checkpoint signal (`--signal`), passed on as sbatch's.
    pub signal: Option<baton_core::signal::CheckpointSignal>,
    /// `afterok:12`, `afterany:13`.
    pub dependencies: Vec<String>,
    /// The job's directory (`jobs/<id>/`): output, error and the batch script go there.
    pub dir: &'a Path,
    /// The job's environment (exported to it with `--export=ALL`).
    pub env: BTreeMap<String, String>,
    pub umask: Option<u32>,
    /// Where Slurm's end-of-job "mail" goes (the daemon's socket) when the hook is installed.
    pub mail_to: Option<String>,
}

impl Slurm {
    pub fn new(settings: BackendSettings, tag: String) -> Slurm {
        Slurm { settings, tag }
    }

    fn command(&self, name: &str) -> Command {
        let program = match &self.settings.bin_dir {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        };
        let mut cmd = Command::new(program);
        // Times as Unix seconds: no time zone to guess. An array's pending tasks in full
        // (`123_[3-299]`), not cut short at Slurm's default 64 characters.
        cmd.env("SLURM_TIME_FORMAT", "%s")
            .env("SLURM_BITSTR_LEN", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<(bool, String, String), SlurmError> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        let out = cmd
            .output()
            .map_err(|e| SlurmError::Unreachable(format!("cannot run {program}: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !out.status.success() && unreachable(&stderr) {
            return Err(SlurmError::Unreachable(format!("{what}: {stderr}")));
        }
        Ok((out.status.success(), stdout, stderr))
    }

    /// The `--comment` of a job's attempt.
    pub fn comment(&self, job: u64, attempt: u32) -> String {
        format!("baton:{}:{job}:{attempt}", self.tag)
    }

    /// Writes the batch script and runs `sbatch`; returns the Slurm job id.
    pub fn submit(&self, s: &Submission<'_>, run_as: Option<&RunAs>) -> Result<u64, SlurmError> {
        let script = s.dir.join("slurm.sh");
        std::fs::write(&script, batch_script(s))
            .map_err(|e| SlurmError::Refused(format!("cannot write {}: {e}", script.display())))?;
        self.sbatch(self.sbatch_args(s), &script, &s.env, run_as)
    }

    /// Runs `sbatch ARGS SCRIPT` in `env` (exported whole to the job; Slurm sets the GPUs), as
    /// `run_as` when given; returns the Slurm job id, or sbatch's own refusal.
    fn sbatch(
        &self,
        args: Vec<String>,
        script: &Path,
        env: &BTreeMap<String, String>,
        run_as: Option<&RunAs>,
    ) -> Result<u64, SlurmError> {
        let mut cmd = self.command("sbatch");
        cmd.args(args).arg(script);
        cmd.env_clear().envs(env).env("SLURM_TIME_FORMAT", "%s");
        for var in ["SLURM_CONF", "MUNGE_SOCKET"] {
            if let Some(v) = std::env::var_os(var)
                && !env.contains_key(var)
            {
                cmd.env(var, v);
            }
        }
        if let Some(run_as) = run_as {
            crate::executor::run_as_user(&mut cmd, run_as);
        }
        let (ok, stdout, stderr) = self.run(cmd, "sbatch")?;
        if !ok {
            let message = stderr
                .strip_prefix("sbatch: error: ")
                .unwrap_or(&stderr)
                .replace("\nsbatch: error: ", "; ");
            return Err(SlurmError::Refused(message));
        }
        parse::sbatch_id(&stdout)
            .ok_or_else(|| SlurmError::Refused(format!("sbatch printed no job id: {stdout}")))
    }

    /// The site's options from `[backend]`: partition, account, QOS and extra arguments.
    fn site_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, value) in [
            ("--partition", &self.settings.partition),
            ("--account", &self.settings.account),
            ("--qos", &self.settings.qos),
        ] {
            if let Some(v) = value {
                args.push(format!("{flag}={v}"));
            }
        }
        args.extend(self.settings.sbatch_args.iter().cloned());
        args
    }

    /// The arguments of `sbatch` before the script.
    pub fn sbatch_args(&self, s: &Submission<'_>) -> Vec<String> {
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name=baton-{}", s.job),
            format!("--comment={}", self.comment(s.job, s.attempt)),
            format!("--output={}", s.dir.join("stdout").display()),
            format!("--error={}", s.dir.join("stderr").display()),
            format!("--chdir={}", s.cwd),
            "--export=ALL".to_string(),
            // A job whose dependency can never be met is cancelled, not left pending.
            "--kill-on-invalid-dep=yes".to_string(),
        ];
        args.extend(resource_args(s.gpus, s.cpus, s.mem, s.time_limit_ms));
        args.extend(s.signal.map(signal_arg));
        args.extend(self.dependency_site_and_mail_args(&s.dependencies, s.mail_to.as_deref()));
        args
    }

    /// What follows the resources in the submission of one job or one array: the jobs it
    /// waits for, the site's options (`site_args`) and the end-of-job mail, which for an array
    /// comes once, when the whole array has ended.
    fn dependency_site_and_mail_args(
        &self,
        dependencies: &[String],
        mail_to: Option<&str>,
    ) -> Vec<String> {
        let mut args = Vec::new();
        if !dependencies.is_empty() {
            args.push(format!("--dependency={}", dependencies.join(",")));
        }
        args.extend(self.site_args());
        if let Some(to) = mail_to {
            args.push("--mail-type=END,FAIL".into());
            args.push(format!("--mail-user={to}"));
        }
        args
    }

    /// The listed jobs Slurm still knows (finished ones too, until its MinJobAge).
    pub fn queue(&self, ids: &[u64]) -> Result<Vec<QueueLine>, SlurmError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let mut cmd = self.command("squeue");
        cmd.args(["-h", "-t", "all", "-o", parse::QUEUE_FORMAT, "-j"])
            .arg(list.join(","));
        let (ok, stdout, stderr) = self.run(cmd, "squeue")?;
        if !ok && !stderr.contains("Invalid job id") {
            return Err(SlurmError::Unreachable(format!("squeue: {stderr}")));
        }
        Ok(parse::queue(&stdout))
    }

    /// Finds an interrupted submission of job `job`'s attempt again, by its name and comment.
    pub fn find(&self, job: u64, attempt: u32) -> Result<Option<u64>, SlurmError> {
        self.find_named(&format!("baton-{job}"), &self.comment(job, attempt))
    }

    /// The Slurm job called `name` with `comment` (this daemon's, any state).
    fn find_named(&self, name: &str, comment: &str) -> Result<Option<u64>, SlurmError> {
        let mut cmd = self.command("squeue");
        cmd.args(["-h", "-t", "all", "-o", parse::QUEUE_FORMAT])
            .arg(format!("--name={name}"));
        let (ok, stdout, stderr) = self.run(cmd, "squeue")?;
        if !ok {
            return Err(SlurmError::Unreachable(format!("squeue: {stderr}")));
        }
        Ok(parse::queue(&stdout)
            .into_iter()
            .find(|l| l.comment == comment)
            .map(|l| l.id))
    }

    /// Everything Slurm says about one job; `None` once it has forgotten it.
    pub fn show(&self, id: u64) -> Result<Option<JobInfo>, SlurmError> {
        let mut cmd = self.command("scontrol");
        cmd.args(["show", "job", "-d", "-o"]).arg(id.to_string());
        let (ok, stdout, stderr) = self.run(cmd, "scontrol")?;
        if !ok {
            if stderr.contains("Invalid job id") {
                return Ok(None);
            }
            return Err(SlurmError::Unreachable(format!("scontrol: {stderr}")));
        }
        Ok(stdout.lines().find_map(parse::show))
    }

    /// Everything Slurm says about a job array: one record per element it has started, and one
    /// for the elements still pending together (empty once it has forgotten them all).
    pub fn show_all(&self, id: u64) -> Result<Vec<JobInfo>, SlurmError> {
        let mut cmd = self.command("scontrol");
        cmd.args(["show", "job", "-d", "-o"]).arg(id.to_string());
        let (ok, stdout, stderr) = self.run(cmd, "scontrol")?;
        if !ok {
            if stderr.contains("Invalid job id") {
                return Ok(Vec::new());
            }
            return Err(SlurmError::Unreachable(format!("scontrol: {stderr}")));
        }
        Ok(stdout.lines().filter_map(parse::show).collect())
    }

    /// The accounting records of a job array's elements (needs slurmdbd; none without it).
    pub fn accounting_all(&self, id: u64) -> Result<Vec<JobInfo>, SlurmError> {
        let mut cmd = self.command("sacct");
        cmd.args(["-n", "-P", "-X", "-o", parse::SACCT_FORMAT, "-j"])
            .arg(id.to_string());
        let (ok, stdout, _) = self.run(cmd, "sacct")?;
        Ok(if ok {
            parse::accounting_all(&stdout)
        } else {
            Vec::new()
        })
    }

    /// The accounting record of a job Slurm's controller has forgotten (needs slurmdbd).
    pub fn accounting(&self, id: u64) -> Result<Option<JobInfo>, SlurmError> {
        let mut cmd = self.command("sacct");
        cmd.args(["-n", "-P", "-X", "-o", parse::SACCT_FORMAT, "-j"])
            .arg(id.to_string());
        let (ok, stdout, _) = self.run(cmd, "sacct")?;
        Ok(if ok { parse::accounting(&stdout) } else { None })
    }

    /// `scancel`: SIGTERM to the job, SIGKILL after the cluster's KillWait.
    pub fn cancel(&self, id: SlurmRef, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        let mut cmd = self.command("scancel");
        cmd.arg(id.to_string());
        if let Some(run_as) = run_as {
            crate::executor::run_as_user(&mut cmd, run_as);
        }
        let (ok, _, stderr) = self.run(cmd, "scancel")?;
        if ok || stderr.contains("already completing or completed") {
            Ok(())
        } else {
            Err(SlurmError::Refused(stderr))
        }
    }
}

impl Slurm {
    /// `scancel --signal=N --full`: signal `signal` to every step of the job and to its batch
    /// script (`--full`; without it the batch shell alone is spared).
    pub fn signal(
        &self,
        id: SlurmRef,
        signal: i32,
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError> {
        let mut cmd = self.command("scancel");
        cmd.arg(format!("--signal={signal}"))
            .arg("--full")
            .arg(id.to_string());
        if let Some(run_as) = run_as {
            crate::executor::run_as_user(&mut cmd, run_as);
        }
        let (ok, _, stderr) = self.run(cmd, "scancel --signal")?;
        if ok {
            Ok(())
        } else {
            Err(SlurmError::Refused(stderr))
        }
    }
}

fn unreachable(stderr: &str) -> bool {
    [
        "Unable to contact slurm controller",
        "Socket timed out",
        "Connection refused",
        "Zero Bytes were transmitted",
        "Communication connection failure",
        "Unable to establish controller",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// The batch script: the environment baton promises, then the command, each word quoted.
pub fn batch_script(s: &Submission<'_>) -> String {
    let mut out = format!(
        "#!/bin/sh\n# baton job {}, attempt {} (written by baton; Slurm runs it)\n",
        s.job, s.attempt
    );
    gpu_env(&mut out, s.gpus);
    exec_line(&mut out, s.umask, s.command);
    out
}

/// `--time`: Slurm counts whole minutes; rounded up so a job never gets less than it asked.
fn time_arg(ms: i64) -> String {
    format!("--time={}", ms.max(1).saturating_add(59_999) / 60_000)
}

/// A checkpoint signal as sbatch takes it: `B:` for the batch shell, which is the job's command
/// (the script execs it), since Slurm's default signals only job steps and a baton job has none.
pub(super) fn signal_arg(c: baton_core::signal::CheckpointSignal) -> String {
    format!(
        "--signal=B:{}@{}",
        c.signal,
        (c.lead_ms / 1000).clamp(1, 65_535)
    )
}

/// What one job, array element or heterogeneous component asks Slurm for: `--gres` for its
/// GPUs, `--cpus-per-task` and `--mem` (in whole MiB, rounded up: Slurm's unit is the
/// megabyte), and `--time`. Nothing for what it leaves to the cluster's defaults.
fn resource_args(gpus: u32, cpus: u32, mem: u64, time_limit_ms: Option<i64>) -> Vec<String> {
    let mut args = Vec::new();
    if gpus > 0 {
        args.push(format!("--gres=gpu:{gpus}"));
    }
    if cpus > 0 {
        args.push(format!("--cpus-per-task={cpus}"));
    }
    if mem > 0 {
        args.push(format!("--mem={}M", mem.div_ceil(1 << 20)));
    }
    args.extend(time_limit_ms.map(time_arg));
    args
}

/// The GPU part of a job's environment (DESIGN §2), which only the cluster knows: Slurm sets
/// `CUDA_VISIBLE_DEVICES` for the GPUs it gave (none: empty), and baton's `BATON_GPUS` repeats
/// it. The rest of the environment is `executor::job_env`'s.
fn gpu_env(out: &mut String, gpus: u32) {
    out.push_str("export CUDA_DEVICE_ORDER=PCI_BUS_ID\n");
    if gpus == 0 {
        out.push_str("export CUDA_VISIBLE_DEVICES=\n");
    }
    out.push_str("export BATON_GPUS=\"${CUDA_VISIBLE_DEVICES-}\"\n");
}

/// The job's own umask, then its command in place of the script, each word quoted.
fn exec_line(out: &mut String, umask: Option<u32>, command: &[String]) {
    if let Some(mask) = umask {
        out.push_str(&format!("umask {:03o}\n", mask & 0o777));
    }
    out.push_str("exec");
    for word in command {
        out.push(' ');
        out.push_str(&quote(word));
    }
    out.push('\n');
}

/// One word for sh: single-quoted, with `'` written as `'\''`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// One task of an atomic workflow, a component of its heterogeneous job.
pub struct HetTask<'a> {
    pub job: u64,
    pub command: &'a [String],
    pub cwd: &'a str,
    pub gpus: u32,
    /// Cores and bytes of memory (0: the cluster's default).
    pub cpus: u32,
    pub mem: u64,
    /// The task's own directory (`jobs/<id>/`): its output, script and status files.
    pub dir: &'a Path,
    /// Positions (in the task list) of the tasks it runs after.
    pub after: Vec<usize>,
    /// Its environment, exported by its own script (tasks of one workflow may differ).
    pub env: BTreeMap<String, String>,
    pub umask: Option<u32>,
}

/// The files a heterogeneous job's batch script leaves in each task's directory: when the
/// task's step started, on which GPUs and node, and how it ended (`0`, an exit code, or `dep`
/// when a task it runs after did not succeed).
pub const HET_START: &str = "slurm-start";
pub const HET_GPUS: &str = "slurm-gpus";
pub const HET_EXIT: &str = "slurm-exit";
/// What a task's script says when it is a component of a heterogeneous job.
pub const HET_MARKER: &str = "a task of an atomic workflow";

impl Slurm {
    /// Submits an atomic workflow as one heterogeneous job: component K is task K's GPUs, all
    /// allocated at once or not at all; the batch script (in `dir`) starts each task as a job
    /// step on its component once the tasks it runs after have succeeded.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_het(
        &self,
        workflow: u64,
        attempt: u32,
        tasks: &[HetTask<'_>],
        time_limit_ms: Option<i64>,
        dir: &Path,
        env: &BTreeMap<String, String>,
        run_as: Option<&RunAs>,
    ) -> Result<u64, SlurmError> {
        // Slurm gives each component nodes of its own, so a workflow needs a node per task; with
        // fewer it would wait forever.
        let nodes = self.node_count()?;
        if tasks.len() > nodes {
            return Err(SlurmError::Refused(format!(
                "an atomic workflow of {} tasks needs {} nodes (Slurm runs each component of a \
                 heterogeneous job on nodes of its own), and the cluster has {nodes}; make it \
                 smaller or non-atomic",
                tasks.len(),
                tasks.len()
            )));
        }
        let refused = |e: std::io::Error| SlurmError::Refused(format!("cannot write scripts: {e}"));
        std::fs::create_dir_all(dir).map_err(refused)?;
        for t in tasks {
            std::fs::create_dir_all(t.dir).map_err(refused)?;
            for f in [HET_START, HET_GPUS, HET_EXIT] {
                let _ = std::fs::remove_file(t.dir.join(f));
            }
            std::fs::write(t.dir.join("slurm.sh"), het_task_script(t)).map_err(refused)?;
        }
        let script = dir.join("slurm.sh");
        std::fs::write(&script, het_batch_script(tasks)).map_err(refused)?;
        let args = self.het_args(workflow, attempt, tasks, time_limit_ms, dir);
        self.sbatch(args, &script, env, run_as)
    }

    /// `sbatch` arguments of a heterogeneous job: the common options, then one `:`-separated
    /// group per component.
    pub fn het_args(
        &self,
        workflow: u64,
        attempt: u32,
        tasks: &[HetTask<'_>],
        time_limit_ms: Option<i64>,
        dir: &Path,
    ) -> Vec<String> {
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name=baton-w{workflow}"),
            format!("--comment={}", self.het_comment(workflow, attempt)),
            format!("--output={}", dir.join("slurm.out").display()),
            "--export=ALL".to_string(),
        ];
        args.extend(self.site_args());
        for (k, t) in tasks.iter().enumerate() {
            if k > 0 {
                args.push(":".into());
            }
            args.push("--ntasks=1".into());
            args.extend(resource_args(t.gpus, t.cpus, t.mem, time_limit_ms));
        }
        args
    }

    /// How many nodes the partition (or the default one) has.
    fn node_count(&self) -> Result<usize, SlurmError> {
        let mut cmd = self.command("sinfo");
        cmd.args(["-h", "-N", "-o", "%N"]);
        if let Some(p) = &self.settings.partition {
            cmd.arg(format!("--partition={p}"));
        }
        let (ok, stdout, stderr) = self.run(cmd, "sinfo")?;
        if !ok {
            return Err(SlurmError::Unreachable(format!("sinfo: {stderr}")));
        }
        let mut nodes: Vec<&str> = stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        Ok(nodes.len())
    }

    /// Finds an interrupted submission of a workflow's heterogeneous job again.
    pub fn find_het(&self, workflow: u64, attempt: u32) -> Result<Option<u64>, SlurmError> {
        self.find_named(
            &format!("baton-w{workflow}"),
            &self.het_comment(workflow, attempt),
        )
    }

    /// The `--comment` of a workflow's heterogeneous job.
    fn het_comment(&self, workflow: u64, attempt: u32) -> String {
        format!("baton:{}:w{workflow}:{attempt}", self.tag)
    }
}

/// A task's own script, run as a job step on its component: its environment, its GPUs and
/// node recorded for baton, then its command.
fn het_task_script(t: &HetTask<'_>) -> String {
    let mut out = format!("#!/bin/sh\n# baton job {} ({HET_MARKER})\n", t.job);
    for (k, v) in &t.env {
        let valid = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if valid && !k.starts_with("SLURM_") && k != "CUDA_VISIBLE_DEVICES" {
            out.push_str(&format!("export {k}={}\n", quote(v)));
        }
    }
    gpu_env(&mut out, t.gpus);
    let dir = quote(&t.dir.display().to_string());
    out.push_str(&format!(
        "printf '%s\\n%s\\n' \"${{CUDA_VISIBLE_DEVICES-}}\" \"$(hostname)\" > {dir}/{HET_GPUS}\n"
    ));
    out.push_str(&format!("cd {} || exit 1\n", quote(t.cwd)));
    exec_line(&mut out, t.umask, t.command);
    out
}

/// The batch script of a heterogeneous job: one runner per task, each waiting for the tasks it
/// runs after, then starting its step on its own component.
fn het_batch_script(tasks: &[HetTask<'_>]) -> String {
    let mut out = format!(
        "#!/bin/sh\n# an atomic workflow of {} tasks (written by baton; Slurm runs it)\n",
        tasks.len()
    );
    out.push_str(
        "finish() { printf '%s\\n' \"$2\" > \"$1/slurm-exit.tmp\" && mv \"$1/slurm-exit.tmp\" \"$1/slurm-exit\"; }\n",
    );
    for (k, t) in tasks.iter().enumerate() {
        let d = quote(&t.dir.display().to_string());
        out.push_str(&format!("run{k}() {{\n"));
        for &p in &t.after {
            let pd = quote(&tasks[p].dir.display().to_string());
            out.push_str(&format!(
                "  while [ ! -s {pd}/{HET_EXIT} ]; do sleep 0.2; done\n  \
                 [ \"$(cat {pd}/{HET_EXIT})\" = 0 ] || {{ finish {d} dep; return; }}\n"
            ));
        }
        out.push_str(&format!(
            "  date +%s > {d}/{HET_START}\n  \
             srun --het-group={k} --ntasks=1 --export=ALL --output={d}/stdout --error={d}/stderr \
             sh {d}/slurm.sh\n  finish {d} $?\n}}\nrun{k} &\n"
        ));
    }
    out.push_str("wait\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission<'a>(command: &'a [String], dir: &'a Path) -> Submission<'a> {
        Submission {
            job: 7,
            attempt: 1,
            command,
            cwd: "/work",
            gpus: 2,
            cpus: 4,
            mem: (8 << 30) + 1,
            time_limit_ms: Some(90_500),
            signal: Some(baton_core::signal::CheckpointSignal {
                signal: 10,
                lead_ms: 30_000,
            }),
            dependencies: vec!["afterok:12".into(), "afterany:13".into()],
            dir,
            env: BTreeMap::new(),
            umask: Some(0o022),
            mail_to: None,
        }
    }

    #[test]
    fn sbatch_gets_gpus_time_dependencies_and_files() {
        let slurm = Slurm::new(
            BackendSettings {
                kind: BackendKind::Slurm,
                partition: Some("gpu".into()),
                sbatch_args: vec!["--constraint=a100".into()],
                ..BackendSettings::default()
            },
            "h1".into(),
        );
        let command = vec!["python".to_string()];
        let dir = Path::new("/state/jobs/7");
        let args = slurm.sbatch_args(&submission(&command, dir));
        for want in [
            "--parsable",
            "--job-name=baton-7",
            "--comment=baton:h1:7:1",
            "--output=/state/jobs/7/stdout",
            "--error=/state/jobs/7/stderr",
            "--chdir=/work",
            "--gres=gpu:2",
            "--cpus-per-task=4",
            "--mem=8193M",
            "--time=2",
            "--signal=B:10@30",
            "--dependency=afterok:12,afterany:13",
            "--partition=gpu",
            "--constraint=a100",
        ] {
            assert!(
                args.iter().any(|a| a == want),
                "{want} missing from {args:?}"
            );
        }
    }

    #[test]
    fn the_script_quotes_every_word() {
        let command: Vec<String> = ["python", "-c", "print('hi'); $(rm -rf /)", "a b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let dir = Path::new("/d");
        let script = batch_script(&submission(&command, dir));
        assert!(
            script.ends_with("exec 'python' '-c' 'print('\\''hi'\\''); $(rm -rf /)' 'a b'\n"),
            "{script}"
        );
        assert!(script.contains("umask 022"));
        // Run it through sh to be sure the words come out as they went in.
        let echo: Vec<String> = ["printf", "%s|", "print('hi'); $(rm -rf /)", "a b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let script = batch_script(&submission(&echo, dir));
        let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "print('hi'); $(rm -rf /)|a b|"
        );
    }

    #[test]
    fn a_heterogeneous_job_has_a_component_per_task_and_runs_them_in_order() {
        let slurm = Slurm::new(BackendSettings::default(), "h1".into());
        let (a, b) = (Path::new("/s/jobs/1"), Path::new("/s/jobs/2"));
        let cmd = vec!["true".to_string()];
        let task = |job, dir, gpus, after: Vec<usize>| HetTask {
            job,
            command: &cmd,
            cwd: "/w",
            gpus,
            cpus: 1,
            mem: 0,
            dir,
            after,
            env: BTreeMap::from([("BATON_TASK".to_string(), format!("t{job}"))]),
            umask: None,
        };
        let tasks = [task(1, a, 1, vec![]), task(2, b, 2, vec![0])];
        let args = slurm.het_args(3, 1, &tasks, Some(120_000), Path::new("/s/workflows/3"));
        let tail: Vec<&str> = args
            .iter()
            .skip_while(|a| *a != "--ntasks=1")
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            [
                "--ntasks=1",
                "--gres=gpu:1",
                "--cpus-per-task=1",
                "--time=2",
                ":",
                "--ntasks=1",
                "--gres=gpu:2",
                "--cpus-per-task=1",
                "--time=2"
            ]
        );
        assert!(args.contains(&"--comment=baton:h1:w3:1".to_string()));
        let script = het_batch_script(&tasks);
        assert!(script.contains("srun --het-group=0 "), "{script}");
        assert!(script.contains("srun --het-group=1 "), "{script}");
        // Task 2 waits for task 1's exit file and gives up if it failed.
        let run1 = &script[script.find("run1()").unwrap()..];
        assert!(run1.contains("'/s/jobs/1'/slurm-exit"), "{script}");
        assert!(run1.contains("finish '/s/jobs/2' dep"), "{script}");
        let own = het_task_script(&tasks[1]);
        assert!(own.contains("export BATON_TASK='t2'"), "{own}");
        assert!(own.contains(HET_MARKER));
    }
}
