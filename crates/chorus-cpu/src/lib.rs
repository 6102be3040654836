//! The CPU backend: f32 everywhere, parallel work on a rayon pool the backend owns.
//!
//! Design:
//! - Buffers are plain `Vec`s ([`CpuBuf`], [`CpuInts`]); staging is host memory, so `stage_in` and
//!   `stage_out` are copies and [`Backend::run`] simply calls the program.
//! - Batch invariance: a stream's output must not depend on its batch bucket, so every product
//!   whose row count varies with the bucket (`linear`, short convolutions) runs `rowdot.rs`, which
//!   sums each output element in one fixed order whatever the row count; long convolutions run one
//!   same-shape product per row.
//! - The long convolutions' products go through the `gemm` crate (SIMD picked at run time,
//!   arbitrary strides).
//! - Activations are channels-last, which makes a causal convolution's im2col row a contiguous
//!   slice of the `[history + time, c_in]` concatenation: long convolutions need no im2col copy
//!   (see `conv.rs`); a dense transposed convolution is one GEMM plus an overlap-add (`convtr.rs`).
//! - Parallelism: rows (or tokens, or output blocks) across the pool; large GEMMs parallelise
//!   inside `gemm`. Ops run inside the pool (`ThreadPool::install`) so `gemm` uses its threads.
//! - Hand-written loops are compiled for AVX-512, AVX2 and the baseline and picked at run time
//!   (`simd.rs`).
//! - Scratch: one grow-only arena per backend (`scratch.rs`); ops process rows in chunks whose
//!   scratch is bounded (and cache-sized when the weights are small), and the arena only grows
//!   during the first step of a larger bucket, so steady-state steps allocate nothing of ours
//!   (`gemm` itself allocates its packing buffers per call).
//! - Dense transposed-convolution weights (`[c_in, kernel * c_out]`, a power-of-two row stride in
//!   Mimi, which aliases in the caches) are copied once, on first use, into a padded-stride layout
//!   cached in the buffer.
//! - Long two-tap convolutions (the encoder's downsampling as super-columns, the decoder's
//!   transposed convolutions of kernel `2 * stride` as output blocks) take their outputs in pairs
//!   through three products instead of four (`pairs.rs`), the taps' sum cached in the buffer.
//! - Per-slot state is read and written through the slot ids; state write-backs run in row order
//!   because padded rows all name the dummy row.

mod attention;
mod buffers;
mod check;
mod conv;
mod convtr;
mod convtr_long;
mod elementwise;
mod encode;
mod gemm;
mod lm;
mod math;
mod pairs;
mod rowdot;
mod scratch;
mod simd;

pub use buffers::{CpuBuf, CpuInts, CpuStaging};
pub use lm::{CpuPinnedFloats, CpuPinnedInts, CpuQWeight};

use chorus_core::{
    AttentionArgs, Backend, BufRole, Conv1dArgs, ConvTr1dArgs, EmbedArgs, Error, LayerNormArgs,
    LinearArgs, NormLinearArgs, Precision, ReplicateArgs, ResBlockArgs, ResetRowsArgs, Result,
    RvqEncodeArgs, StagingDims, StagingView,
};

/// The CPU backend.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    threads: usize,
    scratch: scratch::Scratch,
    phase_upsampling: bool,
}

