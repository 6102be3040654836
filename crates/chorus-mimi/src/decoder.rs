//! The slot decoder: `max_slots` independent streams, one program run per step.

use crate::prepare::{prepare, PreparedWeights};
use crate::program::{forward, Activations, StepBuffers, StepShape};
use crate::state::SlotState;
use crate::MimiConfig;
use std::collections::VecDeque;

mod pipeline;
use chorus_core::{
    validate_chunk, Buckets, Error, Frame, FrameDecoder, FrameInput, LmOps, Result, StagingDims,
    StateBytes, StepDone, FRAME_SAMPLES, KV_RING, NO_CODE,
};
use pipeline::{InFlight, PIPELINE_DEPTH};

/// How many streams and which buckets.
#[derive(Clone, Debug)]
pub struct DecoderOptions {
    pub max_slots: usize,
    /// Bucket sizes; those above `max_slots` are dropped and `max_slots` becomes the largest.
    pub buckets: Buckets,
    /// Frames per slot of a [`FrameDecoder::step_chunk`] step (1: frame by frame only). Above 1,
    /// each bucket gets a second program over that many frames, and activations and KV rings
    /// grow to hold them.
    pub chunk_frames: usize,
}

/// KV ring entries so that a step of `tokens` new tokens never overwrites a key its own
/// queries still see: the window plus the step's tokens, less one, rounded up to a multiple of 32.
pub fn ring_for(window: usize, tokens: usize) -> usize {
    (window + tokens - 1).max(KV_RING).div_ceil(32) * 32
}

/// Decodes frames for up to `max_slots` streams, each with its own state row.
pub struct SlotDecoder<B: LmOps> {
    be: B,
    cfg: MimiConfig,
    weights: PreparedWeights<B>,
    state: SlotState<B>,
    acts: Activations<B>,
    buckets: Buckets,
    /// Staging areas: each bucket's frame-by-frame area, then (with chunks) each chunk bucket's,
    /// then each bucket's second frame-by-frame area for pipelined steps. One program (and on
    /// CUDA one graph) per area: its key is the area's index.
    pub(crate) staging: Vec<B::Staging>,
    /// `(rows, frames per row)` of each staging area.
    shapes: Vec<(usize, usize)>,
    chunk_frames: usize,
    /// Pipelined steps queued and not yet finished, oldest first.
    pub(crate) inflight: VecDeque<InFlight>,
    /// Start and end markers of the pipelined step of each parity.
    pub(crate) marks: [(B::Mark, B::Mark); PIPELINE_DEPTH],
    pub(crate) next_parity: usize,
    max_slots: usize,
    state_bytes: StateBytes,
    /// Step-stamped marks that detect a repeated slot without allocating.
    seen: Vec<u64>,
    stamp: u64,
}

const OP_NEW: &str = "SlotDecoder::new";
const OP_STEP: &str = "SlotDecoder::step";
const OP_CHUNK: &str = "SlotDecoder::step_chunk";

