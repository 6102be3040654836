//! The stream stage: many streams, one step program per step, streams joining and leaving at any
//! step.
//!
//! Each stream owns a state slot (its next text embedding) and one ring of KV entries, the
//! model's window long, reserved whole at admission over chorus-lm's `Seats` (a stream never
//! waits for memory, however long it runs). A stream's position 0 takes the initial tokens; its
//! position `p >= 1` takes the codes of frame `p - 1` and the token of position `p - 1`
//! (`KYUTAI_STT.md` §3.1), so the first frame a caller pushes is the input of position 1, and the
//! stage runs position 0 on its own when the stream is added. Every stream with an input queued
//! runs in every step, padded up to a bucket with the dummy slot and the null block (chorus-lm's
//! `Pipeline`). A stream's rows never mix with another's in any reduction on the CPU backend, so
//! its tokens do not depend on its company.

use std::collections::VecDeque;

use chorus_core::lm_ops::DrawMode;
use chorus_core::{Buckets, BufRole, Error, LmOps, Result};
use chorus_lm::{layer_caches_of, CacheDims, KvCache, LayerCache, Pipeline, Sampling, Seat, Seats};

use crate::config::{SttConfig, FRAME_RATE};
use crate::device::DeviceWeights;
use crate::frame::initial_audio_row;
use crate::frame::{DrawSettings, InitialRow, StepBufs, KYUTAI_DRAWS};
use crate::io::{AudioIo, StepInputs, StepOutputs};
use crate::load::SttModel;
use crate::mimi::MimiEncode;
use crate::words::{WordAssembler, WordEvent};

mod pcm;
mod step;

/// A stream's id, unique for the stage's life.
pub type StreamId = u64;

/// The longest stream by default: one hour of frames (the RoPE table's positions).
pub const DEFAULT_MAX_FRAMES: usize = 45_000;

/// Sizes fixed at construction.
#[derive(Clone, Debug)]
pub struct SttOptions {
    /// Streams at once; at most the largest bucket.
    pub max_streams: usize,
    pub buckets: Buckets,
    /// Most frames one stream may push (its positions are one more).
    pub max_frames: usize,
    pub draws: DrawSettings,
    /// Copy each step's text logits out (for traces and tests; 4000 floats per stream-step).
    pub keep_logits: bool,
    /// Mimi codebooks the LM reads, the first N (moshi's `audio_codebooks`; Unmute runs the 1B
    /// with 20): the others are skipped, as moshi-server builds its LM with N audio embeddings
    /// and its Mimi with N codebooks, so the encoder stops its RVQ after N levels. `None`: all of
    /// the model's.
    pub audio_codebooks: Option<usize>,
    /// How the rings store keys and values: the backend's own type, or 8-bit floats with a
    /// scale per head vector (half the memory per stream, so twice the streams).
    pub kv_cache: KvCache,
}

impl SttOptions {
    /// `n` streams of up to [`DEFAULT_MAX_FRAMES`] frames.
    pub fn for_streams(n: usize) -> Result<Self> {
        let buckets = Buckets::up_to(n)?;
        Ok(Self {
            max_streams: n,
            buckets,
            max_frames: DEFAULT_MAX_FRAMES,
            draws: KYUTAI_DRAWS,
            keep_logits: false,
            audio_codebooks: None,
            kv_cache: KvCache::Native,
        })
    }
}

/// What a stream asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamRequest {
    pub sampling: Sampling,
    /// Teacher forcing: position `p`'s token is `forced[p]` while there are entries.
    pub forced: Option<Vec<u32>>,
}

impl Default for StreamRequest {
    fn default() -> Self {
        Self {
            sampling: Sampling::Greedy,
            forced: None,
        }
    }
}

/// What a step hands its sink, in stream order.
#[derive(Debug)]
pub enum StreamEvent<'a> {
    /// Position `position`'s text token, with the class-0 probability of each VAD head (the
    /// 1B's pause horizons 0.5, 1, 2, 3 s) and the text logits when the stage keeps them.
    Token {
        stream: StreamId,
        position: usize,
        token: u32,
        vad: Option<&'a [f32]>,
        logits: Option<&'a [f32]>,
        /// The `num_quantizers` codes the in-frame encoder found in this position's frame (a
        /// PCM stage, positions from 1), `NO_CODE` past the codebooks the model reads.
        codes: Option<&'a [i32]>,
    },
    /// A word or a word's end (`words.rs`).
    Word { stream: StreamId, event: WordEvent },
    /// The stream ended (after [`SttStage::end`] and its last input) and left the stage.
    Ended { stream: StreamId, positions: usize },
}

