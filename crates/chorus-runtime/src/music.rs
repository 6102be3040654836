//! Builds the music semantic stage on the chosen device.

use chorus_core::{Error, Precision, Result};
use chorus_cpu::CpuBackend;
use chorus_cuda::{CudaBackend, CudaOptions};

use chorus_music::{MusicModel, SemanticStage, SongEvent, SongId, SongRequest, StageOptions};

use crate::device::{resolve, DeviceKind, CPU_F32_ONLY};

const OP_OPEN: &str = "open_stage";

/// A CPU stage for `songs` songs of up to `max_context` positions each.
pub fn open_stage(
    model: &MusicModel,
    device: DeviceKind,
    opts: StageOptions,
    threads: Option<usize>,
) -> Result<SemanticStage<CpuBackend>> {
    if resolve(device) == DeviceKind::Cuda {
        return Err(Error::config(
            OP_OPEN,
            "this builder runs the music stage on the CPU backend (device cpu)",
        ));
    }
    SemanticStage::new(CpuBackend::new(threads)?, model, opts)
}

/// The stage on either backend.
pub enum AnyStage {
    Cpu(Box<SemanticStage<CpuBackend>>),
    Cuda(Box<SemanticStage<CudaBackend>>),
}

/// What to build.
pub struct StageSpec {
    pub device: DeviceKind,
    /// `None`: f32 on the CPU, bf16 on CUDA.
    pub precision: Option<Precision>,
    pub songs: usize,
    pub max_context: usize,
    pub threads: Option<usize>,
    /// CUDA: every product and attention split in one order per row whatever the batch
    /// ([`CudaOptions::batch_invariant`]); the CPU always is.
    pub batch_invariant: bool,
    /// Prompt tokens per row a frame prefills for a joining song (`StageOptions::prefill_chunk`;
    /// 0: whole prompts at admission); `None`: the stage's default.
    pub prefill_chunk: Option<usize>,
    /// How the LM's KV cache stores its values.
    pub kv_cache: chorus_music::KvCache,
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            AnyStage::Cpu($s) => $e,
            AnyStage::Cuda($s) => $e,
        }
    };
}

impl AnyStage {
    /// Builds the stage; on CUDA every bucket's frame graph is captured before it returns.
    pub fn open(model: &MusicModel, spec: &StageSpec) -> Result<Self> {
        Self::with_options(
            model,
            spec,
            StageOptions::for_songs(spec.songs, spec.max_context)?,
        )
    }

    /// Like [`AnyStage::open`] with a pool of `kv_blocks` blocks and prompts (prefills) of up to
    /// `max_prompt` tokens, for benchmarks that fill long contexts with one prefill.
    pub fn open_sized(
        model: &MusicModel,
        spec: &StageSpec,
        kv_blocks: usize,
        max_prompt: usize,
    ) -> Result<Self> {
        let mut opts = StageOptions::for_songs(spec.songs, spec.max_context)?;
        opts.kv_blocks = kv_blocks;
        opts.max_prompt = max_prompt;
        Self::with_options(model, spec, opts)
    }

    fn with_options(model: &MusicModel, spec: &StageSpec, mut opts: StageOptions) -> Result<Self> {
        if let Some(chunk) = spec.prefill_chunk {
            opts.prefill_chunk = chunk;
        }
        opts.kv_cache = spec.kv_cache;
        match resolve(spec.device) {
            DeviceKind::Cuda => {
                let defaults = CudaOptions::default();
                let be = CudaBackend::new(CudaOptions {
                    precision: spec.precision.unwrap_or(Precision::Bf16),
                    batch_invariant: spec.batch_invariant || defaults.batch_invariant,
                    ..defaults
                })?;
                let mut st = SemanticStage::new(be, model, opts)?;
                st.warmup()?;
                Ok(Self::Cuda(Box::new(st)))
            }
            _ => {
                if spec.precision == Some(Precision::Bf16) {
                    return Err(Error::config(OP_OPEN, CPU_F32_ONLY));
                }
                Ok(Self::Cpu(Box::new(SemanticStage::new(
                    CpuBackend::new(spec.threads)?,
                    model,
                    opts,
                )?)))
            }
        }
    }

    pub fn add_song(&mut self, req: SongRequest) -> Result<SongId> {
        each!(self, s => s.add_song(req))
    }

