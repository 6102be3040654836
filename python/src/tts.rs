//! `chorus._chorus.TtsStage`: the CSM speech stage behind an owner thread.
//!
//! Utterances are added with their text (or ready ids) and optional context turns (text plus
//! Mimi codes); each `step` runs one frame of every utterance on the stage's thread, with its
//! audio decoded by Mimi inside the frame, and keeps the codes and PCM beside the utterance until
//! Python takes them. `take_new` hands over the audio generated since the last call, so Python
//! can stream chunks as they arrive.

use std::collections::HashMap;
use std::path::PathBuf;

use chorus_core::{Error, Precision, FRAME_SAMPLES};
use chorus_csm::prompt::{build_prompt, build_prompt_ids, PromptFrame, PromptLimits, Segment};
use chorus_csm::{
    load_csm_model, CsmConfig, CsmTokenizer, DrawSettings, EndReason, TtsOptions, UtteranceEvent,
    UtteranceRequest,
};
use chorus_lm::Sampling;
use chorus_runtime::tts::{AnyTts, TtsSpec};
use chorus_runtime::DeviceKind;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::actor::Actor;
use crate::errors::IntoPy;

const OP: &str = "TtsStage";
/// Utterances generated together by default.
const DEFAULT_MAX_UTTERANCES: usize = 8;
/// Backbone positions per utterance by default (prompt + frames: csm-1b holds 2,048).
const DEFAULT_MAX_CONTEXT: usize = 2048;
/// Mimi frames per second of audio.
const FRAME_RATE: f64 = 12.5;

/// One utterance's output so far.
struct Utterance {
    codes: Vec<i32>,
    pcm: Vec<f32>,
    /// Samples already handed to Python by `take_new`.
    taken: usize,
    end: Option<&'static str>,
}

struct Core {
    stage: AnyTts,
    utts: HashMap<u64, Utterance>,
}

/// What Python reads without a round trip.
struct Info {
    config: CsmConfig,
    max_utterances: usize,
    max_context: usize,
    /// The stage's temperature and top-k, for utterances that set neither.
    draws: DrawSettings,
    describe: String,
    source: String,
    random: bool,
}

/// The CSM speech stage.
#[pyclass(module = "chorus._chorus", name = "TtsStage", frozen)]
pub struct PyTtsStage {
    actor: Actor<Core>,
    tokenizer: Option<CsmTokenizer>,
    info: Info,
}

fn end_name(r: EndReason) -> &'static str {
    match r {
        EndReason::EndFrame => "end",
        EndReason::MaxFrames => "max_frames",
        EndReason::ForcedDone => "forced_done",
    }
}

/// A context turn from Python: `(speaker, text, codes int64 [T, codebooks])`.
type ContextTurn<'py> = (u32, String, PyReadonlyArray2<'py, i64>);

