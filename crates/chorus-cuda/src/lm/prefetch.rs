//! A product's first weights into L2 while the kernels before it still run
//! ([`crate::CudaOptions::l2_prefetch_bytes`], kernels/lm_prefetch.cu). Weights never change
//! during a step, so a one-warp-a-multiprocessor kernel launched ahead of the product (with
//! programmatic launch it runs beside its predecessor) streams them while the predecessor drains:
//! the product's first blocks then find their weights in L2 instead of paying a DRAM round trip.

use std::sync::atomic::Ordering;

use chorus_core::Result;

use crate::backend::CudaBackend;
use crate::kernels::{kargs, Kernel, Launch};

/// Threads of a prefetch block: one warp, so that it fits beside any product's blocks.
const THREADS: u32 = 32;
/// The bulk prefetch's sizes are whole multiples of this many bytes.
const ALIGN: usize = 16;

impl CudaBackend {
    /// Prefetches the first [`crate::CudaOptions::l2_prefetch_bytes`] of the weight at `w`
    /// (`rows` rows of `row_bytes`); a fused gate/up weight (`swiglu`) takes half from its first
    /// gate row and half from its first up row, where the product's first blocks read. Nothing
    /// when the option is off.
    pub(crate) fn prefetch_weights(
        &self,
        w: u64,
        rows: usize,
        row_bytes: usize,
        swiglu: bool,
    ) -> Result<()> {
        let budget = self.l2_prefetch_bytes;
        if budget == 0 || rows == 0 {
            return Ok(());
        }
        let total = rows * row_bytes;
        let (a, a_bytes, b, b_bytes) = if swiglu {
            let half = total / 2;
            let each = (budget / 2).min(half) / ALIGN * ALIGN;
            (w, each as u64, w + half as u64, each as u64)
        } else {
            (w, (budget.min(total) / ALIGN * ALIGN) as u64, 0u64, 0u64)
        };
        let cfg = Launch {
            grid: self.sm_count as u32,
            block: THREADS,
            smem: 0,
        };
        self.l2_prefetch_launches.fetch_add(1, Ordering::Relaxed);
        self.launch(
            Kernel::LmL2Prefetch,
            cfg,
            &mut kargs![&a, &a_bytes, &b, &b_bytes],
        )
    }
}
