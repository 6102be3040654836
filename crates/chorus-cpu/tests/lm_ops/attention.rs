//! Paged attention: prefill, chunked prefill and decode against naive causal attention, scattered
//! block tables with positions crossing blocks, padded rows on the null block, no read past the
//! context, and batch invariance.

use super::*;
use crate::common::Rng;
use chorus_core::lm_ops::{HeadGeom, PagedAttentionArgs};

const Q_HEADS: usize = 8;
const KV_HEADS: usize = 2;
const HD: usize = 32;
const BLOCK_SIZE: usize = 4;
const NUM_BLOCKS: usize = 24;
const MAX_BLOCKS: usize = 6;
const WIDTH: usize = (Q_HEADS + 2 * KV_HEADS) * HD;
const KV_DIM: usize = KV_HEADS * HD;
const CACHE_LEN: usize = NUM_BLOCKS * BLOCK_SIZE * KV_DIM;
const PAD: [i32; MAX_BLOCKS] = [0; MAX_BLOCKS];

fn geom(rows: usize, time: usize) -> HeadGeom {
    HeadGeom {
        rows,
        time,
        q_heads: Q_HEADS,
        kv_heads: KV_HEADS,
        head_dim: HD,
    }
}

/// Block size and table width of a call.
#[derive(Clone, Copy)]
struct Layout {
    block_size: usize,
    max_blocks: usize,
}

/// A layer's K and V caches.
struct Cache {
    k: CpuBuf,
    v: CpuBuf,
}

impl Cache {
    fn new(be: &CpuBackend, k: &[f32], v: &[f32]) -> Self {
        Self {
            k: buf(be, k),
            v: buf(be, v),
        }
    }

    fn filled(be: &CpuBackend, x: f32) -> Self {
        Self::new(be, &vec![x; CACHE_LEN], &vec![x; CACHE_LEN])
    }

    /// One call over `rows` rows of `time` tokens each, with this file's block layout.
    fn run(
        &mut self,
        be: &CpuBackend,
        qkv: &[f32],
        tables: &[[i32; MAX_BLOCKS]],
        start: &[i32],
    ) -> Vec<f32> {
        let layout = Layout {
            block_size: BLOCK_SIZE,
            max_blocks: MAX_BLOCKS,
        };
        self.run_with(be, qkv, (&tables.concat(), start), layout)
    }

    /// One call with another block layout; `rows` is `(block tables, start)`.
    fn run_with(
        &mut self,
        be: &CpuBackend,
        qkv: &[f32],
        rows: (&[i32], &[i32]),
        layout: Layout,
    ) -> Vec<f32> {
        let (tables, start) = rows;
        let rows = start.len();
        let g = geom(rows, qkv.len() / WIDTH / rows);
        let mut out = be
            .zeros(g.tokens() * Q_HEADS * HD, BufRole::Activation)
            .unwrap();
        be.paged_attention(PagedAttentionArgs {
            kv_scales: None,
            first_token: 0,
            qkv: &mut buf(be, qkv),
            k_cache: &mut self.k,
            v_cache: &mut self.v,
            block_tables: &ints(be, tables),
            start: &ints(be, start),
            out: &mut out,
            geom: g,
            block_size: layout.block_size,
            max_blocks: layout.max_blocks,
            window: None,
        })
        .unwrap();
        down(be, &out)
    }
}

/// Causal GQA attention in f64 for the query at position `p` of a sequence of qkv rows, with
/// this file's heads.
fn naive(seq: &[Vec<f32>], p: usize) -> Vec<f64> {
    naive_heads(seq, p, (Q_HEADS, KV_HEADS))
}