struct Stream {
    id: StreamId,
    /// Resets so far: outputs launched before the last one are discarded.
    epoch: u32,
    seat: Seat,
    /// Positions launched so far.
    position: usize,
    /// Inputs not yet launched, one frame each.
    queue: VecDeque<Input>,
    /// Samples pushed that do not fill a frame yet (a PCM stage).
    tail: Vec<f32>,
    ended: bool,
    words: WordAssembler,
    mode: DrawMode,
    seed: u64,
    forced: Option<Vec<u32>>,
}

/// Index of stream `id` in `streams` (sorted by id: see [`SttStage::index_of`]).
fn stream_index(streams: &[Stream], id: StreamId) -> Option<usize> {
    streams.binary_search_by_key(&id, |s| s.id).ok()
}

/// One position's input.
enum Input {
    /// The codes of the previous frame (or the initial codes at position 0).
    Codes(Vec<u32>),
    /// The previous frame's samples, encoded in the step (a PCM stage).
    Pcm(Vec<f32>),
}

/// One half of a bucket's step I/O.
struct Half<B: LmOps> {
    inputs: StepInputs<B>,
    outputs: StepOutputs<B>,
    audio: Option<AudioIo<B>>,
}

/// The in-frame encoder of a PCM stage and the table its step reads.
struct Encoder<B: LmOps> {
    mimi: MimiEncode<B>,
    /// `[largest bucket + 1, hidden]`: each row's audio embedding, then the initial codes'.
    table: B::Buf,
}

/// The streams of a launched step in row order, with the position and epoch each ran.
type Launched = Vec<(StreamId, usize, u32)>;

/// The stage over backend `B`.
pub struct SttStage<B: LmOps> {
    be: B,
    c: SttConfig,
    w: DeviceWeights<B>,
    caches: Vec<LayerCache<B>>,
    /// `[max_streams + 1, hidden]`; the last row is the dummy slot.
    text_state: B::Buf,
    bufs: StepBufs<B>,
    pipe: Pipeline<B, Half<B>, Launched>,
    /// The text-state row a reset slot starts from.
    initial_row: InitialRow<B>,
    seats: Seats,
    streams: Vec<Stream>,
    next_id: StreamId,
    opts: SttOptions,
    /// Indices into `streams` of the next step's streams.
    launch: Vec<usize>,
    /// PCM in: Mimi's encoder inside the step.
    encoder: Option<Encoder<B>>,
    /// Codebooks the LM reads (`SttOptions::audio_codebooks`).
    books: usize,
}

impl<B: LmOps> SttStage<B> {
    /// Uploads `model` and allocates every buffer a step will touch; streams push Mimi codes.
    pub fn new(be: B, model: &SttModel, opts: SttOptions) -> Result<Self> {
        Self::build(be, model, None, opts)
    }

    /// Like [`SttStage::new`], with `mimi`'s encoder inside the step: streams push 24 kHz mono
    /// PCM ([`SttStage::push_pcm`]).
    pub fn with_encoder(
        be: B,
        model: &SttModel,
        mimi: &chorus_mimi::checkpoint::LoadedModel,
        opts: SttOptions,
    ) -> Result<Self> {
        Self::build(be, model, Some(mimi), opts)
    }

