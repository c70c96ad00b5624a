//! Parsing and checking workflow files: real-shaped files, one per error, with the exact message.

use super::*;

/// A file from its lines, so a test's line numbers are the array positions plus one.
fn file(lines: &[&str]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// The message `parse` gives for the file made of `lines`.
fn error(lines: &[&str]) -> String {
    match parse(&file(lines)) {
        Ok(spec) => panic!("expected an error, parsed {spec:?}"),
        Err(err) => err.to_string(),
    }
}

const GIB: u64 = 1 << 30;

#[test]
fn the_design_example_parses_completely() {
    let text = file(&[
        "# From DESIGN §6.",
        "name: caption-pipeline",
        "atomic: true            # admit all tasks at once or none (gang); default false",
        "tasks:",
        "  classify: {command: [\"python\", \"classify.py\"], gpus: 1, gpu_mem: 4GiB, time_limit: 10m}",
        "  tags:     {command: [\"python\", \"tags.py\"], gpus: 1, gpu_mem: 8GiB, after: [classify]}",
        "  copy:     {command: \"python write.py --in out/tags.json\", gpus: 1, gpu_mem: 16GiB, after: [tags], retries: 2}",
    ]);
    let spec = parse(&text).unwrap();
    let task = |name: &str, command: &[&str], mem: u64, after: &[&str], line: usize| TaskSpec {
        name: name.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        request: ResourceRequest::shared(1, mem),
        cpus: None,
        mem: None,
        time_limit: None,
        after: after.iter().map(|s| s.to_string()).collect(),
        retries: 0,
        env: BTreeMap::new(),
        cwd: None,
        priority: None,
        colocate_with: vec![],
        line,
        column: 3,
        params: vec![],
        matrix_of: None,
    };
    let mut classify = task("classify", &["python", "classify.py"], 4 * GIB, &[], 5);
    classify.time_limit = Some(600_000);
    let tags = task("tags", &["python", "tags.py"], 8 * GIB, &["classify"], 6);
    let mut copy = task(
        "copy",
        &["sh", "-c", "python write.py --in out/tags.json"],
        16 * GIB,
        &["tags"],
        7,
    );
    copy.retries = 2;
    assert_eq!(
        spec,
        WorkflowSpec {
            name: "caption-pipeline".into(),
            atomic: true,
            priority: None,
            tasks: vec![classify, tags, copy],
        }
    );
    // The spec crosses to the store and the API as JSON.
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<WorkflowSpec>(&json).unwrap(), spec);
    let dag = spec.dag().unwrap();
    assert_eq!(dag.topological_order(), [0, 1, 2]);
    assert_eq!(spec.task_index("copy"), Some(2));
    assert_eq!(spec.task_index("nope"), None);
}

#[test]
fn every_task_field_in_block_style() {
    let spec = parse(&file(&[
        "name: train-eval",
        "priority: 5",
        "tasks:",
        "  # Written out of dependency order on purpose: the written order is kept.",
        "  eval:",
        "    command:",
        "      - python",
        "      - eval.py",
        "    after: train          # one name needs no brackets",
        "    colocate_with: [train]",
        "    env: {CUDA_LAUNCH_BLOCKING: 1, RUN: eval}",
        "  train:",
        "    command: |",
        "      python train.py --epochs 3",
        "    gpus: 2",
        "    time_limit: 1h30m",
        "    retries: 1",
        "    cwd: /data/runs",
        "    priority: -3",
        "    after: [prep, prep]",
        "  prep:",
        "    command: [make, data]",
        "    gpu_mem: 512MiB",
    ]))
    .unwrap();
    assert_eq!(
        (spec.name.as_str(), spec.atomic, spec.priority),
        ("train-eval", false, Some(5))
    );
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["eval", "train", "prep"]);
    let [eval, train, prep] = &spec.tasks[..] else {
        panic!("three tasks")
    };
    assert_eq!(eval.command, ["python", "eval.py"]);
    assert_eq!(eval.after, ["train"]);
    assert_eq!(eval.colocate_with, ["train"]);
    assert_eq!(
        eval.env,
        BTreeMap::from([
            ("CUDA_LAUNCH_BLOCKING".to_string(), "1".to_string()),
            ("RUN".to_string(), "eval".to_string())
        ])
    );
    assert_eq!(eval.request, ResourceRequest::whole(0));
    assert_eq!((eval.line, eval.column), (5, 3));
    assert_eq!(train.command, ["sh", "-c", "python train.py --epochs 3\n"]);
    assert_eq!(train.request, ResourceRequest::whole(2));
    assert_eq!(train.time_limit, Some(5_400_000));
    assert_eq!((train.retries, train.priority), (1, Some(-3)));
    assert_eq!(train.cwd.as_deref(), Some("/data/runs"));
    assert_eq!(train.after, ["prep"], "repeats are dropped");
    assert_eq!(train.line, 12);
    // Memory without a count: one shared GPU, as `baton submit --gpu-mem` does.
    assert_eq!(prep.request, ResourceRequest::shared(1, 512 << 20));
    assert_eq!(prep.line, 21);
    // Topological order follows the dependencies, not the order written.
    assert_eq!(spec.dag().unwrap().topological_order(), [2, 1, 0]);
}

