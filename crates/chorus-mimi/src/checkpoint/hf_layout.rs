//! Hugging Face layout -> [`MimiWeights`]: name lookup, shape checks, weight-norm folding and
//! codebook normalisation. Every other layout is renamed into this one first.
//!
//! Names and shapes follow transformers `models/mimi/modeling_mimi.py` (`MimiDecoder`,
//! `MimiResnetBlock`, `MimiTransformerLayer`, `MimiSplitResidualVectorQuantizer`).

use chorus_core::{Error, HostTensor, Result};

use super::source::TensorSource;
use crate::config::MimiConfig;
use crate::weights::{
    ConvTrWeights, ConvWeights, MimiWeights, ResBlockWeights, RvqWeights, SeanetWeights,
    StageWeights, TransformerLayerWeights,
};

const OP: &str = "load_hf_layout";
/// Floor of a codebook's cluster usage (`MimiEuclideanCodebook.epsilon`).
pub const CODEBOOK_EPSILON: f32 = 1e-5;
/// Prefixes of the two quantizer halves.
pub const SEMANTIC_RVQ: &str = "quantizer.semantic_residual_vector_quantizer";
pub const ACOUSTIC_RVQ: &str = "quantizer.acoustic_residual_vector_quantizer";

/// One tensor the decoder side reads: its HF name (a weight-norm base for `.weight` tensors
/// that may be stored as a `g`/`v` pair) and its expected shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

/// One convolution of `MimiDecoder.layers`: its index there and its geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvPlan {
    pub index: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    /// 1 for convolutions, the upsampling ratio for transposed convolutions.
    pub stride: usize,
}

/// One residual block: conv `kernel` (channels -> hidden, `dilation`), conv 1 (hidden -> channels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResBlockPlan {
    pub index: usize,
    pub channels: usize,
    pub hidden: usize,
    pub kernel: usize,
    pub dilation: usize,
}

/// One upsampling stage: ELU, transposed conv, residual blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePlan {
    pub convtr: ConvPlan,
    pub resblocks: Vec<ResBlockPlan>,
}

/// The SEANet decoder's weighted modules, indexed as in `decoder.layers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeanetPlan {
    pub conv_in: ConvPlan,
    pub stages: Vec<StagePlan>,
    pub conv_out: ConvPlan,
}

/// Lays out `MimiDecoder.layers` as transformers builds it: conv, then per ratio
/// (ELU, convtr, resblocks...), then ELU, conv.
pub fn seanet_plan(c: &MimiConfig) -> SeanetPlan {
    let mut scale = 1usize << c.upsampling_ratios.len();
    let conv_in = ConvPlan {
        index: 0,
        c_in: c.hidden_size,
        c_out: scale * c.num_filters,
        kernel: c.kernel_size,
        stride: 1,
    };
    let mut index = 1;
    let mut stages = Vec::new();
    for &ratio in &c.upsampling_ratios {
        let c_in = scale * c.num_filters;
        let c_out = c_in / 2;
        // `index` is the ELU; the transposed conv follows it.
        let convtr = ConvPlan {
            index: index + 1,
            c_in,
            c_out,
            kernel: ratio * 2,
            stride: ratio,
        };
        index += 2;
        let mut resblocks = Vec::new();
        for j in 0..c.num_residual_layers {
            resblocks.push(ResBlockPlan {
                index,
                channels: c_out,
                hidden: c_out / c.compress,
                kernel: c.residual_kernel_size,
                dilation: c.dilation_growth_rate.pow(j as u32),
            });
            index += 1;
        }
        stages.push(StagePlan { convtr, resblocks });
        scale /= 2;
    }
    // `index` is the final ELU; the conv follows it.
    let conv_out = ConvPlan {
        index: index + 1,
        c_in: c.num_filters,
        c_out: c.audio_channels,
        kernel: c.last_kernel_size,
        stride: 1,
    };
    SeanetPlan {
        conv_in,
        stages,
        conv_out,
    }
}

