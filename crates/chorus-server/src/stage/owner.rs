//! The owner thread of a model stage: it builds the stage (a device backend may have to stay on
//! the thread that made it), then loops: admit what arrived, drop what was cancelled, take the
//! jobs' input, step every job with work. With no work it sleeps until a command comes (a start,
//! or a wake-up sent with a job's input, see [`super::input`]); nothing waits in line for a slot.
//! A panic on the thread ends every job of its device with an error naming the device, and marks
//! the device failed so that its pool places nothing more on it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chorus_core::{Error, Result};

use super::pool::{FaultSwitch, Health};

/// The device an owner thread runs on, as its failures name it.
pub(crate) struct Watch {
    pub device: usize,
    /// Marked when the thread panics.
    pub health: Arc<Health>,
    pub fault: Option<FaultSwitch>,
}

/// What the front sends the owner thread.
pub(crate) enum Command<S> {
    Start(Box<S>),
    /// A job's input arrived (or its client went away): look again before sleeping.
    Wake,
    /// End every job and the thread.
    Stop,
}

/// A stage's side of the loop.
pub(crate) trait Owner {
    /// A job to admit, with where its events go.
    type Start;
    /// Admits a job or refuses it at once.
    fn admit(&mut self, job: Self::Start);
    /// Cancels the jobs whose clients cancelled, went away, or were too slow.
    fn sweep(&mut self);
    fn has_jobs(&self) -> bool;
    /// Moves what clients sent since the last step into the stage (jobs that take input).
    fn take_input(&mut self) {}
    /// Whether a step has something to do; while not, the thread sleeps until a command comes.
    /// Jobs that only produce (songs, utterances) always have work.
    fn has_work(&self) -> bool {
        self.has_jobs()
    }
    /// While it has no work: when it will have some without a command (input held back to
    /// gather a fuller step); `None`: only a command brings work.
    fn wake_at(&self) -> Option<Instant> {
        None
    }
    /// One step of every active job.
    fn step(&mut self);
    /// Publishes the gauges.
    fn publish(&self);
    /// Ends every job: the server is shutting down.
    fn stop(&mut self);
    /// Ends every job with an internal error saying `why`: the thread panicked.
    fn abort(&mut self, why: &str);
}

/// Why a job did not reach the owner thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubmitFailed {
    /// Its queue holds as many starts as it takes.
    Full,
    /// The thread has ended.
    Stopped,
}

/// Room in the command queue beyond the starts: wake-ups are coalesced (at most one waits
/// unseen, one more while the thread takes input) and the stop.
const QUEUE_ROOM_BEYOND_STARTS: usize = 3;

/// The owner thread and its command queue. Dropping it stops the thread (every job ends).
pub(crate) struct OwnerThread<S> {
    tx: SyncSender<Command<S>>,
    /// A wake-up is queued and the thread has not taken input since: further ones are not sent,
    /// so thousands of streams' input never crowds starts out of the queue.
    wake_pending: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl<S: Send + 'static> OwnerThread<S> {
    /// Starts thread `name`, where `build` makes the owner; returns once it is built (with what
    /// `build` reported beside it) or with its error. At most `queue(&info)` starts wait for
    /// the thread between two steps: callers give at least the device's seats, so a job that
    /// holds a seat is never refused for a full queue.
    pub(crate) fn spawn<O, I, F>(
        name: &str,
        queue: impl FnOnce(&I) -> usize + Send + 'static,
        watch: Watch,
        build: F,
    ) -> Result<(Self, I)>
    where
        O: Owner<Start = S>,
        I: Send + 'static,
        F: FnOnce() -> Result<(O, I)> + Send + 'static,
    {
        const OP: &str = "OwnerThread::spawn";
        type Ready<S, I> = Result<(I, SyncSender<Command<S>>)>;
        let (ready_tx, ready_rx) = mpsc::channel::<Ready<S, I>>();
        let wake_pending = Arc::new(AtomicBool::new(false));
        let pending = wake_pending.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || match build() {
                Ok((owner, info)) => {
                    let bound = queue(&info).max(1) + QUEUE_ROOM_BEYOND_STARTS;
                    let (tx, rx) = mpsc::sync_channel::<Command<S>>(bound);
                    if ready_tx.send(Ok((info, tx))).is_ok() {
                        run(owner, rx, watch, &pending);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| Error::io(OP, name.to_string(), e))?;
        match ready_rx.recv() {
            Ok(Ok((info, tx))) => Ok((
                Self {
                    tx,
                    wake_pending,
                    thread: Some(thread),
                },
                info,
            )),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(Error::config(
                    OP,
                    format!("building the stage of thread {name} panicked"),
                ))
            }
        }
    }

    /// A handle that wakes the thread when a job's input arrives.
    pub(crate) fn waker(&self) -> super::input::Waker
    where
        S: 'static,
    {
        let tx = self.tx.clone();
        let pending = self.wake_pending.clone();
        super::input::Waker::new(move || {
            if pending.swap(true, Ordering::AcqRel) {
                // One is queued and the thread takes this input with that one's.
                return;
            }
            if let Err(TrySendError::Full(_)) = tx.try_send(Command::Wake) {
                // Commands are queued, so the thread wakes anyway; none of ours is among them.
                pending.store(false, Ordering::Release);
            }
        })
    }

    /// Hands a job to the thread without waiting; a job it cannot take comes back.
    pub(crate) fn try_submit(&self, job: S) -> std::result::Result<(), (SubmitFailed, S)> {
        let back = |c: Command<S>| match c {
            Command::Start(job) => *job,
            // Only a start was sent.
            Command::Wake | Command::Stop => unreachable!("a start was sent"),
        };
        match self.tx.try_send(Command::Start(Box::new(job))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(c)) => Err((SubmitFailed::Full, back(c))),
            Err(TrySendError::Disconnected(c)) => Err((SubmitFailed::Stopped, back(c))),
        }
    }
}

