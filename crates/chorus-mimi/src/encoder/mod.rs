//! The slot encoder: `max_slots` independent streams of 80 ms audio frames in, Mimi codes out,
//! one program run per step (one CUDA graph per bucket), exactly as transformers'
//! `MimiModel.encode` on the whole signal.

pub mod prepare;
pub mod program;
pub mod state;

use crate::MimiConfig;
use chorus_core::{
    validate_audio_chunk, AudioFrame, Backend, Buckets, ChunkDims, Error, FrameEncoder, Result,
    StagingDims, StateBytes, FRAME_SAMPLES, NO_CODE,
};
use prepare::{prepare_encoder, PreparedEncoder};
use program::{encode_forward, EncActivations, EncShape, EncStepBuffers};
use state::EncoderState;

/// How many streams and which buckets.
#[derive(Clone, Debug)]
pub struct EncoderOptions {
    pub max_slots: usize,
    /// Bucket sizes; those above `max_slots` are dropped and `max_slots` becomes the largest.
    pub buckets: Buckets,
    /// Frames per slot of a [`FrameEncoder::step_chunk`] step (1: frame by frame only). Above 1,
    /// each bucket gets a second program over that many frames, and activations and KV rings
    /// grow to hold them (whole files: hundreds of frames per step).
    pub chunk_frames: usize,
}

/// Code a staged request carries for a level to quantise (any value but `NO_CODE`).
pub const WANTED: i32 = 0;

const OP_NEW: &str = "SlotEncoder::new";
const OP_STEP: &str = "SlotEncoder::step";

/// Encodes frames for up to `max_slots` streams, each with its own state row.
pub struct SlotEncoder<B: Backend> {
    be: B,
    cfg: MimiConfig,
    weights: PreparedEncoder<B>,
    state: EncoderState<B>,
    acts: EncActivations<B>,
    buckets: Buckets,
    /// Staging areas (and program keys): each bucket's frame-by-frame area, then (with chunks)
    /// each bucket's chunk area.
    staging: Vec<B::Staging>,
    chunk_frames: usize,
    max_slots: usize,
    state_bytes: StateBytes,
    /// Step-stamped marks that detect a repeated slot without allocating.
    seen: Vec<u64>,
    stamp: u64,
}

