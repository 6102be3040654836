//! Timing (ignored by default: `cargo test --release --test lm_rows -- --ignored --nocapture`).

use super::*;
use crate::rope::rope_table;
use chorus_core::lm_ops::{
    AddRowArgs, CopyRowsArgs, FeedbackArgs, GatherArgs, HeadGeom, QkNormRopeArgs, RmsNormArgs,
    ScatterArgs, SwigluArgs,
};

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
                first_token: 0,
                qkv: &mut qkv,
                qk_norm: Some([&w, &w]),
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
