//! Paged decode against the f64 reference and the CPU backend (NaN-filled caches, padded rows,
//! scattered tables), and its replay timing.

use super::*;
use crate::paged::*;
use chorus_core::lm_ops::PagedAttentionArgs;

/// A decode step over rows with histories of `contexts[r] - 1` positions already in the cache
/// (`None`: a padded row on the null block). Caches are NaN everywhere else, so a read past a
/// context poisons the output.
pub(crate) struct DecodeCase {
    heads: Heads,
    block_size: usize,
    max_blocks: usize,
    tables: Vec<i32>,
    start: Vec<i32>,
    k_init: Vec<f32>,
    v_init: Vec<f32>,
    qkv: Vec<f32>,
    /// Per real row: its index and the f64 output.
    pub(crate) want: Vec<(usize, Vec<f64>)>,
}

impl DecodeCase {
    pub(crate) fn new(
        seed: u64,
        heads: Heads,
        block_size: usize,
        contexts: &[Option<usize>],
    ) -> Self {
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

    pub(crate) fn run<B: LmOps>(&self, be: &B) -> Result<Vec<f32>> {
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
    pub(crate) fn real_rows(&self, out: &[f32]) -> Vec<f32> {
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
    // bf16 runs on the tensor-core decode by default; the plain kernel is checked too.
    let plain = |p| {
        cuda_with(chorus_cuda::CudaOptions {
            precision: p,
            lm_attention_mma: false,
            ..Default::default()
        })
    };
    let mut backends: Vec<_> = PRECISIONS.iter().map(|&p| (p, cuda(p))).collect();
    backends.push((Precision::Bf16, plain(Precision::Bf16)));
    for (p, be) in backends {
        let Some(be) = be else { return };
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
            scales: None,
            heads: h,
            k: be.zeros(len, BufRole::Pool).expect("zeros"),
            v: be.zeros(len, BufRole::Pool).expect("zeros"),
            tables: ints(&be, &tables).expect("tables"),
            block_size,
            max_blocks,
            window: None,
        };
        let mut rng = Rng::new(109);
        let qkv = rng.vec(rows * h.width(), 1.0);
        let g = h.geom(rows, 1);
        let mut qkv_b = be.upload(&qkv, BufRole::Activation).expect("qkv");
        let start = ints(&be, &vec![ctx as i32 - 1; rows]).expect("start");
        let mut out = be
            .zeros(rows * h.q * h.hd, BufRole::Activation)
            .expect("out");
        let k = key();
        be.run(k, &mut |b: &CudaBackend| {
            b.paged_attention(PagedAttentionArgs {
                kv_scales: None,
                first_token: 0,
                qkv: &mut qkv_b,
                k_cache: &mut paged.k,
                v_cache: &mut paged.v,
                block_tables: &paged.tables,
                start: &start,
                out: &mut out,
                geom: g,
                block_size,
                max_blocks,
                window: None,
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
