//! Bounded time series: the monitor's recent samples of each GPU and each running job, kept in
//! memory in ring buffers so that a week of uptime costs no more than an hour.

use std::collections::VecDeque;

use baton_core::Millis;

/// One sample of a GPU, or of a job across its GPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub at: Millis,
    /// Percent; `None` when the GPU did not say.
    pub util: Option<f32>,
    pub mem: u64,
}

/// The last `capacity` points, oldest first.
#[derive(Clone, Debug)]
pub struct Ring {
    points: VecDeque<Point>,
    capacity: usize,
}

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        Ring {
            points: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1),
        }
    }

    /// Room for `span` of samples taken every `interval`.
    pub fn spanning(span: Millis, interval: Millis) -> Ring {
        Ring::new((span / interval.max(1)).max(1) as usize)
    }

    pub fn push(&mut self, p: Point) {
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(p);
    }

    /// The points, newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Point> {
        self.points.iter().rev()
    }

    /// The oldest point kept.
    pub fn oldest(&self) -> Option<&Point> {
        self.points.front()
    }

    /// The points at or after `since`.
    pub fn since(&self, since: Millis) -> impl Iterator<Item = &Point> {
        self.points.iter().filter(move |p| p.at >= since)
    }

    /// Heap bytes held when full (the monitor's overhead benchmark reports it).
    #[cfg(test)]
    pub fn bytes_when_full(&self) -> usize {
        self.capacity * std::mem::size_of::<Point>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_newest_points() {
        let mut ring = Ring::spanning(60_000, 5_000);
        for i in 0..20 {
            ring.push(Point {
                at: i * 5_000,
                util: Some(i as f32),
                mem: 0,
            });
        }
        assert_eq!(ring.since(0).count(), 12);
        assert_eq!(ring.since(0).next().unwrap().at, 40_000);
        assert_eq!(ring.since(90_000).count(), 2);
        assert_eq!(ring.bytes_when_full(), 12 * std::mem::size_of::<Point>());
    }
}
