//! The semantic stage: many songs, one frame program per step, songs joining and leaving at any
//! frame.
//!
//! Each song owns a state slot (its last LM hidden, both rows) and two block tables (one per CFG
//! row) over one shared KV pool. Admission reserves the song's worst case (prompt + max frames + 1
//! positions, both rows), so a running song never waits for blocks; blocks are taken as positions
//! grow and returned when the song ends. Every active song runs in every step, padded up to a
//! bucket with the dummy slot and the null block. A song that joins while others run is
//! prefilled in chunks inside their frames (`chorus_lm::chunk`); one that joins an idle stage is
//! prefilled whole at once.

use chorus_core::lm_ops::DrawMode;
use chorus_core::{Buckets, BufRole, Error, LmOps, Result};
use chorus_lm::kv::{blocks_for, DEFAULT_BLOCK_SIZE};
use chorus_lm::{layer_caches_of, CacheDims, KvCache, LayerCache, Pipeline, Seat, Seats};

use crate::config::{DepthConfig, Qwen3Config, MAX_AUDIO_FRAMES};
use crate::device::DeviceWeights;
use crate::frame::{FrameBufs, Models};
use crate::io::{FrameInputs, FrameOutputs};
use chorus_lm::{ChunkInputs, PREFILL_CHUNK};

mod step;
mod trace;

use crate::load::MusicModel;
use crate::prefill::{prefill_program, PrefillBufs, PrefillCall};
use crate::prompt::MAX_PROMPT_TOKENS;
use crate::song::{SongId, SongRequest, LEVELS};
pub use trace::FrameTrace;

/// Sizes fixed at construction.
#[derive(Clone, Debug)]
pub struct StageOptions {
    /// Songs at once; at most the largest bucket.
    pub max_songs: usize,
    pub buckets: Buckets,
    /// KV blocks in the pool, the null block included.
    pub kv_blocks: usize,
    pub block_size: usize,
    /// Longest prompt per row.
    pub max_prompt: usize,
    /// Longest song in positions per row (prompt + frames + 1).
    pub max_context: usize,
    /// Prompt tokens per row a frame prefills for a song joining running ones (at most
    /// `max_context`); 0: every prompt is prefilled whole when its song is admitted.
    pub prefill_chunk: usize,
    /// How the LM's KV cache stores its values (the depth decoder's per-frame cache stays in
    /// the storage type).
    pub kv_cache: KvCache,
}

impl StageOptions {
    /// `max_songs` songs of up to `max_context` positions each, all reservable at once.
    pub fn for_songs(max_songs: usize, max_context: usize) -> Result<Self> {
        let buckets = Buckets::up_to(max_songs)?;
        Ok(Self {
            max_songs,
            buckets,
            kv_blocks: 1 + 2 * max_songs * blocks_for(max_context, DEFAULT_BLOCK_SIZE),
            block_size: DEFAULT_BLOCK_SIZE,
            max_prompt: MAX_PROMPT_TOKENS.min(max_context),
            max_context,
            prefill_chunk: PREFILL_CHUNK.min(max_context),
            kv_cache: KvCache::Native,
        })
    }
}

/// Longest context a song can need: the longest prompt, the frame cap, and the last feedback.
pub const MAX_CONTEXT: usize = MAX_PROMPT_TOKENS + MAX_AUDIO_FRAMES + 1;

struct Song {
    id: SongId,
    /// State slot and the block tables of the conditional and unconditional rows.
    seat: Seat,
    prompt_len: usize,
    /// Loop frames run so far (frame 0 is fed back, not emitted).
    frame: usize,
    emitted: usize,
    max_frames: usize,
    mode: DrawMode,
    seed: u64,
    allow_end: bool,
    forced: Option<Vec<[u32; LEVELS]>>,
    /// The prompt while it is prefilled in chunks; `None` once the song runs frames.
    joining: Option<Joining>,
}

/// A joining song's prompt and how much of it is prefilled.
struct Joining {
    prompt: crate::prompt::PromptIds,
    done: usize,
}

/// One half of a bucket's step I/O (chorus-lm's [`Pipeline`] keeps two per bucket).
struct Half<B: LmOps> {
    inputs: FrameInputs<B>,
    outputs: FrameOutputs<B>,
    /// A prompt chunk's inputs (when the stage prefills in chunks).
    chunk: Option<ChunkInputs<B>>,
}

/// What the host needs to read a launched frame: its songs in row order, with the loop frame
/// each ran.
type Launched = Vec<(SongId, usize)>;

