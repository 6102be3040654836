//! Load-time transforms of the encoder weights: strided convs become stride-one convs over
//! super-columns, q/k/v are fused, and the quantiser tables are laid out for the search.
//!
//! A causal conv with kernel `K = k * s` and stride `s` over `[time, c]` equals a stride-one conv
//! with kernel `k` over the same memory read as `[time / s, s * c]` (each super-column holds `s`
//! consecutive samples): `out[t] = sum_j W_j . X[t - 1 + j]` with `W_j[o, p * c + i] =
//! w[o, i, j * s + p]`, and its `(k - 1) * s = K - s` samples of left padding are `k - 1`
//! super-columns of history. So the encoder needs no strided op.

use crate::prepare::{
    dims3, prepare_conv, prepare_layer, prepare_res_block, PreparedConv, PreparedLayer,
    PreparedResBlock,
};
use crate::weights::{ConvWeights, EncoderWeights, MimiWeights};
use crate::MimiConfig;
use chorus_core::{Backend, BufRole, Error, Result};

const OP: &str = "prepare_encoder";

/// One encoder stage: residual blocks, then the strided conv as super-columns.
pub struct PreparedEncStage<B: Backend> {
    pub resblocks: Vec<PreparedResBlock<B>>,
    pub down: PreparedConv<B>,
    pub stride: usize,
}

/// Every weight of the encoder, on the backend.
pub struct PreparedEncoder<B: Backend> {
    pub conv_in: PreparedConv<B>,
    pub stages: Vec<PreparedEncStage<B>>,
    pub conv_out: PreparedConv<B>,
    pub layers: Vec<PreparedLayer<B>>,
    /// The downsampling conv as super-columns of `downsample_stride` tokens.
    pub downsample: PreparedConv<B>,
    pub downsample_stride: usize,
    /// `[2 * codebook_dim, hidden]` f32: semantic then acoustic `input_proj`.
    pub proj: B::Buf,
    /// `[books, codebook_dim, codebook_size]` f32.
    pub codebooks: B::Buf,
    /// `[books, codebook_size]` f32 squared norms.
    pub norms: B::Buf,
}