impl CpuBackend {
    /// A backend over `threads` worker threads (default: every available core).
    pub fn new(threads: Option<usize>) -> Result<Self> {
        const OP: &str = "CpuBackend::new";
        let threads = match threads {
            Some(0) => return Err(Error::config(OP, "threads must be at least 1")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("chorus-cpu-{i}"))
            .build()
            .map_err(|e| Error::Backend {
                op: OP,
                backend: "cpu",
                reason: format!("cannot start {threads} worker threads: {e}"),
            })?;
        Ok(Self {
            pool,
            threads,
            scratch: scratch::Scratch::default(),
            phase_upsampling: false,
        })
    }

    /// Asks the decoder for its upsampling as output phases (see
    /// [`Backend::phase_upsampling`]): the form fast GPU paths take, checked here against the
    /// transposed convolution in f32.
    pub fn with_phase_upsampling(mut self, on: bool) -> Self {
        self.phase_upsampling = on;
        self
    }

    /// Worker threads in the pool.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Elements currently held by the scratch arena (it only grows when an op needs more).
    pub fn scratch_elements(&self) -> usize {
        self.scratch.capacity()
    }

    /// Runs `f` on the backend's pool, so that rayon and `gemm` calls inside use its threads.
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

fn linear(be: &CpuBackend, a: LinearArgs<'_, CpuBackend>, accumulate: bool) -> Result<()> {
    let op = if accumulate { "linear_acc" } else { "linear" };
    let (n, k, m) = (a.n, a.k, a.m);
    check::at_least(op, "x", a.x.len(), n * k)?;
    check::at_least(op, "w", a.w.len(), m * k)?;
    check::at_least(op, "out", a.out.len(), n * m)?;
    let p = rowdot::RowDot {
        n,
        m,
        k,
        x: &a.x.0[..n * k],
        x_rs: k,
        w: &a.w.0[..m * k],
        accumulate,
        threads: be.threads,
    };
    be.install(|| p.run(&mut a.out.0[..n * m]));
    Ok(())
}

impl Backend for CpuBackend {
    type Buf = CpuBuf;
    type Ints = CpuInts;
    type Staging = CpuStaging;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn precision(&self) -> Precision {
        Precision::F32
    }

    fn phase_upsampling(&self) -> bool {
        self.phase_upsampling
    }

    fn device_description(&self) -> String {
        format!("CPU, {} threads", self.threads)
    }

    fn bytes_per_element(&self, _role: BufRole) -> usize {
        std::mem::size_of::<f32>()
    }

    fn zeros(&self, len: usize, _role: BufRole) -> Result<CpuBuf> {
        Ok(CpuBuf::new(try_filled(len, 0.0, "CpuBackend::zeros")?))
    }

    fn upload(&self, data: &[f32], _role: BufRole) -> Result<CpuBuf> {
        Ok(CpuBuf::new(data.to_vec()))
    }

    fn ints(&self, len: usize, value: i32) -> Result<CpuInts> {
        Ok(CpuInts(try_filled(len, value, "CpuBackend::ints")?))
    }

    fn download(&self, buf: &CpuBuf) -> Result<Vec<f32>> {
        Ok(buf.0.clone())
    }

    fn download_ints(&self, buf: &CpuInts) -> Result<Vec<i32>> {
        Ok(buf.0.clone())
    }

    fn staging(&self, dims: StagingDims) -> Result<CpuStaging> {
        Ok(CpuStaging::new(dims))
    }

    fn staging_view<'s>(&self, s: &'s mut CpuStaging) -> Result<StagingView<'s>> {
        Ok(StagingView {
            slots: &mut s.slots,
            codes: &mut s.codes,
            latents: &mut s.latents,
            pcm: &mut s.pcm,
        })
    }

    fn stage_in(
        &self,
        staging: &CpuStaging,
        slots: &mut CpuInts,
        codes: &mut CpuInts,
        latents: &mut CpuBuf,
    ) -> Result<()> {
        const OP: &str = "stage_in";
        check::at_least(OP, "slots", slots.len(), staging.slots.len())?;
        check::at_least(OP, "codes", codes.len(), staging.codes.len())?;
        check::at_least(OP, "latents", latents.len(), staging.latents.len())?;
        slots.0[..staging.slots.len()].copy_from_slice(&staging.slots);
        codes.0[..staging.codes.len()].copy_from_slice(&staging.codes);
        latents.0[..staging.latents.len()].copy_from_slice(&staging.latents);
        Ok(())
    }

    fn stage_out(&self, pcm: &CpuBuf, staging: &mut CpuStaging) -> Result<()> {
        let n = staging.pcm.len();
        check::at_least("stage_out", "pcm", pcm.len(), n)?;
        staging.pcm.copy_from_slice(&pcm.0[..n]);
        Ok(())
    }

    fn stage_in_audio(
        &self,
        staging: &CpuStaging,
        slots: &mut CpuInts,
        codes: &mut CpuInts,
        pcm: &mut CpuBuf,
    ) -> Result<()> {
        encode::stage_in_audio(staging, slots, codes, pcm)
    }

    fn stage_out_codes(
        &self,
        codes: &CpuInts,
        latents: &CpuBuf,
        staging: &mut CpuStaging,
    ) -> Result<()> {
        encode::stage_out_codes(codes, latents, staging)
    }

    fn replicate_history(&self, args: ReplicateArgs<'_, Self>) -> Result<()> {
        encode::replicate_history(args)
    }

    fn rvq_encode(&self, args: RvqEncodeArgs<'_, Self>) -> Result<()> {
        encode::rvq_encode(self, args)
    }

    fn embed_codes(&self, args: EmbedArgs<'_, Self>) -> Result<()> {
        elementwise::embed_codes(self, args)
    }

    fn conv1d(&self, args: Conv1dArgs<'_, Self>) -> Result<()> {
        conv::conv1d(self, args)
    }

