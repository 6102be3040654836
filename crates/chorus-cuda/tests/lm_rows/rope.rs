//! `qk_norm_rope`: head norms (or none) and rotary embedding over every head-dim path of the
//! kernel, with start positions changed between replays.

use super::*;
use chorus_core::lm_ops::{HeadGeom, QkNormRopeArgs};

/// `[max_pos, 2, head_dim / 2]`: cos then sin of `p * theta^(-2j / head_dim)`, in f64.
pub(crate) fn rope_table(max_pos: usize, head_dim: usize, theta: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let mut t = Vec::with_capacity(max_pos * head_dim);
    for p in 0..max_pos {
        let angle = |j: usize| p as f64 * theta.powf(-2.0 * j as f64 / head_dim as f64);
        t.extend((0..half).map(|j| angle(j).cos() as f32));
        t.extend((0..half).map(|j| angle(j).sin() as f32));
    }
    t
}

/// Tokens of other calls before each call's own in `qkv` (`first_token`): they must come back
/// untouched.
const OTHER_TOKENS: usize = 2;

/// Two replays: the second with new start positions (device data, read afresh by the graph).
fn run_qk<B: LmOps>(
    be: &B,
    geom: HeadGeom,
    starts: [&[i32]; 2],
    max_pos: usize,
    seed: u64,
    normed: bool,
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
        let input = rvec(
            &mut r,
            (OTHER_TOKENS + geom.tokens()) * geom.qkv_width(),
            3.0,
        );
        let mut qkv = be.upload(&input, BufRole::Activation)?;
        be.run(0, &mut |b: &B| {
            b.qk_norm_rope(QkNormRopeArgs {
                first_token: OTHER_TOKENS,
                qkv: &mut qkv,
                qk_norm: normed.then_some([&q_norm, &k_norm]),
                rope: &rope,
                start: &start,
                geom,
                eps: 1e-6,
            })
        })?;
        let mut got = be.download(&qkv)?;
        let own = OTHER_TOKENS * geom.qkv_width();
        // Bf16 storage rounds the untouched tokens once, on upload.
        let rounded = be.download(&be.upload(&input[..own], BufRole::Activation)?)?;
        assert_eq!(
            got[..own],
            rounded[..],
            "qk_norm_rope wrote outside its own tokens"
        );
        results.push(got.split_off(own));
    }
    Ok(results)
}

fn check_qk(name: &str, geom: HeadGeom, starts: [&[i32]; 2], max_pos: usize) {
    // With the q/k norm (Qwen3) and RoPE alone (Llama-style models).
    for normed in [true, false] {
        let name = &format!("{name}{}", if normed { "" } else { ", RoPE only" });
        check_qk_case(name, geom, starts, max_pos, normed);
    }
}

fn check_qk_case(name: &str, geom: HeadGeom, starts: [&[i32]; 2], max_pos: usize, normed: bool) {
    let want = run_qk(&cpu(), geom, starts, max_pos, 8, normed).expect("cpu qk_norm_rope");
    check(
        name,
        &[
            ("qkv, replay 1", Exact::Never),
            ("qkv, replay 2", Exact::Never),
        ],
        &want,
        |be| run_qk(be, geom, starts, max_pos, 8, normed),
    );
    // v is untouched: exact on the CUDA side too.
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_qk(&be, geom, starts, max_pos, 8, normed).expect("cuda qk_norm_rope");
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
