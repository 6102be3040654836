//! Counter-based random numbers: one copy of splitmix64 for weights, noise and test data.
//!
//! splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", OOPSLA 2014)
//! makes every value a pure function of a key and a counter, so any element can be drawn alone,
//! in any order, on any backend, and numpy reproduces it with vectorised uint64 arithmetic
//! (`tools/fixtures/weightgen.py`).

/// splitmix64's increment (the golden ratio in 64-bit fixed point).
pub const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Bits of each 64-bit draw kept for a uniform weight value (exact in f32).
const UNIFORM_BITS: u32 = 24;
/// Multipliers of the Exp(1) noise counter (`MUSIC_SEMANTIC.md` §7, `exp_noise`): seed, draw
/// index and element index are mixed linearly, then finalised by [`mix64`].
const NOISE_SEED_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
const NOISE_DRAW_MUL: u64 = 0xd1b5_4a32_d192_ed03;
const NOISE_INDEX_MUL: u64 = 0x94d0_49bb_1331_11eb;
/// Bits of a noise draw kept for the uniform in (0, 1): a double's mantissa.
const NOISE_BITS: u32 = 53;

/// FNV-1a over the bytes of `s`.
pub fn fnv1a64(s: &str) -> u64 {
    s.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// splitmix64's output function.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform values in [-1, 1) for elements `start..start + n` of the tensor called `name`: element
/// `i` is splitmix64 at counter `i + 1` from the key `mix64(seed ^ fnv1a64(name))`, top 24 bits.
pub fn uniform_range(seed: u64, name: &str, start: usize, n: usize) -> Vec<f32> {
    let key = mix64(seed ^ fnv1a64(name));
    let half = 1i32 << (UNIFORM_BITS - 1);
    let step = 1.0f32 / half as f32;
    (start as u64..(start + n) as u64)
        .map(|i| {
            let z = mix64(key.wrapping_add((i + 1).wrapping_mul(GAMMA)));
            ((z >> (64 - UNIFORM_BITS)) as i32 - half) as f32 * step
        })
        .collect()
}

/// `n` uniform values in [-1, 1) for tensor `name` (see [`uniform_range`]).
pub fn uniform(seed: u64, name: &str, n: usize) -> Vec<f32> {
    uniform_range(seed, name, 0, n)
}

/// How one seeded weight tensor is drawn: element value `u * scale + offset` in f32 (two
/// roundings, no FMA), `u` from [`uniform_range`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Init {
    pub scale: f32,
    pub offset: f32,
}

/// Elements drawn per parallel task (the draw is a pure function of the index, so chunks can go
/// to any thread in any order).
const DRAW_CHUNK: usize = 1 << 20;

/// Rows `rows` of tensor `name` (row width `cols`) under `init`, drawn on every core.
pub fn draw_rows(
    seed: u64,
    name: &str,
    rows: std::ops::Range<usize>,
    cols: usize,
    init: Init,
) -> Vec<f32> {
    use rayon::prelude::*;
    let (start, n) = (rows.start * cols, rows.len() * cols);
    let mut data = vec![0f32; n];
    data.par_chunks_mut(DRAW_CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let first = start + c * DRAW_CHUNK;
            let len = chunk.len();
            for (x, u) in chunk.iter_mut().zip(uniform_range(seed, name, first, len)) {
                *x = u * init.scale + init.offset;
            }
        });
    data
}

/// The Exp(1) variate for element `index` of draw `draw` under `seed`:
/// `U = ((z >> 11) + 0.5) * 2^-53` with `z` the mixed counter, then `-ln U` in f64, rounded to f32.
/// Equals `exp_noise(seed, draw, n)[index]` of the oracle (`tools/fixtures/music_oracle.py`).
#[inline]
pub fn exp_noise(seed: u64, draw: u64, index: u64) -> f32 {
    let z = seed
        .wrapping_mul(NOISE_SEED_MUL)
        .wrapping_add(draw.wrapping_mul(NOISE_DRAW_MUL))
        .wrapping_add(index.wrapping_mul(NOISE_INDEX_MUL));
    let u = ((mix64(z) >> (64 - NOISE_BITS)) as f64 + 0.5) * (-(NOISE_BITS as f64)).exp2();
    (-u.ln()) as f32
}

/// A small sequential generator for test data and load generation (splitmix64 proper).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64-bit value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_range_is_a_window_of_uniform() {
        let all = uniform(7, "w", 100);
        assert_eq!(uniform_range(7, "w", 40, 10), all[40..50].to_vec());
        assert!(all.iter().all(|&x| (-1.0..1.0).contains(&x)));
    }

    #[test]
    fn exp_noise_is_positive_and_has_unit_mean() {
        let n = 100_000;
        let mean = (0..n).map(|i| exp_noise(3, 5, i) as f64).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.02, "mean {mean}");
        assert!((0..n).all(|i| exp_noise(3, 5, i) > 0.0));
        assert_ne!(exp_noise(3, 5, 0), exp_noise(3, 6, 0));
    }
}
