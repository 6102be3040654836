//! The LM's paged attention and CFG draw on CUDA, in f32 (validation mode) and bf16, against the
//! CPU backend and against references written here (causal attention in f64; for the draw, the
//! CPU backend's codes exactly). Every op runs inside `Backend::run`, so what is checked on CUDA is
//! a captured graph's replay. Every figure is printed (run with `--nocapture` to see them). Skips
//! (passes with a note) when no CUDA device is present.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use chorus_core::lm_ops::{CfgDrawArgs, DrawMode, HeadGeom, PagedAttentionArgs};
use chorus_core::{Backend, BufRole, LmOps, Precision, Result};
use chorus_cuda::CudaBackend;
use common::*;

/// A fresh program key: a captured graph points at the buffers of its first run, so every call
/// with other buffers needs its own key.
fn key() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1 << 20);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Device ints holding `v`, through the pinned path as the host feeds them.
fn ints<B: LmOps>(be: &B, v: &[i32]) -> Result<B::Ints> {
    let mut pinned = be.pinned_ints(v.len())?;
    be.pinned_ints_mut(&mut pinned)?.copy_from_slice(v);
    let mut out = be.ints(v.len(), -7)?;
    be.copy_in_ints(&pinned, &mut out, v.len())?;
    // Waits for the copy while `pinned` is still alive.
    be.download_ints(&out)?;
    Ok(out)
}

/// `||got - want|| / ||want||` against an f64 reference.
fn rel_l2_f64(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    assert!(got.iter().all(|g| g.is_finite()), "non-finite output");
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w) * (g as f64 - w);
        den += w * w;
    }
    assert!(
        den > 0.0,
        "the reference is all zeros: the test would prove nothing"
    );
    (num / den).sqrt()
}

fn assert_ref(what: &str, p: Precision, got: &[f32], want: &[f64]) {
    let err = rel_l2_f64(got, want);
    let tol = tolerance(p);
    eprintln!(
        "reference {what} [{}]: rel L2 vs f64 {err:.3e} (tolerance {tol:.0e})",
        p.name()
    );
    assert!(
        err <= tol,
        "{what} [{}]: relative L2 error vs f64 {err:e} > {tol:e}",
        p.name()
    );
}

// ------------------------------------------------------------------------------------------------
// Paged attention

/// Head layout of a model.
#[derive(Clone, Copy, Debug)]
struct Heads {
    q: usize,
    kv: usize,
    hd: usize,
}

impl Heads {
    fn width(&self) -> usize {
        (self.q + 2 * self.kv) * self.hd
    }

    fn kv_dim(&self) -> usize {
        self.kv * self.hd
    }

    fn geom(&self, rows: usize, time: usize) -> HeadGeom {
        HeadGeom {
            rows,
            time,
            q_heads: self.q,
            kv_heads: self.kv,
            head_dim: self.hd,
        }
    }
}

const QWEN: Heads = Heads {
    q: 32,
    kv: 8,
    hd: 128,
};
const SMALL: Heads = Heads {
    q: 8,
    kv: 2,
    hd: 64,
};
const DEPTH: Heads = Heads {
    q: 16,
    kv: 16,
    hd: 256,
};

/// One layer's caches and block tables on a backend.
struct Paged<B: LmOps> {
    heads: Heads,
    k: B::Buf,
    v: B::Buf,
    tables: B::Ints,
    block_size: usize,
    max_blocks: usize,
}

impl<B: LmOps> Paged<B> {
    fn new(
        be: &B,
        heads: Heads,
        (block_size, max_blocks): (usize, usize),
        tables: &[i32],
        (k, v): (&[f32], &[f32]),
    ) -> Result<Self> {
        Ok(Self {
            heads,
            k: be.upload(k, BufRole::Pool)?,
            v: be.upload(v, BufRole::Pool)?,
            tables: ints(be, tables)?,
            block_size,
            max_blocks,
        })
    }

