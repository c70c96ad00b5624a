//! Every task the daemon spawns, async or blocking, is tracked here, so that a stop is one place
//! (`Daemon::run`), as in mini-redis. A stop goes in three steps: the loops that start new work
//! end (`stop_starting`); the deliveries in flight finish, within a bound (`drain_deliveries`);
//! then every other task is cancelled and all are awaited (`stop`). Cancelling a supervisor's
//! watch only stops watching: the job runs on under its supervisor, and the next daemon watches
//! it again.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// When a task is cancelled at a stop.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Until {
    /// As the stop begins: the loops that start new work (the scheduler, the outbox, the GPU
    /// monitor) and timers that would.
    Stop,
    /// Once the deliveries in flight are done: everything else (supervisors' watches, the
    /// report builder, the store's retries), which a finishing delivery may still need.
    Drained,
}

pub(crate) struct Tasks {
    /// Every task.
    all: TaskTracker,
    /// The deliveries among them, which a stop waits for first.
    deliveries: TaskTracker,
    /// Cancels the `Until::Stop` tasks.
    stopping: CancellationToken,
    /// Cancels the `Until::Drained` tasks and the deliveries left.
    drained: CancellationToken,
}

impl Tasks {
    pub(crate) fn new() -> Tasks {
        Tasks {
            all: TaskTracker::new(),
            deliveries: TaskTracker::new(),
            stopping: CancellationToken::new(),
            drained: CancellationToken::new(),
        }
    }

    /// Spawns a task that runs until it ends or the stop cancels it at its next `.await`.
    /// Spawned once that point of the stop has passed, it is cancelled at once.
    pub(crate) fn spawn<F>(&self, until: Until, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = match until {
            Until::Stop => self.stopping.clone(),
            Until::Drained => self.drained.clone(),
        };
        self.all.spawn(async move {
            token.run_until_cancelled_owned(task).await;
        })
    }

    /// Spawns a delivery: a stop waits for it (see `drain_deliveries`) before cancelling it.
    pub(crate) fn spawn_delivery<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.drained.clone();
        let task = self.deliveries.track_future(async move {
            token.run_until_cancelled_owned(task).await;
        });
        self.all.spawn(task);
    }

    /// Whether the stop has begun: no new work is to start.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Runs `f` on a blocking thread. It cannot be interrupted: a stop waits for it to return.
    pub(crate) fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.all.spawn_blocking(f)
    }

    /// The stop's first step: the loops that start new work end.
    pub(crate) fn stop_starting(&self) {
        self.stopping.cancel();
    }

    /// Waits (at most `bound`) for the deliveries in flight to finish. Returns how many are
    /// still running after it.
    pub(crate) async fn drain_deliveries(&self, bound: Duration) -> usize {
        self.deliveries.close();
        if tokio::time::timeout(bound, self.deliveries.wait())
            .await
            .is_err()
        {
            return self.deliveries.len();
        }
        0
    }

    /// The stop's last step: every task still running is cancelled, and all are awaited (a
    /// blocking one runs to its end).
    pub(crate) async fn stop(&self) {
        self.stopping.cancel();
        self.drained.cancel();
        self.all.close();
        self.all.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::{Notify, oneshot};

    #[tokio::test]
    async fn a_stop_waits_for_deliveries_then_cancels_the_rest_and_awaits_everything() {
        let tasks = Tasks::new();
        // A watch that never ends by itself (a job that runs on), and a loop that starts work.
        let (watch_dropped_tx, watch_dropped) = oneshot::channel::<()>();
        tasks.spawn(Until::Drained, async move {
            let _held = watch_dropped_tx; // dropped with the task
            std::future::pending::<()>().await
        });
        let (loop_dropped_tx, mut loop_dropped) = oneshot::channel::<()>();
        tasks.spawn(Until::Stop, async move {
            let _held = loop_dropped_tx; // dropped with the task
            std::future::pending::<()>().await
        });
        // A delivery in flight, released by the test.
        let release = Arc::new(Notify::new());
        let delivered = Arc::new(AtomicBool::new(false));
        let (r, d) = (release.clone(), delivered.clone());
        tasks.spawn_delivery(async move {
            r.notified().await;
            d.store(true, Ordering::SeqCst);
        });
        // A blocking task: awaited, never cut short.
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let blocked_done = Arc::new(AtomicBool::new(false));
        let b = blocked_done.clone();
        tasks.spawn_blocking(move || {
            let _ = go_rx.recv();
            b.store(true, Ordering::SeqCst);
        });

        tasks.stop_starting();
        (&mut loop_dropped).await.unwrap_err(); // the loop ended (its sender dropped)
        // The drain waits for the delivery, and it is still in flight until released.
        let drain = tasks.drain_deliveries(Duration::from_secs(60));
        tokio::pin!(drain);
        assert!(
            (&mut drain).now_or_never().is_none(),
            "the drain returned with a delivery in flight"
        );
        release.notify_one();
        assert_eq!(drain.await, 0);
        assert!(delivered.load(Ordering::SeqCst));

        // The watch is cancelled, not awaited forever; the blocking task is awaited.
        let stop = tasks.stop();
        tokio::pin!(stop);
        assert!(
            (&mut stop).now_or_never().is_none(),
            "the stop returned with a blocking task running"
        );
        watch_dropped.await.unwrap_err();
        assert!(
            (&mut stop).now_or_never().is_none(),
            "the stop returned with a blocking task running"
        );
        go_tx.send(()).unwrap();
        stop.await;
        assert!(blocked_done.load(Ordering::SeqCst));

        // Spawned after the stop: cancelled at once.
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        tasks
            .spawn(Until::Drained, async move {
                tokio::task::yield_now().await;
                r.store(true, Ordering::SeqCst);
            })
            .await
            .unwrap();
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_drain_gives_up_after_its_bound_and_the_stop_cancels_what_is_left() {
        let tasks = Tasks::new();
        let (dropped_tx, dropped) = oneshot::channel::<()>();
        tasks.spawn_delivery(async move {
            let _held = dropped_tx; // dropped with the task
            std::future::pending::<()>().await
        });
        assert_eq!(tasks.drain_deliveries(Duration::from_millis(10)).await, 1);
        tasks.stop().await;
        dropped.await.unwrap_err();
    }
}
