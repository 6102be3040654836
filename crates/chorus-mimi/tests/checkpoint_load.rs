//! Checkpoint loading: writer round trips, both layouts, weight-norm folding, config override,
//! and a named error for every bad input.

use std::io::Write;
use std::path::{Path, PathBuf};

use chorus_core::{Error, HostTensor};
use chorus_mimi::checkpoint::hf_layout::{fold_weight_norm, tensor};
use chorus_mimi::checkpoint::kyutai_layout::{
    hf_to_kyutai_name, hf_to_kyutai_tensors, kyutai_to_hf_name,
};
use chorus_mimi::checkpoint::source::TensorSource;
use chorus_mimi::checkpoint::{
    load_file, load_model, write_safetensors, Dtype, Layout, LoadedModel, SafetensorsFile,
};
use chorus_mimi::random::{random_model, random_model_in_layout, random_tensors};
use chorus_mimi::{MimiConfig, MimiWeights};

const SEED: u64 = 7;

/// A small configuration that still validates (1920 samples per frame).
fn small() -> MimiConfig {
    MimiConfig {
        hidden_size: 64,
        num_filters: 8,
        codebook_size: 16,
        codebook_dim: 8,
        num_quantizers: 4,
        upsample_groups: 64,
        num_hidden_layers: 2,
        intermediate_size: 128,
        num_attention_heads: 4,
        num_key_value_heads: 4,
        ..MimiConfig::default()
    }
}

/// The same configuration as a transformers-style config.json.
const SMALL_JSON: &str = r#"{"model_type": "mimi", "hidden_size": 64, "num_filters": 8,
 "codebook_size": 16, "codebook_dim": 8, "num_quantizers": 4, "upsample_groups": 64,
 "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4,
 "num_key_value_heads": 4}"#;

/// A fresh directory, removed when the test ends.
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("chorus-checkpoint-")
        .tempdir()
        .unwrap()
}

fn all_tensors(w: &MimiWeights) -> Vec<(String, &HostTensor)> {
    let mut out = Vec::new();
    for (half, r) in [("semantic", &w.semantic), ("acoustic", &w.acoustic)] {
        for (i, t) in r.codebooks.iter().enumerate() {
            out.push((format!("{half}.codebook.{i}"), t));
        }
        out.push((format!("{half}.output_proj"), &r.output_proj));
    }
    out.push(("upsample".into(), &w.upsample.weight));
    for (l, t) in w.transformer.iter().enumerate() {
        for (n, x) in [
            ("ln1.w", &t.input_layernorm_weight),
            ("ln1.b", &t.input_layernorm_bias),
            ("q", &t.q_proj),
            ("k", &t.k_proj),
            ("v", &t.v_proj),
            ("o", &t.o_proj),
            ("ls1", &t.self_attn_layer_scale),
            ("ln2.w", &t.post_attention_layernorm_weight),
            ("ln2.b", &t.post_attention_layernorm_bias),
            ("fc1", &t.fc1),
            ("fc2", &t.fc2),
            ("ls2", &t.mlp_layer_scale),
        ] {
            out.push((format!("layer{l}.{n}"), x));
        }
    }
    let d = &w.decoder;
    out.push(("conv_in".into(), &d.conv_in.weight));
    out.push(("conv_out".into(), &d.conv_out.weight));
    for (s, st) in d.stages.iter().enumerate() {
        out.push((format!("stage{s}.convtr"), &st.convtr.weight));
        for r in &st.resblocks {
            out.push((format!("stage{s}.res.conv1"), &r.conv1.weight));
            out.push((
                format!("stage{s}.res.conv2.bias"),
                r.conv2.bias.as_ref().unwrap(),
            ));
        }
    }
    out
}

fn assert_same_weights(a: &MimiWeights, b: &MimiWeights) {
    let (ta, tb) = (all_tensors(a), all_tensors(b));
    assert_eq!(ta.len(), tb.len());
    for ((name, x), (_, y)) in ta.iter().zip(&tb) {
        assert_eq!(x.shape, y.shape, "{name}");
        assert!(x.data == y.data, "{name} differs");
    }
}

fn write_hf(dir: &Path, tensors: &[(String, HostTensor)], dtype: Dtype) -> PathBuf {
    let path = dir.join("model.safetensors");
    write_safetensors(&path, tensors, dtype).unwrap();
    path
}

/// Writes a safetensors file from raw entries (name, dtype string, shape, bytes).
fn write_raw(path: &Path, entries: &[(&str, &str, Vec<usize>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, dtype, shape, bytes) in entries {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
        );
        offset += bytes.len();
    }
    let json = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&json).unwrap();
    for (_, _, _, bytes) in entries {
        f.write_all(bytes).unwrap();
    }
}

