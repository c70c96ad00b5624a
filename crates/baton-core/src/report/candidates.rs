//! Where a running job's output may say something a mid-run detector cares about, found over a
//! whole chunk at once (SIMD multi-pattern search) rather than line by line: a healthy training
//! log is millions of lines of numbers, and a follower that parsed each of them would cost a
//! core for a few dozen chatty jobs (issue 17's budget is 5 % of one for 64 jobs printing
//! 10,000 lines a second each).
//!
//! Exact as a prefilter: a line the full scanner could take a finding from (`so_far`) holds at
//! least one of these patterns, so a line with none of them is skipped without being parsed.
//! - a NaN or infinite value, as a metric or in words: `nan` or `inf` in any case;
//! - what `signals::classify` recognises, each phrase holding one of the capitalised words
//!   below (`Error` covers `DistBackendError`, `OutOfMemoryError`, `ErrorMemoryAllocation` and
//!   NCCL's result codes);
//! - the start of a Python traceback: its header, or a `File "` frame (a SyntaxError location).
//!
//! While a traceback is being read, every line matters and the scanner feeds them all.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};

/// Words every phrase of [`super::signals`] and the traceback parser contains.
const WORDS: &[&str] = &[
    "Traceback",
    "File \"",
    "CUDA",
    "CUBLAS",
    "CUDNN",
    "RESOURCE_EXHAUSTED",
    "OOM",
    "Error",
    "NCCL",
    "Watchdog",
];

/// The words a non-finite value holds, in every ASCII case.
const NON_FINITE: &[&str] = &["nan", "inf"];

static SEARCH: LazyLock<AhoCorasick> = LazyLock::new(|| {
    let mut patterns: Vec<String> = WORDS.iter().map(|w| w.to_string()).collect();
    for word in NON_FINITE {
        patterns.extend(every_case(word));
    }
    // Case-sensitive patterns keep the SIMD (Teddy) search; an ASCII-case-insensitive
    // automaton would fall back to a byte-at-a-time one.
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(&patterns)
        .expect("a few dozen short literal patterns always build")
});

fn every_case(word: &str) -> Vec<String> {
    let bytes = word.as_bytes();
    (0..1u32 << bytes.len())
        .map(|mask| {
            bytes
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    let upper = mask & (1 << i) != 0;
                    char::from(if upper { b.to_ascii_uppercase() } else { b })
                })
                .collect()
        })
        .collect()
}

/// The position of the first candidate in `hay`, if any. `INFO`, `info` and `inform` are not
/// infinities: an `inf` followed by `o` is passed over, so logs made of `INFO` lines stay cheap.
pub(crate) fn first(hay: &[u8]) -> Option<usize> {
    SEARCH
        .find_iter(hay)
        .find(|m| {
            let informs = m.len() == 3
                && hay[m.start()].eq_ignore_ascii_case(&b'i')
                && hay
                    .get(m.end())
                    .is_some_and(|b| b.eq_ignore_ascii_case(&b'o'));
            !informs
        })
        .map(|m| m.start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_case_of_nan_and_inf_but_not_info() {
        for text in [
            "loss=NaN",
            "loss nAn",
            "val -Inf",
            "grad=iNF",
            "Loss is nan",
        ] {
            assert!(first(text.as_bytes()).is_some(), "{text}");
        }
        for text in [
            "INFO step 3 loss=0.5",
            "info: inform the user",
            "step 10 loss=0.1 lr=3e-4",
        ] {
            assert_eq!(first(text.as_bytes()), None, "{text}");
        }
        assert_eq!(first(b"INFO loss=inf"), Some(10));
    }

    #[test]
    fn finds_what_the_signals_and_tracebacks_need() {
        for text in [
            "Traceback (most recent call last):",
            "  File \"x.py\", line 3",
            "torch.OutOfMemoryError: CUDA out of memory.",
            "RESOURCE_EXHAUSTED: Out of memory",
            "NCCL WARN oops",
            "Watchdog caught collective operation timeout",
            "ncclSystemError: x",
            "OOM when allocating tensor",
        ] {
            assert!(first(text.as_bytes()).is_some(), "{text}");
        }
    }
}