    fn conv_tr1d(&self, args: ConvTr1dArgs<'_, Self>) -> Result<()> {
        convtr::conv_tr1d(self, args)
    }

    fn res_block(&self, args: ResBlockArgs<'_, Self>) -> Result<()> {
        args.apart(|c| conv::conv1d(self, c))
    }

    fn layer_norm(&self, args: LayerNormArgs<'_, Self>) -> Result<()> {
        elementwise::layer_norm(self, args)
    }

    fn linear(&self, args: LinearArgs<'_, Self>) -> Result<()> {
        linear(self, args, false)
    }

    fn linear_acc(&self, args: LinearArgs<'_, Self>) -> Result<()> {
        linear(self, args, true)
    }

    fn layer_norm_linear(&self, a: NormLinearArgs<'_, Self>) -> Result<()> {
        // The norm, the product and the activation apart (the CUDA backend fuses them for few rows).
        a.apart(
            |norm| elementwise::layer_norm(self, norm),
            |product| linear(self, product, false),
            |out, len| elementwise::gelu(self, out, len),
        )
    }

    fn attention(&self, args: AttentionArgs<'_, Self>) -> Result<()> {
        attention::attention(self, args)
    }

    fn gelu(&self, x: &mut CpuBuf, len: usize) -> Result<()> {
        elementwise::gelu(self, x, len)
    }

    fn advance_tokens(
        &self,
        tokens: &mut CpuInts,
        slots: &CpuInts,
        rows: usize,
        count: i32,
        dummy: usize,
    ) -> Result<()> {
        elementwise::advance_tokens(tokens, slots, rows, count, dummy)
    }

    fn reset_rows(&self, args: ResetRowsArgs<'_, Self>) -> Result<()> {
        elementwise::reset_rows(args)
    }

    fn reset_ints(
        &self,
        ints: &mut CpuInts,
        list: &CpuInts,
        count: usize,
        value: i32,
    ) -> Result<()> {
        elementwise::reset_ints(ints, list, count, value)
    }

    fn zero_row(&self, buf: &mut CpuBuf, row: usize, row_len: usize) -> Result<()> {
        check::at_least("zero_row", "buf", buf.len(), (row + 1) * row_len)?;
        buf.0[row * row_len..(row + 1) * row_len].fill(0.0);
        Ok(())
    }

    fn fill_ints(&self, ints: &mut CpuInts, index: usize, value: i32) -> Result<()> {
        check::at_least("fill_ints", "ints", ints.len(), index + 1)?;
        ints.0[index] = value;
        Ok(())
    }

    fn run(&self, _key: usize, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()> {
        program(self)
    }
}

/// Element types whose all-zero bit pattern is a valid value, equal to `T::default()`.
///
/// # Safety
/// Implement only for such types.
unsafe trait Zeroable: Copy + Default + PartialEq {}
// SAFETY: 0.0f32 is all-zero bits.
unsafe impl Zeroable for f32 {}
// SAFETY: 0i32 is all-zero bits.
unsafe impl Zeroable for i32 {}

/// `len` copies of `value`, or an error naming the bytes when the allocation fails: a stream or
/// song count too large for the machine is refused, not an abort of the process. Zeros come from
/// a zeroed allocation, so untouched pages (idle slots) cost no memory.
fn try_filled<T: Zeroable>(len: usize, value: T, op: &'static str) -> Result<Vec<T>> {
    let failed = || chorus_core::Error::OutOfMemory {
        op,
        bytes: len.saturating_mul(std::mem::size_of::<T>()),
    };
    if value != T::default() || len == 0 || std::mem::size_of::<T>() == 0 {
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| failed())?;
        v.resize(len, value);
        return Ok(v);
    }
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| failed())?;
    // SAFETY: `layout` has a non-zero size (len > 0, T not zero-sized); `Zeroable` types have
    // all-zero bits as their default value.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(failed());
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[T; len]`, and all
    // `len` elements are initialised (zero bits are a valid T here).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

#[cfg(test)]
mod alloc_tests {
    use super::*;

    #[test]
    fn an_allocation_too_large_is_an_error_not_an_abort() {
        let be = CpuBackend::new(Some(1)).unwrap();
        let e = be
            .zeros(usize::MAX / 16, BufRole::State)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot allocate"), "{e}");
        assert!(be.ints(usize::MAX / 16, 7).is_err());
        let z = be.zeros(1000, BufRole::State).unwrap();
        assert!(z.0.iter().all(|&x| x == 0.0));
        assert_eq!(be.ints(3, 5).unwrap().0, vec![5, 5, 5]);
    }
}