/// Every HF-layout tensor the decoder side reads, with its shape, in a fixed order (the order
/// random weights are generated in). Weights that may be weight-normed are listed as `X.weight`.
pub fn decoder_tensor_specs(c: &MimiConfig) -> Vec<TensorSpec> {
    let mut specs = Vec::new();
    let mut push = |name: String, shape: Vec<usize>| specs.push(TensorSpec { name, shape });
    let (h, d, k) = (c.hidden_size, c.codebook_dim, c.codebook_size);
    for (prefix, count) in rvq_halves(c) {
        for i in 0..count {
            push(
                format!("{prefix}.layers.{i}.codebook.embed_sum"),
                vec![k, d],
            );
            push(
                format!("{prefix}.layers.{i}.codebook.cluster_usage"),
                vec![k],
            );
        }
        push(format!("{prefix}.output_proj.weight"), vec![h, d, 1]);
    }
    push(
        "upsample.conv.weight".into(),
        vec![h, h / c.upsample_groups, 2 * c.compress],
    );
    transformer_specs(c, "decoder_transformer", &mut push);
    let plan = seanet_plan(c);
    let mut conv = |p: String, weight: Vec<usize>, c_out: usize| {
        push(format!("{p}.weight"), weight);
        push(format!("{p}.bias"), vec![c_out]);
    };
    let ConvPlan {
        index: i,
        c_in,
        c_out,
        kernel,
        ..
    } = plan.conv_in;
    conv(
        format!("decoder.layers.{i}.conv"),
        vec![c_out, c_in, kernel],
        c_out,
    );
    for stage in &plan.stages {
        let ConvPlan {
            index: i,
            c_in,
            c_out,
            kernel,
            ..
        } = stage.convtr;
        conv(
            format!("decoder.layers.{i}.conv"),
            vec![c_in, c_out, kernel],
            c_out,
        );
        for &ResBlockPlan {
            index: i,
            channels: ch,
            hidden,
            kernel,
            ..
        } in &stage.resblocks
        {
            conv(
                format!("decoder.layers.{i}.block.1.conv"),
                vec![hidden, ch, kernel],
                hidden,
            );
            conv(
                format!("decoder.layers.{i}.block.3.conv"),
                vec![ch, hidden, 1],
                ch,
            );
        }
    }
    let ConvPlan {
        index: i,
        c_in,
        c_out,
        kernel,
        ..
    } = plan.conv_out;
    conv(
        format!("decoder.layers.{i}.conv"),
        vec![c_out, c_in, kernel],
        c_out,
    );
    specs
}

/// Pushes the tensors of every layer of the transformer under `prefix` (`decoder_transformer`,
/// `encoder_transformer`).
pub fn transformer_specs(c: &MimiConfig, prefix: &str, push: &mut impl FnMut(String, Vec<usize>)) {
    let h = c.hidden_size;
    for l in 0..c.num_hidden_layers {
        let p = format!("{prefix}.layers.{l}");
        push(format!("{p}.input_layernorm.weight"), vec![h]);
        push(format!("{p}.input_layernorm.bias"), vec![h]);
        for proj in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            push(format!("{p}.self_attn.{proj}.weight"), vec![h, h]);
        }
        push(format!("{p}.self_attn_layer_scale.scale"), vec![h]);
        push(format!("{p}.post_attention_layernorm.weight"), vec![h]);
        push(format!("{p}.post_attention_layernorm.bias"), vec![h]);
        push(format!("{p}.mlp.fc1.weight"), vec![c.intermediate_size, h]);
        push(format!("{p}.mlp.fc2.weight"), vec![h, c.intermediate_size]);
        push(format!("{p}.mlp_layer_scale.scale"), vec![h]);
    }
}

