//! `cfg_draw` against the CPU backend's codes exactly: crafted songs (ties, END, the conditional
//! prefilter, forced codes, NaN logits) among random ones, and its replay timing.

use super::*;
use chorus_core::lm_ops::{CfgDrawArgs, DrawMode};

/// Per-call settings.
#[derive(Clone, Copy, Debug)]
struct DrawCfg {
    /// `None`: no guidance, one logits row per song.
    cfg_scale: Option<f32>,
    temperature: f32,
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
    /// `[songs, 2]`: each song's temperature bits and top-k (`None`: the call's).
    rows: Option<Vec<i32>>,
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
        let rows = self.rows.as_ref().map(|r| ints(be, r)).transpose()?;
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
                temperature: c.temperature,
                cond_top_k: c.cond_top_k,
                top_k: c.top_k,
                end: c.end,
                row_sampling: rows.as_ref(),
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
        rows: None,
    }
}

/// The settings a test sweeps: the LM's (CFG 1.5, conditional top-50, top-50, END), greedy-like
/// top-1, everything a candidate, and a conditional top-1 prefilter.
fn draw_configs(vocab: usize) -> Vec<DrawCfg> {
    let mut cfgs = Vec::new();
    for draw_offset in 0..8 {
        cfgs.push(DrawCfg {
            cfg_scale: Some(1.5),
            temperature: 1.0,
            cond_top_k: Some(50),
            top_k: 50,
            end: Some(vocab - 1),
            draw_offset,
        });
    }
    cfgs.push(DrawCfg {
        cfg_scale: Some(3.0),
        temperature: 1.0,
        cond_top_k: None,
        top_k: 1,
        end: Some(vocab - 1),
        draw_offset: 3,
    });
    cfgs.push(DrawCfg {
        cfg_scale: Some(1.0),
        temperature: 1.0,
        cond_top_k: Some(vocab + 5),
        top_k: vocab,
        end: None,
        draw_offset: 5,
    });
    cfgs.push(DrawCfg {
        cfg_scale: Some(0.0),
        temperature: 1.0,
        cond_top_k: Some(1),
        top_k: 2,
        end: Some(0),
        draw_offset: 7,
    });
    // CSM's draw (`CSM.md` §4.2): no guidance, temperature 0.9, top-50, no END column.
    for draw_offset in [0, 31] {
        cfgs.push(DrawCfg {
            cfg_scale: None,
            temperature: 0.9,
            cond_top_k: None,
            top_k: 50,
            end: None,
            draw_offset,
        });
    }
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

/// Per-song temperatures and top-ks (`CfgDrawArgs::row_sampling`, CSM's draw: no guidance, no
/// END column) against the CPU backend, the call's settings set apart from every row's.
#[test]
fn cfg_draw_row_sampling_matches_cpu_exactly() {
    let vocab = 2051;
    // k >= vocab (every class a candidate), k = 1, small and large temperatures.
    let settings = [
        (0.9f32, 50),
        (0.3, 2),
        (4.0, 2051),
        (1.7, 1),
        (0.05, 7),
        (2.5, 5000),
    ];
    for p in PRECISIONS {
        let mut data = make_songs(203, 48, vocab, p == Precision::Bf16);
        let rows = (0..48).flat_map(|s| {
            let (t, k) = settings[s % settings.len()];
            [t.to_bits() as i32, k]
        });
        data.rows = Some(rows.collect());
        let c = DrawCfg {
            cfg_scale: None,
            temperature: 1.0,
            cond_top_k: None,
            top_k: 3,
            end: None,
            draw_offset: 5,
        };
        let want = data.draw(&cpu(), c).expect("cpu cfg_draw");
        let Some(be) = cuda(p) else { return };
        let got = data.draw(&be, c).expect("cuda cfg_draw");
        for s in 0..want.len() {
            assert_eq!(
                got[s],
                want[s],
                "[{}] song {s} (mode {}, settings {:?}): CUDA drew {}, CPU {}",
                p.name(),
                data.mode[s],
                settings[s % settings.len()],
                got[s],
                want[s]
            );
        }
        eprintln!(
            "cfg_draw row_sampling [{}]: {} draws identical to the CPU backend",
            p.name(),
            want.len()
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
                cfg_scale: Some(1.5),
                temperature: 1.0,
                cond_top_k: Some(50),
                top_k: 50,
                end: Some(vocab - 1),
                row_sampling: None,
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
