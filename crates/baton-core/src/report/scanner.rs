//! [`OutputScanner`]: one pass over a job's stdout and stderr, in any chunking, in bounded
//! memory and time whatever the job printed (a 50 MB line, a billion progress-bar redraws).
//!
//! Each stream is cut into lines by a [`LineSplitter`]; complete lines inside a chunk are looked
//! at in place, only a line split across chunks is copied, and no line is kept beyond
//! [`LINE_CAP`] bytes (the rest is counted). Each line then feeds the stream's tail, its
//! traceback parser, the metric table and the failure signals.
//!
//! What Python prints inside a traceback (quoted source, the exception's message) is not read
//! for metrics or a NaN loss: a `SyntaxError` quoting `print("loss=nan")` is a SyntaxError. A
//! NaN loss on a stray line inside a traceback counts only if the traceback is given up on.

use super::candidates;
use super::metrics::{MetricTable, for_each_metric};
use super::progress::Progress;
use super::sanitize::{clip_in_place, prefix_chars, sanitize_into};
use super::search::{contains_ignore_case, find_either};
use super::signals::{classify, is_loss_key, is_non_finite, says_non_finite};
use super::traceback::{TracebackLine, TracebackParser};
use super::{OutputSummary, PythonException, Stream, StreamSummary, TAIL_LINE_CHARS, TAIL_LINES};
use crate::midrun::{Condition, Milestones};
use crate::units::format_size;

/// The most bytes of one line that are looked at; the rest is counted and dropped.
pub(crate) const LINE_CAP: usize = 4096;
/// The most raw bytes of one line kept for the tail: enough for [`TAIL_LINE_CHARS`] characters
/// with colour codes around them.
const TAIL_RAW_CAP: usize = 2048;
/// Characters kept of a line quoted as a finding (OOM, NCCL, NaN loss).
const FINDING_CHARS: usize = TAIL_LINE_CHARS;

/// Streaming scan of a job's output in bounded memory, whatever the job printed.
#[derive(Debug, Default)]
pub struct OutputScanner {
    splitters: [LineSplitter; 2],
    streams: [StreamState; 2],
    analysis: Analysis,
    /// Made by [`OutputScanner::following`]: only what [`OutputScanner::so_far`] tells is kept.
    following: bool,
    /// The latest counters a following scanner saw (`progress`).
    progress: Progress,
}

