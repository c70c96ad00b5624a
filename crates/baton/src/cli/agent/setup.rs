//! `baton agent setup claude|codex [--project DIR] [--print]`: writes the few lines of an agent's
//! own configuration that let it use baton, merged into whatever the user already has.
//!
//! This file owns where each agent keeps those settings, what baton adds there, and how the files
//! are merged and written. It never clobbers: the existing file is parsed (a file that does not
//! parse is refused with its line and column, and nothing is written), only baton's own entry is
//! added or updated, and the result is written atomically with the file's permissions kept.
//!
//! What is added (facts checked on Claude Code 2.1.332 and Codex 0.171.0; see docs/agents.md):
//! - Claude Code, `settings.json`: a `PostToolUse` hook on the Bash tool running
//!   `baton agent wait-hook` in the background (`async` + `asyncRewake`). When that command exits 2,
//!   Claude Code wakes the model with its stderr, so a session learns that its job ended even on
//!   versions without the inbox socket (DESIGN §5).
//! - Claude Code, the project's `.mcp.json` (only with `--project`): the `baton` MCP server. The
//!   user-scope MCP list lives in `~/.claude.json`, Claude Code's own state file, which baton does
//!   not edit; it prints the `claude mcp add` line instead.
//! - Codex, `config.toml` (`$CODEX_HOME`, else `~/.codex`; with `--project`, `DIR/.codex/`):
//!   `[mcp_servers.baton]`. Codex needs no hook: baton wakes it with `codex queue`.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::cli::UsageError;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which agent: claude or codex.
    #[arg(value_enum)]
    pub agent: Agent,
    /// Write the project's files in DIR (Claude Code: DIR/.claude/settings.json and DIR/.mcp.json;
    /// Codex: DIR/.codex/config.toml) instead of the user's own settings.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Show the change (a unified diff per file) without writing anything.
    #[arg(long)]
    pub print: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Agent {
    Claude,
    Codex,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
        }
    }
}