impl<B: LmOps> SlotDecoder<B> {
    /// Uploads the weights, allocates state, activations and staging for every bucket.
    pub fn from_weights(
        be: B,
        cfg: &MimiConfig,
        weights: &crate::MimiWeights,
        opts: DecoderOptions,
    ) -> Result<Self> {
        cfg.validate()?;
        if opts.max_slots == 0 {
            return Err(Error::config(OP_NEW, "max_slots must be at least 1"));
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
        let prepared = prepare(&be, cfg, weights)?;
        let ring = ring_for(cfg.sliding_window, cfg.frame_tokens() * chunk);
        let mut state = SlotState::new(&be, cfg, &prepared, opts.max_slots, ring)?;
        let state_bytes = state.bytes_per_slot(&be);
        let acts = Activations::new(&be, cfg, &prepared, buckets.largest() * chunk)?;
        let frame_counts: &[usize] = if chunk > 1 { &[1, chunk, 1] } else { &[1, 1] };
        let shapes: Vec<(usize, usize)> = frame_counts
            .iter()
            .flat_map(|&k| buckets.sizes().iter().map(move |&rows| (rows, k)))
            .collect();
        let staging = shapes
            .iter()
            .map(|&(rows, k)| {
                be.staging(StagingDims {
                    rows,
                    codebooks: cfg.num_quantizers * k,
                    latent_dim: cfg.hidden_size * k,
                    samples: FRAME_SAMPLES * k,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let marks = [
            (be.timing_mark()?, be.timing_mark()?),
            (be.timing_mark()?, be.timing_mark()?),
        ];
        Ok(Self {
            be,
            cfg: cfg.clone(),
            weights: prepared,
            state,
            acts,
            buckets,
            staging,
            shapes,
            chunk_frames: chunk,
            inflight: VecDeque::with_capacity(PIPELINE_DEPTH),
            marks,
            next_parity: 0,
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

    /// The model configuration.
    pub fn config(&self) -> &MimiConfig {
        &self.cfg
    }

    /// Runs every bucket once on padding only, so that CUDA captures each graph before serving.
    pub fn warmup(&mut self) -> Result<()> {
        self.refuse_while_queued("SlotDecoder::warmup")?;
        for i in 0..self.staging.len() {
            self.fill_padding(i, 0)?;
            self.run_bucket(i)?;
        }
        Ok(())
    }

    /// Runs bucket `index` once more with the staging as it is (benchmarks).
    pub fn replay_bucket(&mut self, index: usize) -> Result<()> {
        self.refuse_while_queued("SlotDecoder::replay_bucket")?;
        self.run_bucket(index)
    }

    /// Decodes one frame of codes `[slots.len(), n_q]` (row-major) for each slot.
    pub fn step_codes(&mut self, slots: &[usize], codes: &[u32], n_q: usize) -> Result<Vec<f32>> {
        if n_q == 0 || codes.len() != slots.len() * n_q {
            return Err(Error::input(
                OP_STEP,
                format!(
                    "codes hold {} values, expected [{}, n_q >= 1] (n_q = {n_q})",
                    codes.len(),
                    slots.len()
                ),
            ));
        }
        let frames: Vec<Frame<'_>> = slots
            .iter()
            .zip(codes.chunks(n_q))
            .map(|(&slot, c)| Frame {
                slot,
                input: FrameInput::Codes(c),
            })
            .collect();
        let mut pcm = vec![0.0; slots.len() * FRAME_SAMPLES];
        self.step(&frames, &mut pcm)?;
        Ok(pcm)
    }

    /// Decodes one latent frame `[slots.len(), hidden]` for each slot.
    pub fn step_latents(&mut self, slots: &[usize], latents: &[f32]) -> Result<Vec<f32>> {
        let dim = self.cfg.hidden_size;
        if latents.len() != slots.len() * dim {
            return Err(Error::input(
                OP_STEP,
                format!(
                    "latents hold {} values, expected [{}, {dim}]",
                    latents.len(),
                    slots.len()
                ),
            ));
        }
        let frames: Vec<Frame<'_>> = slots
            .iter()
            .zip(latents.chunks(dim))
            .map(|(&slot, l)| Frame {
                slot,
                input: FrameInput::Latent(l),
            })
            .collect();
        let mut pcm = vec![0.0; slots.len() * FRAME_SAMPLES];
        self.step(&frames, &mut pcm)?;
        Ok(pcm)
    }

    pub(crate) fn validate(&mut self, frames: &[Frame<'_>], pcm_len: usize) -> Result<()> {
        if frames.is_empty() {
            return Err(Error::input(OP_STEP, "a step needs at least one frame"));
        }
        if pcm_len != frames.len() * FRAME_SAMPLES {
            return Err(Error::input(
                OP_STEP,
                format!(
                    "pcm buffer holds {pcm_len} samples, expected {} x {FRAME_SAMPLES}",
                    frames.len()
                ),
            ));
        }
        self.buckets.pick(frames.len())?;
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
            match f.input {
                FrameInput::Codes(c) => {
                    if c.is_empty() || c.len() > self.cfg.num_quantizers {
                        return Err(Error::input(
                            OP_STEP,
                            format!(
                                "row {row}: {} codebooks, expected 1..={}",
                                c.len(),
                                self.cfg.num_quantizers
                            ),
                        ));
                    }
                    if let Some((q, &code)) = c
                        .iter()
                        .enumerate()
                        .find(|(_, &v)| v as usize >= self.cfg.codebook_size)
                    {
                        return Err(Error::CodeOutOfRange {
                            op: OP_STEP,
                            row,
                            codebook: q,
                            code: code as i64,
                            cardinality: self.cfg.codebook_size,
                        });
                    }
                }
                FrameInput::Latent(l) => {
                    if l.len() != self.cfg.hidden_size {
                        return Err(Error::input(
                            OP_STEP,
                            format!(
                                "row {row}: latent of {} values, expected {}",
                                l.len(),
                                self.cfg.hidden_size
                            ),
                        ));
                    }
                    if let Some(i) = l.iter().position(|v| !v.is_finite()) {
                        return Err(Error::input(
                            OP_STEP,
                            format!("row {row}: latent value {i} is not finite"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Rows and frames per row of staging (and program) `index`.
    fn program_shape(&self, index: usize) -> (usize, usize) {
        self.shapes[index]
    }

    /// The staging area of frame-by-frame bucket `bucket` for pipeline parity `parity`.
    pub(crate) fn frame_area(&self, bucket: usize, parity: usize) -> usize {
        match parity {
            0 => bucket,
            _ => self.shapes.len() - self.buckets.sizes().len() + bucket,
        }
    }

    /// The bucket index that fits `n` rows (validated by the caller).
    pub(crate) fn bucket_for(&self, n: usize) -> usize {
        // Callers checked `buckets.pick(n)`, so a bucket holds n rows.
        self.buckets
            .sizes()
            .iter()
            .position(|&b| b >= n)
            .unwrap_or(0)
    }

    /// Writes the padding rows `[from, rows)` of staging `index`.
    fn fill_padding(&mut self, index: usize, from: usize) -> Result<()> {
        // Waits for earlier steps: no queued step may be reading this area.
        self.be.staging_view(&mut self.staging[index])?;
        self.fill_padding_nowait(index, from)
    }

    /// [`Self::fill_padding`] for an area no queued step uses.
    pub(crate) fn fill_padding_nowait(&mut self, index: usize, from: usize) -> Result<()> {
        let (rows, k) = self.program_shape(index);
        let (nq, dim) = (self.cfg.num_quantizers * k, self.cfg.hidden_size * k);
        let dummy = self.max_slots as i32;
        let v = self.be.staging_view_nowait(&mut self.staging[index])?;
        v.slots[from..rows].fill(dummy);
        v.codes[from * nq..rows * nq].fill(NO_CODE);
        v.latents[from * dim..rows * dim].fill(0.0);
        Ok(())
    }

    pub(crate) fn run_bucket(&mut self, index: usize) -> Result<()> {
        self.run_area(index, None)
    }

    /// Runs the program of staging area `area` and waits (`parity: None`), or queues it between
    /// the markers of pipeline parity `parity`.
    pub(crate) fn run_area(&mut self, area: usize, parity: Option<usize>) -> Result<()> {
        let (rows, frames) = self.program_shape(area);
        let shape = StepShape {
            cfg: &self.cfg,
            rows,
            frames,
            dummy: self.max_slots,
        };
        let (weights, state, acts) = (&self.weights, &mut self.state, &mut self.acts);
        let staging = &mut self.staging[area];
        let mut program = |be: &B| {
            let bufs = StepBuffers {
                weights,
                state: &mut *state,
                acts: &mut *acts,
                staging: &mut *staging,
            };
            forward(be, &shape, bufs)
        };
        match parity {
            None => self.be.run(area, &mut program),
            Some(p) => {
                let (start, end) = &mut self.marks[p];
                self.be.record(start)?;
                self.be.launch(area, &mut program, end)
            }
        }
    }
}

impl<B: LmOps> FrameDecoder for SlotDecoder<B> {
    fn max_slots(&self) -> usize {
        self.max_slots
    }

    fn largest_batch(&self) -> usize {
        self.buckets.largest()
    }

    fn codebook_size(&self) -> usize {
        self.cfg.codebook_size
    }

    fn max_codebooks(&self) -> usize {
        self.cfg.num_quantizers
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

    fn step(&mut self, frames: &[Frame<'_>], pcm: &mut [f32]) -> Result<()> {
        self.refuse_while_queued(OP_STEP)?;
        self.validate(frames, pcm.len())?;
        let n = frames.len();
        let index = self.bucket_for(n);
        self.be.staging_view(&mut self.staging[index])?;
        self.write_frames(index, frames)?;
        self.run_bucket(index)?;
        let v = self.be.staging_view(&mut self.staging[index])?;
        pcm.copy_from_slice(&v.pcm[..n * FRAME_SAMPLES]);
        Ok(())
    }

    fn pipeline_depth(&self) -> usize {
        // launch_step works everywhere, but only a device queue gains from it.
        if self.be.queues_work() {
            PIPELINE_DEPTH
        } else {
            0
        }
    }

    fn launch_step(&mut self, frames: &[Frame<'_>]) -> Result<()> {
        self.launch_frames(frames)
    }

    fn finish_step(&mut self, pcm: &mut [f32]) -> Result<StepDone> {
        self.finish_frames(pcm)
    }

    fn chunk_frames(&self) -> usize {
        self.chunk_frames
    }

    fn step_chunk(
        &mut self,
        slots: &[usize],
        codes: &[u32],
        n_q: usize,
        pcm: &mut [f32],
    ) -> Result<()> {
        self.refuse_while_queued(OP_CHUNK)?;
        let k = self.chunk_frames;
        let (nq_max, n) = (self.cfg.num_quantizers, slots.len());
        if codes.len() != n * k * n_q || pcm.len() != n * k * FRAME_SAMPLES {
            return Err(Error::input(
                OP_CHUNK,
                format!(
                    "{} codes and {} samples for {n} slots x {k} frames x n_q {n_q}",
                    codes.len(),
                    pcm.len()
                ),
            ));
        }
        validate_chunk(
            self.max_slots,
            self.cfg.codebook_size,
            nq_max,
            slots,
            codes,
            n_q,
        )?;
        self.buckets.pick(n)?;
        let bucket = self.bucket_for(n);
        let index = if k > 1 {
            self.buckets.sizes().len() + bucket
        } else {
            bucket
        };
        {
            let v = self.be.staging_view(&mut self.staging[index])?;
            for (r, &slot) in slots.iter().enumerate() {
                v.slots[r] = slot as i32;
                for f in 0..k {
                    let dst = &mut v.codes[(r * k + f) * nq_max..(r * k + f + 1) * nq_max];
                    let src = &codes[(r * k + f) * n_q..(r * k + f + 1) * n_q];
                    for (d, &c) in dst.iter_mut().zip(src) {
                        *d = c as i32;
                    }
                    dst[n_q..].fill(NO_CODE);
                }
                let dim = self.cfg.hidden_size * k;
                v.latents[r * dim..(r + 1) * dim].fill(0.0);
            }
        }
        self.fill_padding(index, n)?;
        self.run_bucket(index)?;
        let v = self.be.staging_view(&mut self.staging[index])?;
        pcm.copy_from_slice(&v.pcm[..n * k * FRAME_SAMPLES]);
        Ok(())
    }

    fn reset(&mut self, slot: usize) -> Result<()> {
        if slot >= self.max_slots {
            return Err(Error::UnknownSlot {
                op: "SlotDecoder::reset",
                slot,
                max_slots: self.max_slots,
            });
        }
        self.state.reset_row(&self.be, slot)
    }
}