#[test]
fn gpu_requests_read_like_baton_submit() {
    let request = |fields: &str| {
        parse(&file(&[
            "name: w",
            "tasks:",
            &format!("  t: {{command: [x]{fields}}}"),
        ]))
        .unwrap()
        .tasks[0]
            .request
    };
    assert_eq!(request(""), ResourceRequest::whole(0));
    let host = |fields: &str| {
        parse(&file(&[
            "name: w",
            "tasks:",
            &format!("  t: {{command: [x]{fields}}}"),
        ]))
        .map(|spec| spec.tasks[0].request_with(1, 0))
        .map_err(|e| e.to_string())
    };
    assert_eq!(host(""), Ok(ResourceRequest::whole(0).with_host(1, 0)));
    assert_eq!(
        host(", gpus: 1, cpus: 8, mem: 32GiB"),
        Ok(ResourceRequest::whole(1).with_host(8, 32 * GIB))
    );
    assert_eq!(
        host(", mem: lots"),
        Err("line 3, column 3: task t: mem: invalid size \"lots\": expected a number and a unit, e.g. 24GiB, 512MiB, 8G".into())
    );
    assert!(host(", cpus: 0").unwrap_err().contains("cpus"));
    assert_eq!(request(", gpus: 3"), ResourceRequest::whole(3));
    assert_eq!(
        request(", gpu_mem: 8G"),
        ResourceRequest::shared(1, 8 * GIB)
    );
    assert_eq!(
        request(", gpus: 0, gpu_mem: 8G"),
        ResourceRequest::shared(1, 8 * GIB)
    );
    assert_eq!(
        request(", gpus: 2, gpu_mem: 20GiB"),
        ResourceRequest::shared(2, 20 * GIB)
    );
}

#[test]
fn string_commands_run_with_sh() {
    let spec = parse(&file(&[
        "name: shell",
        "tasks:",
        "  plain: {command: make all}",
        "  quoted: {command: 'python write.py --in \"out/tags.json\" && echo done'}",
        "  folded:",
        "    command: >-",
        "      python train.py",
        "      --epochs 3",
        "  list-with-sh: {command: [bash, -lc, \"echo hi\"]}",
    ]))
    .unwrap();
    let commands: Vec<Vec<String>> = spec.tasks.into_iter().map(|t| t.command).collect();
    assert_eq!(
        commands,
        [
            vec!["sh", "-c", "make all"],
            vec![
                "sh",
                "-c",
                "python write.py --in \"out/tags.json\" && echo done"
            ],
            vec!["sh", "-c", "python train.py --epochs 3"],
            vec!["bash", "-lc", "echo hi"],
        ]
    );
}

#[test]
fn task_names_may_use_letters_digits_and_three_marks() {
    let name64 = "a".repeat(64);
    let spec = parse(&file(&[
        "name: names",
        "tasks:",
        "  Step_1.train-v2: {command: [x]}",
        "  2024: {command: [x], after: [Step_1.train-v2]}",
        &format!("  {name64}: {{command: [x]}}"),
    ]))
    .unwrap();
    assert_eq!(spec.tasks[1].name, "2024");
    assert_eq!(spec.tasks[2].name, name64);
}

// ---- What the YAML parser refuses: placed by the parser. ----

#[test]
fn yaml_syntax_errors() {
    assert_eq!(
        error(&[
            "name: broken",
            "tasks:",
            "  prep:",
            "    command: [python, prep.py",
            "    gpus: 1",
        ]),
        "line 5, column 9: did not find expected ',' or ']', while parsing a flow sequence at line 4 column 14"
    );
    assert_eq!(
        error(&["name: tabs", "tasks:", "\tprep: {command: [x]}"]),
        "line 3, column 1: found character that cannot start any token, while scanning for the next token"
    );
}

