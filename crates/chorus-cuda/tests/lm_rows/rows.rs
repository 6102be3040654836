//! `gather_rows`, `scatter_rows`, `copy_rows`, `feedback_embed` and `embed_sum`: pure data movement, bit for bit
//! against the CPU, with ids and codes changed between replays.

use super::*;
use chorus_core::lm_ops::{CopyRowsArgs, EmbedSumArgs, FeedbackArgs, GatherArgs, ScatterArgs};

struct GatherCase {
    table_rows: usize,
    dim: usize,
    rows: usize,
    per_id: usize,
    stride: usize,
    col: usize,
    offset: usize,
    scale: f32,
}

/// Two replays of one program: the second after new ids are written (the graph must read them
/// afresh). `out` has a tail past `rows * dim` that must stay as it was.
fn run_gather<B: LmOps>(be: &B, c: &GatherCase, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let table = be.upload(&rvec(&mut r, c.table_rows * c.dim, 1.0), BufRole::Weight)?;
    let ids_n = (c.rows - 1) / c.per_id + 1;
    let dummy = (c.table_rows - 1 - c.offset) as i32;
    let id_list = |salt: usize| -> Vec<i32> {
        (0..ids_n * c.stride)
            .map(|i| {
                // The last two ids are padding naming the dummy (last) row.
                if i / c.stride + 2 >= ids_n {
                    dummy
                } else {
                    ((i * 37 + salt * 11) % (c.table_rows - c.offset)) as i32
                }
            })
            .collect()
    };
    let first = id_list(0);
    let mut ids = ints(be, &first)?;
    let mut out = be.upload(&rvec(&mut r, c.rows * c.dim + 9, 1.0), BufRole::Activation)?;
    let mut results = Vec::new();
    for step in 0..2 {
        if step == 1 {
            for (i, &v) in id_list(1).iter().enumerate() {
                be.fill_ints(&mut ids, i, v)?;
            }
        }
        be.run(0, &mut |b: &B| {
            b.gather_rows(GatherArgs {
                table: &table,
                ids: &ids,
                out: &mut out,
                rows: c.rows,
                dim: c.dim,
                rows_per_id: c.per_id,
                ids_stride: c.stride,
                ids_col: c.col,
                offset: c.offset,
                scale: c.scale,
            })
        })?;
        results.push(be.download(&out)?);
    }
    Ok(results)
}

fn check_gather(name: &str, c: GatherCase, exact: Exact) {
    let want = run_gather(&cpu(), &c, 1).expect("cpu gather");
    check(
        name,
        &[("replay 1", exact), ("replay 2, new ids", exact)],
        &want,
        |be| run_gather(be, &c, 1),
    );
}

/// Embedding lookup of a CFG pair (2 rows per id), an id column of a codes matrix, a vocabulary
/// offset, scale 1 (the raw copy path).
#[test]
fn gather_rows_pairs_offset_vectorised() {
    check_gather(
        "gather 74x4096 pairs",
        GatherCase {
            table_rows: 300,
            dim: 4096,
            rows: 74,
            per_id: 2,
            stride: 9,
            col: 3,
            offset: 40,
            scale: 1.0,
        },
        Exact::Always,
    );
}

/// A non-unit scale (f32 product), one row per id.
#[test]
fn gather_rows_scaled() {
    check_gather(
        "gather 33x2048 scaled",
        GatherCase {
            table_rows: 50,
            dim: 2048,
            rows: 33,
            per_id: 1,
            stride: 1,
            col: 0,
            offset: 0,
            scale: 0.37,
        },
        Exact::F32,
    );
}

/// A row width that no 16-byte vector divides (the scalar path), odd pairs.
#[test]
fn gather_rows_scalar_width() {
    check_gather(
        "gather 7x99 scalar",
        GatherCase {
            table_rows: 20,
            dim: 99,
            rows: 7,
            per_id: 2,
            stride: 3,
            col: 2,
            offset: 3,
            scale: 0.5,
        },
        Exact::Always,
    );
}

/// Scatter into a table of `table_rows` (the last one the dummy) from rows whose ids are a
/// permutation of slots, padded with many entries naming the dummy, interleaved.
fn run_scatter<B: LmOps>(
    be: &B,
    rows: usize,
    dim: usize,
    table_rows: usize,
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let dummy = (table_rows - 1) as i32;
    let id_list: Vec<i32> = (0..rows)
        .map(|i| {
            if i % 3 == 2 || i + 1 == rows {
                dummy
            } else {
                ((i * 7 + 3) % (table_rows - 1)) as i32
            }
        })
        .collect();
    let ids = ints(be, &id_list)?;
    let src = be.upload(&rvec(&mut r, rows * dim, 1.0), BufRole::Activation)?;
    let mut table = be.upload(&rvec(&mut r, table_rows * dim, 1.0), BufRole::State)?;
    be.run(0, &mut |b: &B| {
        b.scatter_rows(ScatterArgs {
            src: &src,
            ids: &ids,
            table: &mut table,
            rows,
            dim,
        })
    })?;
    let all = be.download(&table)?;
    Ok(vec![without_dummy(&all, dim), all])
}

