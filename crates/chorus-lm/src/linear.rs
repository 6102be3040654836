//! A linear on the device, dense or int8 ConvRot, and the one helper every projection of every
//! model goes through.
//!
//! Every projection is one `LmOps::fused_linear`: the pre-norm before it, the int8 rotation, and
//! the residual add or SwiGLU after it belong to the op, so a backend can run them in the
//! product's kernel. An int8 product rotates its input block by block (`x · H`) before the int8
//! rows and scales: since `H` is symmetric and orthogonal, `x · W^T = (x · H) · (W · H)^T`. A
//! fused product (q/k/v, gate/up) is one weight, so its input is rotated once.

use chorus_core::lm_ops::{Epilogue, FusedLinearArgs, LinearScratch, LinearWeight, RowNorm};
use chorus_core::{BufRole, LmOps, Result};

use crate::host_linear::HostLinear;

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

    /// The weight as a product takes it.
    pub fn weight(&self) -> LinearWeight<'_, B> {
        match self {
            Self::Dense(w) => LinearWeight::Dense(w),
            Self::Q8 { weight, group } => LinearWeight::Q8 {
                weight,
                group: *group,
            },
        }
    }

    /// True for int8 weights (whose products need a rotation scratch).
    pub fn is_q8(&self) -> bool {
        matches!(self, Self::Q8 { .. })
    }
}

/// Buffers, shape and fusions of one product `out[n, ..] = epilogue(norm?(x)[n, k] · W^T)`
/// ([`FusedLinearArgs`]).
pub struct LinearIo<'a, B: LmOps> {
    /// `[n, k]`.
    pub x: &'a B::Buf,
    /// An RMSNorm of `x`'s rows before the product.
    pub norm: Option<RowNorm<'a, B>>,
    /// `[n, m]` (`[n, m / 2]` with [`Epilogue::Swiglu`]).
    pub out: &'a mut B::Buf,
    /// Intermediates of a backend that runs the fusions apart.
    pub scratch: LinearScratch<'a, B>,
    pub n: usize,
    pub k: usize,
    pub m: usize,
    pub epilogue: Epilogue,
}

impl<'a, B: LmOps> LinearIo<'a, B> {
    /// `out = epilogue(x · W^T)` for `[n, k, m]`, with no pre-norm.
    pub fn new(
        x: &'a B::Buf,
        out: &'a mut B::Buf,
        scratch: LinearScratch<'a, B>,
        [n, k, m]: [usize; 3],
        epilogue: Epilogue,
    ) -> Self {
        Self {
            x,
            norm: None,
            out,
            scratch,
            n,
            k,
            m,
            epilogue,
        }
    }

    /// The same product of an RMSNorm (`weight`, `eps`) of `x`'s rows.
    pub fn normed(self, weight: &'a B::Buf, eps: f32) -> Self {
        let norm = Some(RowNorm { weight, eps });
        Self { norm, ..self }
    }
}

/// The product of `io` with either kind of weights, as one [`LmOps::fused_linear`].
pub fn linear<B: LmOps>(be: &B, lin: &Linear<B>, io: LinearIo<'_, B>) -> Result<()> {
    be.fused_linear(FusedLinearArgs {
        x: io.x,
        norm: io.norm,
        w: lin.weight(),
        out: io.out,
        scratch: io.scratch,
        n: io.n,
        k: io.k,
        m: io.m,
        epilogue: io.epilogue,
    })
}
