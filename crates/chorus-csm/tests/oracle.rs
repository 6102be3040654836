//! The oracle fixtures (`tests/fixtures/csm`, `tools/fixtures/csm_oracle.py`) against the host
//! side: the config it ran, the prompt it fed, and the weights it loaded.

mod common;

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_csm::prompt::{build_prompt, build_prompt_ids, IdSegment, PromptLimits, Segment};
use chorus_csm::{load_csm_model, CsmConfig};
use common::{dir, manifest, recorded_prompt};
use serde_json::Value;

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn the_oracle_config_json_is_random_small() {
    let text = std::fs::read_to_string(dir().join("config.json")).unwrap();
    assert_eq!(
        CsmConfig::from_hf_json(&text, "config.json").unwrap(),
        CsmConfig::random_small()
    );
}

#[test]
fn build_prompt_gives_the_frames_the_oracle_fed() {
    let m = manifest();
    let model = load_csm_model("random-small").unwrap();
    let tok = model.tokenizer.as_ref().unwrap();
    let c = &model.config;
    let ctx = &m["context"][0];
    let audio: Vec<Vec<u32>> = serde_json::from_value(ctx["audio"].clone()).unwrap();
    let segment = Segment {
        speaker: ctx["speaker"].as_u64().unwrap() as u32,
        text: ctx["text"].as_str().unwrap().into(),
        audio: Some(audio.clone()),
    };
    // The byte stand-in reproduces the oracle's text ids.
    assert_eq!(
        tok.encode_segment(segment.speaker, &segment.text).unwrap(),
        ids(&ctx["text_ids"])
    );
    let target = &m["target"];
    let (spk, text) = (
        target["speaker"].as_u64().unwrap() as u32,
        target["text"].as_str().unwrap(),
    );
    assert_eq!(
        tok.encode_segment(spk, text).unwrap(),
        ids(&target["text_ids"])
    );
    let limits = PromptLimits::new(c, 10);
    let frames = build_prompt(tok, &[segment], spk, text, &limits).unwrap();
    let by_ids = build_prompt_ids(
        &[IdSegment {
            text_ids: ids(&ctx["text_ids"]),
            audio: Some(audio),
        }],
        &ids(&target["text_ids"]),
        &limits,
    )
    .unwrap();
    assert_eq!(frames, by_ids);
    assert_eq!(frames.len(), m["prompt_frames"].as_u64().unwrap() as usize);
    for case in m["cases"].as_array().unwrap() {
        let f = SafetensorsFile::open(&dir().join(case["file"].as_str().unwrap())).unwrap();
        assert_eq!(
            recorded_prompt(&f, c.num_codebooks),
            frames,
            "{}",
            case["case"]
        );
    }
}

/// |a - b| <= tol * max(1, |b|) elementwise.
fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * y.abs().max(1.0),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn the_oracle_loaded_the_same_weights() {
    let model = load_csm_model("random-small").unwrap();
    let (c, w) = (&model.config, &model.weights);
    let f = SafetensorsFile::open(&dir().join("small_greedy.safetensors")).unwrap();
    let (h, v, n) = (c.backbone.hidden_size, c.audio_vocab_size, c.num_codebooks);
    let (_, codes) = f.load_i32("codes").unwrap();
    let next = f.load("next_input").unwrap();
    let hidden = f.load("backbone_hidden").unwrap();
    let logits = f.load("c0_logits").unwrap();
    let frames = codes.len() / n;
    assert_eq!(next.shape, vec![frames, h]);
    for fr in 0..frames {
        // The next backbone input is the sum of the frame's code embeddings (CSM.md §4.1).
        let mut sum = vec![0f32; h];
        for k in 0..n {
            let row = k * v + codes[fr * n + k] as usize;
            for (s, x) in sum
                .iter_mut()
                .zip(&w.audio_embeddings.data[row * h..(row + 1) * h])
            {
                *s += x;
            }
        }
        assert_close(&sum, &next.data[fr * h..(fr + 1) * h], 1e-5, "next_input");
        // Codebook 0's logits are lm_head applied to the final-normed backbone hidden.
        let hid = &hidden.data[fr * h..(fr + 1) * h];
        let lg: Vec<f32> = (0..v)
            .map(|r| {
                w.lm_head.data[r * h..(r + 1) * h]
                    .iter()
                    .zip(hid)
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect();
        assert_close(&lg, &logits.data[fr * v..(fr + 1) * v], 1e-5, "c0_logits");
    }
    // The depth heads: logits = g @ codebooks_head[level - 1] ([in, out]).
    let (dh, dl) = (
        f.load("depth_hidden").unwrap(),
        f.load("depth_logits").unwrap(),
    );
    let d = c.depth.hidden_size;
    assert_eq!(dh.shape, vec![frames, n - 1, d]);
    for level in 1..n {
        let head = w.codebook_head(level).unwrap();
        let g = &dh.data[(level - 1) * d..level * d];
        let lg: Vec<f32> = (0..v)
            .map(|j| (0..d).map(|i| g[i] * head[i * v + j]).sum())
            .collect();
        assert_close(
            &lg,
            &dl.data[(level - 1) * v..level * v],
            1e-5,
            "depth_logits",
        );
    }
}

#[test]
fn the_stop_case_ends_on_its_all_zero_frame() {
    let m = manifest();
    let case = m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == "small_stop")
        .unwrap();
    let stop = case["stop_frame"].as_u64().unwrap() as usize;
    let f = SafetensorsFile::open(&dir().join("small_stop.safetensors")).unwrap();
    let (shape, codes) = f.load_i32("codes").unwrap();
    assert_eq!(shape[0], stop + 1);
    let n = shape[1];
    for (fr, frame) in codes.chunks(n).enumerate() {
        assert_eq!(
            frame.iter().all(|&c| c == 0),
            fr == stop,
            "frame {fr}: {frame:?}"
        );
    }
    // transformers' rule (codebooks 0..n-2) would have fired earlier: the rules differ here.
    assert!(case["hf_rule_frame"].as_u64().unwrap() < stop as u64);
    let pcm = SafetensorsFile::open(&dir().join("small_greedy.safetensors"))
        .unwrap()
        .load("mimi_pcm")
        .unwrap();
    assert_eq!(pcm.shape, vec![10 * 1920]);
    assert!(pcm.data.iter().any(|&x| x != 0.0));
}
