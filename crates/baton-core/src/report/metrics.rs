//! Metrics in training output: `loss=0.23`, `loss: 0.23`, `lr = 3e-4`, JSON or Python dicts on a
//! line (`{"loss": 0.3, "step": 10}`, `{'loss': 0.3}`), counters in words (`Epoch 3/10`,
//! `step 100`), several per line. [`for_each_metric`] finds them by jumping between the few
//! places a metric can be (separators, spaces before numbers) rather than reading every byte;
//! [`MetricTable`] keeps the last value of a bounded set of keys.
//!
//! The parser is deliberately narrow: a key is identifier-like and a value is a bare number
//! (or nan/inf, optionally `%`) followed by a separator, so clock times, dates, versions, URLs,
//! ports in URLs and `file.py:12` locations are not mistaken for metrics.

use std::ops::Range;

use super::search::{find_either, for_each_space_before_number};
use super::{MAX_METRICS, Metric};

const MAX_KEY_LEN: usize = 40;
const MAX_VALUE_LEN: usize = 32;

/// Keys reports care most about, in the order they are shown. A full table evicts other keys to
/// make room for these. Matched ignoring case, on the last `/` or `.` segment
/// (`train/loss` is a loss).
const WELL_KNOWN: &[&str] = &[
    "loss",
    "train_loss",
    "val_loss",
    "eval_loss",
    "test_loss",
    "accuracy",
    "acc",
    "val_acc",
    "val_accuracy",
    "eval_accuracy",
    "top1",
    "top5",
    "f1",
    "bleu",
    "perplexity",
    "ppl",
    "reward",
    "step",
    "global_step",
    "epoch",
    "iter",
    "iteration",
    "lr",
    "learning_rate",
    "grad_norm",
];

/// Counters printed as a word and a number (`Epoch 3/10`, `Step [100/500]`), under the key
/// they are stored as.
const COUNTER_WORDS: &[&str] = &["epoch", "step", "iteration", "iter"];

/// Calls `found(key, value)` for each metric on `line`: counters in words first, then
/// `key=value` and `key: value` pairs, each left to right.
pub(crate) fn for_each_metric(line: &str, mut found: impl FnMut(&str, &str)) {
    let bytes = line.as_bytes();

    // A counter word is followed by a space and a number: look only where a space is.
    for_each_space_before_number(bytes, |space| {
        if let Some((key, value)) = counter_at(bytes, space) {
            found(key, &line[value]);
        }
    });

    // Only the top level and one level of braces count (a JSON object on a line), so nested
    // JSON values are ignored. Most lines have no braces and skip the count.
    let mut depth = BraceDepth::new(bytes);
    let mut from = 0;
    while let Some(p) = find_either(&bytes[from..], b'=', b':') {
        let sep = from + p;
        from = sep + 1;
        if depth.at(bytes, sep) > 1 {
            continue;
        }
        if let Some(pair) = pair_at(bytes, sep) {
            found(&line[pair.key], &line[pair.value.clone()]);
            from = pair.value.end;
        }
    }
}

/// How deep in `{}` a position is, counted incrementally as positions increase.
struct BraceDepth {
    has_braces: bool,
    counted_to: usize,
    depth: u32,
}

impl BraceDepth {
    fn new(bytes: &[u8]) -> Self {
        BraceDepth {
            has_braces: find_either(bytes, b'{', b'}').is_some(),
            counted_to: 0,
            depth: 0,
        }
    }

    fn at(&mut self, bytes: &[u8], pos: usize) -> u32 {
        if self.has_braces {
            for &b in &bytes[self.counted_to..pos.max(self.counted_to)] {
                match b {
                    b'{' => self.depth += 1,
                    b'}' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
            self.counted_to = self.counted_to.max(pos);
        }
        self.depth
    }
}

struct Pair {
    key: Range<usize>,
    value: Range<usize>,
}

/// Bytes a metric key may hold (`train/loss`, `eval.acc`, `top-1`).
fn is_key_byte(b: u8) -> bool {
    KEY_BYTES[usize::from(b)]
}

/// [`is_key_byte`] as a table: the key walk runs at every `=` and `:` of every line.
static KEY_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-');
        b += 1;
    }
    table
};

