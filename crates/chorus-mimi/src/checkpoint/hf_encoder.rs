//! The encoder side in the Hugging Face layout: the SEANet encoder plan, its tensor specs, and
//! the load into [`EncoderWeights`].
//!
//! Indices follow transformers `models/mimi/modeling_mimi.py` (`MimiEncoder`): conv, then per
//! ratio of `reversed(upsampling_ratios)` (resblocks, ELU, strided conv), then ELU, conv; then
//! `encoder_transformer`, `downsample` (kernel `2 * stride`, no bias, replicate padding) and the
//! quantizers' `input_proj`.

use chorus_core::{HostTensor, Result};

use super::hf_layout::{
    conv, rvq_halves, transformer_layer, transformer_specs, weight, ConvPlan, ResBlockPlan,
    TensorSpec,
};
use super::source::TensorSource;
use crate::config::MimiConfig;
use crate::weights::{ConvWeights, EncoderStageWeights, EncoderWeights, ResBlockWeights};

/// One encoder stage: residual blocks, then ELU and the strided conv.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderStagePlan {
    pub resblocks: Vec<ResBlockPlan>,
    pub down: ConvPlan,
}

/// The SEANet encoder's weighted modules, indexed as in `encoder.layers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderPlan {
    pub conv_in: ConvPlan,
    pub stages: Vec<EncoderStagePlan>,
    pub conv_out: ConvPlan,
}

/// Lays out `MimiEncoder.layers` as transformers builds it.
pub fn encoder_plan(c: &MimiConfig) -> EncoderPlan {
    let conv_in = ConvPlan {
        index: 0,
        c_in: c.audio_channels,
        c_out: c.num_filters,
        kernel: c.kernel_size,
        stride: 1,
    };
    let mut index = 1;
    let mut channels = c.num_filters;
    let mut stages = Vec::new();
    for &ratio in c.upsampling_ratios.iter().rev() {
        let mut resblocks = Vec::new();
        for j in 0..c.num_residual_layers {
            resblocks.push(ResBlockPlan {
                index,
                channels,
                hidden: channels / c.compress,
                kernel: c.residual_kernel_size,
                dilation: c.dilation_growth_rate.pow(j as u32),
            });
            index += 1;
        }
        // `index` is the ELU; the strided conv follows it.
        let down = ConvPlan {
            index: index + 1,
            c_in: channels,
            c_out: channels * 2,
            kernel: ratio * 2,
            stride: ratio,
        };
        index += 2;
        stages.push(EncoderStagePlan { resblocks, down });
        channels *= 2;
    }
    let conv_out = ConvPlan {
        index: index + 1,
        c_in: channels,
        c_out: c.hidden_size,
        kernel: c.last_kernel_size,
        stride: 1,
    };
    EncoderPlan {
        conv_in,
        stages,
        conv_out,
    }
}

/// The name of the encoder's first conv weight, whose presence marks a checkpoint with an encoder.
const FIRST_CONV: &str = "encoder.layers.0.conv";

/// True when `src` holds the encoder side (plain or weight-normed first conv).
pub fn has_encoder(src: &dyn TensorSource) -> bool {
    ["weight", "weight_v", "parametrizations.weight.original1"]
        .iter()
        .any(|suffix| src.contains(&format!("{FIRST_CONV}.{suffix}")))
}

