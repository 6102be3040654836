//! `chorus_core::Backend` for [`CudaBackend`]: buffers, staging, fills, and the element-wise ops
//! (the convolutions and attention live in `conv_ops.rs`).

use chorus_core::{
    AttentionArgs, Backend, BufRole, Conv1dArgs, ConvTr1dArgs, EmbedArgs, LayerNormArgs,
    LinearArgs, NormLinearArgs, Precision, ReplicateArgs, ResBlockArgs, ResetRowsArgs, Result,
    RvqEncodeArgs, StagingDims, StagingView,
};
use half::bf16;

use crate::backend::{CudaBackend, CudaBuf, CudaInts, CudaStaging};
use crate::blas::Gemm;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};
use crate::memory::DevMem;

/// Warps per block of the LayerNorm kernel (one row per warp).
const LN_WARPS: usize = 8;
/// Threads of the single-block token counter kernel.
const TOKENS_THREADS: u32 = 256;
/// Threads per block of `reset_rows` and `reset_ints`.
const RESET_THREADS: u32 = 256;
/// Most blocks along a row and along the list of `reset_rows`: a step admits a few slots of a few
/// KB each, so a small grid that strides covers it in one wave.
const RESET_MAX_BLOCKS: usize = 64;

/// Buffers whose contents warm-up runs must leave as they were (see `CudaBackend::capture`).
fn preserved(role: BufRole) -> bool {
    !matches!(
        role,
        BufRole::Weight | BufRole::Table | BufRole::Pool | BufRole::Pool8
    )
}

/// A length check naming the op and the buffer (every op checks before it launches).
pub(crate) fn need(op: &'static str, name: &str, have: usize, want: usize) -> Result<()> {
    if have < want {
        return Err(cuda_error(
            op,
            format!("`{name}` holds {have} elements, {want} needed"),
        ));
    }
    Ok(())
}

impl CudaBackend {
    pub(crate) fn cast_to_storage(&self, src: u64, dst: u64, n: usize) -> Result<()> {
        let count = n as i64;
        self.launch(
            Kernel::CastF32ToT,
            self.grid_for(n)?,
            &mut kargs![&src, &dst, &count],
        )
    }

    /// Copies `n` f32 values from pinned `src` into the storage buffer `dst`, through the f32
    /// device copy `dev` when storage is bf16.
    pub(crate) fn copy_in_floats(
        &self,
        dst: u64,
        src: *const u8,
        n: usize,
        dev: Option<&DevMem>,
    ) -> Result<()> {
        match dev {
            None => self.copy_htod(dst, src, n * 4),
            Some(dev) => {
                self.copy_htod(dev.ptr(), src, n * 4)?;
                self.cast_to_storage(dev.ptr(), dst, n)
            }
        }
    }

    /// Copies `n` values of the storage buffer `src` to pinned `dst` as f32, through the f32
    /// device copy `dev` when storage is bf16.
    pub(crate) fn copy_out_floats(
        &self,
        dst: *mut u8,
        src: u64,
        n: usize,
        dev: Option<&DevMem>,
    ) -> Result<()> {
        match dev {
            None => self.copy_dtoh(dst, src, n * 4),
            Some(dev) => {
                self.cast_to_f32(src, dev.ptr(), n)?;
                self.copy_dtoh(dst, dev.ptr(), n * 4)
            }
        }
    }

    pub(crate) fn cast_to_f32(&self, src: u64, dst: u64, n: usize) -> Result<()> {
        let count = n as i64;
        self.launch(
            Kernel::CastTToF32,
            self.grid_for(n)?,
            &mut kargs![&src, &dst, &count],
        )
    }
}

impl Backend for CudaBackend {
    type Buf = CudaBuf;
    type Ints = CudaInts;
    type Staging = CudaStaging;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn precision(&self) -> Precision {
        self.precision
    }

    fn phase_upsampling(&self) -> bool {
        // With the wide kernel on, the phase form's two-tap convolutions take it at large batches.
        self.phase_upsampling
            || (self.conv_wide && self.conv_mma && self.precision == Precision::Bf16)
    }

    fn device_description(&self) -> String {
        self.describe().to_string()
    }

    fn bytes_per_element(&self, role: BufRole) -> usize {
        self.role_bytes(role)
    }

    fn zeros(&self, len: usize, role: BufRole) -> Result<CudaBuf> {
        let bytes = len * self.role_bytes(role);
        let mem = self.alloc(bytes, preserved(role))?;
        self.memset(mem.ptr(), bytes)?;
        self.sync()?;
        Ok(CudaBuf {
            mem,
            len,
            f32: role == BufRole::Table,
            fp8: role == BufRole::Pool8,
        })
    }