/// The stage over backend `B`.
pub struct SemanticStage<B: LmOps> {
    be: B,
    lm: Qwen3Config,
    depth: DepthConfig,
    w: DeviceWeights<B>,
    lm_caches: Vec<LayerCache<B>>,
    /// `[max_songs + 1, 2 * hidden]`; the last row is the dummy slot.
    hidden_state: B::Buf,
    bufs: FrameBufs<B>,
    /// Per bucket two halves of step I/O, and the frame in flight.
    pipe: Pipeline<B, Half<B>, Launched>,
    prefill: PrefillBufs<B>,
    /// Song slots and the KV pool.
    seats: Seats,
    songs: Vec<Song>,
    next_id: SongId,
    opts: StageOptions,
    max_blocks: usize,
    /// The last launched frame (for traces): songs in row order, bucket, half.
    last: (Vec<SongId>, usize, usize),
    /// Indices into `songs` of the songs the next frame runs (kept to avoid a per-step allocation).
    launch: Vec<usize>,
}

impl<B: LmOps> SemanticStage<B> {
    /// Uploads `model` and allocates every buffer a step or a prefill will touch.
    pub fn new(be: B, model: &MusicModel, opts: StageOptions) -> Result<Self> {
        const OP: &str = "SemanticStage::new";
        if opts.max_songs == 0 || opts.max_songs > opts.buckets.largest() {
            return Err(Error::config(
                OP,
                format!(
                    "max_songs {} must be 1..={} (the largest bucket)",
                    opts.max_songs,
                    opts.buckets.largest()
                ),
            ));
        }
        if opts.max_context > MAX_CONTEXT
            || opts.max_prompt > MAX_CONTEXT
            || opts.max_prompt < 3
            || opts.block_size == 0
            || opts.prefill_chunk > opts.max_context
        {
            return Err(Error::config(OP, format!("max_context {} (<= {MAX_CONTEXT}), max_prompt {} (3..={MAX_CONTEXT}), block_size {}, prefill_chunk {} (<= max_context) out of range", opts.max_context, opts.max_prompt, opts.block_size, opts.prefill_chunk)));
        }
        let (lm, depth) = (model.lm_config.clone(), model.depth_config.clone());
        let max_blocks = blocks_for(opts.max_context, opts.block_size);
        let w = DeviceWeights::upload(&be, model)?;
        let dims = CacheDims {
            layers: lm.num_hidden_layers,
            blocks: opts.kv_blocks,
            block_size: opts.block_size,
            kv_heads: lm.num_key_value_heads,
            head_dim: lm.head_dim,
        };
        let lm_caches = layer_caches_of(&be, dims, opts.kv_cache)?;
        let largest = opts.buckets.largest();
        let models = Models {
            lm: &lm,
            depth: &depth,
            w: &w,
        };
        let chunk = opts.prefill_chunk;
        let bufs = FrameBufs::new(&be, &models, largest, chunk)?;
        let pipe = Pipeline::new(&be, &opts.buckets, |songs| {
            Ok(Half {
                inputs: FrameInputs::new(&be, songs, max_blocks, LEVELS)?,
                outputs: FrameOutputs::new(&be, songs, LEVELS, lm.hidden_size)?,
                chunk: (chunk > 0)
                    .then(|| ChunkInputs::new(&be, (chunk, 2, 1), max_blocks))
                    .transpose()?,
            })
        })?;
        let prefill = PrefillBufs::new(&be, &models, opts.max_prompt, max_blocks)?;
        Ok(Self {
            hidden_state: be.zeros((opts.max_songs + 1) * 2 * lm.hidden_size, BufRole::State)?,
            seats: Seats::new(
                opts.max_songs,
                2,
                opts.kv_blocks,
                opts.block_size,
                opts.max_context,
            )?,
            be,
            lm,
            depth,
            w,
            lm_caches,
            bufs,
            pipe,
            prefill,
            songs: Vec::new(),
            next_id: 0,
            opts,
            max_blocks,
            last: (Vec::new(), 0, 0),
            launch: Vec::new(),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.be
    }

    /// The LM's configuration.
    pub fn lm_config(&self) -> &Qwen3Config {
        &self.lm
    }

    /// Songs admitted and not yet ended (a song whose last frame is in flight still counts, and
    /// so does a song whose prompt is still being prefilled).
    pub fn active(&self) -> usize {
        self.songs.len()
    }

    /// Songs whose prompt is still being prefilled in chunks.
    pub fn joining(&self) -> usize {
        self.songs.iter().filter(|s| s.joining.is_some()).count()
    }

    /// KV blocks `(in use, available to new songs, usable in all)`.
    pub fn kv_blocks(&self) -> (usize, usize, usize) {
        self.seats.kv_blocks()
    }

    /// Positions per row a song of `prompt_len` and `max_frames` may write.
    fn positions(prompt_len: usize, max_frames: usize) -> usize {
        prompt_len + max_frames + 1
    }

    /// Admits a song; on any error nothing changes. An idle stage prefills its prompt at once;
    /// beside running songs it is prefilled in chunks within their next frames, and the song's
    /// first frame follows its last chunk.
    pub fn add_song(&mut self, req: SongRequest) -> Result<SongId> {
        let chunked = self.opts.prefill_chunk > 0 && !self.songs.is_empty();
        self.admit(req, chunked)
    }

    /// Admits a song and prefills its whole prompt at once, whatever runs (the running songs'
    /// next frame waits for it); on any error nothing changes.
    pub fn add_song_prefilled(&mut self, req: SongRequest) -> Result<SongId> {
        self.admit(req, false)
    }

    fn admit(&mut self, req: SongRequest, chunked: bool) -> Result<SongId> {
        const OP: &str = "SemanticStage::add_song";
        req.validate(self.depth.audio_vocab_size)?;
        let p = req.prompt.len();
        if req.prompt.uncond.len() != p {
            return Err(Error::input(
                OP,
                format!(
                    "the unconditional prompt row has {} tokens, the conditional row {p}: both rows must have the same length",
                    req.prompt.uncond.len()
                ),
            ));
        }
        if p < 3 || p > self.opts.max_prompt {
            return Err(Error::input(
                OP,
                format!(
                    "prompt of {p} tokens is outside 3..={}",
                    self.opts.max_prompt
                ),
            ));
        }
        let vocab = self.lm.vocab_size;
        if let Some(&bad) = req
            .prompt
            .cond
            .iter()
            .chain(&req.prompt.uncond)
            .find(|&&t| t as usize >= vocab)
        {
            return Err(Error::input(
                OP,
                format!("prompt token {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        let positions = Self::positions(p, req.max_frames);
        if positions > self.opts.max_context {
            return Err(Error::input(OP, format!("prompt {p} + {} frames + 1 = {positions} positions exceed the stage's max context {}", req.max_frames, self.opts.max_context)));
        }
        let mut seat = self.seats.admit(positions, "song")?;
        // Blocks for the prompt and for the first feedback position P (a short prompt's chunk
        // padding past them lands in the null block, which nothing real reads).
        self.seats.grow(&mut seat, p + 1);
        let (mode, seed) = req.sampling.device();
        let mut song = Song {
            id: self.next_id,
            seat,
            prompt_len: p,
            frame: 0,
            emitted: 0,
            max_frames: req.max_frames,
            mode,
            seed,
            allow_end: req.allow_end,
            forced: req.forced,
            joining: None,
        };
        if chunked {
            song.joining = Some(Joining {
                prompt: req.prompt,
                done: 0,
            });
        } else if let Err(e) = self.run_prefill(&song, &req.prompt) {
            self.finish(song);
            return Err(e);
        }
        self.next_id += 1;
        let id = song.id;
        self.songs.push(song);
        Ok(id)
    }

    fn run_prefill(&mut self, song: &Song, prompt: &crate::prompt::PromptIds) -> Result<()> {
        let p = prompt.len();
        let be = &self.be;
        let ids = self.prefill.ids.host(be)?;
        for (dst, &src) in ids.iter_mut().zip(prompt.cond.iter().chain(&prompt.uncond)) {
            *dst = src as i32;
        }
        self.seats
            .fill_tables(Some(&song.seat), self.prefill.tables.host(be)?);
        self.prefill.slot.host(be)?[0] = song.seat.slot as i32;
        let models = Models {
            lm: &self.lm,
            depth: &self.depth,
            w: &self.w,
        };
        let (bufs, lm_caches, hidden_state) = (
            &mut self.prefill,
            &mut self.lm_caches,
            &mut self.hidden_state,
        );
        let (block_size, max_blocks) = (self.opts.block_size, self.max_blocks);
        be.run_eager(&mut |be| {
            let call = PrefillCall {
                lm_caches: &mut *lm_caches,
                hidden_state: &mut *hidden_state,
                len: p,
                block_size,
                max_blocks,
            };
            prefill_program(be, &models, bufs, call)
        })
    }

    /// Returns a song's blocks and slot.
    fn finish(&mut self, song: Song) {
        self.seats.release(song.seat);
    }

    /// Cancels a song; its blocks return to the pool at once.
    pub fn cancel(&mut self, id: SongId) -> Result<usize> {
        let Some(i) = self.songs.iter().position(|s| s.id == id) else {
            return Err(Error::input(
                "SemanticStage::cancel",
                format!("no running song {id}"),
            ));
        };
        let song = self.songs.remove(i);
        let frames = song.emitted;
        self.finish(song);
        Ok(frames)
    }
}
