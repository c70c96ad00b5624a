//! Reading a pod list in the format of Alibaba's `cluster-trace-gpu-v2023`
//! (`openb_pod_list_*.csv`).
//!
//! Columns are found by name in the header, so their order does not matter and extra columns are
//! ignored. Per row:
//!
//! - arrival = `creation_time`, run time = `deletion_time − scheduled_time` (seconds from the
//!   trace start, integers or decimals; kept in milliseconds).
//! - GPUs: `num_gpu = 0` asks for no GPU; `num_gpu = n ≥ 1` with `0 < gpu_milli < 1000` asks for
//!   `gpu_milli / 1000` of the memory of each of `n` GPUs, shared with other such pods (in the
//!   trace only `n = 1` does); otherwise (`gpu_milli` 1000, or 0 which the trace never pairs with a
//!   GPU) `n` whole GPUs.
//! - Skipped and counted: rows with an empty `scheduled_time` (pods still pending when the trace
//!   was cut) and rows whose run time is not positive.
//!
//! Anything else that does not parse is an error naming the line (1-based, the header is line 1).

use crate::model::{Millis, ResourceRequest};

/// The columns the reader needs.
pub const REQUIRED_COLUMNS: [&str; 6] = [
    "name",
    "num_gpu",
    "gpu_milli",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// One pod of the trace, as a job to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceJob {
    pub name: String,
    /// The line of the file it came from.
    pub line: usize,
    /// Milliseconds from the trace start.
    pub arrival: Millis,
    /// How long it really ran, in milliseconds (positive).
    pub run_time: Millis,
    /// `num_gpu`.
    pub gpus: u32,
    /// `gpu_milli`: thousandths of each GPU's memory when shared; 1000 (or 0) for whole GPUs.
    pub gpu_milli: u32,
}

impl TraceJob {
    /// Whether it shares its GPUs with other pods (a fraction of each GPU's memory).
    pub fn is_shared(&self) -> bool {
        self.gpus > 0 && self.gpu_milli > 0 && self.gpu_milli < 1000
    }

    /// What it asks of GPUs with `gpu_memory` bytes each.
    pub fn request(&self, gpu_memory: u64) -> ResourceRequest {
        if self.is_shared() {
            // Rounded up so that shares summing to a whole GPU still fit on one.
            let mem = (u128::from(gpu_memory) * u128::from(self.gpu_milli)).div_ceil(1000);
            ResourceRequest::shared(self.gpus, mem as u64)
        } else {
            ResourceRequest::whole(self.gpus)
        }
    }

    /// GPUs it occupies, counting a shared GPU by its fraction (0.46 for `gpu_milli = 460`).
    pub fn gpu_amount(&self) -> f64 {
        if self.is_shared() {
            f64::from(self.gpus) * f64::from(self.gpu_milli) / 1000.0
        } else {
            f64::from(self.gpus)
        }
    }
}

/// A parsed trace: the jobs in arrival order (ties in file order) and what was left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
    /// Data rows read (blank lines not counted).
    pub rows: usize,
    /// Rows without a `scheduled_time`: pods that never started in the original cluster.
    pub skipped_unscheduled: usize,
    /// Rows whose `deletion_time − scheduled_time` is zero or negative.
    pub skipped_nonpositive: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("the trace is empty: expected a header line naming the columns")]
    Empty,
    #[error("line 1: the header has no column {column:?} (it has: {found})")]
    MissingColumn { column: &'static str, found: String },
    #[error("line {line}: {message}")]
    Row { line: usize, message: String },
}