fn check_scatter(name: &str, rows: usize, dim: usize, table_rows: usize) {
    let want = run_scatter(&cpu(), rows, dim, table_rows, 2).expect("cpu scatter");
    // The CUDA kernel keeps the reference's last-write-wins order even for the dummy row.
    check(
        name,
        &[
            ("table without dummy", Exact::Always),
            ("whole table, dummy included", Exact::Always),
        ],
        &want,
        |be| run_scatter(be, rows, dim, table_rows, 2),
    );
}

#[test]
fn scatter_rows_state_rows_with_padding() {
    // 2 * hidden per song row, as the hidden-state write-back.
    check_scatter("scatter 40x8192", 40, 8192, 30);
}

/// More rows than one block's threads: the duplicate scan loops.
#[test]
fn scatter_rows_many_duplicates() {
    check_scatter("scatter 300x64", 300, 64, 250);
}

#[test]
fn scatter_rows_scalar_width() {
    check_scatter("scatter 9x99 scalar", 9, 99, 8);
}

#[derive(Clone, Copy)]
struct CopyCase {
    rows: usize,
    len: usize,
    src_offset: usize,
    src_stride: usize,
    dst_offset: usize,
    dst_stride: usize,
}

fn run_copy<B: LmOps>(be: &B, c: CopyCase, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let last = c.rows - 1;
    let src_len = c.src_offset + last * c.src_stride + c.len + 5;
    let dst_len = c.dst_offset + last * c.dst_stride + c.len + 7;
    let src = be.upload(&rvec(&mut r, src_len, 1.0), BufRole::Activation)?;
    let mut dst = be.upload(&rvec(&mut r, dst_len, 1.0), BufRole::Activation)?;
    be.run(0, &mut |b: &B| {
        b.copy_rows(CopyRowsArgs {
            src: &src,
            dst: &mut dst,
            rows: c.rows,
            len: c.len,
            src_offset: c.src_offset,
            src_stride: c.src_stride,
            dst_offset: c.dst_offset,
            dst_stride: c.dst_stride,
        })
    })?;
    Ok(vec![be.download(&dst)?])
}

fn check_copy(name: &str, c: CopyCase) {
    let want = run_copy(&cpu(), c, 3).expect("cpu copy");
    check(name, &[("dst", Exact::Always)], &want, |be| {
        run_copy(be, c, 3)
    });
}

/// One row of each CFG pair into a frame's hidden matrix (as the depth loop does).
#[test]
fn copy_rows_strided_vectorised() {
    let h = 1024;
    check_copy(
        "copy 37 rows strided",
        CopyCase {
            rows: 37,
            len: h,
            src_offset: 0,
            src_stride: 2 * h,
            dst_offset: 3 * h,
            dst_stride: 9 * h,
        },
    );
}

/// The last token of each prompt row (an offset that is a multiple of the vector width only in
/// f32), then a whole block in one row with zero strides.
#[test]
fn copy_rows_offsets_and_one_long_row() {
    check_copy(
        "copy 2 rows, last token",
        CopyCase {
            rows: 2,
            len: 512,
            src_offset: 12 * 512 + 4,
            src_stride: 13 * 512,
            dst_offset: 0,
            dst_stride: 512,
        },
    );
    check_copy(
        "copy 1 long row",
        CopyCase {
            rows: 1,
            len: 2 * 61 * 4096,
            src_offset: 0,
            src_stride: 0,
            dst_offset: 0,
            dst_stride: 0,
        },
    );
}

#[test]
fn copy_rows_scalar_strides() {
    check_copy(
        "copy 5 rows scalar",
        CopyCase {
            rows: 5,
            len: 101,
            src_offset: 3,
            src_stride: 211,
            dst_offset: 17,
            dst_stride: 103,
        },
    );
}

#[derive(Clone, Copy)]
struct FeedbackCase {
    songs: usize,
    dim: usize,
    levels: usize,
    codes_stride: usize,
    vocab: usize,
    offset: usize,
    card: usize,
}