impl OutputScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// A scanner for a job that still runs, which keeps only what [`OutputScanner::so_far`]
    /// tells and finds it at a fraction of the cost: lines that cannot hold a finding
    /// (`candidates`) are skipped unparsed, and neither the tail nor the metric table is kept,
    /// so its [`OutputScanner::finish`] says nothing of them (the end report scans the whole
    /// output with [`OutputScanner::new`]). It finds what a full scanner's `so_far` would.
    pub fn following() -> Self {
        OutputScanner {
            following: true,
            ..Self::default()
        }
    }

    /// A following scanner that also looks for the submitter's milestones on every line until
    /// each has been seen (those lines are then all parsed: a job that asked for milestones
    /// costs the follower what a full scan does, until they are met). The error names the
    /// pattern that does not compile (`Milestones::parse` checked it before).
    pub fn with_milestones(milestones: &Milestones) -> Result<Self, String> {
        let mut scanner = Self::following();
        if milestones.is_empty() {
            return Ok(scanner);
        }
        let patterns = milestones
            .patterns()
            .map(|(p, _)| crate::midrun::compile(p))
            .collect::<Result<Vec<_>, _>>()?;
        scanner.analysis.milestones = Some(MilestoneScan {
            patterns,
            conditions: milestones
                .conditions()
                .map(|(c, _)| (c.metric.to_ascii_lowercase(), c.clone()))
                .collect(),
            hits: vec![None; milestones.count()],
        });
        Ok(scanner)
    }

    /// Feeds raw bytes of one stream, in any chunking (a line may span many calls; the two
    /// streams may be interleaved call by call, each keeps its own partial line).
    pub fn feed(&mut self, stream: Stream, bytes: &[u8]) {
        if self.following {
            return self.feed_following(stream, bytes);
        }
        let i = stream.index();
        let state = &mut self.streams[i];
        let analysis = &mut self.analysis;
        state.bytes += bytes.len() as u64;
        self.splitters[i].push(bytes, |line, overflow| {
            state.line(line, overflow);
            analysis.line(stream, line);
        });
    }

    /// [`OutputScanner::feed`] for a following scanner. The line carried over from the last
    /// chunk and the partial line at this chunk's end go through the stream's splitter as
    /// always; the whole lines between them are searched for candidates at once, and only the
    /// lines holding one (and every line while a traceback is read) are split and analysed.
    fn feed_following(&mut self, stream: Stream, mut bytes: &[u8]) {
        self.progress.read_tail(bytes);
        let i = stream.index();
        self.streams[i].bytes += bytes.len() as u64;
        let splitter = &mut self.splitters[i];
        let analysis = &mut self.analysis;
        let mut analyse = |line: &[u8], _overflow: u64| analysis.line(stream, line);
        if !splitter.at_line_start() {
            let Some(nl) = memchr::memchr(b'\n', bytes) else {
                return splitter.push(bytes, &mut analyse);
            };
            splitter.push(&bytes[..=nl], &mut analyse);
            bytes = &bytes[nl + 1..];
        }
        let whole_end = memchr::memrchr(b'\n', bytes).map_or(0, |nl| nl + 1);
        let (whole, rest) = bytes.split_at(whole_end);
        let mut at = 0;
        while at < whole.len() {
            // While a NaN loss stands, every line: the finite loss that ends the spell holds
            // no candidate word.
            let every_line = self.analysis.tracebacks[i].inside()
                || self.analysis.findings.nan_standing
                || self
                    .analysis
                    .milestones
                    .as_ref()
                    .is_some_and(MilestoneScan::pending);
            let start = if every_line {
                at
            } else {
                match candidates::first(&whole[at..]) {
                    // The line the candidate is on, from its start.
                    Some(hit) => {
                        memchr::memrchr(b'\n', &whole[at..at + hit]).map_or(at, |nl| at + nl + 1)
                    }
                    None => break,
                }
            };
            let end = start
                + memchr::memchr(b'\n', &whole[start..]).expect("whole lines end in a newline");
            let analysis = &mut self.analysis;
            self.splitters[i].push(&whole[start..=end], |line, _| analysis.line(stream, line));
            at = end + 1;
        }
        let analysis = &mut self.analysis;
        self.splitters[i].push(rest, |line, _| analysis.line(stream, line));
    }

    /// How far the job has got, from the counters at the end of what a following scanner was
    /// fed (a full scanner keeps none).
    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// Says that the first `bytes` bytes of `stream` were not fed (the caller only scans the last
    /// N MiB of a huge file). The first partial line fed after a skip is dropped, since its start
    /// was never seen.
    pub fn skipped(&mut self, stream: Stream, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let i = stream.index();
        self.streams[i].bytes += bytes;
        self.streams[i].skipped += bytes;
        self.splitters[i].skip();
    }

    /// What the output has shown so far, for a job that still runs (`crate::midrun`): the first
    /// NaN/inf loss and the latest error, each as the line that showed it. Lines not yet ended
    /// are not looked at until they are.
    pub fn so_far(&self) -> SoFar {
        let f = &self.analysis.findings;
        let error = f
            .exception
            .as_ref()
            .map(|e| match e.message.as_str() {
                "" => e.kind.clone(),
                m => format!("{}: {m}", e.kind),
            })
            .or_else(|| f.cuda_oom.clone())
            .or_else(|| {
                (f.nccl_strength >= 2)
                    .then(|| f.nccl_error.clone())
                    .flatten()
            });
        SoFar {
            non_finite_loss: f.nan_latest.clone(),
            nan_spells: f.nan_spells,
            error,
            // A line saying so, else counters at their end (a following scanner's).
            finished: f.finished.clone().or_else(|| self.progress.done()),
            milestones: self
                .analysis
                .milestones
                .as_ref()
                .map(|m| m.hits.clone())
                .unwrap_or_default(),
        }
    }

    /// Flushes the last unterminated line of each stream and returns what was found.
    pub fn finish(mut self) -> OutputSummary {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let i = stream.index();
            let state = &mut self.streams[i];
            let analysis = &mut self.analysis;
            self.splitters[i].finish(|line, overflow| {
                state.line(line, overflow);
                analysis.line(stream, line);
            });
        }
        // A traceback cut short (the job was killed while Python printed it) ended in no
        // exception: what its stray lines said stands.
        for pending in &mut self.analysis.pending_loss {
            confirm(pending, &mut self.analysis.findings);
        }
        let [stdout, stderr] = self.streams;
        let findings = self.analysis.findings;
        OutputSummary {
            stdout: stdout.summary(),
            stderr: stderr.summary(),
            metrics: self.analysis.metrics.to_metrics(),
            exception: findings.exception,
            cuda_oom: findings.cuda_oom,
            nccl_error: findings.nccl_error,
            non_finite_loss: findings.non_finite_loss,
        }
    }
}

/// What a running job's output has shown so far ([`OutputScanner::so_far`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SoFar {
    /// The first line of the latest spell of a NaN or infinite loss.
    pub non_finite_loss: Option<String>,
    /// How many such spells began: a spell ends at the first finite loss printed after it.
    pub nan_spells: u32,
    /// The latest error: a Python exception (`RuntimeError: ...`), else a CUDA out-of-memory
    /// line, else an NCCL error line.
    pub error: Option<String>,
    /// The first line that said the work is done ("Training finished", Hugging Face's and
    /// Lightning's end lines), else what the counters say once they reached their end (its
    /// steps at their total, its only bar at 100%: [`Progress::done`]).
    pub finished: Option<String>,
    /// For each milestone of [`OutputScanner::with_milestones`], the first line that showed it.
    pub milestones: Vec<Option<String>>,
}

