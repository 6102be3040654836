//! The prompt's frame layout (`CSM.md` §3.2) and its limits (§3.4), each a named error.

use chorus_csm::prompt::{
    build_prompt, build_prompt_ids, IdSegment, PromptFrame, PromptLimits, Segment,
};
use chorus_csm::tokenizer::BYTE_FALLBACK_FIRST;
use chorus_csm::{CsmConfig, CsmTokenizer};

fn setup() -> (CsmConfig, CsmTokenizer) {
    let c = CsmConfig::random_small();
    let t = CsmTokenizer::byte_fallback(&c).unwrap();
    (c, t)
}

fn seg(speaker: u32, text: &str, frames: usize, n: usize) -> Segment {
    Segment {
        speaker,
        text: text.into(),
        audio: Some((0..frames).map(|f| vec![(f % 7) as u32 + 1; n]).collect()),
    }
}

#[test]
fn context_turns_give_text_audio_and_an_eos_frame_then_the_target_text() {
    let (c, tok) = setup();
    let n = c.num_codebooks;
    let ctx = [seg(0, "ab", 3, n), seg(1, "", 2, n)];
    let frames = build_prompt(&tok, &ctx, 0, "hi", &PromptLimits::new(&c, 8)).unwrap();
    let t0 = tok.encode_segment(0, "ab").unwrap();
    let t1 = tok.encode_segment(1, "").unwrap();
    let tt = tok.encode_segment(0, "hi").unwrap();
    assert_eq!(t0.len(), 2 + "[0]ab".len());
    let mut expected: Vec<PromptFrame> = t0.iter().map(|&i| PromptFrame::Text(i)).collect();
    expected.extend(
        ctx[0]
            .audio
            .as_ref()
            .unwrap()
            .iter()
            .cloned()
            .map(PromptFrame::Audio),
    );
    expected.push(PromptFrame::Audio(vec![0; n]));
    expected.extend(t1.iter().map(|&i| PromptFrame::Text(i)));
    expected.extend(
        ctx[1]
            .audio
            .as_ref()
            .unwrap()
            .iter()
            .cloned()
            .map(PromptFrame::Audio),
    );
    expected.push(PromptFrame::Audio(vec![0; n]));
    expected.extend(tt.iter().map(|&i| PromptFrame::Text(i)));
    assert_eq!(frames, expected);
    // Every text segment is BOS ... EOS; the last prompt frame is text EOS.
    for ids in [&t0, &t1, &tt] {
        assert_eq!((ids[0], *ids.last().unwrap()), (c.ids.bos, c.ids.text_eos));
    }
    assert_eq!(frames.last(), Some(&PromptFrame::Text(c.ids.text_eos)));
    // A target alone: its text frames only.
    let alone = build_prompt(&tok, &[], 3, "x", &PromptLimits::new(&c, 1)).unwrap();
    assert_eq!(
        alone,
        tok.encode_segment(3, "x")
            .unwrap()
            .into_iter()
            .map(PromptFrame::Text)
            .collect::<Vec<_>>()
    );
}

#[test]
fn the_byte_stand_in_never_emits_a_special_id() {
    let (c, tok) = setup();
    let all: String = (1u8..128).map(char::from).collect();
    let ids = tok.encode_plain(&all).unwrap();
    assert_eq!(ids.len(), all.len());
    let specials = [
        c.ids.bos,
        c.ids.text_eos,
        c.ids.audio_token,
        c.ids.audio_eos,
        c.ids.pad,
    ];
    assert!(ids
        .iter()
        .all(|&i| i >= BYTE_FALLBACK_FIRST && (i as usize) < c.text_vocab_size));
    assert!(ids.iter().all(|i| !specials.contains(i)));
    assert_eq!(
        tok.encode_plain("[").unwrap(),
        vec![BYTE_FALLBACK_FIRST + b'[' as u32 % 93]
    );
    let full = CsmTokenizer::byte_fallback(&CsmConfig::csm_1b()).unwrap();
    assert_eq!(
        full.encode_plain("A").unwrap(),
        vec![BYTE_FALLBACK_FIRST + 65]
    );
}

#[test]
fn limits_and_bad_inputs_are_named_errors() {
    let (c, tok) = setup();
    let n = c.num_codebooks;
    let limits = PromptLimits::new(&c, 10);
    let err = |ctx: &[Segment], text: &str, l: &PromptLimits| {
        build_prompt(&tok, ctx, 0, text, l).unwrap_err().to_string()
    };

    // Prompt + max frames must fit the backbone's 256 positions.
    let long = "x".repeat(250);
    let e = err(&[], &long, &limits);
    assert!(
        e.contains("255 frames") && e.contains("265 positions") && e.contains("256"),
        "{e}"
    );
    let fits = "x".repeat(256 - 10 - 5);
    assert_eq!(
        build_prompt(&tok, &[], 0, &fits, &limits).unwrap().len(),
        246
    );
    assert!(err(&[], &format!("{fits}x"), &limits).contains("257 positions"));

    let mut bad = seg(0, "a", 2, n);
    bad.audio.as_mut().unwrap()[1][3] = 11;
    let e = err(&[bad], "b", &limits);
    assert!(
        e.contains("context segment 0, audio frame 1, codebook 3: code 11 is outside [0, 11)"),
        "{e}"
    );

    let mut short = seg(0, "a", 2, n);
    short.audio.as_mut().unwrap()[0].pop();
    assert!(err(&[short], "b", &limits).contains("7 codes, expected 8"));

    let mut none = seg(0, "a", 2, n);
    none.audio = None;
    assert!(err(&[none], "b", &limits).contains("context segment 0 has no audio"));

    assert!(err(&[], "b", &PromptLimits::new(&c, 0)).contains("max_frames is 0"));

    let ids = build_prompt_ids(&[], &[1, 100, 3], &limits)
        .unwrap_err()
        .to_string();
    assert!(
        ids.contains("text id 100 at position 1") && ids.contains("vocabulary of 100"),
        "{ids}"
    );
    let ctx = [IdSegment {
        text_ids: vec![1, 3],
        audio: Some(vec![]),
    }];
    let frames = build_prompt_ids(&ctx, &[1, 3], &limits).unwrap();
    assert_eq!(
        frames[2],
        PromptFrame::Audio(vec![0; n]),
        "a turn of no frames still ends with EOS"
    );
    assert!(build_prompt_ids(&[], &[], &limits)
        .unwrap_err()
        .to_string()
        .contains("no text tokens"));
}