impl<B: Backend> SlotEncoder<B> {
    /// Uploads the encoder weights and allocates state, activations and staging for every bucket.
    pub fn from_weights(
        be: B,
        cfg: &MimiConfig,
        weights: &crate::MimiWeights,
        opts: EncoderOptions,
    ) -> Result<Self> {
        cfg.validate()?;
        if opts.max_slots == 0 {
            return Err(Error::config(OP_NEW, "max_slots must be at least 1"));
        }
        if cfg.audio_channels != 1 {
            return Err(Error::config(
                OP_NEW,
                format!(
                    "{} audio channels: the encoder takes mono",
                    cfg.audio_channels
                ),
            ));
        }
        let buckets = if opts.buckets.largest() > opts.max_slots {
            opts.buckets.capped(opts.max_slots)?
        } else {
            opts.buckets.clone()
        };
        let chunk = opts.chunk_frames;
        if chunk == 0 {
            return Err(Error::config(OP_NEW, "chunk_frames must be at least 1"));
        }
        let prepared = prepare_encoder(&be, cfg, weights)?;
        let ring = super::decoder::ring_for(cfg.sliding_window, cfg.frame_tokens() * chunk);
        let mut state = EncoderState::new(&be, cfg, &prepared, opts.max_slots, ring)?;
        let state_bytes = state.bytes_per_slot(&be);
        let acts = EncActivations::new(&be, cfg, &prepared, buckets.largest() * chunk)?;
        let frame_counts: &[usize] = if chunk > 1 { &[1, chunk] } else { &[1] };
        let staging = frame_counts
            .iter()
            .flat_map(|&k| buckets.sizes().iter().map(move |&rows| (rows, k)))
            .map(|(rows, k)| {
                be.staging(StagingDims {
                    rows,
                    codebooks: cfg.num_quantizers * k,
                    latent_dim: cfg.hidden_size * k,
                    samples: FRAME_SAMPLES * k,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            be,
            cfg: cfg.clone(),
            weights: prepared,
            state,
            acts,
            buckets,
            staging,
            chunk_frames: chunk,
            max_slots: opts.max_slots,
            state_bytes,
            seen: vec![0; opts.max_slots],
            stamp: 0,
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.be
    }

    /// The buckets in use.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Runs every bucket once on padding only, so that CUDA captures each graph before serving.
    pub fn warmup(&mut self) -> Result<()> {
        for i in 0..self.staging.len() {
            self.write_padding(i, 0)?;
            self.run_bucket(i)?;
        }
        Ok(())
    }

    /// `(rows, frames per row)` of staging area `index`.
    fn shape(&self, index: usize) -> (usize, usize) {
        let sizes = self.buckets.sizes();
        let frames = if index >= sizes.len() {
            self.chunk_frames
        } else {
            1
        };
        (sizes[index % sizes.len()], frames)
    }

    /// Fills rows `n..` of staging area `index` with padding (the dummy slot, no levels).
    fn write_padding(&mut self, index: usize, n: usize) -> Result<()> {
        let (rows, k) = self.shape(index);
        let (nq, dummy) = (self.cfg.num_quantizers * k, self.max_slots as i32);
        let v = self.be.staging_view(&mut self.staging[index])?;
        v.slots[n..rows].fill(dummy);
        v.codes[n * nq..rows * nq].fill(NO_CODE);
        v.pcm[n * FRAME_SAMPLES * k..rows * FRAME_SAMPLES * k].fill(0.0);
        Ok(())
    }

    /// Runs bucket `index` once more with the staging as it is (benchmarks).
    pub fn replay_bucket(&mut self, index: usize) -> Result<()> {
        self.run_bucket(index)
    }

    fn validate(
        &mut self,
        frames: &[AudioFrame<'_>],
        codes: usize,
        latents: Option<usize>,
    ) -> Result<()> {
        let n = frames.len();
        if n == 0 {
            return Err(Error::input(OP_STEP, "a step needs at least one frame"));
        }
        let nq_max = self.cfg.num_quantizers;
        if codes != n * nq_max {
            return Err(Error::input(
                OP_STEP,
                format!("codes buffer holds {codes} values, expected {n} x {nq_max}"),
            ));
        }
        let dim = self.cfg.hidden_size;
        if let Some(len) = latents.filter(|&l| l != n * dim) {
            return Err(Error::input(
                OP_STEP,
                format!("latents buffer holds {len} values, expected {n} x {dim}"),
            ));
        }
        self.buckets.pick(n)?;
        self.stamp += 1;
        for (row, f) in frames.iter().enumerate() {
            if f.slot >= self.max_slots {
                return Err(Error::UnknownSlot {
                    op: OP_STEP,
                    slot: f.slot,
                    max_slots: self.max_slots,
                });
            }
            if std::mem::replace(&mut self.seen[f.slot], self.stamp) == self.stamp {
                return Err(Error::input(
                    OP_STEP,
                    format!("slot {} appears twice in one step", f.slot),
                ));
            }
            if f.n_q == 0 || f.n_q > nq_max {
                return Err(Error::input(
                    OP_STEP,
                    format!("row {row}: n_q {}, expected 1..={nq_max}", f.n_q),
                ));
            }
            if f.pcm.len() != FRAME_SAMPLES {
                return Err(Error::input(
                    OP_STEP,
                    format!(
                        "row {row}: {} samples, a frame is {FRAME_SAMPLES}",
                        f.pcm.len()
                    ),
                ));
            }
            if let Some(i) = f.pcm.iter().position(|v| !v.is_finite()) {
                return Err(Error::input(
                    OP_STEP,
                    format!("row {row}: sample {i} is not finite"),
                ));
            }
        }
        Ok(())
    }

    /// The bucket index that fits `n` rows (validated by the caller).
    fn bucket_for(&self, n: usize) -> usize {
        // Callers checked `buckets.pick(n)`, so a bucket holds n rows.
        self.buckets
            .sizes()
            .iter()
            .position(|&b| b >= n)
            .unwrap_or(0)
    }

    /// Writes `frames` and the padding rows (the dummy slot, no levels) into bucket `index`.
    fn write_frames(&mut self, index: usize, frames: &[AudioFrame<'_>]) -> Result<()> {
        let (nq, n) = (self.cfg.num_quantizers, frames.len());
        // Waits for the bucket's last step, so no replay still reads this area.
        let v = self.be.staging_view(&mut self.staging[index])?;
        for (r, f) in frames.iter().enumerate() {
            v.slots[r] = f.slot as i32;
            let row = &mut v.codes[r * nq..(r + 1) * nq];
            row[..f.n_q].fill(WANTED);
            row[f.n_q..].fill(NO_CODE);
            v.pcm[r * FRAME_SAMPLES..(r + 1) * FRAME_SAMPLES].copy_from_slice(f.pcm);
        }
        self.write_padding(index, n)
    }

    fn run_bucket(&mut self, index: usize) -> Result<()> {
        let (rows, frames) = self.shape(index);
        let shape = EncShape {
            cfg: &self.cfg,
            rows,
            frames,
            dummy: self.max_slots,
        };
        let (weights, state, acts) = (&self.weights, &mut self.state, &mut self.acts);
        let staging = &mut self.staging[index];
        let mut program = |be: &B| {
            let bufs = EncStepBuffers {
                weights,
                state: &mut *state,
                acts: &mut *acts,
                staging: &mut *staging,
            };
            encode_forward(be, &shape, bufs)
        };
        self.be.run(index, &mut program)
    }
}

impl<B: Backend> FrameEncoder for SlotEncoder<B> {
    fn max_slots(&self) -> usize {
        self.max_slots
    }

    fn largest_batch(&self) -> usize {
        self.buckets.largest()
    }

    fn max_codebooks(&self) -> usize {
        self.cfg.num_quantizers
    }

    fn codebook_size(&self) -> usize {
        self.cfg.codebook_size
    }

    fn latent_dim(&self) -> usize {
        self.cfg.hidden_size
    }

    fn state_bytes(&self) -> StateBytes {
        self.state_bytes
    }

    fn describe(&self) -> String {
        format!(
            "{} {} ({})",
            self.be.name(),
            self.be.precision().name(),
            self.be.device_description()
        )
    }

    fn step(
        &mut self,
        frames: &[AudioFrame<'_>],
        codes: &mut [u32],
        latents: Option<&mut [f32]>,
    ) -> Result<()> {
        self.validate(frames, codes.len(), latents.as_ref().map(|l| l.len()))?;
        let n = frames.len();
        let index = self.bucket_for(n);
        let nq = self.cfg.num_quantizers;
        self.write_frames(index, frames)?;
        self.run_bucket(index)?;
        let dim = self.cfg.hidden_size;
        // `run` waited for the replay: its codes and latents are in staging.
        let v = self.be.staging_view_nowait(&mut self.staging[index])?;
        for (r, f) in frames.iter().enumerate() {
            let out = &mut codes[r * nq..(r + 1) * nq];
            for (dst, &src) in out[..f.n_q].iter_mut().zip(&v.codes[r * nq..]) {
                *dst = src as u32;
            }
            out[f.n_q..].fill(0);
        }
        if let Some(l) = latents {
            l.copy_from_slice(&v.latents[..n * dim]);
        }
        Ok(())
    }

    fn chunk_frames(&self) -> usize {
        self.chunk_frames
    }

    fn step_chunk(
        &mut self,
        slots: &[usize],
        pcm: &[f32],
        n_q: usize,
        codes: &mut [u32],
        latents: Option<&mut [f32]>,
    ) -> Result<()> {
        let k = self.chunk_frames;
        let dims = ChunkDims {
            max_slots: self.max_slots,
            max_codebooks: self.cfg.num_quantizers,
            latent_dim: self.cfg.hidden_size,
            frames: k,
        };
        let out_lens = (codes.len(), latents.as_ref().map(|l| l.len()));
        validate_audio_chunk(&dims, (slots, pcm, n_q), out_lens)?;
        self.buckets.pick(slots.len())?;
        let sizes = self.buckets.sizes().len();
        let index = self.bucket_for(slots.len()) + if k > 1 { sizes } else { 0 };
        let nq = self.cfg.num_quantizers;
        {
            let v = self.be.staging_view(&mut self.staging[index])?;
            let len = k * FRAME_SAMPLES;
            for (r, &slot) in slots.iter().enumerate() {
                v.slots[r] = slot as i32;
                for f in 0..k {
                    let row = &mut v.codes[(r * k + f) * nq..(r * k + f + 1) * nq];
                    row[..n_q].fill(WANTED);
                    row[n_q..].fill(NO_CODE);
                }
                v.pcm[r * len..(r + 1) * len].copy_from_slice(&pcm[r * len..(r + 1) * len]);
            }
        }
        self.write_padding(index, slots.len())?;
        self.run_bucket(index)?;
        // `run` waited for the replay: its codes are in staging.
        let v = self.be.staging_view_nowait(&mut self.staging[index])?;
        for (dst, src) in codes.chunks_exact_mut(n_q).zip(v.codes.chunks_exact(nq)) {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = s as u32;
            }
        }
        if let Some(l) = latents {
            l.copy_from_slice(&v.latents[..l.len()]);
        }
        Ok(())
    }

    fn reset(&mut self, slot: usize) -> Result<()> {
        if slot >= self.max_slots {
            return Err(Error::UnknownSlot {
                op: "SlotEncoder::reset",
                slot,
                max_slots: self.max_slots,
            });
        }
        self.state.reset_row(&self.be, slot)
    }
}
