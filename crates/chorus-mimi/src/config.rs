//! Mimi configuration: the fields of transformers' `MimiConfig` that the decoder needs.

use chorus_core::{Error, Result, FRAME_SAMPLES, MAX_CODEBOOKS};
use serde::Deserialize;

/// RoPE parameters as transformers 5 writes them (`rope_parameters.rope_theta`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RopeParameters {
    pub rope_theta: Option<f64>,
}

/// The decoder-side Mimi configuration (defaults are the kyutai/mimi checkpoint's).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default)]
pub struct MimiConfig {
    pub sampling_rate: u32,
    pub frame_rate: f64,
    pub audio_channels: usize,
    pub hidden_size: usize,
    pub num_filters: usize,
    pub num_residual_layers: usize,
    pub upsampling_ratios: Vec<usize>,
    pub kernel_size: usize,
    pub last_kernel_size: usize,
    pub residual_kernel_size: usize,
    pub dilation_growth_rate: usize,
    pub use_causal_conv: bool,
    pub pad_mode: String,
    pub compress: usize,
    pub trim_right_ratio: f64,
    pub codebook_size: usize,
    pub codebook_dim: usize,
    pub num_quantizers: usize,
    pub num_semantic_quantizers: usize,
    pub use_conv_shortcut: bool,
    pub upsample_groups: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: Option<usize>,
    pub hidden_act: String,
    pub norm_eps: f64,
    pub rope_theta: Option<f64>,
    pub rope_parameters: Option<RopeParameters>,
    pub sliding_window: usize,
    pub attention_bias: bool,
}

impl Default for MimiConfig {
    fn default() -> Self {
        Self {
            sampling_rate: 24_000,
            frame_rate: 12.5,
            audio_channels: 1,
            hidden_size: 512,
            num_filters: 64,
            num_residual_layers: 1,
            upsampling_ratios: vec![8, 6, 5, 4],
            kernel_size: 7,
            last_kernel_size: 3,
            residual_kernel_size: 3,
            dilation_growth_rate: 2,
            use_causal_conv: true,
            pad_mode: "constant".into(),
            compress: 2,
            trim_right_ratio: 1.0,
            codebook_size: 2048,
            codebook_dim: 256,
            num_quantizers: 32,
            num_semantic_quantizers: 1,
            use_conv_shortcut: false,
            upsample_groups: 512,
            num_hidden_layers: 8,
            intermediate_size: 2048,
            num_attention_heads: 8,
            num_key_value_heads: 8,
            head_dim: None,
            hidden_act: "gelu".into(),
            norm_eps: 1e-5,
            rope_theta: None,
            rope_parameters: None,
            sliding_window: 250,
            attention_bias: false,
        }
    }
}

impl MimiConfig {
    /// Parses a transformers `config.json` (unknown fields are ignored) and validates it.
    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(|e| Error::Format {
            op: "MimiConfig::from_json",
            path: origin.into(),
            reason: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Head dimension (`head_dim`, else `hidden_size / num_attention_heads`).
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// RoPE base frequency.
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .or(self.rope_theta)
            .unwrap_or(10_000.0)
    }

    /// Transformer tokens per codec frame (the upsample stride).
    pub fn frame_tokens(&self) -> usize {
        self.compress
    }

    /// Samples per frame: `frame_tokens` transformer tokens, each upsampled by every SEANet ratio.
    pub fn frame_samples(&self) -> usize {
        self.upsampling_ratios.iter().product::<usize>() * self.frame_tokens()
    }

    /// Checks the configuration against what the streaming decoder supports.
    pub fn validate(&self) -> Result<()> {
        let op = "MimiConfig::validate";
        let fail = |reason: String| Err(Error::config(op, reason));
        if !self.use_causal_conv || self.pad_mode != "constant" || self.trim_right_ratio != 1.0 {
            return fail(format!(
                "streaming needs causal convs, constant padding and trim_right_ratio 1 (got causal={}, pad_mode={}, trim_right_ratio={})",
                self.use_causal_conv, self.pad_mode, self.trim_right_ratio
            ));
        }
        if self.audio_channels != 1 {
            return fail(format!(
                "audio_channels must be 1, got {}",
                self.audio_channels
            ));
        }
        if self.num_quantizers == 0 || self.num_quantizers > MAX_CODEBOOKS {
            return fail(format!(
                "num_quantizers must be in 1..={MAX_CODEBOOKS}, got {}",
                self.num_quantizers
            ));
        }
        if self.num_semantic_quantizers == 0 || self.num_semantic_quantizers > self.num_quantizers {
            return fail(format!(
                "num_semantic_quantizers must be in 1..={}, got {}",
                self.num_quantizers, self.num_semantic_quantizers
            ));
        }
        if self.num_key_value_heads != self.num_attention_heads {
            return fail(format!(
                "grouped-query attention is not supported ({} heads, {} kv heads)",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.head_dim() * self.num_attention_heads != self.hidden_size
            || !self.head_dim().is_multiple_of(2)
        {
            return fail(format!(
                "heads x head_dim must equal hidden_size with an even head_dim ({} x {} vs {})",
                self.num_attention_heads,
                self.head_dim(),
                self.hidden_size
            ));
        }
        if self.upsample_groups != self.hidden_size {
            return fail(format!(
                "the upsample must be depthwise (upsample_groups {} != hidden_size {})",
                self.upsample_groups, self.hidden_size
            ));
        }
        if self.hidden_act != "gelu" {
            return fail(format!("hidden_act must be gelu, got {}", self.hidden_act));
        }
        if self.use_conv_shortcut {
            return fail("conv shortcuts in residual blocks are not supported".into());
        }
        if self.attention_bias {
            return fail("attention bias is not supported".into());
        }
        if self.upsampling_ratios.is_empty() || self.upsampling_ratios.contains(&0) {
            return fail(format!(
                "bad upsampling_ratios {:?}",
                self.upsampling_ratios
            ));
        }
        if self.sliding_window == 0
            || self.sliding_window + self.frame_tokens() > chorus_core::KV_RING
        {
            return fail(format!(
                "sliding_window {} plus {} tokens per frame must fit the {}-entry KV ring",
                self.sliding_window,
                self.frame_tokens(),
                chorus_core::KV_RING
            ));
        }
        if self.frame_samples() != FRAME_SAMPLES {
            return fail(format!(
                "a frame must decode to {FRAME_SAMPLES} samples, this configuration gives {}",
                self.frame_samples()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_give_1920_samples() {
        let c = MimiConfig::default();
        c.validate().unwrap();
        assert_eq!(c.frame_samples(), 1920);
        assert_eq!(c.head_dim(), 64);
    }

    #[test]
    fn parses_transformers_5_rope_parameters() {
        let c = MimiConfig::from_json(r#"{"rope_parameters": {"rope_theta": 5000.0, "rope_type": "default"}, "model_type": "mimi"}"#, "x").unwrap();
        assert_eq!(c.rope_theta(), 5000.0);
    }

    #[test]
    fn rejects_non_causal() {
        let e = MimiConfig::from_json(r#"{"use_causal_conv": false}"#, "x").unwrap_err();
        assert!(e.to_string().contains("causal"), "{e}");
    }
}