/// The two quantizer halves with their codebook counts.
pub fn rvq_halves(c: &MimiConfig) -> [(&'static str, usize); 2] {
    [
        (SEMANTIC_RVQ, c.num_semantic_quantizers),
        (ACOUSTIC_RVQ, c.num_quantizers - c.num_semantic_quantizers),
    ]
}

/// Loads `name`, checking its shape before reading any data.
pub fn tensor(src: &dyn TensorSource, name: &str, expected: &[usize]) -> Result<HostTensor> {
    match src.shape(name) {
        None => Err(missing(src, name)),
        Some(found) if found != expected => Err(Error::Shape {
            op: OP,
            name: name.into(),
            expected: expected.to_vec(),
            found,
        }),
        Some(_) => src.load(name),
    }
}

fn missing(src: &dyn TensorSource, name: &str) -> Error {
    Error::MissingTensor {
        op: OP,
        name: name.into(),
        source_name: src.source_name().into(),
    }
}

/// Loads `{base}.weight`, folding a weight-norm pair when the checkpoint stores one instead:
/// `{base}.weight_g`/`weight_v` (`torch.nn.utils.weight_norm`) or
/// `{base}.parametrizations.weight.original0`/`original1` (its parametrization form).
pub fn weight(src: &dyn TensorSource, base: &str, expected: &[usize]) -> Result<HostTensor> {
    let plain = format!("{base}.weight");
    if src.contains(&plain) {
        return tensor(src, &plain, expected);
    }
    for (g, v) in [
        ("weight_g", "weight_v"),
        (
            "parametrizations.weight.original0",
            "parametrizations.weight.original1",
        ),
    ] {
        let (g, v) = (format!("{base}.{g}"), format!("{base}.{v}"));
        if src.contains(&g) && src.contains(&v) {
            let v_t = tensor(src, &v, expected)?;
            let mut g_shape = vec![1; expected.len()];
            g_shape[0] = expected[0];
            let g_t = tensor(src, &g, &g_shape)?;
            return Ok(fold_weight_norm(&g_t, v_t));
        }
    }
    Err(missing(src, &plain))
}

/// `w = g * v / ||v||`, the norm taken per slice of axis 0 (torch `weight_norm`, `dim=0`).
pub fn fold_weight_norm(g: &HostTensor, mut v: HostTensor) -> HostTensor {
    let rows = g.data.len();
    let row_len = v.data.len() / rows.max(1);
    for (row, &gain) in v.data.chunks_exact_mut(row_len.max(1)).zip(&g.data) {
        let norm = row
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt() as f32;
        let factor = gain / norm;
        row.iter_mut().for_each(|x| *x *= factor);
    }
    v
}

/// `embed_sum / max(cluster_usage, eps)` per row (`MimiEuclideanCodebook.embed`).
pub fn codebook_table(embed_sum: HostTensor, cluster_usage: &HostTensor) -> HostTensor {
    let mut table = embed_sum;
    let dim = table.shape[1];
    for (row, &usage) in table.data.chunks_exact_mut(dim).zip(&cluster_usage.data) {
        let usage = usage.max(CODEBOOK_EPSILON);
        row.iter_mut().for_each(|x| *x /= usage);
    }
    table
}

/// Builds the decoder weights from an HF-named source, validating every name and shape.
pub fn build_weights(c: &MimiConfig, src: &dyn TensorSource) -> Result<MimiWeights> {
    c.validate()?;
    let (h, d, k) = (c.hidden_size, c.codebook_dim, c.codebook_size);
    let rvq = |prefix: &str, count: usize| -> Result<RvqWeights> {
        let codebooks = (0..count)
            .map(|i| {
                let p = format!("{prefix}.layers.{i}.codebook");
                let sum = tensor(src, &format!("{p}.embed_sum"), &[k, d])?;
                let usage = tensor(src, &format!("{p}.cluster_usage"), &[k])?;
                Ok(codebook_table(sum, &usage))
            })
            .collect::<Result<Vec<_>>>()?;
        let output_proj =
            weight(src, &format!("{prefix}.output_proj"), &[h, d, 1])?.reshape(vec![h, d])?;
        Ok(RvqWeights {
            codebooks,
            output_proj,
        })
    };
    let [(sem, n_sem), (aco, n_aco)] = rvq_halves(c);
    let semantic = rvq(sem, n_sem)?;
    let acoustic = rvq(aco, n_aco)?;
    let upsample = ConvTrWeights {
        weight: weight(
            src,
            "upsample.conv",
            &[h, h / c.upsample_groups, 2 * c.compress],
        )?,
        bias: None,
        stride: c.compress,
        groups: c.upsample_groups,
    };
    let transformer = (0..c.num_hidden_layers)
        .map(|l| transformer_layer(c, src, "decoder_transformer", l))
        .collect::<Result<Vec<_>>>()?;
    let decoder = seanet(c, src)?;
    let encoder = if super::hf_encoder::has_encoder(src) {
        Some(super::hf_encoder::build_encoder(c, src)?)
    } else {
        None
    };
    Ok(MimiWeights {
        semantic,
        acoustic,
        upsample,
        transformer,
        decoder,
        encoder,
    })
}

/// Layer `l` of the transformer under `prefix`.
pub(crate) fn transformer_layer(
    c: &MimiConfig,
    src: &dyn TensorSource,
    prefix: &str,
    l: usize,
) -> Result<TransformerLayerWeights> {
    let h = c.hidden_size;
    let p = format!("{prefix}.layers.{l}");
    let vec_h = |name: &str| tensor(src, &format!("{p}.{name}"), &[h]);
    let square = |name: &str| weight(src, &format!("{p}.self_attn.{name}"), &[h, h]);
    Ok(TransformerLayerWeights {
        input_layernorm_weight: vec_h("input_layernorm.weight")?,
        input_layernorm_bias: vec_h("input_layernorm.bias")?,
        q_proj: square("q_proj")?,
        k_proj: square("k_proj")?,
        v_proj: square("v_proj")?,
        o_proj: square("o_proj")?,
        self_attn_layer_scale: vec_h("self_attn_layer_scale.scale")?,
        post_attention_layernorm_weight: vec_h("post_attention_layernorm.weight")?,
        post_attention_layernorm_bias: vec_h("post_attention_layernorm.bias")?,
        fc1: weight(src, &format!("{p}.mlp.fc1"), &[c.intermediate_size, h])?,
        fc2: weight(src, &format!("{p}.mlp.fc2"), &[h, c.intermediate_size])?,
        mlp_layer_scale: vec_h("mlp_layer_scale.scale")?,
    })
}

pub(crate) fn conv(
    src: &dyn TensorSource,
    base: &str,
    shape: [usize; 3],
    dilation: usize,
) -> Result<ConvWeights> {
    Ok(ConvWeights {
        weight: weight(src, base, &shape)?,
        bias: Some(tensor(src, &format!("{base}.bias"), &[shape[0]])?),
        dilation,
    })
}

/// The first or last SEANet convolution (`decoder.layers.N.conv`, dilation 1).
fn top_conv(src: &dyn TensorSource, p: &ConvPlan) -> Result<ConvWeights> {
    let name = format!("decoder.layers.{}.conv", p.index);
    conv(src, &name, [p.c_out, p.c_in, p.kernel], 1)
}

fn seanet(c: &MimiConfig, src: &dyn TensorSource) -> Result<SeanetWeights> {
    let plan = seanet_plan(c);
    let conv_in = top_conv(src, &plan.conv_in)?;
    let stages = plan
        .stages
        .iter()
        .map(|stage| {
            let ConvPlan {
                index: i,
                c_in,
                c_out,
                kernel,
                stride,
            } = stage.convtr;
            let base = format!("decoder.layers.{i}.conv");
            let convtr = ConvTrWeights {
                weight: weight(src, &base, &[c_in, c_out, kernel])?,
                bias: Some(tensor(src, &format!("{base}.bias"), &[c_out])?),
                stride,
                groups: 1,
            };
            let resblocks = stage
                .resblocks
                .iter()
                .map(
                    |&ResBlockPlan {
                         index: i,
                         channels: ch,
                         hidden,
                         kernel,
                         dilation,
                     }| {
                        let p = format!("decoder.layers.{i}.block");
                        Ok(ResBlockWeights {
                            conv1: conv(
                                src,
                                &format!("{p}.1.conv"),
                                [hidden, ch, kernel],
                                dilation,
                            )?,
                            conv2: conv(src, &format!("{p}.3.conv"), [ch, hidden, 1], 1)?,
                        })
                    },
                )
                .collect::<Result<Vec<_>>>()?;
            Ok(StageWeights { convtr, resblocks })
        })
        .collect::<Result<Vec<_>>>()?;
    let conv_out = top_conv(src, &plan.conv_out)?;
    Ok(SeanetWeights {
        conv_in,
        stages,
        conv_out,
    })
}
