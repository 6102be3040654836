//! Host weights of a linear, dense or int8 ConvRot (`chorus_core::convrot`; MiniMax's recipe in
//! `MUSIC_SEMANTIC.md` §5.6): quantization by the writer's formula (rows in parallel), the
//! dequantized form, and row concatenation for the fused projections. Which linears of a model
//! are int8 is the model crate's business; these types only hold and fuse them.
//!
//! Fusion and int8: q/k/v (and gate/up) concatenate along the output axis, int8 rows and their
//! scales alike, so one rotation of the shared input serves the whole fused product. Parts of one
//! fused product must agree: all int8 with one group, or else the product is dense and its int8
//! parts are dequantized (`W = (q * s) · blockdiag(H)`, the same linear map to f32 rounding).

use rayon::prelude::*;

use chorus_core::convrot::{check_group, dequantize_row, quantize_row};
use chorus_core::{Error, HostTensor, Result};

/// Weight rows per parallel task of the quantizer.
const ROWS_PER_TASK: usize = 64;

/// An int8 ConvRot weight on the host: `[rows, cols]` int8, one f32 scale per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Tensor {
    pub rows: usize,
    pub cols: usize,
    /// Hadamard block size along `cols`.
    pub group: usize,
    /// `[rows, cols]` row-major.
    pub data: Vec<i8>,
    /// `[rows]`.
    pub scales: Vec<f32>,
}

impl Q8Tensor {
    /// Quantizes `w` `[rows, cols]` by the writer's formula, rows in parallel (`w` is consumed:
    /// its rows are rotated in place).
    pub fn quantize(mut w: HostTensor, group: usize) -> Result<Self> {
        const OP: &str = "Q8Tensor::quantize";
        let &[rows, cols] = w.shape.as_slice() else {
            return Err(Error::input(
                OP,
                format!("a linear weight is 2-D, not {:?}", w.shape),
            ));
        };
        check_group(OP, group, cols)?;
        let mut data = vec![0i8; rows * cols];
        let mut scales = vec![0f32; rows];
        if cols > 0 {
            let chunk = ROWS_PER_TASK * cols;
            w.data
                .par_chunks_mut(chunk)
                .zip(data.par_chunks_mut(chunk))
                .zip(scales.par_chunks_mut(ROWS_PER_TASK))
                .try_for_each(|((wr, qr), sr)| {
                    for ((row, q), s) in wr.chunks_mut(cols).zip(qr.chunks_mut(cols)).zip(sr) {
                        *s = quantize_row(row, group, q)?;
                    }
                    Ok::<(), Error>(())
                })?;
        }
        Ok(Self {
            rows,
            cols,
            group,
            data,
            scales,
        })
    }

    /// The float weights `W = (q * s) · blockdiag(H_group)`, rows in parallel.
    pub fn dequantize(&self) -> Result<HostTensor> {
        let cols = self.cols;
        let mut out = vec![0f32; self.rows * cols];
        if cols > 0 {
            out.par_chunks_mut(cols)
                .zip(self.data.par_chunks(cols))
                .zip(self.scales.par_iter())
                .try_for_each(|((o, q), &s)| dequantize_row(q, s, self.group, o))?;
        }
        HostTensor::new(vec![self.rows, cols], out)
    }
}

/// A linear's host weights `[out, in]`: dense f32, or int8 ConvRot.
#[derive(Clone, Debug, PartialEq)]
pub enum HostLinear {
    Dense(HostTensor),
    Q8(Q8Tensor),
}

impl HostLinear {
    /// `[out, in]`.
    pub fn shape(&self) -> [usize; 2] {
        match self {
            HostLinear::Dense(t) => [
                t.shape.first().copied().unwrap_or(0),
                t.shape.get(1).copied().unwrap_or(0),
            ],
            HostLinear::Q8(q) => [q.rows, q.cols],
        }
    }

    /// The dense weights, if dense.
    pub fn dense(&self) -> Option<&HostTensor> {
        match self {
            HostLinear::Dense(t) => Some(t),
            HostLinear::Q8(_) => None,
        }
    }

    /// The int8 weights, if int8.
    pub fn q8(&self) -> Option<&Q8Tensor> {
        match self {
            HostLinear::Dense(_) => None,
            HostLinear::Q8(q) => Some(q),
        }
    }

    /// Parameters (`out * in`).
    pub fn params(&self) -> usize {
        let [o, i] = self.shape();
        o * i
    }

    /// Bytes a product reads: one per int8 weight plus its scales, `dense_bytes` per dense one.
    pub fn bytes(&self, dense_bytes: usize) -> usize {
        match self {
            HostLinear::Dense(_) => self.params() * dense_bytes,
            HostLinear::Q8(q) => q.data.len() + 4 * q.rows,
        }
    }

    /// Concatenates `parts` (same `in`) along the output axis (see the module doc).
    pub fn concat_rows(parts: Vec<HostLinear>) -> Result<HostLinear> {
        const OP: &str = "HostLinear::concat_rows";
        let Some(first) = parts.first() else {
            return Err(Error::input(OP, "nothing to concatenate"));
        };
        let cols = first.shape()[1];
        if let Some(p) = parts.iter().find(|p| p.shape()[1] != cols) {
            return Err(Error::input(
                OP,
                format!("input widths differ: {cols} and {}", p.shape()[1]),
            ));
        }
        let group = first.q8().map(|q| q.group);
        let all_q8 = parts
            .iter()
            .all(|p| p.q8().is_some_and(|q| Some(q.group) == group));
        let rows = parts.iter().map(|p| p.shape()[0]).sum();
        if all_q8 {
            let (mut data, mut scales) = (Vec::new(), Vec::new());
            for p in parts {
                if let HostLinear::Q8(q) = p {
                    data.extend(q.data);
                    scales.extend(q.scales);
                }
            }
            return Ok(HostLinear::Q8(Q8Tensor {
                rows,
                cols,
                group: group.unwrap_or(0),
                data,
                scales,
            }));
        }
        let mut data = Vec::new();
        for p in parts {
            match p {
                HostLinear::Dense(t) => data.extend(t.data),
                HostLinear::Q8(q) => data.extend(q.dequantize()?.data),
            }
        }
        Ok(HostLinear::Dense(HostTensor::new(vec![rows, cols], data)?))
    }
}