#[test]
fn unknown_keys() {
    // The brief's example: `gpu` for `gpus`, in a flow mapping; column 39 is the `g` of `gpu`.
    assert_eq!(
        error(&[
            "name: typo",
            "atomic: true",
            "tasks:",
            "  classify: {command: [python, c.py], gpu: 1}",
        ]),
        "line 4, column 39: tasks.classify: unknown field `gpu`, expected one of `command`, `gpus`, \
         `gpu_mem`, `cpus`, `mem`, `time_limit`, `after`, `retries`, `env`, `cwd`, `priority`, `colocate_with`, `matrix`"
    );
    assert_eq!(
        error(&[
            "name: typo",
            "tasks:",
            "  train:",
            "    command: [python, train.py]",
            "    depends_on: [prep]",
        ]),
        "line 5, column 5: tasks.train: unknown field `depends_on`, expected one of `command`, \
         `gpus`, `gpu_mem`, `cpus`, `mem`, `time_limit`, `after`, `retries`, `env`, `cwd`, `priority`, `colocate_with`, `matrix`"
    );
    assert_eq!(
        error(&["name: typo", "gang: true", "tasks:", "  a: {command: [x]}"]),
        "line 2, column 1: unknown field `gang`, expected one of `name`, `atomic`, `priority`, `tasks`"
    );
}

#[test]
fn wrong_types() {
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a:",
            "    command: [x]",
            "    gpus: two"
        ]),
        "line 5, column 11: tasks.a.gpus: invalid type: string \"two\", expected a whole number >= 0"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  a: {command: [x], retries: -1}"]),
        "line 3, column 30: tasks.a.retries: invalid type: integer `-1`, expected a whole number >= 0"
    );
    assert_eq!(
        error(&["name: t", "atomic: yes", "tasks:", "  a: {command: [x]}"]),
        "line 2, column 9: atomic: invalid type: string \"yes\", expected a boolean"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  a: {command: 5}"]),
        "line 3, column 16: tasks.a.command: invalid type: integer `5`, expected a list of strings, \
         or a string run by `sh -c`"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  - a", "  - b"]),
        "line 3, column 3: tasks: invalid type: sequence, expected a mapping from task names to tasks"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  a: {command: [x], env: [A=1]}"]),
        "line 3, column 26: tasks.a.env: invalid type: sequence, expected a map"
    );
    assert_eq!(
        error(&["- name: t"]),
        "line 1, column 1: invalid type: sequence, expected a workflow: a mapping with `name` and `tasks`"
    );
}

#[test]
fn missing_and_repeated_keys() {
    assert_eq!(
        error(&["# no name", "tasks:", "  a: {command: [x]}"]),
        "line 2, column 1: missing field `name`"
    );
    assert_eq!(
        error(&["tasks:", "  a: {command: [x]}"]),
        "line 1, column 1: missing field `name`"
    );
    // The parser places a repeat at the start of its mapping; the repeat itself is more useful.
    assert_eq!(
        error(&["name: one", "name: two", "tasks:", "  a: {command: [x]}"]),
        "line 2, column 1: duplicate field `name`"
    );
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a:",
            "    command: [x]",
            "    gpus: 1",
            "    gpus: 2",
        ]),
        "line 6, column 5: tasks.a: duplicate field `gpus`"
    );
}

// ---- What the checks after parsing refuse: placed at the task's line. ----

#[test]
fn empty_files_names_and_task_lists() {
    assert_eq!(parse("").unwrap_err(), WorkflowError::EmptyFile);
    assert_eq!(
        error(&["# nothing yet", "", "---"]),
        "the file is empty: a workflow needs at least `name` and `tasks`"
    );
    assert_eq!(
        error(&["atomic: false", "name: ''", "tasks:", "  a: {command: [x]}"]),
        "line 2, column 1: name: the workflow name must not be empty"
    );
    assert_eq!(
        error(&["name: t", "tasks: {}"]),
        "line 2, column 1: tasks: a workflow needs at least one task"
    );
    assert_eq!(
        error(&["name: t", "atomic: true", "tasks:", "# to do"]),
        "line 3, column 1: tasks: a workflow needs at least one task"
    );
    // No `tasks` key at all: nowhere better to point than the start.
    assert_eq!(
        error(&["name: t"]),
        "line 1, column 1: tasks: a workflow needs at least one task"
    );
}

#[test]
fn missing_or_empty_commands() {
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  prep: {command: [x]}",
            "  train:",
            "    gpus: 1"
        ]),
        "line 4, column 3: task train: missing `command` (a list of strings, or a string run by `sh -c`)"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  train:"]),
        "line 3, column 3: task train: missing `command` (a list of strings, or a string run by `sh -c`)"
    );
    for command in ["[]", "\"\"", "'  '", "[\"\", x]"] {
        assert_eq!(
            error(&[
                "name: t",
                "tasks:",
                "  a: {command: [x]}",
                &format!("  b: {{command: {command}}}")
            ]),
            "line 4, column 3: task b: command: the command is empty",
            "command: {command}"
        );
    }
}

