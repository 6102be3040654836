//! The next product's weights into L2 from the end of the current one
//! ([`crate::CudaOptions::next_prefetch_bytes`], `kernels/lm_skinny.cu`'s `SkNext`).
//!
//! A model tells the backend once in which order a step reads its weights
//! ([`LmOps::sequence_weights`]); each skinny product then carries its successor's first bytes as
//! a kernel argument, and each of its blocks asks L2 for a share of them as it issues its last
//! weight loads. No launch is added, and the DRAM streams the next weights while this product's
//! reduction and epilogue, and the small kernels between the two, run.
//!
//! [`LmOps::sequence_weights`]: chorus_core::LmOps::sequence_weights

use std::sync::atomic::Ordering;

use chorus_core::lm_ops::{LinearWeight, SequencedWeight};
use chorus_core::Result;

use crate::backend::CudaBackend;
use crate::error::cuda_error;
use crate::memory::lock;

/// Warps per skinny block, each summing one k slice (`SK_WARPS`).
const SLICES: usize = 8;
/// Bytes of one weight chunk of a skinny warp's row (`sk_body`'s 64-byte chunks).
const CHUNK_BYTES: usize = 64;

/// A sequenced weight's successor: where it is and how its product reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NextWeight {
    pub(crate) ptr: u64,
    /// Weight rows (both halves of a fused gate/up weight).
    rows: usize,
    row_bytes: usize,
    swiglu: bool,
}

/// `SkNext` of `kernels/lm_skinny.cu`, field by field (a kernel argument by value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SkNext {
    a: u64,
    b: u64,
    row_bytes: i64,
    rows: i32,
    slices: i32,
    slice: i32,
    seg: i32,
}

impl SkNext {
    /// No successor.
    pub(crate) const NONE: Self = Self {
        a: 0,
        b: 0,
        row_bytes: 0,
        rows: 0,
        slices: 0,
        slice: 0,
        seg: 0,
    };
}

impl CudaBackend {
    /// [`chorus_core::LmOps::sequence_weights`]: each weight's successor, by device address.
    pub(crate) fn sequence(&self, seq: &[SequencedWeight<'_, Self>]) -> Result<()> {
        let mut next = Vec::with_capacity(seq.len());
        for s in seq {
            let (ptr, bytes) = match &s.w {
                LinearWeight::Dense(w) => (w.mem.ptr(), w.len * self.esize()),
                LinearWeight::Q8 { weight, .. } => (weight.q.ptr(), weight.rows * weight.cols),
            };
            if s.k == 0 || bytes % (s.k * self.esize_of(&s.w)) != 0 {
                return Err(cuda_error(
                    "sequence_weights",
                    format!("a weight of {bytes} bytes is not whole rows of k = {}", s.k),
                ));
            }
            let row_bytes = s.k * self.esize_of(&s.w);
            next.push(NextWeight {
                ptr,
                rows: bytes / row_bytes,
                row_bytes,
                swiglu: s.swiglu,
            });
        }
        let mut map = lock(&self.successors);
        for pair in next.windows(2) {
            map.insert(pair[0].ptr, pair[1]);
        }
        Ok(())
    }

    fn esize_of(&self, w: &LinearWeight<'_, Self>) -> usize {
        match w {
            LinearWeight::Dense(_) => self.esize(),
            LinearWeight::Q8 { .. } => 1,
        }
    }

    /// The successor prefetch of the product over the weight at `w_ptr` with `n` rows: within
    /// [`crate::CudaOptions::next_prefetch_bytes`], whole rows from the start of each half, or
    /// (`next_prefetch_first_groups`) the first weight group of each warp's slice of each row,
    /// sized as the successor's own skinny launch at `n` rows reads it.
    pub(crate) fn next_of(&self, w_ptr: u64, n: usize) -> SkNext {
        let budget = self.next_prefetch_bytes;
        if budget == 0 {
            return SkNext::NONE;
        }
        let Some(nx) = lock(&self.successors).get(&w_ptr).copied() else {
            return SkNext::NONE;
        };
        let halves = if nx.swiglu { 2 } else { 1 };
        let (slices, slice, seg) = if self.next_prefetch_first_groups {
            let slice = nx.row_bytes / SLICES;
            let seg = (CHUNK_BYTES * super::skinny::chunks_per_group(self, n, nx.rows, nx.swiglu))
                .min(slice);
            (SLICES, slice, seg)
        } else {
            (1, 0, nx.row_bytes)
        };
        let rows = (budget / (halves * slices * seg)).min(nx.rows / halves);
        if rows == 0 || seg % 16 != 0 {
            return SkNext::NONE;
        }
        self.next_prefetch_launches.fetch_add(1, Ordering::Relaxed);
        let b = if nx.swiglu {
            nx.ptr + (nx.rows / 2 * nx.row_bytes) as u64
        } else {
            0
        };
        SkNext {
            a: nx.ptr,
            b,
            row_bytes: nx.row_bytes as i64,
            rows: rows as i32,
            slices: slices as i32,
            slice: slice as i32,
            seg: seg as i32,
        }
    }
}
