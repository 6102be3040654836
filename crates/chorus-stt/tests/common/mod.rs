//! Shared by the checkpoint and config tests: config json in both layouts, safetensors writers.

#![allow(dead_code)]

pub mod oracle;

use std::path::Path;

use chorus_core::checkpoint::{write_tensors, Dtype, TensorData, TensorSource};
use chorus_core::HostTensor;
use chorus_stt::random::{RandomSource, RANDOM_STT_SEED};
use chorus_stt::weights::tensor_specs;
use chorus_stt::SttConfig;
use serde_json::{json, Value};

/// A fresh directory under the system temp dir, removed when the test ends.
pub fn temp_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-stt-{test}-"))
        .tempdir()
        .unwrap()
}

/// Kyutai's moshi `config.json` of `c` (the fields `lm.py` reads, and `stt_config`).
pub fn kyutai_json(c: &SttConfig) -> Value {
    let delay_seconds = if c.text_delay_frames == 32 { 2.5 } else { 0.5 };
    json!({
        "card": c.codebook_vocab - 1, "n_q": c.num_codebooks, "dep_q": 0,
        "delays": vec![0; c.num_codebooks + 1], "dim": c.hidden_size, "text_card": c.text_vocab,
        "existing_text_padding_id": 3, "num_heads": c.num_attention_heads,
        "num_layers": c.num_hidden_layers, "hidden_scale": 1.5 * c.ffn_hidden as f64 / c.hidden_size as f64,
        "causal": true, "context": c.sliding_window, "max_period": 100000, "gating": "silu",
        "norm": "rms_norm_f32", "positional_embedding": "rope",
        "extra_heads_num_heads": c.extra_heads, "extra_heads_dim": 6,
        "stt_config": {"audio_silence_prefix_seconds": c.silence_prefix_seconds,
                       "audio_delay_seconds": delay_seconds},
        "tokenizer_name": "tokenizer.model",
    })
}

/// transformers' `KyutaiSpeechToTextConfig` json of `c`.
pub fn hf_json(c: &SttConfig) -> Value {
    let vocab = c.text_vocab + 1;
    json!({
        "model_type": "kyutai_speech_to_text", "vocab_size": vocab,
        "codebook_vocab_size": c.codebook_vocab, "num_codebooks": c.num_codebooks,
        "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
        "ffn_dim": 2 * c.ffn_hidden, "rms_norm_eps": 1e-8, "sliding_window": c.sliding_window,
        "max_position_embeddings": 2 * c.sliding_window, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
        "audio_bos_token_id": 2048, "audio_pad_token_id": vocab + c.num_codebooks * c.codebook_vocab,
        "pad_token_id": 3, "bos_token_id": 48000,
    })
}

/// Every Kyutai-layout tensor of the seeded random weights of `c`.
pub fn kyutai_tensors(c: &SttConfig) -> Vec<(String, HostTensor)> {
    let src = RandomSource::new(c, RANDOM_STT_SEED);
    tensor_specs(c)
        .into_iter()
        .map(|s| (s.name.clone(), src.load(&s.name).unwrap()))
        .collect()
}

/// The conversion script's arithmetic, written out here: the merged embedding with its zero
/// row, q/k rows from interleaved to rotate-half pairs, gains squeezed, the head's zero row.
pub fn hf_tensors(c: &SttConfig) -> Vec<(String, HostTensor)> {
    let k: std::collections::HashMap<String, HostTensor> = kyutai_tensors(c).into_iter().collect();
    let d = c.hidden_size;
    let t = |shape: Vec<usize>, data: Vec<f32>| HostTensor::new(shape, data).unwrap();
    let mut embed = k["text_emb.weight"].data.clone();
    for b in 0..c.num_codebooks {
        embed.extend_from_slice(&k[&format!("emb.{b}.weight")].data);
    }
    embed.extend(vec![0.0; d]);
    let rows = embed.len() / d;
    let mut out = vec![(
        "model.embed_tokens.embed_tokens.weight".to_string(),
        t(vec![rows, d], embed),
    )];
    let permute = |w: &[f32], heads: usize| -> Vec<f32> {
        let hd = w.len() / d / heads;
        let mut o = vec![0.0; w.len()];
        for h in 0..heads {
            for j in 0..hd / 2 {
                for r in 0..2 {
                    let (dst, src) = (h * hd + r * hd / 2 + j, h * hd + 2 * j + r);
                    o[dst * d..(dst + 1) * d].copy_from_slice(&w[src * d..(src + 1) * d]);
                }
            }
        }
        o
    };
    for l in 0..c.num_hidden_layers {
        let (kp, hp) = (
            format!("transformer.layers.{l}"),
            format!("model.layers.{l}"),
        );
        let qkv = &k[&format!("{kp}.self_attn.in_proj_weight")].data;
        let (q, kv) = (c.q_width(), c.kv_width());
        let parts = [
            ("q_proj", permute(&qkv[..q * d], c.num_attention_heads), q),
            (
                "k_proj",
                permute(&qkv[q * d..(q + kv) * d], c.num_key_value_heads),
                kv,
            ),
            ("v_proj", qkv[(q + kv) * d..].to_vec(), kv),
        ];
        for (name, data, n) in parts {
            out.push((
                format!("{hp}.self_attn.{name}.linear.weight"),
                t(vec![n, d], data),
            ));
        }
        let same = |kn: &str| k[&format!("{kp}.{kn}")].clone();
        let gain = |kn: &str| t(vec![d], k[&format!("{kp}.{kn}")].data.clone());
        out.push((
            format!("{hp}.self_attn.o_proj.linear.weight"),
            same("self_attn.out_proj.weight"),
        ));
        out.push((format!("{hp}.input_layernorm.weight"), gain("norm1.alpha")));
        out.push((
            format!("{hp}.post_attention_layernorm.weight"),
            gain("norm2.alpha"),
        ));
        out.push((
            format!("{hp}.mlp.fc1.weight"),
            same("gating.linear_in.weight"),
        ));
        out.push((
            format!("{hp}.mlp.fc2.weight"),
            same("gating.linear_out.weight"),
        ));
    }
    out.push((
        "model.norm.weight".into(),
        t(vec![d], k["out_norm.alpha"].data.clone()),
    ));
    let mut head = k["text_linear.weight"].data.clone();
    head.extend(vec![0.0; d]);
    out.push(("lm_head.weight".into(), t(vec![c.text_rows(), d], head)));
    out
}

pub fn write(path: &Path, tensors: &[(String, HostTensor)]) {
    let data: Vec<(String, TensorData)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), TensorData::Float(t, Dtype::F32)))
        .collect();
    write_tensors(path, &data, &[]).unwrap();
}

pub fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}