/// The key and value around the `=` or `:` at `sep`, if they look like a metric.
fn pair_at(bytes: &[u8], sep: usize) -> Option<Pair> {
    let before = bytes[..sep].last().copied();
    let after = bytes.get(sep + 1).copied();
    let is_operator = match bytes[sep] {
        b'=' => after == Some(b'=') || matches!(before, Some(b'=' | b'<' | b'>' | b'!')),
        _ => after == Some(b':') || before == Some(b':'),
    };
    if is_operator {
        return None;
    }

    let key = key_before(bytes, sep)?;
    let key_bytes = &bytes[key.clone()];
    if bytes[sep] == b':' && looks_like_source_file(key_bytes) {
        return None;
    }

    let mut start = sep + 1;
    while start < bytes.len() && start - sep <= 4 && matches!(bytes[start], b' ' | b'\t') {
        start += 1;
    }
    let end = number_end(bytes, start)?;
    if end - start > MAX_VALUE_LEN || !ends_value(bytes, end) {
        return None;
    }
    Some(Pair {
        key,
        value: start..end,
    })
}

/// The identifier-like key that ends (maybe after spaces or a closing quote) just before `sep`.
fn key_before(bytes: &[u8], sep: usize) -> Option<Range<usize>> {
    let mut end = sep;
    while end > 0 && sep - end < 4 && bytes[end - 1] == b' ' {
        end -= 1;
    }
    let quote = match end.checked_sub(1).map(|p| bytes[p]) {
        Some(q @ (b'"' | b'\'')) => {
            end -= 1;
            Some(q)
        }
        _ => None,
    };
    let mut start = end;
    while start > 0 && is_key_byte(bytes[start - 1]) {
        start -= 1;
        if end - start > MAX_KEY_LEN {
            return None;
        }
    }
    let key = &bytes[start..end];
    let (&first, &last) = (key.first()?, key.last()?);
    if !(first.is_ascii_alphabetic() || first == b'_') || matches!(last, b'.' | b'/' | b'-') {
        return None;
    }
    let preceding = start.checked_sub(1).map(|p| bytes[p]);
    match quote {
        Some(q) if preceding != Some(q) => return None,
        // Query strings, shell variables, e-mail addresses: not metrics.
        None if matches!(preceding, Some(b'&' | b'?' | b'$' | b'@' | b'%' | b'\\')) => {
            return None;
        }
        _ => {}
    }
    Some(start..end)
}

/// `train.py` in `train.py:12` is a location, not a metric.
fn looks_like_source_file(key: &[u8]) -> bool {
    const EXTENSIONS: &[&[u8]] = &[
        b"py", b"pyx", b"rs", b"c", b"cc", b"cpp", b"cu", b"cuh", b"h", b"hpp", b"go", b"java",
        b"js", b"ts", b"sh", b"json", b"yaml", b"yml", b"toml", b"txt", b"log", b"ipynb",
    ];
    match key.iter().rposition(|&b| b == b'.') {
        Some(dot) => EXTENSIONS.contains(&&key[dot + 1..]),
        None => false,
    }
}

/// The end of a number starting at `start`: `-1`, `0.25`, `.5`, `3e-4`, `nan`, `-inf`,
/// `Infinity`, each optionally followed by `%`.
fn number_end(bytes: &[u8], start: usize) -> Option<usize> {
    let at = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let mut i = start;
    if matches!(at(i), b'+' | b'-') {
        i += 1;
    }
    let rest = &bytes[i.min(bytes.len())..];
    let word_len = match at(i) | 0x20 {
        b'n' | b'i' => [b"infinity".as_slice(), b"nan", b"inf"]
            .iter()
            .find(|word| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word))
            .map(|word| word.len()),
        _ => None,
    };
    if let Some(len) = word_len {
        i += len;
    } else {
        let digits_from = i;
        while at(i).is_ascii_digit() {
            i += 1;
        }
        let mut digits = i - digits_from;
        if at(i) == b'.' && (digits > 0 || at(i + 1).is_ascii_digit()) {
            i += 1;
            let fraction_from = i;
            while at(i).is_ascii_digit() {
                i += 1;
            }
            digits += i - fraction_from;
        }
        if digits == 0 {
            return None;
        }
        if matches!(at(i), b'e' | b'E') {
            let mut j = i + 1;
            if matches!(at(j), b'+' | b'-') {
                j += 1;
            }
            if at(j).is_ascii_digit() {
                while at(j).is_ascii_digit() {
                    j += 1;
                }
                i = j;
            }
        }
    }
    if at(i) == b'%' {
        i += 1;
    }
    Some(i)
}