fn f32_bytes(t: &HostTensor) -> Vec<u8> {
    t.data.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn load_small(path: &Path) -> chorus_core::Result<LoadedModel> {
    load_file(path, small())
}

#[test]
fn writer_round_trips_in_every_dtype() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let tensors = random_tensors(&small(), SEED, Layout::HuggingFace);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let path = dir.join(format!("{dtype:?}.safetensors"));
        write_safetensors(&path, &tensors, dtype).unwrap();
        let file = SafetensorsFile::open(&path).unwrap();
        assert_eq!(file.names().len(), tensors.len());
        for (name, t) in &tensors {
            let back = file.load(name).unwrap();
            assert_eq!(back.shape, t.shape, "{name}");
            for (&x, &y) in t.data.iter().zip(&back.data) {
                let expected = match dtype {
                    Dtype::F32 => x,
                    Dtype::F16 => half::f16::from_f32(x).to_f32(),
                    Dtype::BF16 => half::bf16::from_f32(x).to_f32(),
                };
                assert_eq!(expected.to_bits(), y.to_bits(), "{name} in {dtype:?}");
            }
        }
        // Reduced precision really was stored: some values changed.
        if dtype != Dtype::F32 {
            let (name, t) = &tensors[0];
            assert_ne!(file.load(name).unwrap().data, t.data, "{dtype:?}");
        }
    }
}

#[test]
fn hf_file_loads_like_the_in_memory_random_model() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = write_hf(
        dir,
        &random_tensors(&small(), SEED, Layout::HuggingFace),
        Dtype::F32,
    );
    let loaded = load_small(&path).unwrap();
    let random = random_model(&small(), SEED).unwrap();
    assert_eq!(loaded.layout, Layout::HuggingFace);
    assert!(!loaded.is_random());
    assert!(random.is_random());
    assert!(random.source.contains("noise"), "{}", random.source);
    assert_eq!(loaded.parameter_count, random.parameter_count);
    assert_same_weights(&loaded.weights, &random.weights);
    assert_eq!(loaded.weights.semantic.codebooks.len(), 1);
    assert_eq!(loaded.weights.acoustic.codebooks.len(), 3);
}

#[test]
fn bf16_file_loads_to_rounded_weights() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let tensors = random_tensors(&small(), SEED, Layout::HuggingFace);
    let path = write_hf(dir, &tensors, Dtype::BF16);
    let m = load_small(&path).unwrap();
    let fc1 = &m.weights.transformer[1].fc1;
    let raw = &tensors
        .iter()
        .find(|(n, _)| n == "decoder_transformer.layers.1.mlp.fc1.weight")
        .unwrap()
        .1;
    let rounded: Vec<f32> = raw
        .data
        .iter()
        .map(|&x| half::bf16::from_f32(x).to_f32())
        .collect();
    assert_eq!(fc1.data, rounded);
}

#[test]
fn codebooks_are_divided_by_clamped_usage() {
    let c = small();
    let mut tensors = random_tensors(&c, SEED, Layout::HuggingFace);
    let usage_name = "quantizer.acoustic_residual_vector_quantizer.layers.1.codebook.cluster_usage";
    let usage = &mut tensors.iter_mut().find(|(n, _)| n == usage_name).unwrap().1;
    usage.data[0] = 0.0; // clamped to 1e-5
    usage.data[1] = 4.0;
    let sum_name = "quantizer.acoustic_residual_vector_quantizer.layers.1.codebook.embed_sum";
    let sum = tensors
        .iter()
        .find(|(n, _)| n == sum_name)
        .unwrap()
        .1
        .clone();
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let m = load_small(&write_hf(dir, &tensors, Dtype::F32)).unwrap();
    let table = &m.weights.acoustic.codebooks[1];
    let d = c.codebook_dim;
    for j in 0..d {
        assert_eq!(table.data[j], sum.data[j] / 1e-5);
        assert_eq!(table.data[d + j], sum.data[d + j] / 4.0);
    }
}

