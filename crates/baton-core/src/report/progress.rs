//! How far a running job has got, from the counters it prints: `step 400/1000`, `Epoch [2/10]`,
//! `iter 30/500`, and tqdm bars (`40%|####      | 4/10 [00:01<00:02]`). The follower reads them
//! from the last line of each read and from the line being redrawn (a bar), never from every
//! line: the latest counter is all that matters, and a chatty log prints one a line.
//! [`Progress::remaining_ms`] is the ETA: the run so far, scaled by what is left.

use serde::{Deserialize, Serialize};

use super::search::find_ignore_case;
use crate::Millis;

/// One counter: `done` of `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub done: u64,
    pub total: u64,
}

impl Counter {
    fn fraction(self) -> Option<f64> {
        (self.total > 0 && self.done <= self.total).then(|| self.done as f64 / self.total as f64)
    }
}

/// The latest counter of each kind a job printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Counter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Counter>,
    /// A progress bar's `N/M`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar: Option<Counter>,
    /// Bars of more than one total were drawn (nested bars: an epoch's inside the run's), so
    /// the latest may be an inner one.
    #[serde(skip)]
    pub nested_bars: bool,
}

/// Words a counter is printed after (in lower case), and the kind each is.
const WORDS: &[(&str, Kind)] = &[
    ("epoch", Kind::Epoch),
    ("step", Kind::Step),
    ("iteration", Kind::Step),
    ("iter", Kind::Step),
];

#[derive(Clone, Copy)]
enum Kind {
    Epoch,
    Step,
}

impl Progress {
    pub fn is_empty(&self) -> bool {
        self.epoch.is_none() && self.step.is_none() && self.bar.is_none()
    }

    /// Takes the counters `line` shows (the latest of each kind wins).
    pub fn read(&mut self, line: &[u8]) {
        for (word, kind) in WORDS {
            if let Some(counter) = after_word(line, word.as_bytes()) {
                match kind {
                    Kind::Epoch => self.epoch = Some(counter),
                    Kind::Step => self.step = Some(counter),
                }
            }
        }
        if let Some(counter) = bar(line) {
            self.nested_bars |= self.bar.is_some_and(|b| b.total != counter.total);
            self.bar = Some(counter);
        }
    }

    /// What says the whole run's work is done, if anything does: its steps at their total, or
    /// its only bar at 100% (`bar 10/10 (100%)`). An epoch counter never does (`Epoch 10/10` is
    /// printed as the last epoch begins), nor a bar drawn beside bars of other totals (it may
    /// be one epoch's).
    pub fn done(&self) -> Option<String> {
        let full = |c: Counter| c.total > 0 && c.done == c.total;
        if let Some(step) = self.step.filter(|c| full(*c)) {
            return Some(format!("step {}/{} (100%)", step.done, step.total));
        }
        self.bar
            .filter(|c| full(*c) && !self.nested_bars)
            .map(|bar| format!("a progress bar at 100% ({}/{})", bar.done, bar.total))
    }

    /// Takes the counters of the last whole line of a chunk of output and of the line it
    /// leaves unfinished if that is a bar being redrawn (its latest whole drawing, ended by a
    /// `\r`; what follows the last one may be cut short).
    pub fn read_tail(&mut self, chunk: &[u8]) {
        self.note_nested_bars(chunk);
        let unfinished = match memchr::memrchr(b'\n', chunk) {
            Some(end) => {
                let start = memchr::memrchr(b'\n', &chunk[..end]).map_or(0, |p| p + 1);
                self.read_drawn(&chunk[start..end]);
                &chunk[end + 1..]
            }
            None => chunk,
        };
        if let Some(r) = memchr::memrchr(b'\r', unfinished) {
            self.read_drawn(&unfinished[..r]);
        }
    }

    /// Whether the chunk draws bars of another total than the one before (nested bars), from
    /// every bar drawing in it whose end it holds (one cut short could show a wrong total).
    /// Once seen, never looked for again.
    fn note_nested_bars(&mut self, chunk: &[u8]) {
        if self.nested_bars {
            return;
        }
        let mut total = self.bar.map(|b| b.total);
        for at in memchr::memmem::find_iter(chunk, b"%|") {
            let start = chunk[..at]
                .iter()
                .rposition(|&b| b == b'\n' || b == b'\r')
                .map_or(0, |p| p + 1);
            let Some(len) = chunk[at..].iter().position(|&b| b == b'\n' || b == b'\r') else {
                break;
            };
            let Some(drawn) = bar(&chunk[start..at + len]) else {
                continue;
            };
            match total {
                Some(t) if t != drawn.total => {
                    self.nested_bars = true;
                    return;
                }
                _ => total = Some(drawn.total),
            }
        }
    }