impl<S> Drop for OwnerThread<S> {
    fn drop(&mut self) {
        // A blocking send: the thread drains its queue between steps, or is gone (then it fails).
        let _ = self.tx.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often a gathering owner looks at the input that arrived meanwhile (whether every job
/// now has some).
const GATHER_POLL: Duration = Duration::from_millis(2);

/// Waits until `until` for a start or a stop, dropping wake-ups (the caller takes the input
/// they announce when it returns); `None` at `until`, `Err` once every sender is gone.
fn next_start_or_stop<S>(
    rx: &Receiver<Command<S>>,
    until: Instant,
) -> std::result::Result<Option<Command<S>>, ()> {
    loop {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Command::Wake) => continue,
            Ok(c) => return Ok(Some(c)),
            Err(RecvTimeoutError::Timeout) => return Ok(None),
            Err(RecvTimeoutError::Disconnected) => return Err(()),
        }
    }
}

/// The owner's loop until it ends; a panic in it ends every job with an error naming the device
/// and marks the device failed.
fn run<O: Owner>(
    mut owner: O,
    rx: Receiver<Command<O::Start>>,
    watch: Watch,
    wake_pending: &AtomicBool,
) {
    let serving = || serve(&mut owner, &rx, &watch, wake_pending);
    let Err(panic) = catch_unwind(AssertUnwindSafe(serving)) else {
        return;
    };
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    let why = format!("device {} failed: {what}", watch.device);
    watch.health.fail(why.clone());
    // The stage may be half-stepped: if ending the jobs panics too, they end as `stopped` when
    // the owner is dropped.
    let _ = catch_unwind(AssertUnwindSafe(|| owner.abort(&why)));
}

/// The owner's loop, until `Stop` or until every sender is gone.
fn serve<O: Owner>(
    owner: &mut O,
    rx: &Receiver<Command<O::Start>>,
    watch: &Watch,
    wake_pending: &AtomicBool,
) {
    owner.publish();
    loop {
        let mut commands = Vec::new();
        // Idle: sleep until a command comes (or the owner's deadline). Busy: take what has
        // arrived and step on.
        if !owner.has_work() {
            let got = match owner.wake_at() {
                // Gathering: input wake-ups are looked at every GATHER_POLL at most, so that
                // thousands of streams' frames do not each cost a pass over every job.
                Some(at) => match next_start_or_stop(rx, at.min(Instant::now() + GATHER_POLL)) {
                    Ok(c) => c,
                    Err(()) => return,
                },
                None => match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                },
            };
            commands.extend(got);
        }
        let mut stop = false;
        loop {
            match rx.try_recv() {
                Ok(c) => commands.push(c),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    stop = true;
                    break;
                }
            }
        }
        for command in commands {
            match command {
                Command::Start(job) => owner.admit(*job),
                Command::Wake => {}
                Command::Stop => stop = true,
            }
        }
        if stop {
            owner.stop();
            return;
        }
        owner.sweep();
        // Cleared before taking input: input sent after this point sends a new wake-up.
        wake_pending.store(false, Ordering::Release);
        owner.take_input();
        if owner.has_work() {
            if watch.fault.as_ref().is_some_and(FaultSwitch::tripped) {
                panic!("its fault switch was tripped");
            }
            owner.step();
        }
        owner.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// Admits every start; while it has jobs each step waits for the gate.
    struct Gated {
        admitted: Arc<AtomicUsize>,
        inputs_taken: Arc<AtomicUsize>,
        gate: Arc<Mutex<Receiver<()>>>,
    }

