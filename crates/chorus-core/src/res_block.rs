//! The SEANet residual block as one op, so that a backend may keep its hidden activation on chip.

use crate::backend::{Backend, Conv1dArgs, Conv1dGeom};
use crate::Result;

/// Geometry of a SEANet residual block (moshi `modules/seanet.py`, `SEANetResnetBlock` with a
/// true skip): a causal convolution of `kernel` taps from `c` to `hidden` channels, then a
/// pointwise one back to `c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResBlockGeom {
    pub rows: usize,
    /// Time steps per row.
    pub time: usize,
    pub c: usize,
    pub hidden: usize,
    pub kernel: usize,
    pub dilation: usize,
}

impl ResBlockGeom {
    /// The first (causal) convolution; its input is ELU'd and its history is ELU'd columns.
    pub fn first(&self) -> Conv1dGeom {
        Conv1dGeom {
            rows: self.rows,
            time: self.time,
            c_in: self.c,
            c_out: self.hidden,
            kernel: self.kernel,
            dilation: self.dilation,
            elu_input: true,
        }
    }

    /// The second (pointwise) convolution.
    pub fn second(&self) -> Conv1dGeom {
        Conv1dGeom {
            rows: self.rows,
            time: self.time,
            c_in: self.hidden,
            c_out: self.c,
            kernel: 1,
            dilation: 1,
            elu_input: true,
        }
    }
}

/// `out = x + b2 + w2 . ELU(b1 + w1 * xin)` where `xin[r] = concat(state[slots[r]], ELU(x[r]))`
/// along time and `*` is the causal convolution of [`crate::Conv1dArgs`]; the last `history`
/// columns of `xin[r]` are written back to `state[slots[r]]`.
pub struct ResBlockArgs<'a, B: Backend + ?Sized> {
    /// `[rows, time, c]`.
    pub x: &'a B::Buf,
    /// `[hidden, kernel, c]`.
    pub w1: &'a B::Buf,
    /// `[hidden]`.
    pub b1: Option<&'a B::Buf>,
    /// `[total_rows, history, c]`; `None` only when the history is empty.
    pub state: Option<&'a mut B::Buf>,
    /// `[rows]`.
    pub slots: &'a B::Ints,
    /// `[c, 1, hidden]`.
    pub w2: &'a B::Buf,
    /// `[c]`.
    pub b2: Option<&'a B::Buf>,
    /// `[rows, time, hidden]`: the hidden activation, for a backend that runs the two
    /// convolutions apart (a fused backend may leave it untouched).
    pub hidden: &'a mut B::Buf,
    /// `[rows, time, c]`.
    pub out: &'a mut B::Buf,
    pub geom: ResBlockGeom,
}

impl<'a, B: Backend + ?Sized> ResBlockArgs<'a, B> {
    /// Runs the block as its two convolutions through `hidden`, for a backend (or a shape) that
    /// does not fuse them.
    pub fn apart(self, mut conv: impl FnMut(Conv1dArgs<'_, B>) -> Result<()>) -> Result<()> {
        let g = self.geom;
        conv(Conv1dArgs {
            x: self.x,
            w: self.w1,
            bias: self.b1,
            state: self.state,
            slots: self.slots,
            residual: None,
            out: &mut *self.hidden,
            geom: g.first(),
        })?;
        conv(Conv1dArgs {
            x: self.hidden,
            w: self.w2,
            bias: self.b2,
            state: None,
            slots: self.slots,
            residual: Some(self.x),
            out: self.out,
            geom: g.second(),
        })
    }
}
