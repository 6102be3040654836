//! Labelled counters of the model endpoints: requests refused by error code, running jobs
//! cancelled by reason.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::StageErrorCode;
use super::job::{CancelKind, CANCEL_LABELS};

/// Requests that never became a running job, by the error they got.
#[derive(Default)]
pub(crate) struct Refusals([AtomicU64; StageErrorCode::ALL.len()]);

impl Refusals {
    pub(crate) fn inc(&self, code: StageErrorCode) {
        if let Some(i) = StageErrorCode::ALL.iter().position(|&c| c == code) {
            self.0[i].fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(crate) fn get(&self, code: StageErrorCode) -> u64 {
        StageErrorCode::ALL
            .iter()
            .position(|&c| c == code)
            .map_or(0, |i| self.0[i].load(Ordering::SeqCst))
    }

    /// Appends counter `name` with a `code` label for every code refused at least once.
    pub(crate) fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (code, n) in StageErrorCode::ALL.iter().zip(&self.0) {
            let n = n.load(Ordering::SeqCst);
            if n > 0 {
                let _ = writeln!(out, "{name}{{code=\"{}\"}} {n}", code.as_str());
            }
        }
    }
}

/// Running jobs cancelled, by reason.
#[derive(Default)]
pub(crate) struct Cancels([AtomicU64; CANCEL_LABELS.len()]);

impl Cancels {
    pub(crate) fn inc(&self, kind: CancelKind) {
        self.0[kind as usize].fetch_add(1, Ordering::SeqCst);
    }

    /// Appends counter `name` with a `reason` label for every reason.
    pub(crate) fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (label, n) in CANCEL_LABELS.iter().zip(&self.0) {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{label}\"}} {}",
                n.load(Ordering::SeqCst)
            );
        }
    }
}
