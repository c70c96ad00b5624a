//! Recognising lines that name a known failure (CUDA out of memory, NCCL errors, a NaN loss) or
//! that may start a Python traceback, in one cheap pass over each line.
//!
//! Every phrase but "loss" starts with a capital letter, and log lines hold few capitals, so
//! the pass finds the capitals eight bytes at a time and compares phrases only there; "loss"
//! gets one more quick search.

use super::search::{
    contains_ignore_case, find_either, for_each_uppercase, starts_with_ignore_case,
};

/// What one line of output may be, from [`classify`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LineSignals {
    pub cuda_oom: bool,
    /// 2 for an NCCL/distributed error, 1 for an NCCL warning (kept only when nothing
    /// stronger turns up), 0 for neither.
    pub nccl: u8,
    /// The line mentions a loss; [`says_non_finite`] then tells whether it says the loss went
    /// NaN or infinite in words ("Loss is NaN, stopping training").
    pub mentions_loss: bool,
    /// The line holds `Traceback (most recent call last)`.
    pub traceback_header: bool,
    /// The line holds `File "`, as traceback frames do.
    pub file_frame: bool,
}

pub(crate) const TRACEBACK_HEADER: &[u8] = b"Traceback (most recent call last)";

/// Phrases that mean a GPU ran out of memory, by framework.
const CUDA_OOM: &[&[u8]] = &[
    b"CUDA out of memory",                // PyTorch
    b"CUDA error: out of memory",         // PyTorch, CUDA runtime
    b"CUBLAS_STATUS_ALLOC_FAILED",        // cuBLAS
    b"CUDNN_STATUS_ALLOC_FAILED",         // cuDNN
    b"RESOURCE_EXHAUSTED: Out of memory", // JAX / XLA
    b"OOM when allocating tensor",        // TensorFlow
    b"ErrorMemoryAllocation",             // cudaErrorMemoryAllocation
];

/// Phrases that mean NCCL or torch.distributed failed.
const NCCL_ERRORS: &[&[u8]] = &[
    b"NCCL error",
    b"NCCL Error",
    b"DistBackendError",
    b"Watchdog caught collective operation timeout",
];

pub(crate) fn classify(line: &[u8]) -> LineSignals {
    let mut signals = LineSignals::default();
    for_each_uppercase(line, |i| {
        let rest = &line[i..];
        match line[i] {
            b'C' | b'O' | b'R'
                if CUDA_OOM.iter().any(|p| starts(rest, p)) || is_torch_oom(line, i) =>
            {
                signals.cuda_oom = true;
            }
            b'E' => {
                if starts(rest, b"ErrorMemoryAllocation") {
                    signals.cuda_oom = true;
                } else if starts(rest, b"Error") && is_nccl_result_code(line, i) {
                    signals.nccl = 2;
                }
            }
            b'N' | b'D' | b'W' => {
                if NCCL_ERRORS.iter().any(|p| starts(rest, p)) {
                    signals.nccl = 2;
                } else if starts(rest, b"NCCL WARN") {
                    signals.nccl = signals.nccl.max(1);
                }
            }
            b'T' if starts(rest, TRACEBACK_HEADER) => signals.traceback_header = true,
            b'F' if starts(rest, b"File \"") => signals.file_frame = true,
            _ => {}
        }
    });
    signals.mentions_loss = contains_ignore_case(line, b"loss");
    signals
}

/// `rest.starts_with(phrase)`, testing the second byte first: capitals are common in logs
/// ("INFO", "NCCL"), matches are rare, and a full compare is a library call.
#[inline]
fn starts(rest: &[u8], phrase: &[u8]) -> bool {
    rest.len() >= phrase.len() && rest.get(1) == phrase.get(1) && rest[..phrase.len()] == *phrase
}

/// `torch.OutOfMemoryError` or `torch.cuda.OutOfMemoryError` with `OutOfMemoryError` at `at`
/// (anchored on the capital `O` rather than the common `t`).
fn is_torch_oom(line: &[u8], at: usize) -> bool {
    let before = &line[..at];
    starts(&line[at..], b"OutOfMemoryError")
        && (before.ends_with(b"torch.") || before.ends_with(b"torch.cuda."))
}

/// Whether the `Error` at `at` ends an NCCL result code: `nccl` + a capitalised word ending in
/// `Error` (`ncclSystemError`, `ncclInternalError`, `ncclUnhandledCudaError`...).
fn is_nccl_result_code(line: &[u8], at: usize) -> bool {
    let word_end = at + b"Error".len();
    if line.get(word_end).is_some_and(u8::is_ascii_alphanumeric) {
        return false;
    }
    let mut start = at;
    while start > 0 && at - start < 40 && line[start - 1].is_ascii_alphanumeric() {
        start -= 1;
    }
    let word = &line[start..word_end];
    word.starts_with(b"nccl") && word.get(4).is_some_and(u8::is_ascii_uppercase)
}

