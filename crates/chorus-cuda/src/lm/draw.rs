//! CFG, tie-inclusive top-k and the draw (kernels/lm_draw.cu): one block per song, which recomputes
//! the guided values from the logits wherever needed, so no scratch memory is used.
//!
//! The kernel follows the CPU backend (`chorus-cpu/src/lm/draw.rs`) operation for operation, so
//! both draw the same code from the same logits: the guided value in f32 without contraction, the
//! k-th largest values exactly (a bitwise search over order-preserving keys, NaN above everything),
//! `nan_to_num`, and the winner's score in f64 with the same `exp_noise`. Data the host cannot see
//! without a sync is not validated here: a draw mode other than 1 draws greedily.

use chorus_core::lm_ops::CfgDrawArgs;
use chorus_core::{Precision, Result};

use crate::backend::CudaBackend;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};
use cudarc::driver::sys;

const OP: &str = "cfg_draw";
/// Threads per song: 1024 (the most a block has), or 256 for vocabularies that small.
const MAX_THREADS: usize = 1024;
const MIN_THREADS: usize = 256;
/// Elements per thread the kernel can hold in registers (its `draw_song` instances); a larger
/// vocabulary is recomputed from the logits in every pass (`per_thread` 0).
const PER_THREAD: [usize; 3] = [1, 4, 17];

/// Mirrors `DrawDims` in `lm_draw.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct DrawDims {
    songs: i32,
    vocab: i32,
    codes_stride: i32,
    col: i32,
    draw_offset: u32,
    cfg_scale: f32,
    /// 0: one logits row per song, no guidance.
    cfg: i32,
    temperature: f32,
    /// 0: no conditional prefilter.
    cond_top_k: i32,
    top_k: i32,
    /// -1: no END column.
    end: i32,
    /// Elements per thread in registers, 0 for none.
    per_thread: i32,
}

fn need(name: &str, have: usize, want: usize) -> Result<()> {
    crate::ops::need(OP, name, have, want)
}

fn i32_of(name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| cuda_error(OP, format!("{name} = {v} exceeds i32")))
}

pub(crate) fn cfg_draw(be: &CudaBackend, a: CfgDrawArgs<'_, CudaBackend>) -> Result<()> {
    let _timer = be.op_timer(OP);
    let (songs, vocab, stride, col) = (a.songs, a.vocab, a.codes_stride, a.col);
    if songs == 0 {
        return Ok(());
    }
    if vocab == 0 || vocab > i32::MAX as usize || col >= stride {
        return Err(cuda_error(
            OP,
            format!(
                "need 1 <= vocab <= i32::MAX and col < codes_stride (vocab {vocab}, col {col}, \
                 codes_stride {stride})"
            ),
        ));
    }
    // With per-song settings the call's top-k and temperature are unused.
    let call_top_k = if a.row_sampling.is_some() { 1 } else { a.top_k };
    if call_top_k == 0 || a.cond_top_k == Some(0) || a.end.is_some_and(|e| e >= vocab) {
        return Err(cuda_error(
            OP,
            format!(
                "need top_k, cond_top_k >= 1 and end < vocab {vocab} (top_k {}, cond_top_k {:?}, \
                 end {:?})",
                a.top_k, a.cond_top_k, a.end
            ),
        ));
    }
    if a.row_sampling.is_none() && !(a.temperature.is_finite() && a.temperature > 0.0) {
        return Err(cuda_error(
            OP,
            format!("temperature {} must be finite and positive", a.temperature),
        ));
    }
    let per_song = if a.cfg_scale.is_some() { 2 } else { 1 };
    need("logits", a.logits.len, per_song * songs * vocab)?;
    need("codes", a.codes.len, songs * stride)?;
    need("mode", a.mode.len, songs)?;
    need("seeds", a.seeds.len, 2 * songs)?;
    need("draws", a.draws.len, songs)?;
    need("allow_end", a.allow_end.len, songs)?;
    if let Some(r) = a.row_sampling {
        need("row_sampling", r.len, 2 * songs)?;
    }
    if a.logits.f32 && be.precision == Precision::Bf16 {
        return Err(cuda_error(
            OP,
            "`logits` must be stored in bf16 like every activation, not as an f32 table",
        ));
    }
    i32_of("logits elements", per_song * songs * vocab)?;
    i32_of("codes elements", songs * stride)?;
    // k >= vocab makes the k-th largest the smallest element: the conditional prefilter masks
    // nothing and every element is a candidate, so neither selection runs (0).
    let select_k = |k: usize| if k >= vocab { 0 } else { k as i32 };
    let block = if vocab <= MIN_THREADS {
        MIN_THREADS
    } else {
        MAX_THREADS
    };
    let per_thread = PER_THREAD
        .into_iter()
        .find(|&e| vocab <= e * block)
        .unwrap_or(0);
    let d = DrawDims {
        songs: i32_of("songs", songs)?,
        vocab: vocab as i32,
        codes_stride: stride as i32,
        col: col as i32,
        draw_offset: a.draw_offset,
        cfg_scale: a.cfg_scale.unwrap_or(1.0),
        cfg: i32::from(a.cfg_scale.is_some()),
        temperature: a.temperature,
        cond_top_k: a.cond_top_k.map_or(0, select_k),
        top_k: select_k(a.top_k),
        end: a.end.map_or(-1, |e| e as i32),
        per_thread: per_thread as i32,
    };
    let (logits, codes, mode) = (a.logits.mem.ptr(), a.codes.mem.ptr(), a.mode.mem.ptr());
    let (seeds, draws, allow_end) = (a.seeds.mem.ptr(), a.draws.mem.ptr(), a.allow_end.mem.ptr());
    // A null pointer tells the kernel to use the call's temperature and top-k.
    let row_sampling: sys::CUdeviceptr = a.row_sampling.map_or(0, |r| r.mem.ptr());
    be.launch(
        Kernel::LmCfgDraw,
        Launch {
            grid: songs as u32,
            block: block as u32,
            smem: 0,
        },
        &mut kargs![
            &logits,
            &codes,
            &mode,
            &seeds,
            &draws,
            &allow_end,
            &row_sampling,
            &d
        ],
    )
}
