//! Load-time transforms from [`MimiWeights`] (HF layout) to the layouts the op set documents.
//!
//! Done once per decoder, never in a step: codebooks are folded through their output projection
//! into one `[n_q, cardinality, hidden]` table, q/k/v are fused into one `[3*hidden, hidden]`
//! matrix, each layer scale is folded into the rows of the projection it scales (so the residual
//! update is one accumulating product), and convolution kernels are made channels-last.

use crate::weights::{
    ConvTrWeights, ConvWeights, MimiWeights, ResBlockWeights, RvqWeights, TransformerLayerWeights,
};
use crate::MimiConfig;
use chorus_core::{Backend, BufRole, Error, HostTensor, Result};
use rayon::prelude::*;

/// A causal convolution, channels-last.
pub struct PreparedConv<B: Backend> {
    /// `[c_out, kernel, c_in]`.
    pub w: B::Buf,
    pub bias: Option<B::Buf>,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub dilation: usize,
}

/// A transposed convolution, channels-last.
pub struct PreparedConvTr<B: Backend> {
    /// Dense `[c_in, kernel, c_out]`, depthwise `[c_out, kernel]`.
    pub w: B::Buf,
    pub bias: Option<B::Buf>,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub depthwise: bool,
}

/// One transformer layer.
pub struct PreparedLayer<B: Backend> {
    pub norm1_w: B::Buf,
    pub norm1_b: B::Buf,
    /// `[3*hidden, hidden]`: q, k, v rows.
    pub qkv: B::Buf,
    /// `o_proj` with `self_attn_layer_scale` folded into its rows.
    pub o: B::Buf,
    pub norm2_w: B::Buf,
    pub norm2_b: B::Buf,
    pub fc1: B::Buf,
    /// `fc2` with `mlp_layer_scale` folded into its rows.
    pub fc2: B::Buf,
}

/// One SEANet residual block: a causal convolution `c -> hidden`, then a pointwise one back.
pub struct PreparedResBlock<B: Backend> {
    pub conv1: PreparedConv<B>,
    pub conv2: PreparedConv<B>,
}

/// A SEANet stage's upsampling layer.
pub enum PreparedUp<B: Backend> {
    /// A transposed convolution as such (kernel below twice the stride, or depthwise).
    Transposed(PreparedConvTr<B>),
    /// A dense transposed convolution of kernel `2 * stride` as the `stride` output phases of one
    /// causal convolution of two taps: `y[i*s + p] = W[.., p] x[i] + W[.., p + s] x[i - 1]`
    /// (PyTorch `ConvTranspose1d`, then moshi's causal trim of the right `kernel - stride`), so
    /// the outputs `[rows, time, stride * c_out]` are `[rows, time * stride, c_out]` as laid out
    /// and the history is the last (ELU'd) input column instead of the output tail. It runs as
    /// one product with no overlap pass and no intermediate of `kernel * c_out` columns.
    Phases {
        conv: PreparedConv<B>,
        stride: usize,
        c_out: usize,
    },
}

impl<B: Backend> PreparedUp<B> {
    pub fn stride(&self) -> usize {
        match self {
            Self::Transposed(c) => c.stride,
            Self::Phases { stride, .. } => *stride,
        }
    }

    /// Output channels per output time.
    pub fn c_out(&self) -> usize {
        match self {
            Self::Transposed(c) => c.c_out,
            Self::Phases { c_out, .. } => *c_out,
        }
    }
}

/// One SEANet stage: upsampling then residual blocks.
pub struct PreparedStage<B: Backend> {
    pub convtr: PreparedUp<B>,
    pub resblocks: Vec<PreparedResBlock<B>>,
}

/// Every weight of the decoder, on the backend.
pub struct PreparedWeights<B: Backend> {
    /// `[n_q, cardinality, hidden]`.
    pub table: B::Buf,
    pub upsample: PreparedConvTr<B>,
    pub layers: Vec<PreparedLayer<B>>,
    pub conv_in: PreparedConv<B>,
    pub stages: Vec<PreparedStage<B>>,
    pub conv_out: PreparedConv<B>,
}

const OP: &str = "prepare";

/// Transforms and uploads every weight.
pub fn prepare<B: Backend>(
    be: &B,
    cfg: &MimiConfig,
    w: &MimiWeights,
) -> Result<PreparedWeights<B>> {
    let table = fold_codebooks(cfg, w)?;
    let upsample = prepare_convtr(be, &w.upsample, "upsample")?;
    let layers = w
        .transformer
        .iter()
        .map(|l| prepare_layer(be, l))
        .collect::<Result<Vec<_>>>()?;
    let stages = w
        .decoder
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let convtr = prepare_up(be, &s.convtr, &format!("decoder stage {i}"))?;
            let resblocks = s
                .resblocks
                .iter()
                .map(|r| prepare_res_block(be, r))
                .collect::<Result<Vec<_>>>()?;
            Ok(PreparedStage { convtr, resblocks })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PreparedWeights {
        table: be.upload(&table.data, BufRole::Weight)?,
        upsample,
        layers,
        conv_in: prepare_conv(be, &w.decoder.conv_in)?,
        stages,
        conv_out: prepare_conv(be, &w.decoder.conv_out)?,
    })
}