#[pymethods]
impl PyTtsStage {
    /// Loads `model` (`sesame/csm-1b`, a folder, files, `random`, `random-small`) and `mimi` (the
    /// codec decoding each frame: default `kyutai/mimi`, `random` for a random model), and
    /// builds a stage for `max_utterances` utterances of up to `max_context` positions each.
    #[new]
    #[pyo3(signature = (model, device="auto", precision=None, max_utterances=DEFAULT_MAX_UTTERANCES, max_context=None, threads=None, tokenizer=None, mimi=None, temperature=0.9, top_k=50))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, mirrored one to one.
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        precision: Option<&str>,
        max_utterances: usize,
        max_context: Option<usize>,
        threads: Option<usize>,
        tokenizer: Option<PathBuf>,
        mimi: Option<String>,
        temperature: f32,
        top_k: usize,
    ) -> PyResult<Self> {
        let spec = TtsSpec {
            device: DeviceKind::parse(device).py_err()?,
            precision: precision.map(Precision::parse).transpose().py_err()?,
            threads,
            cuda_device: chorus_runtime::device::DEFAULT_CUDA_DEVICE,
        };
        let name = model.to_owned();
        let (actor, info, tok) = py
            .detach(move || -> chorus_core::Result<_> {
                let mut model = load_csm_model(&name)?;
                let config = model.config.clone();
                let max_context = max_context
                    .unwrap_or(DEFAULT_MAX_CONTEXT.min(config.backbone.max_position_embeddings));
                let mimi_spec = mimi.unwrap_or_else(|| {
                    if model.is_random() {
                        "random"
                    } else {
                        "kyutai/mimi"
                    }
                    .into()
                });
                let codec = chorus_mimi::checkpoint::load_model(&mimi_spec)?;
                let tok = match tokenizer {
                    Some(p) => Some(CsmTokenizer::from_file(&p, &config)?),
                    None => model.tokenizer.take(),
                };
                let mut opts = TtsOptions::for_utterances(max_utterances, max_context)?;
                opts.draws.temperature = temperature;
                opts.draws.top_k = top_k;
                let (source, random) = (model.source.clone(), model.is_random());
                let draws = opts.draws;
                let actor = Actor::spawn("chorus-tts", move || {
                    Ok(Core {
                        stage: AnyTts::open(&model, Some(&codec), &spec, opts)?,
                        utts: HashMap::new(),
                    })
                })?;
                let describe = actor.call(|c: &mut Core| c.stage.describe())?;
                let info = Info {
                    config,
                    max_utterances,
                    max_context,
                    draws,
                    describe,
                    source,
                    random,
                };
                Ok((actor, info, tok))
            })
            .py_err()?;
        Ok(Self {
            actor,
            tokenizer: tok,
            info,
        })
    }

    /// Adds an utterance of `text` said by `speaker`, after the `context` turns
    /// `[(speaker, text, codes [T, codebooks])]`; or, with `prompt_ids`, the whole text segment
    /// as ready ids (`[P]`), drawn at `temperature` (0: greedy) and `top_k` (each `None`: the
    /// stage's). Returns its id.
    #[pyo3(signature = (text=None, speaker=0, context=Vec::new(), prompt_ids=None, max_seconds=10.0, seed=0, sampling="seeded", temperature=None, top_k=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, mirrored one to one.
    fn add(
        &self,
        py: Python<'_>,
        text: Option<&str>,
        speaker: u32,
        context: Vec<ContextTurn<'_>>,
        prompt_ids: Option<PyReadonlyArray1<'_, i64>>,
        max_seconds: f64,
        seed: u64,
        sampling: &str,
        temperature: Option<f32>,
        top_k: Option<usize>,
    ) -> PyResult<u64> {
        if !(max_seconds > 0.0 && max_seconds.is_finite()) {
            return Err(Error::input(
                OP,
                format!("max_seconds {max_seconds} must be positive"),
            ))
            .py_err();
        }
        let max_frames = (max_seconds * FRAME_RATE).ceil() as usize;
        let prompt = self
            .prompt(text, speaker, &context, prompt_ids, max_frames)
            .py_err()?;
        let req = UtteranceRequest {
            prompt,
            max_frames,
            sampling: Sampling::parse(sampling, seed).py_err()?,
            draws: (temperature.is_some() || top_k.is_some()).then(|| DrawSettings {
                temperature: temperature.unwrap_or(self.info.draws.temperature),
                top_k: top_k.unwrap_or(self.info.draws.top_k),
            }),
            forced: None,
        };
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                let id = c.stage.add(req)?;
                c.utts.insert(
                    id,
                    Utterance {
                        codes: Vec::new(),
                        pcm: Vec::with_capacity(max_frames * FRAME_SAMPLES),
                        taken: 0,
                        end: None,
                    },
                );
                Ok(id)
            })
        })
        .py_err()?
        .py_err()
    }

    /// Runs one frame of every utterance; returns `[(id, frames so far, end or None)]`.
    #[allow(clippy::type_complexity)] // The tuple is what Python unpacks.
    fn step(&self, py: Python<'_>) -> PyResult<Vec<(u64, usize, Option<&'static str>)>> {
        let books = self.info.config.num_codebooks;
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                let utts = &mut c.utts;
                c.stage.step(&mut |ev| match ev {
                    UtteranceEvent::Frame {
                        utterance,
                        codes,
                        pcm,
                        ..
                    } => {
                        if let Some(u) = utts.get_mut(&utterance) {
                            u.codes.extend(codes.iter().map(|&x| x as i32));
                            if let Some(p) = pcm {
                                u.pcm.extend_from_slice(p);
                            }
                        }
                    }
                    UtteranceEvent::Ended {
                        utterance, reason, ..
                    } => {
                        if let Some(u) = utts.get_mut(&utterance) {
                            u.end = Some(end_name(reason));
                        }
                    }
                })?;
                let mut out: Vec<_> = utts
                    .iter()
                    .map(|(&id, u)| (id, u.codes.len() / books, u.end))
                    .collect();
                out.sort_unstable_by_key(|e| e.0);
                Ok(out)
            })
        })
        .py_err()?
        .py_err()
    }

    /// The audio (float32, 24 kHz) generated since the last call for this utterance.
    fn take_new<'py>(
        &self,
        py: Python<'py>,
        utterance: u64,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let chunk = py
            .detach(|| {
                self.actor.call(move |c: &mut Core| {
                    let Some(u) = c.utts.get_mut(&utterance) else {
                        return Err(Error::input(OP, format!("unknown utterance {utterance}")));
                    };
                    let chunk = u.pcm[u.taken..].to_vec();
                    u.taken = u.pcm.len();
                    Ok(chunk)
                })
            })
            .py_err()?
            .py_err()?;
        Ok(PyArray1::from_vec(py, chunk))
    }

    /// Takes an ended utterance: codes int32 `[T, codebooks]`, its whole audio float32
    /// `[T * 1920]`, and why it ended.
    #[allow(clippy::type_complexity)] // The tuple is what Python unpacks.
    fn take<'py>(
        &self,
        py: Python<'py>,
        utterance: u64,
    ) -> PyResult<(
        Bound<'py, numpy::PyArray2<i32>>,
        Bound<'py, PyArray1<f32>>,
        &'static str,
    )> {
        let u = py
            .detach(|| {
                self.actor.call(move |c: &mut Core| match c.utts.get(&utterance) {
                    None => Err(Error::input(OP, format!("unknown utterance {utterance}"))),
                    Some(u) if u.end.is_none() => Err(Error::input(
                        OP,
                        format!("utterance {utterance} is still running: step until it ends, or cancel it"),
                    )),
                    Some(_) => c
                        .utts
                        .remove(&utterance)
                        .ok_or_else(|| Error::input(OP, format!("unknown utterance {utterance}"))),
                })
            })
            .py_err()?
            .py_err()?;
        let books = self.info.config.num_codebooks;
        let frames = u.codes.len() / books;
        let codes = PyArray1::from_vec(py, u.codes).reshape([frames, books])?;
        Ok((
            codes,
            PyArray1::from_vec(py, u.pcm),
            u.end.unwrap_or("running"),
        ))
    }

    /// Cancels a running utterance (its frames so far stay to be taken); its KV blocks return now.
    fn cancel(&self, py: Python<'_>, utterance: u64) -> PyResult<()> {
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                let Some(u) = c.utts.get_mut(&utterance) else {
                    return Err(Error::input(OP, format!("unknown utterance {utterance}")));
                };
                if u.end.is_none() {
                    c.stage.cancel(utterance)?;
                    u.end = Some("cancelled");
                }
                Ok(())
            })
        })
        .py_err()?
        .py_err()
    }

    /// Utterances added and not yet ended.
    #[getter]
    fn active(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| {
            self.actor
                .call(|c: &mut Core| c.utts.values().filter(|u| u.end.is_none()).count())
        })
        .py_err()
    }
    #[getter]
    fn codebooks(&self) -> usize {
        self.info.config.num_codebooks
    }
    #[getter]
    fn max_utterances(&self) -> usize {
        self.info.max_utterances
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
}

