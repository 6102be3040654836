//! The semantic-stage prompt: caption cleaning, lyrics normalisation, template, tokenisation and
//! the CFG row, over a tiny hand-written `tokenizer.json` carrying the checkpoint's special ids.

use std::path::PathBuf;

use chorus_core::Error;
use chorus_music::prompt::*;

/// The seven template tokens with the ids the checkpoint expects.
const SPECIALS: [(&str, u32); 7] = [
    ("<|im_start|>", IM_START),
    ("<|im_end|>", IM_END),
    ("<|audio_start|>", AUDIO_START),
    ("<|caption_start|>", CAPTION_START),
    ("<|caption_end|>", CAPTION_END),
    ("<|lyrics_start|>", LYRICS_START),
    ("<|lyrics_end|>", LYRICS_END),
];

/// Ordinary words of the tiny WordLevel vocabulary, with sparse ids.
const WORDS: [(&str, u32); 11] = [
    ("[UNK]", 0),
    ("[", 10),
    ("]", 11),
    ("start", 20),
    ("verse", 21),
    ("chorus", 22),
    ("genre", 30),
    ("is", 31),
    ("pop", 32),
    ("hello", 40),
    ("world", 41),
];

/// A vocabulary size that holds every id above.
const VOCAB: usize = 151_675 + 16_384;

/// A `tokenizer.json`: WordLevel over `WORDS` plus `vocab_specials`, added tokens `added`.
fn tokenizer_json(vocab_specials: &[(&str, u32)], added: &[(&str, u32)]) -> String {
    let vocab: serde_json::Map<String, serde_json::Value> = WORDS
        .iter()
        .chain(vocab_specials)
        .map(|&(t, id)| (t.to_string(), id.into()))
        .collect();
    let added: Vec<serde_json::Value> = added
        .iter()
        .map(|&(t, id)| {
            serde_json::json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    })
    .to_string()
}

/// Writes `json` to `tokenizer.json` in a fresh temp folder named after the test; returns the
/// folder (removed when dropped) and the file's path.
fn write_temp(test: &str, json: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("chorus-prompt-{test}-"))
        .tempdir()
        .unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, json).unwrap();
    (dir, path)
}

fn good_tokenizer(test: &str) -> PromptTokenizer {
    let (_dir, path) = write_temp(test, &tokenizer_json(&SPECIALS, &SPECIALS));
    PromptTokenizer::from_file(&path).unwrap()
}

fn load_err(test: &str, vocab_specials: &[(&str, u32)], added: &[(&str, u32)]) -> String {
    let (_dir, path) = write_temp(test, &tokenizer_json(vocab_specials, added));
    match PromptTokenizer::from_file(&path) {
        Err(e @ Error::Format { .. }) => e.to_string(),
        other => panic!("expected a Format error, got {other:?}"),
    }
}

fn input_err<T: std::fmt::Debug>(r: chorus_core::Result<T>) -> String {
    match r {
        Err(e @ Error::Input { .. }) => e.to_string(),
        other => panic!("expected an Input error, got {other:?}"),
    }
}

#[test]
fn caption_tags_become_is_phrases() {
    assert_eq!(clean_caption("<|genre pop|>"), "genre is pop");
    assert_eq!(
        clean_caption("<|  mood   dark  epic |>, loud"),
        "mood is dark  epic, loud"
    );
    assert_eq!(clean_caption("a <|solo|> b"), "a solo b");
    // diffusers returns the empty content; Wan2GP would raise IndexError.
    assert_eq!(clean_caption("x<||>y"), "xy");
    assert_eq!(clean_caption("<| |>"), "");
}

#[test]
fn caption_markdown_is_stripped_and_blank_lines_collapse() {
    let raw = "# Title\n## Sub\n   ### Deep\n- item one\n* item two\n+ three\n- * nested\n\
               **bold** and *it*\n---\n***\n\n\nend  \n";
    assert_eq!(
        clean_caption(raw),
        "Title\nSub\nDeep\nitem one\nitem two\nthree\nnested\nbold and it\nend"
    );
    // Four leading spaces are no header: the `#` survives, the spaces go with the 4-space rule.
    assert_eq!(clean_caption("    # code"), "# code");
    assert_eq!(clean_caption("**a **b** c**"), "a b c");
    assert_eq!(
        clean_caption("tempo:    fast • bright"),
        "tempo:fast bright"
    );
    assert_eq!(clean_caption("a\r\n\r\n\r\nb"), "a\nb");
    assert_eq!(clean_caption("keep *** stars"), "keep *** stars");
}