/// Transforms and uploads every encoder weight; fails when the checkpoint has no encoder.
pub fn prepare_encoder<B: Backend>(
    be: &B,
    cfg: &MimiConfig,
    w: &MimiWeights,
) -> Result<PreparedEncoder<B>> {
    let e = encoder_of(w)?;
    let stages = e
        .stages
        .iter()
        .map(|s| {
            let resblocks = s
                .resblocks
                .iter()
                .map(|r| prepare_res_block(be, r))
                .collect::<Result<Vec<_>>>()?;
            Ok(PreparedEncStage {
                resblocks,
                down: prepare_strided(be, &s.down, s.stride)?,
                stride: s.stride,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let layers = e
        .transformer
        .iter()
        .map(|l| prepare_layer(be, l))
        .collect::<Result<Vec<_>>>()?;
    let (proj, codebooks, norms) = quantizer_tables(cfg, w, e)?;
    Ok(PreparedEncoder {
        conv_in: prepare_conv(be, &e.conv_in)?,
        stages,
        conv_out: prepare_conv(be, &e.conv_out)?,
        layers,
        downsample: prepare_strided(be, &e.downsample, e.downsample_stride)?,
        downsample_stride: e.downsample_stride,
        proj: be.upload(&proj, BufRole::Table)?,
        codebooks: be.upload(&codebooks, BufRole::Table)?,
        norms: be.upload(&norms, BufRole::Table)?,
    })
}

/// The encoder side of `w`, or an error naming what is missing.
pub fn encoder_of(w: &MimiWeights) -> Result<&EncoderWeights> {
    w.encoder.as_ref().ok_or_else(|| {
        Error::config(
            OP,
            "this checkpoint has no encoder (no `encoder.*` tensors): it can decode but not encode",
        )
    })
}

/// `[c_out, K / s, s * c_in]` from `[c_out, c_in, K]` (see the module doc).
pub fn super_column_weight(w: &ConvWeights, stride: usize) -> Result<(Vec<f32>, usize, usize)> {
    let [c_out, c_in, kernel] = dims3(&w.weight, "strided conv weight")?;
    if stride == 0 || !kernel.is_multiple_of(stride) || w.dilation != 1 {
        return Err(Error::config(
            OP,
            format!(
                "strided conv: kernel {kernel} must be a multiple of stride {stride}, dilation 1 (found {})",
                w.dilation
            ),
        ));
    }
    let taps = kernel / stride;
    let wide = stride * c_in;
    let mut out = vec![0f32; c_out * taps * wide];
    for o in 0..c_out {
        for i in 0..c_in {
            for m in 0..kernel {
                let (j, p) = (m / stride, m % stride);
                out[(o * taps + j) * wide + p * c_in + i] =
                    w.weight.data[(o * c_in + i) * kernel + m];
            }
        }
    }
    Ok((out, taps, wide))
}

fn prepare_strided<B: Backend>(be: &B, w: &ConvWeights, stride: usize) -> Result<PreparedConv<B>> {
    let (data, taps, wide) = super_column_weight(w, stride)?;
    Ok(PreparedConv {
        w: be.upload(&data, BufRole::Weight)?,
        bias: w
            .bias
            .as_ref()
            .map(|b| be.upload(&b.data, BufRole::Weight))
            .transpose()?,
        c_in: wide,
        c_out: w.weight.shape[0],
        kernel: taps,
        dilation: 1,
    })
}

/// The quantiser's projections, transposed codebooks and their squared norms (f64 sums).
fn quantizer_tables(
    cfg: &MimiConfig,
    w: &MimiWeights,
    e: &EncoderWeights,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (card, cbd, hid) = (cfg.codebook_size, cfg.codebook_dim, cfg.hidden_size);
    let mut proj = Vec::with_capacity(2 * cbd * hid);
    for p in [&e.semantic_input_proj, &e.acoustic_input_proj] {
        p.expect_shape(OP, "input_proj", &[cbd, hid])?;
        proj.extend_from_slice(&p.data);
    }
    let books: Vec<_> = w
        .semantic
        .codebooks
        .iter()
        .chain(&w.acoustic.codebooks)
        .collect();
    let mut table = vec![0f32; books.len() * cbd * card];
    let mut norms = vec![0f32; books.len() * card];
    for (b, book) in books.iter().enumerate() {
        book.expect_shape(OP, "codebook", &[card, cbd])?;
        for c in 0..card {
            let row = &book.data[c * cbd..(c + 1) * cbd];
            norms[b * card + c] = row
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>() as f32;
            for (d, &v) in row.iter().enumerate() {
                table[(b * cbd + d) * card + c] = v;
            }
        }
    }
    Ok((proj, table, norms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::HostTensor;

    /// The super-column conv equals a direct strided causal conv with left zero padding.
    #[test]
    fn super_columns_equal_a_strided_conv() {
        let (c_out, c_in, stride, kernel, time) = (3, 2, 4, 8, 16);
        let weight: Vec<f32> = (0..c_out * c_in * kernel)
            .map(|i| ((i * 7 % 13) as f32) - 6.0)
            .collect();
        let x: Vec<f32> = (0..time * c_in)
            .map(|i| ((i * 5 % 11) as f32) * 0.5 - 2.0)
            .collect();
        let w = ConvWeights {
            weight: HostTensor::new(vec![c_out, c_in, kernel], weight.clone()).unwrap(),
            bias: None,
            dilation: 1,
        };
        let (sw, taps, wide) = super_column_weight(&w, stride).unwrap();
        let pad = kernel - stride;
        let xs = |n: isize, i: usize| if n < 0 { 0.0 } else { x[n as usize * c_in + i] };
        for t in 0..time / stride {
            for o in 0..c_out {
                let mut direct = 0f32;
                for i in 0..c_in {
                    for m in 0..kernel {
                        let n = (t * stride + m) as isize - pad as isize;
                        direct += weight[(o * c_in + i) * kernel + m] * xs(n, i);
                    }
                }
                let mut sup = 0f32;
                for j in 0..taps {
                    let col = t as isize - 1 + j as isize;
                    for q in 0..wide {
                        let (p, i) = (q / c_in, q % c_in);
                        let n = if col < 0 {
                            -1
                        } else {
                            col * stride as isize + p as isize
                        };
                        sup += sw[(o * taps + j) * wide + q] * xs(n, i);
                    }
                }
                assert!(
                    (direct - sup).abs() < 1e-4,
                    "t {t} o {o}: {direct} vs {sup}"
                );
            }
        }
    }
}
