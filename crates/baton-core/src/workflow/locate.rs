//! Finding where a key is written in the workflow's source text.
//!
//! The YAML parser places its own errors, but once the file has parsed, checks that span tasks
//! (unknown dependencies, cycles, bad task names) have only the parsed values, which carry no
//! position. So we look for the keys in the text: the top-level keys (`name:`, `tasks:`) are the
//! lines at indentation 0, and the tasks are the lines at the first indentation found under
//! `tasks:`. This covers block-style files, which is how workflow files are written; for a
//! flow-style `tasks: {a: ..., b: ...}` it finds nothing and callers fall back to the `tasks:`
//! line.

use super::error::Location;

/// The keys of the top-level mapping, in the order written, with their positions.
pub(crate) fn top_level_keys(text: &str) -> Vec<(String, Location)> {
    let mut keys = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if indentation(line) == 0
            && let Some(key) = key_of(line)
        {
            keys.push((key, at(index, 0)));
        }
    }
    keys
}

/// The keys of the block mapping under the top-level `tasks:`, in the order written (repeats
/// included, so a duplicate can be placed), with their positions.
pub(crate) fn task_keys(text: &str) -> Vec<(String, Location)> {
    keys_under(text, "tasks")
}

/// The keys of the block mapping under the top-level key `top` (`tasks:`, a sweep file's
/// `sweep:`), in the order written, repeats included, with their positions.
pub(crate) fn keys_under(text: &str, top: &str) -> Vec<(String, Location)> {
    let mut lines = text.lines().enumerate();
    // Skip to the line after `top:`.
    if !lines
        .by_ref()
        .any(|(_, line)| indentation(line) == 0 && key_of(line).as_deref() == Some(top))
    {
        return Vec::new();
    }
    let mut task_indent = None;
    let mut keys = Vec::new();
    for (index, line) in lines {
        let body = line.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = indentation(line);
        if indent == 0 {
            break; // the next top-level key: the tasks block has ended
        }
        let task_indent = *task_indent.get_or_insert(indent);
        if indent == task_indent
            && let Some(key) = key_of(line)
        {
            keys.push((key, at(index, indent)));
        }
    }
    keys
}

/// Where `key` is written the second time in the block mapping that starts at `mapping`. The
/// parser places a duplicate key at the start of its mapping; this finds the repeat itself.
/// `None` for a flow mapping (`{a: 1, a: 2}`) or a key not found twice.
pub(crate) fn repeated_key(text: &str, mapping: Location, key: &str) -> Option<Location> {
    let indent = mapping.column.checked_sub(1)?;
    let mut seen = 0;
    for (index, line) in text.lines().enumerate().skip(mapping.line.checked_sub(1)?) {
        let body = line.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let line_indent = indentation(line);
        if line_indent < indent {
            break; // the mapping has ended
        }
        if line_indent == indent && key_of(line).as_deref() == Some(key) {
            seen += 1;
            if seen == 2 {
                return Some(at(index, indent));
            }
        }
    }
    None
}

/// Where `key` is written among the fields of the task whose name is at `task`: the line of a
/// block mapping's key, or else, for a flow mapping (`train: {command: x, matrix: {...}}`), the
/// key inside the task's lines. `None` when neither is found.
pub(crate) fn task_field(text: &str, task: Location, key: &str) -> Option<Location> {
    let task_indent = task.column.checked_sub(1)?;
    let mut lines = text.lines().enumerate().skip(task.line.checked_sub(1)?);
    let mut block = vec![lines.next()?];
    for (index, line) in lines {
        let body = line.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        if indentation(line) <= task_indent {
            break; // the next task, or the next top-level key
        }
        block.push((index, line));
    }
    if let Some(&(_, first)) = block.get(1) {
        let field_indent = indentation(first);
        let found = block[1..].iter().find(|(_, line)| {
            indentation(line) == field_indent && key_of(line).as_deref() == Some(key)
        });
        if let Some(&(index, _)) = found {
            return Some(at(index, field_indent));
        }
    }
    let written = format!("{key}:");
    block.iter().find_map(|&(index, line)| {
        let (start, _) = line.match_indices(&written).find(|&(start, _)| {
            !line[..start].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })?;
        Some(Location {
            line: index + 1,
            column: line[..start].chars().count() + 1,
        })
    })
}

