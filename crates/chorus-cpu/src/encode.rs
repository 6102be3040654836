//! Encoder-only ops: audio staging in, codes out, replicate-padded history, residual vector
//! quantisation.

use crate::simd::dispatch;
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

/// Rows quantised together: they share each codebook tile while it sits in L2 (a row alone would
/// stream all of a level's codebook, 2 MiB at Mimi's sizes, from memory for itself).
const RVQ_ROW_BLOCK: usize = 8;
/// Codebook entries per tile: 256 dims x 256 entries of f32 is 256 KiB, half of a 512 KiB L2
/// (tiles of 512 entries filled it and ran 25% slower there; ops_bench's `rvq_encode`).
const RVQ_ENTRY_TILE: usize = 256;

pub(crate) fn rvq_encode(be: &CpuBackend, a: RvqEncodeArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "rvq_encode";
    let (rows, dim, cbd, card, books) = (a.rows, a.dim, a.cb_dim, a.card, a.books);
    check::at_least(OP, "x", a.x.len(), rows * dim)?;
    check::at_least(OP, "proj", a.proj.len(), 2 * cbd * dim)?;
    check::at_least(OP, "codebooks", a.codebooks.len(), books * cbd * card)?;
    check::at_least(OP, "norms", a.norms.len(), books * card)?;
    check::at_least(OP, "codes", a.codes.len(), rows * books)?;
    if rows == 0 {
        return Ok(());
    }
    let q = Rvq {
        x: &a.x.0,
        proj: &a.proj.0,
        cbs: &a.codebooks.0,
        norms: &a.norms.0,
        dim,
        cbd,
        card,
        semantic: a.semantic_books,
    };
    let codes = &mut a.codes.0[..rows * books];
    // Each block of rows gets its residuals and scores from the arena: no allocation in a step.
    let per_block = RVQ_ROW_BLOCK * (cbd + card);
    let blocks = rows.div_ceil(RVQ_ROW_BLOCK);
    be.scratch.with(blocks * per_block, |scratch| {
        be.install(|| {
            codes
                .par_chunks_mut(books * RVQ_ROW_BLOCK)
                .zip(scratch.par_chunks_mut(per_block))
                .enumerate()
                .for_each(|(b, (block_codes, work))| {
                    q.block(b * RVQ_ROW_BLOCK, block_codes, books, work)
                });
        })
    });
    Ok(())
}

/// Codebook entries of one register block of scores (two AVX2 vectors, one AVX-512), and the rows
/// that share each load of the codebook's values: a whole block of rows (4 measured slower).
const SCORE_LANES: usize = 16;
const SCORE_ROWS: usize = RVQ_ROW_BLOCK;
/// Codebook dims summed in registers before the partial scores go back to memory.
const SCORE_DIMS: usize = 16;

/// The entries `e0..e1` of a codebook of `card` entries of `cbd` dims.
#[derive(Clone, Copy)]
struct ScoreTile {
    cbd: usize,
    card: usize,
    e0: usize,
    e1: usize,
}

/// `scores[r * card + e] = sum_d residuals[r * cbd + d] * book[d * card + e]` for rows `rows`
/// and the tile's entries: from 0, d in order, a multiply then an add each (one row's order, as
/// an axpy per dim gives it), in registers for `R` rows x [`SCORE_LANES`] entries at a time.
#[inline(always)]
fn score_rows<const R: usize>(
    rows: [usize; R],
    residuals: &[f32],
    book: &[f32],
    scores: &mut [f32],
    t: ScoreTile,
) {
    let ScoreTile { cbd, card, e0, e1 } = t;
    let res = rows.map(|r| &residuals[r * cbd..(r + 1) * cbd]);
    let full = e0 + (e1 - e0) / SCORE_LANES * SCORE_LANES;
    // Dims in blocks, entries inside: each of a block's codebook rows is read in order (a
    // stream the prefetcher follows; one chunk's column alone strides 8 KiB per dim), and the
    // partial scores wait in `scores`, in L1, between blocks.
    for d0 in (0..cbd).step_by(SCORE_DIMS) {
        let d1 = (d0 + SCORE_DIMS).min(cbd);
        for e in (e0..full).step_by(SCORE_LANES) {
            let mut acc = [[0.0_f32; SCORE_LANES]; R];
            if d0 > 0 {
                for (a, r) in acc.iter_mut().zip(rows) {
                    a.copy_from_slice(&scores[r * card + e..r * card + e + SCORE_LANES]);
                }
            }
            for d in d0..d1 {
                let mut b = [0.0_f32; SCORE_LANES];
                b.copy_from_slice(&book[d * card + e..d * card + e + SCORE_LANES]);
                for (a, x) in acc.iter_mut().zip(res.map(|row| row[d])) {
                    for (av, bv) in a.iter_mut().zip(b) {
                        *av += x * bv;
                    }
                }
            }
            for (a, r) in acc.iter().zip(rows) {
                scores[r * card + e..r * card + e + SCORE_LANES].copy_from_slice(a);
            }
        }
    }
    for e in full..e1 {
        for (row, r) in res.iter().zip(rows) {
            let mut s = 0.0_f32;
            for (d, &x) in row.iter().enumerate() {
                s += x * book[d * card + e];
            }
            scores[r * card + e] = s;
        }
    }
}