/// [`naive`] with `heads = (q_heads, kv_heads)` of `HD` dims.
fn naive_heads(seq: &[Vec<f32>], p: usize, heads: (usize, usize)) -> Vec<f64> {
    let (qh, kvh) = heads;
    let mut out = vec![0.0; qh * HD];
    for h in 0..qh {
        let q = &seq[p][h * HD..(h + 1) * HD];
        let kv = h / (qh / kvh);
        let (k_at, v_at) = ((qh + kv) * HD, (qh + kvh + kv) * HD);
        let scores: Vec<f64> = (0..=p)
            .map(|kp| {
                let dot: f64 = (0..HD)
                    .map(|d| q[d] as f64 * seq[kp][k_at + d] as f64)
                    .sum();
                dot / (HD as f64).sqrt()
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for kp in 0..=p {
            for d in 0..HD {
                out[h * HD + d] += e[kp] / sum * seq[kp][v_at + d] as f64;
            }
        }
    }
    out
}

fn random_seq(rng: &mut Rng, n: usize) -> Vec<Vec<f32>> {
    (0..n).map(|_| rng.vec(WIDTH, 1.5)).collect()
}

/// The qkv of one call: each row's tokens `from..from + time`.
fn call_qkv(parts: &[(&[Vec<f32>], usize)], time: usize) -> Vec<f32> {
    parts
        .iter()
        .flat_map(|&(seq, from)| seq[from..from + time].concat())
        .collect()
}

const T0: [i32; MAX_BLOCKS] = [5, 2, 9, 1, 7, 3];
const T1: [i32; MAX_BLOCKS] = [4, 8, 6, 10, 11, 12];

#[test]
fn paged_prefill_then_decode_matches_full_causal_attention() {
    let be = common::backend();
    let mut rng = Rng::new(20);
    let (s0, s1, pad) = (
        random_seq(&mut rng, 19),
        random_seq(&mut rng, 16),
        random_seq(&mut rng, 10),
    );
    let mut cache = Cache::filled(&be, 0.0);
    let tok = |o: &[f32], t: usize| o[t * Q_HEADS * HD..(t + 1) * Q_HEADS * HD].to_vec();
    let (mut got0, mut got1) = (Vec::new(), Vec::new());
    // Prefill of 10 for both songs' rows (and a padded row on the null block).
    let o = cache.run(
        &be,
        &call_qkv(&[(&s0, 0), (&s1, 0), (&pad, 0)], 10),
        &[T0, T1, PAD],
        &[0, 0, 0],
    );
    (0..10).for_each(|t| got0.push(tok(&o, t)));
    (10..20).for_each(|t| got1.push(tok(&o, t)));
    // The padded row's ten writes all landed in the null block, in token order: its entry `e`
    // holds the last position `p` with `p % 4 == e` (8, 9, 6, 7).
    let k0 = &down(&be, &cache.k)[..BLOCK_SIZE * KV_DIM];
    for (e, p) in [8, 9, 6, 7].into_iter().enumerate() {
        let k_at = Q_HEADS * HD;
        assert_bits(
            "null block",
            &k0[e * KV_DIM..(e + 1) * KV_DIM],
            &pad[p][k_at..k_at + KV_DIM],
        );
    }
    // A chunked-prefill continuation of 3 for row 0 only.
    let o = cache.run(
        &be,
        &call_qkv(&[(&s0, 10), (&pad, 0)], 3),
        &[T0, PAD],
        &[10, 0],
    );
    (0..3).for_each(|t| got0.push(tok(&o, t)));
    // Decode steps with the rows at different positions and in another order.
    for i in 0..6 {
        let o = cache.run(
            &be,
            &call_qkv(&[(&s1, 10 + i), (&s0, 13 + i), (&pad, i)], 1),
            &[T1, T0, PAD],
            &[10 + i as i32, 13 + i as i32, 0],
        );
        got1.push(tok(&o, 0));
        got0.push(tok(&o, 1));
    }
    for (name, seq, got) in [("row 0", &s0, &got0), ("row 1", &s1, &got1)] {
        assert_eq!(got.len(), seq.len());
        let want: Vec<f64> = (0..seq.len()).flat_map(|p| naive(seq, p)).collect();
        assert_near(name, &got.concat(), &want);
    }
    // One prefill of the whole sequence gives the same bits: a query's keys are visited in one
    // order whether they were written in this call or earlier ones.
    let mut fresh = Cache::filled(&be, 0.0);
    let whole = fresh.run(&be, &s0.concat(), &[T0], &[0]);
    assert_bits("stepwise vs one prefill", &got0.concat(), &whole);
}

#[test]
fn paged_long_prefill_crosses_softmax_chunks() {
    // 150 prompt tokens then 5 decode steps: each query's keys span several online-softmax
    // blocks, so the running max and the rescaling are exercised.
    let be = common::backend();
    let mut rng = Rng::new(23);
    let layout = Layout {
        block_size: 16,
        max_blocks: 10,
    };
    let table = [3, 7, 1, 10, 5, 9, 2, 11, 4, 6];
    let tables = [table, [0; 10]].concat();
    let (seq, pad) = (random_seq(&mut rng, 155), random_seq(&mut rng, 150));
    let len = 12 * layout.block_size * KV_DIM;
    let mut cache = Cache::new(&be, &vec![f32::NAN; len], &vec![f32::NAN; len]);
    let mut got = cache.run_with(
        &be,
        &call_qkv(&[(&seq, 0), (&pad, 0)], 150),
        (&tables, &[0, 0]),
        layout,
    );
    got.truncate(150 * Q_HEADS * HD);
    for i in 0..5 {
        let o = cache.run_with(
            &be,
            &call_qkv(&[(&seq, 150 + i), (&pad, i)], 1),
            (&tables, &[150 + i as i32, 0]),
            layout,
        );
        got.extend_from_slice(&o[..Q_HEADS * HD]);
    }
    let want: Vec<f64> = (0..seq.len()).flat_map(|p| naive(&seq, p)).collect();
    assert_near("long prefill + decode", &got, &want);
}

#[test]
fn paged_attention_handles_any_head_grouping() {
    // The CPU kernel runs up to 8 query heads of one kv head together: groups of 16 (two runs),
    // 6, 9 (runs of 3) and 1 must all match the reference.
    let be = common::backend();
    let mut rng = Rng::new(24);
    for heads in [(16, 1), (12, 2), (9, 1), (3, 3)] {
        let (qh, kvh) = heads;
        let g = HeadGeom {
            rows: 1,
            time: 9,
            q_heads: qh,
            kv_heads: kvh,
            head_dim: HD,
        };
        let seq: Vec<Vec<f32>> = (0..9).map(|_| rng.vec(g.qkv_width(), 1.5)).collect();
        let cache_len = 8 * BLOCK_SIZE * kvh * HD;
        let (mut k, mut v) = (
            buf(&be, &vec![f32::NAN; cache_len]),
            buf(&be, &vec![f32::NAN; cache_len]),
        );
        let mut out = be.zeros(9 * qh * HD, BufRole::Activation).unwrap();
        be.paged_attention(PagedAttentionArgs {
            kv_scales: None,
            first_token: 0,
            qkv: &mut buf(&be, &seq.concat()),
            k_cache: &mut k,
            v_cache: &mut v,
            block_tables: &ints(&be, &[6, 2, 7]),
            start: &ints(&be, &[0]),
            out: &mut out,
            geom: g,
            block_size: BLOCK_SIZE,
            max_blocks: 3,
            window: None,
        })
        .unwrap();
        let want: Vec<f64> = (0..9).flat_map(|p| naive_heads(&seq, p, heads)).collect();
        assert_near(&format!("heads {heads:?}"), &down(&be, &out), &want);
    }
}

#[test]
fn paged_attention_never_reads_past_the_context() {
    let be = common::backend();
    let mut rng = Rng::new(21);
    let (s0, s1, pad) = (
        random_seq(&mut rng, 8),
        random_seq(&mut rng, 8),
        random_seq(&mut rng, 8),
    );
    let mut outs = Vec::new();
    for fill in [f32::NAN, 0.0] {
        let mut cache = Cache::filled(&be, fill);
        let mut o = cache.run(
            &be,
            &call_qkv(&[(&s0, 0), (&s1, 0), (&pad, 0)], 7),
            &[T0, T1, PAD],
            &[0, 0, 0],
        );
        // Position 7 (block T0[1], entry 3) is past the context: still the fill value.
        let at = (T0[1] as usize * BLOCK_SIZE + 3) * KV_DIM;
        assert_eq!(down(&be, &cache.k)[at].is_nan(), fill.is_nan());
        o.extend(cache.run(
            &be,
            &call_qkv(&[(&s0, 7), (&s1, 7), (&pad, 0)], 1),
            &[T0, T1, PAD],
            &[7, 7, 0],
        ));
        assert!(
            o.iter().all(|v| v.is_finite()),
            "fill {fill}: non-finite output"
        );
        outs.push(o);
    }
    assert_bits("NaN-filled vs zero-filled cache", &outs[0], &outs[1]);
}

#[test]
fn paged_attention_rows_are_batch_invariant() {
    let be = common::backend();
    let mut rng = Rng::new(22);
    let (k_host, v_host) = (rng.vec(CACHE_LEN, 1.5), rng.vec(CACHE_LEN, 1.5));
    let target: [i32; MAX_BLOCKS] = [13, 3, 17, 8, 21, 6];
    // Other rows use blocks disjoint from the target's (and padded rows block 0).
    let tables = [
        [1, 2, 4, 5, 7, 9],
        PAD,
        [10, 11, 12, 14, 15, 16],
        target,
        PAD,
        [18, 19, 20, 22, 23, 0],
    ];
    let start = [2, 0, 14, 9, 0, 5];
    for time in [1, 3] {
        let seqs: Vec<Vec<Vec<f32>>> = (0..6).map(|_| random_seq(&mut rng, time)).collect();
        let parts: Vec<(&[Vec<f32>], usize)> = seqs.iter().map(|s| (s.as_slice(), 0)).collect();
        let mut alone = Cache::new(&be, &k_host, &v_host);
        let a = alone.run(&be, &call_qkv(&parts[3..4], time), &[target], &[9]);
        let mut batch = Cache::new(&be, &k_host, &v_host);
        let b = batch.run(&be, &call_qkv(&parts, time), &tables, &start);
        let per_row = time * Q_HEADS * HD;
        assert_bits(
            &format!("time {time}: output"),
            &b[3 * per_row..4 * per_row],
            &a,
        );
        let (ka, kb) = (down(&be, &alone.k), down(&be, &batch.k));
        for &blk in &target {
            let r = blk as usize * BLOCK_SIZE * KV_DIM..(blk as usize + 1) * BLOCK_SIZE * KV_DIM;
            assert_bits(&format!("time {time}: block {blk}"), &kb[r.clone()], &ka[r]);
        }
    }
}

#[test]
fn paged_attention_rejects_bad_tables_and_buffers() {
    let be = common::backend();
    let qkv = vec![0.0; 2 * WIDTH];
    let mut cache = Cache::filled(&be, 0.0);
    let mut attempt = |tables: &[i32], start: &[i32], out_len: usize| {
        let mut out = be.zeros(out_len, BufRole::Activation).unwrap();
        be.paged_attention(PagedAttentionArgs {
            kv_scales: None,
            first_token: 0,
            qkv: &mut buf(&be, &qkv),
            k_cache: &mut cache.k,
            v_cache: &mut cache.v,
            block_tables: &ints(&be, tables),
            start: &ints(&be, start),
            out: &mut out,
            geom: geom(1, 2),
            block_size: BLOCK_SIZE,
            max_blocks: MAX_BLOCKS,
            window: None,
        })
    };
    let full = 2 * Q_HEADS * HD;
    assert!(attempt(&T0, &[3], full).is_ok());
    assert!(attempt(&T0, &[3], full - 1).is_err(), "out too short");
    assert!(
        attempt(&[5, 24, 0, 0, 0, 0], &[3], full).is_err(),
        "block 24 of 24"
    );
    assert!(
        attempt(&[5, -1, 0, 0, 0, 0], &[3], full).is_err(),
        "negative block"
    );
    assert!(
        attempt(&T0, &[23], full).is_err(),
        "position 24 needs block 6 of 6"
    );
    assert!(attempt(&T0, &[-1], full).is_err(), "negative start");
    assert!(attempt(&T0[..5], &[3], full).is_err(), "table too short");
}

/// Naive attention of position `p` over the keys `p + 1 - window..=p` only.
fn naive_window(seq: &[Vec<f32>], p: usize, window: usize) -> Vec<f64> {
    let first = (p + 1).saturating_sub(window);
    naive(&seq[first..], p - first)
}

/// One windowed call: `rows` = (block tables, start), ring of `max_blocks * BLOCK_SIZE`.
fn run_window(
    be: &CpuBackend,
    cache: &mut Cache,
    qkv: &[f32],
    rows: (&[i32], &[i32]),
    (max_blocks, window): (usize, usize),
) -> chorus_core::Result<Vec<f32>> {
    let (tables, start) = rows;
    let g = geom(start.len(), qkv.len() / WIDTH / start.len());
    let mut out = be.zeros(g.tokens() * Q_HEADS * HD, BufRole::Activation)?;
    be.paged_attention(PagedAttentionArgs {
        kv_scales: None,
        first_token: 0,
        qkv: &mut buf(be, qkv),
        k_cache: &mut cache.k,
        v_cache: &mut cache.v,
        block_tables: &ints(be, tables),
        start: &ints(be, start),
        out: &mut out,
        geom: g,
        block_size: BLOCK_SIZE,
        max_blocks,
        window: Some(window),
    })?;
    Ok(down(be, &out))
}

#[test]
fn windowed_attention_reads_the_last_window_over_a_ring() {
    // Window 6 over rings of 2 blocks (8 entries): a 3-token prefill, then decode far past the
    // ring, both rows in every call; the cache starts as NaN, so a read outside the window shows.
    let be = common::backend();
    let mut rng = Rng::new(31);
    let (s0, s1) = (random_seq(&mut rng, 23), random_seq(&mut rng, 23));
    let mut cache = Cache::filled(&be, f32::NAN);
    let tables = [5, 2, 9, 1];
    let per_tok = Q_HEADS * HD;
    let o = run_window(
        &be,
        &mut cache,
        &call_qkv(&[(&s0, 0), (&s1, 0)], 3),
        (&tables, &[0, 0]),
        (2, 6),
    )
    .unwrap();
    for t in 0..3 {
        let want = naive_window(&s0, t, 6);
        assert_near("prefill row 0", &o[t * per_tok..(t + 1) * per_tok], &want);
        let want = naive_window(&s1, t, 6);
        assert_near(
            "prefill row 1",
            &o[(3 + t) * per_tok..(4 + t) * per_tok],
            &want,
        );
    }
    for p in 3..23 {
        let qkv = call_qkv(&[(&s0, p), (&s1, p)], 1);
        let o = run_window(&be, &mut cache, &qkv, (&tables, &[p as i32; 2]), (2, 6)).unwrap();
        assert_near(
            &format!("row 0 at {p}"),
            &o[..per_tok],
            &naive_window(&s0, p, 6),
        );
        assert_near(
            &format!("row 1 at {p}"),
            &o[per_tok..],
            &naive_window(&s1, p, 6),
        );
    }
}

#[test]
fn windowed_attention_refuses_a_ring_shorter_than_the_window() {
    let be = common::backend();
    let mut rng = Rng::new(32);
    let s = random_seq(&mut rng, 3);
    let mut cache = Cache::filled(&be, 0.0);
    // Ring 8, window 7, 3 tokens: a write would land on a key another query of the call reads.
    let err = run_window(&be, &mut cache, &s.concat(), (&[5, 2], &[0]), (2, 7))
        .unwrap_err()
        .to_string();
    assert!(err.contains("window 7 over a ring of 8"), "{err}");
    let err = run_window(&be, &mut cache, &s[0], (&[5, 2], &[0]), (2, 0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("window 0"), "{err}");
}