/// Every HF-layout tensor the encoder side reads beyond the decoder's, with its shape, in a
/// fixed order (the order random weights are generated in).
pub fn encoder_tensor_specs(c: &MimiConfig) -> Vec<TensorSpec> {
    let mut specs = Vec::new();
    let mut push = |name: String, shape: Vec<usize>| specs.push(TensorSpec { name, shape });
    let plan = encoder_plan(c);
    let conv_spec = |p: &ConvPlan, push: &mut dyn FnMut(String, Vec<usize>)| {
        let base = format!("encoder.layers.{}.conv", p.index);
        push(format!("{base}.weight"), vec![p.c_out, p.c_in, p.kernel]);
        push(format!("{base}.bias"), vec![p.c_out]);
    };
    conv_spec(&plan.conv_in, &mut push);
    for stage in &plan.stages {
        for r in &stage.resblocks {
            let p = format!("encoder.layers.{}.block", r.index);
            push(
                format!("{p}.1.conv.weight"),
                vec![r.hidden, r.channels, r.kernel],
            );
            push(format!("{p}.1.conv.bias"), vec![r.hidden]);
            push(format!("{p}.3.conv.weight"), vec![r.channels, r.hidden, 1]);
            push(format!("{p}.3.conv.bias"), vec![r.channels]);
        }
        conv_spec(&stage.down, &mut push);
    }
    conv_spec(&plan.conv_out, &mut push);
    transformer_specs(c, "encoder_transformer", &mut push);
    let h = c.hidden_size;
    push(
        "downsample.conv.weight".into(),
        vec![h, h, 2 * c.frame_tokens()],
    );
    for (prefix, _) in rvq_halves(c) {
        push(
            format!("{prefix}.input_proj.weight"),
            vec![c.codebook_dim, h, 1],
        );
    }
    specs
}

fn plan_conv(src: &dyn TensorSource, p: &ConvPlan) -> Result<ConvWeights> {
    let name = format!("encoder.layers.{}.conv", p.index);
    conv(src, &name, [p.c_out, p.c_in, p.kernel], 1)
}

/// Builds the encoder weights from an HF-named source, validating every name and shape.
pub fn build_encoder(c: &MimiConfig, src: &dyn TensorSource) -> Result<EncoderWeights> {
    let plan = encoder_plan(c);
    let stages = plan
        .stages
        .iter()
        .map(|stage| {
            let resblocks = stage
                .resblocks
                .iter()
                .map(|r| {
                    let p = format!("encoder.layers.{}.block", r.index);
                    Ok(ResBlockWeights {
                        conv1: conv(
                            src,
                            &format!("{p}.1.conv"),
                            [r.hidden, r.channels, r.kernel],
                            r.dilation,
                        )?,
                        conv2: conv(src, &format!("{p}.3.conv"), [r.channels, r.hidden, 1], 1)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(EncoderStageWeights {
                resblocks,
                down: plan_conv(src, &stage.down)?,
                stride: stage.down.stride,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let transformer = (0..c.num_hidden_layers)
        .map(|l| transformer_layer(c, src, "encoder_transformer", l))
        .collect::<Result<Vec<_>>>()?;
    let h = c.hidden_size;
    let stride = c.frame_tokens();
    let downsample = ConvWeights {
        weight: weight(src, "downsample.conv", &[h, h, 2 * stride])?,
        bias: None,
        dilation: 1,
    };
    let [(sem, _), (aco, _)] = rvq_halves(c);
    let proj = |prefix: &str| -> Result<HostTensor> {
        weight(
            src,
            &format!("{prefix}.input_proj"),
            &[c.codebook_dim, h, 1],
        )?
        .reshape(vec![c.codebook_dim, h])
    };
    Ok(EncoderWeights {
        conv_in: plan_conv(src, &plan.conv_in)?,
        stages,
        conv_out: plan_conv(src, &plan.conv_out)?,
        transformer,
        downsample,
        downsample_stride: stride,
        semantic_input_proj: proj(sem)?,
        acoustic_input_proj: proj(aco)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_matches_transformers_indices() {
        let p = encoder_plan(&MimiConfig::default());
        let downs: Vec<(usize, usize, usize, usize)> = p
            .stages
            .iter()
            .map(|s| (s.down.index, s.down.c_in, s.down.kernel, s.down.stride))
            .collect();
        assert_eq!(
            downs,
            vec![
                (3, 64, 8, 4),
                (6, 128, 10, 5),
                (9, 256, 12, 6),
                (12, 512, 16, 8)
            ]
        );
        assert_eq!(p.stages[0].resblocks[0].index, 1);
        assert_eq!(
            (p.conv_out.index, p.conv_out.c_in, p.conv_out.c_out),
            (14, 1024, 512)
        );
    }
}
