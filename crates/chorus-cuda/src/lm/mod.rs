//! [`chorus_core::LmOps`] for [`CudaBackend`]: pinned host I/O and the language-model ops. Every
//! op is a kernel launch (or a cuBLAS call) on the backend's stream, so a frame program captures
//! into one graph.

pub(crate) mod attention;
mod draw;
pub(crate) mod gemv;
mod next;
mod prefetch;
mod q8;
pub(crate) mod q8_gemm;
mod rows;
pub(crate) mod skinny;

pub(crate) use next::NextWeight;
pub use q8::CudaQWeight;

use chorus_core::lm_ops::{
    AddRowArgs, CfgDrawArgs, CopyRowsArgs, EmbedSumArgs, FeedbackArgs, GatherArgs,
    PagedAttentionArgs, QkNormRopeArgs, RmsNormArgs, RopeAttentionArgs, ScatterArgs, SwigluArgs,
};
use chorus_core::lm_ops::{FusedLinearArgs, HadamardArgs, LinearQ8Args};
use chorus_core::{LmOps, Precision, Result};

use crate::backend::{CudaBackend, CudaBuf, CudaInts};
use crate::error::{cuda_error, OrCuda};
use crate::kernels::{kargs, Kernel};
use crate::memory::{DevMem, Pinned};
use cudarc::driver::CudaEvent;

/// Pinned host ints.
pub struct CudaPinnedInts {
    pub(crate) mem: Pinned,
    pub(crate) len: usize,
}

/// Pinned host floats (f32), with the f32 device copy a bf16 buffer is converted through.
pub struct CudaPinnedFloats {
    pub(crate) mem: Pinned,
    pub(crate) dev_f32: Option<DevMem>,
    pub(crate) len: usize,
}

use crate::ops::need as check_len;

/// Device pointer of a buffer stored in the precision's type `T` (not an f32 table in bf16 mode).
pub(crate) fn t_ptr(be: &CudaBackend, op: &'static str, name: &str, buf: &CudaBuf) -> Result<u64> {
    if buf.f32 && be.precision != Precision::F32 {
        return Err(cuda_error(
            op,
            format!("`{name}` is stored in f32 (a table buffer) but the op reads bf16 storage"),
        ));
    }
    Ok(buf.mem.ptr())
}

impl LmOps for CudaBackend {
    type PinnedInts = CudaPinnedInts;
    type PinnedFloats = CudaPinnedFloats;
    type Mark = CudaEvent;
    type QWeight = CudaQWeight;