pub(crate) fn at(line_index: usize, indent: usize) -> Location {
    Location {
        line: line_index + 1,
        column: indent + 1,
    }
}

/// YAML indents with spaces only.
pub(crate) fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The key a `key: value` (or `key:`) line defines: plain, `"double"` or `'single'` quoted.
/// `None` for anything else (comments, list items, continuation lines).
pub(crate) fn key_of(line: &str) -> Option<String> {
    let body = line.trim_start_matches(' ');
    let (key, rest) = if let Some(quoted) = body.strip_prefix('"') {
        let end = quoted.find('"')?;
        (&quoted[..end], &quoted[end + 1..])
    } else if let Some(quoted) = body.strip_prefix('\'') {
        let end = quoted.find('\'')?;
        (&quoted[..end], &quoted[end + 1..])
    } else {
        if body.starts_with(['#', '-', '{', '[', '?']) {
            return None;
        }
        // A plain key ends at the first `:` followed by a space or the end of the line.
        let end = body
            .char_indices()
            .find(|&(i, c)| {
                let after = &body[i + 1..];
                c == ':' && (after.is_empty() || after.starts_with([' ', '\t']))
            })
            .map(|(i, _)| i)?;
        (body[..end].trim_end(), &body[end..])
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    let after_colon = rest.strip_prefix(':')?;
    if after_colon.is_empty() || after_colon.starts_with([' ', '\t']) {
        Some(key.to_string())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(keys: &[(String, Location)]) -> Vec<(&str, usize, usize)> {
        keys.iter()
            .map(|(k, at)| (k.as_str(), at.line, at.column))
            .collect()
    }

    #[test]
    fn finds_top_level_and_task_keys() {
        let text = "\
# a comment
name: demo
tasks:
  # the first task
  prep: {command: [a]}

  \"train run\":
    command: [b]
    after: [prep]
  'eval': {command: [c]}
atomic: true
";
        assert_eq!(
            names(&top_level_keys(text)),
            [("name", 2, 1), ("tasks", 3, 1), ("atomic", 11, 1)]
        );
        assert_eq!(
            names(&task_keys(text)),
            [("prep", 5, 3), ("train run", 7, 3), ("eval", 10, 3)]
        );
    }

    #[test]
    fn keys_and_non_keys() {
        assert_eq!(key_of("a: 1").as_deref(), Some("a"));
        assert_eq!(key_of("a:").as_deref(), Some("a"));
        assert_eq!(key_of("  x.y-z :  {c: 1}").as_deref(), Some("x.y-z"));
        assert_eq!(key_of("url: http://x").as_deref(), Some("url"));
        assert_eq!(key_of("- a: 1"), None);
        assert_eq!(key_of("# a: 1"), None);
        assert_eq!(key_of("http://x"), None);
        assert_eq!(key_of("\"a: b\": 1").as_deref(), Some("a: b"));
    }

    #[test]
    fn finds_a_repeated_key() {
        let text =
            "name: x\ntasks:\n  a:\n    gpus: 1\n    env: {}\n    gpus: 2\n  b:\n    gpus: 3\n";
        let task_a = Location { line: 4, column: 5 };
        assert_eq!(
            repeated_key(text, task_a, "gpus"),
            Some(Location { line: 6, column: 5 })
        );
        // The mapping ends before task b's `gpus`.
        assert_eq!(repeated_key(text, task_a, "env"), None);
        let flow = "name: x\ntasks: {a: 1, a: 2}\n";
        assert_eq!(
            repeated_key(flow, Location { line: 2, column: 8 }, "a"),
            None
        );
    }

    #[test]
    fn finds_a_tasks_field() {
        let text = "\
name: x
tasks:
  a:
    command: [x]
    # matrix: not this
    env:
      matrix: not this either
    matrix:
      seed: [1]
  b: {command: [y], matrix: {seed: [1]}}
  c:
    command: [z]
";
        let field = |line, column| task_field(text, Location { line, column }, "matrix");
        assert_eq!(field(3, 3), Some(Location { line: 8, column: 5 }));
        assert_eq!(
            field(10, 3),
            Some(Location {
                line: 10,
                column: 21
            })
        );
        assert_eq!(field(11, 3), None);
    }

    #[test]
    fn flow_style_tasks_are_not_found() {
        assert!(task_keys("name: x\ntasks: {a: {command: [x]}}\n").is_empty());
        assert!(task_keys("name: x\n").is_empty());
    }
}
