//! `chorus._chorus.MusicStage`: the music semantic stage behind an owner thread.
//!
//! Songs are added with their prompt ids, then each `step` runs one frame of every song on the
//! stage's thread and keeps the emitted codes and `frame_hiddens` (as bf16 bits, what the
//! acoustic stage consumes) beside the song until Python takes them. Python drives the loop, so
//! a progress callback and Ctrl-C are seen after every frame.

use std::collections::HashMap;
use std::path::PathBuf;

use chorus_core::{Error, Precision};
use chorus_music::prompt::{PromptIds, PromptTokenizer};
use chorus_music::song::{frames_for_seconds, LEVELS};
use chorus_music::stage::MAX_CONTEXT;
use chorus_music::{load_music_model, EndReason, Sampling, SongEvent, SongId, SongRequest};
use chorus_runtime::{AnyStage, DeviceKind, StageSpec};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::actor::Actor;
use crate::errors::IntoPy;

const OP: &str = "MusicStage";
/// Songs generated together by default.
const DEFAULT_MAX_SONGS: usize = 4;

/// One song's output so far.
struct Song {
    codes: Vec<i32>,
    hiddens: Vec<u16>,
    max_frames: usize,
    end: Option<EndReason>,
}

struct Core {
    stage: AnyStage,
    songs: HashMap<SongId, Song>,
}

/// What Python reads without a round trip.
struct Info {
    hidden: usize,
    vocab: usize,
    max_songs: usize,
    max_context: usize,
    describe: String,
    source: String,
    random: bool,
}

/// The music semantic stage of MiniMax Music 3.
#[pyclass(module = "chorus._chorus", name = "MusicStage", frozen)]
pub struct PyMusicStage {
    actor: Actor<Core>,
    tokenizer: Option<PromptTokenizer>,
    info: Info,
}

fn end_name(r: EndReason) -> &'static str {
    match r {
        EndReason::End => "end",
        EndReason::MaxFrames => "max_frames",
        EndReason::ForcedDone => "forced_done",
        EndReason::Cancelled => "cancelled",
    }
}

