//! The row ops of `LmOps` on CUDA (kernels/lm_rows.cu) against the CPU backend, in f32 and bf16.
//! Every op runs inside `Backend::run`, so what is checked is the captured graph's replay; ids,
//! codes and positions are device data, changed between replays where it matters. Inputs are
//! rounded to bf16 values first, so the upload is exact in both precisions and pure data movement
//! must match bit for bit. Every figure is printed (`--nocapture` shows them). Skips (passes with
//! a note) when no CUDA device is present.

mod common;

use chorus_core::lm_ops::{
    AddRowArgs, CopyRowsArgs, FeedbackArgs, GatherArgs, HeadGeom, QkNormRopeArgs, RmsNormArgs,
    ScatterArgs, SwigluArgs,
};
use chorus_core::{Backend, BufRole, LmOps, Precision, Result};
use chorus_cuda::CudaBackend;
use common::*;

/// Where a part must match the CPU bit for bit (else: within the precision's tolerance).
#[derive(Clone, Copy, PartialEq)]
enum Exact {
    /// Pure data movement, or f32 arithmetic in the reference's order in both precisions.
    Always,
    /// Bit for bit in f32 storage only (bf16 rounds the arithmetic's result).
    F32,
    /// Reductions or transcendental functions: tolerance only.
    Never,
}

