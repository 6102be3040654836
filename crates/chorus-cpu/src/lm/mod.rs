//! [`LmOps`] on the CPU: the op family of autoregressive language models, in f32.
//!
//! - Pinned memory is plain host memory ([`CpuPinnedInts`], [`CpuPinnedFloats`]); the copy ops are
//!   length-checked memcpys.
//! - Batch invariance, as for the base ops: every reduction (a row's sum of squares, one query's
//!   attention over its keys, one song's draw) runs in one fixed order on one thread, whatever the
//!   number of rows in the call; work is split across rows, tokens, heads or songs only.
//! - Allocation: none on the step path. `paged_attention` keeps its scores in a fixed-size stack
//!   block (online softmax, `attention.rs`); `cfg_draw` takes its vocab-sized selection scratch
//!   from the backend's grow-only arena (`draw.rs`).
//! - Every op checks its buffer lengths (O(1)) and the ids and positions it indexes with (O(rows)),
//!   so a caller bug is a named [`chorus_core::Error`], never a slice panic.

mod attention;
mod draw;
mod norm;
mod q8;
mod rows;

pub use q8::CpuQWeight;

use crate::{check, CpuBackend, CpuBuf, CpuInts};
use chorus_core::lm_ops::{fused_linear_apart, FusedLinearArgs, HadamardArgs, LinearQ8Args};
use chorus_core::lm_ops::{
    AddRowArgs, CfgDrawArgs, CopyRowsArgs, EmbedSumArgs, FeedbackArgs, GatherArgs,
    PagedAttentionArgs, QkNormRopeArgs, RmsNormArgs, ScatterArgs, SwigluArgs,
};
use chorus_core::{LmOps, Result};

/// Host-visible i32 memory: a plain vector on the CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuPinnedInts(pub(crate) Vec<i32>);

/// Host-visible f32 memory: a plain vector on the CPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuPinnedFloats(pub(crate) Vec<f32>);

impl CpuPinnedInts {
    /// The elements.
    pub fn as_slice(&self) -> &[i32] {
        &self.0
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl CpuPinnedFloats {
    /// The elements.
    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `dst[..len] = src[..len]` after checking both lengths.
fn copy_prefix<T: Copy>(op: &'static str, src: &[T], dst: &mut [T], len: usize) -> Result<()> {
    check::at_least(op, "src", src.len(), len)?;
    check::at_least(op, "dst", dst.len(), len)?;
    dst[..len].copy_from_slice(&src[..len]);
    Ok(())
}

impl LmOps for CpuBackend {
    type PinnedInts = CpuPinnedInts;
    type PinnedFloats = CpuPinnedFloats;
    type Mark = ();
    type QWeight = CpuQWeight;

    fn upload_q8(
        &self,
        data: &[i8],
        scales: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<CpuQWeight> {
        q8::upload_q8(data, scales, rows, cols)
    }

    fn mark(&self) -> Result<()> {
        Ok(())
    }

    fn launch(
        &self,
        key: usize,
        program: &mut dyn FnMut(&Self) -> Result<()>,
        _mark: &mut (),
    ) -> Result<()> {
        chorus_core::Backend::run(self, key, program)
    }

    fn wait(&self, _mark: &()) -> Result<()> {
        Ok(())
    }

    fn record(&self, _mark: &mut ()) -> Result<()> {
        Ok(())
    }

    fn queues_work(&self) -> bool {
        false
    }

    fn pinned_ints_nowait<'p>(&self, p: &'p mut CpuPinnedInts) -> &'p mut [i32] {
        &mut p.0
    }

    fn pinned_floats_nowait<'p>(&self, p: &'p CpuPinnedFloats) -> &'p [f32] {
        &p.0
    }

    fn pinned_ints(&self, len: usize) -> Result<CpuPinnedInts> {
        Ok(CpuPinnedInts(vec![0; len]))
    }

    fn pinned_floats(&self, len: usize) -> Result<CpuPinnedFloats> {
        Ok(CpuPinnedFloats(vec![0.0; len]))
    }

    fn pinned_ints_mut<'p>(&self, p: &'p mut CpuPinnedInts) -> Result<&'p mut [i32]> {
        Ok(&mut p.0)
    }

    fn pinned_floats_ref<'p>(&self, p: &'p CpuPinnedFloats) -> Result<&'p [f32]> {
        Ok(&p.0)
    }

    fn copy_in_ints(&self, src: &CpuPinnedInts, dst: &mut CpuInts, len: usize) -> Result<()> {
        copy_prefix("copy_in_ints", &src.0, &mut dst.0, len)
    }

    fn copy_out_ints(&self, src: &CpuInts, dst: &mut CpuPinnedInts, len: usize) -> Result<()> {
        copy_prefix("copy_out_ints", &src.0, &mut dst.0, len)
    }

    fn copy_out_floats(&self, src: &CpuBuf, dst: &mut CpuPinnedFloats, len: usize) -> Result<()> {
        copy_prefix("copy_out_floats", &src.0, &mut dst.0, len)
    }

    fn gather_rows(&self, args: GatherArgs<'_, Self>) -> Result<()> {
        rows::gather_rows(self, args)
    }

    fn scatter_rows(&self, args: ScatterArgs<'_, Self>) -> Result<()> {
        rows::scatter_rows(args)
    }

    fn copy_rows(&self, args: CopyRowsArgs<'_, Self>) -> Result<()> {
        rows::copy_rows(args)
    }

    fn feedback_embed(&self, args: FeedbackArgs<'_, Self>) -> Result<()> {
        rows::feedback_embed(self, args)
    }

    fn embed_sum(&self, args: EmbedSumArgs<'_, Self>) -> Result<()> {
        rows::embed_sum(self, args)
    }

    fn rms_norm(&self, args: RmsNormArgs<'_, Self>) -> Result<()> {
        norm::rms_norm(self, args)
    }

    fn add_row(&self, args: AddRowArgs<'_, Self>) -> Result<()> {
        rows::add_row(args)
    }

    fn qk_norm_rope(&self, args: QkNormRopeArgs<'_, Self>) -> Result<()> {
        norm::qk_norm_rope(self, args)
    }

    fn paged_attention(&self, args: PagedAttentionArgs<'_, Self>) -> Result<()> {
        attention::paged_attention(self, args)
    }

    fn swiglu(&self, args: SwigluArgs<'_, Self>) -> Result<()> {
        norm::swiglu(self, args)
    }

    fn cfg_draw(&self, args: CfgDrawArgs<'_, Self>) -> Result<()> {
        draw::cfg_draw(self, args)
    }

    fn linear_q8(&self, args: LinearQ8Args<'_, Self>) -> Result<()> {
        q8::linear_q8(self, args)
    }

    fn hadamard(&self, args: HadamardArgs<'_, Self>) -> Result<()> {
        q8::hadamard(self, args)
    }

    fn fused_linear(&self, a: FusedLinearArgs<'_, Self>) -> Result<()> {
        // The ops apart, each in its own fixed order: the CPU's results are those of the ops.
        let (n, k) = (a.n, a.k);
        fused_linear_apart(self, a, |x, w, eps, out| {
            norm::norm_rows(self, x, w, eps, out, (n, k))
        })
    }
}