    fn upload(&self, data: &[f32], role: BufRole) -> Result<CudaBuf> {
        if role == BufRole::Pool8 {
            return Err(cuda_error(
                "upload",
                "an 8-bit KV cache is written by paged attention only: allocate it with zeros",
            ));
        }
        let mem = self.alloc(data.len() * self.role_bytes(role), preserved(role))?;
        let f32_storage = self.precision == Precision::F32 || role == BufRole::Table;
        match if f32_storage {
            Precision::F32
        } else {
            Precision::Bf16
        } {
            Precision::F32 => {
                self.copy_htod(mem.ptr(), data.as_ptr() as *const u8, data.len() * 4)?
            }
            Precision::Bf16 => {
                let host: Vec<bf16> = data.iter().map(|&v| bf16::from_f32(v)).collect();
                self.copy_htod(mem.ptr(), host.as_ptr() as *const u8, host.len() * 2)?;
                // `host` is pageable: wait for the copy before it is dropped.
                self.sync()?;
            }
        }
        self.sync()?;
        Ok(CudaBuf {
            mem,
            len: data.len(),
            f32: f32_storage,
            fp8: false,
        })
    }

    fn ints(&self, len: usize, value: i32) -> Result<CudaInts> {
        let mem = self.alloc(len * 4, true)?;
        self.memset32(mem.ptr(), value, len)?;
        self.sync()?;
        Ok(CudaInts { mem, len })
    }

    fn download(&self, buf: &CudaBuf) -> Result<Vec<f32>> {
        self.bind()?;
        self.sync()?;
        if buf.fp8 {
            // The E4M3 values themselves (their scales are a separate buffer).
            let mut raw = vec![0u8; buf.len];
            self.copy_dtoh(raw.as_mut_ptr(), buf.mem.ptr(), buf.len)?;
            self.sync()?;
            return Ok(raw.into_iter().map(chorus_core::fp8::e4m3_to_f32).collect());
        }
        match if buf.f32 {
            Precision::F32
        } else {
            self.precision
        } {
            Precision::F32 => {
                let mut out = vec![0f32; buf.len];
                self.copy_dtoh(out.as_mut_ptr() as *mut u8, buf.mem.ptr(), buf.len * 4)?;
                self.sync()?;
                Ok(out)
            }
            Precision::Bf16 => {
                let mut raw = vec![bf16::ZERO; buf.len];
                self.copy_dtoh(raw.as_mut_ptr() as *mut u8, buf.mem.ptr(), buf.len * 2)?;
                self.sync()?;
                Ok(raw.iter().map(|v| v.to_f32()).collect())
            }
        }
    }

    fn download_ints(&self, buf: &CudaInts) -> Result<Vec<i32>> {
        self.bind()?;
        self.sync()?;
        let mut out = vec![0i32; buf.len];
        self.copy_dtoh(out.as_mut_ptr() as *mut u8, buf.mem.ptr(), buf.len * 4)?;
        self.sync()?;
        Ok(out)
    }

    fn staging(&self, dims: StagingDims) -> Result<CudaStaging> {
        self.new_staging(dims)
    }

