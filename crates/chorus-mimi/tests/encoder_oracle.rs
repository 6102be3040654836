//! Exactness against transformers' `MimiModel.encode` on the whole signal (fp32), at the real
//! architecture, in both checkpoint layouts, on synthetic audio and real speech, past the
//! 250-token window: encoding frame by frame through the CPU slot encoder must give the
//! pre-quantisation latent within relative L2 1e-4 and at least 99.9% identical codes per level.

use chorus_core::Buckets;
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::Layout;
use chorus_mimi::oracle::{model_for, rel_l2};
use chorus_mimi::oracle_encoder::{
    compare_codes, encode_cases, encoder_fixtures_dir, load_encoder_cases,
};
use chorus_mimi::{EncoderOptions, SlotEncoder};

/// The bounds for f32 against the fp32 oracle.
const LATENT_TOLERANCE: f64 = 1e-4;
const CODE_SHARE: f64 = 0.999;
/// 250 tokens of window = 125 frames: the fixtures must run past it.
const WINDOW_FRAMES: usize = 125;

fn check_layout(layout: Layout) {
    let (seed, cases) = load_encoder_cases(&encoder_fixtures_dir()).unwrap();
    let cases: Vec<_> = cases.iter().filter(|c| c.layout == layout).collect();
    assert!(!cases.is_empty(), "no {layout:?} encoder fixture");
    let model = model_for(layout, seed).unwrap();
    let n = cases.len();
    let mut enc = SlotEncoder::from_weights(
        CpuBackend::new(None).unwrap(),
        &model.config,
        &model.weights,
        EncoderOptions {
            max_slots: n,
            buckets: Buckets::new(&[n]).unwrap(),
            chunk_frames: 1,
        },
    )
    .unwrap();
    let levels = cases[0].levels;
    let got = encode_cases(&mut enc, &cases, levels).unwrap();
    for (c, g) in cases.iter().zip(&got) {
        assert!(c.frames > WINDOW_FRAMES, "{}: too short", c.name);
        let e = rel_l2(&g.latents, &c.latent);
        let agree = compare_codes(c, &g.codes, levels);
        println!(
            "{}: {} frames, latent relative L2 {e:.3e}, identical codes per level {:?} of {}",
            c.name, c.frames, agree.identical, agree.frames
        );
        for m in &agree.mismatches {
            println!(
                "  level {} frame {}: {} vs oracle {} (oracle margin {:.3e})",
                m.level, m.frame, m.got, m.want, m.margin
            );
        }
        assert!(
            e <= LATENT_TOLERANCE,
            "{}: latent relative L2 {e:e}",
            c.name
        );
        assert!(
            agree.worst_share() >= CODE_SHARE,
            "{}: only {:.4} of the codes of some level are identical",
            c.name,
            agree.worst_share()
        );
    }
}

#[test]
fn hf_layout_matches_transformers_encode() {
    check_layout(Layout::HuggingFace);
}

#[test]
fn kyutai_layout_matches_transformers_encode() {
    check_layout(Layout::Kyutai);
}
