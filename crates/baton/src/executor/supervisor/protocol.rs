//! What a daemon and its supervisor say to each other over the supervisor's socket: one line
//! each, the job's directory last (a path may hold spaces, never a newline).
//!
//! - daemon to supervisor: `launch ATTEMPT DIR` (claim `DIR/launch.json` and run it) and
//!   `stop ATTEMPT DIR` (a cancel: SIGTERM to every process of the attempt, SIGKILL after the
//!   grace period);
//! - supervisor to daemon: `ended ATTEMPT DIR`, once the attempt's end is in its record, or at
//!   once for a launch that was not the supervisor's to run (revoked, or unreadable).
//!
//! The record in the job's directory stays the truth: a daemon that was away when an attempt
//! ended reads it there.

/// A daemon's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Launch { attempt: u32, dir: String },
    Stop { attempt: u32, dir: String },
}

/// The supervisor's word that an attempt is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub attempt: u32,
    pub dir: String,
}

impl Request {
    pub fn line(&self) -> String {
        match self {
            Request::Launch { attempt, dir } => format!("launch {attempt} {dir}\n"),
            Request::Stop { attempt, dir } => format!("stop {attempt} {dir}\n"),
        }
    }

    /// A line without its newline.
    pub fn parse(line: &str) -> Option<Request> {
        let (verb, attempt, dir) = split(line)?;
        match verb {
            "launch" => Some(Request::Launch { attempt, dir }),
            "stop" => Some(Request::Stop { attempt, dir }),
            _ => None,
        }
    }
}

impl Ended {
    pub fn line(&self) -> String {
        format!("ended {} {}\n", self.attempt, self.dir)
    }

    /// A line without its newline.
    pub fn parse(line: &str) -> Option<Ended> {
        match split(line)? {
            ("ended", attempt, dir) => Some(Ended { attempt, dir }),
            _ => None,
        }
    }
}

fn split(line: &str) -> Option<(&str, u32, String)> {
    let (verb, rest) = line.split_once(' ')?;
    let (attempt, dir) = rest.split_once(' ')?;
    (!dir.is_empty() && !dir.contains('\n'))
        .then(|| Some((verb, attempt.parse().ok()?, dir.to_string())))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back_as_written_even_with_spaces_in_the_path() {
        for request in [
            Request::Launch {
                attempt: 3,
                dir: "/home/a b/jobs/7".into(),
            },
            Request::Stop {
                attempt: 1,
                dir: "/x".into(),
            },
        ] {
            let line = request.line();
            assert_eq!(Request::parse(line.trim_end_matches('\n')), Some(request));
        }
        let ended = Ended {
            attempt: 2,
            dir: "/var/lib/baton/jobs/12".into(),
        };
        assert_eq!(
            Ended::parse(ended.line().trim_end_matches('\n')),
            Some(ended)
        );
    }

    #[test]
    fn malformed_lines_are_refused() {
        for line in [
            "",
            "launch",
            "launch 1",
            "launch x /d",
            "stop -1 /d",
            "run 1 /d",
        ] {
            assert_eq!(Request::parse(line), None, "{line:?}");
        }
        assert_eq!(Ended::parse("launch 1 /d"), None);
    }
}
