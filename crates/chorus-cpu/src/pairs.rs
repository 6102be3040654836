//! Two-tap products in pairs of outputs with three products instead of four (Toom-Cook F(2,2),
//! Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016).
//!
//! Mimi's strided convolutions have kernels of twice their stride, so as super-columns (the
//! encoder's downsampling) or output blocks (the decoder's transposed convolutions) they are
//! two-tap convolutions over rows `v`: `out[j] = v[j] P + v[j + 1] Q`. For a pair of outputs,
//!
//!   m1 = (v[2i] - v[2i+1]) P,  m2 = v[2i+1] (P + Q),  m3 = (v[2i+2] - v[2i+1]) Q,
//!   out[2i] = m1 + m2,  out[2i+1] = m2 + m3,
//!
//! three products of half the rows where the direct form has two of all of them: a quarter fewer
//! multiplications. `P + Q` is summed once per weight (cached in its buffer, `CpuBuf::pair_sum`).
//! Only the long (whole-file) paths take it; streaming steps keep the row-invariant direct form.

use crate::gemm::MatMul;
use crate::{check, math};
use chorus_core::Result;

/// A `[k, n]` right-hand side read at element `(i, j)` from `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Rhs<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// The two taps and their sum.
#[derive(Clone, Copy)]
pub(crate) struct Taps<'a> {
    pub p: Rhs<'a>,
    pub q: Rhs<'a>,
    pub sum: Rhs<'a>,
}

/// Scratch elements [`run`] needs for `pairs` pairs of `k`-wide rows into `n` columns.
pub(crate) fn scratch_len(pairs: usize, k: usize, n: usize) -> usize {
    pairs * (2 * k + n)
}

/// One call: `out[j] (+)= v[j] P + v[j + 1] Q` for `j < 2 * pairs`.
pub(crate) struct Pairs<'a> {
    /// `2 * pairs + 1` rows of `k`.
    pub v: &'a [f32],
    pub pairs: usize,
    pub k: usize,
    pub n: usize,
    pub taps: Taps<'a>,
    /// Add to `out` instead of overwriting it.
    pub accumulate: bool,
}

impl Pairs<'_> {
    /// Into `out`'s first `2 * pairs` contiguous rows of `n`, with [`scratch_len`] of scratch.
    pub(crate) fn run(self, out: &mut [f32], scratch: &mut [f32]) -> Result<()> {
        const OP: &str = "two-tap pairs";
        let Pairs {
            v,
            pairs,
            k,
            n,
            taps,
            accumulate,
        } = self;
        if pairs == 0 {
            return Ok(());
        }
        check::at_least(OP, "v", v.len(), (2 * pairs + 1) * k)?;
        check::at_least(OP, "out", out.len(), 2 * pairs * n)?;
        check::at_least(OP, "scratch", scratch.len(), scratch_len(pairs, k, n))?;
        let (d1, rest) = scratch.split_at_mut(pairs * k);
        let (d3, rest) = rest.split_at_mut(pairs * k);
        let m2 = &mut rest[..pairs * n];
        for i in 0..pairs {
            let (a, mid, b) = (
                &v[2 * i * k..(2 * i + 1) * k],
                &v[(2 * i + 1) * k..(2 * i + 2) * k],
                &v[(2 * i + 2) * k..(2 * i + 3) * k],
            );
            for c in 0..k {
                d1[i * k + c] = a[c] - mid[c];
                d3[i * k + c] = b[c] - mid[c];
            }
        }
        let product = |dst: &mut [f32], lhs: &[f32], lhs_rs: usize, rhs: Rhs<'_>, dst_rs, acc| {
            MatMul {
                m: pairs,
                n,
                k,
                dst,
                dst_rs,
                lhs,
                lhs_rs,
                lhs_cs: 1,
                rhs: rhs.data,
                rhs_rs: rhs.rs,
                rhs_cs: rhs.cs,
                accumulate: acc,
                threads: 1,
            }
            .run(OP)
        };
        product(out, d1, k, taps.p, 2 * n, accumulate)?;
        product(&mut out[n..], d3, k, taps.q, 2 * n, accumulate)?;
        product(m2, &v[k..], 2 * k, taps.sum, n, false)?;
        for (pair, m) in out.chunks_exact_mut(2 * n).zip(m2.chunks_exact(n)) {
            let (even, odd) = pair.split_at_mut(n);
            math::axpy(even, 1.0, m);
            math::axpy(odd, 1.0, m);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The pairs against the direct two-tap sum in f64, with taps read through strides
    /// (`[n, k]` storage, as the stride-one convolution keeps them) and a prior `out`.
    #[test]
    fn pairs_equal_the_direct_two_tap_sum() {
        let (k, n, pairs) = (24, 10, 5);
        let v = lcg((2 * pairs + 1) * k, 1);
        // Taps stored as [n, 2, k] (a kernel-2 convolution's [c_out, kernel, c_in]).
        let w = lcg(n * 2 * k, 2);
        let sum: Vec<f32> = (0..n * k)
            .map(|e| w[(e / k) * 2 * k + e % k] + w[(e / k) * 2 * k + k + e % k])
            .collect();
        let taps = Taps {
            p: Rhs {
                data: &w,
                rs: 1,
                cs: 2 * k,
            },
            q: Rhs {
                data: &w[k..],
                rs: 1,
                cs: 2 * k,
            },
            sum: Rhs {
                data: &sum,
                rs: 1,
                cs: k,
            },
        };
        let prior = lcg(2 * pairs * n, 3);
        let mut out = prior.clone();
        let mut scratch = vec![0.0; scratch_len(pairs, k, n)];
        let call = |accumulate| Pairs {
            v: &v,
            pairs,
            k,
            n,
            taps,
            accumulate,
        };
        call(true).run(&mut out, &mut scratch).expect("pairs");
        let mut worst = 0.0f64;
        for j in 0..2 * pairs {
            for o in 0..n {
                let mut y = prior[j * n + o] as f64;
                for c in 0..k {
                    y += v[j * k + c] as f64 * w[o * 2 * k + c] as f64
                        + v[(j + 1) * k + c] as f64 * w[o * 2 * k + k + c] as f64;
                }
                worst = worst.max((out[j * n + o] as f64 - y).abs());
            }
        }
        assert!(worst < 1e-5, "largest difference {worst}");
        // Overwriting instead of accumulating leaves no trace of the prior contents.
        let mut fresh = vec![7.0; 2 * pairs * n];
        call(false).run(&mut fresh, &mut scratch).expect("pairs");
        for (f, (o, p)) in fresh.iter().zip(out.iter().zip(&prior)) {
            assert!((f - (o - p)).abs() < 1e-5, "{f} against {}", o - p);
        }
    }
}