/// Round to nearest even bf16, as an f32 (so both precisions upload the same values).
fn bf16_round(v: f32) -> f32 {
    let u = v.to_bits();
    let r = u.wrapping_add(0x7fff + ((u >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r)
}

fn rvec(r: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    r.vec(n, scale).into_iter().map(bf16_round).collect()
}

fn ints<B: Backend>(be: &B, v: &[i32]) -> Result<B::Ints> {
    let mut out = be.ints(v.len(), 0)?;
    for (i, &x) in v.iter().enumerate() {
        be.fill_ints(&mut out, i, x)?;
    }
    Ok(out)
}

/// Runs `run` on every available precision and compares each named part with `want`.
fn check(
    name: &str,
    parts: &[(&str, Exact)],
    want: &[Vec<f32>],
    run: impl Fn(&CudaBackend) -> Result<Vec<Vec<f32>>>,
) {
    assert_eq!(parts.len(), want.len(), "{name}: one name per part");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run(&be).unwrap_or_else(|e| panic!("{name} [{}]: {e}", precision.name()));
        for ((part, exact), (g, w)) in parts.iter().zip(got.iter().zip(want)) {
            let what = format!("{name}: {part}");
            let bitwise = match exact {
                Exact::Always => true,
                Exact::F32 => precision == Precision::F32,
                Exact::Never => false,
            };
            if bitwise {
                let diffs = g
                    .iter()
                    .zip(w)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                let max = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                eprintln!(
                    "exact  {what} [{}]: {diffs} of {} elements differ (max |diff| {max:.3e})",
                    precision.name(),
                    g.len()
                );
                assert_eq!(g.len(), w.len(), "{what}: length");
                assert_eq!(diffs, 0, "{what} [{}]: not bit-exact", precision.name());
            } else {
                assert_parity(&what, precision, g, w);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// gather_rows

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

// ---------------------------------------------------------------------------------------------
// scatter_rows

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

// ---------------------------------------------------------------------------------------------
// copy_rows

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

// ---------------------------------------------------------------------------------------------
// feedback_embed

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

// ---------------------------------------------------------------------------------------------
// rms_norm

/// Two chained norms as in a layer: the first without delta, the second fusing the add.
fn run_rms<B: LmOps>(be: &B, n: usize, dim: usize, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let mut residual = be.upload(&rvec(&mut r, n * dim, 2.0), BufRole::Activation)?;
    let delta = be.upload(&rvec(&mut r, n * dim, 1.0), BufRole::Activation)?;
    let w1 = be.upload(&rvec(&mut r, dim, 1.5), BufRole::Weight)?;
    let w2 = be.upload(&rvec(&mut r, dim, 1.5), BufRole::Weight)?;
    let mut out1 = be.zeros(n * dim, BufRole::Activation)?;
    let mut out2 = be.zeros(n * dim, BufRole::Activation)?;
    let eps = 1e-6;
    be.run(0, &mut |b: &B| {
        b.rms_norm(RmsNormArgs {
            residual: &mut residual,
            delta: None,
            weight: &w1,
            out: &mut out1,
            n,
            dim,
            eps,
        })?;
        b.rms_norm(RmsNormArgs {
            residual: &mut residual,
            delta: Some(&delta),
            weight: &w2,
            out: &mut out2,
            n,
            dim,
            eps,
        })
    })?;
    Ok(vec![
        be.download(&out1)?,
        be.download(&residual)?,
        be.download(&out2)?,
    ])
}

fn check_rms(name: &str, n: usize, dim: usize) {
    let want = run_rms(&cpu(), n, dim, 5).expect("cpu rms_norm");
    check(
        name,
        &[
            ("out, no delta", Exact::Never),
            // One f32 add of two stored values: exact in f32, one rounding in bf16.
            ("residual += delta", Exact::F32),
            ("out, fused add", Exact::Never),
        ],
        &want,
        |be| run_rms(be, n, dim, 5),
    );
}

#[test]
fn rms_norm_hidden_rows() {
    check_rms("rms_norm 67x4096", 67, 4096);
}

#[test]
fn rms_norm_small_and_scalar_widths() {
    check_rms("rms_norm 5x128", 5, 128);
    check_rms("rms_norm 6x99 scalar", 6, 99);
}

/// Rows too wide for the register-cached path (more than 2048 chunks in both precisions).
#[test]
fn rms_norm_wide_rows_reload_path() {
    check_rms("rms_norm 3x16392", 3, 16392);
}

// ---------------------------------------------------------------------------------------------
// add_row

fn run_add_row<B: LmOps>(
    be: &B,
    n: usize,
    dim: usize,
    row: usize,
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let mut x = be.upload(&rvec(&mut r, n * dim + 4, 1.0), BufRole::Activation)?;
    let table = be.upload(&rvec(&mut r, (row + 3) * dim, 1.0), BufRole::Weight)?;
    be.run(0, &mut |b: &B| {
        b.add_row(AddRowArgs {
            x: &mut x,
            table: &table,
            row,
            n,
            dim,
        })
    })?;
    Ok(vec![be.download(&x)?])
}

#[test]
fn add_row_position_rows() {
    for (n, dim, row) in [(18, 1024, 5), (4, 99, 2), (3, 96, 0)] {
        let name = format!("add_row {n}x{dim} row {row}");
        let want = run_add_row(&cpu(), n, dim, row, 6).expect("cpu add_row");
        check(&name, &[("x", Exact::F32)], &want, |be| {
            run_add_row(be, n, dim, row, 6)
        });
    }
}

// ---------------------------------------------------------------------------------------------
// swiglu

fn run_swiglu<B: LmOps>(be: &B, n: usize, inter: usize, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    // Gates up to +-12: silu's tails (exp overflow side included) are exercised.
    let x = be.upload(&rvec(&mut r, n * 2 * inter, 12.0), BufRole::Activation)?;
    let mut out = be.upload(&rvec(&mut r, n * inter + 5, 1.0), BufRole::Activation)?;
    be.run(0, &mut |b: &B| {
        b.swiglu(SwigluArgs {
            x: &x,
            out: &mut out,
            n,
            inter,
        })
    })?;
    Ok(vec![be.download(&out)?])
}

#[test]
fn swiglu_mlp_widths() {
    for (n, inter) in [(22, 3072), (3, 99)] {
        let name = format!("swiglu {n}x{inter}");
        let want = run_swiglu(&cpu(), n, inter, 7).expect("cpu swiglu");
        check(&name, &[("out", Exact::Never)], &want, |be| {
            run_swiglu(be, n, inter, 7)
        });
    }
}

// ---------------------------------------------------------------------------------------------
// qk_norm_rope

/// `[max_pos, 2, head_dim / 2]`: cos then sin of `p * theta^(-2j / head_dim)`, in f64.
fn rope_table(max_pos: usize, head_dim: usize, theta: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let mut t = Vec::with_capacity(max_pos * head_dim);
    for p in 0..max_pos {
        let angle = |j: usize| p as f64 * theta.powf(-2.0 * j as f64 / head_dim as f64);
        t.extend((0..half).map(|j| angle(j).cos() as f32));
        t.extend((0..half).map(|j| angle(j).sin() as f32));
    }
    t
}

/// Two replays: the second with new start positions (device data, read afresh by the graph).
fn run_qk<B: LmOps>(
    be: &B,
    geom: HeadGeom,
    starts: [&[i32]; 2],
    max_pos: usize,
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let hd = geom.head_dim;
    let q_norm = be.upload(&rvec(&mut r, hd, 1.5), BufRole::Weight)?;
    let k_norm = be.upload(&rvec(&mut r, hd, 1.5), BufRole::Weight)?;
    let rope = be.upload(&rope_table(max_pos, hd, 1e6), BufRole::Table)?;
    let mut start = ints(be, starts[0])?;
    let mut results = Vec::new();
    for (step, s) in starts.iter().enumerate() {
        if step == 1 {
            for (i, &v) in s.iter().enumerate() {
                be.fill_ints(&mut start, i, v)?;
            }
        }
        let mut qkv = be.upload(
            &rvec(&mut r, geom.tokens() * geom.qkv_width(), 3.0),
            BufRole::Activation,
        )?;
        be.run(0, &mut |b: &B| {
            b.qk_norm_rope(QkNormRopeArgs {
                qkv: &mut qkv,
                q_norm: &q_norm,
                k_norm: &k_norm,
                rope: &rope,
                start: &start,
                geom,
                eps: 1e-6,
            })
        })?;
        results.push(be.download(&qkv)?);
    }
    Ok(results)
}

fn check_qk(name: &str, geom: HeadGeom, starts: [&[i32]; 2], max_pos: usize) {
    let want = run_qk(&cpu(), geom, starts, max_pos, 8).expect("cpu qk_norm_rope");
    check(
        name,
        &[
            ("qkv, replay 1", Exact::Never),
            ("qkv, replay 2", Exact::Never),
        ],
        &want,
        |be| run_qk(be, geom, starts, max_pos, 8),
    );
    // v is untouched: exact on the CUDA side too.
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_qk(&be, geom, starts, max_pos, 8).expect("cuda qk_norm_rope");
        let (hd, width) = (geom.head_dim, geom.qkv_width());
        let v0 = (geom.q_heads + geom.kv_heads) * hd;
        let same = got[0]
            .chunks_exact(width)
            .zip(want[0].chunks_exact(width))
            .all(|(g, w)| g[v0..] == w[v0..]);
        eprintln!(
            "exact  {name}: v heads untouched [{}]: {same}",
            precision.name()
        );
        assert!(same, "{name}: v heads changed");
    }
}

/// Qwen3-like GQA (16 q heads over 4 kv heads, head_dim 128: the paired path), prefill rows of
/// 3 tokens at positions past 1000, then decode-like positions.
#[test]
fn qk_norm_rope_gqa_long_positions() {
    let geom = HeadGeom {
        rows: 4,
        time: 3,
        q_heads: 16,
        kv_heads: 4,
        head_dim: 128,
    };
    check_qk(
        "qk_norm_rope 4x3 tokens, 16q/4kv x 128",
        geom,
        [&[1030, 7, 0, 1090], &[1500, 1, 2044, 333]],
        2048,
    );
}

/// Every path of the kernel, many rows. Vector layout (lanes per head in bf16 / f32): 64 (4 / 8),
/// 256 (16 / 32), 512 (32 in bf16; f32 falls back to pairs, 4 per lane); fallback: 384 (pairs,
/// 3 per lane), 96 (single elements, lanes loop unevenly) and a tiny head (most lanes idle).
#[test]
fn qk_norm_rope_other_head_dims() {
    let starts: Vec<i32> = (0..40).map(|i: i32| i * 97 % 1200).collect();
    let later: Vec<i32> = starts.iter().map(|s| s + 3).collect();
    for head_dim in [64, 256, 512, 384, 96, 6] {
        let geom = HeadGeom {
            rows: 40,
            time: 1,
            q_heads: 8,
            kv_heads: 2,
            head_dim,
        };
        check_qk(
            &format!("qk_norm_rope 40 rows decode, 8q/2kv x {head_dim}"),
            geom,
            [&starts, &later],
            1300,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Length checks

/// A short buffer is a named error before anything is launched.
#[test]
fn length_errors_name_op_and_buffer() {
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let table = be.zeros(10 * 16, BufRole::Weight).unwrap();
        let ids = be.ints(4, 0).unwrap();
        let mut out = be.zeros(3 * 16, BufRole::Activation).unwrap();
        let err = be
            .gather_rows(GatherArgs {
                table: &table,
                ids: &ids,
                out: &mut out,
                rows: 4,
                dim: 16,
                rows_per_id: 1,
                ids_stride: 1,
                ids_col: 0,
                offset: 0,
                scale: 1.0,
            })
            .expect_err("out holds 3 rows, 4 needed");
        let msg = err.to_string();
        eprintln!("error [{}]: {msg}", precision.name());
        assert!(msg.contains("gather_rows") && msg.contains("out"), "{msg}");

        let mut qkv = be.zeros(2 * 3 * 8, BufRole::Activation).unwrap();
        let norm = be.zeros(8, BufRole::Weight).unwrap();
        let rope = be.zeros(8 * 8, BufRole::Table).unwrap();
        let start = be.ints(2, 0).unwrap();
        let err = be
            .qk_norm_rope(QkNormRopeArgs {
                qkv: &mut qkv,
                q_norm: &norm,
                k_norm: &norm,
                rope: &rope,
                start: &start,
                geom: HeadGeom {
                    rows: 2,
                    time: 1,
                    q_heads: 2,
                    kv_heads: 1,
                    head_dim: 8,
                },
                eps: 1e-6,
            })
            .expect_err("qkv holds 48 elements, 64 needed");
        let msg = err.to_string();
        eprintln!("error [{}]: {msg}", precision.name());
        assert!(msg.contains("qk_norm_rope") && msg.contains("qkv"), "{msg}");

        if precision == Precision::Bf16 {
            // A table buffer (f32 storage) where the op reads bf16 rows.
            let f32_table = be.zeros(10 * 16, BufRole::Table).unwrap();
            let mut out = be.zeros(4 * 16, BufRole::Activation).unwrap();
            let err = be
                .gather_rows(GatherArgs {
                    table: &f32_table,
                    ids: &ids,
                    out: &mut out,
                    rows: 4,
                    dim: 16,
                    rows_per_id: 1,
                    ids_stride: 1,
                    ids_col: 0,
                    offset: 0,
                    scale: 1.0,
                })
                .expect_err("f32 table in bf16 mode");
            eprintln!("error [bf16]: {err}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Timing (ignored by default: `cargo test --release --test lm_rows -- --ignored --nocapture`)

/// Device time of `reps` back-to-back launches of one op, captured in one graph, per launch.
fn time_op(
    be: &CudaBackend,
    key: usize,
    reps: usize,
    program: &mut dyn FnMut(&CudaBackend) -> Result<()>,
) -> f64 {
    be.run(key, &mut |b: &CudaBackend| {
        for _ in 0..reps {
            program(b)?;
        }
        Ok(())
    })
    .expect("capture");
    let times = be.time_replay(key, 50).expect("time_replay");
    let mut sorted: Vec<f32> = times.clone();
    sorted.sort_by(f32::total_cmp);
    f64::from(sorted[sorted.len() / 2]) * 1e3 / reps as f64
}

/// Per-op device time at the decode shapes of the frame graph (256 rows = 128 songs, hidden 4096,
/// intermediate 12288, 32 q / 8 kv heads of 128), and the bytes each moves per microsecond.
#[test]
#[ignore]
fn replay_timing_decode_shapes() {
    const REPS: usize = 20;
    let (rows, h, inter, vocab) = (256, 4096, 12288, 2048);
    let geom = HeadGeom {
        rows,
        time: 1,
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
    };
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let es = be.bytes_per_element(BufRole::Activation) as f64;
        let mut r = Rng::new(9);
        let mut up = |n: usize, role| be.upload(&r.vec(n, 1.0), role).unwrap();
        let table = up(vocab * h, BufRole::Weight);
        let audio = up(8 * vocab * h, BufRole::Weight);
        let mut x = up(rows * h, BufRole::Activation);
        let delta = up(rows * h, BufRole::Activation);
        let w = up(h, BufRole::Weight);
        let mut out = up(rows * h, BufRole::Activation);
        let gate_up = up(rows * 2 * inter, BufRole::Activation);
        let mut act = up(rows * inter, BufRole::Activation);
        let mut qkv = up(rows * geom.qkv_width(), BufRole::Activation);
        let rope = be
            .upload(&rope_table(4096, 128, 1e6), BufRole::Table)
            .unwrap();
        let mut state = up(200 * 2 * h, BufRole::State);
        let ids_host: Vec<i32> = (0..rows as i32).map(|i| (i * 7) % 128).collect();
        let ids = ints(&be, &ids_host).unwrap();
        let codes_host: Vec<i32> = (0..128 * 9).map(|i| (i * 5) % 1000).collect();
        let codes = ints(&be, &codes_host).unwrap();
        let starts: Vec<i32> = (0..rows as i32).map(|i| 1000 + i).collect();
        let start = ints(&be, &starts).unwrap();
        let songs_ids: Vec<i32> = (0..128).collect();
        let slots = ints(&be, &songs_ids).unwrap();
        let report = |name: &str, us: f64, bytes: f64| {
            eprintln!(
                "timing {name} [{}]: {us:.2} us per launch, {:.0} GB/s",
                precision.name(),
                bytes / us * 1e-3
            );
        };
        let rh = (rows * h) as f64 * es;
        let us = time_op(&be, 0, REPS, &mut |b| {
            b.gather_rows(GatherArgs {
                table: &table,
                ids: &ids,
                out: &mut out,
                rows,
                dim: h,
                rows_per_id: 2,
                ids_stride: 1,
                ids_col: 0,
                offset: 0,
                scale: 1.0,
            })
        });
        report("gather 256x4096 pairs", us, 1.5 * rh);
        let us = time_op(&be, 1, REPS, &mut |b| {
            b.scatter_rows(ScatterArgs {
                src: &out,
                ids: &slots,
                table: &mut state,
                rows: 128,
                dim: 2 * h,
            })
        });
        report("scatter 128x8192", us, 2.0 * rh);
        let us = time_op(&be, 2, REPS, &mut |b| {
            b.copy_rows(CopyRowsArgs {
                src: &delta,
                dst: &mut out,
                rows: 128,
                len: h,
                src_offset: 0,
                src_stride: 2 * h,
                dst_offset: 0,
                dst_stride: 2 * h,
            })
        });
        report("copy_rows 128x4096 strided", us, rh);
        let us = time_op(&be, 3, REPS, &mut |b| {
            b.feedback_embed(FeedbackArgs {
                embed: &table,
                audio: &audio,
                codes: &codes,
                out: &mut out,
                songs: 128,
                dim: h,
                levels: 9,
                codes_stride: 9,
                offset: 0,
                cardinality: vocab,
                scale: 1.0 / 3.0,
            })
        });
        report(
            "feedback 128 songs x 9 levels",
            us,
            (128.0 * 9.0 + 256.0) * h as f64 * es,
        );
        let us = time_op(&be, 4, REPS, &mut |b| {
            b.rms_norm(RmsNormArgs {
                residual: &mut x,
                delta: Some(&delta),
                weight: &w,
                out: &mut out,
                n: rows,
                dim: h,
                eps: 1e-6,
            })
        });
        report("rms_norm 256x4096 fused add", us, 4.0 * rh);
        let us = time_op(&be, 5, REPS, &mut |b| {
            b.add_row(AddRowArgs {
                x: &mut x,
                table: &w,
                row: 0,
                n: rows,
                dim: h,
            })
        });
        report("add_row 256x4096", us, 2.0 * rh);
        let us = time_op(&be, 6, REPS, &mut |b| {
            b.swiglu(SwigluArgs {
                x: &gate_up,
                out: &mut act,
                n: rows,
                inter,
            })
        });
        report("swiglu 256x12288", us, 3.0 * (rows * inter) as f64 * es);
        let us = time_op(&be, 7, REPS, &mut |b| {
            b.qk_norm_rope(QkNormRopeArgs {
                qkv: &mut qkv,
                q_norm: &w,
                k_norm: &w,
                rope: &rope,
                start: &start,
                geom,
                eps: 1e-6,
            })
        });
        report(
            "qk_norm_rope 256 tokens 32q/8kv x 128",
            us,
            2.0 * (rows * 40 * 128) as f64 * es,
        );
    }
}
