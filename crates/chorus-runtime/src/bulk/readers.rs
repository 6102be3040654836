//! Reader threads: items loaded by index on a few threads (audio decoded and resampled, codes
//! parsed) while the device works, handed over a bounded channel in the order they finish, so a
//! fast reader never holds more than `capacity` items in memory ahead of the device.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use chorus_core::{Error, Result};

const OP: &str = "Readers::spawn";

/// What the channel held when asked.
#[derive(Debug)]
pub enum Next<T> {
    /// Item `index` of the list, loaded.
    Item(usize, T),
    /// Nothing ready yet; more will come.
    Empty,
    /// Every item has been handed over.
    Done,
}

/// Threads that load items `0..count` with one function.
pub struct Readers<T> {
    rx: Receiver<(usize, T)>,
    /// Tells the threads to stop taking new items (set on drop).
    stop: Arc<AtomicBool>,
}

impl<T: Send + 'static> Readers<T> {
    /// Starts `threads` threads (at least one) that call `load(i)` for every `i` in
    /// `0..count`, each index once, and queue at most `capacity` (at least one) results.
    pub fn spawn(
        count: usize,
        threads: usize,
        capacity: usize,
        load: impl Fn(usize) -> T + Send + Sync + 'static,
    ) -> Result<Self> {
        let (tx, rx) = sync_channel(capacity.max(1));
        let next = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let load = Arc::new(load);
        for n in 0..threads.clamp(1, count.max(1)) {
            let (tx, next, stop, load) = (tx.clone(), next.clone(), stop.clone(), load.clone());
            std::thread::Builder::new()
                .name(format!("chorus-reader-{n}"))
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        // A send fails once the receiver is gone: nobody wants the rest.
                        if i >= count || tx.send((i, load(i))).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| Error::io(OP, "reader thread", e))?;
        }
        Ok(Self { rx, stop })
    }
}

impl<T> Readers<T> {
    /// The next loaded item: what is ready now (`None`), or waiting up to `wait` for one, so
    /// that a caller waiting for slow readers still gets to check for an interrupt.
    pub fn next(&self, wait: Option<Duration>) -> Next<T> {
        match wait {
            None => match self.rx.try_recv() {
                Ok((i, t)) => Next::Item(i, t),
                Err(TryRecvError::Empty) => Next::Empty,
                Err(TryRecvError::Disconnected) => Next::Done,
            },
            Some(wait) => match self.rx.recv_timeout(wait) {
                Ok((i, t)) => Next::Item(i, t),
                Err(RecvTimeoutError::Timeout) => Next::Empty,
                Err(RecvTimeoutError::Disconnected) => Next::Done,
            },
        }
    }
}

impl<T> Drop for Readers<T> {
    fn drop(&mut self) {
        // Threads finish the item they hold, find the channel closed, and end.
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Option<Duration> = Some(Duration::from_millis(50));

    #[test]
    fn every_index_is_loaded_once() {
        let r = Readers::spawn(37, 3, 2, |i| i * 10).unwrap();
        let mut seen = Vec::new();
        loop {
            match r.next(POLL) {
                Next::Item(i, v) => {
                    assert_eq!(v, i * 10);
                    seen.push(i);
                }
                Next::Empty => {}
                Next::Done => break,
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..37).collect::<Vec<_>>());
    }

    #[test]
    fn readers_stay_at_most_capacity_ahead() {
        let loaded = Arc::new(AtomicUsize::new(0));
        let l = loaded.clone();
        let r = Readers::spawn(100, 2, 3, move |i| {
            l.fetch_add(1, Ordering::SeqCst);
            i
        })
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while loaded.load(Ordering::SeqCst) < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        // `capacity` queued plus one item blocked in `send` per thread, and no more.
        let ahead = loaded.load(Ordering::SeqCst);
        assert!((3..=5).contains(&ahead), "{ahead} items loaded ahead");
        assert!(matches!(r.next(None), Next::Item(..)));
    }

    #[test]
    fn an_empty_list_is_done_at_once() {
        let r = Readers::spawn(0, 4, 1, |i| i).unwrap();
        assert!(matches!(r.next(POLL), Next::Done));
    }
}