/// Whether a value may end at `end`: `12` in `12:30`, `2024` in `2024-01-01`, `1.2` in `1.2.3`
/// and `3` in `3GB` may not.
fn ends_value(bytes: &[u8], end: usize) -> bool {
    match bytes.get(end) {
        None => true,
        Some(b' ' | b'\t' | b',' | b';' | b'|' | b')' | b']' | b'}' | b'"' | b'\'') => true,
        // A full stop ending a sentence: "accuracy: 0.95."
        Some(b'.') => matches!(bytes.get(end + 1), None | Some(b' ')),
        Some(_) => false,
    }
}

/// `Epoch 3/10`, `step 100`, `Step [100/500]` around the space at `space`: the counter's key
/// and its number.
fn counter_at(bytes: &[u8], space: usize) -> Option<(&'static str, Range<usize>)> {
    // Every counter word ends in a letter; most spaces before numbers follow something else.
    if !space
        .checked_sub(1)
        .is_some_and(|p| bytes[p].is_ascii_alphabetic())
    {
        return None;
    }
    let word = COUNTER_WORDS.iter().find(|w| {
        let Some(start) = space.checked_sub(w.len()) else {
            return false;
        };
        bytes[start..space].eq_ignore_ascii_case(w.as_bytes())
            && (start == 0 || !is_key_byte(bytes[start - 1]))
    })?;
    let mut from = space + 1;
    if bytes.get(from) == Some(&b'[') {
        from += 1;
    }
    let mut end = from;
    while end < bytes.len() && end - from < 12 && bytes[end].is_ascii_digit() {
        end += 1;
    }
    let ends_counter = matches!(
        bytes.get(end),
        None | Some(b' ' | b'/' | b',' | b'|' | b':' | b']' | b')' | b'\t')
    );
    (end > from && ends_counter).then_some((*word, from..end))
}

/// Keys that look like metrics but are identifiers (`pid: 4321`, `local_rank: 1` from
/// torchrun's error lines). Checked only when a key is new to the table.
fn is_never_a_metric(key: &str) -> bool {
    const IDENTIFIERS: &[&str] = &[
        "pid",
        "ppid",
        "tid",
        "uid",
        "gid",
        "exitcode",
        "exit_code",
        "returncode",
        "errno",
        "code",
        "rank",
        "local_rank",
        "global_rank",
        "node_rank",
        "group_rank",
        "world_size",
        "local_world_size",
        "port",
        "line",
        "lineno",
        "device",
        "gpu",
        "cuda",
        "version",
    ];
    IDENTIFIERS.iter().any(|id| id.eq_ignore_ascii_case(key))
}

/// The rank of a well-known key (lower is shown first), by its last `/` or `.` segment.
fn well_known_rank(key: &str) -> Option<usize> {
    let last = key.rsplit(['/', '.']).next().unwrap_or(key);
    WELL_KNOWN
        .iter()
        .position(|w| w.eq_ignore_ascii_case(key) || w.eq_ignore_ascii_case(last))
}

/// The last value of at most [`MAX_METRICS`] keys. Updating a known key reuses its buffers, so
/// the scanner does not allocate per line.
#[derive(Debug, Default)]
pub(crate) struct MetricTable {
    entries: Vec<Entry>,
    /// Where to look first: the entry after the last one updated, since log lines tend to print
    /// the same keys in the same order.
    next_guess: usize,
    /// Counts updates; an entry's `updated` says how long ago it last changed.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    fingerprint: Fingerprint,
    key: String,
    value: String,
    rank: Option<usize>,
    first_seen: u64,
    updated: u64,
}

/// An ordinary key not updated in this many updates may give its place to a new key. Logs
/// that print a new key on every line (per-layer stats) then churn among themselves without
/// pushing out metrics that are still being printed.
const STALE_AFTER: u64 = 1000;

