//! Streaming attention against naive full attention over absolute positions, across the window
//! edge and the ring wraparound.

mod common;

use chorus_core::{AttentionArgs, AttentionGeom, Backend, BufRole};
use common::*;

/// Rotate-half RoPE in f64, from the f32 angle transformers computes (`pos * inv_freq` in f32).
fn rope(x: &[f32], pos: usize, theta: f32) -> Vec<f64> {
    let d = x.len();
    let half = d / 2;
    let mut out = vec![0.0; d];
    for i in 0..half {
        let inv_freq = 1.0 / theta.powf((2 * i) as f32 / d as f32);
        let angle = (pos as f32 * inv_freq) as f64;
        let (c, s) = (angle.cos(), angle.sin());
        let (x1, x2) = (x[i] as f64, x[i + half] as f64);
        out[i] = x1 * c - x2 * s;
        out[i + half] = x2 * c + x1 * s;
    }
    out
}

/// Per-slot history of raw q/k/v rows, indexed by absolute position.
#[derive(Default, Clone)]
struct History {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

fn naive(g: &AttentionGeom, q: &[f32], hist: &History, p: usize) -> Vec<f64> {
    let (hd, hdim) = (g.head_dim, g.heads * g.head_dim);
    let mut out = vec![0.0; hdim];
    let first = (p + 1).saturating_sub(g.window);
    for h in 0..g.heads {
        let qr = rope(&q[h * hd..(h + 1) * hd], p, g.rope_theta);
        let scores: Vec<f64> = (first..=p)
            .map(|kp| {
                let kr = rope(&hist.k[kp][h * hd..(h + 1) * hd], kp, g.rope_theta);
                qr.iter().zip(&kr).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (i, kp) in (first..=p).enumerate() {
            for dd in 0..hd {
                out[h * hd + dd] += e[i] / sum * hist.v[kp][h * hd + dd] as f64;
            }
        }
    }
    out
}

struct Scenario {
    heads: usize,
    head_dim: usize,
    ring: usize,
    window: usize,
    time: usize,
    steps: usize,
    total_rows: usize,
}

/// Slot 2 runs alone for a few steps, then rows [2, 0, dummy] run together, so the slots sit at
/// different positions; every step's live outputs are compared with naive attention.
fn run(sc: &Scenario, seed: u64) {
    let be = backend();
    let mut rng = Rng::new(seed);
    let hdim = sc.heads * sc.head_dim;
    let dummy = sc.total_rows - 1;
    let mut kv = be
        .zeros(sc.total_rows * sc.ring * 2 * hdim, BufRole::State)
        .unwrap();
    let mut tokens = be.ints(sc.total_rows, 0).unwrap();
    let mut hist = vec![History::default(); sc.total_rows];
    let lead = 5;
    for step in 0..sc.steps {
        let row_slots: Vec<i32> = if step < lead {
            vec![2]
        } else {
            vec![2, 0, dummy as i32]
        };
        let rows = row_slots.len();
        let g = AttentionGeom {
            rows,
            time: sc.time,
            heads: sc.heads,
            head_dim: sc.head_dim,
            ring: sc.ring,
            window: sc.window,
            rope_theta: 10_000.0,
        };
        let mut slots = be.ints(rows, 0).unwrap();
        for (i, &s) in row_slots.iter().enumerate() {
            be.fill_ints(&mut slots, i, s).unwrap();
        }
        let qkv = rng.vec(rows * sc.time * 3 * hdim, 1.0);
        let before = be.download_ints(&tokens).unwrap();
        let mut want = Vec::new();
        let mut live = Vec::new();
        for (r, &s) in row_slots.iter().enumerate() {
            let s = s as usize;
            for t in 0..sc.time {
                let row = &qkv[(r * sc.time + t) * 3 * hdim..(r * sc.time + t + 1) * 3 * hdim];
                hist[s].k.push(row[hdim..2 * hdim].to_vec());
                hist[s].v.push(row[2 * hdim..].to_vec());
            }
            if s == dummy {
                continue;
            }
            for t in 0..sc.time {
                let p = before[s] as usize + t;
                let q = &qkv[(r * sc.time + t) * 3 * hdim..][..hdim];
                want.extend(naive(&g, q, &hist[s], p));
                live.push(r * sc.time + t);
            }
        }
        let qkv_b = be.upload(&qkv, BufRole::Activation).unwrap();
        let mut out = be
            .zeros(rows * sc.time * hdim, BufRole::Activation)
            .unwrap();
        be.attention(AttentionArgs {
            qkv: &qkv_b,
            kv: &mut kv,
            tokens: &tokens,
            slots: &slots,
            out: &mut out,
            geom: g,
        })
        .unwrap();
        be.advance_tokens(&mut tokens, &slots, rows, sc.time as i32, dummy)
            .unwrap();
        hist[dummy] = History::default();
        let o = be.download(&out).unwrap();
        let got: Vec<f32> = live
            .iter()
            .flat_map(|&tok| o[tok * hdim..(tok + 1) * hdim].to_vec())
            .collect();
        assert_close(&format!("attention step {step}"), &got, &want);
    }
    let t = be.download_ints(&tokens).unwrap();
    assert_eq!(t[2] as usize, sc.steps * sc.time);
    assert_eq!(t[0] as usize, (sc.steps - lead) * sc.time);
    assert_eq!(t[dummy], 0);
    assert_eq!(t[1], 0);
}

#[test]
fn attention_crosses_window_and_ring_wraparound() {
    let sc = Scenario {
        heads: 2,
        head_dim: 16,
        ring: 256,
        window: 250,
        time: 2,
        steps: 150,
        total_rows: 4,
    };
    run(&sc, 3);
}

#[test]
fn attention_small_ring_many_wraps() {
    let sc = Scenario {
        heads: 3,
        head_dim: 4,
        ring: 8,
        window: 6,
        time: 3,
        steps: 40,
        total_rows: 4,
    };
    run(&sc, 4);
}

#[test]
fn attention_rejects_a_ring_too_small_for_its_window() {
    let be = backend();
    let g = AttentionGeom {
        rows: 1,
        time: 2,
        heads: 1,
        head_dim: 4,
        ring: 8,
        window: 8,
        rope_theta: 10_000.0,
    };
    let qkv = be.zeros(2 * 12, BufRole::Activation).unwrap();
    let mut kv = be.zeros(2 * 8 * 2 * 4, BufRole::State).unwrap();
    let tokens = be.ints(2, 0).unwrap();
    let slots = be.ints(1, 0).unwrap();
    let mut out = be.zeros(8, BufRole::Activation).unwrap();
    let r = be.attention(AttentionArgs {
        qkv: &qkv,
        kv: &mut kv,
        tokens: &tokens,
        slots: &slots,
        out: &mut out,
        geom: g,
    });
    assert!(r.is_err());
}