/// Whether a line that mentions a loss also says NaN or inf(inite) as a word. Loss-scale lines
/// from mixed precision ("loss scale ... inf") are about gradients, not the loss.
pub(crate) fn says_non_finite(line: &[u8]) -> bool {
    let is_word_byte = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let word_at = |start: usize, len: usize| {
        (start == 0 || !is_word_byte(&line[start - 1]))
            && !line.get(start + len).is_some_and(is_word_byte)
    };
    // Both "nan" and "inf" hold an `n`: one search finds every candidate.
    let mut from = 0;
    let mut says = false;
    while let Some(p) = find_either(&line[from..], b'n', b'N') {
        let n = from + p;
        from = n + 1;
        let nan = starts_with_ignore_case(&line[n..], b"nan") && word_at(n, 3);
        let inf = n > 0 && starts_with_ignore_case(&line[n - 1..], b"inf") && {
            let rest = &line[n - 1..];
            ["infinity".as_bytes(), b"infinite", b"inf"]
                .iter()
                .find(|w| starts_with_ignore_case(rest, w))
                .is_some_and(|w| word_at(n - 1, w.len()))
        };
        if nan || inf {
            says = true;
            break;
        }
    }
    says && !contains_ignore_case(line, b"scale")
}

/// Whether a metric key names a loss (`loss`, `val_loss`, `train/loss`), not a loss scale.
pub(crate) fn is_loss_key(key: &str) -> bool {
    let key = key.as_bytes();
    contains_ignore_case(key, b"loss") && !contains_ignore_case(key, b"scale")
}

/// Whether a printed metric value is NaN or infinite.
pub(crate) fn is_non_finite(value: &str) -> bool {
    let v = value.trim_start_matches(['+', '-']);
    // Called for every metric of every line: most values are numbers, rejected here.
    if !v.starts_with(['n', 'N', 'i', 'I']) {
        return false;
    }
    let v = v.trim_end_matches('%');
    ["nan", "inf", "infinity"]
        .iter()
        .any(|n| v.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_out_of_memory_in_each_framework() {
        for line in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
            "RuntimeError: CUDA error: out of memory",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[1024,1024]",
            "cudaErrorMemoryAllocation: out of memory",
            "[rank3]: torch.OutOfMemoryError: out of memory on device 3",
        ] {
            assert!(classify(line.as_bytes()).cuda_oom, "{line}");
        }
        for line in [
            "java.lang.OutOfMemoryError: Java heap space",
            "CUDA_VISIBLE_DEVICES=0 python train.py",
            "memory: 12 GiB free",
        ] {
            assert!(!classify(line.as_bytes()).cuda_oom, "{line}");
        }
    }

    #[test]
    fn nccl_failures_and_warnings() {
        for line in [
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
            "RuntimeError: NCCL Error 3: internal error",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)",
        ] {
            assert_eq!(classify(line.as_bytes()).nccl, 2, "{line}");
        }
        let warn = "node1:123:456 [0] misc/socket.cc:50 NCCL WARN socket connect failed";
        assert_eq!(classify(warn.as_bytes()).nccl, 1);
        for line in [
            "node1:123:456 [0] NCCL INFO Bootstrap : Using eth0",
            "ncclx is not an error",
            "nccl version 2.19",
        ] {
            assert_eq!(classify(line.as_bytes()).nccl, 0, "{line}");
        }
    }

    #[test]
    fn non_finite_loss_in_words() {
        for line in [
            "Loss is NaN, stopping training",
            "WARNING: nan loss detected at step 120",
            "loss became infinite",
            "Train LOSS: NaN",
        ] {
            let says = classify(line.as_bytes()).mentions_loss && says_non_finite(line.as_bytes());
            assert!(says, "{line}");
        }
        for line in [
            "INFO loss=0.25 step=100",
            "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to inf",
            "loss: 0.3 nan_count=0",
            "nan detected in activations",
        ] {
            let says = classify(line.as_bytes()).mentions_loss && says_non_finite(line.as_bytes());
            assert!(!says, "{line}");
        }
    }

    #[test]
    fn traceback_hints() {
        let s = classify(b"[rank0]: Traceback (most recent call last):");
        assert!(s.traceback_header && !s.file_frame);
        let s = classify(b"  File \"train.py\", line 3, in <module>");
        assert!(s.file_frame && !s.traceback_header);
    }

    #[test]
    fn loss_keys_and_values() {
        assert!(is_loss_key("val_loss") && is_loss_key("train/Loss"));
        assert!(!is_loss_key("loss_scale") && !is_loss_key("acc"));
        for v in ["nan", "NaN", "-inf", "+Infinity", "inf%"] {
            assert!(is_non_finite(v), "{v}");
        }
        for v in ["0.1", "-3e-4", "1e309"] {
            assert!(!is_non_finite(v), "{v}");
        }
    }
}
