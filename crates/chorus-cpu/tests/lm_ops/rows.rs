//! Pinned copies, gathers, scatters, strided copies, the feedback embedding, `embed_sum` and
//! `add_row`.

use super::*;
use crate::common::Rng;
use chorus_core::lm_ops::{
    AddRowArgs, CopyRowsArgs, EmbedSumArgs, FeedbackArgs, GatherArgs, ScatterArgs,
};

#[test]
fn pinned_copies_round_trip_and_check_lengths() {
    let be = common::backend();
    let mut pinned = be.pinned_ints(6).unwrap();
    assert_eq!(be.pinned_ints_mut(&mut pinned).unwrap(), &[0; 6]);
    be.pinned_ints_mut(&mut pinned)
        .unwrap()
        .copy_from_slice(&[3, -1, 4, 1, -5, 9]);
    let mut dev = be.ints(8, 77).unwrap();
    be.copy_in_ints(&pinned, &mut dev, 5).unwrap();
    assert_eq!(down_ints(&be, &dev), vec![3, -1, 4, 1, -5, 77, 77, 77]);
    let mut back = be.pinned_ints(8).unwrap();
    be.copy_out_ints(&dev, &mut back, 8).unwrap();
    assert_eq!(back.as_slice(), &[3, -1, 4, 1, -5, 77, 77, 77]);

    let src = buf(&be, &[1.5, -2.0, 0.25]);
    let mut floats = be.pinned_floats(4).unwrap();
    assert_eq!(be.pinned_floats_ref(&floats).unwrap(), &[0.0; 4]);
    be.copy_out_floats(&src, &mut floats, 3).unwrap();
    assert_eq!(
        be.pinned_floats_ref(&floats).unwrap(),
        &[1.5, -2.0, 0.25, 0.0]
    );

    assert!(
        be.copy_in_ints(&pinned, &mut dev, 7).is_err(),
        "src too short"
    );
    assert!(
        be.copy_out_ints(&dev, &mut pinned, 7).is_err(),
        "dst too short"
    );
    assert!(
        be.copy_out_floats(&src, &mut floats, 4).is_err(),
        "src too short"
    );
}

