//! The pre-norm decoder layer stack over a paged KV cache, one function for prefill (`time` =
//! prompt length) and decode (`time` = 1).
//!
//! The residual stream stays in `acts.residual`. A layer is four fused products around the
//! attention: norm + fused q/k/v -> q/k norm + RoPE -> paged attention -> o_proj + residual add
//! -> norm + fused gate/up + SwiGLU -> down + residual add; the final norm then gives the
//! final-normed hidden of every token. Each linear is dense or int8 ConvRot (`linear.rs`).

use chorus_core::lm_ops::{
    Epilogue, HeadGeom, KvScales, PagedAttentionArgs, RmsNormArgs, RopeAttentionArgs, RopeOf,
};
use chorus_core::{Error, LmOps, Result};

use crate::acts::Acts;
use crate::cache::LayerCache;
use crate::layer::DecoderLayer;
use crate::linear::{linear, LinearIo};
use crate::mlp::{mlp_half, Mlp};

/// A model's decoder stack: its layers, final norm and positional table.
pub struct DecoderStack<'a, B: LmOps> {
    pub layers: &'a [DecoderLayer<B>],
    /// The norm after the last layer (`model.norm`).
    pub norm: &'a B::Buf,
    /// `[positions, 2, head_dim / 2]` (`rope.rs`); `None`: attention reads q and k as projected
    /// (MiniMax's depth decoder, whose positions are a learnt embedding).
    pub rope: Option<&'a B::Buf>,
    pub hidden: usize,
    pub inter: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Of every RMSNorm of the stack.
    pub eps: f32,
    /// Sliding-window attention: keys per query, its own included (Kyutai's `context`); the
    /// block tables are then rings (`PagedAttentionArgs`). `None`: every earlier position.
    pub window: Option<usize>,
}

/// What one call reads and writes besides the weights.
pub struct DecoderCall<'a, B: LmOps> {
    pub caches: &'a mut [LayerCache<B>],
    pub acts: &'a mut Acts<B>,
    /// `[rows]`: position of each row's first new token.
    pub start: &'a B::Ints,
    /// `[rows, max_blocks]`.
    pub block_tables: &'a B::Ints,
    pub shape: PagedShape,
    /// `[rows * time, hidden]` for the final-normed hidden; `None`: `acts.scratch.normed`.
    pub out: Option<&'a mut B::Buf>,
    /// More sequences after the call's own tokens, through the same products.
    pub chunk: Option<Segment<'a, B>>,
}

/// Sequences whose tokens follow the call's own in `acts` (a prompt chunk prefilled alongside a
/// frame's decode rows, so one pass over the weights serves both): their own positions, block
/// tables and token count per row; the cache geometry is the call's.
pub struct Segment<'a, B: LmOps> {
    /// `[rows]`: position of each row's first token.
    pub start: &'a B::Ints,
    /// `[rows, max_blocks]`.
    pub block_tables: &'a B::Ints,
    pub rows: usize,
    /// Tokens per row.
    pub time: usize,
}

/// Shape of one call over the paged cache.
#[derive(Clone, Copy, Debug)]
pub struct PagedShape {
    pub rows: usize,
    /// New tokens per row.
    pub time: usize,
    pub block_size: usize,
    pub max_blocks: usize,
}

