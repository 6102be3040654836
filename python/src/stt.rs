//! `chorus._chorus.SttStage`: the Kyutai STT stream stage behind an owner thread, Mimi's
//! encoder inside its step.
//!
//! Streams are added, fed float32 PCM (24 kHz mono, any chunk size) and ended; each `step` runs
//! one position of every stream with audio queued on the stage's thread and keeps the decoded
//! words (text, start, end) and VAD probabilities beside the stream until Python takes them.
//! Times are seconds from the stream's first sample.

use std::collections::HashMap;
use std::path::PathBuf;

use chorus_core::{Error, Precision};
use chorus_lm::Sampling;
use chorus_runtime::bulk::read_audio_input;
use chorus_runtime::{AnyStt, DeviceKind, SttSpec};
use chorus_stt::config::FRAME_RATE;
use chorus_stt::{
    load_stt_model, StreamEvent, StreamRequest, SttConfig, SttOptions, SttTokenizer, WordEvent,
};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::actor::Actor;
use crate::errors::IntoPy;

const OP: &str = "SttStage";
/// Streams transcribed together by default.
const DEFAULT_MAX_STREAMS: usize = 8;
/// The longest stream by default, in seconds (the stage's default of one hour).
const DEFAULT_MAX_SECONDS: f64 = 3600.0;

/// A word: its text, start and end (`None` until the next word opens or the stream ends).
type Word = (String, f32, Option<f32>);

/// One stream's output so far.
#[derive(Default)]
struct Stream {
    words: Vec<Word>,
    /// Words already handed to Python.
    taken: usize,
    /// Class-0 probability of each VAD head, one row per position not yet taken.
    vad: Vec<Vec<f32>>,
    ended: bool,
}

struct Core {
    stage: AnyStt,
    tokenizer: SttTokenizer,
    streams: HashMap<u64, Stream>,
}

impl Core {
    fn step(&mut self) -> chorus_core::Result<usize> {
        let (streams, tok) = (&mut self.streams, &self.tokenizer);
        let mut failed = None;
        let n = self.stage.step(&mut |ev| match ev {
            StreamEvent::Token {
                stream,
                vad: Some(v),
                ..
            } => {
                if let Some(s) = streams.get_mut(&stream) {
                    s.vad.push(v.to_vec());
                }
            }
            StreamEvent::Token { .. } => {}
            StreamEvent::Word { stream, event } => {
                let Some(s) = streams.get_mut(&stream) else {
                    return;
                };
                match event {
                    WordEvent::Word { tokens, start } => match tok.decode(&tokens) {
                        Ok(text) => s.words.push((text, start, None)),
                        Err(e) => failed = Some(e),
                    },
                    WordEvent::EndWord { stop } => {
                        if let Some(w) = s.words.last_mut() {
                            w.2 = Some(stop);
                        }
                    }
                }
            }
            StreamEvent::Ended { stream, .. } => {
                if let Some(s) = streams.get_mut(&stream) {
                    s.ended = true;
                }
            }
        })?;
        failed.map_or(Ok(n), Err)
    }
}

/// What Python reads without a round trip.
struct Info {
    config: SttConfig,
    max_streams: usize,
    describe: String,
    source: String,
    random: bool,
}

/// The Kyutai STT stage.
#[pyclass(module = "chorus._chorus", name = "SttStage", frozen)]
pub struct PySttStage {
    actor: Actor<Core>,
    info: Info,
}