#[test]
fn gather_rows_matches_reference() {
    let be = common::backend();
    let mut rng = Rng::new(1);
    let (table_rows, dim, rows, per_id, stride, col, offset) = (20, 12, 7, 2, 3, 1, 3);
    let table = rng.vec(table_rows * dim, 1.0);
    let ids_host: Vec<i32> = (0..4 * stride as i32).map(|i| (i * 7) % 17).collect();
    let scale = 0.37_f32;
    let (tb, ids) = (buf(&be, &table), ints(&be, &ids_host));
    let mut out = be.zeros(rows * dim + 5, BufRole::Activation).unwrap();
    let mut gather = |ids: &CpuInts| {
        be.gather_rows(GatherArgs {
            table: &tb,
            ids,
            out: &mut out,
            rows,
            dim,
            rows_per_id: per_id,
            ids_stride: stride,
            ids_col: col,
            offset,
            scale,
        })
    };
    gather(&ids).unwrap();
    let bad = ints(&be, &[0, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(
        gather(&bad).is_err(),
        "id 17 + offset 3 is past the 20 rows"
    );
    // The failed call wrote nothing: `out` still holds the first call's rows.
    let got = down(&be, &out);
    for r in 0..rows {
        let row = offset + ids_host[(r / per_id) * stride + col] as usize;
        let want: Vec<f32> = table[row * dim..(row + 1) * dim]
            .iter()
            .map(|&t| scale * t)
            .collect();
        assert_bits(&format!("row {r}"), &got[r * dim..(r + 1) * dim], &want);
    }
    assert_bits("tail untouched", &got[rows * dim..], &[0.0; 5]);
}

#[test]
fn scatter_rows_in_row_order_last_write_wins() {
    let be = common::backend();
    let dim = 5;
    let src: Vec<f32> = (0..4 * dim).map(|i| i as f32).collect();
    let mut table = buf(&be, &vec![-1.0; 6 * dim]);
    // Rows 2 and 3 are padding: both name the dummy row 5, row 3's write must win.
    let ids = ints(&be, &[1, 3, 5, 5]);
    be.scatter_rows(ScatterArgs {
        src: &buf(&be, &src),
        ids: &ids,
        table: &mut table,
        rows: 4,
        dim,
    })
    .unwrap();
    let got = down(&be, &table);
    let mut want = vec![-1.0; 6 * dim];
    want[dim..2 * dim].copy_from_slice(&src[..dim]);
    want[3 * dim..4 * dim].copy_from_slice(&src[dim..2 * dim]);
    want[5 * dim..6 * dim].copy_from_slice(&src[3 * dim..4 * dim]);
    assert_bits("scatter", &got, &want);
    let bad = ints(&be, &[1, 6, 0, 0]);
    let r = be.scatter_rows(ScatterArgs {
        src: &buf(&be, &src),
        ids: &bad,
        table: &mut table,
        rows: 4,
        dim,
    });
    assert!(r.is_err(), "id 6 is past the 6 rows");
}

#[test]
fn copy_rows_copies_strided_rows() {
    let be = common::backend();
    let src_host: Vec<f32> = (0..40).map(|i| i as f32 * 0.5).collect();
    let src = buf(&be, &src_host);
    let mut dst = buf(&be, &[9.0; 30]);
    let mut copy = |len: usize, src_offset: usize, dst_stride: usize| {
        be.copy_rows(CopyRowsArgs {
            src: &src,
            dst: &mut dst,
            rows: 3,
            len,
            src_offset,
            src_stride: 12,
            dst_offset: 1,
            dst_stride,
        })
    };
    copy(4, 2, 9).unwrap();
    assert!(copy(5, 14, 9).is_err(), "src: 14 + 2 * 12 + 5 > 40");
    assert!(copy(4, 2, 13).is_err(), "dst: 1 + 2 * 13 + 4 > 30");
    let got = down(&be, &dst);
    let mut want = vec![9.0; 30];
    for r in 0..3 {
        for i in 0..4 {
            want[1 + r * 9 + i] = src_host[2 + r * 12 + i];
        }
    }
    assert_bits("copy_rows", &got, &want);
}

#[test]
fn feedback_embed_matches_f64_reference() {
    let be = common::backend();
    let mut rng = Rng::new(2);
    let (songs, dim, levels, stride, offset, card, vocab) = (3, 24, 4, 6, 5, 7, 20);
    let embed = rng.vec(vocab * dim, 1.0);
    let audio = rng.vec((levels - 1) * card * dim, 1.0);
    let mut codes = vec![-1; songs * stride];
    for s in 0..songs {
        codes[s * stride] = (s * 6 % (vocab - offset)) as i32;
        for l in 1..levels {
            codes[s * stride + l] = ((s * 3 + l * 5) % card) as i32;
        }
    }
    let scale = 8f32.powf(-0.5);
    let (eb, ab) = (buf(&be, &embed), buf(&be, &audio));
    let cb = ints(&be, &codes);
    let mut out = be.zeros(2 * songs * dim, BufRole::Activation).unwrap();
    let mut feedback = |codes: &CpuInts| {
        be.feedback_embed(FeedbackArgs {
            embed: &eb,
            audio: &ab,
            codes,
            out: &mut out,
            songs,
            dim,
            levels,
            codes_stride: stride,
            offset,
            cardinality: card,
            scale,
        })
    };
    feedback(&cb).unwrap();
    let mut bad = codes.clone();
    bad[stride + 2] = card as i32;
    assert!(feedback(&ints(&be, &bad)).is_err(), "code == cardinality");
    bad[stride + 2] = 0;
    bad[2 * stride] = (vocab - offset) as i32;
    assert!(feedback(&ints(&be, &bad)).is_err(), "c0 past the embed");
    let got = down(&be, &out);
    let mut want = vec![0.0_f64; 2 * songs * dim];
    for r in 0..2 * songs {
        let c = &codes[(r / 2) * stride..];
        for i in 0..dim {
            let mut x = embed[(offset + c[0] as usize) * dim + i] as f64;
            for l in 1..levels {
                x += audio[((l - 1) * card + c[l] as usize) * dim + i] as f64;
            }
            want[r * dim + i] = scale as f64 * x;
        }
    }
    assert_near("feedback_embed", &got, &want);
    for s in 0..songs {
        let pair = &got[2 * s * dim..(2 * s + 2) * dim];
        assert_bits("both rows of a pair", &pair[..dim], &pair[dim..]);
    }
}

/// `embed_sum` rows: text only, audio only (CSM's frames), both, neither; against an f64 sum.
#[test]
fn embed_sum_matches_f64_reference_and_names_bad_ids() {
    let be = common::backend();
    let mut rng = Rng::new(4);
    let (rows, dim, levels, card, vocab, stride) = (4, 20, 3, 5, 9, 5);
    let text = rng.vec(vocab * dim, 1.0);
    let audio = rng.vec(levels * card * dim, 1.0);
    // Columns: 0 unused, 1 text, 2..5 codes.
    #[rustfmt::skip]
    let ids: Vec<i32> = vec![
        7, 4, -1, -1, -1,
        7, -1, 0, 4, 2,
        7, 8, 3, -1, 1,
        7, -1, -1, -1, -1,
    ];
    let (tb, ab) = (buf(&be, &text), buf(&be, &audio));
    let mut out = be.zeros(rows * dim, BufRole::Activation).unwrap();
    let run = |ids: &[i32], with_text: bool, out: &mut CpuBuf| {
        be.embed_sum(EmbedSumArgs {
            text: with_text.then_some(&tb),
            audio: &ab,
            ids: &ints(&be, ids),
            out,
            rows,
            dim,
            stride,
            text_col: 1,
            codes_col: 2,
            levels,
            cardinality: card,
        })
    };
    for with_text in [true, false] {
        run(&ids, with_text, &mut out).unwrap();
        let got = down(&be, &out);
        let mut want = vec![0.0_f64; rows * dim];
        for r in 0..rows {
            let row = &ids[r * stride..(r + 1) * stride];
            for i in 0..dim {
                let mut x = 0.0;
                if with_text && row[1] >= 0 {
                    x += text[row[1] as usize * dim + i] as f64;
                }
                for l in 0..levels {
                    if row[2 + l] >= 0 {
                        x += audio[(l * card + row[2 + l] as usize) * dim + i] as f64;
                    }
                }
                want[r * dim + i] = x;
            }
        }
        assert_near("embed_sum", &got, &want);
        assert!(
            got[3 * dim..].iter().all(|&v| v == 0.0),
            "a row of absent ids is zero"
        );
    }
    let mut bad = ids.clone();
    bad[2 * stride + 3] = card as i32;
    let err = run(&bad, true, &mut out).unwrap_err().to_string();
    assert!(
        err.contains("embed_sum") && err.contains(&card.to_string()),
        "{err}"
    );
    bad[2 * stride + 3] = -1;
    bad[stride + 1] = vocab as i32;
    let err = run(&bad, true, &mut out).unwrap_err().to_string();
    assert!(err.contains("text id 9"), "{err}");
    assert!(
        run(&bad, false, &mut out).is_ok(),
        "no text table: the text column is not read"
    );
}

#[test]
fn add_row_adds_one_table_row() {
    let be = common::backend();
    let mut rng = Rng::new(3);
    let (n, dim, row) = (4, 9, 2);
    let x_host = rng.vec(n * dim, 1.0);
    let table = rng.vec(5 * dim, 1.0);
    let mut x = buf(&be, &x_host);
    let tb = buf(&be, &table);
    be.add_row(AddRowArgs {
        x: &mut x,
        table: &tb,
        row,
        n,
        dim,
    })
    .unwrap();
    let want: Vec<f32> = (0..n * dim)
        .map(|i| x_host[i] + table[row * dim + i % dim])
        .collect();
    assert_bits("add_row", &down(&be, &x), &want);
    assert!(be
        .add_row(AddRowArgs {
            x: &mut x,
            table: &tb,
            row: 5,
            n,
            dim
        })
        .is_err());
}