/// The operands of one quantisation, shared by every block of rows.
struct Rvq<'a> {
    x: &'a [f32],
    proj: &'a [f32],
    cbs: &'a [f32],
    norms: &'a [f32],
    dim: usize,
    cbd: usize,
    card: usize,
    semantic: usize,
}

impl Rvq<'_> {
    /// Quantises the rows from `r0` whose codes are `codes` (`books` per row), level by level;
    /// every score is summed over the codebook's dims in order, as one row alone would sum it.
    fn block(&self, r0: usize, codes: &mut [i32], books: usize, work: &mut [f32]) {
        rvq_block(self, r0, codes, books, work)
    }
}

dispatch! {
    /// [`Rvq::block`] compiled for the CPU's vector width: multiplies and adds as written (no
    /// contraction), so every width gives the same bits.
    fn rvq_block(q: &Rvq<'_>, r0: usize, codes: &mut [i32], books: usize, work: &mut [f32]) {
        let (dim, cbd, card) = (q.dim, q.cbd, q.card);
        let n = codes.len() / books;
        let (residuals, scores) = work.split_at_mut(RVQ_ROW_BLOCK * cbd);
        let mut n_q = [0usize; RVQ_ROW_BLOCK];
        for (nq, c) in n_q.iter_mut().zip(codes.chunks_exact(books)) {
            *nq = c.iter().position(|&c| c == NO_CODE).unwrap_or(books);
        }
        let levels = n_q.iter().copied().max().unwrap_or(0);
        for level in 0..levels {
            let live = |r: &usize| level < n_q[*r];
            if level == 0 || level == q.semantic {
                // Each half quantises its own projection of the latent, not a residual.
                let half = usize::from(level == q.semantic && q.semantic > 0);
                for r in (0..n).filter(live) {
                    let xr = &q.x[(r0 + r) * dim..(r0 + r + 1) * dim];
                    let res = &mut residuals[r * cbd..(r + 1) * cbd];
                    for (o, v) in res.iter_mut().enumerate() {
                        let row = (half * cbd + o) * dim;
                        *v = math::dot(&q.proj[row..row + dim], xr);
                    }
                }
            }
            let book = &q.cbs[level * cbd * card..(level + 1) * cbd * card];
            let mut rows = [0usize; RVQ_ROW_BLOCK];
            let mut live_rows = 0;
            for r in (0..n).filter(live) {
                rows[live_rows] = r;
                live_rows += 1;
            }
            for e0 in (0..card).step_by(RVQ_ENTRY_TILE) {
                let t = ScoreTile {
                    cbd,
                    card,
                    e0,
                    e1: (e0 + RVQ_ENTRY_TILE).min(card),
                };
                let mut groups = rows[..live_rows].chunks_exact(SCORE_ROWS);
                for g in &mut groups {
                    let mut full = [0usize; SCORE_ROWS];
                    full.copy_from_slice(g);
                    score_rows(full, residuals, book, scores, t);
                }
                // The rest one at a time (blocks of rows are mostly full).
                for &r in groups.remainder() {
                    score_rows([r], residuals, book, scores, t);
                }
            }
            // argmin of |e|^2 - 2 r.e, the squared distance less |r|^2; first index on ties.
            let nrm = &q.norms[level * card..(level + 1) * card];
            for r in (0..n).filter(live) {
                let mut best = (f32::INFINITY, 0usize);
                for (c, (&nm, &s)) in nrm
                    .iter()
                    .zip(&scores[r * card..(r + 1) * card])
                    .enumerate()
                {
                    let dist = nm - 2.0 * s;
                    if dist < best.0 {
                        best = (dist, c);
                    }
                }
                codes[r * books + level] = best.1 as i32;
                for (d, v) in residuals[r * cbd..(r + 1) * cbd].iter_mut().enumerate() {
                    *v -= book[d * card + best.1];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Backend, BufRole};

    /// Sizes that leave a partial row block and a partial entry tile.
    const ROWS: usize = 19;
    const DIM: usize = 24;
    const CBD: usize = 16;
    const CARD: usize = RVQ_ENTRY_TILE + 188;
    const BOOKS: usize = 6;
    const SEMANTIC: usize = 1;

    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The register blocks of scores (a full group of rows, one row alone, a tile with a tail
    /// of entries) give the bits of the per-dim sum from 0 in order.
    #[test]
    fn score_blocks_keep_the_per_dim_order_bit_for_bit() {
        let card = 3 * SCORE_LANES + 5;
        let residuals = values(7, SCORE_ROWS * CBD);
        let book = values(8, CBD * card);
        let t = ScoreTile {
            cbd: CBD,
            card,
            e0: 3,
            e1: card,
        };
        let mut rows = [0usize; SCORE_ROWS];
        for (i, r) in rows.iter_mut().enumerate() {
            *r = SCORE_ROWS - 1 - i;
        }
        let mut grouped = vec![f32::NAN; SCORE_ROWS * card];
        score_rows(rows, &residuals, &book, &mut grouped, t);
        let mut alone = vec![f32::NAN; SCORE_ROWS * card];
        for r in 0..SCORE_ROWS {
            score_rows([r], &residuals, &book, &mut alone, t);
        }
        for r in 0..SCORE_ROWS {
            for e in t.e0..t.e1 {
                let mut want = 0.0f32;
                for d in 0..CBD {
                    want += residuals[r * CBD + d] * book[d * card + e];
                }
                let (g, a) = (grouped[r * card + e], alone[r * card + e]);
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "row {r} entry {e}: {g} vs {want}"
                );
                assert_eq!(a.to_bits(), want.to_bits(), "row {r} entry {e} alone: {a}");
            }
            // Entries outside the tile are not written.
            assert!(grouped[r * card..r * card + t.e0]
                .iter()
                .all(|v| v.is_nan()));
        }
    }

    /// One row quantised alone, one codebook entry after another (the plain statement of RVQ).
    fn reference(x: &[f32], proj: &[f32], cbs: &[f32], norms: &[f32], n_q: usize) -> Vec<i32> {
        let mut codes = vec![NO_CODE; BOOKS];
        let mut res = [0.0f32; CBD];
        for level in 0..n_q {
            if level == 0 || level == SEMANTIC {
                let half = usize::from(level == SEMANTIC);
                for (o, r) in res.iter_mut().enumerate() {
                    *r = math::dot(&proj[(half * CBD + o) * DIM..(half * CBD + o + 1) * DIM], x);
                }
            }
            let book = &cbs[level * CBD * CARD..(level + 1) * CBD * CARD];
            let mut best = (f32::INFINITY, 0usize);
            for c in 0..CARD {
                let mut s = 0.0f32;
                for (d, &r) in res.iter().enumerate() {
                    s += r * book[d * CARD + c];
                }
                let dist = norms[level * CARD + c] - 2.0 * s;
                if dist < best.0 {
                    best = (dist, c);
                }
            }
            codes[level] = best.1 as i32;
            for (d, r) in res.iter_mut().enumerate() {
                *r -= book[d * CARD + best.1];
            }
        }
        codes
    }

    fn run(be: &CpuBackend, x: &[f32], tables: [&CpuBuf; 3], n_q: &[usize]) -> Vec<i32> {
        let rows = n_q.len();
        let mut codes = CpuInts(vec![0; rows * BOOKS]);
        for (r, &q) in n_q.iter().enumerate() {
            codes.0[r * BOOKS + q..(r + 1) * BOOKS].fill(NO_CODE);
        }
        let x = be.upload(x, BufRole::Activation).unwrap();
        be.rvq_encode(RvqEncodeArgs {
            x: &x,
            proj: tables[0],
            codebooks: tables[1],
            norms: tables[2],
            codes: &mut codes,
            rows,
            dim: DIM,
            cb_dim: CBD,
            card: CARD,
            books: BOOKS,
            semantic_books: SEMANTIC,
        })
        .unwrap();
        codes.0
    }

    #[test]
    fn blocks_of_rows_with_their_own_levels_equal_each_row_alone_and_the_plain_rvq() {
        let be = CpuBackend::new(Some(2)).unwrap();
        let x = values(1, ROWS * DIM);
        let proj = values(2, 2 * CBD * DIM);
        // Codebooks of shrinking scale, as residual levels have, so later levels still choose.
        let cbs: Vec<f32> = values(3, BOOKS * CBD * CARD)
            .iter()
            .enumerate()
            .map(|(i, v)| v * 0.7f32.powi((i / (CBD * CARD)) as i32))
            .collect();
        let norms: Vec<f32> = (0..BOOKS * CARD)
            .map(|i| {
                let (l, c) = (i / CARD, i % CARD);
                (0..CBD)
                    .map(|d| cbs[(l * CBD + d) * CARD + c].powi(2))
                    .sum()
            })
            .collect();
        let tables = [&proj, &cbs, &norms].map(|t| be.upload(t, BufRole::Table).unwrap());
        let tables = [&tables[0], &tables[1], &tables[2]];
        let n_q: Vec<usize> = (0..ROWS).map(|r| (r * 5) % (BOOKS + 1)).collect();
        let all = run(&be, &x, tables, &n_q);
        let mut distinct = std::collections::HashSet::new();
        for (r, &q) in n_q.iter().enumerate() {
            let xr = &x[r * DIM..(r + 1) * DIM];
            let want = reference(xr, &proj, &cbs, &norms, q);
            assert_eq!(
                &all[r * BOOKS..(r + 1) * BOOKS],
                want.as_slice(),
                "row {r}, n_q {q}"
            );
            assert_eq!(run(&be, xr, tables, &[q]), want, "row {r} alone");
            distinct.extend(want.iter().copied().filter(|&c| c != NO_CODE));
        }
        // The data make real choices: many different codes, not one entry everywhere.
        assert!(
            distinct.len() > 20,
            "only {} distinct codes",
            distinct.len()
        );
    }
}