    /// One call over `start.len()` rows of `qkv` (`[rows * time, width]`); returns the output.
    fn call(&mut self, be: &B, qkv: &[f32], start: &[i32]) -> Result<Vec<f32>> {
        let h = self.heads;
        let rows = start.len();
        let g = h.geom(rows, qkv.len() / h.width() / rows);
        let qkv = be.upload(qkv, BufRole::Activation)?;
        let start = ints(be, start)?;
        let mut out = be.zeros(g.tokens() * h.q * h.hd, BufRole::Activation)?;
        let (k, v, tables) = (&mut self.k, &mut self.v, &self.tables);
        let (block_size, max_blocks) = (self.block_size, self.max_blocks);
        be.run(key(), &mut |b: &B| {
            b.paged_attention(PagedAttentionArgs {
                qkv: &qkv,
                k_cache: &mut *k,
                v_cache: &mut *v,
                block_tables: tables,
                start: &start,
                out: &mut out,
                geom: g,
                block_size,
                max_blocks,
            })
        })?;
        be.download(&out)
    }
}

/// Causal GQA attention in f64 of one token (`q`: its qkv row) over the keys and values
/// `[n, kv_dim]` of positions `0..n`.
fn naive(h: Heads, q: &[f32], keys: &[f32], vals: &[f32], n: usize) -> Vec<f64> {
    let (hd, kvd, group) = (h.hd, h.kv_dim(), h.q / h.kv);
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0.0; h.q * hd];
    for head in 0..h.q {
        let at = (head / group) * hd;
        let qh = &q[head * hd..(head + 1) * hd];
        let scores: Vec<f64> = (0..n)
            .map(|kp| {
                let k = &keys[kp * kvd + at..kp * kvd + at + hd];
                qh.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        let o = &mut out[head * hd..(head + 1) * hd];
        for (kp, w) in e.iter().enumerate() {
            let v = &vals[kp * kvd + at..kp * kvd + at + hd];
            for (od, &vd) in o.iter_mut().zip(v) {
                *od += w / sum * vd as f64;
            }
        }
    }
    out
}

/// The k (`which = 0`) or v (`1`) part of a qkv row.
fn kv_part(h: Heads, row: &[f32], which: usize) -> &[f32] {
    let at = (h.q + which * h.kv) * h.hd;
    &row[at..at + h.kv_dim()]
}

/// Scattered block tables: row `r` gets `blocks[r]` distinct ids from a shuffled `1..num_blocks`
/// (none for padded rows, which point at the null block 0). Entries past a row's blocks hold ids
/// outside the pool: nothing may read them.
fn scattered_tables(
    rng: &mut Rng,
    blocks: &[usize],
    max_blocks: usize,
    num_blocks: usize,
) -> Vec<i32> {
    let mut ids: Vec<i32> = (1..num_blocks as i32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i + 1));
    }
    let mut next = ids.into_iter();
    let mut tables = Vec::new();
    for &n in blocks {
        for b in 0..max_blocks {
            tables.push(if n == 0 {
                0
            } else if b < n {
                next.next().expect("enough blocks")
            } else {
                -3 - b as i32
            });
        }
    }
    tables
}

/// A decode step over rows with histories of `contexts[r] - 1` positions already in the cache
/// (`None`: a padded row on the null block). Caches are NaN everywhere else, so a read past a
/// context poisons the output.
struct DecodeCase {
    heads: Heads,
    block_size: usize,
    max_blocks: usize,
    tables: Vec<i32>,
    start: Vec<i32>,
    k_init: Vec<f32>,
    v_init: Vec<f32>,
    qkv: Vec<f32>,
    /// Per real row: its index and the f64 output.
    want: Vec<(usize, Vec<f64>)>,
}

