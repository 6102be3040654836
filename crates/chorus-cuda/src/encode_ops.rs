//! Host side of the encoder ops: audio staging in, codes and latents out, replicate history and
//! the residual vector quantisation kernel.

use chorus_core::{ReplicateArgs, Result, RvqEncodeArgs};

use crate::backend::{CudaBackend, CudaBuf, CudaInts, CudaStaging, SCRATCH_ALIGN};
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};
use crate::ops::need;

/// Rows per block and threads of `rvq_encode` (as `RVQ_ROWS` / `RVQ_THREADS` in encode.cu).
const RVQ_ROWS: usize = 8;
const RVQ_THREADS: u32 = 256;
/// Shared memory a block may take without opting in.
const RVQ_MAX_SMEM: usize = 48 * 1024;
/// Up to this many rows, each level's search is spread over the codebook in chunks of
/// `RVQ_THREADS` codewords (one kernel per level): the one-kernel path would keep only
/// `rows / RVQ_ROWS` multiprocessors busy, each reading every codebook.
const RVQ_SPLIT_MAX_ROWS: usize = 256;

fn align(bytes: usize) -> usize {
    bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN
}

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
        let dev = staging.dev_pcm.as_ref();
        self.copy_in_floats(pcm.mem.ptr(), staging.pcm.ptr(), n_pcm, dev)
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
        let dev = staging.dev_latents.as_ref();
        self.copy_out_floats(staging.latents.ptr(), latents.mem.ptr(), n_lat, dev)
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
        if a.rows <= RVQ_SPLIT_MAX_ROWS {
            return self.rvq_split(a);
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

    /// The split path: projections once, then per level a search over codebook chunks and a pick.
    fn rvq_split(&self, a: RvqEncodeArgs<'_, Self>) -> Result<()> {
        const OP: &str = "rvq_encode";
        let f32s = std::mem::size_of::<f32>();
        let chunks = a.card.div_ceil(RVQ_THREADS as usize);
        let res_bytes = align(a.rows * 2 * a.cb_dim * f32s);
        let part_bytes = align(a.rows * chunks * f32s);
        let nq_bytes = align(a.rows * std::mem::size_of::<i32>());
        let base = self.scratch(res_bytes + 2 * part_bytes + nq_bytes)?;
        let res = base;
        let part_d = res + res_bytes as u64;
        let part_i = part_d + part_bytes as u64;
        let nq = part_i + part_bytes as u64;
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
        let rows_u32 = u32::try_from(a.rows).map_err(|_| cuda_error(OP, "too many rows"))?;
        self.launch(
            Kernel::RvqPrepare,
            Launch {
                grid: rows_u32,
                block: RVQ_THREADS,
                smem: (a.dim * f32s) as u32,
            },
            &mut kargs![&x, &proj, &codes, &res, &nq, &rows, &dim, &cbd, &books],
        )?;
        let tiles = a.rows.div_ceil(RVQ_ROWS);
        let search = Launch {
            grid: u32::try_from(tiles * chunks).map_err(|_| cuda_error(OP, "too many blocks"))?,
            block: RVQ_THREADS,
            smem: (RVQ_ROWS * a.cb_dim * f32s) as u32,
        };
        let pick = Launch {
            grid: rows_u32,
            block: RVQ_THREADS,
            smem: 0,
        };
        let chunks = chunks as i32;
        // Every level is launched (the graph is fixed); rows past their n_q return at once.
        for level in 0..books {
            self.launch(
                Kernel::RvqSearch,
                search,
                &mut kargs![
                    &res, &cbs, &norms, &nq, &part_d, &part_i, &rows, &cbd, &card, &level,
                    &semantic, &chunks
                ],
            )?;
            self.launch(
                Kernel::RvqPick,
                pick,
                &mut kargs![
                    &res, &cbs, &part_d, &part_i, &nq, &codes, &rows, &cbd, &card, &level,
                    &semantic, &chunks, &books
                ],
            )?;
        }
        Ok(())
    }
}