/// Runs every layer on `acts.residual` (the input, `[rows * time, hidden]`), then the final norm.
pub fn decoder_stack<B: LmOps>(
    be: &B,
    s: &DecoderStack<'_, B>,
    call: DecoderCall<'_, B>,
) -> Result<()> {
    let DecoderCall {
        caches,
        acts,
        start,
        block_tables,
        shape,
        out,
        chunk,
    } = call;
    let (h, eps) = (s.hidden, s.eps);
    let geom_of = |rows, time| HeadGeom {
        rows,
        time,
        q_heads: s.q_heads,
        kv_heads: s.kv_heads,
        head_dim: s.head_dim,
    };
    let geom = geom_of(shape.rows, shape.time);
    // The call's groups of sequences: its own, then the chunk's, one after the other in `acts`.
    let own = (start, block_tables, geom, 0);
    let extra = chunk.map(|c| {
        (
            c.start,
            c.block_tables,
            geom_of(c.rows, c.time),
            geom.tokens(),
        )
    });
    let n = geom.tokens() + extra.map_or(0, |e| e.2.tokens());
    let q_width = geom.q_heads * geom.head_dim;
    for (l, cache) in s.layers.iter().zip(caches.iter_mut()) {
        // 1-2. input_layernorm and q, k, v in one product.
        let io = LinearIo::new(
            &acts.residual,
            &mut acts.qkv,
            acts.scratch.view(),
            [n, h, geom.qkv_width()],
            Epilogue::Store,
        );
        linear(be, &l.qkv, io.normed(&l.input_layernorm, eps))?;
        // 3-4. per-head q/k RMSNorm (Qwen3) if the layer has one, then rotate-half RoPE at each
        // token's position (Llama-style models rotate only).
        for (start, block_tables, geom, first_token) in std::iter::once(own).chain(extra) {
            // 5. causal GQA attention over the paged cache (writes this call's k/v first).
            let attn = PagedAttentionArgs {
                // Field by field: the caches and their scales are borrowed apart.
                kv_scales: cache.scales.as_mut().map(|(k, v)| KvScales { k, v }),
                qkv: &mut acts.qkv,
                k_cache: &mut cache.k,
                v_cache: &mut cache.v,
                block_tables,
                start,
                out: &mut acts.attn,
                geom,
                block_size: shape.block_size,
                max_blocks: shape.max_blocks,
                first_token,
                window: s.window,
            };
            match s.rope {
                // 3-4 with 5. per-head q/k RMSNorm (Qwen3) if the layer has one, then rotate-half
                // RoPE at each token's position (Llama-style models rotate only), in one op with
                // the attention.
                Some(rope) => be.rope_paged_attention(RopeAttentionArgs {
                    rope: RopeOf {
                        qk_norm: l.qk_norm.as_ref().map(|qk| [&qk.q, &qk.k]),
                        rope,
                        eps,
                    },
                    attn,
                })?,
                None => be.paged_attention(attn)?,
            }
        }
        // 6. o_proj, added to the residual stream in the product.
        let io = LinearIo::new(
            &acts.attn,
            &mut acts.residual,
            acts.scratch.view(),
            [n, q_width, h],
            Epilogue::Accumulate,
        );
        linear(be, &l.o_proj, io)?;
        // 7. post_attention_layernorm, SwiGLU MLP, its residual add.
        let mlp = Mlp {
            norm: &l.post_attention_layernorm,
            gate_up: &l.gate_up,
            down: &l.down,
            eps,
        };
        mlp_half(be, acts, mlp, (n, h, s.inter))?;
    }
    // 8. the final norm: the hidden of every token.
    let Acts {
        residual, scratch, ..
    } = acts;
    be.rms_norm(RmsNormArgs {
        residual,
        delta: None,
        weight: s.norm,
        out: out.unwrap_or(&mut scratch.normed),
        n,
        dim: h,
        eps,
    })
}

/// The q/k pairings `LmOps` can run: RoPE with or without a q/k norm before it
/// (`qk_norm_rope`), or neither; a q/k norm without RoPE is refused. A model checks its layers once
/// when it loads them (`with_rope`: its stack has a RoPE table); `decoder_stack`, on the step path,
/// does not check again.
pub fn check_positional<B: LmOps>(layers: &[DecoderLayer<B>], with_rope: bool) -> Result<()> {
    if with_rope {
        return Ok(());
    }
    let Some(i) = layers.iter().position(|l| l.qk_norm.is_some()) else {
        return Ok(());
    };
    Err(Error::config(
        "decoder_stack",
        format!("layer {i} has q/k norms with no RoPE: LmOps runs a q/k norm only before RoPE (qk_norm_rope)"),
    ))
}

