//! Decoder and encoder weights in the Hugging Face layout and shapes, as checkpoint loading produces them.
//!
//! Both checkpoint layouts load into this one structure: names are normalised, weight-norm pairs
//! folded, fused `in_proj_weight` split and RoPE rows permuted to rotate-half, codebooks divided
//! by their usage. Backend-specific layouts (channels-last convolutions, folded codebook tables)
//! are derived from it in [`crate::prepare`].

use chorus_core::HostTensor;

/// One residual vector quantizer (the semantic or the acoustic half).
#[derive(Clone, Debug)]
pub struct RvqWeights {
    /// One `[codebook_size, codebook_dim]` table per codebook: `embed_sum / max(cluster_usage, 1e-5)`.
    pub codebooks: Vec<HostTensor>,
    /// `[hidden_size, codebook_dim]` (the 1x1 `output_proj` conv, squeezed).
    pub output_proj: HostTensor,
}

/// A causal convolution (`MimiConv1d`): `weight [c_out, c_in, kernel]`, `bias [c_out]`.
#[derive(Clone, Debug)]
pub struct ConvWeights {
    pub weight: HostTensor,
    pub bias: Option<HostTensor>,
    pub dilation: usize,
}

/// A transposed convolution (`MimiConvTranspose1d`): `weight [c_in, c_out / groups, kernel]`.
#[derive(Clone, Debug)]
pub struct ConvTrWeights {
    pub weight: HostTensor,
    pub bias: Option<HostTensor>,
    pub stride: usize,
    pub groups: usize,
}

/// A residual block: ELU, conv k3 (C -> C/compress), ELU, conv k1 (C/compress -> C), identity skip.
#[derive(Clone, Debug)]
pub struct ResBlockWeights {
    pub conv1: ConvWeights,
    pub conv2: ConvWeights,
}

/// One SEANet upsampling stage: ELU, transposed conv, residual blocks.
#[derive(Clone, Debug)]
pub struct StageWeights {
    pub convtr: ConvTrWeights,
    pub resblocks: Vec<ResBlockWeights>,
}

/// The SEANet decoder: conv, stages, ELU, conv.
#[derive(Clone, Debug)]
pub struct SeanetWeights {
    pub conv_in: ConvWeights,
    pub stages: Vec<StageWeights>,
    pub conv_out: ConvWeights,
}

/// One pre-LayerNorm transformer layer (rotate-half RoPE layout for q and k).
#[derive(Clone, Debug)]
pub struct TransformerLayerWeights {
    pub input_layernorm_weight: HostTensor,
    pub input_layernorm_bias: HostTensor,
    /// `[hidden, hidden]` each.
    pub q_proj: HostTensor,
    pub k_proj: HostTensor,
    pub v_proj: HostTensor,
    pub o_proj: HostTensor,
    /// `[hidden]`.
    pub self_attn_layer_scale: HostTensor,
    pub post_attention_layernorm_weight: HostTensor,
    pub post_attention_layernorm_bias: HostTensor,
    /// `[intermediate, hidden]`.
    pub fc1: HostTensor,
    /// `[hidden, intermediate]`.
    pub fc2: HostTensor,
    /// `[hidden]`.
    pub mlp_layer_scale: HostTensor,
}

/// Everything the decoder side of Mimi needs.
#[derive(Clone, Debug)]
pub struct MimiWeights {
    pub semantic: RvqWeights,
    pub acoustic: RvqWeights,
    /// Depthwise `[hidden, 1, kernel]`, no bias.
    pub upsample: ConvTrWeights,
    pub transformer: Vec<TransformerLayerWeights>,
    pub decoder: SeanetWeights,
    /// The encoder side, when the checkpoint holds it.
    pub encoder: Option<EncoderWeights>,
}

/// One SEANet encoder stage: residual blocks, then ELU and a strided conv (kernel `2 * stride`).
#[derive(Clone, Debug)]
pub struct EncoderStageWeights {
    pub resblocks: Vec<ResBlockWeights>,
    /// `[2c, c, 2 * stride]`.
    pub down: ConvWeights,
    pub stride: usize,
}

/// Everything the encoder side of Mimi needs besides the codebooks (shared with the decoder).
#[derive(Clone, Debug)]
pub struct EncoderWeights {
    /// `[num_filters, audio_channels, kernel_size]`.
    pub conv_in: ConvWeights,
    pub stages: Vec<EncoderStageWeights>,
    /// ELU then `[hidden, 2^stages * num_filters, last_kernel_size]`.
    pub conv_out: ConvWeights,
    pub transformer: Vec<TransformerLayerWeights>,
    /// `[hidden, hidden, 2 * stride]`, no bias, replicate padding on the left.
    pub downsample: ConvWeights,
    pub downsample_stride: usize,
    /// `[codebook_dim, hidden]` each (the 1x1 `input_proj` convs, squeezed).
    pub semantic_input_proj: HostTensor,
    pub acoustic_input_proj: HostTensor,
}