#[pymethods]
impl PyMusicStage {
    /// Loads `model` (a folder, `LM,DEPTH` files, a hub id, or `random`, `random-small`, ...)
    /// and builds a stage for `max_songs` songs of up to `max_context` positions each;
    /// `batch_invariant` (CUDA): a song's codes do not depend on the songs sharing its steps.
    #[new]
    #[pyo3(signature = (model, device="auto", precision=None, max_songs=DEFAULT_MAX_SONGS, max_context=None, threads=None, tokenizer=None, batch_invariant=false))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, mirrored one to one.
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        precision: Option<&str>,
        max_songs: usize,
        max_context: Option<usize>,
        threads: Option<usize>,
        tokenizer: Option<PathBuf>,
        batch_invariant: bool,
    ) -> PyResult<Self> {
        let spec = StageSpec {
            device: DeviceKind::parse(device).py_err()?,
            precision: precision.map(Precision::parse).transpose().py_err()?,
            songs: max_songs,
            max_context: max_context.unwrap_or(MAX_CONTEXT),
            threads,
            batch_invariant,
            prefill_chunk: None,
            kv_cache: Default::default(),
        };
        let name = model.to_owned();
        let (actor, info, tok_path) = py
            .detach(move || -> chorus_core::Result<_> {
                let model = load_music_model(&name)?;
                let tok_path = tokenizer.or_else(|| model.tokenizer.clone());
                let (hidden, vocab) = (model.lm_config.hidden_size, model.lm_config.vocab_size);
                let (source, random) = (model.source.clone(), model.random);
                let (max_songs, max_context) = (spec.songs, spec.max_context);
                let actor = Actor::spawn("chorus-music", move || {
                    Ok(Core {
                        stage: AnyStage::open(&model, &spec)?,
                        songs: HashMap::new(),
                    })
                })?;
                let describe = actor.call(|c: &mut Core| c.stage.describe())?;
                let info = Info {
                    hidden,
                    vocab,
                    max_songs,
                    max_context,
                    describe,
                    source,
                    random,
                };
                Ok((actor, info, tok_path))
            })
            .py_err()?;
        let tokenizer = tok_path
            .map(|p| PromptTokenizer::from_file(&p))
            .transpose()
            .py_err()?;
        Ok(Self {
            actor,
            tokenizer,
            info,
        })
    }

    /// The prompt ids `[2, P]` (conditional row, then the CFG row) of a caption and lyrics.
    fn encode_prompt<'py>(
        &self,
        py: Python<'py>,
        caption: &str,
        lyrics: &str,
    ) -> PyResult<Bound<'py, PyArray2<i64>>> {
        let Some(tok) = &self.tokenizer else {
            return Err(Error::input(
                OP,
                "no tokenizer: pass tokenizer=\"tokenizer.json\" (the model folder has none), or give prompt_ids",
            ))
            .py_err();
        };
        let ids = tok.encode(caption, lyrics, self.info.vocab).py_err()?;
        prompt_array(py, &ids)
    }

    /// Checks a song as [`Self::add_song`] would, without adding it: several songs of one call
    /// are all checked before the first starts.
    #[pyo3(signature = (prompt_ids, seconds, sampling="seeded"))]
    fn check_song(
        &self,
        prompt_ids: PyReadonlyArrayDyn<'_, i64>,
        seconds: f64,
        sampling: &str,
    ) -> PyResult<()> {
        let prompt = read_prompt(&prompt_ids, self.info.vocab).py_err()?;
        let frames = frames_for_seconds(seconds).py_err()?;
        Sampling::parse(sampling, 0).py_err()?;
        let need = prompt.len() + frames + 1;
        if need > self.info.max_context {
            return Err(Error::input(
                OP,
                format!(
                    "the song needs {need} positions (prompt {} + {frames} frames + 1) but the stage holds {} per song; open it with max_context >= {need}",
                    prompt.len(),
                    self.info.max_context
                ),
            ))
            .py_err();
        }
        Ok(())
    }

    /// Adds a song; `prompt_ids` is `[P]` (the CFG row is derived) or `[2, P]`. Returns its id.
    #[pyo3(signature = (prompt_ids, seconds, seed=0, sampling="seeded", allow_end=true))]
    fn add_song(
        &self,
        py: Python<'_>,
        prompt_ids: PyReadonlyArrayDyn<'_, i64>,
        seconds: f64,
        seed: u64,
        sampling: &str,
        allow_end: bool,
    ) -> PyResult<u64> {
        let prompt = read_prompt(&prompt_ids, self.info.vocab).py_err()?;
        let max_frames = frames_for_seconds(seconds).py_err()?;
        let req = SongRequest {
            prompt,
            max_frames,
            sampling: Sampling::parse(sampling, seed).py_err()?,
            allow_end,
            forced: None,
        };
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                let id = c.stage.add_song(req)?;
                c.songs.insert(
                    id,
                    Song {
                        codes: Vec::with_capacity(max_frames * LEVELS),
                        hiddens: Vec::new(),
                        max_frames,
                        end: None,
                    },
                );
                Ok(id)
            })
        })
        .py_err()?
        .py_err()
    }

    /// Runs one frame of every song; returns `[(id, frames so far, max frames, end or None)]`.
    #[allow(clippy::type_complexity)] // The tuple is what Python unpacks.
    fn step(&self, py: Python<'_>) -> PyResult<Vec<(u64, usize, usize, Option<&'static str>)>> {
        let hidden = self.info.hidden;
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                let songs = &mut c.songs;
                c.stage.step(&mut |ev| match ev {
                    SongEvent::Frame {
                        song,
                        codes,
                        hidden: h,
                        ..
                    } => {
                        if let Some(s) = songs.get_mut(&song) {
                            s.codes.extend(codes.iter().map(|&x| x as i32));
                            if s.hiddens.capacity() == 0 {
                                s.hiddens.reserve_exact(s.max_frames * LEVELS * hidden);
                            }
                            s.hiddens
                                .extend(h.iter().map(|&x| half::bf16::from_f32(x).to_bits()));
                        }
                    }
                    SongEvent::Ended { song, reason, .. } => {
                        if let Some(s) = songs.get_mut(&song) {
                            s.end = Some(reason);
                        }
                    }
                })?;
                let mut out: Vec<_> = songs
                    .iter()
                    .map(|(&id, s)| {
                        (
                            id,
                            s.codes.len() / LEVELS,
                            s.max_frames,
                            s.end.map(end_name),
                        )
                    })
                    .collect();
                out.sort_unstable_by_key(|e| e.0);
                Ok(out)
            })
        })
        .py_err()?
        .py_err()
    }

    /// Takes an ended song's output: codes int32 `[T, 8]`, `frame_hiddens` as bf16 bits uint16
    /// `[T, 8 * hidden]`, and why it ended.
    #[allow(clippy::type_complexity)] // The tuple is what Python unpacks.
    fn take<'py>(
        &self,
        py: Python<'py>,
        song: u64,
    ) -> PyResult<(
        Bound<'py, PyArray2<i32>>,
        Bound<'py, PyArray2<u16>>,
        &'static str,
    )> {
        let taken = py
            .detach(|| {
                self.actor
                    .call(move |c: &mut Core| match c.songs.get(&song) {
                        None => Err(Error::input(OP, format!("unknown song {song}"))),
                        Some(s) if s.end.is_none() => Err(Error::input(
                            OP,
                            format!(
                                "song {song} is still running: step until it ends, or cancel it"
                            ),
                        )),
                        Some(_) => Ok(c.songs.remove(&song)),
                    })
            })
            .py_err()?
            .py_err()?;
        let Some(s) = taken else {
            return Err(Error::input(OP, format!("unknown song {song}"))).py_err();
        };
        let frames = s.codes.len() / LEVELS;
        let width = LEVELS * self.info.hidden;
        let codes = PyArray1::from_vec(py, s.codes).reshape([frames, LEVELS])?;
        let hiddens = PyArray1::from_vec(py, s.hiddens).reshape([frames, width])?;
        Ok((codes, hiddens, s.end.map_or("running", end_name)))
    }

    /// Cancels a running song (its frames so far stay to be taken); its KV blocks return now.
    fn cancel(&self, py: Python<'_>, song: u64) -> PyResult<()> {
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                let Some(s) = c.songs.get_mut(&song) else {
                    return Err(Error::input(OP, format!("unknown song {song}")));
                };
                if s.end.is_none() {
                    c.stage.cancel(song)?;
                    s.end = Some(EndReason::Cancelled);
                }
                Ok(())
            })
        })
        .py_err()?
        .py_err()
    }

    /// Songs added and not yet ended.
    #[getter]
    fn active(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| {
            self.actor
                .call(|c: &mut Core| c.songs.values().filter(|s| s.end.is_none()).count())
        })
        .py_err()
    }
    #[getter]
    fn hidden_size(&self) -> usize {
        self.info.hidden
    }
    #[getter]
    fn levels(&self) -> usize {
        LEVELS
    }
    #[getter]
    fn vocab_size(&self) -> usize {
        self.info.vocab
    }
    #[getter]
    fn max_songs(&self) -> usize {
        self.info.max_songs
    }
    #[getter]
    fn max_context(&self) -> usize {
        self.info.max_context
    }
    #[getter]
    fn device(&self) -> &str {
        &self.info.describe
    }
    #[getter]
    fn source(&self) -> &str {
        &self.info.source
    }
    #[getter]
    fn is_random(&self) -> bool {
        self.info.random
    }
    #[getter]
    fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }
}