impl PyTtsStage {
    /// The prompt frames of one request (validated against the model).
    fn prompt(
        &self,
        text: Option<&str>,
        speaker: u32,
        context: &[ContextTurn<'_>],
        prompt_ids: Option<PyReadonlyArray1<'_, i64>>,
        max_frames: usize,
    ) -> chorus_core::Result<Vec<PromptFrame>> {
        let c = &self.info.config;
        let limits = PromptLimits::new(c, max_frames);
        if let Some(ids) = prompt_ids {
            let ids = ids
                .as_array()
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
            return build_prompt_ids(&[], &ids, &limits);
        }
        let Some(text) = text else {
            return Err(Error::input(OP, "give text (or prompt_ids)"));
        };
        let Some(tok) = &self.tokenizer else {
            return Err(Error::input(
                OP,
                "no tokenizer: pass tokenizer=\"tokenizer.json\" (the model folder has none), or give prompt_ids",
            ));
        };
        let segments = context
            .iter()
            .map(|(spk, t, codes)| {
                let shape = codes.shape();
                if shape.len() != 2 || shape[1] != c.num_codebooks {
                    return Err(Error::input(
                        OP,
                        format!(
                            "context codes have shape {shape:?}; expected [T, {}]",
                            c.num_codebooks
                        ),
                    ));
                }
                let frames = codes
                    .as_array()
                    .rows()
                    .into_iter()
                    .map(|r| {
                        r.iter()
                            .map(|&x| {
                                u32::try_from(x).map_err(|_| {
                                    Error::input(
                                        OP,
                                        format!("context code {x} is negative or too large"),
                                    )
                                })
                            })
                            .collect::<chorus_core::Result<Vec<u32>>>()
                    })
                    .collect::<chorus_core::Result<Vec<_>>>()?;
                Ok(Segment {
                    speaker: *spk,
                    text: t.clone(),
                    audio: Some(frames),
                })
            })
            .collect::<chorus_core::Result<Vec<_>>>()?;
        build_prompt(tok, &segments, speaker, text, &limits)
    }
}