#[test]
fn bad_task_names() {
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  ok: {command: [x]}",
            "  \"\": {command: [x]}"
        ]),
        "line 4, column 3: task \"\": a task name must not be empty"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  \"train model\": {command: [x]}"]),
        "line 3, column 3: task \"train model\": ' ' is not allowed in a task name (only letters, \
         digits, `_`, `.` and `-` are)"
    );
    assert_eq!(
        error(&["name: t", "tasks:", "  a/b: {command: [x]}"]),
        "line 3, column 3: task \"a/b\": '/' is not allowed in a task name (only letters, digits, \
         `_`, `.` and `-` are)"
    );
    let long = "x".repeat(65);
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a: {command: [x]}",
            &format!("  {long}: {{command: [x]}}")
        ]),
        format!(
            "line 4, column 3: task \"{long}\": the name is 65 characters long; at most 64 are allowed"
        )
    );
}

#[test]
fn a_task_defined_twice() {
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  prep: {command: [x]}",
            "  train: {command: [y]}",
            "  prep: {command: [z]}",
        ]),
        "line 5, column 3: task prep: defined twice (first at line 3)"
    );
}

#[test]
fn bad_sizes_and_durations() {
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a: {command: [x]}",
            "  b: {command: [x], gpu_mem: 4 parsecs}"
        ]),
        "line 4, column 3: task b: gpu_mem: invalid size \"4 parsecs\": expected a number and a unit, \
         e.g. 24GiB, 512MiB, 8G"
    );
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a:",
            "    command: [x]",
            "    time_limit: 600"
        ]),
        "line 3, column 3: task a: time_limit: invalid duration \"600\": expected e.g. 90s, 30m, 2h, \
         1h30m, 1d or HH:MM:SS"
    );
}

#[test]
fn values_no_process_can_start_with() {
    let task = |fields: &str| {
        error(&[
            "name: t",
            "tasks:",
            "  a: {command: [x]}",
            &format!("  b: {{{fields}}}"),
        ])
    };
    assert_eq!(
        task(r#"command: [echo, "a\0b"]"#),
        "line 4, column 3: task b: command: word 2 contains a NUL byte, which no program can be \
         given as an argument"
    );
    // In a shell command the script is word 3 of `sh -c SCRIPT`.
    assert!(task(r#"command: "echo \0""#).contains("command: word 3 contains a NUL byte"));
    assert_eq!(
        task(r#"command: [x], env: {"A=B": x}"#),
        "line 4, column 3: task b: env: variable name \"A=B\" contains `=`, which would end the \
         name there; a name is one or more characters other than `=` and NUL"
    );
    assert!(task(r#"command: [x], env: {"": x}"#).contains("env: a variable name is empty"));
    assert!(
        task(r#"command: [x], env: {A: "x\0"}"#)
            .contains("env: the value of \"A\" contains a NUL byte")
    );
    assert!(task(r#"command: [x], cwd: "a\0b""#).contains("cwd: \"a\\0b\" contains a NUL byte"));
    assert_eq!(
        task("command: [x], time_limit: 366d"),
        "line 4, column 3: task b: time_limit: 366d00h is longer than the maximum of 365d"
    );
    let spec = parse(&file(&[
        "name: t",
        "tasks:",
        "  a: {command: [x], time_limit: 365d, env: {A: \"b=c\"}}",
    ]))
    .unwrap();
    assert_eq!(
        spec.tasks[0].time_limit,
        Some(crate::input::MAX_TIME_LIMIT_MS)
    );
}

#[test]
fn a_workflow_name_must_be_printable() {
    assert_eq!(
        error(&["tasks:", "  a: {command: [x]}", "name: \"a\\nb\""]),
        "line 3, column 1: name: the workflow name must be printable: no control characters such \
         as NUL or a line break"
    );
    assert!(error(&["name: \"a\\0\"", "tasks:", "  a: {command: [x]}"]).contains("printable"));
}

/// A file of `n` independent tasks.
fn tasks(n: usize) -> String {
    let mut text = String::from("name: sweep\ntasks:\n");
    for i in 0..n {
        text.push_str(&format!("  t{i}: {{command: [x]}}\n"));
    }
    text
}

#[test]
fn at_most_a_thousand_tasks() {
    assert_eq!(parse(&tasks(MAX_TASKS)).unwrap().tasks.len(), 1000);
    assert_eq!(
        parse(&tasks(MAX_TASKS + 1)).unwrap_err(),
        WorkflowError::TooManyTasks {
            count: 1001,
            at: Location { line: 2, column: 1 }
        }
    );
    assert_eq!(
        parse(&tasks(11_820)).unwrap_err().to_string(),
        "line 2, column 1: tasks: the workflow has 11820 tasks; at most 1000 are allowed in one \
         workflow: split it into several workflows"
    );
    // The count is checked before anything about the tasks themselves.
    let mut bad = tasks(1001);
    bad.push_str("  broken: {command: []}\n");
    assert!(matches!(
        parse(&bad),
        Err(WorkflowError::TooManyTasks { count: 1002, .. })
    ));
}

#[test]
fn at_most_one_mebibyte() {
    let mut text = tasks(1);
    text.push_str(&"#".repeat(MAX_FILE_BYTES - text.len()));
    assert_eq!(text.len(), MAX_FILE_BYTES);
    assert!(parse(&text).is_ok());
    text.push('#');
    assert_eq!(
        parse(&text).unwrap_err(),
        WorkflowError::TooLarge {
            bytes: MAX_FILE_BYTES + 1
        }
    );
    let big = "#".repeat(2_000_000);
    assert_eq!(
        parse(&big).unwrap_err().to_string(),
        "the file is 1.9 MiB (2000000 bytes); a workflow file may be at most 1 MiB (1048576 \
         bytes): split it into several workflows"
    );
    assert_eq!(parse(&big).unwrap_err().location(), None);
}

#[test]
fn unknown_and_self_dependencies() {
    let text = [
        "name: caption-pipeline",
        "tasks:",
        "  classify: {command: [python, classify.py]}",
        "  tags:     {command: [python, tags.py], after: [classify]}",
        "  copy:     {command: [python, write.py], after: [tagz]}",
    ];
    assert_eq!(
        error(&text),
        "line 5, column 3: task copy: after: no task named \"tagz\" (tasks: classify, tags, copy)"
    );
    let err = parse(&file(&text)).unwrap_err();
    assert_eq!(err.location(), Some(Location { line: 5, column: 3 }));
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a: {command: [x]}",
            "  b: {command: [x], after: [a, b]}"
        ]),
        "line 4, column 3: task b: after: a task cannot depend on itself"
    );
}

#[test]
fn colocation_must_name_other_tasks() {
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  train: {command: [x]}",
            "  eval: {command: [x], colocate_with: [trian]}",
        ]),
        "line 4, column 3: task eval: colocate_with: no task named \"trian\" (tasks: train, eval)"
    );
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  train: {command: [x], colocate_with: train}"
        ]),
        "line 3, column 3: task train: colocate_with: a task is always with itself; name other tasks"
    );
}

