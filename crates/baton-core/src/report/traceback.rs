//! Following Python tracebacks line by line to find the exception a job died of: its type, the
//! first line of its message and the innermost frame.
//!
//! Shapes handled:
//! - `Traceback (most recent call last):`, `  File "x.py", line 3, in f` frames, indented code
//!   and caret lines, then `Type: message` (dotted types, empty messages);
//! - chained tracebacks ("During handling of the above exception..."): each new header starts
//!   over, so the last one wins;
//! - `SyntaxError` blocks with no header (`  File "x.py", line 3` then carets);
//! - a prefix on every line (`[rank0]: ` from torchrun, `[default0]:`, `(pid=12) ` from Ray) or
//!   only on the header (a logging prefix): lines of other ranks are skipped.
//!
//! The parser also says what each line was to it ([`TracebackLine`]), because text Python quotes
//! in a traceback (a source line `loss = float("nan")`) is code, not what the program printed:
//! the scanner must not read metrics or a NaN loss in it.

use super::sanitize::{clip, sanitize_line};
use super::signals::{LineSignals, TRACEBACK_HEADER};
use super::{Frame, PythonException};

const MAX_PREFIX_BYTES: usize = 64;
const MAX_KIND_BYTES: usize = 120;
const MAX_MESSAGE_CHARS: usize = 500;
const MAX_FILE_CHARS: usize = 200;
const MAX_FUNCTION_CHARS: usize = 100;
/// Lines inside a traceback that are neither frames nor code before we give up on it (rich
/// tracebacks draw boxes and print locals, so this is generous).
const MAX_STRAY_LINES: u32 = 200;

/// What one line was to the traceback being read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TracebackLine {
    /// Not part of a traceback (also another rank's line while this rank's is read).
    Outside,
    /// Text Python prints in a traceback: the header, a frame, quoted source, carets.
    Quoted,
    /// Inside a traceback, a line Python does not print there: a box drawn by `rich`, "During
    /// handling of the above exception", or something else written to the same stream. Whether
    /// it belonged to the traceback is known only when the traceback ends.
    Stray,
    /// The exception line that ends the traceback.
    Exception(PythonException),
    /// The parser gave up on the traceback at this line (too many stray lines, or a headerless
    /// one that did not end in an error): neither this line nor the stray ones before it were
    /// part of one.
    Abandoned,
}

/// One stream's traceback state.
#[derive(Debug, Default)]
pub(crate) struct TracebackParser {
    inside: bool,
    /// What precedes `Traceback` on the header line.
    prefix: String,
    /// The prefix is a per-line tag (`[rank0]:`): lines without it belong to someone else.
    prefix_is_tag: bool,
    /// Started from a `File` line without a header: only a `...Error` line may end it.
    headerless: bool,
    frame: Option<Frame>,
    stray: u32,
}

impl TracebackParser {
    /// Reads one sanitized line; says what it was, with the exception when a traceback ends
    /// on it.
    pub(crate) fn line(&mut self, line: &str, signals: &LineSignals) -> TracebackLine {
        if !self.inside {
            return if self.maybe_start(line, signals) {
                TracebackLine::Quoted
            } else {
                TracebackLine::Outside
            };
        }

        let content = match line.strip_prefix(self.prefix.as_str()) {
            Some(content) => content,
            None if self.prefix_is_tag => return TracebackLine::Outside,
            None => line,
        };
        if signals.traceback_header
            && let Some(at) = content.find(header())
        {
            // A chained or new traceback: start over, keeping the prefix it is under.
            let prefix = format!("{}{}", self.prefix, &content[..at]);
            self.start(&prefix, false);
            return TracebackLine::Quoted;
        }
        if let Some(frame) = parse_frame(content.trim_start()) {
            self.frame = Some(frame);
            self.stray = 0;
            return TracebackLine::Quoted;
        }
        if content.is_empty() || content.starts_with([' ', '\t']) {
            // Source lines, carets, "[Previous line repeated 996 more times]".
            return TracebackLine::Quoted;
        }
        if let Some((kind, message)) = parse_exception_line(content)
            && (!self.headerless || kind.ends_with("Error"))
        {
            self.inside = false;
            return TracebackLine::Exception(PythonException {
                kind: kind.to_string(),
                message: clip(&sanitize_line(message.as_bytes()), MAX_MESSAGE_CHARS),
                frame: self.frame.take(),
            });
        }
        self.stray += 1;
        if self.headerless || self.stray > MAX_STRAY_LINES {
            self.inside = false;
            return TracebackLine::Abandoned;
        }
        TracebackLine::Stray
    }

    /// Whether a traceback is being read: every line matters until it ends.
    pub(crate) fn inside(&self) -> bool {
        self.inside
    }