/// Parses the text of an `openb_pod_list` CSV file.
pub fn parse_openb(text: &str) -> Result<Trace, TraceError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let header = loop {
        match lines.next() {
            None => return Err(TraceError::Empty),
            Some((_, l)) if l.trim().is_empty() => continue,
            Some((line, l)) => {
                break split_csv(l).map_err(|message| TraceError::Row { line, message })?;
            }
        }
    };
    let header: Vec<String> = header
        .into_iter()
        .map(|h| h.trim().trim_start_matches('\u{feff}').to_string())
        .collect();
    let column = |name: &'static str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| TraceError::MissingColumn {
                column: name,
                found: header.join(", "),
            })
    };
    let cols = Columns {
        name: column("name")?,
        num_gpu: column("num_gpu")?,
        gpu_milli: column("gpu_milli")?,
        creation: column("creation_time")?,
        deletion: column("deletion_time")?,
        scheduled: column("scheduled_time")?,
    };

    let mut trace = Trace::default();
    for (line, text) in lines {
        if text.trim().is_empty() {
            continue;
        }
        trace.rows += 1;
        let row = |message: String| TraceError::Row { line, message };
        let fields = split_csv(text).map_err(row)?;
        if fields.len() != header.len() {
            return Err(row(format!(
                "expected {} fields as in the header, found {}",
                header.len(),
                fields.len()
            )));
        }
        let field = |i: usize| fields[i].trim();
        let scheduled = field(cols.scheduled);
        if scheduled.is_empty() {
            trace.skipped_unscheduled += 1;
            continue;
        }
        let scheduled = seconds(scheduled, "scheduled_time").map_err(row)?;
        let creation = seconds(field(cols.creation), "creation_time").map_err(row)?;
        let deletion = seconds(field(cols.deletion), "deletion_time").map_err(row)?;
        let gpus = integer(field(cols.num_gpu), "num_gpu", false).map_err(row)?;
        let gpu_milli = integer(field(cols.gpu_milli), "gpu_milli", true).map_err(row)?;
        if gpu_milli > 1000 {
            return Err(row(format!(
                "gpu_milli is {gpu_milli}, more than a whole GPU (1000)"
            )));
        }
        let run_time = deletion - scheduled;
        if run_time <= 0 {
            trace.skipped_nonpositive += 1;
            continue;
        }
        trace.jobs.push(TraceJob {
            name: field(cols.name).to_string(),
            line,
            arrival: creation,
            run_time,
            gpus,
            gpu_milli,
        });
    }
    // Stable: equal arrivals stay in file order.
    trace.jobs.sort_by_key(|j| j.arrival);
    Ok(trace)
}

struct Columns {
    name: usize,
    num_gpu: usize,
    gpu_milli: usize,
    creation: usize,
    deletion: usize,
    scheduled: usize,
}

/// Seconds (integer or decimal, not negative) to milliseconds.
fn seconds(s: &str, column: &str) -> Result<Millis, String> {
    let bad = || format!("{column} is {s:?}, not a number of seconds");
    if s.is_empty() {
        return Err(format!("{column} is empty"));
    }
    let value: f64 = s.parse().map_err(|_| bad())?;
    // Under 2^53 ms (about 285,000 years) every millisecond is exact.
    if !value.is_finite() || !(0.0..=9.0e12).contains(&value) {
        return Err(bad());
    }
    Ok((value * 1000.0).round() as Millis)
}

fn integer(s: &str, column: &str, empty_is_zero: bool) -> Result<u32, String> {
    if s.is_empty() && empty_is_zero {
        return Ok(0);
    }
    s.parse()
        .map_err(|_| format!("{column} is {s:?}, not a whole number from 0"))
}

