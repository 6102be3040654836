//! Grow-only scratch memory shared by the ops of one backend.
//!
//! Ops run one at a time (a program is a sequence of calls), so one arena suffices; it grows only
//! when an op needs more than any earlier op did, which happens during the first step of each
//! bucket. Steady-state steps therefore never allocate.

use std::sync::Mutex;

/// One grow-only f32 arena.
#[derive(Default)]
pub(crate) struct Scratch {
    buf: Mutex<Vec<f32>>,
}

impl Scratch {
    /// Runs `f` over `len` scratch elements (contents unspecified).
    pub(crate) fn with<R>(&self, len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
        // A poisoned lock only means an op panicked; the scratch contents carry no invariant.
        let mut guard = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        if guard.len() < len {
            guard.resize(len, 0.0);
        }
        f(&mut guard[..len])
    }

    /// Current size in elements (for tests of the no-growth property).
    pub(crate) fn capacity(&self) -> usize {
        self.buf.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
