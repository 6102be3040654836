//! Pipelined steps: a step is queued with its own staging area and finished later, so the host
//! gathers and stages the next step's frames while the device runs this one.
//!
//! Each frame-by-frame bucket has two staging areas (and two graphs), used in turn; a step of
//! parity p only ever shares its area with the step two launches earlier, which
//! [`SlotDecoder::finish_frames`] has taken back before the area is written again. Device order
//! keeps the slots' state right: queued steps run one after another, as do resets.

use std::time::Instant;

use chorus_core::{Error, Frame, FrameInput, LmOps, Result, StepDone, FRAME_SAMPLES, NO_CODE};

use super::SlotDecoder;

/// Steps that may be queued at once: one running, one staged behind it.
pub const PIPELINE_DEPTH: usize = 2;

const OP_LAUNCH: &str = "SlotDecoder::launch_step";
const OP_FINISH: &str = "SlotDecoder::finish_step";

/// A queued step.
pub struct InFlight {
    parity: usize,
    area: usize,
    rows: usize,
    /// Host time of the launch: the program's run time on a backend that runs it there.
    host_seconds: f64,
}

impl<B: LmOps> SlotDecoder<B> {
    /// Synchronous steps would overwrite areas whose PCM a queued step has not handed back.
    pub(crate) fn refuse_while_queued(&self, op: &'static str) -> Result<()> {
        if self.inflight.is_empty() {
            return Ok(());
        }
        Err(Error::input(
            op,
            format!(
                "{} pipelined steps are queued: finish them first",
                self.inflight.len()
            ),
        ))
    }

    /// Writes `frames` and the padding rows into staging area `area` (which no queued step uses).
    pub(crate) fn write_frames(&mut self, area: usize, frames: &[Frame<'_>]) -> Result<()> {
        let (nq, dim) = (self.cfg.num_quantizers, self.cfg.hidden_size);
        {
            let v = self.be.staging_view_nowait(&mut self.staging[area])?;
            for (r, f) in frames.iter().enumerate() {
                v.slots[r] = f.slot as i32;
                let codes = &mut v.codes[r * nq..(r + 1) * nq];
                let latent = &mut v.latents[r * dim..(r + 1) * dim];
                match f.input {
                    FrameInput::Codes(c) => {
                        for (dst, &src) in codes.iter_mut().zip(c) {
                            *dst = src as i32;
                        }
                        codes[c.len()..].fill(NO_CODE);
                        latent.fill(0.0);
                    }
                    FrameInput::Latent(l) => {
                        codes.fill(NO_CODE);
                        latent.copy_from_slice(l);
                    }
                }
            }
        }
        self.fill_padding_nowait(area, frames.len())
    }

    /// Validates `frames` and queues their step without waiting.
    pub(crate) fn launch_frames(&mut self, frames: &[Frame<'_>]) -> Result<()> {
        if self.inflight.len() >= PIPELINE_DEPTH {
            return Err(Error::input(
                OP_LAUNCH,
                format!("{PIPELINE_DEPTH} steps are already queued: finish one first"),
            ));
        }
        let n = frames.len();
        self.validate(frames, n * FRAME_SAMPLES)?;
        let parity = self.next_parity;
        let area = self.frame_area(self.bucket_for(n), parity);
        self.write_frames(area, frames)?;
        let started = Instant::now();
        self.run_area(area, Some(parity))?;
        self.inflight.push_back(InFlight {
            parity,
            area,
            rows: n,
            host_seconds: started.elapsed().as_secs_f64(),
        });
        self.next_parity = (parity + 1) % PIPELINE_DEPTH;
        Ok(())
    }

    /// Waits for the oldest queued step and copies its PCM to the front of `pcm`.
    pub(crate) fn finish_frames(&mut self, pcm: &mut [f32]) -> Result<StepDone> {
        let Some(rows) = self.inflight.front().map(|f| f.rows) else {
            return Err(Error::input(OP_FINISH, "no step is queued"));
        };
        let len = rows * FRAME_SAMPLES;
        if pcm.len() < len {
            // Refused before the step is taken off the queue: a larger buffer can still get it.
            return Err(Error::input(
                OP_FINISH,
                format!("pcm holds {} samples, the step has {len}", pcm.len()),
            ));
        }
        let Some(f) = self.inflight.pop_front() else {
            return Err(Error::input(OP_FINISH, "no step is queued"));
        };
        let (start, end) = &self.marks[f.parity];
        self.be.wait(end)?;
        let device_seconds = self
            .be
            .elapsed_ms(start, end)?
            .map_or(f.host_seconds, |ms| f64::from(ms) / 1e3);
        let v = self.be.staging_view_nowait(&mut self.staging[f.area])?;
        pcm[..len].copy_from_slice(&v.pcm[..len]);
        Ok(StepDone {
            rows: f.rows,
            device_seconds,
        })
    }
}