/// The name of baton's MCP server in every agent's server list.
const SERVER_NAME: &str = "baton";
/// The subcommand the hook runs; also how an existing baton hook is recognised.
const WAIT_HOOK_ARGS: &str = "agent wait-hook";
/// Seconds. Claude Code 2.1.332 registers an async hook with this timeout (`timeout` × 1000 ms,
/// a short default without it), and the hook waits for a job, which can take hours: one day.
const HOOK_TIMEOUT_SECS: u64 = 86_400;

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let env = Env::from_process()?;
    let report = setup(&args, &env)?;
    if json {
        crate::cli::print_json(&report);
    } else {
        print!("{}", report.render_text());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where things are, taken from the process once so that tests never touch the real home.
struct Env {
    /// The running baton: the hook and the MCP entries name it by absolute path, so they work
    /// when baton is not on the PATH the agent was started with.
    exe: PathBuf,
    home: Option<PathBuf>,
    /// `CLAUDE_CONFIG_DIR`: moves Claude Code's user settings away from `~/.claude`.
    claude_config_dir: Option<PathBuf>,
    /// `CODEX_HOME`: moves Codex's user config away from `~/.codex`.
    codex_home: Option<PathBuf>,
}

impl Env {
    fn from_process() -> anyhow::Result<Env> {
        // The front end beside this binary: what people run, and what the agent runs.
        let exe = crate::paths::front();
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Ok(Env {
            exe,
            home: var("HOME"),
            claude_config_dir: var("CLAUDE_CONFIG_DIR"),
            codex_home: var("CODEX_HOME"),
        })
    }

    fn home(&self) -> anyhow::Result<&Path> {
        self.home.as_deref().context(
            "HOME is not set, so the user's settings cannot be found (use --project DIR instead)",
        )
    }
}

/// One file's planned change. `after` is `None` when the file already has baton's entries.
struct FileChange {
    path: PathBuf,
    before: Option<String>,
    after: Option<String>,
    added: Vec<String>,
    /// Permissions for the file if it is created (an existing file keeps its own).
    new_mode: u32,
}

#[derive(Debug, Serialize)]
struct Report {
    agent: &'static str,
    /// True with `--print`: nothing was written.
    dry_run: bool,
    files: Vec<FileReport>,
    /// Things the user has to know or do that baton could not do for them.
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct FileReport {
    path: String,
    changed: bool,
    /// The file did not exist (and, unless `dry_run`, now does).
    created: bool,
    added: Vec<String>,
    /// With `--print`: the change as a unified diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<String>,
}

/// Plans every file first and writes only when all of them parsed, so a malformed second file
/// leaves the first one untouched too.
fn setup(args: &Args, env: &Env) -> anyhow::Result<Report> {
    let project = match &args.project {
        Some(dir) if dir.is_dir() => {
            Some(fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?)
        }
        Some(dir) => {
            return Err(
                UsageError(format!("--project {}: no such directory", dir.display())).into(),
            );
        }
        None => None,
    };
    let exe = env.exe.as_path();
    let mut files = Vec::new();
    let mut notes = Vec::new();
    match args.agent {
        Agent::Claude => {
            let settings = match &project {
                Some(dir) => dir.join(".claude").join("settings.json"),
                None => match &env.claude_config_dir {
                    Some(dir) => dir.join("settings.json"),
                    None => env.home()?.join(".claude").join("settings.json"),
                },
            };
            files.push(plan_file(&settings, 0o644, |text| {
                merge_claude_hook(text, exe)
            })?);
            if let Some(dir) = &project {
                files.push(plan_file(&dir.join(".mcp.json"), 0o644, |text| {
                    merge_claude_mcp(text, exe)
                })?);
                notes.push(format!(
                    "Claude Code asks once before it starts a server from a project's .mcp.json; \
                     both files name baton by its path on this machine ({})",
                    exe.display()
                ));
            } else {
                // The user-scope server list is in ~/.claude.json, next to Claude Code's session
                // state, which it rewrites while running: leave that file to Claude Code itself.
                notes.push(format!(
                    "for baton's MCP tools in every project, run: claude mcp add --scope user {SERVER_NAME} -- {} mcp \
                     (or `baton agent setup claude --project DIR` to write DIR/.mcp.json)",
                    shell_quote(&exe.to_string_lossy())
                ));
            }
            if files[0].before.as_deref().is_some_and(hooks_disabled) {
                notes.push(format!(
                    "{} sets \"disableAllHooks\": the hook will not run until that is removed",
                    settings.display()
                ));
            }
        }
        Agent::Codex => {
            let config = match &project {
                Some(dir) => dir.join(".codex").join("config.toml"),
                None => match &env.codex_home {
                    Some(dir) => dir.join("config.toml"),
                    None => env.home()?.join(".codex").join("config.toml"),
                },
            };
            // 0600: Codex's config may hold tokens (Codex writes it 0600 itself).
            files.push(plan_file(&config, 0o600, |text| {
                merge_codex_mcp(text, exe)
            })?);
            if let Some(dir) = &project {
                notes.push(format!(
                    "Codex reads {} only once the project is trusted (Codex asks on its first start \
                     in {}); until then the server is not loaded",
                    config.display(),
                    dir.display()
                ));
            }
        }
    }
    if let Some(note) = cargo_build_note(exe) {
        notes.push(note);
    }
    if !args.print {
        for file in &files {
            if let Some(after) = &file.after {
                write_atomic(&file.path, after, file.new_mode)?;
            }
        }
    }
    let files = files
        .into_iter()
        .map(|f| FileReport {
            path: f.path.display().to_string(),
            changed: f.after.is_some(),
            created: f.before.is_none() && f.after.is_some(),
            diff: match (&f.after, args.print) {
                (Some(after), true) => Some(unified_diff(&f.path, f.before.as_deref(), after)),
                _ => None,
            },
            added: f.added,
        })
        .collect();
    Ok(Report {
        agent: args.agent.name(),
        dry_run: args.print,
        files,
        notes,
    })
}

fn plan_file(
    path: &Path,
    new_mode: u32,
    merge: impl FnOnce(Option<&str>) -> Result<Merged, ConfigError>,
) -> anyhow::Result<FileChange> {
    let before = read_existing(path)?;
    let merged = merge(before.as_deref())
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing was changed", path.display()))?;
    Ok(FileChange {
        path: path.to_path_buf(),
        before,
        after: merged.text,
        added: merged.added,
        new_mode,
    })
}

fn read_existing(path: &Path) -> anyhow::Result<Option<String>> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
            anyhow::anyhow!("{}: not UTF-8 text; nothing was changed", path.display())
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A binary inside a cargo `target/` folder goes away with `cargo clean`; still use it (that is
/// what the user ran), but say so.
fn cargo_build_note(exe: &Path) -> Option<String> {
    let parts: Vec<_> = exe.components().map(|c| c.as_os_str()).collect();
    let in_target = parts
        .windows(2)
        .any(|w| w[0] == "target" && (w[1] == "debug" || w[1] == "release"));
    in_target.then(|| {
        format!(
            "{} is a cargo build output: the entries point there, so rerun `baton agent setup` \
             from the installed baton once it is installed",
            exe.display()
        )
    })
}

impl Report {
    fn render_text(&self) -> String {
        let mut out = String::new();
        for file in &self.files {
            if let Some(diff) = &file.diff {
                out.push_str(diff);
            }
        }
        for file in &self.files {
            if !file.changed {
                let _ = writeln!(out, "{}: already set up", file.path);
                continue;
            }
            let verb = match (self.dry_run, file.created) {
                (false, true) => "created",
                (false, false) => "updated",
                (true, true) => "would create",
                (true, false) => "would update",
            };
            let _ = writeln!(out, "{verb} {}", file.path);
            for added in &file.added {
                let _ = writeln!(out, "  + {added}");
            }
        }
        if self.files.iter().all(|f| !f.changed) {
            let _ = writeln!(out, "{} is already set up: nothing to change", self.agent);
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        if self.dry_run && self.files.iter().any(|f| f.changed) {
            let _ = writeln!(out, "(--print: nothing was written)");
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Pure merges: existing text (None: no file) in, new text (None: already set up) out.

/// The result of merging baton's entries into one file.
#[derive(Debug)]
struct Merged {
    /// The new file, or `None` when baton's entries are already there as wanted.
    text: Option<String>,
    /// What was added or updated, one line each, for the user.
    added: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
enum ConfigError {
    #[error("cannot parse it at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{0}")]
    Shape(String),
}

/// The hook's command line. It runs through a shell (bash), so the path is quoted when it needs
/// to be. The exec form (`args`) would avoid the shell, but a version without it would run bare
/// `baton`, whose usage error exits 2 and so would wake the model on every Bash call.
fn hook_command(exe: &Path) -> String {
    format!("{} {WAIT_HOOK_ARGS}", shell_quote(&exe.to_string_lossy()))
}

fn hook_handler(exe: &Path) -> Map<String, Value> {
    let mut h = Map::new();
    h.insert("type".into(), "command".into());
    h.insert("command".into(), hook_command(exe).into());
    // Both flags: `asyncRewake` alone runs in the foreground in `claude -p` (2.1.332), and some
    // versions blocked on it (anthropics/claude-code#89960); `async` always backgrounds it.
    h.insert("async".into(), true.into());
    h.insert("asyncRewake".into(), true.into());
    h.insert("timeout".into(), HOOK_TIMEOUT_SECS.into());
    h
}

/// Adds (or repairs) baton's `PostToolUse` hook in a Claude Code `settings.json`.
fn merge_claude_hook(existing: Option<&str>, exe: &Path) -> Result<Merged, ConfigError> {
    let (mut root, indent) = parse_json_object(existing)?;
    let wanted = hook_handler(exe);
    let hooks = object_field(&mut root, "hooks")?;
    let post = match hooks
        .entry("PostToolUse")
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        Value::Array(a) => a,
        _ => return Err(shape("\"hooks.PostToolUse\" is not a list")),
    };
    let found: Vec<(usize, usize)> = post
        .iter()
        .enumerate()
        .flat_map(|(g, group)| {
            group
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
                .filter(|(_, h)| is_baton_hook(h))
                .map(move |(i, _)| (g, i))
        })
        .collect();
    let mut added = Vec::new();
    let description = format!(
        "PostToolUse hook on Bash: {} (async, asyncRewake, timeout {HOOK_TIMEOUT_SECS} s)",
        hook_command(exe)
    );
    match found.split_first() {
        None => {
            let mut group = Map::new();
            group.insert("matcher".into(), "Bash".into());
            group.insert("hooks".into(), Value::Array(vec![Value::Object(wanted)]));
            post.push(Value::Object(group));
            added.push(description);
        }
        Some((&(g, i), duplicates)) => {
            // Drop extra copies first (back to front, so earlier indices stay valid): each copy
            // would wake the model once more for the same job.
            for &(dg, di) in duplicates.iter().rev() {
                let handlers = post[dg]["hooks"].as_array_mut().expect("checked above");
                handlers.remove(di);
                if handlers.is_empty() {
                    post.remove(dg);
                }
                added.push("removed a duplicate baton hook".into());
            }
            let handler = post[g]["hooks"][i]
                .as_object_mut()
                .expect("is_baton_hook checked it");
            let old = handler.get("command").cloned();
            // Only baton's own keys are set; anything else on the entry (statusMessage...) stays.
            let mut changed = false;
            for (key, value) in wanted {
                if handler.get(&key) != Some(&value) {
                    handler.insert(key, value);
                    changed = true;
                }
            }
            if changed {
                let was = old.as_ref().and_then(Value::as_str).unwrap_or("?");
                added.push(format!("updated {description} (was: {was})"));
            }
        }
    }
    Ok(finish_json(root, &indent, added))
}

/// Adds (or repairs) the `baton` server in a project's `.mcp.json`.
fn merge_claude_mcp(existing: Option<&str>, exe: &Path) -> Result<Merged, ConfigError> {
    let (mut root, indent) = parse_json_object(existing)?;
    let servers = object_field(&mut root, "mcpServers")?;
    let exe_text = exe.to_string_lossy().into_owned();
    let args = Value::Array(vec!["mcp".into()]);
    let description = format!("MCP server \"{SERVER_NAME}\": {exe_text} mcp");
    let mut added = Vec::new();
    match servers.get_mut(SERVER_NAME) {
        None => {
            let mut server = Map::new();
            server.insert("command".into(), exe_text.into());
            server.insert("args".into(), args);
            servers.insert(SERVER_NAME.into(), Value::Object(server));
            added.push(description);
        }
        Some(Value::Object(server)) => {
            let old = server
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let mut changed = false;
            // A server of another transport named "baton" is baton's entry gone stale.
            if server.get("type").is_some_and(|t| t != "stdio") {
                server.insert("type".into(), "stdio".into());
                changed = true;
            }
            for (key, value) in [("command", Value::from(exe_text)), ("args", args)] {
                if server.get(key) != Some(&value) {
                    server.insert(key.into(), value);
                    changed = true;
                }
            }
            if changed {
                added.push(format!(
                    "updated {description} (was: {})",
                    old.as_deref().unwrap_or("?")
                ));
            }
        }
        Some(_) => {
            return Err(shape(&format!(
                "\"mcpServers.{SERVER_NAME}\" is not an object"
            )));
        }
    }
    Ok(finish_json(root, &indent, added))
}

/// Adds (or repairs) `[mcp_servers.baton]` in a Codex `config.toml`, keeping comments, order and
/// formatting of everything else (toml_edit edits the document in place).
fn merge_codex_mcp(existing: Option<&str>, exe: &Path) -> Result<Merged, ConfigError> {
    use toml_edit::{Array, DocumentMut, Item, Table, Value as TomlValue};

    let text = existing.unwrap_or("");
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, column) = line_column(text, e.span().map_or(0, |s| s.start));
        ConfigError::Syntax {
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })?;
    let exe_text = exe.to_string_lossy().into_owned();
    let description = format!("[mcp_servers.{SERVER_NAME}]: {exe_text} mcp");
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        // Implicit: the file gets `[mcp_servers.baton]` alone, not an empty `[mcp_servers]` too.
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    let inline = servers.is_inline_table();
    let servers = servers
        .as_table_like_mut()
        .ok_or_else(|| shape("\"mcp_servers\" is not a table"))?;
    let mut added = Vec::new();
    match servers.get_mut(SERVER_NAME) {
        None => {
            let args = Array::from_iter(["mcp"]);
            if inline {
                let mut t = toml_edit::InlineTable::new();
                t.insert("command", exe_text.as_str().into());
                t.insert("args", TomlValue::Array(args));
                t.insert("tool_timeout_sec", TOOL_TIMEOUT_SEC.into());
                servers.insert(SERVER_NAME, Item::Value(TomlValue::InlineTable(t)));
            } else {
                let mut t = Table::new();
                t.insert("command", toml_edit::value(exe_text.as_str()));
                t.insert("args", toml_edit::value(args));
                t.insert("tool_timeout_sec", toml_edit::value(TOOL_TIMEOUT_SEC));
                servers.insert(SERVER_NAME, Item::Table(t));
            }
            added.push(description);
        }
        Some(item) => {
            let server = item
                .as_table_like_mut()
                .ok_or_else(|| shape(&format!("\"mcp_servers.{SERVER_NAME}\" is not a table")))?;
            let old = server
                .get("command")
                .and_then(Item::as_str)
                .map(str::to_owned);
            let mut changed = false;
            if server.get("command").and_then(Item::as_str) != Some(exe_text.as_str()) {
                set_keeping_decor(server, "command", exe_text.as_str().into());
                changed = true;
            }
            let args_ok = server
                .get("args")
                .and_then(Item::as_array)
                .is_some_and(|a| a.iter().map(TomlValue::as_str).eq([Some("mcp")]));
            if !args_ok {
                set_keeping_decor(server, "args", TomlValue::Array(Array::from_iter(["mcp"])));
                changed = true;
            }
            // A timeout the user chose is theirs; only a missing one gets ours.
            if server.get("tool_timeout_sec").is_none() {
                server.insert("tool_timeout_sec", toml_edit::value(TOOL_TIMEOUT_SEC));
                changed = true;
            }
            if changed {
                added.push(format!(
                    "updated {description} (was: {})",
                    old.as_deref().unwrap_or("?")
                ));
            }
        }
    }
    let text = (!added.is_empty()).then(|| doc.to_string());
    Ok(Merged { text, added })
}

/// Codex's per-call tool timeout for baton (its default is 60 s): `wait_for_jobs` may block for
/// up to 600 s.
const TOOL_TIMEOUT_SEC: i64 = 660;

/// Replaces a TOML value but keeps the comment and spacing around it.
fn set_keeping_decor(table: &mut dyn toml_edit::TableLike, key: &str, mut value: toml_edit::Value) {
    if let Some(old) = table.get(key).and_then(toml_edit::Item::as_value) {
        *value.decor_mut() = old.decor().clone();
    }
    table.insert(key, toml_edit::Item::Value(value));
}

fn shape(message: &str) -> ConfigError {
    ConfigError::Shape(format!("{message}, so baton cannot add its entry"))
}

/// Parses a JSON settings file that must hold an object; an empty file counts as `{}`. Also
/// returns the file's indentation so that a rewrite keeps its look.
fn parse_json_object(existing: Option<&str>) -> Result<(Map<String, Value>, String), ConfigError> {
    let text = existing.unwrap_or("");
    if text.trim().is_empty() {
        return Ok((Map::new(), "  ".into()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok((map, detect_indent(text))),
        Ok(_) => Err(ConfigError::Shape(
            "the file is not a JSON object, so baton cannot add its entry".into(),
        )),
        Err(e) => Err(ConfigError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string().split(" at line ").next().unwrap_or("").into(),
        }),
    }
}

/// `root[key]` as an object, created when missing.
fn object_field<'a>(
    root: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Map<String, Value>, ConfigError> {
    match root.entry(key).or_insert_with(|| Value::Object(Map::new())) {
        Value::Object(map) => Ok(map),
        _ => Err(shape(&format!("\"{key}\" is not an object"))),
    }
}

fn finish_json(root: Map<String, Value>, indent: &str, added: Vec<String>) -> Merged {
    if added.is_empty() {
        return Merged { text: None, added };
    }
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    Value::Object(root)
        .serialize(&mut ser)
        .expect("a JSON value always serialises");
    let mut text = String::from_utf8(out).expect("serde_json writes UTF-8");
    text.push('\n');
    Merged {
        text: Some(text),
        added,
    }
}

/// The indentation of the first indented line (two spaces when there is none).
fn detect_indent(text: &str) -> String {
    text.lines()
        .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
        .find(|ws| !ws.is_empty())
        .unwrap_or("  ")
        .to_string()
}

fn hooks_disabled(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("disableAllHooks").and_then(Value::as_bool))
        .unwrap_or(false)
}

/// A hook entry is baton's when it runs `<…/baton> agent wait-hook`, whatever the path.
fn is_baton_hook(handler: &Value) -> bool {
    let Some(command) = handler.get("command").and_then(Value::as_str) else {
        return false;
    };
    if !handler.is_object() || handler.get("type").is_some_and(|t| t != "command") {
        return false;
    }
    let Some((program, rest)) = split_program(command) else {
        return false;
    };
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    Path::new(&program)
        .file_name()
        .is_some_and(|n| n == "baton")
        && (rest == WAIT_HOOK_ARGS || rest.starts_with(&format!("{WAIT_HOOK_ARGS} ")))
}

/// Splits a shell command line into its first word (unquoted) and the rest. Understands the
/// quoting `shell_quote` produces and plain double quotes; anything else is "not baton's".
fn split_program(command: &str) -> Option<(String, &str)> {
    let s = command.trim_start();
    if let Some(mut rest) = s.strip_prefix('\'') {
        let mut word = String::new();
        loop {
            let end = rest.find('\'')?;
            word.push_str(&rest[..end]);
            rest = &rest[end + 1..];
            // `'\''` inside a single-quoted word is an escaped quote.
            match rest.strip_prefix("\\''") {
                Some(more) => {
                    word.push('\'');
                    rest = more;
                }
                None => return Some((word, rest)),
            }
        }
    }
    if let Some(rest) = s.strip_prefix('"') {
        let end = rest.find('"')?;
        return Some((rest[..end].to_string(), &rest[end + 1..]));
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((s[..end].to_string(), &s[end..]))
}

/// Quotes a word for a POSIX shell, leaving plain paths alone so the hook stays readable.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+@%:,=".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

// ---------------------------------------------------------------------------------------------
// Writing.

/// Writes through a temporary file in the same folder and a rename, so a reader (or a crash)
/// never sees half a file. A symlinked file (dotfile managers) is written at its target, so the
/// link survives; an existing file keeps its permissions.
fn write_atomic(path: &Path, text: &str, new_mode: u32) -> anyhow::Result<()> {
    let target = match fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(e).with_context(|| format!("resolving {}", path.display())),
    };
    let dir = target
        .parent()
        .with_context(|| format!("{} has no parent folder", target.display()))?;
    // New folders: private for Codex (its config may hold tokens), usual otherwise.
    let dir_mode = if new_mode & 0o077 == 0 { 0o700 } else { 0o755 };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(dir_mode)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let mode = match fs::metadata(&target) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => new_mode,
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.baton-{}.tmp", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        // The umask may have narrowed the mode given at creation.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&tmp, &target)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", target.display()));
    }
    // Make the rename itself durable; failing here loses nothing that matters.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// `--print`: a unified diff of the planned change.

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Same,
    Del,
    Add,
}

/// Line operations turning `a` into `b` (longest common subsequence; config files are small, and
/// past a size where the table would be large the whole file is shown as replaced).
fn diff_ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > 4_000_000 {
        return [vec![Op::Del; n], vec![Op::Add; m]].concat();
    }
    // lcs[i][j]: the common length of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::with_capacity(n + m));
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push(Op::Same);
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals before additions, as diff(1) shows a replaced line.
            ops.push(Op::Del);
            i += 1;
        } else {
            ops.push(Op::Add);
            j += 1;
        }
    }
    ops
}