    fn build(
        be: B,
        model: &SttModel,
        mimi: Option<&chorus_mimi::checkpoint::LoadedModel>,
        opts: SttOptions,
    ) -> Result<Self> {
        const OP: &str = "SttStage::new";
        let c = model.config.clone();
        c.validate()?;
        if opts.max_streams == 0 || opts.max_streams > opts.buckets.largest() {
            return Err(Error::config(
                OP,
                format!(
                    "max_streams {} must be 1..={} (the largest bucket)",
                    opts.max_streams,
                    opts.buckets.largest()
                ),
            ));
        }
        let books = opts.audio_codebooks.unwrap_or(c.num_codebooks);
        if !(1..=c.num_codebooks).contains(&books) {
            return Err(Error::config(
                OP,
                format!(
                    "audio_codebooks {books} must be 1..={} (the model's codebooks)",
                    c.num_codebooks
                ),
            ));
        }
        if opts.max_frames == 0 {
            return Err(Error::config(OP, "max_frames must be positive"));
        }
        if !(opts.draws.temperature.is_finite() && opts.draws.temperature > 0.0)
            || opts.draws.top_k == 0
        {
            return Err(Error::config(
                OP,
                format!(
                    "draws {:?}: the temperature must be positive and top_k at least 1",
                    opts.draws
                ),
            ));
        }
        // One block per stream: its ring, exactly the window long.
        let block_size = c.sliding_window;
        let seats = Seats::new(
            opts.max_streams,
            1,
            opts.max_streams + 1,
            block_size,
            block_size,
        )?;
        let max_blocks = seats.max_blocks();
        let w = DeviceWeights::upload(&be, model, opts.max_frames + 1)?;
        let dims = CacheDims {
            layers: c.num_hidden_layers,
            blocks: opts.max_streams + 1,
            block_size,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        };
        let caches = layer_caches_of(&be, dims, opts.kv_cache)?;
        let largest = opts.buckets.largest();
        let bufs = StepBufs::new(&be, &c, largest)?;
        let vad_width = c.extra_heads * c.extra_head_dim;
        let logits = opts.keep_logits.then_some(c.text_vocab);
        let encoder = match mimi {
            Some(m) => {
                let card = c.ids.initial_audio as usize;
                let mimi = MimiEncode::new(&be, m, (books, card), opts.max_streams, largest)?;
                let mut table = be.zeros((largest + 1) * c.hidden_size, BufRole::State)?;
                initial_audio_row(&be, &w, &c, books, (&mut table, largest))?;
                Some(Encoder { mimi, table })
            }
            None => None,
        };
        let pipe = Pipeline::new(&be, &opts.buckets, |n| {
            let audio = match &encoder {
                Some(e) => Some(AudioIo {
                    staging: e.mimi.staging(&be, n)?,
                    select: chorus_lm::IntInput::new(&be, n)?,
                    codes: be.pinned_ints(n * e.mimi.cfg.num_quantizers)?,
                }),
                None => None,
            };
            Ok(Half {
                inputs: StepInputs::new(&be, n, max_blocks, books)?,
                outputs: StepOutputs::new(&be, n, vad_width, logits)?,
                audio,
            })
        })?;
        Ok(Self {
            encoder,
            text_state: be.zeros((opts.max_streams + 1) * c.hidden_size, BufRole::State)?,
            initial_row: InitialRow::new(&be, &w, &c)?,
            be,
            c,
            w,
            caches,
            bufs,
            pipe,
            seats,
            streams: Vec::new(),
            next_id: 0,
            opts,
            launch: Vec::new(),
            books,
        })
    }

    pub fn backend(&self) -> &B {
        &self.be
    }

    pub fn config(&self) -> &SttConfig {
        &self.c
    }

    /// Mimi codebooks the LM reads (the first N).
    pub fn audio_codebooks(&self) -> usize {
        self.books
    }

    /// Bucket sizes and the program key of each (half 0), for device timing.
    pub fn bucket_keys(&self) -> Vec<(usize, usize)> {
        self.pipe.keys()
    }

    /// Whether streams push PCM (built [`SttStage::with_encoder`]) rather than Mimi codes.
    pub fn encodes_pcm(&self) -> bool {
        self.encoder.is_some()
    }

    /// Streams admitted and not yet ended.
    pub fn active(&self) -> usize {
        self.streams.len()
    }

    /// Silence frames a caller appends before [`SttStage::end`] so that the last words come out
    /// (the text delay plus one second, as transformers' feature extractor pads).
    pub fn flush_frames(&self) -> usize {
        self.c.text_delay_frames + FRAME_RATE.ceil() as usize
    }