#[test]
fn lyrics_tags_are_lowercased_and_tag_lines_keep_only_tags() {
    let raw = "[Verse] Hello there\nline one\n[CHORUS][Hook] ignored text\n  [Bridge]\tx\n\
               la la ^ la [Outro]";
    assert_eq!(
        normalize_lyrics(raw),
        "[start]\n[verse]\nline one\n[chorus][hook]\n[bridge]\nla la\nla\n[outro]"
    );
    assert_eq!(
        normalize_lyrics("oh [Yeah] baby"),
        "[start]\noh\n[yeah]\nbaby"
    );
    assert_eq!(normalize_lyrics("just words"), "[start]\njust words");
}

#[test]
fn prompt_text_is_the_upstream_template() {
    let text = prompt_text("<|genre pop|>", "[Verse]\nhello world").unwrap();
    assert_eq!(
        text,
        "<|im_start|><|caption_start|>genre is pop<|caption_end|><|lyrics_start|>[start]\n\
         [verse]\nhello world<|lyrics_end|><|im_end|><|audio_start|>"
    );
}

#[test]
fn encode_places_special_tokens_and_builds_cfg_row() {
    let tok = good_tokenizer("encode");
    let ids = tok
        .encode("<|genre pop|>", "[Verse] spoken\nhello world", VOCAB)
        .unwrap();
    let expected = vec![
        IM_START,
        CAPTION_START,
        30,
        31,
        32,
        CAPTION_END,
        LYRICS_START,
        10,
        20,
        11,
        10,
        21,
        11,
        40,
        41,
        LYRICS_END,
        IM_END,
        AUDIO_START,
    ];
    assert_eq!(ids.cond, expected);
    assert_eq!(ids.len(), expected.len());
    assert!(!ids.is_empty());
    let p = ids.len();
    assert_eq!(ids.uncond.len(), p);
    assert_eq!(ids.uncond[0], IM_START);
    assert_eq!(&ids.uncond[p - 2..], &[IM_END, AUDIO_START]);
    assert!(ids.uncond[1..p - 2].iter().all(|&id| id == CFG_FILLER));
}

#[test]
fn from_cond_keeps_first_and_last_two() {
    let ids = PromptIds::from_cond(vec![1, 2, 3, 4, 5], VOCAB).unwrap();
    assert_eq!(ids.cond, vec![1, 2, 3, 4, 5]);
    assert_eq!(ids.uncond, vec![1, CFG_FILLER, CFG_FILLER, 4, 5]);
    // P = 3: nothing between the first and the last two.
    let ids = PromptIds::from_cond(vec![7, 8, 9], VOCAB).unwrap();
    assert_eq!(ids.uncond, vec![7, 8, 9]);
    assert!(input_err(PromptIds::from_cond(vec![1, 2], VOCAB)).contains("2 tokens"));
}

#[test]
fn empty_caption_or_lyrics_is_an_error() {
    assert!(input_err(prompt_text(" \n\t", "[verse]\nhello")).contains("caption"));
    assert!(input_err(prompt_text("pop", "\u{3000}\n")).contains("lyrics"));
    let tok = good_tokenizer("empty");
    assert!(input_err(tok.encode("", "hello", VOCAB)).contains("caption is empty"));
    assert!(input_err(tok.encode("pop", "  ", VOCAB)).contains("lyrics is empty"));
}

#[test]
fn too_long_prompt_names_length_and_limit() {
    let tok = good_tokenizer("too_long");
    let lyrics = "hello ".repeat(5000);
    // 7 template tokens + "pop" + "[ start ]" + 5000 words.
    let msg = input_err(tok.encode("pop", &lyrics, VOCAB));
    assert!(msg.contains("5011 tokens") && msg.contains("5000"), "{msg}");
    let msg = input_err(PromptIds::from_cond(vec![1; MAX_PROMPT_TOKENS + 1], VOCAB));
    assert!(msg.contains("5001 tokens") && msg.contains("5000"), "{msg}");
    assert!(PromptIds::from_cond(vec![1; MAX_PROMPT_TOKENS], VOCAB).is_ok());
}