    /// See [`SemanticStage::add_song_prefilled`].
    pub fn add_song_prefilled(&mut self, req: SongRequest) -> Result<SongId> {
        each!(self, s => s.add_song_prefilled(req))
    }

    /// Songs admitted and not yet ended.
    pub fn active(&self) -> usize {
        each!(self, s => s.active())
    }

    /// Songs whose prompts are still being prefilled in chunks.
    pub fn joining(&self) -> usize {
        each!(self, s => s.joining())
    }

    /// The last launched frame's device buffers (synchronises).
    pub fn trace(&self) -> Result<chorus_music::stage::FrameTrace> {
        each!(self, s => s.trace())
    }

    pub fn step(&mut self, sink: &mut dyn FnMut(SongEvent<'_>)) -> Result<usize> {
        each!(self, s => s.step(sink))
    }

    pub fn cancel(&mut self, id: SongId) -> Result<usize> {
        each!(self, s => s.cancel(id))
    }

    /// Bytes of one stored weight (4 on the CPU, 2 in bf16).
    pub fn bytes_per_weight(&self) -> usize {
        use chorus_core::{Backend, BufRole};
        each!(self, s => s.backend().bytes_per_element(BufRole::Weight))
    }

    /// The device, in words.
    pub fn describe(&self) -> String {
        use chorus_core::Backend;
        each!(self, s => s.backend().device_description())
    }

    /// CUDA only: nodes (kernels and copies) of the frame graph of the bucket holding `songs`
    /// songs, once it is captured.
    pub fn graph_nodes(&self, songs: usize) -> Option<usize> {
        let AnyStage::Cuda(s) = self else {
            return None;
        };
        graph_nodes_of(s.backend(), &s.bucket_keys(), songs)
    }

    /// CUDA only: median device ms of `iters` back-to-back replays of the frame graph of the
    /// bucket holding `songs` songs.
    pub fn device_ms(&self, songs: usize, iters: usize) -> Result<Option<f64>> {
        let AnyStage::Cuda(s) = self else {
            return Ok(None);
        };
        replay_ms_of(s.backend(), &s.bucket_keys(), songs, iters)
    }

    /// CUDA only: like [`AnyStage::device_ms`], of the frame graph that also prefills a prompt
    /// chunk (the frame the running songs see while a song joins).
    pub fn device_ms_joining(&self, songs: usize, iters: usize) -> Result<Option<f64>> {
        let AnyStage::Cuda(s) = self else {
            return Ok(None);
        };
        replay_ms_of(s.backend(), &s.chunk_bucket_keys(), songs, iters)
    }

    /// CUDA only: times every op of the work `f` runs (eagerly, one event pair per op) and returns
    /// the device ms per op name with its call count; `None` on the CPU (after running `f`).
    pub fn profile_ops<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<(T, Option<Vec<chorus_cuda::OpTime>>)> {
        if let AnyStage::Cuda(s) = self {
            s.backend().set_profiling(true);
        }
        let out = f(self);
        let AnyStage::Cuda(s) = self else {
            return Ok((out?, None));
        };
        s.backend().set_profiling(false);
        // Taken even when `f` failed, so no samples stay behind for a later profile.
        let ops = s.backend().take_profile()?;
        Ok((out?, Some(ops)))
    }
}

/// Nodes of the frame graph of the bucket of size `n` among `keys` (bucket size, program key).
pub(crate) fn graph_nodes_of(be: &CudaBackend, keys: &[(usize, usize)], n: usize) -> Option<usize> {
    let &(_, key) = keys.iter().find(|(size, _)| *size == n)?;
    be.graph_nodes(key)
}

/// Median device ms of `iters` back-to-back replays of that bucket's frame graph.
pub(crate) fn replay_ms_of(
    be: &CudaBackend,
    keys: &[(usize, usize)],
    n: usize,
    iters: usize,
) -> Result<Option<f64>> {
    let Some(&(_, key)) = keys.iter().find(|(size, _)| *size == n) else {
        return Ok(None);
    };
    let mut ms = be.time_replay(key, iters)?;
    ms.sort_by(f32::total_cmp);
    Ok(ms.get(ms.len() / 2).map(|&m| f64::from(m)))
}
