//! Load-time q/k row permutations between the two RoPE pairings: interleaved pairs `(2j, 2j + 1)`
//! (torchtune, Kyutai's moshi) and rotate-half pairs `(j, j + d/2)` (transformers, and the only
//! pairing `LmOps::qk_norm_rope` runs). Permuting the q and k rows of a head alike leaves every
//! attention score unchanged, so a model with interleaved RoPE runs on the rotate-half op with
//! its weights permuted once, as transformers' conversion scripts do (`convert_csm.py`,
//! `convert_kyutai_speech_to_text_to_hf.py`: `permute_for_rope`).

use chorus_core::{Error, HostTensor, Result};

/// `permute_for_rope` on a `[heads * head_dim, in]` weight: within each head, new row
/// `r * (d/2) + j` is old row `2j + r` (interleaved pairs to rotate-half pairs).
pub fn interleaved_to_half(t: &HostTensor, heads: usize, head_dim: usize) -> Result<HostTensor> {
    permute_rows(t, heads, head_dim, |r, j, half| (r * half + j, 2 * j + r))
}

/// The inverse of [`interleaved_to_half`] (rotate-half rows back to interleaved order).
pub fn half_to_interleaved(t: &HostTensor, heads: usize, head_dim: usize) -> Result<HostTensor> {
    permute_rows(t, heads, head_dim, |r, j, half| (2 * j + r, r * half + j))
}

/// Row permutation within each head; `map(r, j, d/2)` gives (destination row, source row).
fn permute_rows(
    t: &HostTensor,
    heads: usize,
    head_dim: usize,
    map: impl Fn(usize, usize, usize) -> (usize, usize),
) -> Result<HostTensor> {
    let rows = heads * head_dim;
    if t.shape.len() != 2 || t.shape[0] != rows || !head_dim.is_multiple_of(2) {
        return Err(Error::Shape {
            op: "q/k RoPE permutation",
            name: format!("weight of {heads} heads x {head_dim}"),
            expected: vec![rows, t.shape.get(1).copied().unwrap_or(0)],
            found: t.shape.clone(),
        });
    }
    let cols = t.shape[1];
    let half = head_dim / 2;
    let mut data = vec![0f32; t.data.len()];
    for h in 0..heads {
        for r in 0..2 {
            for j in 0..half {
                let (dst, src) = map(r, j, half);
                let (dst, src) = ((h * head_dim + dst) * cols, (h * head_dim + src) * cols);
                data[dst..dst + cols].copy_from_slice(&t.data[src..src + cols]);
            }
        }
    }
    HostTensor::new(t.shape.clone(), data)
}