#[test]
fn kyutai_file_converted_from_hf_loads_to_the_same_weights() {
    let c = small();
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let hf = random_tensors(&c, SEED, Layout::HuggingFace);
    let hf_path = write_hf(dir, &hf, Dtype::F32);
    let kyutai = hf_to_kyutai_tensors(&c, hf).unwrap();
    assert!(kyutai
        .iter()
        .any(|(n, _)| n == "decoder_transformer.transformer.layers.0.self_attn.in_proj_weight"));
    assert!(kyutai
        .iter()
        .any(|(n, _)| n == "quantizer.rvq_first.vq.layers.0._codebook.embedding_sum"));
    assert!(kyutai
        .iter()
        .any(|(n, _)| n == "decoder.model.2.convtr.convtr.weight"));
    assert!(kyutai
        .iter()
        .any(|(n, _)| n == "decoder.model.3.block.1.conv.conv.weight"));
    assert!(kyutai
        .iter()
        .any(|(n, _)| n == "upsample.convtr.convtr.convtr.weight"));
    let ky_path = dir.join("tokenizer-test.safetensors");
    write_safetensors(&ky_path, &kyutai, Dtype::F32).unwrap();
    let a = load_small(&hf_path).unwrap();
    let b = load_small(&ky_path).unwrap();
    assert_eq!(b.layout, Layout::Kyutai);
    assert_same_weights(&a.weights, &b.weights);
}

#[test]
fn kyutai_in_proj_is_split_and_rows_moved_to_rotate_half() {
    let c = small();
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let tensors = random_tensors(&c, SEED, Layout::Kyutai);
    let in_proj = tensors
        .iter()
        .find(|(n, _)| n == "decoder_transformer.transformer.layers.1.self_attn.in_proj_weight")
        .unwrap()
        .1
        .clone();
    let path = dir.join("tokenizer-native.safetensors");
    write_safetensors(&path, &tensors, Dtype::F32).unwrap();
    let m = load_small(&path).unwrap();
    let layer = &m.weights.transformer[1];
    let h = c.hidden_size;
    let d = c.head_dim();
    let row = |t: &HostTensor, r: usize| t.data[r * h..(r + 1) * h].to_vec();
    for head in 0..c.num_attention_heads {
        for i in 0..d / 2 {
            for j in 0..2 {
                let hf_row = head * d + j * (d / 2) + i;
                let orig_row = head * d + 2 * i + j;
                assert_eq!(row(&layer.q_proj, hf_row), row(&in_proj, orig_row));
                assert_eq!(row(&layer.k_proj, hf_row), row(&in_proj, h + orig_row));
            }
        }
    }
    for r in 0..h {
        assert_eq!(row(&layer.v_proj, r), row(&in_proj, 2 * h + r));
    }
}

#[test]
fn name_conversion_round_trips_on_every_decoder_name() {
    let c = small();
    for (name, _) in random_tensors(&c, SEED, Layout::HuggingFace) {
        if name.ends_with("_proj.weight") && name.contains("self_attn") && !name.contains("o_proj")
        {
            continue;
        }
        let kyutai = hf_to_kyutai_name(&c, &name);
        assert_ne!(kyutai, name);
        assert_eq!(kyutai_to_hf_name(&kyutai), name, "{kyutai}");
    }
}

#[test]
fn weight_norm_folds_a_hand_computed_example() {
    let g = HostTensor::new(vec![2, 1, 1], vec![2.0, 3.0]).unwrap();
    let v = HostTensor::new(vec![2, 1, 2], vec![3.0, 4.0, 0.0, -5.0]).unwrap();
    let w = fold_weight_norm(&g, v);
    assert_eq!(w.shape, vec![2, 1, 2]);
    let expected = [1.2f32, 1.6, 0.0, -3.0];
    for (a, b) in w.data.iter().zip(expected) {
        assert!((a - b).abs() < 1e-6, "{:?}", w.data);
    }
}

#[test]
fn weight_norm_pairs_in_the_file_are_folded() {
    let c = small();
    let mut tensors = random_tensors(&c, SEED, Layout::HuggingFace);
    let plain = random_model(&c, SEED).unwrap();
    // Store two convs as weight-norm pairs whose fold is the original weight: v = 2 w, g = |w|.
    for (base, style) in [
        ("decoder.layers.0.conv", ("weight_g", "weight_v")),
        (
            "decoder.layers.5.conv",
            (
                "parametrizations.weight.original0",
                "parametrizations.weight.original1",
            ),
        ),
    ] {
        let name = format!("{base}.weight");
        let pos = tensors.iter().position(|(n, _)| *n == name).unwrap();
        let (_, w) = tensors.remove(pos);
        let rows = w.shape[0];
        let row_len = w.len() / rows;
        let norms: Vec<f32> = w
            .data
            .chunks(row_len)
            .map(|r| r.iter().map(|x| x * x).sum::<f32>().sqrt())
            .collect();
        let mut g_shape = vec![1; w.shape.len()];
        g_shape[0] = rows;
        let v = HostTensor::new(w.shape.clone(), w.data.iter().map(|x| 2.0 * x).collect()).unwrap();
        tensors.push((
            format!("{base}.{}", style.0),
            HostTensor::new(g_shape, norms).unwrap(),
        ));
        tensors.push((format!("{base}.{}", style.1), v));
    }
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let m = load_small(&write_hf(dir, &tensors, Dtype::F32)).unwrap();
    for (a, b) in [
        (
            &m.weights.decoder.conv_in.weight,
            &plain.weights.decoder.conv_in.weight,
        ),
        (
            &m.weights.decoder.stages[1].convtr.weight,
            &plain.weights.decoder.stages[1].convtr.weight,
        ),
    ] {
        assert_eq!(a.shape, b.shape);
        let err = a
            .data
            .iter()
            .zip(&b.data)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(err < 1e-5, "max error {err}");
    }
}

