//! `cfg_draw` against a plain reference of the doc's steps, batch invariance, argument checks;
//! the harness (`Songs`) the targeted cases of `draw_cases.rs` share.

use super::*;
use crate::common::Rng;
use chorus_core::lm_ops::{CfgDrawArgs, DrawMode};
use chorus_core::rng::exp_noise;

/// The per-call settings of a test call.
#[derive(Clone, Copy)]
pub struct Cfg {
    /// `None`: one logits row per song (the first half of `Songs::logits`).
    pub cfg_scale: Option<f32>,
    pub temperature: f32,
    pub cond_top_k: Option<usize>,
    pub top_k: usize,
    pub end: Option<usize>,
    pub draw_offset: u32,
}

pub const CFG: Cfg = Cfg {
    cfg_scale: Some(1.5),
    temperature: 1.0,
    cond_top_k: Some(50),
    top_k: 50,
    end: None,
    draw_offset: 0,
};

/// The per-song inputs of a test call (`codes` is `[songs, 3]`, drawn into column 1).
pub struct Songs {
    pub logits: Vec<f32>,
    pub codes: Vec<i32>,
    pub mode: Vec<i32>,
    pub seeds: Vec<i32>,
    pub draws: Vec<i32>,
    pub allow_end: Vec<i32>,
    /// `[songs, 2]`: each song's temperature bits and top-k (`None`: the call's).
    pub rows: Option<Vec<i32>>,
}

const STRIDE: usize = 3;
const COL: usize = 1;

impl Songs {
    /// `songs` songs over `logits` (`[2 * songs, vocab]`), greedy, seed 0, draw 0, END allowed.
    pub fn new(logits: Vec<f32>, songs: usize) -> Self {
        Self {
            logits,
            codes: vec![-1; songs * STRIDE],
            mode: vec![DrawMode::Greedy as i32; songs],
            seeds: vec![0; 2 * songs],
            draws: vec![0; songs],
            allow_end: vec![1; songs],
            rows: None,
        }
    }

    fn songs(&self) -> usize {
        self.mode.len()
    }

    /// Runs `cfg_draw` and returns column `COL` of the codes.
    pub fn draw(&self, be: &CpuBackend, c: Cfg) -> Vec<i32> {
        let songs = self.songs();
        let mut codes = ints(be, &self.codes);
        let rows = self.rows.as_ref().map(|r| ints(be, r));
        be.cfg_draw(CfgDrawArgs {
            logits: &buf(be, &self.logits),
            codes: &mut codes,
            mode: &ints(be, &self.mode),
            seeds: &ints(be, &self.seeds),
            draws: &ints(be, &self.draws),
            allow_end: &ints(be, &self.allow_end),
            songs,
            vocab: self.logits.len() / (2 * songs),
            codes_stride: STRIDE,
            col: COL,
            draw_offset: c.draw_offset,
            cfg_scale: c.cfg_scale,
            temperature: c.temperature,
            cond_top_k: c.cond_top_k,
            top_k: c.top_k,
            end: c.end,
            row_sampling: rows.as_ref(),
        })
        .unwrap();
        let all = down_ints(be, &codes);
        for (i, (&got, &was)) in all.iter().zip(&self.codes).enumerate() {
            assert!(
                i % STRIDE == COL || got == was,
                "code {i} outside column {COL} changed"
            );
        }
        all.iter().skip(COL).step_by(STRIDE).copied().collect()
    }