/// Uploads one transformer layer with q, k and v fused.
pub(crate) fn prepare_layer<B: Backend>(
    be: &B,
    l: &TransformerLayerWeights,
) -> Result<PreparedLayer<B>> {
    let qkv = concat_rows(&[&l.q_proj, &l.k_proj, &l.v_proj])?;
    Ok(PreparedLayer {
        norm1_w: up(be, &l.input_layernorm_weight)?,
        norm1_b: up(be, &l.input_layernorm_bias)?,
        qkv: be.upload(&qkv, BufRole::Weight)?,
        o: be.upload(
            &scale_rows(&l.o_proj, &l.self_attn_layer_scale, "o_proj")?,
            BufRole::Weight,
        )?,
        norm2_w: up(be, &l.post_attention_layernorm_weight)?,
        norm2_b: up(be, &l.post_attention_layernorm_bias)?,
        fc1: up(be, &l.fc1)?,
        fc2: be.upload(
            &scale_rows(&l.fc2, &l.mlp_layer_scale, "fc2")?,
            BufRole::Weight,
        )?,
    })
}

/// `w[j, :] * scale[j]`: `x + scale * (h . w^T)` (transformers' `MimiLayerScale`, `modeling_mimi.py`)
/// as one product `x + h . (scale w)^T`.
fn scale_rows(w: &HostTensor, scale: &HostTensor, name: &str) -> Result<Vec<f32>> {
    let rows = scale.data.len();
    if w.shape.len() != 2 || w.shape[0] != rows {
        return Err(Error::Shape {
            op: OP,
            name: format!("{name} (scaled by its layer scale of {rows})"),
            expected: vec![rows, w.shape.get(1).copied().unwrap_or(0)],
            found: w.shape.clone(),
        });
    }
    let cols = w.shape[1];
    Ok(w.data
        .chunks_exact(cols)
        .zip(&scale.data)
        .flat_map(|(row, &s)| row.iter().map(move |&v| v * s))
        .collect())
}

fn up<B: Backend>(be: &B, t: &HostTensor) -> Result<B::Buf> {
    be.upload(&t.data, BufRole::Weight)
}

fn concat_rows(parts: &[&HostTensor]) -> Result<Vec<f32>> {
    let cols = parts[0].shape.get(1).copied().unwrap_or(0);
    let mut out = Vec::new();
    for p in parts {
        if p.shape.len() != 2 || p.shape[1] != cols {
            return Err(Error::Shape {
                op: OP,
                name: "q/k/v projection".into(),
                expected: vec![p.shape.first().copied().unwrap_or(0), cols],
                found: p.shape.clone(),
            });
        }
        out.extend_from_slice(&p.data);
    }
    Ok(out)
}

pub(crate) fn prepare_conv<B: Backend>(be: &B, c: &ConvWeights) -> Result<PreparedConv<B>> {
    let [c_out, c_in, kernel] = dims3(&c.weight, "conv weight")?;
    let w = c.weight.permute(&[0, 2, 1])?;
    Ok(PreparedConv {
        w: be.upload(&w.data, BufRole::Weight)?,
        bias: c.bias.as_ref().map(|b| up(be, b)).transpose()?,
        c_in,
        c_out,
        kernel,
        dilation: c.dilation,
    })
}

/// Uploads a residual block, checking that its second convolution maps the first's output back
/// to its input pointwise (the shape the `res_block` op runs).
pub(crate) fn prepare_res_block<B: Backend>(
    be: &B,
    r: &ResBlockWeights,
) -> Result<PreparedResBlock<B>> {
    let conv1 = prepare_conv(be, &r.conv1)?;
    let conv2 = prepare_conv(be, &r.conv2)?;
    if conv2.kernel != 1 || conv2.c_in != conv1.c_out || conv2.c_out != conv1.c_in {
        return Err(Error::config(
            OP,
            format!(
                "residual block: conv2 must be pointwise {} -> {} after conv1 {} -> {}, found kernel {} ({} -> {})",
                conv1.c_out, conv1.c_in, conv1.c_in, conv1.c_out, conv2.kernel, conv2.c_in, conv2.c_out
            ),
        ));
    }
    Ok(PreparedResBlock { conv1, conv2 })
}