#[test]
fn cycles_are_reported_as_the_cycle() {
    // Two: each after the other.
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  a: {command: [x], after: [b]}",
            "  b: {command: [x], after: [a]}",
        ]),
        "line 3, column 3: dependency cycle: a -> b -> a"
    );
    // Three, as in DESIGN §6: written in the order the work would flow.
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  prep:",
            "    command: [x]",
            "    after: [eval]",
            "  train:",
            "    command: [x]",
            "    after: [prep]",
            "  eval:",
            "    command: [x]",
            "    after: [train]",
        ]),
        "line 3, column 3: dependency cycle: prep -> train -> eval -> prep"
    );
    // Five, written shuffled, behind a task that is not part of it: the cycle starts at its
    // earliest-written task and follows the edges.
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  setup: {command: [x]}",
            "  d: {command: [x], after: [c]}",
            "  b: {command: [x], after: [a]}",
            "  e: {command: [x], after: [d]}",
            "  a: {command: [x], after: [setup, e]}",
            "  c: {command: [x], after: [b]}",
        ]),
        "line 4, column 3: dependency cycle: d -> e -> a -> b -> c -> d"
    );
}

#[test]
fn a_cycle_reachable_only_through_a_side_branch() {
    // main -> report is fine; side branches off main into loop1 <-> loop2; done hangs off loop2.
    assert_eq!(
        error(&[
            "name: t",
            "tasks:",
            "  main: {command: [x]}",
            "  report: {command: [x], after: [main]}",
            "  side: {command: [x], after: [main]}",
            "  done: {command: [x], after: [loop2]}",
            "  loop1: {command: [x], after: [side, loop2]}",
            "  loop2: {command: [x], after: [loop1]}",
        ]),
        "line 7, column 3: dependency cycle: loop1 -> loop2 -> loop1"
    );
}

#[test]
fn flow_style_tasks_fall_back_to_the_tasks_line() {
    assert_eq!(
        error(&["name: t", "tasks: {a: {command: [x], after: [b]}}"]),
        "line 2, column 1: task a: after: no task named \"b\" (tasks: a)"
    );
}

#[test]
fn hand_built_specs_get_the_same_graph_checks() {
    let mut spec = parse(&file(&[
        "name: t",
        "tasks:",
        "  a: {command: [x]}",
        "  b: {command: [x], after: [a]}",
    ]))
    .unwrap();
    spec.tasks[0].after = vec!["b".into()];
    assert_eq!(
        spec.dag().unwrap_err().to_string(),
        "line 3, column 3: dependency cycle: a -> b -> a"
    );
}

