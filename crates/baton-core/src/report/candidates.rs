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
//! - the start of a Python traceback: its header, or a `File "` frame (a SyntaxError location);
//! - a line saying the work is done ([`FINISHED`], matched exactly by [`says_finished`]).
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

/// What training scripts print when the work is done, each without its first letter so that
/// both `Training finished` and `training finished` match: Hugging Face's Trainer ("Training
/// completed. Do not forget to share your model..."), Lightning ("`Trainer.fit` stopped:
/// `max_epochs=3` reached."), and the usual hand-written lines.
pub(crate) const FINISHED: &[&str] = &[
    "raining finished",
    "raining complete",
    "inished training",
    "raining done",
    "Done training",
    "done training",
    "aved final checkpoint",
    "aving final checkpoint",
    "inal checkpoint saved",
    "aved final model",
    "inal model saved",
    "`Trainer.fit` stopped",
];

static FINISHED_SEARCH: LazyLock<AhoCorasick> = LazyLock::new(|| {
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(FINISHED)
        .expect("a dozen short literal patterns always build")
});

/// Whether the line says the work is done (a phrase of [`FINISHED`]).
pub(crate) fn says_finished(line: &[u8]) -> bool {
    FINISHED_SEARCH.is_match(line)
}

static SEARCH: LazyLock<AhoCorasick> = LazyLock::new(|| {
    let mut patterns: Vec<String> = WORDS
        .iter()
        .chain(FINISHED)
        .map(|w| w.to_string())
        .collect();
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

    #[test]
    fn knows_the_lines_that_say_the_work_is_done() {
        for text in [
            "Training finished in 3h 2m",
            "training complete, best val_acc=0.91",
            "Training completed. Do not forget to share your model on huggingface.co/models =)",
            "`Trainer.fit` stopped: `max_epochs=3` reached.",
            "Saved final checkpoint to ckpt/final.pt",
            "INFO finished training after 10 epochs",
            "Done training.",
        ] {
            assert!(says_finished(text.as_bytes()), "{text}");
            assert!(first(text.as_bytes()).is_some(), "a candidate: {text}");
        }
        for text in [
            "Training epoch 3",
            "finished epoch 3 of 10",
            "saved checkpoint step 500",
            "Running one training step",
        ] {
            assert!(!says_finished(text.as_bytes()), "{text}");
        }
    }
}