    /// Starts a traceback at `line` if it is a header or a SyntaxError location; says whether
    /// it did.
    fn maybe_start(&mut self, line: &str, signals: &LineSignals) -> bool {
        if signals.traceback_header
            && let Some(at) = line.find(header())
        {
            self.start(&line[..at], false);
            return true;
        }
        // A SyntaxError location: `  File "x.py", line 3` with no function.
        if signals.file_frame
            && let Some(at) = line.find("File \"")
            && let Some(frame) = parse_frame(&line[at..]).filter(|f| f.function.is_empty())
        {
            let before = &line[..at];
            let prefix = before.strip_suffix("  ").unwrap_or(before.trim_end());
            self.start(prefix, true);
            self.frame = Some(frame);
            return true;
        }
        false
    }

    fn start(&mut self, prefix: &str, headerless: bool) {
        self.inside = true;
        self.headerless = headerless;
        self.frame = None;
        self.stray = 0;
        self.prefix.clear();
        // A very long "prefix" is not a tag; match lines as they come.
        if prefix.len() <= MAX_PREFIX_BYTES {
            self.prefix.push_str(prefix);
        }
        self.prefix_is_tag = is_tag(&self.prefix);
    }

    #[cfg(test)]
    pub(crate) fn prefix_len(&self) -> usize {
        self.prefix.len()
    }
}

fn header() -> &'static str {
    std::str::from_utf8(TRACEBACK_HEADER).unwrap_or("Traceback (most recent call last)")
}

/// `[rank0]: `, `[default0]:`, `(pid=1234) `: a tag that multi-process launchers put on every
/// line. Timestamps and log levels are not tags: Python's logging only prefixes the first line.
fn is_tag(prefix: &str) -> bool {
    let p = prefix.trim_end().trim_end_matches(':');
    (p.starts_with('[') && p.ends_with(']')) || (p.starts_with('(') && p.ends_with(')'))
}

/// `File "path", line N, in function` or, for a SyntaxError, `File "path", line N`.
fn parse_frame(text: &str) -> Option<Frame> {
    let rest = text.strip_prefix("File \"")?;
    let close = rest.find("\", line ")?;
    let file = &rest[..close];
    let after = &rest[close + "\", line ".len()..];
    let digits = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    let line: u32 = after[..digits].parse().ok()?;
    let tail = &after[digits..];
    let function = match tail.strip_prefix(", in ") {
        Some(function) => function.trim(),
        None if tail.trim().is_empty() => "",
        None => return None,
    };
    Some(Frame {
        file: clip(&sanitize_line(file.as_bytes()), MAX_FILE_CHARS),
        line,
        function: clip(&sanitize_line(function.as_bytes()), MAX_FUNCTION_CHARS),
    })
}

/// `ValueError: message`, `torch.OutOfMemoryError: CUDA out of memory...`, `KeyboardInterrupt`.
fn parse_exception_line(text: &str) -> Option<(&str, &str)> {
    let (kind, message) = match text.split_once(": ") {
        Some((kind, message)) => (kind, message.trim_end()),
        None => (text.trim_end().trim_end_matches(':'), ""),
    };
    is_exception_type(kind).then_some((kind, message))
}

