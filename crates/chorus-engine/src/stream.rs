//! A stream's handle: submit frames, resets and the end; receive PCM and events in order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chorus_core::FRAME_MS;

use tokio::sync::Notify;

use crate::error::StreamError;
use crate::metrics::ErrorCounts;
use crate::pcm::PcmFrame;
use crate::sched::{FrameData, Pending, Shared};

/// What a stream feeds the decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamInput {
    /// `n_q` codes per frame.
    Codes { n_q: usize },
    /// One latent vector per frame.
    Latents,
}

/// What a stream receives, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// Decoded PCM of frame `index` (counted from 0 since the stream opened, across resets).
    Pcm { index: u64, samples: PcmFrame },
    /// The reset asked for took effect: frame `next_frame` is the first decoded from zero state.
    ResetDone { next_frame: u64 },
    /// Every submitted frame was delivered and the slot is free. Terminal.
    Finished { frames: u64 },
    /// The stream was ended by the engine, after the PCM it had already decoded. Terminal.
    Failed(StreamError),
}

struct OutState {
    events: VecDeque<StreamEvent>,
    pcm_queued: usize,
    terminal: Option<StreamEvent>,
}

/// The engine-to-stream queue: bounded in PCM frames, woken through a [`Notify`].
pub(crate) struct Outbox {
    state: Mutex<OutState>,
    notify: Notify,
    limit: usize,
}

impl Outbox {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            state: Mutex::new(OutState {
                events: VecDeque::new(),
                pcm_queued: 0,
                terminal: None,
            }),
            notify: Notify::new(),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, OutState> {
        // Every update is a single push or pop, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues PCM; returns `false` (and queues nothing) when the reader is `limit` frames behind.
    pub(crate) fn push_pcm(&self, index: u64, samples: PcmFrame) -> bool {
        let mut st = self.lock();
        if st.terminal.is_some() {
            return true;
        }
        if st.pcm_queued >= self.limit {
            return false;
        }
        st.pcm_queued += 1;
        st.events.push_back(StreamEvent::Pcm { index, samples });
        drop(st);
        self.notify.notify_one();
        true
    }

    pub(crate) fn push_reset_done(&self, next_frame: u64) {
        let mut st = self.lock();
        if st.terminal.is_none() {
            st.events.push_back(StreamEvent::ResetDone { next_frame });
        }
        drop(st);
        self.notify.notify_one();
    }

    /// Ends the stream after everything already queued.
    pub(crate) fn finish(&self, frames: u64) {
        let mut st = self.lock();
        if st.terminal.is_none() {
            st.terminal = Some(StreamEvent::Finished { frames });
        }
        drop(st);
        self.notify.notify_one();
    }

    /// Ends the stream: the reader gets what was already decoded, then the reason (a stream
    /// already ended keeps its first reason).
    pub(crate) fn fail(&self, err: StreamError) {
        self.end_with(err, None);
    }

    /// Like [`Outbox::fail`], counting the error in `errors` when this call is what ends the
    /// stream, before the reader can see it.
    pub(crate) fn fail_counted(&self, err: StreamError, errors: &ErrorCounts) {
        self.end_with(err, Some(errors));
    }

    fn end_with(&self, err: StreamError, errors: Option<&ErrorCounts>) {
        let mut st = self.lock();
        if st.terminal.is_none() {
            if let Some(errors) = errors {
                errors.inc(err.code());
            }
            st.terminal = Some(StreamEvent::Failed(err));
        }
        drop(st);
        self.notify.notify_one();
    }

    fn failed(&self) -> bool {
        matches!(self.lock().terminal, Some(StreamEvent::Failed(_)))
    }

    fn try_recv(&self) -> Option<StreamEvent> {
        let mut st = self.lock();
        match st.events.pop_front() {
            Some(ev) => {
                if matches!(ev, StreamEvent::Pcm { .. }) {
                    st.pcm_queued -= 1;
                }
                Some(ev)
            }
            None => st.terminal.clone(),
        }
    }
}

/// A client's stream. Dropping it releases the slot at once, discarding queued frames.
pub struct Stream {
    pub(crate) id: u64,
    pub(crate) slot: usize,
    pub(crate) input: StreamInput,
    pub(crate) shared: Arc<Shared>,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) next_index: u64,
    /// When the last submitted frame became due (see [`crate::sched::Pending`]'s `due`).
    pub(crate) last_due: Option<Instant>,
    pub(crate) finished: bool,
}

impl Stream {
    /// Unique id of the stream (never reused while the engine lives).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The device whose engine decodes it (every later frame, reset and end goes there).
    pub fn device(&self) -> usize {
        self.shared.device
    }

    /// The slot it decodes in.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// What the stream was opened with.
    pub fn input(&self) -> StreamInput {
        self.input
    }

    /// Frames submitted so far (the index the next frame gets).
    pub fn frames_submitted(&self) -> u64 {
        self.next_index
    }

