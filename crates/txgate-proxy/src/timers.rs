//! Timers kept for reuse by the calls of one worker.
//!
//! A call that races a timer registers a new one in the runtime's wheel
//! and takes it out again when it ends: a lock, an insert and a remove
//! per call. Worse, a new timer is usually earlier than the deadline the
//! runtime last slept towards (the calls before it ended), and the runtime
//! then wakes its own poller through its event fd: one more system call on
//! the path of every answer.
//!
//! A kept timer avoids both. Its deadline only ever moves later (the next
//! call starts after the last one did, with the same limit), and tokio
//! moves a timer later without touching the wheel: the timer stays at its
//! old place, and when that comes the runtime finds the later deadline and
//! puts it back. Measured with every process on one CPU, where a call's
//! CPU decides the throughput: 1.05-1.07x the calls per second of a new timer
//! per call (PERFORMANCE.md, "Pass-through per hop").

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A small stack of timers, most recently used on top.
#[derive(Debug)]
pub(crate) struct Timers {
    kept: Mutex<Vec<Pin<Box<Sleep>>>>,
    max: usize,
}

impl Timers {
    /// Keeps at most `max` timers (at least one): as many as calls that
    /// usually run at once.
    pub(crate) fn new(max: usize) -> Timers {
        Timers {
            kept: Mutex::new(Vec::new()),
            max: max.max(1),
        }
    }

    /// Runs `future` for at most `limit`: `None` when the time ran out
    /// first. As with `tokio::time::timeout`, the future is polled before
    /// the timer, and the timer is looked at even when the future used up
    /// the task's budget: a call whose answer keeps arriving still ends at
    /// its limit.
    pub(crate) async fn within<F: Future>(&self, limit: Duration, future: F) -> Option<F::Output> {
        let now = Instant::now();
        // A limit beyond any clock: a deadline decades away, as tokio's.
        let deadline = now
            .checked_add(limit)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
        let mut timer = self.take(deadline);
        let out = tokio::select! {
            biased;
            out = future => Some(out),
            () = tokio::task::unconstrained(timer.as_mut()) => None,
        };
        self.give(timer);
        out
    }

    /// A timer set to `deadline`: the last one kept, or a new one.
    fn take(&self, deadline: Instant) -> Pin<Box<Sleep>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match kept {
            Some(mut timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        }
    }

    /// Keeps `timer` for a later call, if there is room.
    fn give(&self, timer: Pin<Box<Sleep>>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < self.max {
            kept.push(timer);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_counts_from_its_new_call_not_from_its_last() {
        let timers = Timers::new(4);
        let start = Instant::now();
        // A quick call: its timer (due at 10 s) is kept.
        assert_eq!(
            timers.within(Duration::from_secs(10), async { 1 }).await,
            Some(1)
        );
        assert_eq!(timers.len(), 1);
        // 5 s later, a call of 8 s within 10 s: due at 15 s, not at the
        // old 10 s.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let slow = tokio::time::sleep(Duration::from_secs(8));
        assert_eq!(timers.within(Duration::from_secs(10), slow).await, Some(()));
        assert_eq!(Instant::now() - start, Duration::from_secs(13));
        assert_eq!(timers.len(), 1, "the same timer, kept again");
        // A call that outlasts its limit ends at the limit.
        let begun = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(timers.within(Duration::from_secs(3), never).await, None);
        assert_eq!(Instant::now() - begun, Duration::from_secs(3));
        // An elapsed timer is kept too, and set again for the next call.
        let begun = Instant::now();
        let slow = tokio::time::sleep(Duration::from_secs(2));
        assert_eq!(timers.within(Duration::from_secs(3), slow).await, Some(()));
        assert_eq!(Instant::now() - begun, Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_given_back_is_the_one_taken_next() {
        let timers = Timers::new(4);
        let first = timers.take(Instant::now() + Duration::from_secs(1));
        let at = &*first as *const Sleep;
        timers.give(first);
        let again = timers.take(Instant::now() + Duration::from_secs(2));
        assert_eq!(&*again as *const Sleep, at, "a new timer, not the kept one");
        assert_eq!(again.deadline(), Instant::now() + Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_call_wins_over_an_elapsed_limit_and_no_limit_overflows() {
        let timers = Timers::new(1);
        assert_eq!(timers.within(Duration::ZERO, async { 5 }).await, Some(5));
        assert_eq!(timers.within(Duration::MAX, async { 6 }).await, Some(6));
    }

    /// A call that uses up the task's budget on every poll (an answer that
    /// keeps arriving) still ends at its limit.
    #[tokio::test]
    async fn a_call_that_uses_up_its_budget_still_times_out() {
        let timers = Timers::new(1);
        let busy = async {
            loop {
                tokio::task::consume_budget().await;
            }
        };
        let limit = Duration::from_millis(50);
        let out = tokio::time::timeout(Duration::from_secs(5), timers.within(limit, busy)).await;
        assert_eq!(out, Ok(None), "the call outlived its limit");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_limit_is_kept_too() {
        let timers = Timers::new(1);
        assert_eq!(
            timers.within(Duration::from_secs(60), async {}).await,
            Some(())
        );
        // An earlier deadline than the kept timer's: registered anew, and
        // it still fires on time.
        let begun = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(timers.within(Duration::from_secs(1), never).await, None);
        assert_eq!(Instant::now() - begun, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_bound_are_kept() {
        let timers = std::sync::Arc::new(Timers::new(2));
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let timers = timers.clone();
                tokio::spawn(async move {
                    let call = tokio::time::sleep(Duration::from_millis(10));
                    timers.within(Duration::from_secs(1), call).await
                })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap(), Some(()));
        }
        assert_eq!(timers.len(), 2);
    }
}