/// Cuts one stream into lines. A carriage return not followed by a newline means the terminal
/// went back to the start of the line (progress bars), so what came before it is discarded
/// right away: a bar redrawn a million times costs nothing.
#[derive(Debug, Default)]
struct LineSplitter {
    /// The current line when it spans chunks, at most [`LINE_CAP`] bytes.
    partial: Vec<u8>,
    /// Bytes of the current line beyond what `partial` kept.
    overflow: u64,
    /// The last byte fed was `\r`: the next byte decides between a line end and a redraw.
    pending_cr: bool,
    /// A skip happened; the line being read started before it and is dropped.
    dropping: bool,
}

impl LineSplitter {
    fn push(&mut self, mut bytes: &[u8], mut on_line: impl FnMut(&[u8], u64)) {
        if self.pending_cr {
            let Some(&next) = bytes.first() else {
                return;
            };
            self.pending_cr = false;
            if next == b'\n' {
                self.end_line(&[], &mut on_line);
                bytes = &bytes[1..];
            } else {
                self.clear();
            }
        }
        while let Some(at) = find_either(bytes, b'\n', b'\r') {
            let segment = &bytes[..at];
            if bytes[at] == b'\n' {
                self.end_line(segment, &mut on_line);
                bytes = &bytes[at + 1..];
            } else if at + 1 == bytes.len() {
                self.append(segment);
                self.pending_cr = true;
                return;
            } else if bytes[at + 1] == b'\n' {
                self.end_line(segment, &mut on_line);
                bytes = &bytes[at + 2..];
            } else {
                self.clear();
                bytes = &bytes[at + 1..];
            }
        }
        self.append(bytes);
    }

    /// Whether the next byte starts a line: nothing of the current one is held or dropped.
    fn at_line_start(&self) -> bool {
        self.partial.is_empty() && self.overflow == 0 && !self.pending_cr && !self.dropping
    }

    /// The end of the stream: an unterminated last line still counts.
    fn finish(&mut self, mut on_line: impl FnMut(&[u8], u64)) {
        self.pending_cr = false;
        if !self.partial.is_empty() || self.overflow > 0 {
            self.end_line(&[], &mut on_line);
        }
        self.dropping = false;
    }

    fn skip(&mut self) {
        self.clear();
        self.pending_cr = false;
        self.dropping = true;
    }

    fn clear(&mut self) {
        self.partial.clear();
        self.overflow = 0;
    }

    /// Keeps as much of `bytes` as fits under the cap, cut at a character boundary. Once a line
    /// has overflowed, later bytes only count, so the kept part stays a true prefix.
    fn append(&mut self, bytes: &[u8]) {
        if self.dropping {
            return;
        }
        let room = LINE_CAP - self.partial.len();
        if self.overflow == 0 && bytes.len() <= room {
            self.partial.extend_from_slice(bytes);
        } else {
            let keep = if self.overflow == 0 {
                char_boundary_at_most(bytes, room)
            } else {
                0
            };
            self.partial.extend_from_slice(&bytes[..keep]);
            self.overflow += (bytes.len() - keep) as u64;
        }
    }

    /// A line ended with `segment`; hands it over, without copying when it lies in one chunk.
    fn end_line(&mut self, segment: &[u8], on_line: &mut impl FnMut(&[u8], u64)) {
        if self.dropping {
            self.dropping = false;
            self.clear();
            return;
        }
        if self.partial.is_empty() && self.overflow == 0 {
            let keep = char_boundary_at_most(segment, LINE_CAP);
            on_line(&segment[..keep], (segment.len() - keep) as u64);
        } else {
            self.append(segment);
            on_line(&self.partial, self.overflow);
            self.clear();
        }
    }
}

/// The largest `n <= max` such that `bytes[..n]` does not end inside a UTF-8 character.
fn char_boundary_at_most(bytes: &[u8], max: usize) -> usize {
    if bytes.len() <= max {
        return bytes.len();
    }
    let mut n = max;
    // At most three continuation bytes (0b10xx_xxxx) precede a character start.
    while n > 0 && max - n < 3 && bytes[n] & 0xc0 == 0x80 {
        n -= 1;
    }
    n
}

/// Counts and the tail of one stream.
#[derive(Debug, Default)]
struct StreamState {
    bytes: u64,
    skipped: u64,
    lines: u64,
    tail: Tail,
}

impl StreamState {
    fn line(&mut self, line: &[u8], overflow: u64) {
        self.lines += 1;
        self.tail.push(line, overflow);
    }

    fn summary(self) -> StreamSummary {
        StreamSummary {
            bytes: self.bytes,
            lines: self.lines,
            tail: self.tail.render(),
            skipped_bytes: self.skipped,
        }
    }
}

