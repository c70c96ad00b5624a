//! A sweep's runs as one Slurm job array (`sbatch --array=INDICES%K`): the batch script, the
//! `sbatch` arguments, the cluster's `MaxArraySize` check, and the element scripts that say, in
//! each run's own directory, which array task it is (read back after a restart).
//!
//! The runs of one submission share their resources, directory and umask (they come from one
//! `baton submit`), so those are the array's. What differs per run (its command, already filled
//! in, and its environment: `BATON_JOB_ID`, `BATON_PARAM_*`, ...) is one branch of a `case` on
//! `$SLURM_ARRAY_TASK_ID`, every value single-quoted. Each branch sends the run's output to its
//! own `jobs/ID/stdout` and `stderr`, where the local backend has them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use baton_core::Millis;

use super::{RunAs, Slurm, SlurmError, gpu_env, parse, quote, resource_args};

/// A run's script (`jobs/ID/slurm.sh`) says it is an array element with this line, then its
/// task: `# slurm-array-task: 4`.
pub const ARRAY_TASK_LINE: &str = "# slurm-array-task: ";

/// One run: an element of the array.
pub struct ArrayElement<'a> {
    pub job: u64,
    /// Its array task: the run's index in its sweep.
    pub task: u32,
    pub command: &'a [String],
    /// The run's directory (`jobs/<id>/`): its output and its element script.
    pub dir: &'a Path,
    /// What its branch exports: the variables that are its own (`common` has the rest).
    pub env: BTreeMap<String, String>,
}

/// One `sbatch --array` to make.
pub struct ArraySubmission<'a> {
    pub sweep: u64,
    /// When the submission began: it names the submission (`--comment`), so that a restarted
    /// daemon finds an interrupted one again.
    pub since: Millis,
    pub elements: Vec<ArrayElement<'a>>,
    /// `%K`: how many elements may run at once.
    pub max_parallel: Option<u32>,
    pub cwd: &'a str,
    pub gpus: u32,
    pub cpus: u32,
    pub mem: u64,
    pub time_limit_ms: Option<i64>,
    /// The runs' checkpoint signal (`--signal`), passed on as sbatch's.
    pub signal: Option<baton_core::signal::CheckpointSignal>,
    pub dependencies: Vec<String>,
    pub umask: Option<u32>,
    /// The environment `sbatch` runs in (exported to every element with `--export=ALL`).
    pub env: BTreeMap<String, String>,
    /// baton's variables that every run has alike (`BATON_SWEEP_ID`, `BATON_CPUS`, ...),
    /// exported once before the branches: a big sweep's script stays small (Slurm refuses a
    /// batch script over its `max_script_size`, 4 MB by default).
    pub common: BTreeMap<String, String>,
    /// Where the batch script goes.
    pub script: &'a Path,
    pub mail_to: Option<String>,
}

impl Slurm {
    /// The `--comment` of a sweep's array submission.
    pub fn array_comment(&self, sweep: u64, since: Millis) -> String {
        format!("baton:{}:s{sweep}:{since}", self.tag)
    }

    /// Refuses an array the cluster cannot take, then writes the element scripts and the batch
    /// script and runs `sbatch --array`; returns the array's job id.
    pub fn submit_array(
        &self,
        s: &ArraySubmission<'_>,
        run_as: Option<&RunAs>,
    ) -> Result<u64, SlurmError> {
        let largest = s.elements.iter().map(|e| e.task).max().unwrap_or(0);
        if let Some(limit) = self.max_array_size()?
            && largest >= limit
        {
            return Err(SlurmError::Refused(format!(
                "the sweep's largest array index is {largest}, and the cluster's MaxArraySize is \
                 {limit} (Slurm array indices must be below it); use smaller indices or fewer runs"
            )));
        }
        let refused = |e: std::io::Error| SlurmError::Refused(format!("cannot write scripts: {e}"));
        for e in &s.elements {
            std::fs::create_dir_all(e.dir).map_err(refused)?;
            std::fs::write(e.dir.join("slurm.sh"), element_script(s, e)).map_err(refused)?;
        }
        if let Some(dir) = s.script.parent() {
            std::fs::create_dir_all(dir).map_err(refused)?;
        }
        std::fs::write(s.script, array_script(s)).map_err(refused)?;
        self.sbatch(self.array_args(s), s.script, &s.env, run_as)
    }