#[pymethods]
impl PySttStage {
    /// Loads `model` (`kyutai/stt-1b-en_fr`, `kyutai/stt-2.6b-en`, a folder, files, `random`,
    /// `random-2.6b`, `random-small`) and `mimi` (default `kyutai/mimi`, `random` for a random
    /// model), and builds a stage for `max_streams` streams of up to `max_seconds` each.
    #[new]
    #[pyo3(signature = (model, device="auto", precision=None, max_streams=DEFAULT_MAX_STREAMS, max_seconds=DEFAULT_MAX_SECONDS, threads=None, tokenizer=None, mimi=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, mirrored one to one.
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        precision: Option<&str>,
        max_streams: usize,
        max_seconds: f64,
        threads: Option<usize>,
        tokenizer: Option<PathBuf>,
        mimi: Option<String>,
    ) -> PyResult<Self> {
        if !(max_seconds > 0.0 && max_seconds.is_finite()) {
            return Err(Error::input(
                OP,
                format!("max_seconds {max_seconds} must be positive"),
            ))
            .py_err();
        }
        let spec = SttSpec {
            device: DeviceKind::parse(device).py_err()?,
            precision: precision.map(Precision::parse).transpose().py_err()?,
            threads,
            cuda_device: chorus_runtime::device::DEFAULT_CUDA_DEVICE,
        };
        let name = model.to_owned();
        let (actor, info) = py
            .detach(move || -> chorus_core::Result<_> {
                let mut model = load_stt_model(&name)?;
                let config = model.config.clone();
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
                    Some(p) => SttTokenizer::from_file(&p, &config)?,
                    None => model.tokenizer.take().ok_or_else(|| {
                        Error::config(
                            OP,
                            "the model has no SentencePiece .model beside it: pass tokenizer=PATH",
                        )
                    })?,
                };
                let mut opts = SttOptions::for_streams(max_streams)?;
                opts.max_frames = (max_seconds * FRAME_RATE as f64).ceil() as usize;
                let (source, random) = (model.source.clone(), model.is_random());
                let actor = Actor::spawn("chorus-stt", move || {
                    Ok(Core {
                        stage: AnyStt::open(&model, Some(&codec), &spec, opts)?,
                        tokenizer: tok,
                        streams: HashMap::new(),
                    })
                })?;
                let describe = actor.call(|c: &mut Core| c.stage.describe())?;
                let info = Info {
                    config,
                    max_streams,
                    describe,
                    source,
                    random,
                };
                Ok((actor, info))
            })
            .py_err()?;
        Ok(Self { actor, info })
    }

    /// Adds a stream (greedy, Kyutai's setting); returns its id. Refused when every slot is
    /// taken.
    fn add(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| {
            self.actor.call(|c: &mut Core| {
                let id = c.stage.add(StreamRequest {
                    sampling: Sampling::Greedy,
                    forced: None,
                })?;
                c.streams.insert(id, Stream::default());
                Ok(id)
            })
        })
        .py_err()?
        .py_err()
    }

    /// Queues float32 samples (24 kHz mono, finite) for stream `stream`.
    fn push(&self, py: Python<'_>, stream: u64, pcm: PyReadonlyArray1<'_, f32>) -> PyResult<()> {
        let samples: Vec<f32> = pcm.as_array().iter().copied().collect();
        py.detach(|| {
            self.actor
                .call(move |c: &mut Core| c.stage.push_pcm(stream, &samples))
        })
        .py_err()?
        .py_err()
    }

    /// Marks stream `stream` complete: once its audio has run, its last word closes and it ends.
    fn end(&self, py: Python<'_>, stream: u64) -> PyResult<()> {
        py.detach(|| self.actor.call(move |c: &mut Core| c.stage.end(stream)))
            .py_err()?
            .py_err()
    }

    /// Drops stream `stream` at once.
    fn cancel(&self, py: Python<'_>, stream: u64) -> PyResult<()> {
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                c.streams.remove(&stream);
                c.stage.cancel(stream).map(|_| ())
            })
        })
        .py_err()?
        .py_err()
    }

    /// Runs one position of every stream with audio queued; returns the streams launched (0:
    /// every queued input has run and been read).
    fn step(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.actor.call(|c: &mut Core| c.step()))
            .py_err()?
            .py_err()
    }

    /// The words of stream `stream` finished since the last call (all of them once it ended),
    /// its VAD rows since the last call (`[positions, heads]`, empty without VAD heads), and
    /// whether it ended (then it is forgotten).
    #[allow(clippy::type_complexity)] // The tuple is what Python unpacks.
    fn take<'py>(
        &self,
        py: Python<'py>,
        stream: u64,
    ) -> PyResult<(Vec<Word>, Bound<'py, PyArray1<f32>>, bool)> {
        let heads = self.info.config.extra_heads;
        let (words, vad, ended) = py
            .detach(|| {
                self.actor.call(move |c: &mut Core| {
                    let Some(s) = c.streams.get_mut(&stream) else {
                        return Err(Error::input(OP, format!("unknown stream {stream}")));
                    };
                    let done = if s.ended {
                        s.words.len()
                    } else {
                        s.words.iter().take_while(|w| w.2.is_some()).count()
                    };
                    let words = s.words[s.taken..done].to_vec();
                    s.taken = done;
                    let vad: Vec<f32> = s.vad.drain(..).flatten().collect();
                    let ended = s.ended;
                    if ended {
                        c.streams.remove(&stream);
                    }
                    Ok((words, vad, ended))
                })
            })
            .py_err()?
            .py_err()?;
        debug_assert!(heads == 0 || vad.len() % heads == 0);
        Ok((words, vad.into_pyarray(py), ended))
    }

    /// Samples of stream `stream` queued and not yet stepped.
    fn buffered(&self, py: Python<'_>, stream: u64) -> PyResult<usize> {
        py.detach(|| {
            self.actor.call(move |c: &mut Core| {
                c.stage
                    .buffered_samples(stream)
                    .ok_or_else(|| Error::input(OP, format!("unknown stream {stream}")))
            })
        })
        .py_err()?
        .py_err()
    }

    /// An audio file (WAV, FLAC, MP3, Ogg...) as float32 samples at 24 kHz mono.
    #[staticmethod]
    fn read_audio<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let input = py
            .detach(|| read_audio_input(&path, false, None))
            .py_err()?;
        Ok(input.samples.into_pyarray(py))
    }

    /// Seconds of silence the model was trained to hear before the audio (1 for the 2.6B).
    #[getter]
    fn silence_prefix_seconds(&self) -> f32 {
        self.info.config.silence_prefix_seconds
    }

    /// Frames of silence to push before `end` so that the last words come out.
    #[getter]
    fn flush_frames(&self) -> usize {
        self.info.config.text_delay_frames + FRAME_RATE.ceil() as usize
    }

    /// Number of VAD heads (4 for the 1B, 0 for the 2.6B).
    #[getter]
    fn vad_heads(&self) -> usize {
        self.info.config.extra_heads
    }

    #[getter]
    fn max_streams(&self) -> usize {
        self.info.max_streams
    }

    /// The device, in words.
    #[getter]
    fn device(&self) -> String {
        self.info.describe.clone()
    }

    #[getter]
    fn source(&self) -> String {
        self.info.source.clone()
    }

    /// Whether the weights are random (the text is noise).
    #[getter]
    fn random(&self) -> bool {
        self.info.random
    }
}