    /// A line as a terminal shows it: what follows its last carriage return (its first 4 KiB:
    /// a counter is near a line's start, and a huge line costs no more).
    fn read_drawn(&mut self, line: &[u8]) {
        if let Some(shown) = line
            .split(|&b| b == b'\r')
            .rfind(|part| part.iter().any(|b| !b.is_ascii_whitespace()))
        {
            self.read(&shown[..shown.len().min(4096)]);
        }
    }

    /// How far it is, 0 to 1: by its steps if they have a total (a whole run's count), else
    /// its epochs, else its bar (which may be one epoch's).
    pub fn fraction(&self) -> Option<f64> {
        [self.step, self.epoch, self.bar]
            .into_iter()
            .flatten()
            .find_map(Counter::fraction)
    }

    /// The time left if the rest goes at the pace so far (`ran_ms` since the job started);
    /// `None` before 1% or once it is done.
    pub fn remaining_ms(&self, ran_ms: Millis) -> Option<Millis> {
        let f = self.fraction()?;
        (0.01..1.0)
            .contains(&f)
            .then(|| (ran_ms.max(0) as f64 * (1.0 - f) / f).round() as Millis)
    }

    /// `step 400/1000 (40%); about 3m00s left at its pace so far`, for a job that has run
    /// `ran_ms`; `None` when it printed no counter.
    pub fn summary(&self, ran_ms: Millis) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut text = self.describe();
        if let Some(f) = self.fraction() {
            // Rounded down: 399 of 400 is 99%, not done.
            text.push_str(&format!(" ({}%)", (f * 100.0).floor() as u32));
        }
        if let Some(left) = self.remaining_ms(ran_ms) {
            text.push_str(&format!(
                "; about {} left at its pace so far",
                crate::units::format_duration(left)
            ));
        }
        Some(text)
    }

    /// `step 400/1000, epoch 2/10`: what it printed, most telling first.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, counter) in [
            ("step", self.step),
            ("epoch", self.epoch),
            ("bar", self.bar),
        ] {
            if let Some(c) = counter {
                parts.push(format!("{name} {}/{}", c.done, c.total));
            }
        }
        parts.join(", ")
    }
}

/// `WORD N/M` or `WORD [N/M]`, the word in any case and not the end of a longer one
/// (`timestep 3/4` is not a step counter).
fn after_word(line: &[u8], word: &[u8]) -> Option<Counter> {
    let mut from = 0;
    let mut found = None;
    while let Some(at) = find_ignore_case(&line[from..], word) {
        let start = from + at;
        let end = start + word.len();
        from = end;
        if start > 0 && line[start - 1].is_ascii_alphanumeric() {
            continue;
        }
        let mut i = end;
        // `Epoch 2/10`, `Epoch [2/10]`, `Step: 3/5`.
        if line.get(i) == Some(&b':') {
            i += 1;
        }
        while line.get(i) == Some(&b' ') {
            i += 1;
        }
        if i == end {
            continue;
        }
        if line.get(i) == Some(&b'[') {
            i += 1;
        }
        if let Some(counter) = fraction_at(line, i) {
            found = Some(counter);
        }
    }
    found
}

/// A tqdm bar: `NN%|...| N/M` (the last on the line: a redrawn line keeps its latest).
fn bar(line: &[u8]) -> Option<Counter> {
    let mut found = None;
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(&line[from..], b"%|") {
        let open = from + at + 2;
        from = open;
        let Some(close) = memchr::memchr(b'|', &line[open..]) else {
            break;
        };
        let mut i = open + close + 1;
        while line.get(i) == Some(&b' ') {
            i += 1;
        }
        if let Some(counter) = fraction_at(line, i) {
            found = Some(counter);
        }
    }
    found
}

/// `N/M` at `i`, ended by neither a digit nor a `.` (`3/4.5` is no counter).
fn fraction_at(line: &[u8], i: usize) -> Option<Counter> {
    let (done, i) = number_at(line, i)?;
    if line.get(i) != Some(&b'/') {
        return None;
    }
    let (total, j) = number_at(line, i + 1)?;
    if line
        .get(j)
        .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
    {
        return None;
    }
    Some(Counter { done, total })
}