/// The last [`TAIL_LINES`] lines, raw, in a ring of reused buffers; sanitized only at the end.
#[derive(Debug, Default)]
struct Tail {
    slots: Vec<TailLine>,
    /// Where the next line goes once the ring is full.
    next: usize,
}

#[derive(Debug, Default)]
struct TailLine {
    raw: Vec<u8>,
    /// Bytes of the line not kept.
    dropped: u64,
}

impl Tail {
    fn push(&mut self, line: &[u8], overflow: u64) {
        let keep = char_boundary_at_most(line, TAIL_RAW_CAP);
        let dropped = overflow + (line.len() - keep) as u64;
        if self.slots.len() < TAIL_LINES {
            self.slots.push(TailLine {
                raw: line[..keep].to_vec(),
                dropped,
            });
            return;
        }
        let slot = &mut self.slots[self.next];
        slot.raw.clear();
        slot.raw.extend_from_slice(&line[..keep]);
        slot.dropped = dropped;
        self.next = (self.next + 1) % TAIL_LINES;
    }

    /// Oldest first, sanitized, each at most [`TAIL_LINE_CHARS`] characters.
    fn render(&self) -> Vec<String> {
        let (newer, older) = self.slots.split_at(self.next.min(self.slots.len()));
        older
            .iter()
            .chain(newer)
            .map(|slot| {
                let mut text = String::new();
                sanitize_into(&slot.raw, &mut text);
                if slot.dropped == 0 {
                    clip_in_place(&mut text, TAIL_LINE_CHARS);
                    return text;
                }
                let marker = format!(" …[+{}]", format_size(slot.dropped));
                let room = TAIL_LINE_CHARS - marker.chars().count();
                let keep = prefix_chars(&text, room).len();
                text.truncate(keep);
                text.push_str(&marker);
                text
            })
            .collect()
    }
}

/// What is learnt from lines of either stream.
#[derive(Debug, Default)]
struct Analysis {
    tracebacks: [TracebackParser; 2],
    metrics: MetricTable,
    findings: Findings,
    /// Per stream, a NaN/inf loss seen on a stray line of the traceback being read: dropped if
    /// the traceback ends in an exception (the line was part of it), kept if it is given up on.
    pending_loss: [Option<String>; 2],
    /// Reused for lines that need sanitizing before they can be parsed.
    scratch: String,
    /// The submitter's milestones, while one is still to be seen.
    milestones: Option<MilestoneScan>,
}

/// The milestones a following scanner looks for on every line, and the first line of each.
#[derive(Debug)]
struct MilestoneScan {
    patterns: Vec<regex::Regex>,
    /// Each condition with its metric's name in lower case, as the line is searched for it.
    conditions: Vec<(String, Condition)>,
    /// One per milestone: patterns first, then conditions.
    hits: Vec<Option<String>>,
}

impl MilestoneScan {
    /// Whether a milestone is still to be seen.
    fn pending(&self) -> bool {
        self.hits.iter().any(Option::is_none)
    }

