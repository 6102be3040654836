//! `cfg_draw`'s targeted cases: greedy ties, conditional top-k, tie-inclusive top-k, END masking,
//! teacher forcing, non-finite guided values, and the noise draw index.

use super::draw::{Cfg, Songs, CFG};
use super::*;
use chorus_core::lm_ops::DrawMode;

#[test]
fn cfg_draw_greedy_picks_the_max_lowest_index_on_ties() {
    let be = common::backend();
    let mut cond = vec![0.0; 10];
    cond[7] = 2.0;
    cond[3] = 2.0;
    cond[9] = 1.5;
    let s = Songs::new([cond.clone(), cond].concat(), 1);
    assert_eq!(
        s.draw(
            &be,
            Cfg {
                top_k: 10,
                cond_top_k: None,
                ..CFG
            }
        ),
        vec![3]
    );
}

#[test]
fn cfg_draw_cond_top_k_excludes_a_low_conditional_logit() {
    let be = common::backend();
    // g = 1.5 c - 0.5 u: index 9 has the largest guided value (20) but the lowest conditional.
    let cond = vec![5.0, 4.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0];
    let mut unc = cond.clone();
    unc[9] = -40.0;
    let s = Songs::new([cond, unc].concat(), 1);
    assert_eq!(
        s.draw(
            &be,
            Cfg {
                cond_top_k: None,
                top_k: 10,
                ..CFG
            }
        ),
        vec![9]
    );
    assert_eq!(
        s.draw(
            &be,
            Cfg {
                cond_top_k: Some(3),
                top_k: 10,
                ..CFG
            }
        ),
        vec![0]
    );
}

#[test]
fn cfg_draw_top_k_keeps_ties_at_the_threshold() {
    let be = common::backend();
    // Conditional top-2 with ties is {0, 1, 2, 3} (the 2nd largest is 3, held by three indices);
    // index 3, the third of the tied ones, has the largest guided value and wins.
    let cond = vec![5.0, 3.0, 3.0, 3.0, 0.0, 0.0];
    let mut unc = cond.clone();
    unc[3] = -10.0;
    unc[4] = -100.0;
    let s = Songs::new([cond, unc].concat(), 1);
    assert_eq!(
        s.draw(
            &be,
            Cfg {
                cond_top_k: Some(2),
                top_k: 6,
                ..CFG
            }
        ),
        vec![3]
    );
    // Duplicates count towards k (as in `torch.topk`): the 2 largest of [5, 5, 3, ...] are both
    // 5, so index 2 (conditional 3, largest guided value) is out.
    let cond = vec![5.0, 5.0, 3.0, 3.0, 0.0, 0.0];
    let mut unc = cond.clone();
    unc[2] = -10.0;
    let s = Songs::new([cond, unc].concat(), 1);
    assert_eq!(
        s.draw(
            &be,
            Cfg {
                cond_top_k: Some(2),
                top_k: 6,
                ..CFG
            }
        ),
        vec![0]
    );
    assert_eq!(
        s.draw(
            &be,
            Cfg {
                cond_top_k: Some(3),
                top_k: 6,
                ..CFG
            }
        ),
        vec![2]
    );
    // Sampling top-1 with a three-way tie: noise draws reach all three tied indices, nothing else.
    let flat = vec![2.0, 2.0, 2.0, 1.9, 1.9, 1.9, 1.9, 1.9];
    let mut s = Songs::new([flat.clone(), flat].concat(), 1);
    s.mode = vec![DrawMode::Noise as i32];
    let mut seen = [0usize; 8];
    for d in 0..300 {
        s.draws = vec![d];
        seen[s.draw(
            &be,
            Cfg {
                cond_top_k: None,
                top_k: 1,
                ..CFG
            },
        )[0] as usize] += 1;
    }
    assert!(
        seen[..3].iter().all(|&n| n > 50),
        "tied candidates drawn {seen:?}"
    );
    assert_eq!(
        seen[3..].iter().sum::<usize>(),
        0,
        "non-candidates drawn {seen:?}"
    );
}