    /// The doc's steps 1-5 for song `s`, written plainly (inputs without NaN).
    fn reference(&self, s: usize, c: Cfg) -> i32 {
        if self.codes[s * STRIDE + COL] >= 0 {
            return self.codes[s * STRIDE + COL];
        }
        let vocab = self.logits.len() / (2 * self.songs());
        let per_song = if c.cfg_scale.is_some() { 2 } else { 1 };
        let (cond, unc) = (
            &self.logits[per_song * s * vocab..][..vocab],
            &self.logits[(per_song * s + per_song - 1) * vocab..][..vocab],
        );
        let kth = |x: &[f32], k: usize| {
            let mut sorted = x.to_vec();
            sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
            sorted[k.min(x.len()) - 1]
        };
        let noise = self.mode[s] == DrawMode::Noise as i32;
        let mut g: Vec<f32> = (0..vocab)
            .map(|i| match c.cfg_scale {
                Some(scale) => unc[i] + (cond[i] - unc[i]) * scale,
                None => cond[i],
            })
            .map(|x| if noise { x / c.temperature } else { x })
            .collect();
        if let Some(k) = c.cond_top_k {
            let thr = kth(cond, k);
            (0..vocab)
                .filter(|&i| cond[i] < thr)
                .for_each(|i| g[i] = f32::NEG_INFINITY);
        }
        if let (Some(e), 0) = (c.end, self.allow_end[s]) {
            g[e] = f32::NEG_INFINITY;
        }
        let nan_to_num = |x: f32| match x {
            x if x.is_nan() || x == f32::NEG_INFINITY => -1e9,
            f32::INFINITY => 1e9,
            x => x,
        };
        let v: Vec<f32> = g.iter().map(|&x| nan_to_num(x)).collect();
        let thr = kth(&v, c.top_k);
        let seed =
            (self.seeds[2 * s] as u32 as u64) | ((self.seeds[2 * s + 1] as u32 as u64) << 32);
        let draw = self.draws[s] as u64 + c.draw_offset as u64;
        let score = |i: usize| match self.mode[s] {
            0 => v[i] as f64,
            _ => v[i] as f64 - (exp_noise(seed, draw, i as u64) as f64).ln(),
        };
        let mut best = None::<usize>;
        for i in (0..vocab).filter(|&i| v[i] >= thr) {
            if best.is_none_or(|b| score(i) > score(b)) {
                best = Some(i);
            }
        }
        best.unwrap() as i32
    }
}

/// Random logits on a 1/16 grid (like bf16 near 8), so ties are common.
fn grid_logits(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.uniform(8.0) * 16.0).round() / 16.0)
        .collect()
}

#[test]
fn cfg_draw_matches_reference_in_both_modes() {
    let be = common::backend();
    let mut rng = Rng::new(30);
    let (songs, vocab) = (6, 300);
    let mut s = Songs::new(grid_logits(&mut rng, 2 * songs * vocab), songs);
    s.mode = vec![0, 1, 1, 0, 1, 1];
    s.seeds = (0..2 * songs).map(|_| rng.next_u64() as i32).collect();
    s.draws = (0..songs).map(|i| 8 * i as i32 + 3).collect();
    s.allow_end = vec![0, 1, 0, 1, 0, 1];
    s.codes[4 * STRIDE + COL] = 11; // teacher-forced
    let configs = [
        Cfg {
            end: Some(vocab - 1),
            draw_offset: 2,
            ..CFG
        },
        Cfg {
            cond_top_k: None,
            top_k: 7,
            end: Some(0),
            ..CFG
        },
        Cfg {
            cond_top_k: Some(vocab + 5),
            top_k: vocab + 5,
            cfg_scale: Some(3.0),
            ..CFG
        },
        // CSM's draw: no guidance, temperature 0.9, top-50.
        Cfg {
            cfg_scale: None,
            temperature: 0.9,
            cond_top_k: None,
            ..CFG
        },
    ];
    let mut noise_codes = Vec::new();
    for (n, &c) in configs.iter().enumerate() {
        let got = s.draw(&be, c);
        let want: Vec<i32> = (0..songs).map(|i| s.reference(i, c)).collect();
        assert_eq!(got, want, "config {n}");
        assert_eq!(got[4], 11, "forced code kept");
        noise_codes.extend([got[1], got[2], got[5]]);
    }
    // The noise draws are not the greedy ones everywhere (the reference would agree either way).
    let g = Songs::new(s.logits.clone(), songs);
    let greedy_codes: Vec<i32> = configs
        .iter()
        .flat_map(|&c| {
            let x = g.draw(&be, c);
            [x[1], x[2], x[5]]
        })
        .collect();
    assert_ne!(noise_codes, greedy_codes);
}