/// Splits one CSV line: fields separated by commas, optionally in double quotes (`""` inside
/// quotes is a quote).
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.trim().is_empty() && !was_quoted => {
                field.clear();
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, c) if was_quoted && !c.is_whitespace() => {
                return Err(format!(
                    "field {} has text after its closing quote",
                    fields.len() + 1
                ));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err(format!("field {} has no closing quote", fields.len() + 1));
    }
    fields.push(field);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn reads_the_openb_format_and_skips_what_never_ran() {
        let text = "\
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,100,0
openb-pod-0001,6000,12288,1,460,,LS,Running,10,70,20
openb-pod-0002,6000,12288,0,0,,BE,Pending,15,90,
openb-pod-0003,6000,12288,8,1000,,BE,Failed,30,50,50

openb-pod-0004,6000,12288,0,0,,BE,Succeeded,5,35.5,6
";
        let t = parse_openb(text).unwrap();
        assert_eq!(t.rows, 5);
        assert_eq!(t.skipped_unscheduled, 1);
        assert_eq!(t.skipped_nonpositive, 1);
        let names: Vec<&str> = t.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(
            names,
            ["openb-pod-0000", "openb-pod-0004", "openb-pod-0001"],
            "sorted by arrival"
        );
        let pod0 = &t.jobs[0];
        assert_eq!((pod0.arrival, pod0.run_time, pod0.line), (0, 100_000, 2));
        assert_eq!(pod0.request(80 * GIB), ResourceRequest::whole(1));
        let pod4 = &t.jobs[1];
        assert_eq!((pod4.arrival, pod4.run_time), (5_000, 29_500));
        assert_eq!(pod4.request(80 * GIB), ResourceRequest::whole(0));
        assert_eq!(pod4.gpu_amount(), 0.0);
        let pod1 = &t.jobs[2];
        assert_eq!((pod1.arrival, pod1.run_time), (10_000, 50_000));
        assert!(pod1.is_shared());
        assert_eq!(pod1.request(1000), ResourceRequest::shared(1, 460));
        assert!((pod1.gpu_amount() - 0.46).abs() < 1e-12);
    }

    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let text = "\
scheduled_time,deletion_time,extra,creation_time,gpu_milli,num_gpu,name
4,10,x,1,1000,2,b
\"3\",9,\"y, z\",2,250,1,\"a\"\r
";
        let t = parse_openb(text).unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(t.jobs[0].name, "b");
        assert_eq!((t.jobs[0].arrival, t.jobs[0].run_time), (1_000, 6_000));
        assert_eq!(t.jobs[0].request(80 * GIB), ResourceRequest::whole(2));
        assert_eq!(t.jobs[1].name, "a");
        assert_eq!((t.jobs[1].arrival, t.jobs[1].run_time), (2_000, 6_000));
        assert_eq!(
            t.jobs[1].request(80 * GIB),
            ResourceRequest::shared(1, 20 * GIB)
        );
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let err = |text: &str| parse_openb(text).unwrap_err().to_string();
        assert_eq!(
            err(""),
            "the trace is empty: expected a header line naming the columns"
        );
        assert_eq!(
            err("name,num_gpu,gpu_milli,creation_time,deletion_time\n"),
            "line 1: the header has no column \"scheduled_time\" \
             (it has: name, num_gpu, gpu_milli, creation_time, deletion_time)"
        );
        let header = "name,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n";
        assert_eq!(
            err(&format!("{header}a,1,1000,0,10,0\nb,1,1000,0,10\n")),
            "line 3: expected 6 fields as in the header, found 5"
        );
        assert_eq!(
            err(&format!("{header}a,one,1000,0,10,0\n")),
            "line 2: num_gpu is \"one\", not a whole number from 0"
        );
        assert_eq!(
            err(&format!("{header}a,1,1000,yesterday,10,0\n")),
            "line 2: creation_time is \"yesterday\", not a number of seconds"
        );
        assert_eq!(
            err(&format!("{header}a,1,1500,0,10,0\n")),
            "line 2: gpu_milli is 1500, more than a whole GPU (1000)"
        );
        assert_eq!(
            err(&format!("{header}\"a,1,1000,0,10,0\n")),
            "line 2: field 1 has no closing quote"
        );
        assert_eq!(
            err(&format!("{header}a,1,1000,-5,10,0\n")),
            "line 2: creation_time is \"-5\", not a number of seconds"
        );
    }
}