// ---- Matrices: one task per combination. ----

/// The issue's example: five seeds times two learning rates, then one task after all of them.
const SEEDS: &[&str] = &[
    "name: seeds",
    "tasks:",
    "  train:",
    "    command: python train.py --seed {seed} --lr {lr}",
    "    gpus: 1",
    "    matrix:",
    "      seed: [1, 2, 3, 4, 5]",
    "      lr: [1e-4, 3e-4]",
    "  aggregate:",
    "    command: python aggregate.py",
    "    after: [train]",
];

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_matrix_task_is_one_task_per_combination_last_parameter_fastest() {
    let spec = parse(&file(SEEDS)).unwrap();
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "train.0",
            "train.1",
            "train.2",
            "train.3",
            "train.4",
            "train.5",
            "train.6",
            "train.7",
            "train.8",
            "train.9",
            "aggregate"
        ]
    );
    let train3 = &spec.tasks[3];
    // Values are their text as written: 3e-4, not 0.0003.
    assert_eq!(train3.params, params(&[("seed", "2"), ("lr", "3e-4")]));
    assert_eq!(
        train3.command,
        ["sh", "-c", "python train.py --seed 2 --lr 3e-4"]
    );
    assert_eq!(train3.matrix_of.as_deref(), Some("train"));
    // Everything else is the matrix task's, its position included.
    assert_eq!(train3.request, ResourceRequest::whole(1));
    assert_eq!((train3.line, train3.column), (3, 3));
    let all: Vec<(Params, &str)> = spec.tasks[..10]
        .iter()
        .map(|t| (t.params.clone(), t.command[2].as_str()))
        .collect();
    assert_eq!(
        all[0],
        (
            params(&[("seed", "1"), ("lr", "1e-4")]),
            "python train.py --seed 1 --lr 1e-4"
        )
    );
    assert_eq!(all[1].0, params(&[("seed", "1"), ("lr", "3e-4")]));
    assert_eq!(all[9].0, params(&[("seed", "5"), ("lr", "3e-4")]));
    let aggregate = &spec.tasks[10];
    assert_eq!(
        (aggregate.params.clone(), aggregate.matrix_of.clone()),
        (vec![], None)
    );
    assert_eq!(
        crate::sweep::param_env(&train3.params),
        [
            ("BATON_PARAM_SEED".to_string(), "2".to_string()),
            ("BATON_PARAM_LR".to_string(), "3e-4".to_string())
        ]
    );
}

#[test]
fn after_a_matrix_task_is_after_all_of_its_tasks() {
    let spec = parse(&file(SEEDS)).unwrap();
    let aggregate = &spec.tasks[10];
    let trains: Vec<String> = (0..10).map(|i| format!("train.{i}")).collect();
    assert_eq!(aggregate.after, trains);
    let dag = spec.dag().unwrap();
    assert_eq!(dag.predecessors(10), (0..10).collect::<Vec<_>>());
    assert_eq!(spec.task_index("train.7"), Some(7));
    assert_eq!(
        spec.task_index("train"),
        None,
        "the written name is no task"
    );
    // The critical path runs through one of the trains (the first of equals) to aggregate.
    let path = dag.critical_path(&[60_000; 11]);
    assert_eq!(path.names, ["train.0", "aggregate"]);
    assert_eq!(path.total_ms, 120_000);
    // The spec crosses to the store as JSON, params and all; an old spec without them reads.
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<WorkflowSpec>(&json).unwrap(), spec);
    let plain = serde_json::to_value(&spec.tasks[10]).unwrap();
    assert!(plain.get("params").is_none() && plain.get("matrix_of").is_none());
}

#[test]
fn a_matrix_tasks_own_references_go_to_each_of_its_tasks() {
    let spec = parse(&file(&[
        "name: w",
        "tasks:",
        "  prep: {command: [make]}",
        "  cache: {command: [warm]}",
        "  eval:",
        "    command: [python, eval.py, --ckpt, \"ckpt/{model}-{size}.pt\", \"--dry={dry}\"]",
        "    after: [prep, train]",
        "    colocate_with: [cache, train]",
        "    matrix: {model: [resnet, \"vit b\"], size: [s], dry: [true]}",
        "  train:",
        "    command: [python, train.py, \"{seed}\"]",
        "    after: prep",
        "    matrix:",
        "      seed: [7, 8, 9]",
    ]))
    .unwrap();
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "prep", "cache", "eval.0", "eval.1", "train.0", "train.1", "train.2"
        ]
    );
    for eval in &spec.tasks[2..4] {
        assert_eq!(eval.after, ["prep", "train.0", "train.1", "train.2"]);
        assert_eq!(
            eval.colocate_with,
            ["cache", "train.0", "train.1", "train.2"]
        );
    }
    assert_eq!(
        spec.tasks[3].command,
        [
            "python",
            "eval.py",
            "--ckpt",
            "ckpt/vit b-s.pt",
            "--dry=true"
        ]
    );
    assert_eq!(spec.tasks[5].after, ["prep"]);
    assert_eq!(spec.tasks[5].command, ["python", "train.py", "8"]);
    // The graph follows the expanded edges, whatever order the file is written in.
    let order = spec.dag().unwrap().topological_order().to_vec();
    let position = |name: &str| order.iter().position(|&i| spec.tasks[i].name == name);
    assert!(position("train.2") < position("eval.0"));
    assert!(position("prep") < position("train.0"));
}