#[test]
fn cfg_draw_songs_are_batch_invariant_and_scratch_stops_growing() {
    let be = common::backend();
    let mut rng = Rng::new(31);
    let (songs, vocab) = (6, 500);
    let mut s = Songs::new(grid_logits(&mut rng, 2 * songs * vocab), songs);
    s.mode = vec![1, 0, 1, 1, 0, 1];
    s.seeds = (0..2 * songs).map(|_| rng.next_u64() as i32).collect();
    s.draws = (0..songs as i32).map(|i| 40 + i).collect();
    s.allow_end = vec![1, 0, 0, 1, 1, 0];
    let c = Cfg {
        end: Some(17),
        draw_offset: 5,
        ..CFG
    };
    let batch = s.draw(&be, c);
    let grown = be.scratch_elements();
    assert_eq!(s.draw(&be, c), batch);
    assert_eq!(
        be.scratch_elements(),
        grown,
        "the second call grew the scratch"
    );
    for (i, &code) in batch.iter().enumerate() {
        let alone = Songs {
            logits: s.logits[2 * i * vocab..(2 * i + 2) * vocab].to_vec(),
            codes: vec![-1; STRIDE],
            mode: vec![s.mode[i]],
            seeds: s.seeds[2 * i..2 * i + 2].to_vec(),
            draws: vec![s.draws[i]],
            allow_end: vec![s.allow_end[i]],
            rows: None,
        };
        assert_eq!(alone.draw(&be, c), vec![code], "song {i}");
    }
}

#[test]
fn cfg_draw_rejects_bad_arguments() {
    let be = common::backend();
    let s = Songs::new(vec![0.0; 8], 1);
    let mut bad_mode = Songs::new(vec![0.0; 8], 1);
    bad_mode.mode = vec![2];
    let try_draw = |s: &Songs, c: Cfg, vocab: usize| {
        let mut codes = ints(&be, &s.codes);
        be.cfg_draw(CfgDrawArgs {
            logits: &buf(&be, &s.logits),
            codes: &mut codes,
            mode: &ints(&be, &s.mode),
            seeds: &ints(&be, &s.seeds),
            draws: &ints(&be, &s.draws),
            allow_end: &ints(&be, &s.allow_end),
            songs: 1,
            vocab,
            codes_stride: STRIDE,
            col: COL,
            draw_offset: 0,
            cfg_scale: c.cfg_scale,
            temperature: c.temperature,
            cond_top_k: c.cond_top_k,
            top_k: c.top_k,
            end: c.end,
            row_sampling: None,
        })
    };
    assert!(try_draw(&s, CFG, 4).is_ok());
    assert!(try_draw(&s, CFG, 5).is_err(), "logits too short");
    assert!(try_draw(&s, Cfg { top_k: 0, ..CFG }, 4).is_err(), "top_k 0");
    assert!(
        try_draw(
            &s,
            Cfg {
                end: Some(4),
                ..CFG
            },
            4
        )
        .is_err(),
        "end past vocab"
    );
    assert!(try_draw(&bad_mode, CFG, 4).is_err(), "unknown mode");
    let plain = Cfg {
        cfg_scale: None,
        ..CFG
    };
    assert!(
        try_draw(&s, plain, 8).is_ok(),
        "one row of 8 without guidance"
    );
    assert!(
        try_draw(&s, plain, 9).is_err(),
        "logits too short without guidance"
    );
    for t in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let err = try_draw(
            &s,
            Cfg {
                temperature: t,
                ..CFG
            },
            4,
        )
        .unwrap_err();
        assert!(err.to_string().contains("temperature"), "{err}");
    }
}