fn prompt_array<'py>(py: Python<'py>, ids: &PromptIds) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let p = ids.len();
    let flat: Vec<i64> = ids
        .cond
        .iter()
        .chain(&ids.uncond)
        .map(|&x| i64::from(x))
        .collect();
    PyArray1::from_vec(py, flat).reshape([2, p])
}

/// `[P]` or `[2, P]` ids, each in the vocabulary.
fn read_prompt(a: &PyReadonlyArrayDyn<'_, i64>, vocab: usize) -> chorus_core::Result<PromptIds> {
    let values: Vec<i64> = a.as_array().iter().copied().collect();
    if values.is_empty() {
        return Err(Error::input(OP, "prompt ids are empty"));
    }
    let ids = values
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            u32::try_from(x).map_err(|_| {
                Error::input(
                    OP,
                    format!("prompt id {x} at index {i} is negative or too large"),
                )
            })
        })
        .collect::<chorus_core::Result<Vec<u32>>>()?;
    match *a.shape() {
        [_] => PromptIds::from_cond(ids, vocab),
        [2, p] => PromptIds::from_pair(ids[..p].to_vec(), ids[p..].to_vec(), vocab),
        ref other => Err(Error::input(
            OP,
            format!("prompt ids have shape {other:?}; expected [P] or [2, P]"),
        )),
    }
}