    fn upload_q8(
        &self,
        data: &[i8],
        scales: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<CudaQWeight> {
        q8::upload_q8(self, data, scales, rows, cols)
    }

    fn mark(&self) -> Result<CudaEvent> {
        self.bind()?;
        self.ctx.new_event(None).or_cuda("cuEventCreate")
    }

    fn launch(
        &self,
        key: usize,
        program: &mut dyn FnMut(&Self) -> Result<()>,
        mark: &mut CudaEvent,
    ) -> Result<()> {
        self.bind()?;
        if self.profiling() {
            program(self)?;
        } else if !self.replay_async(key)? {
            self.capture(key, program)?;
        }
        mark.record(&self.stream).or_cuda("cuEventRecord")
    }

    fn wait(&self, mark: &CudaEvent) -> Result<()> {
        mark.synchronize().or_cuda("cuEventSynchronize")
    }

    fn timing_mark(&self) -> Result<CudaEvent> {
        self.bind()?;
        self.ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .or_cuda("cuEventCreate")
    }

    fn record(&self, mark: &mut CudaEvent) -> Result<()> {
        self.bind()?;
        mark.record(&self.stream).or_cuda("cuEventRecord")
    }

    fn elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<Option<f32>> {
        start
            .elapsed_ms(end)
            .map(Some)
            .or_cuda("cuEventElapsedTime")
    }

    fn pinned_ints_nowait<'p>(&self, p: &'p mut CudaPinnedInts) -> &'p mut [i32] {
        p.mem.as_mut_slice::<i32>()
    }

    fn pinned_floats_nowait<'p>(&self, p: &'p CudaPinnedFloats) -> &'p [f32] {
        p.mem.as_slice::<f32>()
    }

    fn pinned_ints(&self, len: usize) -> Result<CudaPinnedInts> {
        self.bind()?;
        Ok(CudaPinnedInts {
            mem: Pinned::new(&self.ctx, len * 4)?,
            len,
        })
    }

    fn pinned_floats(&self, len: usize) -> Result<CudaPinnedFloats> {
        self.bind()?;
        let dev_f32 = match self.precision {
            Precision::Bf16 => Some(DevMem::new(&self.ctx, len * 4, None)?),
            Precision::F32 => None,
        };
        Ok(CudaPinnedFloats {
            mem: Pinned::new(&self.ctx, len * 4)?,
            dev_f32,
            len,
        })
    }

    fn pinned_ints_mut<'p>(&self, p: &'p mut CudaPinnedInts) -> Result<&'p mut [i32]> {
        // The host must never write inputs a replay is still reading, nor read unfinished outputs.
        self.bind()?;
        self.sync()?;
        Ok(p.mem.as_mut_slice::<i32>())
    }

    fn pinned_floats_ref<'p>(&self, p: &'p CudaPinnedFloats) -> Result<&'p [f32]> {
        self.bind()?;
        self.sync()?;
        Ok(p.mem.as_slice::<f32>())
    }

    fn copy_in_ints(&self, src: &CudaPinnedInts, dst: &mut CudaInts, len: usize) -> Result<()> {
        check_len("copy_in_ints", "src", src.len, len)?;
        check_len("copy_in_ints", "dst", dst.len, len)?;
        self.copy_htod(dst.mem.ptr(), src.mem.ptr(), len * 4)
    }

    fn copy_out_ints(&self, src: &CudaInts, dst: &mut CudaPinnedInts, len: usize) -> Result<()> {
        check_len("copy_out_ints", "src", src.len, len)?;
        check_len("copy_out_ints", "dst", dst.len, len)?;
        self.copy_dtoh(dst.mem.ptr(), src.mem.ptr(), len * 4)
    }

    fn copy_out_floats(&self, src: &CudaBuf, dst: &mut CudaPinnedFloats, len: usize) -> Result<()> {
        check_len("copy_out_floats", "src", src.len, len)?;
        check_len("copy_out_floats", "dst", dst.len, len)?;
        let from = match &dst.dev_f32 {
            Some(tmp) if !src.f32 => {
                let (s, d, n) = (src.mem.ptr(), tmp.ptr(), len as i64);
                self.launch(
                    Kernel::CastTToF32,
                    self.grid_for(len)?,
                    &mut kargs![&s, &d, &n],
                )?;
                tmp.ptr()
            }
            _ => src.mem.ptr(),
        };
        self.copy_dtoh(dst.mem.ptr(), from, len * 4)
    }

    fn run_eager(&self, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()> {
        self.bind()?;
        program(self)?;
        self.sync()
    }

    fn run_queued(&self, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()> {
        self.bind()?;
        program(self)
    }

    fn gather_rows(&self, a: GatherArgs<'_, Self>) -> Result<()> {
        rows::gather_rows(self, a)
    }

    fn scatter_rows(&self, a: ScatterArgs<'_, Self>) -> Result<()> {
        rows::scatter_rows(self, a)
    }

    fn copy_rows(&self, a: CopyRowsArgs<'_, Self>) -> Result<()> {
        rows::copy_rows(self, a)
    }

    fn feedback_embed(&self, a: FeedbackArgs<'_, Self>) -> Result<()> {
        rows::feedback_embed(self, a)
    }

    fn rms_norm(&self, a: RmsNormArgs<'_, Self>) -> Result<()> {
        rows::rms_norm(self, a)
    }

    fn add_row(&self, a: AddRowArgs<'_, Self>) -> Result<()> {
        rows::add_row(self, a)
    }

    fn embed_sum(&self, a: EmbedSumArgs<'_, Self>) -> Result<()> {
        rows::embed_sum(self, a)
    }

    fn qk_norm_rope(&self, a: QkNormRopeArgs<'_, Self>) -> Result<()> {
        rows::qk_norm_rope(self, a)
    }

    fn rope_paged_attention(&self, a: RopeAttentionArgs<'_, Self>) -> Result<()> {
        attention::rope_paged_attention(self, a)
    }

    fn paged_attention(&self, a: PagedAttentionArgs<'_, Self>) -> Result<()> {
        attention::paged_attention(self, a)
    }

    fn swiglu(&self, a: SwigluArgs<'_, Self>) -> Result<()> {
        rows::swiglu(self, a)
    }

    fn cfg_draw(&self, a: CfgDrawArgs<'_, Self>) -> Result<()> {
        draw::cfg_draw(self, a)
    }

    fn linear_q8(&self, a: LinearQ8Args<'_, Self>) -> Result<()> {
        q8::linear_q8(self, a)
    }

    fn hadamard(&self, a: HadamardArgs<'_, Self>) -> Result<()> {
        q8::hadamard(self, a)
    }

    fn fused_linear(&self, a: FusedLinearArgs<'_, Self>) -> Result<()> {
        skinny::fused_linear(self, a)
    }

    fn sequence_weights(
        &self,
        seq: &[chorus_core::lm_ops::SequencedWeight<'_, Self>],
    ) -> Result<()> {
        self.sequence(seq)
    }
}