fn unified_diff(path: &Path, before: Option<&str>, after: &str) -> String {
    const CONTEXT: usize = 3;
    let a: Vec<&str> = before.map(|t| t.lines().collect()).unwrap_or_default();
    let b: Vec<&str> = after.lines().collect();
    let ops = diff_ops(&a, &b);
    // Where each op starts in a and b.
    let mut pos = Vec::with_capacity(ops.len() + 1);
    let (mut i, mut j) = (0, 0);
    for op in &ops {
        pos.push((i, j));
        match op {
            Op::Same => (i, j) = (i + 1, j + 1),
            Op::Del => i += 1,
            Op::Add => j += 1,
        }
    }
    pos.push((i, j));
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for (k, _) in ops.iter().enumerate().filter(|(_, op)| **op != Op::Same) {
        let (start, end) = (k.saturating_sub(CONTEXT), (k + 1 + CONTEXT).min(ops.len()));
        match hunks.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => hunks.push((start, end)),
        }
    }
    let mut out = String::new();
    let label = path.display();
    let old_label = if before.is_some() {
        label.to_string()
    } else {
        "/dev/null".to_string()
    };
    let _ = writeln!(out, "--- {old_label}\n+++ {label}");
    for (start, end) in hunks {
        let (a0, b0) = pos[start];
        let (a1, b1) = pos[end];
        // Unified-diff convention: an empty range is numbered by the line before it.
        let num = |first: usize, len: usize| if len == 0 { first } else { first + 1 };
        let _ = writeln!(
            out,
            "@@ -{},{} +{},{} @@",
            num(a0, a1 - a0),
            a1 - a0,
            num(b0, b1 - b0),
            b1 - b0
        );
        for k in start..end {
            let (ai, bj) = pos[k];
            let _ = match ops[k] {
                Op::Same => writeln!(out, " {}", a[ai]),
                Op::Del => writeln!(out, "-{}", a[ai]),
                Op::Add => writeln!(out, "+{}", b[bj]),
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/opt/baton/bin/baton";

    fn exe() -> &'static Path {
        Path::new(EXE)
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn wanted_hook() -> Value {
        Value::Object(hook_handler(exe()))
    }

    #[test]
    fn claude_hook_into_no_file_and_empty_file() {
        for existing in [None, Some(""), Some("  \n")] {
            let merged = merge_claude_hook(existing, exe()).unwrap();
            let v = json(merged.text.as_deref().unwrap());
            assert_eq!(
                v,
                serde_json::json!({"hooks": {"PostToolUse": [
                    {"matcher": "Bash", "hooks": [{
                        "type": "command",
                        "command": "/opt/baton/bin/baton agent wait-hook",
                        "async": true,
                        "asyncRewake": true,
                        "timeout": 86400
                    }]}
                ]}})
            );
            assert_eq!(merged.added.len(), 1);
        }
    }

    #[test]
    fn claude_hook_keeps_other_settings_hooks_and_key_order() {
        let existing = r#"{
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write"}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "log-bash.sh", "timeout": 5}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    },
    "env": {"A": "1"}
}
"#;
        let merged = merge_claude_hook(Some(existing), exe()).unwrap();
        let text = merged.text.unwrap();
        let v = json(&text);
        let before = json(existing);
        assert_eq!(v["model"], before["model"]);
        assert_eq!(v["permissions"], before["permissions"]);
        assert_eq!(v["env"], before["env"]);
        assert_eq!(v["hooks"]["Stop"], before["hooks"]["Stop"]);
        let post = v["hooks"]["PostToolUse"].as_array().unwrap();
        assert_eq!(post.len(), 3);
        assert_eq!(
            post[..2],
            before["hooks"]["PostToolUse"].as_array().unwrap()[..]
        );
        assert_eq!(post[2]["hooks"][0], wanted_hook());
        // Key order and the file's 4-space indentation are kept.
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["model", "permissions", "hooks", "env"]);
        assert!(text.contains("\n    \"model\": \"opus\""), "{text}");
    }

    #[test]
    fn claude_hook_is_idempotent() {
        let first = merge_claude_hook(None, exe()).unwrap().text.unwrap();
        let second = merge_claude_hook(Some(&first), exe()).unwrap();
        assert!(second.text.is_none());
        assert!(second.added.is_empty());
    }

    #[test]
    fn claude_hook_updates_a_stale_path_in_place_and_drops_duplicates() {
        let existing = r#"{"hooks": {"PostToolUse": [
            {"matcher": "Bash", "hooks": [
                {"type": "command", "command": "other-hook"},
                {"type": "command", "command": "'/old place/baton' agent wait-hook", "async": true, "statusMessage": "mine"}
            ]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "baton agent wait-hook"}]}
        ]}}"#;
        let merged = merge_claude_hook(Some(existing), exe()).unwrap();
        let v = json(&merged.text.unwrap());
        let post = v["hooks"]["PostToolUse"].as_array().unwrap();
        assert_eq!(post.len(), 1, "the duplicate's now-empty group is gone");
        let handlers = post[0]["hooks"].as_array().unwrap();
        assert_eq!(handlers[0]["command"], "other-hook");
        assert_eq!(
            handlers[1]["command"],
            "/opt/baton/bin/baton agent wait-hook"
        );
        assert_eq!(handlers[1]["asyncRewake"], true);
        assert_eq!(
            handlers[1]["statusMessage"], "mine",
            "user's extra keys stay"
        );
        assert!(
            merged
                .added
                .iter()
                .any(|a| a.contains("was: '/old place/baton'"))
        );
    }

    #[test]
    fn claude_hook_quotes_a_path_with_spaces_and_recognises_it() {
        let odd = Path::new("/home/a b/it's/baton");
        let text = merge_claude_hook(None, odd).unwrap().text.unwrap();
        let v = json(&text);
        let command = v["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        assert_eq!(command, r#"'/home/a b/it'\''s/baton' agent wait-hook"#);
        assert!(merge_claude_hook(Some(&text), odd).unwrap().text.is_none());
    }

    #[test]
    fn other_commands_are_not_taken_for_baton() {
        for command in [
            "baton wait 3",
            "/usr/bin/batonx agent wait-hook",
            "echo baton agent wait-hook",
            "baton agent wait-hooks",
        ] {
            let h = serde_json::json!({"type": "command", "command": command});
            assert!(!is_baton_hook(&h), "{command}");
        }
        let h =
            serde_json::json!({"type": "command", "command": "\"/x y/baton\" agent  wait-hook"});
        assert!(is_baton_hook(&h));
    }

    #[test]
    fn malformed_json_is_refused_with_line_and_column() {
        let err = merge_claude_hook(Some("{\n  \"a\": 1,\n  oops\n}"), exe()).unwrap_err();
        match err {
            ConfigError::Syntax { line, column, .. } => assert_eq!((line, column), (3, 3)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            merge_claude_hook(Some("[1, 2]"), exe()),
            Err(ConfigError::Shape(_))
        ));
        assert!(matches!(
            merge_claude_hook(Some(r#"{"hooks": {"PostToolUse": {}}}"#), exe()),
            Err(ConfigError::Shape(_))
        ));
    }

    #[test]
    fn claude_mcp_keeps_other_servers_and_updates_a_stale_baton() {
        let existing = r#"{"mcpServers": {
            "github": {"command": "npx", "args": ["-y", "gh-mcp"], "env": {"T": "x"}},
            "baton": {"command": "/old/baton", "args": ["mcp"], "env": {"BATON_HOME": "/srv/b"}}
        }}"#;
        let merged = merge_claude_mcp(Some(existing), exe()).unwrap();
        let v = json(&merged.text.unwrap());
        assert_eq!(
            v["mcpServers"]["github"],
            json(existing)["mcpServers"]["github"]
        );
        assert_eq!(
            v["mcpServers"]["baton"],
            serde_json::json!({"command": EXE, "args": ["mcp"], "env": {"BATON_HOME": "/srv/b"}})
        );
        let keys: Vec<_> = v["mcpServers"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["github", "baton"]);

        let fresh = merge_claude_mcp(None, exe()).unwrap().text.unwrap();
        assert_eq!(
            json(&fresh),
            serde_json::json!({"mcpServers": {"baton": {"command": EXE, "args": ["mcp"]}}})
        );
        assert!(
            merge_claude_mcp(Some(&fresh), exe())
                .unwrap()
                .text
                .is_none()
        );
    }

    #[test]
    fn codex_into_no_file() {
        let merged = merge_codex_mcp(None, exe()).unwrap();
        assert_eq!(
            merged.text.unwrap(),
            "[mcp_servers.baton]\ncommand = \"/opt/baton/bin/baton\"\nargs = [\"mcp\"]\ntool_timeout_sec = 660\n"
        );
    }

    #[test]
    fn codex_keeps_comments_and_other_servers_and_is_idempotent() {
        let existing = "# my settings\nmodel = \"gpt-5\"   # the default\n\n\
                        [mcp_servers.github]\n# a token lives here\ncommand = \"npx\"\nargs = [\"-y\", \"gh\"]\n\n\
                        [profiles.fast]\nmodel = \"mini\"\n";
        let text = merge_codex_mcp(Some(existing), exe())
            .unwrap()
            .text
            .unwrap();
        // Everything kept as written; the new server lands beside its sibling servers.
        assert_eq!(
            text,
            "# my settings\nmodel = \"gpt-5\"   # the default\n\n\
             [mcp_servers.github]\n# a token lives here\ncommand = \"npx\"\nargs = [\"-y\", \"gh\"]\n\n\
             [mcp_servers.baton]\ncommand = \"/opt/baton/bin/baton\"\nargs = [\"mcp\"]\ntool_timeout_sec = 660\n\n\
             [profiles.fast]\nmodel = \"mini\"\n"
        );
        let again = merge_codex_mcp(Some(&text), exe()).unwrap();
        assert!(again.text.is_none() && again.added.is_empty());
    }

    #[test]
    fn codex_updates_a_stale_path_keeping_its_other_keys_and_comments() {
        let existing = "[mcp_servers.baton]\ncommand = \"/old/baton\" # where it was\nargs = [\"mcp\"]\nstartup_timeout_sec = 30\n";
        let merged = merge_codex_mcp(Some(existing), exe()).unwrap();
        assert_eq!(
            merged.text.unwrap(),
            "[mcp_servers.baton]\ncommand = \"/opt/baton/bin/baton\" # where it was\nargs = [\"mcp\"]\nstartup_timeout_sec = 30\ntool_timeout_sec = 660\n"
        );
        // A timeout the user set is kept.
        let own = "[mcp_servers.baton]\ncommand = \"/opt/baton/bin/baton\"\nargs = [\"mcp\"]\ntool_timeout_sec = 30\n";
        assert!(merge_codex_mcp(Some(own), exe()).unwrap().text.is_none());
        assert!(merged.added[0].contains("was: /old/baton"));
    }

    #[test]
    fn codex_inline_server_tables_stay_inline() {
        let existing = "mcp_servers = { other = { command = \"x\" } }\n";
        let text = merge_codex_mcp(Some(existing), exe())
            .unwrap()
            .text
            .unwrap();
        let doc: toml_edit::DocumentMut = text.parse().unwrap();
        assert_eq!(doc["mcp_servers"]["other"]["command"].as_str(), Some("x"));
        assert_eq!(doc["mcp_servers"]["baton"]["command"].as_str(), Some(EXE));
        assert!(merge_codex_mcp(Some(&text), exe()).unwrap().text.is_none());
    }

    #[test]
    fn malformed_toml_is_refused_with_line_and_column() {
        let err =
            merge_codex_mcp(Some("model = \"x\"\n[mcp_servers\ncommand = 1\n"), exe()).unwrap_err();
        match err {
            ConfigError::Syntax { line, .. } => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            merge_codex_mcp(Some("mcp_servers = 3\n"), exe()),
            Err(ConfigError::Shape(_))
        ));
    }

    #[test]
    fn diff_shows_only_the_change_with_context() {
        let before = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let after = "a\nb\nc\nd\ne\nf\nX\ng\nh\n";
        let diff = unified_diff(Path::new("/f"), Some(before), after);
        assert_eq!(
            diff,
            "--- /f\n+++ /f\n@@ -4,5 +4,6 @@\n d\n e\n f\n+X\n g\n h\n"
        );
        let new = unified_diff(Path::new("/f"), None, "x\n");
        assert_eq!(new, "--- /dev/null\n+++ /f\n@@ -0,0 +1,1 @@\n+x\n");
    }

    #[test]
    fn cargo_builds_are_pointed_out() {
        assert!(cargo_build_note(Path::new("/w/target/debug/baton")).is_some());
        assert!(cargo_build_note(Path::new("/usr/local/bin/baton")).is_none());
    }

    // The file-level flow, on a temporary home.

    fn env_in(home: &Path) -> Env {
        Env {
            exe: PathBuf::from(EXE),
            home: Some(home.to_path_buf()),
            claude_config_dir: None,
            codex_home: None,
        }
    }

    fn args(agent: Agent, project: Option<&Path>, print: bool) -> Args {
        Args {
            agent,
            project: project.map(Path::to_path_buf),
            print,
        }
    }

    #[test]
    fn setup_writes_then_says_already_set_up() {
        let home = tempfile::tempdir().unwrap();
        let env = env_in(home.path());
        let report = setup(&args(Agent::Claude, None, false), &env).unwrap();
        assert!(report.files[0].changed && report.files[0].created);
        let path = home.path().join(".claude/settings.json");
        assert!(
            fs::read_to_string(&path)
                .unwrap()
                .contains("agent wait-hook")
        );
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("claude mcp add --scope user"))
        );
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);

        let again = setup(&args(Agent::Claude, None, false), &env).unwrap();
        assert!(!again.files[0].changed);
        assert!(again.render_text().contains("already set up"));
    }

    #[test]
    fn setup_print_writes_nothing_and_shows_a_diff() {
        let home = tempfile::tempdir().unwrap();
        let report = setup(&args(Agent::Codex, None, true), &env_in(home.path())).unwrap();
        assert!(!home.path().join(".codex").exists());
        let diff = report.files[0].diff.as_deref().unwrap();
        assert!(diff.contains("+[mcp_servers.baton]"), "{diff}");
        assert!(report.render_text().contains("would create"));
    }

    #[test]
    fn setup_keeps_permissions_and_follows_symlinks() {
        let home = tempfile::tempdir().unwrap();
        let real = home.path().join("dotfiles/config.toml");
        fs::create_dir_all(real.parent().unwrap()).unwrap();
        fs::write(&real, "model = \"x\"\n").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
        fs::create_dir(home.path().join(".codex")).unwrap();
        let link = home.path().join(".codex/config.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        setup(&args(Agent::Codex, None, false), &env_in(home.path())).unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(
            fs::read_to_string(&real)
                .unwrap()
                .contains("[mcp_servers.baton]")
        );
        assert_eq!(
            fs::metadata(&real).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }

    #[test]
    fn setup_new_codex_config_is_private() {
        let home = tempfile::tempdir().unwrap();
        let mut env = env_in(home.path());
        env.codex_home = Some(home.path().join("ch"));
        setup(&args(Agent::Codex, None, false), &env).unwrap();
        let meta = fs::metadata(home.path().join("ch/config.toml")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn setup_project_writes_both_claude_files_or_neither() {
        let dir = tempfile::tempdir().unwrap();
        let env = env_in(Path::new("/nonexistent-home"));
        fs::write(dir.path().join(".mcp.json"), "{ broken").unwrap();
        let err = setup(&args(Agent::Claude, Some(dir.path()), false), &env).unwrap_err();
        let message = format!("{err:#}");
        assert!(
            message.contains(".mcp.json") && message.contains("line 1"),
            "{message}"
        );
        assert!(!dir.path().join(".claude").exists(), "nothing written");

        fs::remove_file(dir.path().join(".mcp.json")).unwrap();
        let report = setup(&args(Agent::Claude, Some(dir.path()), false), &env).unwrap();
        assert_eq!(report.files.len(), 2);
        assert!(dir.path().join(".claude/settings.json").exists());
        assert!(dir.path().join(".mcp.json").exists());
    }

    #[test]
    fn setup_refuses_a_missing_project_dir_as_a_usage_error() {
        let err = setup(
            &args(Agent::Codex, Some(Path::new("/no/such/dir")), false),
            &env_in(Path::new("/tmp")),
        )
        .unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some());
    }
}