    fn staging_view<'s>(&self, staging: &'s mut CudaStaging) -> Result<StagingView<'s>> {
        // Steps sync before returning, but a view must never race a replay still reading inputs.
        self.bind()?;
        self.sync()?;
        self.staging_view_nowait(staging)
    }

    fn staging_view_nowait<'s>(&self, staging: &'s mut CudaStaging) -> Result<StagingView<'s>> {
        let CudaStaging {
            slots,
            codes,
            latents,
            pcm,
            ..
        } = staging;
        Ok(StagingView {
            slots: slots.as_mut_slice(),
            codes: codes.as_mut_slice(),
            latents: latents.as_mut_slice(),
            pcm: pcm.as_mut_slice(),
        })
    }

    fn stage_in(
        &self,
        staging: &CudaStaging,
        slots: &mut CudaInts,
        codes: &mut CudaInts,
        latents: &mut CudaBuf,
    ) -> Result<()> {
        let _timer = self.op_timer("stage_in");
        const OP: &str = "stage_in";
        let dims = staging.dims;
        let n_codes = dims.rows * dims.codebooks;
        let n_lat = dims.rows * dims.latent_dim;
        need(OP, "slots", slots.len, dims.rows)?;
        need(OP, "codes", codes.len, n_codes)?;
        need(OP, "latents", latents.len, n_lat)?;
        self.copy_htod(slots.mem.ptr(), staging.slots.ptr(), dims.rows * 4)?;
        self.copy_htod(codes.mem.ptr(), staging.codes.ptr(), n_codes * 4)?;
        let dev = staging.dev_latents.as_ref();
        self.copy_in_floats(latents.mem.ptr(), staging.latents.ptr(), n_lat, dev)
    }

    fn stage_out(&self, pcm: &CudaBuf, staging: &mut CudaStaging) -> Result<()> {
        let _timer = self.op_timer("stage_out");
        let n = staging.dims.rows * staging.dims.samples;
        need("stage_out", "pcm", pcm.len, n)?;
        let dev = staging.dev_pcm.as_ref();
        self.copy_out_floats(staging.pcm.ptr(), pcm.mem.ptr(), n, dev)
    }

    fn stage_in_audio(
        &self,
        staging: &CudaStaging,
        slots: &mut CudaInts,
        codes: &mut CudaInts,
        pcm: &mut CudaBuf,
    ) -> Result<()> {
        let _timer = self.op_timer("stage_in_audio");
        self.op_stage_in_audio(staging, slots, codes, pcm)
    }

    fn stage_out_codes(
        &self,
        codes: &CudaInts,
        latents: &CudaBuf,
        staging: &mut CudaStaging,
    ) -> Result<()> {
        let _timer = self.op_timer("stage_out_codes");
        self.op_stage_out_codes(codes, latents, staging)
    }

    fn replicate_history(&self, args: ReplicateArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("replicate_history");
        self.op_replicate_history(args)
    }

    fn rvq_encode(&self, args: RvqEncodeArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("rvq_encode");
        self.op_rvq_encode(args)
    }

    fn embed_codes(&self, a: EmbedArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("embed_codes");
        let (codes, table, latents, out) = (
            a.codes.mem.ptr(),
            a.table.mem.ptr(),
            a.latents.mem.ptr(),
            a.out.mem.ptr(),
        );
        let (rows, codebooks, card, dim) = (
            a.rows as i32,
            a.codebooks as i32,
            a.cardinality as i32,
            a.dim as i32,
        );
        self.launch(
            Kernel::EmbedCodes,
            self.grid_for(a.rows * a.dim)?,
            &mut kargs![&codes, &table, &latents, &out, &rows, &codebooks, &card, &dim],
        )
    }

    fn conv1d(&self, args: Conv1dArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("conv1d");
        self.op_conv1d(args)
    }

    fn res_block(&self, args: ResBlockArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("res_block");
        self.op_res_block(args)
    }

    fn conv_tr1d(&self, args: ConvTr1dArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("conv_tr1d");
        self.op_conv_tr1d(args)
    }

    fn layer_norm(&self, a: LayerNormArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("layer_norm");
        self.op_layer_norm(a)
    }

    fn linear(&self, a: LinearArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("linear");
        self.op_linear(a, false)
    }

    fn linear_acc(&self, a: LinearArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("linear_acc");
        self.op_linear(a, true)
    }

    fn attention(&self, args: AttentionArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("attention");
        self.op_attention(args)
    }

    fn layer_norm_linear(&self, a: NormLinearArgs<'_, Self>) -> Result<()> {
        let _timer = self.op_timer("layer_norm_linear");
        let (n, k, m) = (a.norm.n, a.norm.dim, a.m);
        need("layer_norm_linear", "x", a.norm.x.len, n * k)?;
        need("layer_norm_linear", "gamma", a.norm.gamma.len, k)?;
        need("layer_norm_linear", "beta", a.norm.beta.len, k)?;
        need("layer_norm_linear", "norm", a.norm.out.len, n * k)?;
        need("layer_norm_linear", "w", a.w.len, m * k)?;
        need("layer_norm_linear", "out", a.out.len, n * m)?;
        if self.gemv_norm_fits(n, k, m) {
            return self.gemv_norm(a);
        }
        a.apart(
            |norm| self.op_layer_norm(norm),
            |product| self.op_linear(product, false),
            |out, len| self.op_gelu(out, len),
        )
    }

    fn gelu(&self, x: &mut CudaBuf, len: usize) -> Result<()> {
        let _timer = self.op_timer("gelu");
        self.op_gelu(x, len)
    }

    fn advance_tokens(
        &self,
        tokens: &mut CudaInts,
        slots: &CudaInts,
        rows: usize,
        count: i32,
        dummy: usize,
    ) -> Result<()> {
        let (t, s) = (tokens.mem.ptr(), slots.mem.ptr());
        let (r, d) = (rows as i32, dummy as i32);
        self.launch(
            Kernel::AdvanceTokens,
            Launch {
                grid: 1,
                block: TOKENS_THREADS,
                smem: 0,
            },
            &mut kargs![&t, &s, &r, &count, &d],
        )
    }

    fn reset_rows(&self, a: ResetRowsArgs<'_, Self>) -> Result<()> {
        const OP: &str = "reset_rows";
        let _timer = self.op_timer(OP);
        let len = a.row_len;
        if len == 0 || a.count == 0 {
            return Ok(());
        }
        // Rows move as the kernel's T: f32 tables under bf16 and 8-bit pools are other layouts.
        let other = |b: &CudaBuf| b.fp8 || (b.f32 && self.precision != Precision::F32);
        if other(a.buf) || a.src.is_some_and(other) {
            return Err(cuda_error(OP, "takes buffers of the backend's precision"));
        }
        need(OP, "list", a.list.len, a.count)?;
        if let Some(src) = a.src {
            need(OP, "src", src.len, len)?;
        }
        let total = i32::try_from(a.buf.len / len)
            .map_err(|_| cuda_error(OP, format!("{} rows exceed i32", a.buf.len / len)))?;
        let (buf, list) = (a.buf.mem.ptr(), a.list.mem.ptr());
        let src = a.src.map_or(0, |s| s.mem.ptr());
        let (count, row_len) = (a.count as i32, len as i64);
        let along = len.div_ceil(RESET_THREADS as usize).min(RESET_MAX_BLOCKS);
        let over = a.count.min(RESET_MAX_BLOCKS);
        let along_i = along as i32;
        self.launch(
            Kernel::ResetRows,
            Launch {
                grid: (along * over) as u32,
                block: RESET_THREADS,
                smem: 0,
            },
            &mut kargs![&buf, &src, &list, &count, &row_len, &total, &along_i],
        )
    }

    fn reset_ints(
        &self,
        ints: &mut CudaInts,
        list: &CudaInts,
        count: usize,
        value: i32,
    ) -> Result<()> {
        const OP: &str = "reset_ints";
        if count == 0 {
            return Ok(());
        }
        need(OP, "list", list.len, count)?;
        let (p, l) = (ints.mem.ptr(), list.mem.ptr());
        let (c, total) = (count as i32, ints.len as i32);
        self.launch(
            Kernel::ResetInts,
            self.grid_for(count)?,
            &mut kargs![&p, &l, &c, &value, &total],
        )
    }

    fn zero_row(&self, buf: &mut CudaBuf, row: usize, row_len: usize) -> Result<()> {
        need("zero_row", "buf", buf.len, (row + 1) * row_len)?;
        self.bind()?;
        let es = self.esize();
        self.memset(buf.mem.ptr() + (row * row_len * es) as u64, row_len * es)
    }

    fn fill_ints(&self, ints: &mut CudaInts, index: usize, value: i32) -> Result<()> {
        need("fill_ints", "ints", ints.len, index + 1)?;
        self.bind()?;
        self.memset32(ints.mem.ptr() + (index * 4) as u64, value, 1)
    }

    fn run(&self, key: usize, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()> {
        self.bind()?;
        if self.profiling() {
            return program(self);
        }
        if self.replay(key)? {
            return Ok(());
        }
        self.capture(key, program)
    }
}