/// `[temperature bits, top_k]` of one song.
fn row(temperature: f32, top_k: i32) -> [i32; 2] {
    [temperature.to_bits() as i32, top_k]
}

#[test]
fn cfg_draw_row_sampling_equals_each_songs_own_call() {
    let be = common::backend();
    let mut rng = Rng::new(47);
    let vocab = 300;
    // Every song has the same logits and noise; only its temperature and top-k differ.
    let settings = [
        (1.0, 50),
        (0.3, 2),
        (4.0, 300),
        (4.0, 1),
        (0.9, 7),
        (2.5, 1000),
    ];
    let songs = settings.len();
    let one = grid_logits(&mut rng, 2 * vocab);
    let mut s = Songs::new(one.repeat(songs), songs);
    s.mode = vec![DrawMode::Noise as i32; songs];
    s.seeds = [rng.next_u64() as i32, rng.next_u64() as i32].repeat(songs);
    s.rows = Some(settings.iter().flat_map(|&(t, k)| row(t, k)).collect());
    // The call's settings are replaced, so they may be anything valid.
    let got = s.draw(&be, CFG);
    for (i, &(temperature, top_k)) in settings.iter().enumerate() {
        let alone = Songs {
            logits: one.clone(),
            codes: vec![-1; STRIDE],
            mode: vec![DrawMode::Noise as i32],
            seeds: s.seeds[..2].to_vec(),
            draws: vec![0],
            allow_end: vec![1],
            rows: None,
        };
        let c = Cfg {
            temperature,
            top_k: top_k as usize,
            ..CFG
        };
        assert_eq!(
            alone.draw(&be, c),
            vec![got[i]],
            "song {i} ({temperature}, {top_k})"
        );
    }
    assert!(
        got.iter().any(|&c| c != got[0]),
        "the settings changed no code: {got:?}"
    );
}

#[test]
fn cfg_draw_rejects_bad_row_sampling() {
    let be = common::backend();
    let try_rows = |mode: DrawMode, r: [i32; 2], len: usize| {
        let s = Songs::new(vec![0.0; 8], 1);
        let mut codes = ints(&be, &s.codes);
        be.cfg_draw(CfgDrawArgs {
            logits: &buf(&be, &s.logits),
            codes: &mut codes,
            mode: &ints(&be, &[mode as i32]),
            seeds: &ints(&be, &s.seeds),
            draws: &ints(&be, &s.draws),
            allow_end: &ints(&be, &s.allow_end),
            songs: 1,
            vocab: 4,
            codes_stride: STRIDE,
            col: COL,
            draw_offset: 0,
            cfg_scale: CFG.cfg_scale,
            temperature: CFG.temperature,
            cond_top_k: CFG.cond_top_k,
            top_k: CFG.top_k,
            end: None,
            row_sampling: Some(&ints(&be, &r[..len])),
        })
    };
    let noise = DrawMode::Noise;
    assert!(try_rows(noise, row(0.5, 3), 2).is_ok());
    assert!(
        try_rows(noise, row(0.5, 3), 1).is_err(),
        "row_sampling too short"
    );
    for (bad, what) in [
        (row(0.5, 0), "top_k 0"),
        (row(0.5, -3), "negative top_k"),
        (row(0.0, 3), "temperature 0"),
        (row(-1.0, 3), "negative temperature"),
        (row(f32::NAN, 3), "NaN temperature"),
        (row(f32::INFINITY, 3), "infinite temperature"),
    ] {
        let err = try_rows(noise, bad, 2).unwrap_err().to_string();
        assert!(err.contains("song 0"), "{what}: {err}");
    }
    // A greedy draw ignores the temperature, not the top-k.
    assert!(try_rows(DrawMode::Greedy, row(f32::NAN, 3), 2).is_ok());
    assert!(try_rows(DrawMode::Greedy, row(1.0, 0), 2).is_err());
}
