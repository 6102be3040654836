//! The speech stage: many utterances, one frame program per step, utterances joining and leaving
//! at any frame.
//!
//! Each utterance owns a state slot (its last backbone hidden) and one block table over the
//! shared KV pool (chorus-lm's `Seats`). Admission reserves its worst case (prompt + max frames
//! positions), so a running utterance never waits for blocks; blocks are taken as positions grow
//! and returned when it ends. Every active utterance runs in every step, padded up to a bucket
//! with the dummy slot and the null block (chorus-lm's `Pipeline`). An utterance's rows never mix
//! with another's in any reduction on the CPU backend, so its codes do not depend on its company.
//! One that joins while others run is prefilled in chunks inside their frames
//! (`chorus_lm::chunk`), so they do not stall for its whole prompt; one that joins an idle stage
//! is prefilled whole at once.

use chorus_core::lm_ops::DrawMode;
use chorus_core::{Buckets, BufRole, Error, LmOps, Result};
use chorus_lm::kv::{blocks_for, DEFAULT_BLOCK_SIZE};
use chorus_lm::{layer_caches, ChunkInputs, LayerCache, Pipeline, Seat, Seats, PREFILL_CHUNK};

use crate::config::CsmConfig;
use crate::device::DeviceWeights;
use crate::frame::{DrawSettings, FrameBufs, Model, UPSTREAM_DRAWS};
use crate::io::{FrameInputs, FrameOutputs};
use crate::load::CsmModel;
use crate::mimi::MimiStep;
use crate::prefill::{prefill_program, prompt_rows, PrefillBufs, PrefillCall};
use crate::prompt::PromptFrame;
use crate::utterance::{UtteranceId, UtteranceRequest};
use chorus_mimi::checkpoint::LoadedModel;

mod step;
mod trace;

pub use trace::FrameTrace;

/// Sizes fixed at construction.
#[derive(Clone, Debug)]
pub struct TtsOptions {
    /// Utterances at once; at most the largest bucket.
    pub max_utterances: usize,
    pub buckets: Buckets,
    /// KV blocks in the pool, the null block included.
    pub kv_blocks: usize,
    pub block_size: usize,
    /// Longest prompt in frames.
    pub max_prompt: usize,
    /// Most backbone positions an utterance may use (prompt + frames).
    pub max_context: usize,
    pub draws: DrawSettings,
    /// Prompt frames a frame prefills for an utterance joining running ones (at most
    /// `max_context`); 0: every prompt is prefilled whole when its utterance is admitted.
    pub prefill_chunk: usize,
}

impl TtsOptions {
    /// `n` utterances of up to `max_context` positions each, all reservable at once, with
    /// upstream's draws.
    pub fn for_utterances(n: usize, max_context: usize) -> Result<Self> {
        let buckets = Buckets::up_to(n)?;
        Ok(Self {
            max_utterances: n,
            buckets,
            kv_blocks: 1 + n * blocks_for(max_context, DEFAULT_BLOCK_SIZE),
            block_size: DEFAULT_BLOCK_SIZE,
            max_prompt: max_context,
            max_context,
            draws: UPSTREAM_DRAWS,
            prefill_chunk: PREFILL_CHUNK.min(max_context),
        })
    }
}

struct Utterance {
    id: UtteranceId,
    seat: Seat,
    prompt_len: usize,
    /// Frames launched so far.
    frame: usize,
    emitted: usize,
    max_frames: usize,
    mode: DrawMode,
    seed: u64,
    /// The draw op's `row_sampling` words (temperature bits, top-k).
    sampling: [i32; 2],
    forced: Option<Vec<Vec<u32>>>,
    /// The prompt while it is prefilled in chunks; `None` once the utterance runs frames.
    joining: Option<Joining>,
}

/// A joining utterance's prompt and how many of its frames are prefilled.
struct Joining {
    prompt: Vec<PromptFrame>,
    done: usize,
}

/// One half of a bucket's step I/O (the pipeline keeps two per bucket).
struct Half<B: LmOps> {
    inputs: FrameInputs<B>,
    outputs: FrameOutputs<B>,
    /// A prompt chunk's inputs (when the stage prefills in chunks).
    chunk: Option<ChunkInputs<B>>,
}

/// The utterances of a launched frame in row order, with the frame each ran.
type Launched = Vec<(UtteranceId, usize)>;

