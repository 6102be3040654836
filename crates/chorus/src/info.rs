//! `chorus info`: configuration, layout, parameters and state size of a model.

use anyhow::Result;
use chorus_core::Buckets;
use chorus_runtime::device::{open_decoder, DecoderSpec, DeviceKind};

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    #[arg(long, default_value = "kyutai/mimi")]
    pub model: String,
    /// Describe `--model` as a music semantic model (implied for `random-small`, music folders
    /// and `LM,DEPTH` pairs; needed for `random`).
    #[arg(long)]
    pub music: bool,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
}

pub fn run(args: InfoArgs) -> Result<()> {
    if args.music || is_music_spec(&args.model) {
        return run_music(&args.model);
    }
    let model = crate::load(&args.model)?;
    let c = &model.config;
    println!("model:        {}", model.source);
    println!("layout:       {:?}", model.layout);
    println!("parameters:   {} (decoder side)", model.parameter_count);
    println!(
        "encoder:      {}",
        if model.weights.encoder.is_some() {
            "present (chorus encode, bench --encode, encode streams)"
        } else {
            "none in this checkpoint: decode only"
        }
    );
    println!(
        "codec:        {} Hz, {} frames/s, {} samples per frame",
        c.sampling_rate,
        c.frame_rate,
        c.frame_samples()
    );
    println!(
        "quantizer:    {} codebooks ({} semantic) x {} entries x {} dims",
        c.num_quantizers, c.num_semantic_quantizers, c.codebook_size, c.codebook_dim
    );
    println!(
        "transformer:  {} layers, hidden {}, {} heads x {}, MLP {}, window {}, rope theta {}",
        c.num_hidden_layers,
        c.hidden_size,
        c.num_attention_heads,
        c.head_dim(),
        c.intermediate_size,
        c.sliding_window,
        c.rope_theta()
    );
    println!(
        "seanet:       filters {}, ratios {:?}, kernel {}, last kernel {}, residual kernel {}",
        c.num_filters,
        c.upsampling_ratios,
        c.kernel_size,
        c.last_kernel_size,
        c.residual_kernel_size
    );
    let spec = DecoderSpec {
        device: args.device,
        precision: None,
        max_slots: 1,
        buckets: Buckets::new(&[1])?,
        threads: None,
        chunk_frames: 1,
    };
    let dec = open_decoder(&model, &spec)?;
    let s = dec.state_bytes();
    println!(
        "state/slot:   {} bytes on {} (conv {}, kv {}, index {})",
        s.total(),
        dec.describe(),
        s.conv,
        s.kv,
        s.index
    );
    Ok(())
}

/// True when `spec` names a music semantic model rather than a Mimi codec.
pub fn is_music_spec(spec: &str) -> bool {
    (chorus_music::load::is_random_spec(spec) && spec != chorus_music::load::RANDOM_SPEC)
        || spec.contains(',')
        || chorus_music::load::resolve(spec).is_ok_and(|_| !spec.ends_with(".safetensors"))
}

/// `chorus info` for the music semantic stage: both configs, sizes, KV cost; no weights read.
pub fn run_music(spec: &str) -> Result<()> {
    use chorus_music::load::{describe, host_bytes};
    let (lm, depth, source) = if spec == chorus_music::load::RANDOM_SPEC {
        (
            chorus_music::Qwen3Config::music3(),
            chorus_music::DepthConfig::music3(),
            "random weights".into(),
        )
    } else {
        describe(spec)?
    };
    let params = chorus_music::weights::parameter_count(&lm, &depth);
    let lm_params: usize = chorus_music::weights::lm_tensor_specs(&lm)
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum();
    let kv_per_pos = 2 * lm.num_hidden_layers * lm.num_key_value_heads * lm.head_dim;
    println!("model:        MiniMax Music 3 semantic stage ({source})");
    println!(
        "parameters:   {params} ({lm_params} LM, {} depth decoder), {:.2} GB in bf16",
        params - lm_params,
        params as f64 * 2.0 / 1e9
    );
    println!(
        "lm:           Qwen3, {} layers, hidden {}, {} q heads / {} kv heads x {}, MLP {}, vocab {}, rope theta {}",
        lm.num_hidden_layers, lm.hidden_size, lm.num_attention_heads, lm.num_key_value_heads, lm.head_dim, lm.intermediate_size, lm.vocab_size, lm.theta()
    );
    println!(
        "depth:        {} layers, hidden {}, {} heads, MLP {}, {} codebooks x {}",
        depth.num_layers,
        depth.hidden_size,
        depth.num_attention_heads,
        depth.intermediate_size,
        depth.num_codebooks,
        depth.audio_vocab_size
    );
    println!(
        "frame:        8 codes + frame_hiddens [{}] per frame, 25 frames/s",
        depth.num_codebooks * lm.hidden_size
    );
    println!(
        "kv/position:  {} elements per row ({} bytes per song in bf16, both rows)",
        kv_per_pos,
        2 * kv_per_pos * 2
    );
    println!(
        "host f32:     {:.2} GB after fusion (LM head cut to its audio rows); {:.2} GB with int8 ConvRot linears",
        host_bytes(&lm, &depth) as f64 / 1e9,
        chorus_music::load::host_bytes_int8(&lm, &depth) as f64 / 1e9
    );
    Ok(())
}