    /// Admits a stream; its position 0 (the initial tokens) is queued at once. On any error
    /// nothing changes.
    pub fn add(&mut self, req: StreamRequest) -> Result<StreamId> {
        const OP: &str = "SttStage::add";
        if let Some(f) = &req.forced {
            if let Some((p, &t)) = f
                .iter()
                .enumerate()
                .find(|(_, &t)| t as usize >= self.c.text_vocab)
            {
                return Err(Error::input(
                    OP,
                    format!(
                        "forced token {t} at position {p} is outside the {} pieces",
                        self.c.text_vocab
                    ),
                ));
            }
        }
        let window = self.c.sliding_window;
        let mut seat = self.seats.admit(window, "stream")?;
        self.seats.grow(&mut seat, window);
        let (mode, seed) = req.sampling.device();
        let initial = vec![self.c.ids.initial_audio; self.books];
        let id = self.next_id;
        self.next_id += 1;
        self.streams.push(Stream {
            id,
            epoch: 0,
            seat,
            position: 0,
            queue: VecDeque::from([Input::Codes(initial)]),
            tail: Vec::new(),
            ended: false,
            words: WordAssembler::new(&self.c),
            mode,
            seed,
            forced: req.forced,
        });
        Ok(id)
    }

    /// Index of stream `id` in `streams`: ids are handed out in increasing order and streams
    /// leave without reordering the rest, so `streams` is sorted by id (a linear search per
    /// lookup made each round of 2,500 streams' input quadratic).
    pub(super) fn index_of(&self, id: StreamId) -> Option<usize> {
        stream_index(&self.streams, id)
    }

    fn find(&mut self, id: StreamId, op: &'static str) -> Result<&mut Stream> {
        match self.index_of(id) {
            Some(i) => Ok(&mut self.streams[i]),
            None => Err(Error::input(op, format!("no running stream {id}"))),
        }
    }

    /// Queues one frame of Mimi codes (the stage's `audio_codebooks` codes, each below 2048) for
    /// stream `id`.
    /// A bad frame is refused with nothing queued.
    pub fn push_frame(&mut self, id: StreamId, codes: &[u32]) -> Result<()> {
        const OP: &str = "SttStage::push_frame";
        let (books, card) = (self.books, self.c.ids.initial_audio);
        let max_frames = self.opts.max_frames;
        if codes.len() != books {
            return Err(Error::input(
                OP,
                format!("a frame has {books} codes, got {}", codes.len()),
            ));
        }
        if let Some((k, &v)) = codes.iter().enumerate().find(|(_, &v)| v >= card) {
            return Err(Error::input(
                OP,
                format!("code {v} of codebook {k} is outside Mimi's {card} codes"),
            ));
        }
        if self.encoder.is_some() {
            return Err(Error::input(
                OP,
                "this stage encodes PCM in its step: push samples with push_pcm",
            ));
        }
        let s = self.find(id, OP)?;
        s.room(id, max_frames, 1, OP)?;
        s.queue.push_back(Input::Codes(codes.to_vec()));
        Ok(())
    }

    /// Marks stream `id` as complete: once its queued frames have run, its last words are closed
    /// and it ends. Callers that want the words of the last frames push
    /// [`SttStage::flush_frames`] frames of silence first.
    pub fn end(&mut self, id: StreamId) -> Result<()> {
        let s = self.find(id, "SttStage::end")?;
        s.ended = true;
        // The last partial frame of a PCM stream, completed with silence.
        if !s.tail.is_empty() {
            let mut frame = std::mem::take(&mut s.tail);
            frame.resize(chorus_core::FRAME_SAMPLES, 0.0);
            s.queue.push_back(Input::Pcm(frame));
        }
        Ok(())
    }

    /// Restarts stream `id` from position 0 on its slot and ring (its state reset, its queued
    /// frames and words dropped, the output of a step in flight discarded); it keeps its id and
    /// sampling, and its forced tokens start over.
    pub fn reset(&mut self, id: StreamId) -> Result<()> {
        const OP: &str = "SttStage::reset";
        let initial = vec![self.c.ids.initial_audio; self.books];
        let words = WordAssembler::new(&self.c);
        let s = self.find(id, OP)?;
        s.epoch += 1;
        s.position = 0;
        s.queue = VecDeque::from([Input::Codes(initial)]);
        s.tail.clear();
        s.ended = false;
        s.words = words;
        Ok(())
    }

    /// Drops a stream at once; its slot and ring return to the stage. Returns its positions.
    pub fn cancel(&mut self, id: StreamId) -> Result<usize> {
        let Some(i) = self.index_of(id) else {
            return Err(Error::input(
                "SttStage::cancel",
                format!("no running stream {id}"),
            ));
        };
        let s = self.streams.remove(i);
        self.seats.release(s.seat);
        Ok(s.position)
    }
}