/// A dotted Python name whose last part is capitalised, as exception classes are.
fn is_exception_type(kind: &str) -> bool {
    if kind.is_empty() || kind.len() > MAX_KIND_BYTES {
        return false;
    }
    let parts_ok = kind.split('.').all(|part| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    let last = kind.rsplit('.').next().unwrap_or(kind);
    parts_ok && last.starts_with(|c: char| c.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::super::signals::classify;
    use super::*;

    fn last_exception(text: &str) -> Option<PythonException> {
        let mut parser = TracebackParser::default();
        let mut last = None;
        for line in text.lines() {
            if let TracebackLine::Exception(e) = parser.line(line, &classify(line.as_bytes())) {
                last = Some(e);
            }
        }
        last
    }

    /// What the parser made of each line of `text`, in short: `o` outside, `q` quoted, `s`
    /// stray, `e` the exception, `a` abandoned.
    fn roles(text: &str) -> String {
        let mut parser = TracebackParser::default();
        text.lines()
            .map(|line| match parser.line(line, &classify(line.as_bytes())) {
                TracebackLine::Outside => 'o',
                TracebackLine::Quoted => 'q',
                TracebackLine::Stray => 's',
                TracebackLine::Exception(_) => 'e',
                TracebackLine::Abandoned => 'a',
            })
            .collect()
    }

    fn frame(file: &str, line: u32, function: &str) -> Option<Frame> {
        Some(Frame {
            file: file.into(),
            line,
            function: function.into(),
        })
    }

    #[test]
    fn plain_value_error() {
        let out = "\
Traceback (most recent call last):
  File \"/home/u/proj/train.py\", line 88, in <module>
    main()
  File \"/home/u/proj/train.py\", line 42, in main
    raise ValueError(f\"lr must be positive, got {lr}\")
ValueError: lr must be positive, got -0.1
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(e.kind, "ValueError");
        assert_eq!(e.message, "lr must be positive, got -0.1");
        assert_eq!(e.frame, frame("/home/u/proj/train.py", 42, "main"));
    }

    #[test]
    fn chained_tracebacks_keep_the_last() {
        let out = "\
Traceback (most recent call last):
  File \"a.py\", line 2, in load
    x = cfg[\"k\"]
        ~~~^^^^^
KeyError: 'k'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File \"a.py\", line 9, in <module>
    load()
  File \"a.py\", line 4, in load
    raise RuntimeError(\"config incomplete\") from None
RuntimeError: config incomplete
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(e.kind, "RuntimeError");
        assert_eq!(e.message, "config incomplete");
        assert_eq!(e.frame, frame("a.py", 4, "load"));
    }

    #[test]
    fn syntax_error_without_header() {
        let out = "\
  File \"/tmp/job/x.py\", line 3
    def f(:
          ^
SyntaxError: invalid syntax
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(e.kind, "SyntaxError");
        assert_eq!(e.message, "invalid syntax");
        assert_eq!(e.frame, frame("/tmp/job/x.py", 3, ""));
    }

    #[test]
    fn syntax_error_in_an_import() {
        let out = "\
Traceback (most recent call last):
  File \"main.py\", line 1, in <module>
    import helpers
  File \"/w/helpers.py\", line 7
    print \"hi\"
    ^^^^^^^^^^
SyntaxError: Missing parentheses in call to 'print'. Did you mean print(...)?
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(e.kind, "SyntaxError");
        assert_eq!(e.frame, frame("/w/helpers.py", 7, ""));
    }

    #[test]
    fn rank_prefixed_tracebacks_skip_other_ranks() {
        let out = "\
[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank0]:   File \"/w/train.py\", line 10, in <module>
[rank1]:   File \"/w/train.py\", line 99, in <module>
[rank0]:     loss.backward()
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(e.kind, "torch.OutOfMemoryError");
        assert!(e.message.starts_with("CUDA out of memory."));
        assert_eq!(e.frame, frame("/w/train.py", 10, "<module>"));
    }

    #[test]
    fn logging_prefix_on_the_header_only() {
        let out = "\
2024-05-01 10:00:00,001 ERROR root: Traceback (most recent call last):
  File \"svc.py\", line 5, in handle
    do()
ConnectionError: peer reset
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(e.kind, "ConnectionError");
        assert_eq!(e.frame, frame("svc.py", 5, "handle"));
    }

    #[test]
    fn empty_messages_and_unfinished_tracebacks() {
        let out = "\
Traceback (most recent call last):
  File \"t.py\", line 1, in <module>
    time.sleep(10)
KeyboardInterrupt
";
        let e = last_exception(out).expect("an exception");
        assert_eq!(
            (e.kind.as_str(), e.message.as_str()),
            ("KeyboardInterrupt", "")
        );
        // Killed halfway through printing: nothing to report.
        let cut = "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n";
        assert_eq!(last_exception(cut), None);
        // A frame line from a warning is not a SyntaxError.
        assert_eq!(
            last_exception("  File \"w.py\", line 2, in f\nDone\n"),
            None
        );
    }

    #[test]
    fn long_prefixes_are_not_kept() {
        let mut parser = TracebackParser::default();
        let line = format!("{}Traceback (most recent call last):", "x".repeat(10_000));
        parser.line(&line, &classify(line.as_bytes()));
        assert_eq!(parser.prefix_len(), 0);
        let e = parser.line("ValueError: v", &classify(b"ValueError: v"));
        assert!(matches!(e, TracebackLine::Exception(e) if e.kind == "ValueError"));
    }

    #[test]
    fn each_line_is_told_apart() {
        // Header, frame, source, carets, exception; then plain output.
        assert_eq!(
            roles(
                "x\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n    f(loss=float(\"nan\"))\n    ^^^\nValueError: bad\nstep 2 loss=nan\n"
            ),
            "oqqqqeo"
        );
        // A SyntaxError location starts one; a line that is not an error gives it up.
        assert_eq!(
            roles("  File \"x.py\", line 3\n    def f(:\nSyntaxError: invalid syntax\n"),
            "qqe"
        );
        assert_eq!(
            roles("  File \"x.py\", line 3\n    loss = nan\nstep 5 loss=nan\n"),
            "qqa"
        );
        // Another rank's lines are outside this rank's traceback; an unknown line is stray.
        assert_eq!(
            roles(
                "[rank0]: Traceback (most recent call last):\n[rank1]: step 3 loss=nan\n[rank0]: During handling of the above exception\n[rank0]: KeyError: 'k'\n"
            ),
            "qose"
        );
    }

    #[test]
    fn exception_type_shapes() {
        assert!(is_exception_type("torch.distributed.DistBackendError"));
        assert!(is_exception_type("__main__.MyError"));
        assert!(!is_exception_type("done"));
        assert!(!is_exception_type("Epoch 3"));
        assert!(!is_exception_type("│ /w/x.py:3 in f"));
    }
}