    impl Owner for Gated {
        type Start = u32;
        fn admit(&mut self, _job: u32) {
            self.admitted.fetch_add(1, Ordering::SeqCst);
        }
        fn sweep(&mut self) {}
        fn has_jobs(&self) -> bool {
            self.admitted.load(Ordering::SeqCst) > 0
        }
        fn take_input(&mut self) {
            self.inputs_taken.fetch_add(1, Ordering::SeqCst);
        }
        fn step(&mut self) {
            let _ = self.gate.lock().expect("gate").recv();
        }
        fn publish(&self) {}
        fn stop(&mut self) {}
        fn abort(&mut self, _why: &str) {}
    }

    struct Started {
        thread: OwnerThread<u32>,
        admitted: Arc<AtomicUsize>,
        inputs_taken: Arc<AtomicUsize>,
        open: mpsc::Sender<()>,
    }

    fn start(seats: usize) -> Started {
        let admitted = Arc::new(AtomicUsize::new(0));
        let inputs_taken = Arc::new(AtomicUsize::new(0));
        let (open, gate) = mpsc::channel();
        let owner = Gated {
            admitted: admitted.clone(),
            inputs_taken: inputs_taken.clone(),
            gate: Arc::new(Mutex::new(gate)),
        };
        let watch = Watch {
            device: 0,
            health: Arc::new(Health::default()),
            fault: None,
        };
        let (thread, ()) =
            OwnerThread::spawn("owner-test", move |_| seats, watch, move || Ok((owner, ())))
                .expect("spawn");
        Started {
            thread,
            admitted,
            inputs_taken,
            open,
        }
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn input_wake_ups_never_crowd_seated_starts_out_of_the_queue() {
        // Regression: every stream's input queued a wake-up, so 512 streams sending audio filled
        // the queue and new streams with free seats were refused as busy.
        let seats = 4;
        let s = start(seats);
        s.thread.try_submit(0).map_err(|(e, _)| e).expect("first");
        // The thread is now inside a step; thousands of inputs arrive meanwhile.
        wait_for("first admitted", || s.admitted.load(Ordering::SeqCst) == 1);
        let waker = s.thread.waker();
        for _ in 0..10_000 {
            waker.wake();
        }
        for job in 1..=seats as u32 {
            assert_eq!(
                s.thread.try_submit(job).map_err(|(e, _)| e),
                Ok(()),
                "start {job} of {seats} seats refused"
            );
        }
        for _ in 0..8 {
            let _ = s.open.send(());
        }
        wait_for("all admitted", || {
            s.admitted.load(Ordering::SeqCst) == seats + 1
        });
        drop(s.open);
    }

    /// Gathers until `due`: no work before it, then none at all.
    struct Gathering {
        due: Instant,
        inputs_taken: Arc<AtomicUsize>,
    }

    impl Owner for Gathering {
        type Start = u32;
        fn admit(&mut self, _job: u32) {}
        fn sweep(&mut self) {}
        fn has_jobs(&self) -> bool {
            true
        }
        fn take_input(&mut self) {
            self.inputs_taken.fetch_add(1, Ordering::SeqCst);
        }
        fn has_work(&self) -> bool {
            false
        }
        fn wake_at(&self) -> Option<Instant> {
            (Instant::now() < self.due).then_some(self.due)
        }
        fn step(&mut self) {}
        fn publish(&self) {}
        fn stop(&mut self) {}
        fn abort(&mut self, _why: &str) {}
    }

    #[test]
    fn a_gathering_thread_looks_at_input_every_poll_not_every_wake_up() {
        // Regression: while a step gathered streams, every stream's frame woke the thread for
        // a pass over all jobs (thousands a second at 850 streams: the thread fell behind).
        const GATHER: Duration = Duration::from_millis(200);
        let inputs_taken = Arc::new(AtomicUsize::new(0));
        let owner = Gathering {
            due: Instant::now() + GATHER,
            inputs_taken: inputs_taken.clone(),
        };
        let watch = Watch {
            device: 0,
            health: Arc::new(Health::default()),
            fault: None,
        };
        let (thread, ()) =
            OwnerThread::spawn("owner-gather", |_| 1, watch, move || Ok((owner, ()))).unwrap();
        let waker = thread.waker();
        let start = Instant::now();
        let mut wakes = 0;
        while start.elapsed() < GATHER {
            waker.wake();
            wakes += 1;
            std::thread::yield_now();
        }
        let passes = inputs_taken.load(Ordering::SeqCst);
        let most = (GATHER.as_millis() / GATHER_POLL.as_millis()) as usize * 2 + 10;
        assert!(
            passes <= most,
            "{passes} passes over the input for {wakes} wake-ups in {GATHER:?} (at most {most})"
        );
    }

    #[test]
    fn a_coalesced_wake_up_still_wakes_an_idle_thread_every_time() {
        let s = start(2);
        let waker = s.thread.waker();
        for round in 1..=20 {
            let before = s.inputs_taken.load(Ordering::SeqCst);
            waker.wake();
            waker.wake();
            wait_for(&format!("input taken in round {round}"), || {
                s.inputs_taken.load(Ordering::SeqCst) > before
            });
            // The thread sleeps again once nothing is queued.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