#[test]
fn config_json_beside_the_file_overrides_the_defaults() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = write_hf(
        dir,
        &random_tensors(&small(), SEED, Layout::HuggingFace),
        Dtype::F32,
    );
    // Without a config the kyutai/mimi defaults apply and the small tensors do not fit them.
    let err = load_model(path.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    std::fs::write(dir.join("config.json"), SMALL_JSON).unwrap();
    let m = load_model(path.to_str().unwrap()).unwrap();
    assert_eq!(m.config.hidden_size, 64);
    assert_eq!(m.config.num_quantizers, 4);
    // A directory resolves to its model.safetensors and config.json too.
    let d = load_model(dir.to_str().unwrap()).unwrap();
    assert_eq!(d.config, m.config);
    assert_same_weights(&d.weights, &m.weights);
}

#[test]
fn directory_with_one_tokenizer_file_loads_it() {
    let c = small();
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = dir.join("tokenizer-e351c8d8-checkpoint125.safetensors");
    write_safetensors(
        &path,
        &random_tensors(&c, SEED, Layout::Kyutai),
        Dtype::BF16,
    )
    .unwrap();
    std::fs::write(dir.join("config.json"), SMALL_JSON).unwrap();
    let m = load_model(dir.to_str().unwrap()).unwrap();
    assert_eq!(m.layout, Layout::Kyutai);
    assert!(
        m.source
            .ends_with("tokenizer-e351c8d8-checkpoint125.safetensors"),
        "{}",
        m.source
    );
}

#[test]
fn a_decoder_only_checkpoint_loads_without_an_encoder() {
    let c = small();
    let tensors: Vec<_> = random_tensors(&c, SEED, Layout::HuggingFace)
        .into_iter()
        .filter(|(n, _)| {
            !(n.starts_with("encoder") || n.starts_with("downsample") || n.contains("input_proj"))
        })
        .collect();
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let m = load_small(&write_hf(dir, &tensors, Dtype::F32)).unwrap();
    assert!(m.weights.encoder.is_none());
    assert_eq!(
        m.parameter_count,
        random_model(&c, SEED).unwrap().parameter_count
    );
    let e = chorus_mimi::encoder::prepare::encoder_of(&m.weights)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no encoder"), "{e}");
}

#[test]
fn a_malformed_encoder_tensor_is_named() {
    let c = small();
    let mut tensors = random_tensors(&c, SEED, Layout::HuggingFace);
    for (name, t) in &mut tensors {
        if name == "downsample.conv.weight" {
            *t = HostTensor::zeros(vec![2, 2, 4]);
        }
    }
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let e = load_small(&write_hf(dir, &tensors, Dtype::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("downsample.conv.weight"), "{e}");
}

#[test]
fn truncated_file_is_a_format_error() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = write_hf(
        dir,
        &random_tensors(&small(), SEED, Layout::HuggingFace),
        Dtype::F32,
    );
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let err = load_small(&path).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");
    // Cut inside the header.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(40)
        .unwrap();
    let err = load_small(&path).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
}

#[test]
fn bad_json_header_is_a_format_error() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = dir.join("bad.safetensors");
    let body = b"{\"decoder.layers.0.conv.bias\": [";
    let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(body);
    std::fs::write(&path, bytes).unwrap();
    let err = load_small(&path).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert!(err.to_string().contains("JSON"), "{err}");
}

#[test]
fn unsupported_dtype_names_the_tensor() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = dir.join("model.safetensors");
    let tensors = random_tensors(&small(), SEED, Layout::HuggingFace);
    let target = "decoder.layers.14.conv.bias";
    let entries: Vec<(&str, &str, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, t)| {
            if n == target {
                (n.as_str(), "I64", t.shape.clone(), vec![0u8; 8 * t.len()])
            } else {
                (n.as_str(), "F32", t.shape.clone(), f32_bytes(t))
            }
        })
        .collect();
    write_raw(&path, &entries);
    let err = load_small(&path).unwrap_err();
    match &err {
        Error::Dtype { name, found, .. } => {
            assert_eq!(name, target);
            assert_eq!(found, "I64");
        }
        other => panic!("expected a dtype error, got {other}"),
    }
    assert!(err.to_string().contains("F32, F16, BF16"), "{err}");
}

