//! A Prometheus histogram of seconds over fixed bounds, written from any thread.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most bounds a histogram has (`+Inf` besides).
pub(crate) const MAX_BOUNDS: usize = 15;

/// Counts per bound (non-cumulative) plus `+Inf`, and the sum, over `bounds` (ascending, at most
/// [`MAX_BOUNDS`]).
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: [AtomicU64; MAX_BOUNDS + 1],
    /// Sum of seconds as f64 bits.
    sum: AtomicU64,
}

impl Histogram {
    pub(crate) const fn new(bounds: &'static [f64]) -> Self {
        assert!(bounds.len() <= MAX_BOUNDS, "too many histogram bounds");
        Self {
            bounds,
            counts: [const { AtomicU64::new(0) }; MAX_BOUNDS + 1],
            sum: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, seconds: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::SeqCst);
        // Several writers may observe at once: add to the sum's bits with a compare-exchange.
        let _ = self
            .sum
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |bits| {
                Some((f64::from_bits(bits) + seconds).to_bits())
            });
    }

    /// Appends the histogram `name` in the Prometheus text format.
    pub(crate) fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (bound, n) in self.bounds.iter().zip(&self.counts) {
            acc += n.load(Ordering::SeqCst);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {acc}");
        }
        acc += self.counts[self.bounds.len()].load(Ordering::SeqCst);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {acc}");
        let sum = f64::from_bits(self.sum.load(Ordering::SeqCst));
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {acc}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_rest_is_infinite() {
        static BOUNDS: [f64; 2] = [0.25, 1.0];
        let h = Histogram::new(&BOUNDS);
        for s in [0.125, 0.25, 0.5, 3.0] {
            h.observe(s);
        }
        let mut out = String::new();
        h.render(&mut out, "t_seconds", "Test.");
        assert!(out.contains("t_seconds_bucket{le=\"0.25\"} 2\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("t_seconds_sum 3.875\n"), "{out}");
        assert!(out.contains("t_seconds_count 4"), "{out}");
    }
}