/// A stage's transposed convolution, as output phases where its kernel is twice its stride.
fn prepare_up<B: Backend>(be: &B, c: &ConvTrWeights, name: &str) -> Result<PreparedUp<B>> {
    let [c_in, c_out, kernel] = dims3(&c.weight, name)?;
    let s = c.stride;
    if c.groups != 1 || kernel != 2 * s || !be.phase_upsampling() {
        return Ok(PreparedUp::Transposed(prepare_convtr(be, c, name)?));
    }
    // w[(p*c_out + o), j, ci]: tap 0 meets x[i - 1] through W[ci, o, p + s], tap 1 meets x[i]
    // through W[ci, o, p] (HF weight `[c_in, c_out, kernel]`).
    let src = &c.weight.data;
    let at = |ci: usize, o: usize, k: usize| src[(ci * c_out + o) * kernel + k];
    let mut w = Vec::with_capacity(s * c_out * 2 * c_in);
    for p in 0..s {
        for o in 0..c_out {
            for k in [p + s, p] {
                w.extend((0..c_in).map(|ci| at(ci, o, k)));
            }
        }
    }
    let bias = c
        .bias
        .as_ref()
        .map(|b| be.upload(&b.data.repeat(s), BufRole::Weight))
        .transpose()?;
    Ok(PreparedUp::Phases {
        conv: PreparedConv {
            w: be.upload(&w, BufRole::Weight)?,
            bias,
            c_in,
            c_out: s * c_out,
            kernel: 2,
            dilation: 1,
        },
        stride: s,
        c_out,
    })
}

fn prepare_convtr<B: Backend>(be: &B, c: &ConvTrWeights, name: &str) -> Result<PreparedConvTr<B>> {
    let [c_in, per_group, kernel] = dims3(&c.weight, name)?;
    let depthwise = c.groups > 1;
    if depthwise && (c.groups != c_in || per_group != 1) {
        return Err(Error::config(
            OP,
            format!("{name}: only dense or depthwise transposed convs are supported (groups {}, weight {:?})", c.groups, c.weight.shape),
        ));
    }
    if kernel <= c.stride || kernel > 2 * c.stride {
        return Err(Error::config(
            OP,
            format!(
                "{name}: kernel {kernel} must be in (stride, 2*stride] for stride {}",
                c.stride
            ),
        ));
    }
    let (w, c_out) = if depthwise {
        (c.weight.data.clone(), c_in)
    } else {
        (c.weight.permute(&[0, 2, 1])?.data, per_group)
    };
    Ok(PreparedConvTr {
        w: be.upload(&w, BufRole::Weight)?,
        bias: c.bias.as_ref().map(|b| up(be, b)).transpose()?,
        c_in,
        c_out,
        kernel,
        stride: c.stride,
        depthwise,
    })
}

pub(crate) fn dims3(t: &HostTensor, name: &str) -> Result<[usize; 3]> {
    match t.shape[..] {
        [a, b, c] => Ok([a, b, c]),
        _ => Err(Error::Shape {
            op: OP,
            name: name.into(),
            expected: vec![0, 0, 0],
            found: t.shape.clone(),
        }),
    }
}

/// `table[q, c, :] = output_proj(q) @ codebook_q[c]`: the quantizer's decode for one code,
/// so that a frame's latent is a sum of table rows (transformers `MimiSplitResidualVectorQuantizer.decode`).
pub fn fold_codebooks(cfg: &MimiConfig, w: &MimiWeights) -> Result<HostTensor> {
    let (card, hidden) = (cfg.codebook_size, cfg.hidden_size);
    let halves: Vec<(&RvqWeights, &HostTensor)> = w
        .semantic
        .codebooks
        .iter()
        .map(|c| (&w.semantic, c))
        .chain(w.acoustic.codebooks.iter().map(|c| (&w.acoustic, c)))
        .collect();
    if halves.len() != cfg.num_quantizers {
        return Err(Error::config(
            OP,
            format!(
                "{} codebooks loaded, the configuration has {}",
                halves.len(),
                cfg.num_quantizers
            ),
        ));
    }
    let mut table = vec![0f32; cfg.num_quantizers * card * hidden];
    table
        .par_chunks_mut(card * hidden)
        .zip(halves.par_iter())
        .try_for_each(|(dst, (rvq, book))| {
            book.expect_shape(OP, "codebook", &[card, cfg.codebook_dim])?;
            rvq.output_proj
                .expect_shape(OP, "output_proj", &[hidden, cfg.codebook_dim])?;
            project(
                dst,
                &book.data,
                &rvq.output_proj.data,
                [card, hidden, cfg.codebook_dim],
            );
            Ok::<(), Error>(())
        })?;
    HostTensor::new(vec![cfg.num_quantizers, card, hidden], table)
}

/// `dst[m, n] = sum_k a[m, k] * b[n, k]` for row-major `a [m, k]`, `b [n, k]`, `dst [m, n]`.
fn project(dst: &mut [f32], a: &[f32], b: &[f32], [m, n, k]: [usize; 3]) {
    // SAFETY: the callers checked a = [m, k], b = [n, k] and dst = [m, n] (row-major), so every
    // strided access below stays inside its slice, and dst does not alias a or b.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_matches_a_naive_product() {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut dst = vec![0f32; m * n];
        project(&mut dst, &a, &b, [m, n, k]);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|x| a[i * k + x] * b[j * k + x]).sum();
                assert!((dst[i * n + j] - want).abs() < 1e-5, "{i},{j}");
            }
        }
    }
}