impl MetricTable {
    pub(crate) fn update(&mut self, key: &str, value: &str) {
        self.clock += 1;
        let clock = self.clock;
        let print = fingerprint(key);
        let matches = |e: &Entry| e.fingerprint == print && (print.is_whole_key() || e.key == key);
        let found = match self.entries.get(self.next_guess) {
            Some(e) if matches(e) => Some(self.next_guess),
            _ => self.entries.iter().position(matches),
        };
        if let Some(i) = found {
            self.next_guess = i + 1;
            let entry = &mut self.entries[i];
            entry.value.clear();
            entry.value.push_str(value);
            entry.updated = clock;
            return;
        }
        if is_never_a_metric(key) {
            return;
        }
        let rank = well_known_rank(key);
        if self.entries.len() >= MAX_METRICS {
            // Evict the stalest ordinary key: always for a well-known newcomer, and for an
            // ordinary one only if that key has gone quiet.
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.rank.is_none())
                .min_by_key(|(_, e)| e.updated)
                .map(|(i, e)| (i, e.updated));
            match victim {
                Some((i, updated)) if rank.is_some() || clock - updated > STALE_AFTER => {
                    self.entries.swap_remove(i);
                }
                _ => return,
            }
        }
        self.entries.push(Entry {
            fingerprint: print,
            key: key.to_string(),
            value: value.to_string(),
            rank,
            first_seen: clock,
            updated: clock,
        });
    }

    /// Well-known keys in their order, then the others in the order they first appeared.
    pub(crate) fn to_metrics(&self) -> Vec<Metric> {
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by_key(|e| (e.rank.unwrap_or(usize::MAX), e.first_seen));
        entries
            .into_iter()
            .map(|e| Metric {
                key: e.key.clone(),
                value: e.value.clone(),
            })
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A key's length and its first and last eight bytes. For keys of up to 16 bytes (nearly all)
/// that is the whole key, so the table compares a few integers instead of strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    head: u64,
    tail: u64,
}

impl Fingerprint {
    fn is_whole_key(self) -> bool {
        self.len <= 16
    }
}

fn fingerprint(key: &str) -> Fingerprint {
    let bytes = key.as_bytes();
    let word = |part: &[u8]| {
        let mut buf = [0u8; 8];
        buf[..part.len()].copy_from_slice(part);
        u64::from_le_bytes(buf)
    };
    let n = bytes.len().min(8);
    Fingerprint {
        len: bytes.len(),
        head: word(&bytes[..n]),
        tail: word(&bytes[bytes.len() - n..]),
    }
}

/// Metrics for display: well-known first. Used by the report on metrics that may have come from
/// elsewhere than the scanner.
pub(crate) fn sort_for_display(metrics: &mut [Metric]) {
    metrics.sort_by_key(|m| well_known_rank(&m.key).unwrap_or(usize::MAX));
}

