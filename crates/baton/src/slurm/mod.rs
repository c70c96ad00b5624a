//! Driving a real Slurm cluster (DESIGN §8): with `[backend] kind = "slurm"` in config.toml a job
//! becomes an `sbatch` submission instead of a local process, its state comes from `squeue` and
//! `scontrol` (`sacct` once Slurm has forgotten it), and cancel is `scancel`. This module runs
//! those commands and builds what goes into them; `parse` reads what they print; the daemon's
//! `slurm` module decides when to call them.
//!
//! Nothing from a job reaches a shell unquoted: the job's command goes into its batch script as
//! single-quoted words, and every other value is one argument of an exec.

pub mod parse;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::executor::RunAs;
pub use parse::{JobInfo, QueueLine};

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
    pub time_limit_ms: Option<i64>,
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
        // Times as Unix seconds: no time zone to guess.
        cmd.env("SLURM_TIME_FORMAT", "%s")
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
        let mut cmd = self.command("sbatch");
        cmd.args(self.sbatch_args(s)).arg(&script);
        // The job's environment is sbatch's, exported whole; Slurm sets the GPUs.
        cmd.env_clear().envs(&s.env).env("SLURM_TIME_FORMAT", "%s");
        for var in ["SLURM_CONF", "MUNGE_SOCKET"] {
            if let Some(v) = std::env::var_os(var)
                && !s.env.contains_key(var)
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
        if s.gpus > 0 {
            args.push(format!("--gres=gpu:{}", s.gpus));
        }
        if let Some(ms) = s.time_limit_ms {
            // Slurm counts whole minutes; round up so a job never gets less than it asked.
            args.push(format!("--time={}", (ms.max(1) + 59_999) / 60_000));
        }
        if !s.dependencies.is_empty() {
            args.push(format!("--dependency={}", s.dependencies.join(",")));
        }
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
        if let Some(to) = &s.mail_to {
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

    /// Jobs of this daemon whose name is `baton-JOB`, any state: finds an interrupted
    /// submission again.
    pub fn find(&self, job: u64, attempt: u32) -> Result<Option<u64>, SlurmError> {
        let mut cmd = self.command("squeue");
        cmd.args(["-h", "-t", "all", "-o", parse::QUEUE_FORMAT])
            .arg(format!("--name=baton-{job}"));
        let (ok, stdout, stderr) = self.run(cmd, "squeue")?;
        if !ok {
            return Err(SlurmError::Unreachable(format!("squeue: {stderr}")));
        }
        let comment = self.comment(job, attempt);
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

    /// The accounting record of a job Slurm's controller has forgotten (needs slurmdbd).
    pub fn accounting(&self, id: u64) -> Result<Option<JobInfo>, SlurmError> {
        let mut cmd = self.command("sacct");
        cmd.args(["-n", "-P", "-X", "-o", parse::SACCT_FORMAT, "-j"])
            .arg(id.to_string());
        let (ok, stdout, _) = self.run(cmd, "sacct")?;
        Ok(if ok { parse::accounting(&stdout) } else { None })
    }

    /// `scancel`: SIGTERM to the job, SIGKILL after the cluster's KillWait.
    pub fn cancel(&self, id: u64, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
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
    out.push_str("export CUDA_DEVICE_ORDER=PCI_BUS_ID\n");
    if s.gpus == 0 {
        out.push_str("export CUDA_VISIBLE_DEVICES=\n");
    }
    out.push_str("export BATON_GPUS=\"${CUDA_VISIBLE_DEVICES-}\"\n");
    if let Some(mask) = s.umask {
        out.push_str(&format!("umask {:03o}\n", mask & 0o777));
    }
    out.push_str("exec");
    for word in s.command {
        out.push(' ');
        out.push_str(&quote(word));
    }
    out.push('\n');
    out
}

/// One word for sh: single-quoted, with `'` written as `'\''`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
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
            time_limit_ms: Some(90_500),
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
            "--time=2",
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
}