#[cfg(test)]
mod tests {
    use chorus_core::{Backend, BufRole};
    use chorus_cpu::CpuBackend;

    use super::*;
    use crate::acts::ActDims;
    use crate::cache::layer_caches;
    use crate::layer::QkNorm;
    use crate::linear::Linear;

    /// hidden 4, 2 heads of 2, inter 8; all weights zero.
    fn layer(be: &CpuBackend, qk: bool) -> DecoderLayer<CpuBackend> {
        let z = |n: usize| be.zeros(n, BufRole::Weight).unwrap();
        DecoderLayer {
            input_layernorm: z(4),
            qkv: Linear::Dense(z(12 * 4)),
            qk_norm: qk.then(|| QkNorm { q: z(2), k: z(2) }),
            o_proj: Linear::Dense(z(4 * 4)),
            post_attention_layernorm: z(4),
            gate_up: Linear::Dense(z(16 * 4)),
            down: Linear::Dense(z(4 * 8)),
        }
    }

    /// Runs one token `x` (`[4]`) through `layers`; returns the final-normed hidden.
    fn run(
        be: &CpuBackend,
        layers: &[DecoderLayer<CpuBackend>],
        rope: bool,
        x: &[f32],
    ) -> Result<Vec<f32>> {
        let norm = be.upload(&[1.0; 4], BufRole::Weight)?;
        let table = be.upload(&crate::rope::rope_table(4, 2, 1e4), BufRole::Table)?;
        let stack = DecoderStack {
            layers,
            norm: &norm,
            rope: rope.then_some(&table),
            hidden: 4,
            inter: 8,
            q_heads: 2,
            kv_heads: 2,
            head_dim: 2,
            eps: 1e-6,
            window: None,
        };
        let dims = ActDims {
            hidden: 4,
            qkv: 12,
            attn: 4,
            inter: 8,
            q8: false,
        };
        let mut acts = Acts::new(be, 1, dims)?;
        acts.residual = be.upload(x, BufRole::Activation)?;
        let mut caches = layer_caches(be, layers.len(), 2, 4, 4)?;
        let (start, tables) = (be.ints(1, 0)?, be.ints(1, 1)?);
        let call = DecoderCall {
            caches: &mut caches,
            acts: &mut acts,
            start: &start,
            block_tables: &tables,
            shape: PagedShape {
                rows: 1,
                time: 1,
                block_size: 4,
                max_blocks: 1,
            },
            out: None,
            chunk: None,
        };
        decoder_stack(be, &stack, call)?;
        be.download(&acts.scratch.normed)
    }

    #[test]
    fn a_q_k_norm_without_rope_is_refused_and_rope_alone_runs() {
        let be = CpuBackend::new(Some(1)).unwrap();
        let mixed = [layer(&be, false), layer(&be, true)];
        let err = check_positional(&mixed, false).unwrap_err().to_string();
        assert!(err.contains("layer 1 has q/k norms with no RoPE"), "{err}");
        assert!(check_positional(&mixed, true).is_ok());
        assert!(check_positional(&mixed[..1], false).is_ok());
    }

    /// Zero weights add nothing to the residual stream, so every pairing leaves the final norm
    /// of the input: the residual adds and the output buffer are wired through.
    #[test]
    fn both_or_neither_run_and_zero_layers_pass_the_input_through() {
        let be = CpuBackend::new(Some(1)).unwrap();
        let x = [1.0, -2.0, 3.0, -4.0];
        let rms = (x.iter().map(|v| v * v).sum::<f32>() / 4.0 + 1e-6).sqrt();
        // q/k norm + RoPE (Qwen3), RoPE alone (Llama), neither (MiniMax's depth decoder).
        for (qk, rope) in [(true, true), (false, true), (false, false)] {
            let layers = [layer(&be, qk), layer(&be, qk)];
            let got = run(&be, &layers, rope, &x).unwrap();
            for (g, v) in got.iter().zip(x) {
                assert!((g - v / rms).abs() < 1e-3, "{got:?}");
            }
        }
    }
}