/// Whether a metric key and value are the shape the parser produces (for input that did not
/// come from it).
pub(crate) fn is_valid_metric(key: &str, value: &str) -> bool {
    let key_ok = key_before(key.as_bytes(), key.len()) == Some(0..key.len());
    let value_ok =
        value.len() <= MAX_VALUE_LEN && number_end(value.as_bytes(), 0) == Some(value.len());
    key_ok && value_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(line: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for_each_metric(line, |k, v| out.push((k.to_string(), v.to_string())));
        out
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn key_value_forms() {
        assert_eq!(
            metrics("step 100 | loss=0.23 acc=0.91"),
            pairs(&[("step", "100"), ("loss", "0.23"), ("acc", "0.91")])
        );
        assert_eq!(
            metrics("epoch: 3, loss: 0.2, lr = 3e-4"),
            pairs(&[("epoch", "3"), ("loss", "0.2"), ("lr", "3e-4")])
        );
        assert_eq!(
            metrics("train/loss=1.5E+2 eval.acc: 91.5% top-1=.5"),
            pairs(&[
                ("train/loss", "1.5E+2"),
                ("eval.acc", "91.5%"),
                ("top-1", ".5")
            ])
        );
        assert_eq!(
            metrics("loss=nan grad_norm=-inf ppl=Infinity"),
            pairs(&[("loss", "nan"), ("grad_norm", "-inf"), ("ppl", "Infinity")])
        );
        assert_eq!(metrics("accuracy: 0.95."), pairs(&[("accuracy", "0.95")]));
    }

    #[test]
    fn json_and_python_dicts() {
        assert_eq!(
            metrics(
                r#"{"loss": 0.3, "step": 10, "name": "run1", "nested": {"inner": 5}, "lr": 1e-05}"#
            ),
            pairs(&[("loss", "0.3"), ("step", "10"), ("lr", "1e-05")])
        );
        // Hugging Face Trainer logs a Python dict.
        assert_eq!(
            metrics("{'loss': 0.1234, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.5}"),
            pairs(&[
                ("loss", "0.1234"),
                ("grad_norm", "1.2"),
                ("learning_rate", "5e-05"),
                ("epoch", "0.5")
            ])
        );
        assert_eq!(metrics(r#"{"loss": NaN}"#), pairs(&[("loss", "NaN")]));
    }

    #[test]
    fn counters_in_words() {
        assert_eq!(
            metrics("Epoch [1/5], Step [100/600], Loss: 0.2231"),
            pairs(&[("epoch", "1"), ("step", "100"), ("Loss", "0.2231")])
        );
        assert_eq!(metrics("Epoch 3/10"), pairs(&[("epoch", "3")]));
        assert_eq!(
            metrics("Epoch 3: 100%|██████████| 50/50 [00:10<00:00, 4.9it/s, loss=0.412]"),
            pairs(&[("epoch", "3"), ("loss", "0.412")])
        );
        assert_eq!(
            metrics("loss=0.2 after epoch 7"),
            pairs(&[("epoch", "7"), ("loss", "0.2")])
        );
        assert!(metrics("the step function").is_empty());
    }

    #[test]
    fn non_metrics_are_rejected() {
        for line in [
            "2024-05-01 12:30:01,123 INFO starting",
            "time: 12:30:01",
            "date: 2024-01-01",
            "see http://example.com:8080/x?a=1&b=2",
            "File /home/u/train.py:12 in main",
            "train.py:12: UserWarning: deprecated",
            "version: 1.2.3",
            "size: 10GB",
            "if a == 3 or b <= 4 or c != 5",
            "--lr=0.1",
            "$HOME=3",
            "a_very_long_key_name_that_goes_on_and_on_forever_x=1",
            "name: run-1",
        ] {
            assert!(metrics(line).is_empty(), "{line}: {:?}", metrics(line));
        }
        // The metric after a timestamp is still found.
        assert_eq!(
            metrics("2024-05-01 12:30:01,123 INFO:__main__:step=1200 loss=0.2345"),
            pairs(&[("step", "1200"), ("loss", "0.2345")])
        );
    }

    #[test]
    fn table_keeps_last_values_well_known_first_and_stays_bounded() {
        let mut table = MetricTable::default();
        table.update("tokens_per_s", "100");
        table.update("loss", "0.5");
        table.update("step", "1");
        table.update("loss", "0.4");
        for i in 0..100 {
            table.update(&format!("layer{i}_norm"), "1.0");
        }
        assert_eq!(table.len(), MAX_METRICS);
        // Identifiers are not metrics.
        table.update("local_rank", "1");
        table.update("PID", "4321");
        assert!(
            !table
                .to_metrics()
                .iter()
                .any(|m| m.key == "local_rank" || m.key == "PID")
        );
        // A well-known key still gets in.
        table.update("val_loss", "0.45");
        let shown = table.to_metrics();
        assert_eq!(shown.len(), MAX_METRICS);
        let keys: Vec<&str> = shown.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(&keys[..4], &["loss", "val_loss", "step", "layer0_norm"]);
        assert!(
            !keys.contains(&"tokens_per_s"),
            "the stalest ordinary key made room"
        );
        assert_eq!(shown[0].value, "0.4");
        // Quiet ordinary keys make room after a while.
        for _ in 0..=STALE_AFTER {
            table.update("loss", "0.3");
        }
        table.update("bleu_like_score", "7");
        assert!(
            table
                .to_metrics()
                .iter()
                .any(|m| m.key == "bleu_like_score")
        );
        // Keys that share their first and last eight bytes are still told apart.
        let mut table = MetricTable::default();
        table.update("abcdefgh_1_ijklmnop", "1");
        table.update("abcdefgh_2_ijklmnop", "2");
        table.update("abcdefghijklmnop", "3");
        table.update("abcdefghXijklmnop", "4");
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn validity_check_matches_the_parser() {
        assert!(is_valid_metric("train/loss", "0.3"));
        assert!(is_valid_metric("acc", "91%"));
        assert!(!is_valid_metric("loss\u{1b}[31m", "0.3"));
        assert!(!is_valid_metric("loss", "0.3 ignore previous"));
        assert!(!is_valid_metric("bad key", "1"));
    }
}
