//! Loading the int8 ConvRot checkpoint layout: the `_int8_convrot` files found in a directory
//! (bf16 ones absent) load to the `random-int8` weights they hold, a linear is int8 exactly when
//! its `.weight_scale` is present (fused parts that disagree become dense), and one named error
//! per kind of broken int8 entry. With `CHORUS_MUSIC_INT8_DIR` naming the folder
//! `tools/fixtures/music_int8.py` wrote, its files load bit-identical to `random-small-int8`.

mod common;

use common::tiny;
use std::path::Path;

use chorus_core::checkpoint::{write_tensors, Dtype, TensorData, TensorSource};
use chorus_core::HostTensor;
use chorus_lm::{HostLinear, Q8Tensor};
use chorus_music::load::{
    load_music_model, random_int8_model, DEPTH_CONFIG, DEPTH_WEIGHTS, DEPTH_WEIGHTS_INT8,
    LM_CONFIG, LM_WEIGHTS_INT8,
};
use chorus_music::random::{is_q8_linear, RandomSource, RANDOM_MUSIC_SEED};
use chorus_music::weights::{depth_tensor_specs, lm_tensor_specs, Spec};
use chorus_music::MusicModel;

const LM_JSON: &str = r#"{"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":2,
"num_key_value_heads":1,"head_dim":16,"vocab_size":200000,"rms_norm_eps":1e-6,"max_position_embeddings":16384,
"rope_parameters":{"rope_theta":1000000,"rope_type":"default"}}"#;
const DEPTH_JSON: &str =
    r#"{"hidden_size":32,"num_layers":1,"num_attention_heads":2,"intermediate_size":48}"#;

/// How to break the written files.
#[derive(Clone, Copy, Default)]
struct Faults<'a> {
    /// Stored float, without a scale (a dense linear among int8 ones).
    dense: Option<&'a str>,
    /// The int8 weight stored as F32 (its scale kept).
    float_weight: Option<&'a str>,
    /// The scale stored as `[rows, 2]`.
    bad_scale: Option<&'a str>,
    /// `comfy_quant` says another format.
    bad_comfy: Option<&'a str>,
}

