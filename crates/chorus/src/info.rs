//! `chorus info`: configuration, layout, parameters and state size of a model.

use crate::device::{open_decoder, DecoderSpec, DeviceKind};
use anyhow::Result;
use chorus_core::Buckets;

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    #[arg(long, default_value = "kyutai/mimi")]
    pub model: String,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
}

pub fn run(args: InfoArgs) -> Result<()> {
    let model = crate::load(&args.model)?;
    let c = &model.config;
    println!("model:        {}", model.source);
    println!("layout:       {:?}", model.layout);
    println!("parameters:   {} (decoder side)", model.parameter_count);
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