#[test]
fn a_task_without_a_matrix_keeps_its_braces() {
    let spec = parse(&file(&[
        "name: w",
        "tasks:",
        "  plain: {command: \"echo {seed} {{x}} ${HOME}\"}",
        "  swept:",
        "    command: [echo, \"{seed}\", \"{{x}}\", \"${HOME}\"]",
        "    matrix: {seed: [1]}",
    ]))
    .unwrap();
    assert_eq!(spec.tasks[0].command[2], "echo {seed} {{x}} ${HOME}");
    assert_eq!(spec.tasks[0].params, vec![]);
    // In a matrix task's command, `{{` is the escape for a literal brace.
    assert_eq!(spec.tasks[1].command, ["echo", "1", "{x}", "${HOME}"]);
}

#[test]
fn matrix_names_stay_within_the_task_name_rules() {
    let base = "m".repeat(62);
    // 10 tasks: the longest is `<62>.9`, 64 characters.
    let values = (0..10)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let spec = parse(&file(&[
        "name: w",
        "tasks:",
        &format!("  {base}: {{command: [x], matrix: {{i: [{values}]}}}}"),
    ]))
    .unwrap();
    assert_eq!(spec.tasks[9].name, format!("{base}.9"));
    assert!(spec.tasks.iter().all(|t| t.name.len() <= MAX_TASK_NAME_LEN));
    // 11 tasks: `<62>.10` is 65.
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            &format!("  {base}: {{command: [x], matrix: {{i: [{values}, 10]}}}}"),
        ]),
        format!(
            "line 3, column 3: task \"{base}\": its matrix makes 11 tasks, named {base}.0 to \
             {base}.10, and {base}.10 is 65 characters long; at most 64 are allowed"
        )
    );
    // A written task may not take an expansion's name; `train.01` or `train.2` of two are free.
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  train: {command: [x], matrix: {seed: [1, 2]}}",
            "  train.1: {command: [x]}",
        ]),
        "line 4, column 3: task train.1: the name is taken: matrix task train (line 3) makes \
         tasks train.0 to train.1; rename one of them"
    );
    let spec = parse(&file(&[
        "name: w",
        "tasks:",
        "  train.01: {command: [x]}",
        "  train.2: {command: [x]}",
        "  train: {command: [x], matrix: {seed: [1, 2]}}",
    ]))
    .unwrap();
    assert_eq!(spec.tasks.len(), 4);
}

#[test]
fn references_name_the_matrix_task_not_one_expansion() {
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  train: {command: [x], matrix: {seed: [1, 2]}}",
            "  eval: {command: [x], after: [train.1]}",
        ]),
        "line 4, column 3: task eval: after: no task named \"train.1\" (tasks: train, eval)"
    );
    // Checked as written: the messages name what the file says.
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  train: {command: [x], after: [train], matrix: {seed: [1, 2]}}",
        ]),
        "line 3, column 3: task train: after: a task cannot depend on itself"
    );
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  train: {command: [x], after: [eval], matrix: {seed: [1, 2]}}",
            "  eval: {command: [x], after: [train]}",
        ]),
        "line 3, column 3: dependency cycle: train -> eval -> train"
    );
}

