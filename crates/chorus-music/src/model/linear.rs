//! A linear on the device, dense or int8 ConvRot, and the one helper every projection of both
//! models goes through.
//!
//! An int8 product first rotates its input block by block (`LmOps::hadamard`, `x · H`) into a
//! scratch buffer, then multiplies by the int8 rows and scales (`LmOps::linear_q8`): since `H` is
//! symmetric and orthogonal, `x · W^T = (x · H) · (W · H)^T`. A fused product (q/k/v, gate/up)
//! is one weight, so its input is rotated once.

use chorus_core::lm_ops::{HadamardArgs, LinearQ8Args};
use chorus_core::{BufRole, LinearArgs, LmOps, Result};

use crate::quant::HostLinear;

/// A linear's device weights `[out, in]`.
pub enum Linear<B: LmOps> {
    /// Float weights (`LmOps`' storage type).
    Dense(B::Buf),
    /// int8 rows and f32 scales; inputs are rotated in blocks of `group` first.
    Q8 { weight: B::QWeight, group: usize },
}

impl<B: LmOps> Linear<B> {
    /// Uploads a host linear as it is stored.
    pub fn upload(be: &B, host: &HostLinear) -> Result<Self> {
        match host {
            HostLinear::Dense(t) => Ok(Self::Dense(be.upload(&t.data, BufRole::Weight)?)),
            HostLinear::Q8(q) => Ok(Self::Q8 {
                weight: be.upload_q8(&q.data, &q.scales, q.rows, q.cols)?,
                group: q.group,
            }),
        }
    }

    /// True for int8 weights (whose products need a rotation scratch).
    pub fn is_q8(&self) -> bool {
        matches!(self, Self::Q8 { .. })
    }
}

/// Buffers and shape of one product `out[n, m] = x[n, k] · W^T`.
pub struct LinearIo<'a, B: LmOps> {
    /// `[n, k]`.
    pub x: &'a B::Buf,
    /// `[n, k]` scratch for the rotated input (untouched by dense products).
    pub rot: &'a mut B::Buf,
    /// `[n, m]`.
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub k: usize,
    pub m: usize,
}

/// `io.out = io.x · W^T` for either kind of weights.
pub fn linear<B: LmOps>(be: &B, lin: &Linear<B>, io: LinearIo<'_, B>) -> Result<()> {
    let LinearIo {
        x,
        rot,
        out,
        n,
        k,
        m,
    } = io;
    match lin {
        Linear::Dense(w) => be.linear(LinearArgs { x, w, out, n, k, m }),
        Linear::Q8 { weight, group } => {
            be.hadamard(HadamardArgs {
                x,
                out: rot,
                n,
                dim: k,
                group: *group,
            })?;
            be.linear_q8(LinearQ8Args {
                x: rot,
                w: weight,
                out,
                n,
                k,
                m,
            })
        }
    }
}
