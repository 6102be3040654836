//! Per-job input, client to owner thread (audio to transcribe): a bounded channel per job whose
//! every message, and whose sender's drop, wakes the owner thread, so that the thread can sleep
//! while no job has anything to step (no busy spin) and still notices a client that went away.

use std::sync::Arc;

use tokio::sync::mpsc;

/// Wakes a sleeping owner thread.
#[derive(Clone)]
pub(crate) struct Waker(Arc<dyn Fn() + Send + Sync>);

impl Waker {
    pub(crate) fn new(wake: impl Fn() + Send + Sync + 'static) -> Self {
        Self(Arc::new(wake))
    }

    pub(crate) fn wake(&self) {
        (self.0)()
    }
}

/// The client's side: sends wake the owner thread; dropping it wakes the thread too (its next
/// sweep then finds the job's client gone).
pub(crate) struct InputTx<I> {
    tx: mpsc::Sender<I>,
    waker: Waker,
}

/// The owner thread's side.
pub(crate) struct InputRx<I> {
    rx: mpsc::Receiver<I>,
}

/// A job's input channel holding at most `bound` messages the owner thread has not taken.
pub(crate) fn input_channel<I>(bound: usize, waker: Waker) -> (InputTx<I>, InputRx<I>) {
    let (tx, rx) = mpsc::channel(bound);
    (InputTx { tx, waker }, InputRx { rx })
}

/// The owner thread no longer takes this job's input (it ended).
#[derive(Debug)]
pub(crate) struct InputClosed;

impl<I> InputTx<I> {
    /// Waits for room, then hands `input` over and wakes the owner thread. Cancel-safe: a
    /// cancelled wait sends nothing.
    pub(crate) async fn send(&self, input: I) -> Result<(), InputClosed> {
        let permit = self.tx.reserve().await.map_err(|_| InputClosed)?;
        permit.send(input);
        self.waker.wake();
        Ok(())
    }

    /// Waits for room for one message (cancel-safe: a cancelled wait holds nothing); the permit
    /// sends it and wakes the owner thread.
    pub(crate) async fn reserve(&self) -> Result<InputPermit<'_, I>, InputClosed> {
        let permit = self.tx.reserve().await.map_err(|_| InputClosed)?;
        Ok(InputPermit {
            permit,
            waker: &self.waker,
        })
    }

    /// Wakes the owner thread without input (the job was cancelled).
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }
}

/// Room for one message of a job's input.
pub(crate) struct InputPermit<'a, I> {
    permit: mpsc::Permit<'a, I>,
    waker: &'a Waker,
}

impl<I> InputPermit<'_, I> {
    pub(crate) fn send(self, input: I) {
        self.permit.send(input);
        self.waker.wake();
    }
}

impl<I> Drop for InputTx<I> {
    fn drop(&mut self) {
        self.waker.wake();
    }
}

impl<I> InputRx<I> {
    /// The next message, if one is waiting.
    pub(crate) fn try_recv(&mut self) -> Option<I> {
        self.rx.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn every_send_and_the_drop_wake_the_owner() {
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        let (tx, mut rx) = input_channel::<u32>(
            2,
            Waker::new(move || {
                w.fetch_add(1, Ordering::SeqCst);
            }),
        );
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        assert_eq!(woken.load(Ordering::SeqCst), 2);
        assert_eq!(
            (rx.try_recv(), rx.try_recv(), rx.try_recv()),
            (Some(1), Some(2), None)
        );
        drop(tx);
        assert_eq!(woken.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_closed_receiver_refuses_input() {
        let (tx, rx) = input_channel::<u32>(1, Waker::new(|| {}));
        drop(rx);
        assert!(tx.send(1).await.is_err());
    }
}