#[test]
fn missing_tensor_is_named() {
    let mut tensors = random_tensors(&small(), SEED, Layout::HuggingFace);
    let target = "decoder_transformer.layers.1.mlp.fc2.weight";
    tensors.retain(|(n, _)| n != target);
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let err = load_small(&write_hf(dir, &tensors, Dtype::F32)).unwrap_err();
    match &err {
        Error::MissingTensor {
            name, source_name, ..
        } => {
            assert_eq!(name, target);
            assert!(source_name.ends_with("model.safetensors"), "{source_name}");
        }
        other => panic!("expected a missing-tensor error, got {other}"),
    }
}

#[test]
fn missing_kyutai_tensor_is_named_by_its_hf_name() {
    let c = small();
    let mut tensors = random_tensors(&c, SEED, Layout::Kyutai);
    tensors
        .retain(|(n, _)| n != "decoder_transformer.transformer.layers.0.self_attn.in_proj_weight");
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = dir.join("tokenizer-x.safetensors");
    write_safetensors(&path, &tensors, Dtype::F32).unwrap();
    let err = load_small(&path).unwrap_err();
    assert!(matches!(err, Error::MissingTensor { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("decoder_transformer.layers.0.self_attn.q_proj.weight"),
        "{err}"
    );
}

#[test]
fn wrong_shape_names_tensor_and_both_shapes() {
    let mut tensors = random_tensors(&small(), SEED, Layout::HuggingFace);
    let t = &mut tensors
        .iter_mut()
        .find(|(n, _)| n == "upsample.conv.weight")
        .unwrap()
        .1;
    *t = HostTensor::zeros(vec![64, 1, 3]);
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let err = load_small(&write_hf(dir, &tensors, Dtype::F32)).unwrap_err();
    match &err {
        Error::Shape {
            name,
            expected,
            found,
            ..
        } => {
            assert_eq!(name, "upsample.conv.weight");
            assert_eq!(expected, &vec![64, 1, 4]);
            assert_eq!(found, &vec![64, 1, 3]);
        }
        other => panic!("expected a shape error, got {other}"),
    }
}

#[test]
fn unknown_layout_lists_names_found() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = dir.join("other.safetensors");
    let t = HostTensor::zeros(vec![2]);
    write_safetensors(
        &path,
        &[("foo.bar".into(), t.clone()), ("baz.weight".into(), t)],
        Dtype::F32,
    )
    .unwrap();
    let err = load_small(&path).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("unknown checkpoint layout") && msg.contains("foo.bar"),
        "{msg}"
    );
}

#[test]
fn missing_local_path_is_an_io_error() {
    let dir_tmp = temp_dir();
    let missing = dir_tmp.path().join("nowhere").join("model.safetensors");
    let err = load_model(missing.to_str().unwrap()).unwrap_err();
    match &err {
        Error::Io { source, path, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            assert!(path.contains("nowhere"));
        }
        other => panic!("expected an io error, got {other}"),
    }
}

#[test]
fn shape_check_happens_before_reading() {
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = write_hf(
        dir,
        &random_tensors(&small(), SEED, Layout::HuggingFace),
        Dtype::F32,
    );
    let file = SafetensorsFile::open(&path).unwrap();
    let err = tensor(&file, "decoder.layers.14.conv.bias", &[2]).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    assert_eq!(
        tensor(&file, "decoder.layers.14.conv.bias", &[1])
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn random_kyutai_model_equals_loading_its_file() {
    let c = small();
    let dir_tmp = temp_dir();
    let dir = dir_tmp.path();
    let path = dir.join("tokenizer-random.safetensors");
    write_safetensors(&path, &random_tensors(&c, SEED, Layout::Kyutai), Dtype::F32).unwrap();
    let from_file = load_small(&path).unwrap();
    let in_memory = random_model_in_layout(&c, SEED, Layout::Kyutai).unwrap();
    assert!(in_memory.is_random());
    assert_same_weights(&from_file.weights, &in_memory.weights);
    // The two layouts are drawn under different names: different weights.
    let hf = random_model(&c, SEED).unwrap();
    assert_ne!(
        hf.weights.transformer[0].q_proj,
        in_memory.weights.transformer[0].q_proj
    );
}