    /// The arguments of `sbatch --array` before the script.
    pub fn array_args(&self, s: &ArraySubmission<'_>) -> Vec<String> {
        let tasks: Vec<u32> = s.elements.iter().map(|e| e.task).collect();
        let mut args = vec![
            "--parsable".to_string(),
            format!("--array={}", array_spec(&tasks, s.max_parallel)),
            format!("--job-name=baton-s{}", s.sweep),
            format!("--comment={}", self.array_comment(s.sweep, s.since)),
            // Each branch sends its run's output to the run's own files; what Slurm itself
            // would write there (the batch step's) has no run to belong to.
            "--output=/dev/null".to_string(),
            format!("--chdir={}", s.cwd),
            "--export=ALL".to_string(),
            "--kill-on-invalid-dep=yes".to_string(),
        ];
        args.extend(resource_args(s.gpus, s.cpus, s.mem, s.time_limit_ms));
        args.extend(s.signal.map(super::signal_arg));
        // The mail comes once, when the whole array has ended and the sweep's one report is
        // due. Not once per element (`ARRAY_TASKS`): slurmctld would start the mail program
        // once per run (300 processes for 300 runs); the runs' own ends are seen by polling.
        args.extend(self.dependency_site_and_mail_args(&s.dependencies, s.mail_to.as_deref()));
        args
    }

    /// `MaxArraySize` from `scontrol show config`; `None` when it does not say.
    fn max_array_size(&self) -> Result<Option<u32>, SlurmError> {
        let mut cmd = self.command("scontrol");
        cmd.args(["show", "config"]);
        let (ok, stdout, stderr) = self.run(cmd, "scontrol show config")?;
        if !ok {
            return Err(SlurmError::Unreachable(format!("scontrol: {stderr}")));
        }
        Ok(parse::max_array_size(&stdout))
    }

    /// Finds an interrupted array submission again, by its name and comment.
    pub fn find_array(&self, sweep: u64, since: Millis) -> Result<Option<u64>, SlurmError> {
        self.find_named(
            &format!("baton-s{sweep}"),
            &self.array_comment(sweep, since),
        )
    }
}

