//! The SentencePiece tokenizer (a model built here with the protobuf's own encoder) and the word
//! and timestamp assembly of the server's rule.

use chorus_stt::config::FRAME_RATE;
use chorus_stt::{SttConfig, SttTokenizer, WordAssembler, WordEvent};
use prost::Message;
use sentencepiece_model::{ModelProto, SentencePiece, Type};

/// A model of `pieces` (text, type).
fn model_bytes(pieces: &[(&str, Type)]) -> Vec<u8> {
    let m = ModelProto {
        pieces: pieces
            .iter()
            .map(|&(p, t)| SentencePiece {
                piece: Some(p.into()),
                score: Some(0.0),
                r#type: Some(t as i32),
            })
            .collect(),
        ..Default::default()
    };
    m.encode_to_vec()
}

fn config(pieces: usize) -> SttConfig {
    SttConfig {
        text_vocab: pieces,
        ids: chorus_stt::SttIds {
            initial_text: pieces as u32,
            ..SttConfig::random_small().ids
        },
        ..SttConfig::random_small()
    }
}

fn tokenizer() -> SttTokenizer {
    let pieces = [
        ("<unk>", Type::Unknown),
        ("<s>", Type::Control),
        ("</s>", Type::Control),
        ("<pad>", Type::Control),
        ("\u{2581}hello", Type::Normal),
        ("\u{2581}wor", Type::Normal),
        ("ld", Type::Normal),
        ("<0xC3>", Type::Byte),
        ("<0xA9>", Type::Byte),
        ("\u{2581}caf", Type::Normal),
    ];
    SttTokenizer::from_bytes(&model_bytes(&pieces), "test.model", &config(pieces.len())).unwrap()
}

#[test]
fn decodes_pieces_bytes_and_controls_as_sentencepiece_does() {
    let t = tokenizer();
    assert_eq!(t.len(), 10);
    assert_eq!(t.decode(&[4, 5, 6]).unwrap(), "hello world");
    // Byte pieces join into one UTF-8 character; control pieces vanish.
    assert_eq!(t.decode(&[9, 7, 8, 3, 2]).unwrap(), "café");
    assert_eq!(t.decode(&[5, 6]).unwrap(), "world");
    let e = t.decode(&[10]).unwrap_err().to_string();
    assert!(e.contains("token 10 is outside the 10 pieces"), "{e}");
}

#[test]
fn a_tokenizer_of_another_size_or_no_model_is_refused() {
    let bytes = model_bytes(&[("a", Type::Normal)]);
    let e = SttTokenizer::from_bytes(&bytes, "x.model", &config(40))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("x.model") && e.contains("1 pieces") && e.contains("40"),
        "{e}"
    );
    let e = SttTokenizer::from_bytes(&[0xff, 0xff, 0xff], "bad.model", &config(40))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad.model") && e.contains("not a SentencePiece model"),
        "{e}"
    );
}

fn events(delay: usize, tokens: &[u32]) -> Vec<WordEvent> {
    let c = SttConfig {
        text_delay_frames: delay,
        ..SttConfig::random_small()
    };
    let mut w = WordAssembler::new(&c);
    let mut out = Vec::new();
    for &t in tokens {
        w.push(t, &mut |e| out.push(e));
    }
    w.finish(&mut |e| out.push(e));
    out
}

#[test]
fn words_start_at_their_epad_and_end_at_the_next() {
    // Step s (1-based) is at (s - 2) / 12.5 s; with delay 2 the token of step 1 (s < delay) is
    // ignored.
    let tokens = [9, 3, 3, 0, 11, 12, 3, 3, 0, 13, 3];
    let t = |s: usize| (s - 2) as f32 / FRAME_RATE;
    assert_eq!(
        events(2, &tokens),
        vec![
            WordEvent::Word {
                tokens: vec![11, 12],
                start: t(4)
            },
            WordEvent::EndWord { stop: t(9) },
            WordEvent::Word {
                tokens: vec![13],
                start: t(9)
            },
            // The stream ends: the unended word ends at the last step.
            WordEvent::EndWord { stop: t(11) },
        ]
    );
}

#[test]
fn tokens_before_the_delay_are_ignored_and_a_word_spelled_at_the_end_is_closed() {
    assert_eq!(
        events(4, &[7, 8, 9, 0, 14, 15]),
        vec![
            WordEvent::Word {
                tokens: vec![14, 15],
                start: 0.0
            },
            WordEvent::EndWord {
                stop: 2.0 / FRAME_RATE
            },
        ]
    );
}