#[test]
fn cfg_draw_masks_end_only_when_not_allowed() {
    let be = common::backend();
    let logits = [0.0, 1.0, 2.0, 9.0];
    let mut s = Songs::new([logits; 4].concat(), 2);
    s.allow_end = vec![0, 1];
    let c = Cfg {
        cond_top_k: Some(4),
        top_k: 4,
        end: Some(3),
        ..CFG
    };
    assert_eq!(s.draw(&be, c), vec![2, 3]);
    assert_eq!(s.draw(&be, Cfg { end: None, ..c }), vec![3, 3]);
}

#[test]
fn cfg_draw_keeps_forced_codes() {
    let be = common::backend();
    let logits = [0.0, 1.0, 5.0, 2.0];
    let mut s = Songs::new([logits; 6].concat(), 3);
    s.codes = vec![-1, 0, -1, -1, -1, -1, 8, 1, 8];
    assert_eq!(s.draw(&be, Cfg { top_k: 4, ..CFG }), vec![0, 2, 1]);
}

#[test]
fn cfg_draw_maps_non_finite_guided_values() {
    let be = common::backend();
    let inf = f32::INFINITY;
    // Song 0: c = +inf at 5 gives g = +inf -> 1e9, which wins.
    // Song 1: u = +inf at 2 gives g = inf + (c - inf) * 1.5 = NaN -> -1e9, which loses to
    // index 6 despite the largest c.
    // Song 2: g = [NaN, -inf, -inf, -inf] all become -1e9: every index is a candidate, and the
    // NaN one (index 0) wins the four-way tie; left as NaN it could not be a candidate.
    let mut c0 = vec![0.0_f32; 8];
    c0[5] = inf;
    let mut u1 = vec![0.0_f32; 8];
    u1[2] = inf;
    let mut c1 = vec![0.0_f32; 8];
    c1[2] = 7.0;
    c1[6] = 1.0;
    let c2 = [vec![1.0], vec![-inf; 7]].concat();
    let u2 = [vec![inf], vec![0.0; 7]].concat();
    let s = Songs::new([c0, vec![0.0; 8], c1, u1, c2, u2].concat(), 3);
    let c = Cfg {
        cond_top_k: Some(3),
        top_k: 8,
        ..CFG
    };
    assert_eq!(s.draw(&be, c), vec![5, 6, 0]);
    // Two +inf guided values both become 1e9 and then race on their noise: both win sometimes
    // (left as +inf, `inf - ln E` would tie and the lower index would always win).
    let mut c3 = vec![0.0_f32; 8];
    c3[1] = inf;
    c3[4] = inf;
    let mut s = Songs::new([c3, vec![0.0; 8]].concat(), 1);
    s.mode = vec![DrawMode::Noise as i32];
    let mut seen = [0usize; 8];
    for d in 0..40 {
        s.draws = vec![d];
        seen[s.draw(&be, c)[0] as usize] += 1;
    }
    assert!(
        seen[1] > 5 && seen[4] > 5 && seen[1] + seen[4] == 40,
        "{seen:?}"
    );
}

#[test]
fn cfg_draw_draw_index_changes_the_code() {
    let be = common::backend();
    let vocab = 64;
    let mut s = Songs::new(vec![0.0; 2 * vocab], 1);
    s.mode = vec![DrawMode::Noise as i32];
    s.seeds = vec![-5, 0x1234];
    let mut codes = Vec::new();
    for d in 0..200 {
        s.draws = vec![d];
        codes.push(
            s.draw(
                &be,
                Cfg {
                    cond_top_k: None,
                    top_k: vocab,
                    draw_offset: 1,
                    ..CFG
                },
            )[0],
        );
    }
    let mut distinct = codes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() >= 45,
        "{} distinct codes in 200 draws of 64",
        distinct.len()
    );
    let repeats = codes.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(repeats < 15, "{repeats} consecutive repeats");
}