/// The stage over backend `B`.
pub struct TtsStage<B: LmOps> {
    be: B,
    c: CsmConfig,
    w: DeviceWeights<B>,
    caches: Vec<LayerCache<B>>,
    /// `[max_utterances + 1, backbone_hidden]`; the last row is the dummy slot.
    hidden_state: B::Buf,
    bufs: FrameBufs<B>,
    pipe: Pipeline<B, Half<B>, Launched>,
    prefill: PrefillBufs<B>,
    seats: Seats,
    /// The in-frame Mimi decoder (`None`: the stage emits codes only).
    mimi: Option<MimiStep<B>>,
    utts: Vec<Utterance>,
    next_id: UtteranceId,
    opts: TtsOptions,
    /// The last launched frame (for traces): utterances in row order, bucket, half.
    last: (Vec<UtteranceId>, usize, usize),
    /// Indices into `utts` of the next frame's utterances (kept to avoid a per-step allocation).
    launch: Vec<usize>,
}

impl<B: LmOps> TtsStage<B> {
    /// Uploads `model` (and `mimi`, the codec whose decoder turns each frame's codes into audio
    /// in the same program; `None` emits codes only) and allocates every buffer a step or a
    /// prefill will touch.
    pub fn new(
        be: B,
        model: &CsmModel,
        mimi: Option<&LoadedModel>,
        opts: TtsOptions,
    ) -> Result<Self> {
        const OP: &str = "TtsStage::new";
        let c = model.config.clone();
        let positions = c.backbone.max_position_embeddings;
        if opts.max_utterances == 0 || opts.max_utterances > opts.buckets.largest() {
            return Err(Error::config(
                OP,
                format!(
                    "max_utterances {} must be 1..={} (the largest bucket)",
                    opts.max_utterances,
                    opts.buckets.largest()
                ),
            ));
        }
        if opts.max_context > positions
            || opts.max_prompt == 0
            || opts.max_prompt > opts.max_context
            || opts.prefill_chunk > opts.max_context
        {
            return Err(Error::config(OP, format!("max_context {} must be <= the backbone's {positions} positions, max_prompt {} in 1..=max_context and prefill_chunk {} <= max_context", opts.max_context, opts.max_prompt, opts.prefill_chunk)));
        }
        // The default draws, as any request's.
        opts.draws.validate(OP)?;
        let seats = Seats::new(
            opts.max_utterances,
            1,
            opts.kv_blocks,
            opts.block_size,
            opts.max_context,
        )?;
        let max_blocks = seats.max_blocks();
        let w = DeviceWeights::upload(&be, model)?;
        let b = &c.backbone;
        let caches = layer_caches(
            &be,
            b.num_hidden_layers,
            opts.kv_blocks,
            opts.block_size,
            b.kv_width(),
        )?;
        let chunk = opts.prefill_chunk;
        let bufs = FrameBufs::new(&be, &c, opts.buckets.largest(), chunk)?;
        let books = c.num_codebooks;
        let largest = opts.buckets.largest();
        let mimi = mimi
            .map(|m| MimiStep::new(&be, m, books, opts.max_utterances, largest))
            .transpose()?;
        let decodes = mimi.is_some();
        let pipe = Pipeline::new(&be, &opts.buckets, |n| {
            Ok(Half {
                inputs: FrameInputs::new(&be, n, max_blocks, books)?,
                outputs: FrameOutputs::new(&be, n, books, decodes)?,
                // One row per utterance, each position a text id and the codes.
                chunk: (chunk > 0)
                    .then(|| ChunkInputs::new(&be, (chunk, 1, 1 + books), max_blocks))
                    .transpose()?,
            })
        })?;
        let prefill = PrefillBufs::new(&be, &c, opts.max_prompt, max_blocks)?;
        Ok(Self {
            hidden_state: be.zeros((opts.max_utterances + 1) * b.hidden_size, BufRole::State)?,
            be,
            c,
            w,
            caches,
            bufs,
            pipe,
            prefill,
            seats,
            mimi,
            utts: Vec::new(),
            next_id: 0,
            opts,
            last: (Vec::new(), 0, 0),
            launch: Vec::new(),
        })
    }

    pub fn backend(&self) -> &B {
        &self.be
    }

    pub fn config(&self) -> &CsmConfig {
        &self.c
    }

    /// True when every frame ends in its audio.
    pub fn decodes_audio(&self) -> bool {
        self.mimi.is_some()
    }

    /// Utterances admitted and not yet ended (one whose prompt is still prefilled counts).
    pub fn active(&self) -> usize {
        self.utts.len()
    }

    /// Utterances whose prompt is still being prefilled in chunks.
    pub fn joining(&self) -> usize {
        self.utts.iter().filter(|u| u.joining.is_some()).count()
    }

    /// KV blocks `(in use, available to new utterances, usable in all)`.
    pub fn kv_blocks(&self) -> (usize, usize, usize) {
        self.seats.kv_blocks()
    }

