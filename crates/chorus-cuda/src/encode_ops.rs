//! Host side of the encoder ops: audio staging in, codes and latents out, replicate history and
//! the residual vector quantisation kernel.

use chorus_core::{ReplicateArgs, Result, RvqEncodeArgs};

use crate::backend::{CudaBackend, CudaBuf, CudaInts, CudaStaging};
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};
use crate::ops::need;

/// Rows per block and threads of `rvq_encode` (as `RVQ_ROWS` / `RVQ_THREADS` in encode.cu).
const RVQ_ROWS: usize = 8;
const RVQ_THREADS: u32 = 256;
/// Shared memory a block may take without opting in.
const RVQ_MAX_SMEM: usize = 48 * 1024;

impl CudaBackend {
    pub(crate) fn op_stage_in_audio(
        &self,
        staging: &CudaStaging,
        slots: &mut CudaInts,
        codes: &mut CudaInts,
        pcm: &mut CudaBuf,
    ) -> Result<()> {
        const OP: &str = "stage_in_audio";
        let dims = staging.dims;
        let n_codes = dims.rows * dims.codebooks;
        let n_pcm = dims.rows * dims.samples;
        need(OP, "slots", slots.len, dims.rows)?;
        need(OP, "codes", codes.len, n_codes)?;
        need(OP, "pcm", pcm.len, n_pcm)?;
        self.copy_htod(slots.mem.ptr(), staging.slots.ptr(), dims.rows * 4)?;
        self.copy_htod(codes.mem.ptr(), staging.codes.ptr(), n_codes * 4)?;
        match &staging.dev_pcm {
            None => self.copy_htod(pcm.mem.ptr(), staging.pcm.ptr(), n_pcm * 4),
            Some(dev) => {
                self.copy_htod(dev.ptr(), staging.pcm.ptr(), n_pcm * 4)?;
                self.cast_to_storage(dev.ptr(), pcm.mem.ptr(), n_pcm)
            }
        }
    }

    pub(crate) fn op_stage_out_codes(
        &self,
        codes: &CudaInts,
        latents: &CudaBuf,
        staging: &mut CudaStaging,
    ) -> Result<()> {
        const OP: &str = "stage_out_codes";
        let dims = staging.dims;
        let n_codes = dims.rows * dims.codebooks;
        let n_lat = dims.rows * dims.latent_dim;
        need(OP, "codes", codes.len, n_codes)?;
        need(OP, "latents", latents.len, n_lat)?;
        self.copy_dtoh(staging.codes.ptr(), codes.mem.ptr(), n_codes * 4)?;
        match &staging.dev_latents {
            None => self.copy_dtoh(staging.latents.ptr(), latents.mem.ptr(), n_lat * 4),
            Some(dev) => {
                self.cast_to_f32(latents.mem.ptr(), dev.ptr(), n_lat)?;
                self.copy_dtoh(staging.latents.ptr(), dev.ptr(), n_lat * 4)
            }
        }
    }

    pub(crate) fn op_replicate_history(&self, a: ReplicateArgs<'_, Self>) -> Result<()> {
        const OP: &str = "replicate_history";
        let per = a.history * a.channels;
        need(OP, "x", a.x.len, a.rows * a.time * a.channels)?;
        need(OP, "slots", a.slots.len, a.rows)?;
        need(OP, "state", a.state.len, a.tokens.len * per)?;
        let (x, state, tokens, slots) = (
            a.x.mem.ptr(),
            a.state.mem.ptr(),
            a.tokens.mem.ptr(),
            a.slots.mem.ptr(),
        );
        let (rows, time, channels, history) = (
            a.rows as i32,
            a.time as i32,
            a.channels as i32,
            a.history as i32,
        );
        self.launch(
            Kernel::ReplicateHistory,
            self.grid_for(a.rows * per)?,
            &mut kargs![&x, &state, &tokens, &slots, &rows, &time, &channels, &history],
        )
    }

    pub(crate) fn op_rvq_encode(&self, a: RvqEncodeArgs<'_, Self>) -> Result<()> {
        const OP: &str = "rvq_encode";
        need(OP, "x", a.x.len, a.rows * a.dim)?;
        need(OP, "proj", a.proj.len, 2 * a.cb_dim * a.dim)?;
        need(
            OP,
            "codebooks",
            a.codebooks.len,
            a.books * a.cb_dim * a.card,
        )?;
        need(OP, "norms", a.norms.len, a.books * a.card)?;
        need(OP, "codes", a.codes.len, a.rows * a.books)?;
        let smem = RVQ_ROWS * (a.dim + a.cb_dim) * std::mem::size_of::<f32>();
        if smem > RVQ_MAX_SMEM {
            return Err(cuda_error(
                OP,
                format!(
                    "latent dim {} + codebook dim {} need {smem} bytes of shared memory, at most {RVQ_MAX_SMEM}",
                    a.dim, a.cb_dim
                ),
            ));
        }
        let cfg = Launch {
            grid: u32::try_from(a.rows.div_ceil(RVQ_ROWS))
                .map_err(|_| cuda_error(OP, "too many rows"))?,
            block: RVQ_THREADS,
            smem: smem as u32,
        };
        let (x, proj, cbs, norms, codes) = (
            a.x.mem.ptr(),
            a.proj.mem.ptr(),
            a.codebooks.mem.ptr(),
            a.norms.mem.ptr(),
            a.codes.mem.ptr(),
        );
        let (rows, dim, cbd, card, books, semantic) = (
            a.rows as i32,
            a.dim as i32,
            a.cb_dim as i32,
            a.card as i32,
            a.books as i32,
            a.semantic_books as i32,
        );
        self.launch(
            Kernel::RvqEncode,
            cfg,
            &mut kargs![
                &x, &proj, &cbs, &norms, &codes, &rows, &dim, &cbd, &card, &books, &semantic
            ],
        )
    }
}