    /// Queues whole frames of codes (`codes.len()` a non-zero multiple of `n_q`), all or none.
    pub fn submit_codes(&mut self, codes: &[u32]) -> Result<(), StreamError> {
        let StreamInput::Codes { n_q } = self.input else {
            return Err(StreamError::InvalidFrame(
                "codes sent to a latent stream".into(),
            ));
        };
        if codes.is_empty() || !codes.len().is_multiple_of(n_q) {
            return Err(StreamError::InvalidFrame(format!(
                "{} codes is not a whole number of frames of n_q = {n_q}",
                codes.len()
            )));
        }
        let card = self.shared.info.codebook_size;
        if let Some(pos) = codes.iter().position(|&c| c as usize >= card) {
            return Err(StreamError::InvalidFrame(format!(
                "code {} (frame {}, codebook {}) is outside [0, {card})",
                codes[pos],
                pos / n_q,
                pos % n_q
            )));
        }
        let frames = codes
            .chunks_exact(n_q)
            .map(|c| FrameData::Codes(c.to_vec()));
        self.submit(frames)
    }

    /// Queues whole latent frames (`data.len()` a non-zero multiple of the latent size).
    pub fn submit_latents(&mut self, data: &[f32]) -> Result<(), StreamError> {
        let dim = self.shared.info.latent_dim;
        if self.input != StreamInput::Latents {
            return Err(StreamError::InvalidFrame(
                "latents sent to a codes stream".into(),
            ));
        }
        if data.is_empty() || !data.len().is_multiple_of(dim) {
            return Err(StreamError::InvalidFrame(format!(
                "{} values is not a whole number of latent frames of {dim}",
                data.len()
            )));
        }
        if data.iter().any(|v| !v.is_finite()) {
            return Err(StreamError::InvalidFrame(
                "latent holds NaN or infinity".into(),
            ));
        }
        let frames = data
            .chunks_exact(dim)
            .map(|c| FrameData::Latent(c.to_vec()));
        self.submit(frames)
    }

    fn submit(
        &mut self,
        frames: impl ExactSizeIterator<Item = FrameData>,
    ) -> Result<(), StreamError> {
        if self.finished {
            return Err(StreamError::Finished);
        }
        let arrived = Instant::now();
        let first = self.next_index;
        let count = frames.len() as u64;
        // A stream is owed real-time pace: each frame falls due at its arrival, or one frame
        // period after the one before it when it was sent ahead of real time (a burst, a whole
        // file), so that frames queued behind their own stream's are not counted late.
        let period = Duration::from_millis(FRAME_MS);
        let mut due = self.last_due;
        let items = frames.enumerate().map(|(i, data)| {
            let d = due.map_or(arrived, |prev| (prev + period).max(arrived));
            due = Some(d);
            Pending::Frame {
                index: first + i as u64,
                data,
                arrived,
                due: d,
            }
        });
        self.shared.push(self.slot, self.id, items)?;
        self.next_index += count;
        self.last_due = due;
        Ok(())
    }

    /// Queues a reset: frames submitted after it decode from the zero state.
    pub fn reset(&mut self) -> Result<(), StreamError> {
        if self.finished {
            return Err(StreamError::Finished);
        }
        let ack = Some(self.next_index);
        self.shared
            .push(self.slot, self.id, std::iter::once(Pending::Reset { ack }))
    }

    /// Ends the stream after every submitted frame: a [`StreamEvent::Finished`] follows the PCM.
    pub fn finish(&mut self) -> Result<(), StreamError> {
        if self.finished {
            return Err(StreamError::Finished);
        }
        let frames = self.next_index;
        // The end marker is allowed past the queue bound so that a full queue can still end.
        let mut s = self.shared.lock();
        match s.slots[self.slot].as_mut() {
            Some(o) if o.id == self.id => {
                o.queue.push_back(Pending::End { frames });
                o.counted += 1;
                if !o.in_ready {
                    o.in_ready = true;
                    s.ready.push_back((self.slot, self.id));
                }
            }
            _ => return Err(StreamError::Finished),
        }
        drop(s);
        self.shared.wake.notify_one();
        self.finished = true;
        Ok(())
    }

    /// The next event; after a terminal event, that event again.
    pub async fn recv(&self) -> StreamEvent {
        loop {
            if let Some(ev) = self.outbox.try_recv() {
                return ev;
            }
            // A notify_one with no waiter stores a permit, so a push between the check and this
            // await is not lost (this handle is the only consumer).
            self.outbox.notify.notified().await;
        }
    }

    /// Whether the engine has ended the stream (its [`StreamEvent::Failed`] may still be queued
    /// behind PCM).
    pub fn is_failed(&self) -> bool {
        self.outbox.failed()
    }

    /// The next event if one is ready.
    pub fn try_recv(&self) -> Option<StreamEvent> {
        self.outbox.try_recv()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.shared.release(self.slot, self.id);
    }
}