impl DecodeCase {
    fn new(seed: u64, heads: Heads, block_size: usize, contexts: &[Option<usize>]) -> Self {
        let mut rng = Rng::new(seed);
        let blocks: Vec<usize> = contexts
            .iter()
            .map(|c| c.map_or(0, |n| n.div_ceil(block_size)))
            .collect();
        let max_blocks = blocks.iter().copied().max().unwrap_or(1).max(1);
        let num_blocks = 1 + blocks.iter().sum::<usize>() + 3;
        let tables = scattered_tables(&mut rng, &blocks, max_blocks, num_blocks);
        let kvd = heads.kv_dim();
        let mut k_init = vec![f32::NAN; num_blocks * block_size * kvd];
        let mut v_init = k_init.clone();
        let mut qkv = Vec::new();
        let mut start = Vec::new();
        let mut want = Vec::new();
        for (r, c) in contexts.iter().enumerate() {
            let row = rng.vec(heads.width(), 2.0);
            qkv.extend_from_slice(&row);
            let Some(n) = *c else {
                start.push(0);
                continue;
            };
            // History positions 0..n-1 go straight into the cache; position n-1 is this call's.
            let mut keys = rng.vec(n * kvd, 2.0);
            let mut vals = rng.vec(n * kvd, 1.0);
            keys[(n - 1) * kvd..].copy_from_slice(kv_part(heads, &row, 0));
            vals[(n - 1) * kvd..].copy_from_slice(kv_part(heads, &row, 1));
            for p in 0..n - 1 {
                let blk = tables[r * max_blocks + p / block_size] as usize;
                let at = (blk * block_size + p % block_size) * kvd;
                k_init[at..at + kvd].copy_from_slice(&keys[p * kvd..(p + 1) * kvd]);
                v_init[at..at + kvd].copy_from_slice(&vals[p * kvd..(p + 1) * kvd]);
            }
            start.push(n as i32 - 1);
            want.push((r, naive(heads, &row, &keys, &vals, n)));
        }
        Self {
            heads,
            block_size,
            max_blocks,
            tables,
            start,
            k_init,
            v_init,
            qkv,
            want,
        }
    }

    fn run<B: LmOps>(&self, be: &B) -> Result<Vec<f32>> {
        let mut paged = Paged::new(
            be,
            self.heads,
            (self.block_size, self.max_blocks),
            &self.tables,
            (&self.k_init, &self.v_init),
        )?;
        paged.call(be, &self.qkv, &self.start)
    }

    /// The real rows of an output, in order.
    fn real_rows(&self, out: &[f32]) -> Vec<f32> {
        let n = self.heads.q * self.heads.hd;
        self.want
            .iter()
            .flat_map(|(r, _)| out[r * n..(r + 1) * n].to_vec())
            .collect()
    }
}

fn check_decode(
    name: &str,
    seed: u64,
    heads: Heads,
    block_size: usize,
    contexts: &[Option<usize>],
) {
    let case = DecodeCase::new(seed, heads, block_size, contexts);
    let want: Vec<f64> = case.want.iter().flat_map(|(_, w)| w.clone()).collect();
    let cpu_out = case.real_rows(&case.run(&cpu()).expect("cpu paged_attention"));
    let cpu_err = rel_l2_f64(&cpu_out, &want);
    eprintln!("{name}: CPU backend vs f64 reference: rel L2 {cpu_err:.3e}");
    for p in PRECISIONS {
        let Some(be) = cuda(p) else { return };
        let got = case.real_rows(&case.run(&be).expect("cuda paged_attention"));
        assert_ref(name, p, &got, &want);
        assert!(
            cpu_err <= tolerance(Precision::F32),
            "{name}: the CPU backend is {cpu_err:e} (rel L2) from the f64 reference of \
             softmax(q.k / sqrt(head_dim)) v, so CPU parity cannot hold; the CUDA output above \
             matches the reference"
        );
        assert_parity(&format!("{name} vs CPU"), p, &got, &cpu_out);
    }
}

#[test]
fn paged_decode_qwen3_contexts_1_to_3000() {
    // 32/8 x 128, blocks of 256, two padded rows among the real ones.
    check_decode(
        "decode 32/8x128 bs256",
        101,
        QWEN,
        256,
        &[Some(1000), None, Some(1), Some(3000), None, Some(300)],
    );
}

#[test]
fn paged_decode_small_gqa_block16() {
    check_decode(
        "decode 8/2x64 bs16",
        102,
        SMALL,
        16,
        &[Some(300), Some(3000), None, Some(1), Some(1000)],
    );
    // A block size that is not a multiple of the decode kernel's 4-key steps: a step's keys
    // straddle blocks.
    check_decode(
        "decode 8/2x64 bs6",
        110,
        SMALL,
        6,
        &[Some(77), Some(1), None, Some(300), Some(6)],
    );
}

#[test]
fn paged_decode_many_rows_random_contexts() {
    // 40 rows: another split plan (fewer, longer splits), contexts across split boundaries.
    let mut rng = Rng::new(7);
    let contexts: Vec<Option<usize>> = (0..40)
        .map(|i| (i % 9 != 4).then(|| 1 + rng.below(2048)))
        .collect();
    check_decode("decode 8/2x64 bs256 40 rows", 103, SMALL, 256, &contexts);
    check_decode(
        "decode 32/8x128 bs64 12 rows",
        104,
        QWEN,
        64,
        &contexts[..12],
    );
}

