//! What following a running job's output costs per byte: the follower's scanner
//! (`OutputScanner::following`) against the end report's full scan (`OutputScanner::new`), over
//! 64 KiB reads of training-log-shaped output, and of a follower waiting for a milestone.
//! `cargo bench -p baton-core --bench follow`; results in docs/benchmarks.md.

use baton_core::midrun::{AskedMilestones, Milestones};
use baton_core::report::{OutputScanner, Stream};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// 64 KiB of one log shape, cut where a read would cut it (mid-line).
fn chunk(line: impl Fn(u64) -> String) -> Vec<u8> {
    let mut out = Vec::new();
    let mut step = 0;
    while out.len() < 64 << 10 {
        step += 1;
        out.extend_from_slice(line(step).as_bytes());
    }
    out.truncate(64 << 10);
    out
}

fn shapes() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "step lines",
            chunk(|s| {
                format!(
                    "step {s} loss={:.6} lr=3e-4 grad_norm=0.91 tokens/s=51234\n",
                    1.0 / s as f64
                )
            }),
        ),
        (
            "hf trainer dicts",
            chunk(|s| {
                format!(
                    "{{'loss': {:.4}, 'grad_norm': 1.23, 'learning_rate': 4.9e-05, 'epoch': {:.2}}}\n",
                    1.0 / s as f64,
                    s as f64 / 1e4
                )
            }),
        ),
        (
            "python logging INFO",
            chunk(|s| format!("INFO:__main__:step {s} loss {:.4}\n", 1.0 / s as f64)),
        ),
        (
            "tqdm redraws",
            chunk(|s| {
                format!(
                    "\r{:3}%|#####     | {s}/100000 [00:10<00:20, 98.1it/s]",
                    s % 100
                )
            }),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("follow");
    for (name, bytes) in shapes() {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        let mut full = OutputScanner::new();
        group.bench_function(format!("{name} / full scan"), |b| {
            b.iter(|| {
                full.feed(Stream::Stdout, &bytes);
                full.so_far()
            })
        });
        let mut following = OutputScanner::following();
        group.bench_function(format!("{name} / following"), |b| {
            b.iter(|| {
                following.feed(Stream::Stdout, &bytes);
                following.so_far()
            })
        });
        // A job that asked to be woken at a milestone it has not reached: every line parsed.
        let milestone = Milestones::parse(AskedMilestones {
            wake_when: &["val_acc>=0.99".into()],
            ..Default::default()
        })
        .expect("valid");
        let mut awaiting = OutputScanner::with_milestones(&milestone).expect("valid");
        group.bench_function(format!("{name} / following, a milestone to meet"), |b| {
            b.iter(|| {
                awaiting.feed(Stream::Stdout, &bytes);
                awaiting.so_far()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