    fn line(&mut self, text: &str) {
        for (i, pattern) in self.patterns.iter().enumerate() {
            if self.hits[i].is_none() && pattern.is_match(text) {
                store_line(&mut self.hits[i], text);
            }
        }
        let offset = self.patterns.len();
        for (j, (metric, condition)) in self.conditions.iter().enumerate() {
            let hit = &mut self.hits[offset + j];
            if hit.is_some() || !contains_ignore_case(text.as_bytes(), metric.as_bytes()) {
                continue;
            }
            let mut holds = false;
            for_each_metric(text, |key, value| {
                holds |= key.eq_ignore_ascii_case(&condition.metric) && condition.holds(value);
            });
            if holds {
                store_line(hit, text);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Findings {
    exception: Option<PythonException>,
    cuda_oom: Option<String>,
    nccl_error: Option<String>,
    /// 2 when `nccl_error` is an error, 1 for a warning.
    nccl_strength: u8,
    non_finite_loss: Option<String>,
    /// The first line saying the work is done.
    finished: Option<String>,
    /// Spells of a non-finite loss (outside tracebacks): how many began, the first line of the
    /// latest, and whether it still stands (no finite loss printed since).
    nan_spells: u32,
    nan_latest: Option<String>,
    nan_standing: bool,
}

impl Findings {
    /// A line outside a traceback showed a non-finite loss: a new spell unless one stands.
    fn non_finite_seen(&mut self, text: &str) {
        if !self.nan_standing {
            self.nan_spells += 1;
            self.nan_latest = None;
            store_line(&mut self.nan_latest, text);
            self.nan_standing = true;
        }
    }
}

impl Analysis {
    fn line(&mut self, stream: Stream, raw: &[u8]) {
        let Analysis {
            tracebacks,
            metrics,
            findings,
            pending_loss,
            scratch,
            milestones,
        } = self;
        let pending = &mut pending_loss[stream.index()];
        // Most lines are plain text and are parsed in place; the rest are cleaned first so
        // colour codes cannot hide a traceback or a metric.
        let text: &str = match plain_text(raw) {
            Some(text) => text,
            None => {
                sanitize_into(raw, scratch);
                scratch.as_str()
            }
        };
        if let Some(milestones) = milestones
            && milestones.pending()
        {
            milestones.line(text);
        }
        let signals = classify(text.as_bytes());

        let place = tracebacks[stream.index()].line(text, &signals);
        match &place {
            TracebackLine::Exception(_) => *pending = None,
            TracebackLine::Abandoned => confirm(pending, findings),
            _ => {}
        }
        // The exception line itself is where a CUDA OOM or an NCCL error usually shows.
        if signals.cuda_oom {
            store_line(&mut findings.cuda_oom, text);
        }
        if signals.nccl > 0 && signals.nccl >= findings.nccl_strength {
            findings.nccl_strength = signals.nccl;
            store_line(&mut findings.nccl_error, text);
        }
        let in_traceback = match place {
            TracebackLine::Exception(exception) => {
                findings.exception = Some(exception);
                return;
            }
            // Python's own text in a traceback: code and the exception's message, not output.
            TracebackLine::Quoted => return,
            TracebackLine::Stray => true,
            TracebackLine::Outside | TracebackLine::Abandoned => false,
        };
        if !in_traceback
            && findings.finished.is_none()
            && candidates::says_finished(text.as_bytes())
        {
            store_line(&mut findings.finished, text);
        }
        // A NaN loss shows as a metric (`loss=nan`) or in words ("Loss is NaN"). The words only
        // count on a line whose metrics do not already say which value was not finite
        // (`loss=0.3 grad_norm=nan` is about the gradient).
        let mut loss_went_bad = false;
        let mut loss_is_finite = false;
        // Only a standing spell asks whether a loss is finite (the common line pays nothing).
        let spell_stands = findings.nan_standing;
        let mut metric_explains = false;
        for_each_metric(text, |key, value| {
            metrics.update(key, value);
            if is_non_finite(value) {
                metric_explains = true;
                loss_went_bad |= is_loss_key(key);
            } else if signals.mentions_loss && !metric_explains {
                metric_explains = is_loss_key(key);
            }
            loss_is_finite |= spell_stands && !is_non_finite(value) && is_loss_key(key);
        });
        if signals.mentions_loss && !metric_explains {
            loss_went_bad = says_non_finite(text.as_bytes());
        }
        if loss_went_bad && !in_traceback {
            findings.non_finite_seen(text);
        } else if loss_is_finite && !in_traceback {
            findings.nan_standing = false;
        }
        if loss_went_bad && findings.non_finite_loss.is_none() {
            if !in_traceback {
                store_line(&mut findings.non_finite_loss, text);
            } else if pending.is_none() {
                store_line(pending, text);
            }
        }
    }
}

/// A pending NaN-loss line turns out not to be part of a traceback: it is the finding, unless
/// an earlier one was already kept.
fn confirm(pending: &mut Option<String>, findings: &mut Findings) {
    if let Some(line) = pending.take()
        && findings.non_finite_loss.is_none()
    {
        findings.non_finite_seen(&line);
        findings.non_finite_loss = Some(line);
    }
}

/// The line as text when it needs no cleaning: valid UTF-8 without control characters. Cheap:
/// both checks run over the bytes without branching per byte.
fn plain_text(raw: &[u8]) -> Option<&str> {
    let has_controls = raw.iter().fold(false, |found, &b| {
        found | ((b < 0x20 && b != b'\t') | (b == 0x7f))
    });
    if has_controls {
        return None;
    }
    std::str::from_utf8(raw).ok()
}

/// Stores a line quoted as a finding, reusing the slot's buffer: sanitized (the fast path lets
/// C1 and bidi characters through), trimmed and clipped.
fn store_line(slot: &mut Option<String>, text: &str) {
    let buffer = slot.get_or_insert_with(String::new);
    sanitize_into(text.trim().as_bytes(), buffer);
    clip_in_place(buffer, FINDING_CHARS);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[(Stream, &[u8])]) -> OutputSummary {
        let mut scanner = OutputScanner::new();
        for (stream, bytes) in chunks {
            scanner.feed(*stream, bytes);
        }
        scanner.finish()
    }

    #[test]
    fn lines_are_the_same_in_any_chunking() {
        let text = b"first line\r\nsecond\rSECOND\nthird\r\rTHIRD\r\n\nlast without newline";
        let whole = scan(&[(Stream::Stdout, text)]);
        assert_eq!(
            whole.stdout.tail,
            vec!["first line", "SECOND", "THIRD", "", "last without newline"]
        );
        assert_eq!(whole.stdout.lines, 5);
        assert_eq!(whole.stdout.bytes, text.len() as u64);
        for size in 1..=text.len() {
            let mut scanner = OutputScanner::new();
            for chunk in text.chunks(size) {
                scanner.feed(Stream::Stdout, chunk);
            }
            assert_eq!(scanner.finish().stdout, whole.stdout, "chunk size {size}");
        }
    }

    #[test]
    fn so_far_tells_a_nan_loss_and_an_error_while_the_output_goes_on() {
        let mut scanner = OutputScanner::new();
        scanner.feed(Stream::Stdout, b"step 1 loss=0.5\nstep 2 loss=na");
        assert_eq!(
            scanner.so_far(),
            SoFar::default(),
            "a line counts once it ends"
        );
        scanner.feed(Stream::Stdout, b"n\n");
        assert_eq!(
            scanner.so_far().non_finite_loss.as_deref(),
            Some("step 2 loss=nan")
        );
        scanner.feed(
            Stream::Stderr,
            b"Traceback (most recent call last):\n  File \"w.py\", line 3, in <module>\n                  work()\nRuntimeError: DataLoader worker (pid 7) is killed\n",
        );
        assert_eq!(
            scanner.so_far().error.as_deref(),
            Some("RuntimeError: DataLoader worker (pid 7) is killed")
        );
    }

    #[test]
    fn interleaved_streams_keep_their_own_partial_lines() {
        let s = scan(&[
            (Stream::Stdout, b"loss="),
            (Stream::Stderr, b"Warn"),
            (Stream::Stdout, b"0.5 step=3\nmore"),
            (Stream::Stderr, b"ing: x\n"),
        ]);
        assert_eq!(s.stdout.tail, vec!["loss=0.5 step=3", "more"]);
        assert_eq!(s.stderr.tail, vec!["Warning: x"]);
        assert_eq!(s.metrics[0].key, "loss");
        assert_eq!(s.metrics[0].value, "0.5");
    }

    #[test]
    fn a_trailing_carriage_return_ends_the_last_line() {
        let s = scan(&[(Stream::Stderr, b"progress 10%\rprogress 100%\r")]);
        assert_eq!(s.stderr.tail, vec!["progress 100%"]);
        assert_eq!(s.stderr.lines, 1);
    }

    #[test]
    fn skipping_drops_the_first_partial_line() {
        let cut_line: &[u8] = b"ss=999 tail of a line whose start was skipped\n";
        let rest: &[u8] = b"loss=0.1\nstep=5";
        let mut scanner = OutputScanner::new();
        scanner.skipped(Stream::Stdout, 1_000_000);
        scanner.feed(Stream::Stdout, cut_line);
        scanner.feed(Stream::Stdout, rest);
        let s = scanner.finish();
        assert_eq!(s.stdout.tail, vec!["loss=0.1", "step=5"]);
        assert_eq!(s.stdout.lines, 2);
        assert_eq!(s.stdout.skipped_bytes, 1_000_000);
        assert_eq!(
            s.stdout.bytes,
            1_000_000 + (cut_line.len() + rest.len()) as u64
        );
        assert!(!s.metrics.iter().any(|m| m.key == "ss"));

        // The partial line spanning chunks after a skip is dropped too, and a skip mid-stream
        // discards the line being read.
        let mut scanner = OutputScanner::new();
        scanner.feed(Stream::Stderr, b"kept\nhalf a li");
        scanner.skipped(Stream::Stderr, 10);
        scanner.feed(Stream::Stderr, b"ne that was cut");
        scanner.feed(Stream::Stderr, b" here\nafter\n");
        let s = scanner.finish();
        assert_eq!(s.stderr.tail, vec!["kept", "after"]);

        // Nothing but a partial line after the skip: nothing.
        let mut scanner = OutputScanner::new();
        scanner.skipped(Stream::Stdout, 5);
        scanner.feed(Stream::Stdout, b"no newline at all");
        assert_eq!(scanner.finish().stdout.lines, 0);
    }

    #[test]
    fn a_fifty_megabyte_line_stays_bounded() {
        let mut scanner = OutputScanner::new();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..50 {
            scanner.feed(Stream::Stdout, &chunk);
            assert!(scanner.splitters[0].partial.len() <= LINE_CAP);
            assert!(scanner.splitters[0].partial.capacity() <= 2 * LINE_CAP);
        }
        assert_eq!(
            scanner.splitters[0].overflow,
            50 * (1 << 20) - LINE_CAP as u64
        );
        let s = scanner.finish();
        assert_eq!(s.stdout.lines, 1);
        assert_eq!(s.stdout.bytes, 50 << 20);
        let line = &s.stdout.tail[0];
        assert_eq!(line.chars().count(), TAIL_LINE_CHARS);
        let marker = format!(" …[+{}]", format_size((50 << 20) - TAIL_RAW_CAP as u64));
        assert!(line.ends_with(&marker), "{line}");
        assert!(line.starts_with("xxxxxxxx"));
    }

    #[test]
    fn long_lines_are_cut_at_a_character_boundary() {
        let mut line = "é".repeat(LINE_CAP);
        line.push('\n');
        let mut scanner = OutputScanner::new();
        scanner.feed(Stream::Stdout, line.as_bytes());
        let s = scanner.finish();
        assert!(!s.stdout.tail[0].contains('\u{fffd}'));
        assert_eq!(char_boundary_at_most("aé".as_bytes(), 2), 1);
        assert_eq!(char_boundary_at_most("aé".as_bytes(), 3), 3);
        assert_eq!(char_boundary_at_most("a€".as_bytes(), 3), 1);
    }

    #[test]
    fn a_progress_bar_redrawn_without_newlines_stays_bounded() {
        let mut scanner = OutputScanner::new();
        for i in 0..100_000 {
            let redraw = format!("\r{:3}%|{}| loss={}", i % 100, "#".repeat(i % 50), i);
            scanner.feed(Stream::Stderr, redraw.as_bytes());
            assert!(scanner.splitters[1].partial.len() <= LINE_CAP);
        }
        let s = scanner.finish();
        assert_eq!(s.stderr.lines, 1);
        assert_eq!(
            s.stderr.tail,
            vec![format!(" 99%|{}| loss=99999", "#".repeat(49))]
        );
        assert_eq!(s.metrics[0].value, "99999");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let mut scanner = OutputScanner::new();
        for i in 0..1000 {
            scanner.feed(Stream::Stdout, format!("line {i}\n").as_bytes());
        }
        let s = scanner.finish();
        let expected: Vec<String> = (980..1000).map(|i| format!("line {i}")).collect();
        assert_eq!(s.stdout.tail, expected);
        assert_eq!(s.stdout.lines, 1000);
        assert_eq!(s.stderr, StreamSummary::default());
    }

    #[test]
    fn text_inside_a_traceback_is_not_output() {
        // Quoted source and the exception's message hold no metrics and no NaN loss.
        let s = scan(&[(
            Stream::Stderr,
            b"Traceback (most recent call last):\n  File \"t.py\", line 9, in <module>\n    train(lr=0.5, loss=float(\"nan\"))\nValueError: loss=nan at step=7\nstep=8 lr=0.1\n",
        )]);
        assert_eq!(s.non_finite_loss, None);
        let shown: Vec<String> = s
            .metrics
            .iter()
            .map(|m| format!("{}={}", m.key, m.value))
            .collect();
        assert_eq!(shown, ["step=8", "lr=0.1"]);

        // A stray line inside a traceback that ends in an exception was part of it (a box
        // drawn by rich); in one given up on, it was output.
        let rich = b"Traceback (most recent call last):\n\xe2\x94\x82 loss is nan here \xe2\x94\x82\nValueError: bad\n";
        assert_eq!(scan(&[(Stream::Stderr, rich)]).non_finite_loss, None);
        let mut cut = b"Traceback (most recent call last):\nLoss is NaN, stopping\n".to_vec();
        assert_eq!(
            scan(&[(Stream::Stderr, &cut)]).non_finite_loss.as_deref(),
            Some("Loss is NaN, stopping")
        );
        cut.extend(std::iter::repeat_n(&b"noise\n"[..], 250).flatten());
        cut.extend_from_slice(b"Loss is inf\n");
        assert_eq!(
            scan(&[(Stream::Stderr, &cut)]).non_finite_loss.as_deref(),
            Some("Loss is NaN, stopping")
        );
    }

    #[test]
    fn coloured_lines_are_parsed_after_cleaning() {
        let s = scan(&[(
            Stream::Stderr,
            b"\x1b[31mTraceback (most recent call last):\x1b[0m\n  File \"t.py\", line 1, in <module>\n\x1b[1;31mValueError\x1b[0m: bad\n\x1b[32mloss\x1b[0m=\x1b[33m0.5\x1b[0m\n",
        )]);
        let e = s.exception.expect("an exception");
        assert_eq!((e.kind.as_str(), e.message.as_str()), ("ValueError", "bad"));
        assert_eq!(s.metrics[0].value, "0.5");
        assert_eq!(s.stderr.tail[2], "ValueError: bad");
    }

    /// Lines of every kind the detectors care about, and the noise around them.
    const CORPUS: &[&str] = &[
        "step 12 loss=0.4312 lr=3e-4 grad_norm=0.91 tokens/s=51234\n",
        "{'loss': 0.52, 'learning_rate': 4.9e-05, 'epoch': 0.1}\n",
        "INFO:__main__:epoch 1 done, val_acc=0.81\n",
        "step 13 loss=nan lr=3e-4\n",
        "step 14 loss=0.3 grad_norm=inf\n",
        "Loss is NaN, stopping training\n",
        "loss scale reduced to inf\n",
        "Epoch 1:  40%|####      | 4/10 [00:01<00:02]\r",
        "Epoch 1:  50%|#####     | 5/10 loss=nan\r",
        "\r\n",
        "Traceback (most recent call last):\n",
        "  File \"train.py\", line 3, in <module>\n",
        "    f(loss=float(\"nan\"))\n",
        "ValueError: bad value\n",
        "[rank0]: Traceback (most recent call last):\n",
        "[rank1]: step 3 loss=nan\n",
        "[rank0]: KeyError: 'k'\n",
        "  File \"x.py\", line 1\n",
        "SyntaxError: invalid syntax\n",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n",
        "NCCL WARN Call to connect returned Connection refused\n",
        "OOM when allocating tensor with shape[1024,1024]\n",
        "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate\n",
        "jax.errors: RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n",
        "torch.distributed.DistBackendError: NCCL communicator was aborted\n",
        "failed: ncclSystemError: System call failed\n",
        "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation timeout\n",
        "\x1b[31mTraceback (most recent call last):\x1b[0m\n",
        "\x1b[1;31mValueError\x1b[0m: coloured\n",
        "Training finished in 3h 2m\n",
        "  File \"t.py\", line 9, in <module>\n    print(\"Training finished\")\n",
        "`Trainer.fit` stopped: `max_epochs=3` reached.\n",
        "a line with no end",
        "\n",
    ];

    #[test]
    fn a_nan_spell_ends_at_the_next_finite_loss_and_a_later_one_is_counted() {
        let output = "step 1 loss=0.5\nstep 2 loss=nan\nstep 3 loss=nan\nstep 4 lr=0.1\n\
                      step 5 loss=0.4 grad_norm=nan\nstep 6 loss=inf\n";
        for following in [true, false] {
            let mut scanner = if following {
                OutputScanner::following()
            } else {
                OutputScanner::default()
            };
            for chunk in output.as_bytes().chunks(7) {
                scanner.feed(Stream::Stdout, chunk);
            }
            let so_far = scanner.so_far();
            assert_eq!(so_far.nan_spells, 2, "following: {following}");
            assert_eq!(so_far.non_finite_loss.as_deref(), Some("step 6 loss=inf"));
            let summary = scanner.finish();
            assert_eq!(
                summary.non_finite_loss.as_deref(),
                Some("step 2 loss=nan"),
                "the report keeps the first"
            );
        }
    }

    #[test]
    fn a_following_scanner_finds_the_milestones_in_any_chunking() {
        let milestones = Milestones::parse(crate::midrun::AskedMilestones {
            wake_on: &["Epoch \\d+ done".into()],
            wake_when: &["val_acc>=0.9".into(), "epoch>=2".into()],
            ..Default::default()
        })
        .unwrap();
        let output = "step 1 loss=0.5 val_acc=0.5\nINFO \x1b[32mEpoch 1 done\x1b[0m\n\
                      {'val_acc': 0.93, 'epoch': 1}\nEpoch 2/10 loss=0.2\nval_acc=0.95\n";
        for cut in [1, 2, 7, 64, output.len()] {
            let mut scanner = OutputScanner::with_milestones(&milestones).unwrap();
            for chunk in output.as_bytes().chunks(cut) {
                scanner.feed(Stream::Stdout, chunk);
            }
            assert_eq!(
                scanner.so_far().milestones,
                vec![
                    Some("INFO Epoch 1 done".to_string()),
                    Some("{'val_acc': 0.93, 'epoch': 1}".to_string()),
                    Some("Epoch 2/10 loss=0.2".to_string()),
                ],
                "cut every {cut} bytes"
            );
        }
        let none = OutputScanner::with_milestones(&Milestones::default()).unwrap();
        assert!(none.so_far().milestones.is_empty());
    }

    proptest::proptest! {
        /// A following scanner tells what a full one does, after every chunk, whatever the
        /// output and however it is cut.
        #[test]
        fn following_finds_what_a_full_scan_does(
            picks in proptest::collection::vec((0..CORPUS.len(), proptest::bool::ANY), 0..60),
            cuts in proptest::collection::vec(1usize..97, 1..40),
            skip_at in proptest::option::of(0usize..40),
        ) {
            let mut full = OutputScanner::new();
            let mut following = OutputScanner::following();
            let mut chunks: Vec<(Stream, Vec<u8>)> = Vec::new();
            for (i, on_stderr) in picks {
                let stream = if on_stderr { Stream::Stderr } else { Stream::Stdout };
                chunks.push((stream, CORPUS[i].as_bytes().to_vec()));
            }
            // Recut: each stream's bytes in the order written, in pieces of the sizes drawn.
            let mut pieces = Vec::new();
            let mut c = 0;
            for (stream, bytes) in chunks {
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let n = cuts[c % cuts.len()].min(rest.len());
                    c += 1;
                    pieces.push((stream, rest[..n].to_vec()));
                    rest = &rest[n..];
                }
            }
            // Pieces glued back into chunks of a few, as a read returns what was appended.
            for (k, group) in pieces.chunks(3).enumerate() {
                if skip_at == Some(k) {
                    full.skipped(Stream::Stdout, 10);
                    following.skipped(Stream::Stdout, 10);
                }
                for (stream, bytes) in group {
                    full.feed(*stream, bytes);
                    following.feed(*stream, bytes);
                }
                proptest::prop_assert_eq!(following.so_far(), full.so_far());
            }
        }
    }
}