fn number_at(line: &[u8], i: usize) -> Option<(u64, usize)> {
    let digits = line[i.min(line.len())..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let text = std::str::from_utf8(&line[i..i + digits]).ok()?;
    Some((text.parse().ok()?, i + digits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(lines: &[&str]) -> Progress {
        let mut p = Progress::default();
        for line in lines {
            p.read(line.as_bytes());
        }
        p
    }

    #[test]
    fn the_work_is_done_when_its_steps_or_its_only_bar_reach_the_end() {
        assert_eq!(
            read(&["step 1000/1000 loss=0.1"]).done().as_deref(),
            Some("step 1000/1000 (100%)")
        );
        assert_eq!(read(&["step 999/1000"]).done(), None);
        assert_eq!(read(&["Epoch 10/10"]).done(), None, "printed as it begins");
        let bar = "100%|##########| 10/10 [00:01<00:00, 9.9it/s]";
        assert_eq!(
            read(&[" 50%|#####     | 5/10 [00:01<00:01]", bar])
                .done()
                .as_deref(),
            Some("a progress bar at 100% (10/10)")
        );
        // Nested bars: the one at 100% may be an epoch's, whether they come in one read or
        // in many.
        let inner = "100%|##########| 500/500 [00:10<00:00]";
        assert_eq!(
            read(&[" 33%|###       | 1/3 [00:10<00:20]", inner]).done(),
            None
        );
        let mut p = Progress::default();
        p.read_tail(format!(" 33%|###       | 1/3 [00:10<00:20]\n{inner}\n").as_bytes());
        assert!(p.nested_bars && p.done().is_none(), "{p:?}");
        // A drawing cut short at the chunk's end is not taken for another total.
        let mut p = Progress::default();
        p.read_tail(b"\r 50%|#####     | 5/10 [00:01<00:01]\r 60%|######    | 6/1");
        assert!(!p.nested_bars, "{p:?}");
    }

    #[test]
    fn counters_in_words_and_bars_are_read() {
        let p = read(&[
            "Epoch [2/10] step 400/1000 loss=0.3",
            " 40%|####      | 4/10 [00:01<00:02, 3.1it/s]",
        ]);
        assert_eq!(p.epoch, Some(Counter { done: 2, total: 10 }));
        assert_eq!(
            p.step,
            Some(Counter {
                done: 400,
                total: 1000
            })
        );
        assert_eq!(p.bar, Some(Counter { done: 4, total: 10 }));
        assert_eq!(p.describe(), "step 400/1000, epoch 2/10, bar 4/10");
        assert_eq!(p.fraction(), Some(0.4), "steps first");
        let lightning =
            read(&["Epoch 3:  45%|████▌     | 450/1000 [01:02<01:16, 7.2it/s, v_num=0]"]);
        assert_eq!(
            lightning.bar,
            Some(Counter {
                done: 450,
                total: 1000
            })
        );
        assert_eq!(lightning.epoch, None, "an epoch number without a total");
        assert_eq!(
            read(&["Step: 3/5"]).step,
            Some(Counter { done: 3, total: 5 })
        );
        assert_eq!(
            read(&["iteration 7/70"]).step,
            Some(Counter { done: 7, total: 70 })
        );
    }

    #[test]
    fn what_only_looks_like_a_counter_is_not_one() {
        for line in [
            "timestep 3/4",
            "step 3 of 4",
            "epoch 1/2.5",
            "lr=1/3",
            "date 2026/12/03",
            "stepped 3/4",
            "step3/4",
        ] {
            assert!(read(&[line]).is_empty(), "{line}");
        }
    }

    #[test]
    fn a_chunk_is_read_at_its_last_line_and_its_redrawn_bar() {
        let mut p = Progress::default();
        p.read_tail(b"step 1/100 loss=3\nstep 2/100 loss=2\nstep 3/1");
        assert_eq!(
            p.step,
            Some(Counter {
                done: 2,
                total: 100
            }),
            "a counter cut short is not read"
        );
        // A bar's drawings: the last may be cut short, so the one before it is taken.
        p.read_tail(b"\r 10%|#         | 1/10 [00:01<00:09]\r 20%|##        | 2/1");
        assert_eq!(p.bar, Some(Counter { done: 1, total: 10 }));
        p.read_tail(b"0 [00:02<00:08]\r 30%|###       | 3/10 [00:03<00:07]\r");
        assert_eq!(p.bar, Some(Counter { done: 3, total: 10 }));
        p.read_tail(b" 100%|##########| 10/10 [00:10<00:00]\n");
        assert_eq!(
            p.bar,
            Some(Counter {
                done: 10,
                total: 10
            })
        );
    }

    #[test]
    fn the_eta_is_the_pace_so_far() {
        let p = read(&["step 250/1000"]);
        assert_eq!(p.remaining_ms(60_000), Some(180_000));
        assert_eq!(
            read(&["step 0/1000"]).remaining_ms(60_000),
            None,
            "not started"
        );
        assert_eq!(read(&["step 1000/1000"]).remaining_ms(60_000), None, "done");
        assert_eq!(read(&["step 1200/1000"]).fraction(), None, "past its total");
        assert_eq!(read(&["loss=0.3"]).remaining_ms(60_000), None);
    }
}