#[test]
fn matrix_errors_are_placed_at_the_key_or_value() {
    let task = |matrix: &[&str]| {
        let mut lines = vec!["name: w", "tasks:", "  train:", "    command: [x]"];
        lines.extend(matrix);
        error(&lines)
    };
    assert_eq!(
        task(&["    matrix:", "      seed: []"]),
        "line 6, column 13: tasks.train.matrix.seed: a matrix parameter needs at least one value"
    );
    assert_eq!(
        task(&["    matrix:", "      seed: [1, [2, 3]]"]),
        "line 6, column 17: tasks.train.matrix.seed[1]: invalid type: sequence, expected a \
         string, number or boolean"
    );
    assert_eq!(
        task(&["    matrix:", "      seed: [1, {a: 2}]"]),
        "line 6, column 17: tasks.train.matrix.seed[1]: invalid type: map, expected a string, \
         number or boolean"
    );
    assert_eq!(
        task(&["    matrix:", "      seed: 5"]),
        "line 6, column 13: tasks.train.matrix.seed: invalid type: integer `5`, expected a list \
         of values"
    );
    assert_eq!(
        task(&[
            "    matrix:",
            "      seed: [1]",
            "      learning-rate: [1e-4]"
        ]),
        "line 7, column 7: tasks.train.matrix: parameter name \"learning-rate\": use letters, \
         digits and `_`, starting with a letter or `_` (it becomes `{learning-rate}` in the \
         command and BATON_PARAM_<NAME> in the environment)"
    );
    assert_eq!(
        task(&[
            "    matrix:",
            "      seed: [1]",
            "      lr: [1]",
            "      seed: [2]"
        ]),
        "line 8, column 7: tasks.train.matrix: matrix parameter seed is given twice"
    );
    assert_eq!(
        task(&["    matrix: {lr: [1], LR: [2]}"]),
        "line 5, column 23: tasks.train.matrix: matrix parameters lr and LR would both set \
         BATON_PARAM_LR; rename one"
    );
    assert_eq!(
        task(&["    matrix: {}"]),
        "line 5, column 13: tasks.train.matrix: a matrix needs at least one parameter, e.g. \
         `seed: [1, 2, 3]`"
    );
    // Written with nothing under it: placed just after the key.
    assert_eq!(
        task(&["    matrix:"]),
        "line 5, column 12: tasks.train.matrix: a matrix needs at least one parameter, e.g. \
         `seed: [1, 2, 3]`"
    );
    assert_eq!(
        task(&["    matrix: [1, 2]"]),
        "line 5, column 13: tasks.train.matrix: invalid type: sequence, expected a matrix: a \
         mapping from parameter names to lists of values"
    );
    assert_eq!(
        task(&["    matrix: {seed: [\"a\\0b\"]}"]),
        "line 5, column 21: tasks.train.matrix.seed[0]: a matrix value must not contain a NUL byte"
    );
}

#[test]
fn an_unknown_placeholder_is_an_error_at_the_task() {
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  prep: {command: [x]}",
            "  train:",
            "    command: python train.py --seed {seed} --lr {lrr}",
            "    matrix:",
            "      seed: [1, 2]",
            "      lr: [1e-4]",
        ]),
        "line 4, column 3: task train: word 3 of the command has the placeholder {lrr}, which is \
         no parameter of this sweep ({lr}, {seed}); write {{ and }} for literal braces"
    );
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  train: {command: [x, \"{seed\"], matrix: {seed: [1]}}",
        ]),
        "line 3, column 3: task train: word 2 of the command has a `{` that is never closed; \
         write {{ for a literal brace"
    );
    // A value may leave nothing to run.
    assert_eq!(
        error(&[
            "name: w",
            "tasks:",
            "  train: {command: [\"{tool}\", x], matrix: {tool: [ok, \"\"]}}",
        ]),
        "line 3, column 3: task train.1: command: the command is empty"
    );
}

#[test]
fn matrices_count_toward_the_thousand_tasks() {
    let matrix = |task: &str, n: usize| {
        let values = (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
        [
            format!("  {task}:"),
            "    command: [x]".to_string(),
            "    matrix:".to_string(),
            format!("      a: [{values}]"),
            "      b: [x, y]".to_string(),
        ]
    };
    let text = |a: usize, b: usize| {
        let mut lines = vec!["name: w".to_string(), "tasks:".to_string()];
        lines.push("  first: {command: [x]}".to_string());
        lines.extend(matrix("small", a));
        lines.extend(matrix("big", b));
        lines.join("\n") + "\n"
    };
    // 1 + 2*100 + 2*399 = 999; then 1 + 2*100 + 2*400 = 1001.
    assert_eq!(parse(&text(100, 399)).unwrap().tasks.len(), 999);
    assert_eq!(
        parse(&text(100, 400)).unwrap_err().to_string(),
        "line 11, column 5: task big: matrix: its 800 combinations make the workflow 1001 tasks; \
         at most 1000 are allowed in one workflow: split it into several workflows"
    );
    // Far too many: refused by counting, nothing made.
    let huge: Vec<String> = (0..12)
        .map(|i| format!("p{i}: [{}]", "1, ".repeat(9) + "1"))
        .collect();
    let err = parse(&format!(
        "name: w\ntasks:\n  t: {{command: [x], matrix: {{{}}}}}\n",
        huge.join(", ")
    ))
    .unwrap_err();
    assert!(
        matches!(
            err,
            WorkflowError::MatrixTooLarge {
                combinations: 1_000_000_000_000,
                at: Location {
                    line: 3,
                    column: 21
                },
                ..
            }
        ),
        "{err:?}"
    );
}
