//! Paged prefill: chunked and whole prefills against decode steps, and a long sampled, timed prefill.

use super::*;
use crate::paged::*;

/// Outputs of three schedules of two 48-token rows (blocks of 16, NaN-filled caches): a prefill of
/// 40 then 8 decode steps; one prefill of 48; a chunked prefill of 24 + 16 then 8 decode steps,
/// the chunk and the steps after other tokens of their `qkv` (`first_token` 5 and 3, as a prompt
/// chunk follows a frame's decode rows). Each output is `[48 positions][2 rows][q_heads * head_dim]`.
fn prefill_schedules<B: LmOps>(
    be: &B,
    h: Heads,
    seqs: &[Vec<Vec<f32>>; 2],
    tables: &[i32],
) -> Result<[Vec<f32>; 3]> {
    let (block_size, max_blocks) = (16, 4);
    let cache = vec![f32::NAN; 9 * block_size * h.kv_dim()];
    let n = h.q * h.hd;
    let fresh = || Paged::new(be, h, (block_size, max_blocks), tables, (&cache, &cache));
    let qkv = |from: usize, to: usize| -> Vec<f32> {
        seqs.iter().flat_map(|s| s[from..to].concat()).collect()
    };
    // [rows][time] output -> appended per position.
    let push = |acc: &mut Vec<f32>, o: &[f32], time: usize| {
        for t in 0..time {
            for r in 0..2 {
                acc.extend_from_slice(&o[(r * time + t) * n..(r * time + t + 1) * n]);
            }
        }
    };
    let mut a = Vec::new();
    let mut paged = fresh()?;
    push(&mut a, &paged.call(be, &qkv(0, 40), &[0, 0])?, 40);
    for t in 40..48 {
        push(&mut a, &paged.call(be, &qkv(t, t + 1), &[t as i32; 2])?, 1);
    }
    let mut b = Vec::new();
    push(&mut b, &fresh()?.call(be, &qkv(0, 48), &[0, 0])?, 48);
    let mut c = Vec::new();
    let mut paged = fresh()?;
    push(&mut c, &paged.call(be, &qkv(0, 24), &[0, 0])?, 24);
    push(&mut c, &paged.call_at(be, &qkv(24, 40), &[24, 24], 5)?, 16);
    for t in 40..48 {
        push(
            &mut c,
            &paged.call_at(be, &qkv(t, t + 1), &[t as i32; 2], 3)?,
            1,
        );
    }
    Ok([a, b, c])
}

#[test]
fn paged_prefill_then_decode_matches_one_long_prefill() {
    for (h, seed) in [(QWEN, 106), (SMALL, 107)] {
        let mut rng = Rng::new(seed);
        let seqs = [0, 1].map(|_| (0..48).map(|_| rng.vec(h.width(), 2.0)).collect::<Vec<_>>());
        let tables = [7, 2, 5, -1, 1, 8, 3, 6];
        let want: Vec<f64> = (0..48)
            .flat_map(|t| {
                seqs.iter()
                    .flat_map(|s| {
                        let keys: Vec<f32> = s[..=t]
                            .iter()
                            .flat_map(|x| kv_part(h, x, 0).to_vec())
                            .collect();
                        let vals: Vec<f32> = s[..=t]
                            .iter()
                            .flat_map(|x| kv_part(h, x, 1).to_vec())
                            .collect();
                        naive(h, &s[t], &keys, &vals, t + 1)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let cpu_out = prefill_schedules(&cpu(), h, &seqs, &tables).expect("cpu");
        let cpu_err = rel_l2_f64(&cpu_out[0], &want);
        let name = format!("prefill {}/{}x{}", h.q, h.kv, h.hd);
        eprintln!("{name}: CPU backend vs f64 reference: rel L2 {cpu_err:.3e}");
        for p in PRECISIONS {
            let Some(be) = cuda(p) else { return };
            let got = prefill_schedules(&be, h, &seqs, &tables).expect("cuda");
            let labels = [
                "prefill 40 + 8 steps",
                "one prefill of 48",
                "prefill 24 + 16 + 8 steps",
            ];
            for (label, g) in labels.iter().zip(&got) {
                assert_ref(&format!("{name}: {label}"), p, g, &want);
            }
            for (i, label) in labels.iter().enumerate().skip(1) {
                let err = rel_l2(&got[i], &got[0]);
                eprintln!(
                    "{name} [{}]: {label} vs {}: rel L2 {err:.3e}",
                    p.name(),
                    labels[0]
                );
                assert!(
                    err <= tolerance(p) / 10.0,
                    "{name}: {label} vs {}: {err:e}",
                    labels[0]
                );
            }
            assert!(
                cpu_err <= tolerance(Precision::F32),
                "CPU backend off the f64 reference: {cpu_err:e}"
            );
            for (label, (g, w)) in labels.iter().zip(got.iter().zip(&cpu_out)) {
                assert_parity(&format!("{name}: {label} vs CPU"), p, g, w);
            }
        }
    }
}

#[test]
fn paged_long_prefill_sampled_and_timed() {
    // Two rows of 5,000 prompt tokens (Qwen3 heads, blocks of 256): sampled queries against f64,
    // and the eager device time of the call.
    let h = QWEN;
    let (time, block_size, max_blocks) = (5000, 256, 20);
    let mut rng = Rng::new(108);
    let qkv = rng.vec(2 * time * h.width(), 2.0);
    let tables: Vec<i32> = (0..2 * max_blocks as i32)
        .map(|i| 1 + (i * 7) % 40)
        .collect();
    let samples = [0, 1, 255, 256, 1999, 4095, 4999];
    let want: Vec<f64> = (0..2)
        .flat_map(|r| {
            let rows: Vec<&[f32]> = (0..time)
                .map(|t| &qkv[(r * time + t) * h.width()..(r * time + t + 1) * h.width()])
                .collect();
            let keys: Vec<f32> = rows
                .iter()
                .flat_map(|x| kv_part(h, x, 0).to_vec())
                .collect();
            let vals: Vec<f32> = rows
                .iter()
                .flat_map(|x| kv_part(h, x, 1).to_vec())
                .collect();
            samples
                .iter()
                .flat_map(|&t| naive(h, rows[t], &keys, &vals, t + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    for p in PRECISIONS {
        let Some(be) = cuda(p) else { return };
        let cache = be
            .zeros(41 * block_size * h.kv_dim(), BufRole::Pool)
            .expect("zeros");
        let mut paged = Paged {
            heads: h,
            k: cache,
            v: be
                .zeros(41 * block_size * h.kv_dim(), BufRole::Pool)
                .expect("zeros"),
            tables: ints(&be, &tables).expect("tables"),
            block_size,
            max_blocks,
            window: None,
            scales: None,
        };
        be.set_profiling(true);
        let mut out = Vec::new();
        for _ in 0..2 {
            out = paged.call(&be, &qkv, &[0, 0]).expect("prefill");
        }
        let prof = be.take_profile().expect("profile");
        be.set_profiling(false);
        let n = h.q * h.hd;
        let got: Vec<f32> = (0..2)
            .flat_map(|r| {
                samples
                    .iter()
                    .flat_map(|&t| out[(r * time + t) * n..(r * time + t + 1) * n].to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_ref("prefill 2 x 5000, sampled queries", p, &got, &want);
        for t in prof {
            eprintln!(
                "timing prefill 2 rows x 5000 tokens, 32/8x128 [{}]: {} {:.3} ms per call",
                p.name(),
                t.op,
                t.total_ms / t.calls as f32
            );
        }
    }
}