/// One file's entries: int8 linears in the ConvRot layout, the rest f32.
fn write_file(path: &Path, specs: Vec<Spec>, src: &RandomSource, f: Faults<'_>) {
    let (mut floats, mut ints, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
    for s in specs {
        let t = src.load(&s.name).unwrap();
        let name = s.name.as_str();
        if !is_q8_linear(name) || f.dense == Some(name) {
            floats.push((s.name.clone(), t));
            continue;
        }
        let group = chorus_core::convrot::writer_group(s.shape[1]).unwrap();
        let q = Q8Tensor::quantize(t.clone(), group).unwrap();
        let base = name.trim_end_matches(".weight");
        let cols = if f.bad_scale == Some(name) { 2 } else { 1 };
        let scales: Vec<f32> = q.scales.iter().flat_map(|&v| vec![v; cols]).collect();
        floats.push((
            format!("{base}.weight_scale"),
            HostTensor::new(vec![q.rows, cols], scales).unwrap(),
        ));
        if f.float_weight == Some(name) {
            floats.push((s.name.clone(), t));
        } else {
            ints.push((s.name.clone(), s.shape.clone(), q.data));
        }
        let format = if f.bad_comfy == Some(name) {
            "int4_blockwise"
        } else {
            "int8_tensorwise"
        };
        let json = format!(r#"{{"format":"{format}","convrot":true,"convrot_groupsize":{group}}}"#);
        bytes.push((format!("{base}.comfy_quant"), json.into_bytes()));
    }
    let mut entries: Vec<(String, TensorData<'_>)> = floats
        .iter()
        .map(|(n, t)| (n.clone(), TensorData::Float(t, Dtype::F32)))
        .collect();
    entries.extend(ints.iter().map(|(n, shape, data)| {
        let d = TensorData::I8 {
            shape: shape.clone(),
            data,
        };
        (n.clone(), d)
    }));
    entries.extend(bytes.iter().map(|(n, b)| {
        let d = TensorData::U8 {
            shape: vec![b.len()],
            data: b,
        };
        (n.clone(), d)
    }));
    let meta = [("quantization_format", "int8_convrot".to_string())];
    write_tensors(path, &entries, &meta).unwrap();
}

/// Both int8 checkpoints of the tiny model in a fresh folder.
fn write_model(name: &str, f: Faults<'_>) -> tempfile::TempDir {
    let root = tempfile::Builder::new()
        .prefix(&format!("chorus-music-int8-{name}-"))
        .tempdir()
        .unwrap();
    let dir = root.path();
    let (lm, depth) = tiny();
    let src = RandomSource::new(&lm, &depth, RANDOM_MUSIC_SEED, 1.0);
    write_file(&dir.join(LM_WEIGHTS_INT8), lm_tensor_specs(&lm), &src, f);
    write_file(
        &dir.join(DEPTH_WEIGHTS_INT8),
        depth_tensor_specs(&depth),
        &src,
        f,
    );
    std::fs::write(dir.join(LM_CONFIG), LM_JSON).unwrap();
    std::fs::write(dir.join(DEPTH_CONFIG), DEPTH_JSON).unwrap();
    root
}

/// Every linear of both models, in a fixed order.
fn linears(m: &MusicModel) -> Vec<&HostLinear> {
    let mut v: Vec<&HostLinear> = m.lm.layers.iter().flat_map(|l| l.linears()).collect();
    v.push(&m.depth.projection);
    v.extend(m.depth.layers.iter().flat_map(|l| l.linears()));
    v.extend(m.depth.audio_heads.iter());
    v
}

fn load_err(dir: &Path) -> String {
    load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string()
}

#[test]
fn int8_files_in_a_directory_load_to_the_random_int8_weights() {
    let dir_tmp = write_model("ok", Faults::default());
    let dir = dir_tmp.path();
    let got = load_music_model(&dir.display().to_string()).unwrap();
    let (lm, depth) = tiny();
    let want = random_int8_model(lm, depth, 1.0).unwrap();
    let (g, w) = (linears(&got), linears(&want));
    assert_eq!(g, w, "every linear, int8 values, scales and groups");
    assert_eq!(g.iter().filter(|l| l.q8().is_some()).count(), 4 + 5);
    assert_eq!(got.lm.layers[0].gate_up.q8().map(|q| q.group), Some(16));
    assert_eq!(got.depth.layers[0].down.q8().map(|q| q.group), Some(16));
    assert_eq!(got.lm.embed_tokens, want.lm.embed_tokens);
    assert_eq!(got.lm.audio_head, want.lm.audio_head);
    // The bf16 names are preferred: a missing pair names them and the int8 fallback.
    let _ = std::fs::remove_file(dir.join(DEPTH_WEIGHTS_INT8));
    let e = load_err(dir);
    assert!(
        e.contains(DEPTH_WEIGHTS) && e.contains("_int8_convrot"),
        "{e}"
    );
}

#[test]
fn a_float_part_makes_its_fused_product_dense() {
    let dir_tmp = write_model(
        "mixed",
        Faults {
            dense: Some("layers.0.attn.to_k.weight"),
            ..Faults::default()
        },
    );
    let dir = dir_tmp.path();
    let got = load_music_model(&dir.display().to_string()).unwrap();
    let (lm, depth) = tiny();
    let want = random_int8_model(lm, depth, 1.0).unwrap();
    let qkv = got.depth.layers[0].qkv.dense().expect("fused q/k/v dense");
    assert!(got.depth.layers[0].to_out.q8().is_some());
    // Rows of to_k are the float weights as drawn; to_q's are the dequantized int8 ones.
    let h = 32;
    let src = RandomSource::new(&tiny().0, &tiny().1, RANDOM_MUSIC_SEED, 1.0);
    let to_k = src.load("layers.0.attn.to_k.weight").unwrap();
    assert_eq!(qkv.data[h * h..2 * h * h], to_k.data[..]);
    let q8_qkv = want.depth.layers[0].qkv.q8().unwrap().dequantize().unwrap();
    assert_eq!(qkv.data[..h * h], q8_qkv.data[..h * h]);
}

#[test]
fn broken_int8_entries_are_named() {
    let name = "model.layers.0.self_attn.o_proj.weight";
    let cases: [(&str, Faults<'_>, &[&str]); 3] = [
        (
            "dtype",
            Faults {
                float_weight: Some(name),
                ..Faults::default()
            },
            &[name, "I8", "F32"],
        ),
        (
            "scale",
            Faults {
                bad_scale: Some(name),
                ..Faults::default()
            },
            &["o_proj.weight_scale", "[32, 1]", "[32, 2]"],
        ),
        (
            "comfy",
            Faults {
                bad_comfy: Some(name),
                ..Faults::default()
            },
            &["o_proj.comfy_quant", "int4_blockwise"],
        ),
    ];
    for (what, faults, needles) in cases {
        let dir_tmp = write_model(what, faults);
        let dir = dir_tmp.path();
        let e = load_err(dir);
        assert!(needles.iter().all(|n| e.contains(n)), "{what}: {e}");
    }
}

#[test]
fn the_python_writers_files_load_like_random_small_int8() {
    let Some(dir) = std::env::var_os("CHORUS_MUSIC_INT8_DIR") else {
        eprintln!(
            "skipped: CHORUS_MUSIC_INT8_DIR is not set (tools/fixtures/music_int8.py --files DIR)"
        );
        return;
    };
    let spec = format!(
        "{},{}",
        Path::new(&dir).join(LM_WEIGHTS_INT8).display(),
        Path::new(&dir).join(DEPTH_WEIGHTS_INT8).display()
    );
    let got = load_music_model(&spec).unwrap();
    let want = load_music_model(chorus_music::load::RANDOM_SMALL_INT8_SPEC).unwrap();
    assert_eq!(got.lm_config.hidden_size, 256, "the files' config json");
    // Float tensors as written: f32 (bitwise), or bf16 (the drawn values rounded).
    let as_written = |g: &HostTensor, w: &HostTensor| {
        g.data == w.data
            || g.data
                .iter()
                .zip(&w.data)
                .all(|(&a, &b)| a == half::bf16::from_f32(b).to_f32())
    };
    let (g, w) = (linears(&got), linears(&want));
    assert_eq!(g.len(), w.len());
    for (i, (g, w)) in g.into_iter().zip(w).enumerate() {
        let ok = match (g, w) {
            (HostLinear::Q8(a), HostLinear::Q8(b)) => a == b,
            (HostLinear::Dense(a), HostLinear::Dense(b)) => as_written(a, b),
            _ => false,
        };
        assert!(ok, "linear {i} differs from random-small-int8");
    }
    assert!(as_written(&got.lm.embed_tokens, &want.lm.embed_tokens));
    assert!(as_written(
        &got.depth.audio_embeddings,
        &want.depth.audio_embeddings
    ));
    eprintln!("{spec}: every int8 linear bitwise equal to random-small-int8");
}