    /// Bucket sizes and the program key of each (half 0), for device timing.
    pub fn bucket_keys(&self) -> Vec<(usize, usize)> {
        self.pipe.keys()
    }

    /// Admits an utterance; on any error nothing changes. An idle stage prefills its prompt at
    /// once; beside running utterances it is prefilled in chunks within their next frames, and
    /// its first frame follows its last chunk.
    pub fn add(&mut self, req: UtteranceRequest) -> Result<UtteranceId> {
        let chunked = self.opts.prefill_chunk > 0 && !self.utts.is_empty();
        self.admit(req, chunked)
    }

    /// Admits an utterance and prefills its whole prompt at once, whatever runs (the running
    /// utterances' next frame waits for it); on any error nothing changes.
    pub fn add_prefilled(&mut self, req: UtteranceRequest) -> Result<UtteranceId> {
        self.admit(req, false)
    }

    fn admit(&mut self, req: UtteranceRequest, chunked: bool) -> Result<UtteranceId> {
        const OP: &str = "TtsStage::add";
        req.validate(&self.c)?;
        let p = req.prompt.len();
        if p > self.opts.max_prompt {
            return Err(Error::input(
                OP,
                format!(
                    "prompt of {p} frames exceeds the stage's {}",
                    self.opts.max_prompt
                ),
            ));
        }
        let positions = p + req.max_frames;
        if positions > self.opts.max_context {
            return Err(Error::input(OP, format!("prompt {p} + {} frames = {positions} positions exceed the stage's max context {}", req.max_frames, self.opts.max_context)));
        }
        let mut seat = self.seats.admit(positions, "utterance")?;
        // The prompt's blocks and the first frame's feedback position P (a short prompt's chunk
        // padding past them lands in the null block, which nothing real reads).
        self.seats.grow(&mut seat, p + 1);
        let (mode, seed) = req.sampling.device();
        let (mode, sampling) = req.draws.unwrap_or(self.opts.draws).row(mode);
        let mut utt = Utterance {
            id: self.next_id,
            seat,
            prompt_len: p,
            frame: 0,
            emitted: 0,
            max_frames: req.max_frames,
            mode,
            seed,
            sampling,
            forced: req.forced,
            joining: None,
        };
        if chunked {
            utt.joining = Some(Joining {
                prompt: req.prompt,
                done: 0,
            });
        } else if let Err(e) = self.run_prefill(&utt, &req.prompt) {
            self.seats.release(utt.seat);
            return Err(e);
        }
        // The slot's codec state starts from silence (queued after any frame still using it; a
        // joining utterance's chunks never touch it, as Mimi runs the frame's rows only).
        if let Some(m) = &mut self.mimi {
            if let Err(e) = m.reset(&self.be, utt.seat.slot) {
                self.seats.release(utt.seat);
                return Err(e);
            }
        }
        self.next_id += 1;
        let id = utt.id;
        self.utts.push(utt);
        Ok(id)
    }

    fn run_prefill(
        &mut self,
        utt: &Utterance,
        prompt: &[crate::prompt::PromptFrame],
    ) -> Result<()> {
        let be = &self.be;
        let books = self.c.num_codebooks;
        let p = prompt.len();
        prompt_rows(
            prompt,
            books,
            &mut self.prefill.ids.host(be)?[..p * (1 + books)],
        );
        self.seats
            .fill_tables(Some(&utt.seat), self.prefill.tables.host(be)?);
        self.prefill.slot.host(be)?[0] = utt.seat.slot as i32;
        let model = Model {
            c: &self.c,
            w: &self.w,
            draws: self.opts.draws,
        };
        let (bufs, caches, hidden_state) =
            (&mut self.prefill, &mut self.caches, &mut self.hidden_state);
        let (block_size, max_blocks) = (self.opts.block_size, self.seats.max_blocks());
        be.run_eager(&mut |be| {
            let call = PrefillCall {
                caches: &mut *caches,
                hidden_state: &mut *hidden_state,
                len: p,
                block_size,
                max_blocks,
            };
            prefill_program(be, &model, bufs, call)
        })
    }

    /// Cancels an utterance; its blocks return to the pool at once. Returns its emitted frames.
    pub fn cancel(&mut self, id: UtteranceId) -> Result<usize> {
        let Some(i) = self.utts.iter().position(|u| u.id == id) else {
            return Err(Error::input(
                "TtsStage::cancel",
                format!("no running utterance {id}"),
            ));
        };
        let utt = self.utts.remove(i);
        let frames = utt.emitted;
        self.seats.release(utt.seat);
        Ok(frames)
    }
}
