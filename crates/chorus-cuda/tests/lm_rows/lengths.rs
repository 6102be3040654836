//! Length checks: a short buffer is a named error before anything is launched.

use super::*;
use chorus_core::lm_ops::{GatherArgs, HeadGeom, QkNormRopeArgs};

/// A short buffer is a named error before anything is launched.
#[test]
fn length_errors_name_op_and_buffer() {
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let table = be.zeros(10 * 16, BufRole::Weight).unwrap();
        let ids = be.ints(4, 0).unwrap();
        let mut out = be.zeros(3 * 16, BufRole::Activation).unwrap();
        let err = be
            .gather_rows(GatherArgs::lookup(&table, &ids, &mut out, (4, 16)))
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
                first_token: 0,
                qkv: &mut qkv,
                qk_norm: Some([&norm, &norm]),
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
                .gather_rows(GatherArgs::lookup(&f32_table, &ids, &mut out, (4, 16)))
                .expect_err("f32 table in bf16 mode");
            eprintln!("error [bf16]: {err}");
        }
    }
}
