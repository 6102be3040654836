//! Exactness against transformers' `MimiModel.decode` on the whole sequence (fp32), at the real
//! architecture, in both checkpoint layouts, past the 250-token window: decoding the same codes
//! frame by frame through the CPU slot decoder must match to relative L2 <= 1e-4.

use chorus_core::Buckets;
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::Layout;
use chorus_mimi::oracle::{decode_cases, fixtures_dir, load_cases, model_for, rel_l2};
use chorus_mimi::{DecoderOptions, SlotDecoder};

/// The bound for f32 against the fp32 oracle.
const TOLERANCE: f64 = 1e-4;
/// 250 tokens of window = 125 frames: the fixtures must run past it.
const WINDOW_FRAMES: usize = 125;

fn check_layout(layout: Layout) {
    let (seed, cases) = load_cases(&fixtures_dir(), layout).unwrap();
    let model = model_for(layout, seed).unwrap();
    assert_eq!(model.layout, layout);
    let n = cases.len();
    let opts = DecoderOptions {
        max_slots: n,
        buckets: Buckets::new(&[n]).unwrap(),
        chunk_frames: 1,
    };
    let mut dec = SlotDecoder::from_weights(
        CpuBackend::new(None).unwrap(),
        &model.config,
        &model.weights,
        opts,
    )
    .unwrap();
    let got = decode_cases(&mut dec, &cases).unwrap();
    for (c, g) in cases.iter().zip(&got) {
        assert!(
            c.frames > WINDOW_FRAMES,
            "{}: {} frames do not cross the window",
            c.name,
            c.frames
        );
        let e = rel_l2(g, &c.pcm[..g.len()]);
        println!(
            "{}: {} frames, n_q {}, relative L2 {e:.3e}",
            c.name, c.frames, c.n_q
        );
        assert!(
            e <= TOLERANCE,
            "{}: relative L2 {e:e} > {TOLERANCE:e}",
            c.name
        );
    }
}

#[test]
fn hf_layout_matches_transformers() {
    check_layout(Layout::HuggingFace);
}

#[test]
fn kyutai_layout_matches_transformers() {
    check_layout(Layout::Kyutai);
}