/// `--array=`'s value: the tasks as ranges (`0-5`, `1,3,5-7`), then `%K`.
pub fn array_spec(tasks: &[u32], max_parallel: Option<u32>) -> String {
    let mut tasks = tasks.to_vec();
    tasks.sort_unstable();
    tasks.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < tasks.len() {
        let mut j = i;
        while j + 1 < tasks.len() && tasks[j + 1] == tasks[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j == i {
            let _ = write!(out, "{}", tasks[i]);
        } else {
            let _ = write!(out, "{}-{}", tasks[i], tasks[j]);
        }
        i = j + 1;
    }
    if let Some(k) = max_parallel {
        let _ = write!(out, "%{k}");
    }
    out
}

/// What one element runs: its output to its own files, its own variables, its umask, then its
/// command in place of the shell.
fn element_body(out: &mut String, s: &ArraySubmission<'_>, e: &ArrayElement<'_>) {
    let dir = e.dir.display().to_string();
    let _ = writeln!(
        out,
        "exec >{} 2>{}",
        quote(&format!("{dir}/stdout")),
        quote(&format!("{dir}/stderr"))
    );
    exports(out, &e.env);
    super::exec_line(out, s.umask, e.command);
}

/// `export NAME='VALUE'` for each variable a script may set: Slurm's own (the task id) and the
/// GPUs are the cluster's to say.
fn exports(out: &mut String, env: &BTreeMap<String, String>) {
    for (k, v) in env {
        if valid_name(k) && !k.starts_with("SLURM_") && k != "CUDA_VISIBLE_DEVICES" {
            let _ = writeln!(out, "export {k}={}", quote(v));
        }
    }
}

/// A variable name sh accepts in `export NAME=...`.
fn valid_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The array's batch script: the GPUs, then one branch per task.
pub fn array_script(s: &ArraySubmission<'_>) -> String {
    let mut out = format!(
        "#!/bin/sh\n# baton sweep {}: {} runs as one Slurm array (written by baton; Slurm runs it)\n",
        s.sweep,
        s.elements.len()
    );
    gpu_env(&mut out, s.gpus);
    exports(&mut out, &s.common);
    out.push_str("case \"$SLURM_ARRAY_TASK_ID\" in\n");
    for e in &s.elements {
        let _ = writeln!(out, "{})", e.task);
        element_body(&mut out, s, e);
        out.push_str(";;\n");
    }
    out.push_str(
        "*) echo \"baton: no run for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 1 ;;\nesac\n",
    );
    out
}

/// A run's own view of its branch (`jobs/ID/slurm.sh`): what it runs, and which task it is.
fn element_script(s: &ArraySubmission<'_>, e: &ArrayElement<'_>) -> String {
    let mut out = format!(
        "#!/bin/sh\n# baton job {}: an element of sweep {}'s Slurm array ({})\n{ARRAY_TASK_LINE}{}\n",
        e.job,
        s.sweep,
        s.script.display(),
        e.task
    );
    gpu_env(&mut out, s.gpus);
    exports(&mut out, &s.common);
    element_body(&mut out, s, e);
    out
}

/// The array task a run's script names, if it went to Slurm as an array element.
pub fn task_of_script(script: &str) -> Option<u32> {
    script
        .lines()
        .find_map(|l| l.strip_prefix(ARRAY_TASK_LINE))
        .and_then(|t| t.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::slurm::BackendSettings;
    use std::process::Command;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    fn submission<'a>(elements: Vec<ArrayElement<'a>>, script: &'a Path) -> ArraySubmission<'a> {
        ArraySubmission {
            sweep: 3,
            since: 1234,
            elements,
            max_parallel: Some(2),
            cwd: "/w",
            gpus: 1,
            cpus: 2,
            mem: 0,
            time_limit_ms: Some(60_000),
            signal: None,
            dependencies: vec!["afterok:9".into()],
            umask: Some(0o027),
            env: BTreeMap::new(),
            common: BTreeMap::from([("BATON_SWEEP_ID".to_string(), "3".to_string())]),
            script,
            mail_to: Some("/s/baton.sock".into()),
        }
    }

    #[test]
    fn the_array_spec_is_ranges_then_the_cap() {
        assert_eq!(array_spec(&[0, 1, 2, 3, 4, 5], Some(2)), "0-5%2");
        assert_eq!(array_spec(&[7, 1, 3, 5, 6], None), "1,3,5-7");
        assert_eq!(array_spec(&[4], None), "4");
        assert_eq!(array_spec(&[0, 2, 4, 6], Some(2)), "0,2,4,6%2");
    }

    #[test]
    fn sbatch_gets_one_array_with_its_cap_name_and_comment() {
        let slurm = Slurm::new(BackendSettings::default(), "h1".into());
        let cmd = words(&["true"]);
        let dir = Path::new("/s/jobs/1");
        let elements = (0..6)
            .map(|t| ArrayElement {
                job: 10 + t as u64,
                task: t,
                command: &cmd,
                dir,
                env: BTreeMap::new(),
            })
            .collect();
        let args = slurm.array_args(&submission(elements, Path::new("/s/sweeps/3/a.sh")));
        for want in [
            "--array=0-5%2",
            "--job-name=baton-s3",
            "--comment=baton:h1:s3:1234",
            "--gres=gpu:1",
            "--cpus-per-task=2",
            "--time=1",
            "--dependency=afterok:9",
            "--mail-type=END,FAIL",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
        }
    }

    /// A parameter value with `'`, `$`, spaces and a newline reaches the run verbatim, each
    /// run gets its own branch and output files, and a task with no run fails.
    #[test]
    fn each_task_runs_its_own_command_and_environment_verbatim() {
        let tmp = std::env::temp_dir().join(format!("baton-array-{}", std::process::id()));
        let (a, b) = (tmp.join("jobs/1"), tmp.join("jobs/2"));
        let nasty = "it's $HOME `id` $(echo no)\n  two  spaces";
        let cmd_a = words(&[
            "sh",
            "-c",
            "printf '%s|%s|%s' \"$BATON_PARAM_LR\" \"$1\" \"$BATON_SWEEP_ID\"",
            "-",
            nasty,
        ]);
        let cmd_b = words(&["printf", "%s", "b"]);
        let elements = vec![
            ArrayElement {
                job: 1,
                task: 0,
                command: &cmd_a,
                dir: &a,
                env: BTreeMap::from([
                    ("BATON_PARAM_LR".to_string(), nasty.to_string()),
                    ("SLURM_ARRAY_TASK_ID".to_string(), "999".to_string()),
                    ("BAD NAME".to_string(), "x".to_string()),
                ]),
            },
            ArrayElement {
                job: 2,
                task: 7,
                command: &cmd_b,
                dir: &b,
                env: BTreeMap::new(),
            },
        ];
        let script_path = tmp.join("sweeps/3/array.sh");
        let s = submission(elements, &script_path);
        let script = array_script(&s);
        for e in &s.elements {
            std::fs::create_dir_all(e.dir).unwrap();
            std::fs::write(e.dir.join("slurm.sh"), element_script(&s, e)).unwrap();
        }
        let run = |task: &str| {
            Command::new("sh")
                .arg("-c")
                .arg(&script)
                .env("SLURM_ARRAY_TASK_ID", task)
                .status()
                .unwrap()
        };
        assert!(run("0").success());
        assert_eq!(
            std::fs::read_to_string(a.join("stdout")).unwrap(),
            format!("{nasty}|{nasty}|3")
        );
        assert!(run("7").success());
        assert_eq!(std::fs::read_to_string(b.join("stdout")).unwrap(), "b");
        assert!(!run("3").success(), "no run has task 3");
        assert!(!script.contains("BAD NAME"), "{script}");
        assert!(!script.contains("999"), "Slurm sets the task id: {script}");
        assert!(script.contains("umask 027"), "{script}");
        let own = std::fs::read_to_string(b.join("slurm.sh")).unwrap();
        assert_eq!(task_of_script(&own), Some(7));
        assert_eq!(task_of_script("#!/bin/sh\nexec true\n"), None);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