impl CudaBackend {
    /// `linear` and `linear_acc`: the GEMV kernel for few rows, else cuBLAS (`beta` 1 to
    /// accumulate into `out`).
    fn op_linear(&self, a: LinearArgs<'_, Self>, accumulate: bool) -> Result<()> {
        let op = if accumulate { "linear_acc" } else { "linear" };
        need(op, "x", a.x.len, a.n * a.k)?;
        need(op, "w", a.w.len, a.m * a.k)?;
        need(op, "out", a.out.len, a.n * a.m)?;
        if self.gemv_fits(&a) {
            return self.gemv(a, accumulate);
        }
        self.blas.gemm(Gemm {
            trans_a: true,
            trans_b: false,
            m: a.m,
            n: a.n,
            k: a.k,
            a: a.w.mem.ptr(),
            lda: a.k,
            b: a.x.mem.ptr(),
            ldb: a.k,
            c: a.out.mem.ptr(),
            ldc: a.m,
            beta: if accumulate { 1.0 } else { 0.0 },
        })
    }

    fn op_layer_norm(&self, a: LayerNormArgs<'_, Self>) -> Result<()> {
        let (x, g, b, out) = (
            a.x.mem.ptr(),
            a.gamma.mem.ptr(),
            a.beta.mem.ptr(),
            a.out.mem.ptr(),
        );
        let (n, dim, eps) = (a.n as i32, a.dim as i32, a.eps);
        let cfg = Launch {
            grid: a.n.div_ceil(LN_WARPS) as u32,
            block: (LN_WARPS * 32) as u32,
            smem: 0,
        };
        self.launch(
            Kernel::LayerNorm,
            cfg,
            &mut kargs![&x, &g, &b, &out, &n, &dim, &eps],
        )
    }

    fn op_gelu(&self, x: &mut CudaBuf, len: usize) -> Result<()> {
        let (p, n) = (x.mem.ptr(), len as i64);
        self.launch(Kernel::Gelu, self.grid_for(len)?, &mut kargs![&p, &n])
    }
}