#[test]
fn paged_decode_short_contexts_one_pair_per_lane_group() {
    // Contexts of at most 64 positions without GQA take the decode kernel's one pair per lane
    // group mode: at head_dim 64 and 128, 2 to 4 groups (rows of different lengths) share a warp.
    let mut rng = Rng::new(8);
    let contexts: Vec<Option<usize>> = (0..37)
        .map(|i| (i % 7 != 3).then(|| 1 + rng.below(32)))
        .collect();
    let h64 = Heads {
        q: 4,
        kv: 4,
        hd: 64,
    };
    check_decode("decode 4/4x64 bs16 ctx <= 32", 111, h64, 16, &contexts);
    let contexts: Vec<Option<usize>> = (0..11)
        .map(|i| (i != 5).then(|| 1 + rng.below(64)))
        .collect();
    let h128 = Heads {
        q: 8,
        kv: 8,
        hd: 128,
    };
    check_decode("decode 8/8x128 bs16 ctx <= 64", 112, h128, 16, &contexts);
}

#[test]
fn paged_decode_depth_decoder_shape() {
    // 16/16 x 256, one block of 16 per row, positions 0..7: stepwise decode vs f64 and CPU, then
    // one prefill of the 8 positions (the general kernel at head_dim 256) vs the steps.
    let h = DEPTH;
    let rows = 6;
    let (block_size, max_blocks) = (16, 1);
    let tables: Vec<i32> = vec![3, 0, 1, 5, 0, 2];
    let real = [0, 2, 3, 5];
    let mut rng = Rng::new(105);
    let seqs: Vec<Vec<Vec<f32>>> = (0..rows)
        .map(|_| (0..8).map(|_| rng.vec(h.width(), 2.0)).collect())
        .collect();
    let cache = vec![f32::NAN; 7 * block_size * h.kv_dim()];
    let run = |be_cpu: Option<&chorus_cpu::CpuBackend>, be_cuda: Option<&CudaBackend>| {
        let mut steps = Vec::new();
        let mut prefill = Vec::new();
        macro_rules! go {
            ($be:expr) => {{
                let be = $be;
                let mut paged =
                    Paged::new(be, h, (block_size, max_blocks), &tables, (&cache, &cache))
                        .expect("cache");
                for t in 0..8 {
                    let qkv: Vec<f32> = seqs.iter().flat_map(|s| s[t].clone()).collect();
                    steps.push(paged.call(be, &qkv, &[t as i32; 6]).expect("step"));
                }
                let mut fresh =
                    Paged::new(be, h, (block_size, max_blocks), &tables, (&cache, &cache))
                        .expect("cache");
                let qkv: Vec<f32> = seqs.iter().flat_map(|s| s.concat()).collect();
                prefill = fresh.call(be, &qkv, &[0; 6]).expect("prefill");
            }};
        }
        if let Some(be) = be_cpu {
            go!(be);
        }
        if let Some(be) = be_cuda {
            go!(be);
        }
        (steps, prefill)
    };
    let n = h.q * h.hd;
    // Real rows, position-major like the steps: [t][row].
    let pick_steps = |steps: &[Vec<f32>]| -> Vec<f32> {
        steps
            .iter()
            .flat_map(|o| {
                real.iter()
                    .flat_map(move |&r| o[r * n..(r + 1) * n].to_vec())
            })
            .collect()
    };
    let pick_prefill = |o: &[f32]| -> Vec<f32> {
        (0..8)
            .flat_map(|t| {
                real.iter()
                    .flat_map(move |&r| o[(r * 8 + t) * n..(r * 8 + t + 1) * n].to_vec())
            })
            .collect()
    };
    let want: Vec<f64> = (0..8)
        .flat_map(|t| {
            real.iter()
                .flat_map(|&r| {
                    let keys: Vec<f32> = seqs[r][..=t]
                        .iter()
                        .flat_map(|x| kv_part(h, x, 0).to_vec())
                        .collect();
                    let vals: Vec<f32> = seqs[r][..=t]
                        .iter()
                        .flat_map(|x| kv_part(h, x, 1).to_vec())
                        .collect();
                    naive(h, &seqs[r][t], &keys, &vals, t + 1)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let (cpu_steps, cpu_prefill) = run(Some(&cpu()), None);
    let (cpu_steps, cpu_prefill) = (pick_steps(&cpu_steps), pick_prefill(&cpu_prefill));
    let cpu_err = rel_l2_f64(&cpu_steps, &want);
    eprintln!("depth 16/16x256: CPU backend vs f64 reference: rel L2 {cpu_err:.3e}");
    for p in PRECISIONS {
        let Some(be) = cuda(p) else { return };
        let (steps, prefill) = run(None, Some(&be));
        let (steps, prefill) = (pick_steps(&steps), pick_prefill(&prefill));
        assert_ref("depth steps", p, &steps, &want);
        assert_ref("depth prefill", p, &prefill, &want);
        let self_err = rel_l2(&prefill, &steps);
        eprintln!(
            "depth [{}]: prefill vs steps rel L2 {self_err:.3e}",
            p.name()
        );
        assert!(
            self_err <= tolerance(p) / 10.0,
            "prefill vs steps {self_err:e}"
        );
        assert!(
            cpu_err <= tolerance(Precision::F32),
            "CPU backend off the f64 reference: {cpu_err:e}"
        );
        assert_parity("depth steps vs CPU", p, &steps, &cpu_steps);
        assert_parity("depth prefill vs CPU", p, &prefill, &cpu_prefill);
    }
}

/// Outputs of three schedules of two 48-token rows (blocks of 16, NaN-filled caches): a prefill of
/// 40 then 8 decode steps; one prefill of 48; a chunked prefill of 24 + 16 then 8 decode steps.
/// Each output is `[48 positions][2 rows][q_heads * head_dim]`.
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
    push(&mut c, &paged.call(be, &qkv(24, 40), &[24, 24])?, 16);
    for t in 40..48 {
        push(&mut c, &paged.call(be, &qkv(t, t + 1), &[t as i32; 2])?, 1);
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

#[test]
fn paged_decode_timing() {
    // Replays of one decode call (KV write + attention + combine) on zero caches with every row at
    // the given context; bf16, the production precision.
    let Some(be) = cuda(Precision::Bf16) else {
        return;
    };
    let cases = [
        ("LM 1 song, ctx 14000", QWEN, 2usize, 14000usize, 256usize),
        ("LM 1 song, ctx 3000", QWEN, 2, 3000, 256),
        ("LM 8 songs, ctx 8000", QWEN, 16, 8000, 256),
        ("LM 128 songs, ctx 300", QWEN, 256, 300, 256),
        ("LM 128 songs, ctx 2000", QWEN, 256, 2000, 256),
        ("LM 128 songs, ctx 14000", QWEN, 256, 14000, 256),
        ("depth 128 songs, pos 7", DEPTH, 256, 8, 16),
    ];
    for (name, h, rows, ctx, block_size) in cases {
        let max_blocks = ctx.div_ceil(block_size);
        let num_blocks = 1 + rows * max_blocks;
        let tables: Vec<i32> = (0..(rows * max_blocks) as i32).map(|i| 1 + i).collect();
        let len = num_blocks * block_size * h.kv_dim();
        let mut paged = Paged::<CudaBackend> {
            heads: h,
            k: be.zeros(len, BufRole::Pool).expect("zeros"),
            v: be.zeros(len, BufRole::Pool).expect("zeros"),
            tables: ints(&be, &tables).expect("tables"),
            block_size,
            max_blocks,
        };
        let mut rng = Rng::new(109);
        let qkv = rng.vec(rows * h.width(), 1.0);
        let g = h.geom(rows, 1);
        let qkv_b = be.upload(&qkv, BufRole::Activation).expect("qkv");
        let start = ints(&be, &vec![ctx as i32 - 1; rows]).expect("start");
        let mut out = be
            .zeros(rows * h.q * h.hd, BufRole::Activation)
            .expect("out");
        let k = key();
        be.run(k, &mut |b: &CudaBackend| {
            b.paged_attention(PagedAttentionArgs {
                qkv: &qkv_b,
                k_cache: &mut paged.k,
                v_cache: &mut paged.v,
                block_tables: &paged.tables,
                start: &start,
                out: &mut out,
                geom: g,
                block_size,
                max_blocks,
            })
        })
        .expect("run");
        let mut ms = be.time_replay(k, 50).expect("time_replay");
        ms.sort_by(f32::total_cmp);
        let med = ms[ms.len() / 2];
        let bytes = (rows * ctx * h.kv_dim() * 2 * 2) as f64;
        eprintln!(
            "timing decode {name} ({}/{}x{}, {rows} rows): {:.1} us per call, K+V read {:.1} MB, {:.0} GB/s",
            h.q,
            h.kv,
            h.hd,
            med * 1e3,
            bytes / 1e6,
            bytes / (med as f64 * 1e-3) / 1e9
        );
        assert!(be
            .download(&out)
            .expect("out")
            .iter()
            .all(|v| v.is_finite()));
    }
}

// ------------------------------------------------------------------------------------------------
// CFG draw

/// Per-call settings.
#[derive(Clone, Copy, Debug)]
struct DrawCfg {
    cfg_scale: f32,
    cond_top_k: Option<usize>,
    top_k: usize,
    end: Option<usize>,
    draw_offset: u32,
}

/// Per-song inputs (`codes` is `[songs, STRIDE]`, drawn into column COL).
struct Songs {
    vocab: usize,
    logits: Vec<f32>,
    codes: Vec<i32>,
    mode: Vec<i32>,
    seeds: Vec<i32>,
    draws: Vec<i32>,
    allow_end: Vec<i32>,
}

const STRIDE: usize = 3;
const COL: usize = 2;

impl Songs {
    fn songs(&self) -> usize {
        self.mode.len()
    }

    /// Runs `cfg_draw` inside `run` and returns column COL of the codes.
    fn draw<B: LmOps>(&self, be: &B, c: DrawCfg) -> Result<Vec<i32>> {
        let songs = self.songs();
        let logits = be.upload(&self.logits, BufRole::Activation)?;
        let mut codes = ints(be, &self.codes)?;
        let (mode, seeds) = (ints(be, &self.mode)?, ints(be, &self.seeds)?);
        let (draws, allow_end) = (ints(be, &self.draws)?, ints(be, &self.allow_end)?);
        let vocab = self.vocab;
        be.run(key(), &mut |b: &B| {
            b.cfg_draw(CfgDrawArgs {
                logits: &logits,
                codes: &mut codes,
                mode: &mode,
                seeds: &seeds,
                draws: &draws,
                allow_end: &allow_end,
                songs,
                vocab,
                codes_stride: STRIDE,
                col: COL,
                draw_offset: c.draw_offset,
                cfg_scale: c.cfg_scale,
                cond_top_k: c.cond_top_k,
                top_k: c.top_k,
                end: c.end,
            })
        })?;
        let all = be.download_ints(&codes)?;
        for (i, (&got, &was)) in all.iter().zip(&self.codes).enumerate() {
            if i % STRIDE != COL {
                assert_eq!(got, was, "codes[{i}] outside the drawn column changed");
            }
        }
        Ok((0..songs).map(|s| all[s * STRIDE + COL]).collect())
    }
}

/// What the crafted songs are for (their index in `Songs`).
const TIES: usize = 0;
const END_MASKED: usize = 1;
const END_ALLOWED: usize = 2;
const COND_EXCLUDES: usize = 3;
const FORCED: usize = 4;
const NAN_MANY: usize = 5;
const NAN_FEW: usize = 6;
const ALL_EQUAL: usize = 7;
const CRAFTED: usize = 8;
/// The index whose guided value is the largest of song COND_EXCLUDES, but whose conditional logit
/// is below the conditional top-50.
const EXCLUDED_AT: usize = 17;
const FORCED_CODE: i32 = 777;

/// `songs` songs over `vocab`: the crafted ones first, then random logits (a quarter of them
/// quantised so that values tie), mixed modes, random seeds and draw indices. `round` rounds the
/// logits to bf16 first (so the CPU sees exactly what a bf16 backend stores).
fn make_songs(seed: u64, songs: usize, vocab: usize, round: bool) -> Songs {
    assert!(songs >= CRAFTED && vocab >= 256);
    let mut rng = Rng::new(seed);
    let end = vocab - 1;
    let mut logits = Vec::with_capacity(2 * songs * vocab);
    for s in 0..songs {
        let mut c = rng.vec(vocab, 6.0);
        let mut u: Vec<f32> = c.iter().map(|&x| 0.7 * x + rng.uniform(2.0)).collect();
        if s % 4 == 3 || s == TIES {
            // Quantised: many exact ties among c, u and the guided values.
            for x in c.iter_mut().chain(u.iter_mut()) {
                *x = (*x * 2.0).round() * 0.5;
            }
        }
        match s {
            TIES => {
                // The maximum at three places, ties all around the 50th value.
                for &i in &[vocab / 2, 9, vocab - 7] {
                    c[i] = 20.0;
                    u[i] = 20.0;
                }
            }
            END_MASKED | END_ALLOWED => {
                c[end] = 40.0;
                u[end] = 40.0;
            }
            COND_EXCLUDES => {
                // g = u + (c - u) * 1.5 = -200 + 180 * 1.5 = 70 (scale 1.5): the largest guided
                // value, but c = -20 is far below the conditional top-50.
                c[EXCLUDED_AT] = -20.0;
                u[EXCLUDED_AT] = -200.0;
            }
            NAN_MANY => {
                // 60 NaNs in c: the conditional 50th largest is NaN, so nothing is prefiltered.
                for i in 0..60 {
                    c[(i * 37) % vocab] = f32::NAN;
                }
                u[3] = f32::INFINITY;
                u[4] = f32::NEG_INFINITY;
                c[5] = f32::INFINITY;
            }
            NAN_FEW => {
                for i in 0..10 {
                    c[(i * 53 + 1) % vocab] = f32::NAN;
                    u[(i * 29 + 2) % vocab] = f32::NAN;
                }
                c[11] = f32::NEG_INFINITY;
                u[12] = f32::INFINITY;
                c[12] = 30.0;
            }
            ALL_EQUAL => {
                c.fill(1.25);
                u.fill(1.25);
            }
            _ => {}
        }
        logits.extend_from_slice(&c);
        logits.extend_from_slice(&u);
    }
    if round {
        for x in &mut logits {
            *x = half::bf16::from_f32(*x).to_f32();
        }
    }
    let mut codes = vec![-1; songs * STRIDE];
    for s in 0..songs {
        codes[s * STRIDE] = 5; // other columns: must stay untouched
    }
    codes[FORCED * STRIDE + COL] = FORCED_CODE;
    let mode = (0..songs)
        .map(|s| {
            if s % 5 == 1 || s == ALL_EQUAL || s == TIES {
                DrawMode::Greedy as i32
            } else {
                DrawMode::Noise as i32
            }
        })
        .collect();
    let seeds = (0..2 * songs).map(|_| rng.next_u64() as i32).collect();
    let draws = (0..songs)
        .map(|_| (rng.below(1 << 20) * 8) as i32)
        .collect();
    let mut allow_end: Vec<i32> = (0..songs).map(|s| (s % 3 != 0) as i32).collect();
    allow_end[END_MASKED] = 0;
    allow_end[END_ALLOWED] = 1;
    Songs {
        vocab,
        logits,
        codes,
        mode,
        seeds,
        draws,
        allow_end,
    }
}

/// The settings a test sweeps: the LM's (CFG 1.5, conditional top-50, top-50, END), greedy-like
/// top-1, everything a candidate, and a conditional top-1 prefilter.
fn draw_configs(vocab: usize) -> Vec<DrawCfg> {
    let mut cfgs = Vec::new();
    for draw_offset in 0..8 {
        cfgs.push(DrawCfg {
            cfg_scale: 1.5,
            cond_top_k: Some(50),
            top_k: 50,
            end: Some(vocab - 1),
            draw_offset,
        });
    }
    cfgs.push(DrawCfg {
        cfg_scale: 3.0,
        cond_top_k: None,
        top_k: 1,
        end: Some(vocab - 1),
        draw_offset: 3,
    });
    cfgs.push(DrawCfg {
        cfg_scale: 1.0,
        cond_top_k: Some(vocab + 5),
        top_k: vocab,
        end: None,
        draw_offset: 5,
    });
    cfgs.push(DrawCfg {
        cfg_scale: 0.0,
        cond_top_k: Some(1),
        top_k: 2,
        end: Some(0),
        draw_offset: 7,
    });
    cfgs
}

fn check_draws(name: &str, seed: u64, songs: usize, vocab: usize) {
    for p in PRECISIONS {
        // In bf16 mode the logits are bf16 values, so the CPU reference sees the same numbers.
        let data = make_songs(seed, songs, vocab, p == Precision::Bf16);
        let cfgs = draw_configs(vocab);
        let want: Vec<Vec<i32>> = cfgs
            .iter()
            .map(|&c| data.draw(&cpu(), c).expect("cpu cfg_draw"))
            .collect();
        // The crafted songs bite (checked on the CPU reference itself, LM settings).
        let lm = &want[0];
        assert_eq!(lm[FORCED], FORCED_CODE, "teacher forcing");
        assert_ne!(lm[END_MASKED], (vocab - 1) as i32, "END masked");
        assert_eq!(
            want[8][END_ALLOWED],
            (vocab - 1) as i32,
            "END allowed, top-1"
        );
        assert_ne!(
            lm[COND_EXCLUDES], EXCLUDED_AT as i32,
            "conditional prefilter"
        );
        assert!(
            want.iter().all(|w| w[TIES] == 9),
            "greedy tie: lowest index"
        );
        assert_eq!(lm[ALL_EQUAL], 0, "all equal, greedy: index 0");
        let Some(be) = cuda(p) else { return };
        let mut compared = 0;
        let mut noise = 0;
        for (i, (&c, w)) in cfgs.iter().zip(&want).enumerate() {
            let got = data.draw(&be, c).expect("cuda cfg_draw");
            for s in 0..songs {
                assert_eq!(
                    got[s],
                    w[s],
                    "{name} [{}] config {i} {c:?}: song {s} (mode {}): CUDA drew {}, CPU {}",
                    p.name(),
                    data.mode[s],
                    got[s],
                    w[s]
                );
            }
            compared += songs;
            noise += data
                .mode
                .iter()
                .filter(|&&m| m == DrawMode::Noise as i32)
                .count();
        }
        let distinct: std::collections::BTreeSet<i32> = want.iter().flatten().copied().collect();
        eprintln!(
            "{name} [{}]: {compared} draws over {} configs identical to the CPU backend \
             ({noise} noise races, {} distinct codes)",
            p.name(),
            cfgs.len(),
            distinct.len()
        );
    }
}

#[test]
fn cfg_draw_lm_vocab_matches_cpu_exactly() {
    check_draws("cfg_draw vocab 16385", 201, 40, 16385);
}

#[test]
fn cfg_draw_depth_vocab_matches_cpu_exactly() {
    check_draws("cfg_draw vocab 1024", 202, 64, 1024);
}

#[test]
fn cfg_draw_timing() {
    let Some(be) = cuda(Precision::Bf16) else {
        return;
    };
    for (songs, vocab) in [(1, 16385), (128, 16385), (128, 1024)] {
        let data = make_songs(203, songs.max(CRAFTED), vocab, true);
        let songs = data.songs();
        let logits = be
            .upload(&data.logits, BufRole::Activation)
            .expect("logits");
        let mut codes = be.ints(songs * STRIDE, -1).expect("codes");
        let mode = ints(&be, &vec![DrawMode::Noise as i32; songs]).expect("mode");
        let seeds = ints(&be, &data.seeds).expect("seeds");
        let draws = ints(&be, &data.draws).expect("draws");
        let allow_end = ints(&be, &data.allow_end).expect("allow_end");
        let k = key();
        be.run(k, &mut |b: &CudaBackend| {
            b.cfg_draw(CfgDrawArgs {
                logits: &logits,
                codes: &mut codes,
                mode: &mode,
                seeds: &seeds,
                draws: &draws,
                allow_end: &allow_end,
                songs,
                vocab,
                codes_stride: STRIDE,
                col: COL,
                draw_offset: 0,
                cfg_scale: 1.5,
                cond_top_k: Some(50),
                top_k: 50,
                end: Some(vocab - 1),
            })
        })
        .expect("run");
        // A drawn song is skipped by later replays (teacher forcing): reset the column each time.
        let mut ms = Vec::new();
        for _ in 0..20 {
            for s in 0..songs {
                be.fill_ints(&mut codes, s * STRIDE + COL, -1)
                    .expect("reset");
            }
            ms.push(be.time_replay(k, 1).expect("time_replay")[0]);
        }
        ms.sort_by(f32::total_cmp);
        eprintln!(
            "timing cfg_draw {songs} songs x vocab {vocab} (noise, cond top-50, top-50) [bf16]: \
             {:.1} us per call (median of {})",
            ms[ms.len() / 2] * 1e3,
            ms.len()
        );
    }
}
