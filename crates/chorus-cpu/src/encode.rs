//! Encoder-only ops: audio staging in, codes out, replicate-padded history, residual vector
//! quantisation.

use crate::{check, math, CpuBackend, CpuBuf, CpuInts, CpuStaging};
use chorus_core::{ReplicateArgs, Result, RvqEncodeArgs, NO_CODE};
use rayon::prelude::*;

pub(crate) fn stage_in_audio(
    staging: &CpuStaging,
    slots: &mut CpuInts,
    codes: &mut CpuInts,
    pcm: &mut CpuBuf,
) -> Result<()> {
    const OP: &str = "stage_in_audio";
    check::at_least(OP, "slots", slots.len(), staging.slots.len())?;
    check::at_least(OP, "codes", codes.len(), staging.codes.len())?;
    check::at_least(OP, "pcm", pcm.len(), staging.pcm.len())?;
    slots.0[..staging.slots.len()].copy_from_slice(&staging.slots);
    codes.0[..staging.codes.len()].copy_from_slice(&staging.codes);
    pcm.0[..staging.pcm.len()].copy_from_slice(&staging.pcm);
    Ok(())
}

pub(crate) fn stage_out_codes(
    codes: &CpuInts,
    latents: &CpuBuf,
    staging: &mut CpuStaging,
) -> Result<()> {
    const OP: &str = "stage_out_codes";
    let (nc, nl) = (staging.codes.len(), staging.latents.len());
    check::at_least(OP, "codes", codes.len(), nc)?;
    check::at_least(OP, "latents", latents.len(), nl)?;
    staging.codes.copy_from_slice(&codes.0[..nc]);
    staging.latents.copy_from_slice(&latents.0[..nl]);
    Ok(())
}

pub(crate) fn replicate_history(a: ReplicateArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "replicate_history";
    let (c, h) = (a.channels, a.history);
    check::at_least(OP, "x", a.x.len(), a.rows * a.time * c)?;
    check::at_least(OP, "slots", a.slots.len(), a.rows)?;
    let total_rows = a.tokens.len();
    check::at_least(OP, "state", a.state.len(), total_rows * h * c)?;
    for r in 0..a.rows {
        let slot = check::slot(OP, a.slots.0[r], total_rows)?;
        if a.tokens.0[slot] != 0 {
            continue;
        }
        let first = &a.x.0[r * a.time * c..r * a.time * c + c];
        for col in a.state.0[slot * h * c..(slot + 1) * h * c].chunks_exact_mut(c) {
            col.copy_from_slice(first);
        }
    }
    Ok(())
}

pub(crate) fn rvq_encode(be: &CpuBackend, a: RvqEncodeArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "rvq_encode";
    let (rows, dim, cbd, card, books) = (a.rows, a.dim, a.cb_dim, a.card, a.books);
    check::at_least(OP, "x", a.x.len(), rows * dim)?;
    check::at_least(OP, "proj", a.proj.len(), 2 * cbd * dim)?;
    check::at_least(OP, "codebooks", a.codebooks.len(), books * cbd * card)?;
    check::at_least(OP, "norms", a.norms.len(), books * card)?;
    check::at_least(OP, "codes", a.codes.len(), rows * books)?;
    let (x, proj, cbs, norms) = (&a.x.0, &a.proj.0, &a.codebooks.0, &a.norms.0);
    let semantic = a.semantic_books;
    let codes = &mut a.codes.0[..rows * books];
    // Each row gets its own residual and scores from the arena: no allocation in a step.
    let per_row = cbd + card;
    be.scratch.with(rows * per_row, |scratch| {
        be.install(|| {
            codes
                .par_chunks_mut(books)
                .zip(scratch.par_chunks_mut(per_row))
                .enumerate()
                .for_each(|(r, (row_codes, work))| {
                    let n_q = row_codes
                        .iter()
                        .position(|&c| c == NO_CODE)
                        .unwrap_or(books);
                    let xr = &x[r * dim..(r + 1) * dim];
                    let (residual, scores) = work.split_at_mut(cbd);
                    for level in 0..n_q {
                        if level == 0 || level == semantic {
                            // Each half quantises its own projection of the latent, not a residual.
                            let half = usize::from(level == semantic && semantic > 0);
                            for (o, res) in residual.iter_mut().enumerate() {
                                let row = (half * cbd + o) * dim;
                                *res = math::dot(&proj[row..row + dim], xr);
                            }
                        }
                        let book = &cbs[level * cbd * card..(level + 1) * cbd * card];
                        scores.fill(0.0);
                        for (d, &rd) in residual.iter().enumerate() {
                            math::axpy(scores, rd, &book[d * card..(d + 1) * card]);
                        }
                        // argmin of |e|^2 - 2 r.e, the squared distance less |r|^2; first index on ties.
                        let nrm = &norms[level * card..(level + 1) * card];
                        let mut best = (f32::INFINITY, 0usize);
                        for (c, (&n, &s)) in nrm.iter().zip(scores.iter()).enumerate() {
                            let dist = n - 2.0 * s;
                            if dist < best.0 {
                                best = (dist, c);
                            }
                        }
                        row_codes[level] = best.1 as i32;
                        for (d, res) in residual.iter_mut().enumerate() {
                            *res -= book[d * card + best.1];
                        }
                    }
                });
        })
    });
    Ok(())
}
