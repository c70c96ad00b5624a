use super::*;

fn err(text: &str) -> String {
    parse(text).map(|_| ()).unwrap_err().to_string()
}

#[track_caller]
fn assert_err(text: &str, at: &str, needle: &str) {
    let e = err(text);
    assert!(e.starts_with(at), "expected {at}, got {e:?}");
    assert!(e.contains(needle), "expected {needle:?} in {e:?}");
}

fn strings(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_grid_file_means_what_the_flags_mean() {
    let file = parse(
        "# a sweep\n\
         sweep:\n  \
           name: lr-bs\n  \
           command: python train.py --lr {lr} --bs {bs} --out runs/{index}\n  \
           parameters:\n    \
             lr: [1e-4, 3e-4]\n    \
             bs: [32, 64]\n  \
           gpus: 1\n  \
           gpu_mem: 20GiB\n  \
           cpus: 4\n  \
           mem: 8GiB\n  \
           time_limit: 1h30m\n  \
           retries: 2\n  \
           priority: -3\n  \
           env: {WANDB_MODE: offline, SEED: 7}\n  \
           cwd: exp\n  \
           max_parallel: 2\n  \
           rank_by: loss:min\n  \
           on_failure: stop\n  \
           notify_each: true\n  \
           stop_on: [nan, stall]\n  \
           wake_on: ['Epoch \\d+ done']\n  \
           wake_when: [val_acc>=0.9]\n  \
           note_when: [epoch>=1]\n  \
           stop_when: ['loss>10']\n  \
           wake_every: 2h\n",
    )
    .unwrap();
    assert_eq!(file.name.as_deref(), Some("lr-bs"));
    // A string is a shell command, as in workflow files.
    assert_eq!(
        file.command,
        strings(&[
            "sh",
            "-c",
            "python train.py --lr {lr} --bs {bs} --out runs/{index}"
        ])
    );
    // Values as written, parameters in the order written (the product's order).
    assert_eq!(
        file.runs,
        FileRuns::Grid(vec![
            ("lr".into(), strings(&["1e-4", "3e-4"])),
            ("bs".into(), strings(&["32", "64"])),
        ])
    );
    assert_eq!(
        (file.gpus, file.gpu_mem, file.cpus, file.mem),
        (1, Some(20 << 30), Some(4), Some(8 << 30))
    );
    assert_eq!(file.time_limit, Some(90 * 60 * 1000));
    assert_eq!((file.retries, file.priority), (2, -3));
    assert_eq!(file.env["SEED"], "7");
    assert_eq!(file.env["WANDB_MODE"], "offline");
    assert_eq!(file.cwd.as_deref(), Some("exp"));
    assert_eq!(file.max_parallel, Some(2));
    assert_eq!(file.rank_by.as_deref(), Some("loss:min"));
    assert_eq!(file.on_failure.as_deref(), Some("stop"));
    assert!(file.notify_each);
    assert_eq!(file.stop_on, strings(&["nan", "stall"]));
    assert_eq!(file.wake_on, strings(&["Epoch \\d+ done"]));
    assert_eq!(file.wake_when, strings(&["val_acc>=0.9"]));
    assert_eq!(file.note_when, strings(&["epoch>=1"]));
    assert_eq!(file.stop_when, strings(&["loss>10"]));
    assert_eq!(file.wake_every, Some(2 * 3_600_000));
}

#[test]
fn runs_and_arrays_and_the_defaults() {
    let file = parse(
        "sweep:\n  command: [python, train.py, --lr, \"{lr}\"]\n  runs:\n    - {lr: 3e-4, warm: true}\n    - lr: 1e-3\n",
    )
    .unwrap();
    assert_eq!(
        file.command,
        strings(&["python", "train.py", "--lr", "{lr}"])
    );
    assert_eq!(
        file.runs,
        FileRuns::Runs(vec![
            vec![("lr".into(), "3e-4".into()), ("warm".into(), "true".into())],
            vec![("lr".into(), "1e-3".into())],
        ])
    );
    assert_eq!(
        (file.gpus, file.retries, file.priority, file.notify_each),
        (0, 0, 0, false)
    );
    assert_eq!(
        (file.name, file.max_parallel, file.time_limit),
        (None, None, None)
    );

    let file = parse("sweep:\n  command: [echo, \"{index}\"]\n  array: 0-99%4\n").unwrap();
    assert_eq!(file.runs, FileRuns::Array("0-99%4".into()));
    // The array's %K and max_parallel may both be given when they agree.
    assert!(parse("sweep:\n  command: [true]\n  array: 0-9%2\n  max_parallel: 2\n").is_ok());
    // One index, written as a number.
    assert_eq!(
        parse("sweep:\n  command: [true]\n  array: 7\n")
            .unwrap()
            .runs,
        FileRuns::Array("7".into())
    );
}

#[test]
fn an_unknown_key_is_placed_and_the_known_keys_listed() {
    let e = err("sweep:\n  command: echo {lr}\n  parameters:\n    lr: [1e-4]\n  gpu: 1\n");
    assert!(
        e.starts_with("5:3: sweep: unknown field `gpu`, expected one of"),
        "{e}"
    );
    for key in KEYS {
        assert!(e.contains(&format!("`{key}`")), "{key} missing from {e}");
    }
    assert_err(
        "other: 1\n",
        "1:1:",
        "unknown field `other`, expected `sweep`",
    );
    assert_err(
        "sweep:\n  command: [true]\n  array: 0-3\nextra: 1\n",
        "4:1:",
        "unknown field `extra`",
    );
}

#[test]
fn values_of_the_wrong_type_are_placed() {
    let base = "sweep:\n  command: echo {lr}\n  parameters:\n    lr: [1e-4]\n";
    assert_err(
        &format!("{base}  gpus: two\n"),
        "5:9:",
        "sweep.gpus: invalid type: string \"two\", expected a whole number >= 0",
    );
    assert_err(
        &format!("{base}  priority: high\n"),
        "5:13:",
        "expected a whole number",
    );
    assert_err(
        &format!("{base}  notify_each: maybe\n"),
        "5:16:",
        "expected a boolean",
    );
    assert_err(
        &format!("{base}  env: {{A: [1]}}\n"),
        "5:12:",
        "sweep.env.A",
    );
    assert_err(&format!("{base}  env: [A]\n"), "5:8:", "sweep.env");
    assert_err(
        "sweep: 3\n",
        "1:8:",
        "expected a sweep: a mapping with `command`",
    );
    assert_err(
        "sweep:\n  command: {a: 1}\n  array: 0-3\n",
        "2:12:",
        "a list of strings, or a string run by `sh -c`",
    );
    assert_err(
        "sweep:\n  command: echo\n  parameters: [lr]\n",
        "3:15:",
        "expected a mapping from parameter names to lists of values",
    );
    assert_err(
        "sweep:\n  command: echo\n  parameters:\n    lr: 3\n",
        "4:9:",
        "expected a list of values",
    );
    assert_err(
        "sweep:\n  command: echo {lr}\n  parameters:\n    lr: [[1]]\n",
        "4:10:",
        "sweep.parameters.lr[0]: invalid type: sequence, expected a string, number or boolean",
    );
    assert_err(
        "sweep:\n  command: echo {lr}\n  runs:\n    - lr: 1\n    - lr: {a: 1}\n",
        "5:11:",
        "sweep.runs[1].lr: invalid type: map",
    );
    assert_err(
        "sweep:\n  command: echo\n  runs:\n    - 3\n",
        "4:7:",
        "expected a run: a mapping of parameters",
    );
    assert_err(
        "sweep:\n  command: echo\n  runs: {lr: 1}\n",
        "3:9:",
        "expected a list of runs",
    );
    assert_err(
        "sweep:\n  command: echo\n  array: [0, 1]\n",
        "3:10:",
        "sweep.array: invalid type: sequence",
    );
    // The YAML itself.
    assert_err(
        "sweep:\n  command: echo\n  array: 0-3\n  name: x\n\tgpus: 1\n",
        "5:1:",
        "tab character",
    );
    assert_err(
        "sweep:\n  command: [true]\n  array: 0-3\n  array: 0-4\n",
        "4:3:",
        "duplicate field `array`",
    );
}

#[test]
fn exactly_one_of_parameters_runs_or_array() {
    assert_err(
        "# header\nsweep:\n  command: echo\n  gpus: 1\n",
        "2:1:",
        "sweep: give one of `parameters`",
    );
    assert_err(
        "sweep:\n  command: echo {lr}\n  parameters:\n    lr: [1]\n  array: 0-3\n",
        "5:3:",
        "array: give only one of `parameters`, `runs` or `array`; `parameters` is given too",
    );
    assert_err(
        "sweep:\n  command: echo {lr}\n  runs:\n    - lr: 1\n  parameters:\n    lr: [1]\n",
        "5:3:",
        "runs` is given too",
    );
}

#[test]
fn empty_lists_and_files_are_refused() {
    assert_err(
        "sweep:\n  command: echo\n  parameters:\n    lr: []\n",
        "4:9:",
        "sweep.parameters.lr: a parameter needs at least one value",
    );
    assert_err(
        "sweep:\n  command: echo\n  parameters: {}\n",
        "3:15:",
        "give at least one parameter",
    );
    assert_err(
        "sweep:\n  command: echo\n  runs: []\n",
        "3:9:",
        "the list of runs is empty",
    );
    assert_err("# nothing\n\n", "1:1:", "the file is empty");
    assert_err("sweep:\n  array: 0-3\n", "1:1:", "sweep: missing `command`");
    assert_err(
        "sweep:\n  command: \"  \"\n  array: 0-3\n",
        "2:3:",
        "command: the command is empty",
    );
    assert_err(
        "sweep:\n  command: []\n  array: 0-3\n",
        "2:3:",
        "command: the command is empty",
    );
    let big = format!(
        "sweep:\n  command: x\n  array: 0-1\n#{}\n",
        "x".repeat(MAX_FILE_BYTES)
    );
    assert_err(&big, "1:1:", "a sweep file may be at most 4 MiB");
}

#[test]
fn bad_parameter_names_are_placed_at_the_name() {
    assert_err(
        "sweep:\n  command: echo\n  parameters:\n    1lr: [1]\n",
        "4:5:",
        "parameter name \"1lr\": use letters, digits and `_`",
    );
    assert_err(
        "sweep:\n  command: echo\n  parameters:\n    lr: [1]\n    lr: [2]\n",
        "5:5:",
        "parameter lr is given twice",
    );
    assert_err(
        "sweep:\n  command: echo\n  parameters:\n    lr: [1]\n    LR: [2]\n",
        "5:5:",
        "parameters lr and LR would both set BATON_PARAM_LR",
    );
    assert_err(
        "sweep:\n  command: echo\n  runs:\n    - {lr: 1}\n    - {l-r: 2}\n",
        "5:8:",
        "parameter name \"l-r\"",
    );
}

#[test]
fn placeholders_must_be_parameters() {
    // Placed at the command, naming what the sweep has.
    assert_err(
        "sweep:\n  name: x\n  command: python train.py --lr {lrr}\n  parameters:\n    lr: [1]\n",
        "3:3:",
        "command: {lrr} is no parameter of this sweep (it has {index}, {lr})",
    );
    assert_err(
        "sweep:\n  command: [echo, \"{lr}\"]\n  array: 0-3\n",
        "2:3:",
        "{lr} is no parameter of this sweep (it has {index})",
    );
    assert_err(
        "sweep:\n  command: echo {lr\n  parameters:\n    lr: [1]\n",
        "2:3:",
        "command: a `{` is never closed",
    );
    // A run without the parameter is placed at the run.
    assert_err(
        "sweep:\n  command: echo {lr} {bs}\n  runs:\n    - {lr: 1, bs: 2}\n    - lr: 3\n      warm: true\n",
        "5:5:",
        "runs: run 1 has no parameter bs, which the command's {bs} needs",
    );
    // A flow list of runs: at the `runs:` key.
    assert_err(
        "sweep:\n  command: echo {bs}\n  runs: [{lr: 1}]\n",
        "3:3:",
        "run 0 has no parameter bs",
    );
    // The shell's ${...}, escapes, and braces holding no name are not placeholders.
    let ok = parse(
        "sweep:\n  command: \"echo ${HOME} {{lr}} '{\\\"a\\\": 1}' {lr} {index}\"\n  parameters:\n    lr: [1]\n",
    );
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn bad_values_are_placed_at_their_key() {
    let base = "sweep:\n  command: [true]\n  array: 0-3\n";
    assert_err(
        "sweep:\n  command: [true]\n  array: 9-1\n",
        "3:3:",
        "array: cannot read \"9-1\": expected START-END",
    );
    assert_err(&format!("{base}  gpu_mem: lots\n"), "4:3:", "gpu_mem: ");
    assert_err(&format!("{base}  mem: 8XB\n"), "4:3:", "mem: ");
    assert_err(
        &format!("{base}  time_limit: soon\n"),
        "4:3:",
        "time_limit: ",
    );
    assert_err(
        &format!("{base}  max_parallel: 0\n"),
        "4:3:",
        "max_parallel: must be at least 1",
    );
    assert_err(
        "sweep:\n  command: [true]\n  array: 0-3%2\n  max_parallel: 3\n",
        "4:3:",
        "max_parallel: 3 disagrees with the array's %2",
    );
    assert_err(
        &format!("{base}  rank_by: \"val acc\"\n"),
        "4:3:",
        "rank_by: cannot read",
    );
    assert_err(
        &format!("{base}  on_failure: halt\n"),
        "4:3:",
        "on_failure: \"halt\": use continue",
    );
    assert_err(
        &format!("{base}  stop_on: [nan, stal]\n"),
        "4:3:",
        "stop_on: \"stal\": no such detector (there are: nan, error, stall, finished-but-alive, slow)",
    );
    assert_err(
        &format!("{base}  stop_when: ['loss>>1']\n"),
        "4:3:",
        "stop_when: --stop-when 'loss>>1': \">1\" is not a number",
    );
    assert_err(
        &format!("{base}  wake_on: ['(']\n"),
        "4:3:",
        "wake_on: --wake-on '(': regex parse error",
    );
    assert_err(
        &format!("{base}  wake_every: soon\n"),
        "4:3:",
        "wake_every: \"soon\":",
    );
    assert_err(
        &format!("{base}  name: \"\"\n"),
        "4:3:",
        "name: the name must not be empty",
    );
    assert_err(&format!("{base}  env: {{\"A=B\": x}}\n"), "4:3:", "env: ");
    assert_err(&format!("{base}  cwd: \"a\\0b\"\n"), "4:3:", "cwd: ");
}