#[test]
fn tokenizer_missing_audio_start_is_named() {
    let without: Vec<_> = SPECIALS
        .iter()
        .copied()
        .filter(|t| t.0 != "<|audio_start|>")
        .collect();
    let msg = load_err("missing", &without, &without);
    assert!(
        msg.contains("<|audio_start|>") && msg.contains("missing") && msg.contains("151669"),
        "{msg}"
    );
}

#[test]
fn tokenizer_with_audio_start_at_wrong_id_is_named() {
    let moved: Vec<_> = SPECIALS
        .iter()
        .map(|&(t, id)| {
            if t == "<|audio_start|>" {
                (t, 151_668)
            } else {
                (t, id)
            }
        })
        .collect();
    let msg = load_err("wrong_id", &moved, &moved);
    assert!(
        msg.contains("<|audio_start|>") && msg.contains("151668") && msg.contains("151669"),
        "{msg}"
    );
}

#[test]
fn tokenizer_special_token_must_be_an_added_token() {
    // In the vocabulary at the right id, but not added: the pre-tokenizer would split it.
    let added: Vec<_> = SPECIALS
        .iter()
        .copied()
        .filter(|t| t.0 != "<|lyrics_end|>")
        .collect();
    let msg = load_err("not_added", &SPECIALS, &added);
    assert!(
        msg.contains("<|lyrics_end|>") && msg.contains("encodes to"),
        "{msg}"
    );
}

#[test]
fn post_processor_adding_a_bos_is_rejected_at_encode() {
    let mut json: serde_json::Value =
        serde_json::from_str(&tokenizer_json(&SPECIALS, &SPECIALS)).unwrap();
    let bos = |seq: &str| {
        serde_json::json!([{"SpecialToken": {"id": "[BOS]", "type_id": 0}},
            {"Sequence": {"id": seq, "type_id": 0}}])
    };
    json["post_processor"] = serde_json::json!({"type": "TemplateProcessing", "single": bos("A"),
        "pair": bos("B"),
        "special_tokens": {"[BOS]": {"id": "[BOS]", "ids": [1], "tokens": ["[BOS]"]}}});
    let t = tokenizers::Tokenizer::from_bytes(json.to_string()).unwrap();
    let tok = PromptTokenizer::from_tokenizer(t, "inline-bos").unwrap();
    match tok.encode("pop", "hello", VOCAB) {
        Err(e @ Error::Format { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("inline-bos") && msg.contains("Some(1)"),
                "{msg}"
            );
        }
        other => panic!("expected a Format error, got {other:?}"),
    }
}

#[test]
fn tokenizer_file_errors_name_the_file() {
    let (_dir, path) = write_temp("malformed", "{ not json");
    match PromptTokenizer::from_file(&path) {
        Err(e @ Error::Format { .. }) => assert!(e.to_string().contains("tokenizer.json")),
        other => panic!("expected a Format error, got {other:?}"),
    }
    let absent = path.with_file_name("absent.json");
    assert!(matches!(
        PromptTokenizer::from_file(&absent),
        Err(Error::Io { .. })
    ));
}

#[test]
fn from_pair_checks_lengths_and_vocab() {
    let ok = PromptIds::from_pair(vec![1, 2, 3, 4], vec![1, 9, 3, 4], 10).unwrap();
    assert_eq!(ok.uncond, vec![1, 9, 3, 4]);
    let msg = input_err(PromptIds::from_pair(vec![1, 2, 3, 4], vec![1, 2, 3], 10));
    assert!(msg.contains("4") && msg.contains("3"), "{msg}");
    let msg = input_err(PromptIds::from_pair(vec![1, 2, 3], vec![1, 12, 3], 10));
    assert!(
        msg.contains("unconditional id 12 at position 1") && msg.contains("10"),
        "{msg}"
    );
    let msg = input_err(PromptIds::from_pair(vec![1, 2, 10], vec![1, 2, 3], 10));
    assert!(msg.contains("conditional id 10 at position 2"), "{msg}");
    // The CFG filler itself must fit the vocabulary.
    let msg = input_err(PromptIds::from_cond(vec![1, 2, 3, 4], 1000));
    assert!(msg.contains(&CFG_FILLER.to_string()), "{msg}");
}
