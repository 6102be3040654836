//! What a step hands out: each frame's PCM to its stream, or the reason its stream ends.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::{Error, FRAME_MS};

use crate::error::StreamError;
use crate::pcm::{PcmFrame, PcmPool};
use crate::sched::{FrameData, Shared};
use crate::stream::Outbox;

/// One frame picked for the next step.
pub(crate) struct Picked {
    pub slot: usize,
    pub id: u64,
    pub index: u64,
    pub data: FrameData,
    pub arrived: Instant,
    /// See `Pending::Frame`: the deadline is one frame period after it.
    pub due: Instant,
    pub outbox: Arc<Outbox>,
}

/// A stream the engine ends: its slot is released before it is told, so that a client that
/// reconnects at once finds the slot free.
pub(crate) struct Dropped {
    pub slot: usize,
    pub id: u64,
    pub outbox: Arc<Outbox>,
    pub err: StreamError,
}

/// Hands row `i` of the step's PCM to the stream of `picked[i]`, for every picked frame (each
/// shares the step's block: no copy). One thread: spreading it over a pool measured slower on the
/// H200 host (the wake-ups contend).
pub(crate) fn deliver_all(
    shared: &Shared,
    picked: &[Picked],
    pcm: &PcmPool,
    dropped: &mut Vec<Dropped>,
) {
    if pcm.copying() {
        shared
            .metrics
            .pcm_copied_frames
            .fetch_add(picked.len() as u64, Ordering::Relaxed);
    }
    for (i, p) in picked.iter().enumerate() {
        deliver(shared, p, pcm.frame(i), dropped);
    }
}

/// Hands decoded `samples` to the stream of `p`; a reader too far behind is cut off.
pub(crate) fn deliver(shared: &Shared, p: &Picked, samples: PcmFrame, dropped: &mut Vec<Dropped>) {
    let metrics = &shared.metrics;
    let latency = p.arrived.elapsed();
    metrics.frame_latency_seconds.observe(latency.as_secs_f64());
    if p.due.elapsed() > Duration::from_millis(FRAME_MS) {
        metrics.deadline_misses.fetch_add(1, Ordering::Relaxed);
    }
    metrics.frames_decoded.fetch_add(1, Ordering::Relaxed);
    if !p.outbox.push_pcm(p.index, samples) {
        dropped.push(Dropped {
            slot: p.slot,
            id: p.id,
            outbox: p.outbox.clone(),
            err: StreamError::SlowConsumer {
                limit: shared.config.max_undelivered_frames,
            },
        });
    }
}

/// Ends the stream of `p` because its frame could not be decoded.
pub(crate) fn fail(p: &Picked, e: &Error, dropped: &mut Vec<Dropped>) {
    dropped.push(Dropped {
        slot: p.slot,
        id: p.id,
        outbox: p.outbox.clone(),
        err: StreamError::DecodeFailed(e.to_string()),
    });
}

/// Whether `FrameDecoder::step` refused with this error before changing any slot's state.
pub(crate) fn leaves_state_unchanged(e: &Error) -> bool {
    matches!(
        e,
        Error::Input { .. }
            | Error::CodeOutOfRange { .. }
            | Error::UnknownSlot { .. }
            | Error::BatchTooLarge { .. }
            | Error::Shape { .. }
    )
}
