//! Optional per-op device timing: while profiling is on, `run` executes programs eagerly and
//! every op is bracketed by CUDA events (never during a capture).

use std::sync::atomic::Ordering;

use chorus_core::Result;
use cudarc::driver::{sys, CudaEvent};

use crate::backend::CudaBackend;
use crate::error::OrCuda;
use crate::memory::lock;

/// Total device time of one op name over the profiled runs.
#[derive(Clone, Debug)]
pub struct OpTime {
    pub op: &'static str,
    pub calls: usize,
    pub total_ms: f32,
}

/// Records the end event of an op when dropped.
pub(crate) struct OpTimer<'a> {
    be: &'a CudaBackend,
    op: &'static str,
    start: Option<CudaEvent>,
}

impl Drop for OpTimer<'_> {
    fn drop(&mut self) {
        let Some(start) = self.start.take() else {
            return;
        };
        // Profiling is diagnostics: an event that cannot be recorded only drops the sample.
        if let Ok(end) = self
            .be
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        {
            if end.record(&self.be.stream).is_ok() {
                lock(&self.be.profile).push((self.op, start, end));
            }
        }
    }
}

impl CudaBackend {
    /// Starts timing op `op` if profiling is on (a no-op guard otherwise).
    pub(crate) fn op_timer(&self, op: &'static str) -> OpTimer<'_> {
        let start =
            if self.profiling.load(Ordering::Relaxed) && !self.capturing.load(Ordering::Relaxed) {
                self.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .ok()
                    .filter(|e| e.record(&self.stream).is_ok())
            } else {
                None
            };
        OpTimer {
            be: self,
            op,
            start,
        }
    }

    /// Turns profiling on or off. While on, `run` executes programs eagerly (no graph) and times
    /// each op; slot state advances as in real steps.
    pub fn set_profiling(&self, on: bool) {
        self.profiling.store(on, Ordering::Relaxed);
    }

    pub(crate) fn profiling(&self) -> bool {
        self.profiling.load(Ordering::Relaxed)
    }

    /// Waits for the profiled work and returns each op call's device time in ms, in order.
    pub fn take_profile_calls(&self) -> Result<Vec<(&'static str, f32)>> {
        self.bind()?;
        self.sync()?;
        let samples = std::mem::take(&mut *lock(&self.profile));
        samples
            .into_iter()
            .map(|(op, start, end)| Ok((op, start.elapsed_ms(&end).or_cuda("cuEventElapsedTime")?)))
            .collect()
    }

    /// Waits for the profiled work and returns the device time per op name, in first-seen order.
    pub fn take_profile(&self) -> Result<Vec<OpTime>> {
        let mut out: Vec<OpTime> = Vec::new();
        for (op, ms) in self.take_profile_calls()? {
            match out.iter_mut().find(|t| t.op == op) {
                Some(t) => {
                    t.calls += 1;
                    t.total_ms += ms;
                }
                None => out.push(OpTime {
                    op,
                    calls: 1,
                    total_ms: ms,
                }),
            }
        }
        Ok(out)
    }
}