fn run_feedback<B: LmOps>(be: &B, c: FeedbackCase, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let embed = be.upload(&rvec(&mut r, c.vocab * c.dim, 1.0), BufRole::Weight)?;
    let audio_rows = (c.levels - 1).max(1) * c.card;
    let audio = be.upload(&rvec(&mut r, audio_rows * c.dim, 1.0), BufRole::Weight)?;
    let codes: Vec<i32> = (0..c.songs * c.codes_stride)
        .map(|i| {
            let (s, l) = (i / c.codes_stride, i % c.codes_stride);
            let limit = if l == 0 { c.vocab - c.offset } else { c.card };
            ((s * 13 + l * 5 + 1) % limit) as i32
        })
        .collect();
    let codes = ints(be, &codes)?;
    let mut out = be.upload(
        &rvec(&mut r, 2 * c.songs * c.dim + 3, 1.0),
        BufRole::Activation,
    )?;
    let scale = (c.levels as f32).powf(-0.5);
    be.run(0, &mut |b: &B| {
        b.feedback_embed(FeedbackArgs {
            embed: &embed,
            audio: &audio,
            codes: &codes,
            out: &mut out,
            songs: c.songs,
            dim: c.dim,
            levels: c.levels,
            codes_stride: c.codes_stride,
            offset: c.offset,
            cardinality: c.card,
            scale,
        })
    })?;
    Ok(vec![be.download(&out)?])
}

fn check_feedback(name: &str, c: FeedbackCase) {
    let want = run_feedback(&cpu(), c, 4).expect("cpu feedback");
    // Same f32 sum order as the reference: exact in f32, one rounding in bf16.
    check(name, &[("out", Exact::F32)], &want, |be| {
        run_feedback(be, c, 4)
    });
}

#[test]
fn feedback_embed_levels_in_order() {
    check_feedback(
        "feedback 21 songs x 2048, 9 levels",
        FeedbackCase {
            songs: 21,
            dim: 2048,
            levels: 9,
            codes_stride: 10,
            vocab: 600,
            offset: 100,
            card: 64,
        },
    );
}

#[test]
fn feedback_embed_one_level_scalar_width() {
    check_feedback(
        "feedback 3 songs x 99, 1 level",
        FeedbackCase {
            songs: 3,
            dim: 99,
            levels: 1,
            codes_stride: 2,
            vocab: 30,
            offset: 5,
            card: 8,
        },
    );
    check_feedback(
        "feedback 4 songs x 99, 4 levels",
        FeedbackCase {
            songs: 4,
            dim: 99,
            levels: 4,
            codes_stride: 4,
            vocab: 30,
            offset: 5,
            card: 8,
        },
    );
}

/// `embed_sum` over CSM's shapes: rows of text only, of codes only (every fifth absent), of
/// both, over `levels` codebooks.
fn run_embed_sum<B: LmOps>(
    be: &B,
    (rows, dim, levels, with_text): (usize, usize, usize, bool),
) -> Result<Vec<Vec<f32>>> {
    let (card, vocab) = (37, 50);
    let stride = levels + 1;
    let mut r = Rng::new(9);
    let text = be.upload(&rvec(&mut r, vocab * dim, 1.0), BufRole::Weight)?;
    let audio = be.upload(&rvec(&mut r, levels * card * dim, 1.0), BufRole::Weight)?;
    let ids: Vec<i32> = (0..rows * stride)
        .map(|i| {
            let (row, col) = (i / stride, i % stride);
            match (row % 3, col) {
                (0, 0) => (row * 7 % vocab) as i32,
                (0, _) | (1, 0) => -1,
                // Every fifth code absent.
                (_, c) if (row + c) % 5 == 0 => -1,
                (_, c) => ((row * 11 + c * 3) % card) as i32,
            }
        })
        .collect();
    let ids = ints(be, &ids)?;
    let mut out = be.upload(&rvec(&mut r, rows * dim, 1.0), BufRole::Activation)?;
    be.run(0, &mut |b: &B| {
        b.embed_sum(EmbedSumArgs {
            text: with_text.then_some(&text),
            audio: &audio,
            ids: &ids,
            out: &mut out,
            rows,
            dim,
            stride,
            text_col: 0,
            codes_col: 1,
            levels,
            cardinality: card,
        })
    })?;
    Ok(vec![be.download(&out)?])
}

#[test]
fn embed_sum_text_and_codebooks_in_order() {
    for case in [(40, 2048, 32, true), (9, 1024, 32, false), (5, 99, 3, true)] {
        let want = run_embed_sum(&cpu(), case).expect("cpu embed_sum");
        // Same f32 sum order as the CPU backend: exact in f32, one rounding in bf16.
        let name = format!(
            "embed_sum {} rows x {}, {} codebooks, text {}",
            case.0, case.1, case.2, case.3
        );
        check(&name, &[("out", Exact::F32)], &want, |be| {
            run_embed_sum(be, case)
        });
    }
}
