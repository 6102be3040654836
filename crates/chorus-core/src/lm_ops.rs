//! The op family of autoregressive language models (Qwen3 and the RVQ depth decoder of MiniMax
//! Music 3), on top of the device plumbing of [`Backend`].
//!
//! Layout conventions (all row-major, f32 on the CPU):
//! - a *token* is one row of an activation matrix `[tokens, dim]`; a call over `rows` sequences of
//!   `time` new tokens each orders tokens row-major (`token = r * time + t`);
//! - a fused projection output `qkv` is `[tokens, (q_heads + 2 * kv_heads) * head_dim]`: the q heads,
//!   then the k heads, then the v heads, each head's `head_dim` values contiguous;
//! - a paged KV cache (one per layer, K and V apart) is `[num_blocks, block_size, kv_heads *
//!   head_dim]`; row `r` of a call finds position `p` at block `block_tables[r * max_blocks + p /
//!   block_size]`, entry `p % block_size`. Block 0 is the null block: padded rows point at it;
//! - integer inputs (`Ints`) are data, never baked into a program, so one captured program serves
//!   every step of its bucket.
//!
//! Like [`Backend`]'s ops, these are called only inside [`Backend::run`]; the pinned I/O methods
//! `pinned_*` are called outside programs by the host.

use crate::{Backend, Result};

/// `out[r, :] = scale * table[offset + ids[(r / rows_per_id) * ids_stride + ids_col], :]` for `r`
/// in `0..rows` (embedding lookups, per-song state rows). Ids are validated at the API edge.
pub struct GatherArgs<'a, B: Backend + ?Sized> {
    /// `[table_rows, dim]`.
    pub table: &'a B::Buf,
    pub ids: &'a B::Ints,
    /// `[rows, dim]`.
    pub out: &'a mut B::Buf,
    pub rows: usize,
    pub dim: usize,
    /// Output rows that share one id (2: both rows of a CFG pair).
    pub rows_per_id: usize,
    pub ids_stride: usize,
    pub ids_col: usize,
    /// Added to every id (a vocabulary offset such as the first audio token).
    pub offset: usize,
    pub scale: f32,
}

impl<'a, B: Backend + ?Sized> GatherArgs<'a, B> {
    /// The plain lookup `out[r, :] = table[ids[r], :]` for `r` in `0..rows`: one row per id, ids
    /// contiguous, no offset, no scale.
    pub fn lookup(
        table: &'a B::Buf,
        ids: &'a B::Ints,
        out: &'a mut B::Buf,
        (rows, dim): (usize, usize),
    ) -> Self {
        Self {
            table,
            ids,
            out,
            rows,
            dim,
            rows_per_id: 1,
            ids_stride: 1,
            ids_col: 0,
            offset: 0,
            scale: 1.0,
        }
    }
}

/// `table[ids[r], :] = src[r, :]` for `r` in `0..rows`, in row order (padded rows may all name
/// the dummy row; the last write wins).
pub struct ScatterArgs<'a, B: Backend + ?Sized> {
    /// `[rows, dim]`.
    pub src: &'a B::Buf,
    pub ids: &'a B::Ints,
    /// `[table_rows, dim]`.
    pub table: &'a mut B::Buf,
    pub rows: usize,
    pub dim: usize,
}

/// `dst[dst_offset + r * dst_stride + i] = src[src_offset + r * src_stride + i]` for `r < rows`,
/// `i < len` (strided row copies: one row of each CFG pair, the last token of a prompt).
pub struct CopyRowsArgs<'a, B: Backend + ?Sized> {
    pub src: &'a B::Buf,
    pub dst: &'a mut B::Buf,
    pub rows: usize,
    pub len: usize,
    pub src_offset: usize,
    pub src_stride: usize,
    pub dst_offset: usize,
    pub dst_stride: usize,
}

/// The LM feedback embedding of MiniMax Music 3 (`MUSIC_SEMANTIC.md` §3 step 8), both rows of a
/// pair alike: with `s = r / 2` and `c = codes[s * codes_stride ..]`,
/// `out[r] = scale * (embed[offset + c[0]] + sum_{l = 1..levels} audio[(l - 1) * cardinality + c[l]])`,
/// the `levels - 1` audio rows summed first in order of `l`, then added to the embed row.
pub struct FeedbackArgs<'a, B: Backend + ?Sized> {
    /// `[vocab, dim]`: the LM's `embed_tokens`.
    pub embed: &'a B::Buf,
    /// `[(levels - 1) * cardinality, dim]`: the depth decoder's `audio_embeddings`.
    pub audio: &'a B::Buf,
    /// `[songs, codes_stride]` with `levels <= codes_stride` codes per song.
    pub codes: &'a B::Ints,
    /// `[2 * songs, dim]`.
    pub out: &'a mut B::Buf,
    pub songs: usize,
    pub dim: usize,
    pub levels: usize,
    pub codes_stride: usize,
    pub offset: usize,
    pub cardinality: usize,
    pub scale: f32,
}

/// The input row of a multi-codebook LM (CSM's backbone, `CSM.md` §3.2): one text embedding and
/// one audio embedding per codebook, each present or not, summed. For row `r` with
/// `t = ids[r * stride + text_col]` and `c_l = ids[r * stride + codes_col + l]`:
/// `out[r] = (text and t >= 0 ? text[t] : 0) + sum_{l < levels, c_l >= 0} audio[l * cardinality + c_l]`,
/// in f32, the text row first and then the codebooks in order, rounded once. A negative entry is
/// absent; a present one past its table is a caller bug (the CPU backend names it, CUDA adds
/// nothing for it).
pub struct EmbedSumArgs<'a, B: Backend + ?Sized> {
    /// `[text_vocab, dim]`; `None`: no text column.
    pub text: Option<&'a B::Buf>,
    /// `[levels * cardinality, dim]`: codebook `l`'s code `c` is row `l * cardinality + c`.
    pub audio: &'a B::Buf,
    /// `[rows, stride]`.
    pub ids: &'a B::Ints,
    /// `[rows, dim]`.
    pub out: &'a mut B::Buf,
    pub rows: usize,
    pub dim: usize,
    pub stride: usize,
    pub text_col: usize,
    pub codes_col: usize,
    pub levels: usize,
    pub cardinality: usize,
}

/// Fused residual add and RMSNorm over `n` rows of `dim`: first `residual += delta` (when given),
/// then `out = residual * rsqrt(mean(residual^2) + eps) * weight`, all in f32.
pub struct RmsNormArgs<'a, B: Backend + ?Sized> {
    /// `[n, dim]`, updated in place when `delta` is given.
    pub residual: &'a mut B::Buf,
    /// `[n, dim]`.
    pub delta: Option<&'a B::Buf>,
    /// `[dim]`.
    pub weight: &'a B::Buf,
    /// `[n, dim]`.
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub dim: usize,
    pub eps: f32,
}

/// `x[r, :] += table[row * dim .. (row + 1) * dim]` for `r < n` (a learned position embedding).
pub struct AddRowArgs<'a, B: Backend + ?Sized> {
    /// `[n, dim]`.
    pub x: &'a mut B::Buf,
    /// `[_, dim]`.
    pub table: &'a B::Buf,
    pub row: usize,
    pub n: usize,
    pub dim: usize,
}

/// Geometry shared by the attention-side ops of one call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadGeom {
    /// Sequences in the call (2 per song).
    pub rows: usize,
    /// New tokens per sequence.
    pub time: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl HeadGeom {
    /// Width of one token of a fused `qkv`.
    pub fn qkv_width(&self) -> usize {
        (self.q_heads + 2 * self.kv_heads) * self.head_dim
    }

    /// Tokens in the call.
    pub fn tokens(&self) -> usize {
        self.rows * self.time
    }
}

/// Optional per-head RMSNorm of q and k, then rotate-half RoPE, in place on the q and k heads of
/// `qkv`; v is untouched. Qwen3 norms (`MUSIC_SEMANTIC.md` §1.3 steps 3-4); Llama-style models
/// (CSM, `CSM.md` §1.1) rotate only.
///
/// For token `t` of row `r` at position `p = start[r] + t`: each head `x` becomes, with
/// `qk_norm = Some([q_norm, k_norm])`, `y = x * rsqrt(mean(x^2) + eps) * norm` (q heads with
/// `q_norm`, k heads with `k_norm`), else `y = x`; then for `j < half = head_dim / 2`:
/// `y'[j] = y[j] cos - y[j + half] sin`, `y'[j + half] = y[j + half] cos + y[j] sin` with
/// `cos = rope[p, 0, j]`, `sin = rope[p, 1, j]`.
pub struct QkNormRopeArgs<'a, B: Backend + ?Sized> {
    /// `[tokens, qkv_width]`.
    pub qkv: &'a mut B::Buf,
    /// `[q_norm, k_norm]`, each `[head_dim]`; `None`: RoPE only.
    pub qk_norm: Option<[&'a B::Buf; 2]>,
    /// `[max_positions, 2, head_dim / 2]`: cos, then sin (f32 on every backend).
    pub rope: &'a B::Buf,
    /// `[rows]`.
    pub start: &'a B::Ints,
    pub geom: HeadGeom,
    /// Of the q/k norm (unused without one).
    pub eps: f32,
    /// Token of `qkv` the call's first token is (a frame runs its decode rows and a prompt chunk
    /// over one `qkv`, each group in its own call).
    pub first_token: usize,
}

/// Causal GQA attention over a paged KV cache, for prefill (`time` = prompt length) and decode
/// (`time` = 1) alike.
///
/// For token `t` of row `r` at position `p = start[r] + t`, k and v (from `qkv`) are first written
/// to the cache at `p` (all writes of the call land before any read). Then query head `j` attends
/// to the keys of kv head `j / (q_heads / kv_heads)` at positions `0..=p` of row `r`, read through
/// `block_tables`, with softmax scale `1 / sqrt(head_dim)`. Nothing past `p` is read: no mask
/// tensor exists, and stale or unwritten entries beyond the context are never touched.
///
/// With `window = Some(w)` (sliding-window attention, Kyutai's `context`), the keys are the
/// positions `max(0, p + 1 - w)..=p`, and a row's block table is a ring of
/// `ring = max_blocks * block_size` entries: position `kp` lives at ring index `kp % ring`
/// (block `table[(kp % ring) / block_size]`, entry `kp % block_size`), so positions grow without
/// bound over a fixed cache. `ring >= w + time - 1` (the caller's rule) keeps a call's writes
/// off every key its queries read.
pub struct PagedAttentionArgs<'a, B: Backend + ?Sized> {
    /// `[tokens, qkv_width]` (q and k already normed and rotated); only read (mutable so that
    /// [`RopeAttentionArgs`] can rotate it first).
    pub qkv: &'a mut B::Buf,
    /// `[num_blocks, block_size, kv_heads * head_dim]`.
    pub k_cache: &'a mut B::Buf,
    /// Like `k_cache`.
    pub v_cache: &'a mut B::Buf,
    /// `[rows, max_blocks]`.
    pub block_tables: &'a B::Ints,
    /// `[rows]`.
    pub start: &'a B::Ints,
    /// `[tokens, q_heads * head_dim]`.
    pub out: &'a mut B::Buf,
    pub geom: HeadGeom,
    pub block_size: usize,
    pub max_blocks: usize,
    /// Token of `qkv` and of `out` the call's first token is (see [`QkNormRopeArgs`]).
    pub first_token: usize,
    /// The caches are 8-bit ([`crate::BufRole::Pool8`], `crate::fp8`): each position's k and v
    /// head vectors are written quantized, with their scales here.
    pub kv_scales: Option<KvScales<'a, B>>,
    /// Keys per query, the query's own included; `None`: every position `0..=p`.
    pub window: Option<usize>,
}

/// The per-head scales of an 8-bit KV cache: `[num_blocks, kv_heads, block_size]` f32 each
/// ([`crate::BufRole::Table`], [`crate::fp8::scale_index`]): one head's scales of a block's
/// positions are contiguous, so a decode reading consecutive keys reads whole sectors of them.
pub struct KvScales<'a, B: Backend + ?Sized> {
    pub k: &'a mut B::Buf,
    pub v: &'a mut B::Buf,
}

/// The rotation of [`QkNormRopeArgs`] without its buffers, positions and geometry (those of the
/// attention it precedes).
pub struct RopeOf<'a, B: Backend + ?Sized> {
    /// `[q_norm, k_norm]`, each `[head_dim]`; `None`: RoPE only.
    pub qk_norm: Option<[&'a B::Buf; 2]>,
    /// `[max_positions, 2, head_dim / 2]`: cos, then sin (f32 on every backend).
    pub rope: &'a B::Buf,
    /// Of the q/k norm (unused without one).
    pub eps: f32,
}

/// [`LmOps::qk_norm_rope`] on `attn`'s tokens, then [`LmOps::paged_attention`], as one op: a
/// backend may write the call's rotated k and its v to the cache in the rotation's kernel (one
/// launch fewer than the two ops). Afterwards `attn.qkv`'s q and k heads hold the rotated values.
pub struct RopeAttentionArgs<'a, B: Backend + ?Sized> {
    pub rope: RopeOf<'a, B>,
    pub attn: PagedAttentionArgs<'a, B>,
}

/// [`RopeAttentionArgs`] as its two ops (the default of [`LmOps::rope_paged_attention`]).
pub fn rope_paged_attention_apart<B: LmOps + ?Sized>(
    be: &B,
    a: RopeAttentionArgs<'_, B>,
) -> Result<()> {
    let RopeAttentionArgs { rope, attn } = a;
    be.qk_norm_rope(QkNormRopeArgs {
        qkv: &mut *attn.qkv,
        qk_norm: rope.qk_norm,
        rope: rope.rope,
        start: attn.start,
        geom: attn.geom,
        eps: rope.eps,
        first_token: attn.first_token,
    })?;
    be.paged_attention(attn)
}

/// `out[i, j] = silu(x[i, j]) * x[i, inter + j]` for `i < n`, `j < inter`: `x` is the fused
/// gate/up projection `[n, 2 * inter]`, `silu(a) = a / (1 + exp(-a))`.
pub struct SwigluArgs<'a, B: Backend + ?Sized> {
    pub x: &'a B::Buf,
    /// `[n, inter]`.
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub inter: usize,
}

/// An int8 product (the ConvRot format, `crate::convrot`):
/// `out[i, j] = scale[j] * sum_kk x[i, kk] * q[j, kk]` for `i < n`, `j < m`, the sum in f32 over
/// `q` converted exactly to f32, the scale applied once after it. `x` is already rotated
/// ([`HadamardArgs`]); `q` and `scale` are the weight's `[m, k]` int8 rows and `[m]` f32 scales.
pub struct LinearQ8Args<'a, B: LmOps + ?Sized> {
    /// `[n, k]`.
    pub x: &'a B::Buf,
    /// `[m, k]` int8 and `[m]` scales ([`LmOps::upload_q8`]).
    pub w: &'a B::QWeight,
    /// `[n, m]`.
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub k: usize,
    pub m: usize,
    /// Add the product to `out` (a residual update) instead of overwriting it.
    pub accumulate: bool,
}

/// Block Hadamard rotation of activations: `out[r, b*group .. (b+1)*group] = x[r, same] · H_group`
/// for `r < n` and every block `b` of a row, `H_group = kron(H4, ..., H4) / sqrt(group)` with
/// `H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]` (symmetric, orthogonal). `group` is a power
/// of 4 up to `convrot::MAX_GROUP` dividing `dim`. Each block is transformed alone, in the fixed
/// radix-4 order of `convrot::rotate_block`, in f32. `out` and `x` are distinct buffers.
pub struct HadamardArgs<'a, B: Backend + ?Sized> {
    /// `[n, dim]`.
    pub x: &'a B::Buf,
    /// `[n, dim]`.
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub dim: usize,
    pub group: usize,
}

/// A linear's weight as a fused product reads it.
pub enum LinearWeight<'a, B: LmOps + ?Sized> {
    /// `[m, k]` in the storage type.
    Dense(&'a B::Buf),
    /// `[m, k]` int8 rows and scales; the input is rotated in blocks of `group` first.
    Q8 {
        weight: &'a B::QWeight,
        group: usize,
    },
}

/// One product's weight in the order a step reads them ([`LmOps::sequence_weights`]).
pub struct SequencedWeight<'a, B: LmOps + ?Sized> {
    pub w: LinearWeight<'a, B>,
    /// The product's input width (the weight's columns).
    pub k: usize,
    /// A fused gate/up weight ([`Epilogue::Swiglu`]): its product reads both halves at once.
    pub swiglu: bool,
}

/// What a fused product does with its result `y[i, j]` (`i < n`, `j < m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// `out[i, j] = y[i, j]`, `out` is `[n, m]`.
    Store,
    /// `out[i, j] += y[i, j]` (a residual update), `out` is `[n, m]`.
    Accumulate,
    /// `out[i, j] = silu(y[i, j]) * y[i, m / 2 + j]` for `j < m / 2` (the weight is a fused
    /// gate/up projection), `out` is `[n, m / 2]`, `silu(a) = a / (1 + exp(-a))`.
    Swiglu,
}

/// An RMSNorm of the product's input rows (`MUSIC_SEMANTIC.md` §1.3 step 1, without the add).
pub struct RowNorm<'a, B: Backend + ?Sized> {
    /// `[k]`.
    pub weight: &'a B::Buf,
    pub eps: f32,
}

/// Buffers a backend that runs a fused product as separate ops writes its intermediates to; a
/// fused kernel leaves them untouched.
pub struct LinearScratch<'a, B: Backend + ?Sized> {
    /// `[n, k]`: the normed input.
    pub normed: &'a mut B::Buf,
    /// `[n, k]`: the rotated input of an int8 product.
    pub rot: &'a mut B::Buf,
    /// `[n, m]`: the product before a SwiGLU epilogue.
    pub product: &'a mut B::Buf,
}

/// One projection with what surrounds it in a pre-norm block, as one op:
/// 1. `u = x`, or with `norm`: `u[i, :] = x[i, :] * rsqrt(mean(x[i, :]^2) + eps) * norm.weight`;
/// 2. for int8 weights, `u = u · H_group` ([`HadamardArgs`]);
/// 3. `y = u · W^T` (`[n, m]`; int8: `y[i, j] = scale[j] * sum_kk u[i, kk] * q[j, kk]`);
/// 4. the [`Epilogue`].
///
/// Composed from [`LmOps::rms_norm`], [`LmOps::hadamard`], [`Backend::linear`] /
/// [`Backend::linear_acc`] / [`LmOps::linear_q8`] and [`LmOps::swiglu`] it has their arithmetic
/// exactly ([`fused_linear_apart`]); a backend's fused kernel may apply the norm's scale after the
/// product instead of before it. `out` aliases neither `x` nor a scratch buffer.
pub struct FusedLinearArgs<'a, B: LmOps + ?Sized> {
    /// `[n, k]`.
    pub x: &'a B::Buf,
    pub norm: Option<RowNorm<'a, B>>,
    pub w: LinearWeight<'a, B>,
    pub out: &'a mut B::Buf,
    pub scratch: LinearScratch<'a, B>,
    pub n: usize,
    pub k: usize,
    /// Weight rows.
    pub m: usize,
    pub epilogue: Epilogue,
}

/// [`FusedLinearArgs`] as separate ops; `norm(x, weight, eps, out)` writes the normed rows of
/// `x` (`[n, k]`) to `out` (the backend's RMSNorm without a residual add).
pub fn fused_linear_apart<B: LmOps + ?Sized>(
    be: &B,
    a: FusedLinearArgs<'_, B>,
    norm: impl FnOnce(&B::Buf, &B::Buf, f32, &mut B::Buf) -> Result<()>,
) -> Result<()> {
    let FusedLinearArgs {
        x,
        norm: row_norm,
        w,
        out,
        scratch,
        n,
        k,
        m,
        epilogue,
    } = a;
    let LinearScratch {
        normed,
        rot,
        product,
    } = scratch;
    let input: &B::Buf = match row_norm {
        Some(rn) => {
            norm(x, rn.weight, rn.eps, normed)?;
            normed
        }
        None => x,
    };
    let accumulate = epilogue == Epilogue::Accumulate;
    let swiglu = epilogue == Epilogue::Swiglu;
    {
        let dst: &mut B::Buf = if swiglu { &mut *product } else { &mut *out };
        match w {
            LinearWeight::Dense(w) => {
                let args = crate::LinearArgs {
                    x: input,
                    w,
                    out: dst,
                    n,
                    k,
                    m,
                };
                if accumulate {
                    be.linear_acc(args)?
                } else {
                    be.linear(args)?
                }
            }
            LinearWeight::Q8 { weight, group } => {
                be.hadamard(HadamardArgs {
                    x: input,
                    out: &mut *rot,
                    n,
                    dim: k,
                    group,
                })?;
                be.linear_q8(LinearQ8Args {
                    x: rot,
                    w: weight,
                    out: dst,
                    n,
                    k,
                    m,
                    accumulate,
                })?
            }
        }
    }
    if swiglu {
        be.swiglu(SwigluArgs {
            x: product,
            out,
            n,
            inter: m / 2,
        })?;
    }
    Ok(())
}

/// How a draw picks its winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum DrawMode {
    /// The largest candidate value, lowest index on ties.
    Greedy = 0,
    /// The exponential race: the largest `v[i] - ln E[i]` over the candidates (computed in f64),
    /// with `E[i] = rng::exp_noise(seed, draw, i)`; lowest index on ties.
    Noise = 1,
}

/// Optional classifier-free guidance, tie-inclusive top-k and the draw for each song
/// (`MUSIC_SEMANTIC.md` §3 steps 2-4 and §3.1; §4.2 for the depth levels; `CSM.md` §4.2 without
/// guidance).
///
/// With `cfg_scale = Some(scale)`, song `s` has `c = logits[2s]` (conditional) and
/// `u = logits[2s + 1]` (unconditional); with `None`, `c = logits[s]` and no `u`. All f32:
/// 1. `g[i] = u[i] + (c[i] - u[i]) * scale`, or `g[i] = c[i]` without guidance; in
///    [`DrawMode::Noise`] then `g[i] = g[i] / temperature` (greedy ignores the temperature);
/// 2. with `cond_top_k = Some(k)`: `g[i] = -inf` where `c[i] < kth_largest(c, k)` (ties kept);
/// 3. with `end = Some(e)` and `allow_end[s] == 0`: `g[e] = -inf`;
/// 4. `v = nan_to_num(g)` (NaN -> -1e9, +inf -> 1e9, -inf -> -1e9); candidates are the `i` with
///    `v[i] >= kth_largest(v, top_k)`;
/// 5. the winner per `DrawMode::from(mode[s])` with `seed = seeds[2s] as u32 | seeds[2s+1] << 32`
///    and `draw = draws[s] + draw_offset`, written to `codes[s * codes_stride + col]`, unless that
///    entry already holds a code (>= 0: teacher forcing), which is kept.
///
/// With `row_sampling = Some(r)`, song `s` uses `temperature = f32::from_bits(r[2s] as u32)` and
/// `top_k = r[2s + 1]` in place of the call's `temperature` and `top_k`, so one program serves
/// songs with different settings.
pub struct CfgDrawArgs<'a, B: Backend + ?Sized> {
    /// `[2 * songs, vocab]` with guidance, `[songs, vocab]` without.
    pub logits: &'a B::Buf,
    /// `[songs, codes_stride]`.
    pub codes: &'a mut B::Ints,
    /// `[songs]`: a [`DrawMode`] as i32.
    pub mode: &'a B::Ints,
    /// `[songs, 2]`: each song's 64-bit noise seed, low word first.
    pub seeds: &'a B::Ints,
    /// `[songs]`: draw index of this frame's first draw (8 per frame).
    pub draws: &'a B::Ints,
    /// `[songs]`: 0 masks the `end` column.
    pub allow_end: &'a B::Ints,
    pub songs: usize,
    pub vocab: usize,
    pub codes_stride: usize,
    pub col: usize,
    pub draw_offset: u32,
    /// `None`: one logits row per song, no guidance.
    pub cfg_scale: Option<f32>,
    /// Divides the values of [`DrawMode::Noise`] draws (1.0 leaves them as they are).
    pub temperature: f32,
    pub cond_top_k: Option<usize>,
    pub top_k: usize,
    pub end: Option<usize>,
    /// `[songs, 2]`: each song's temperature (its f32 bits) and top-k (at least 1; a noise
    /// draw's temperature finite and positive), replacing `temperature` and `top_k`; `None`:
    /// the call's for every song.
    pub row_sampling: Option<&'a B::Ints>,
}

/// Language-model ops and pinned host I/O. The CPU backend implements them in f32.
pub trait LmOps: Backend {
    /// Host-visible i32 memory (pinned on CUDA) for per-step inputs and outputs.
    type PinnedInts;
    /// Host-visible f32 memory (pinned on CUDA) for per-step outputs.
    type PinnedFloats;

    /// A completion marker of queued work (a CUDA event; nothing on the CPU).
    type Mark;
    /// An int8 weight matrix with one f32 scale per row (the ConvRot format).
    type QWeight;

    /// Uploads an int8 weight `[rows, cols]` (row-major) and its `[rows]` scales, outside
    /// programs.
    fn upload_q8(
        &self,
        data: &[i8],
        scales: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<Self::QWeight>;

    /// A new marker, made once and reused.
    fn mark(&self) -> Result<Self::Mark>;
    /// Queues program `key` (captured and replayed as by [`Backend::run`]) and records `mark`
    /// after it, returning without waiting for the work: the host prepares the next step while
    /// the device runs this one. The CPU runs the program before returning.
    fn launch(
        &self,
        key: usize,
        program: &mut dyn FnMut(&Self) -> Result<()>,
        mark: &mut Self::Mark,
    ) -> Result<()>;
    /// Blocks until the work recorded in `mark` has finished.
    fn wait(&self, mark: &Self::Mark) -> Result<()>;
    /// Whether [`LmOps::launch`] returns before the work is done (a device queue). A backend
    /// that runs programs on the calling thread gains nothing from pipelined steps.
    fn queues_work(&self) -> bool {
        true
    }
    /// A new marker that can also time (see [`LmOps::elapsed_ms`]), made once and reused.
    fn timing_mark(&self) -> Result<Self::Mark> {
        self.mark()
    }
    /// Records `mark` at the current end of the queue, without waiting.
    fn record(&self, mark: &mut Self::Mark) -> Result<()>;
    /// Device milliseconds between two finished timing marks; `None` where the backend runs
    /// programs on the calling thread (the CPU), whose callers time on the host.
    fn elapsed_ms(&self, _start: &Self::Mark, _end: &Self::Mark) -> Result<Option<f32>> {
        Ok(None)
    }
    /// The host side of pinned ints without waiting: the caller has waited for every program
    /// that reads or writes them.
    fn pinned_ints_nowait<'p>(&self, p: &'p mut Self::PinnedInts) -> &'p mut [i32];
    /// The host side of pinned floats without waiting (same rule).
    fn pinned_floats_nowait<'p>(&self, p: &'p Self::PinnedFloats) -> &'p [f32];

    /// Allocates `len` host-visible ints, zero-filled.
    fn pinned_ints(&self, len: usize) -> Result<Self::PinnedInts>;
    /// Allocates `len` host-visible floats, zero-filled.
    fn pinned_floats(&self, len: usize) -> Result<Self::PinnedFloats>;
    /// The host side of pinned ints; on CUDA this waits until the last program that used them
    /// has finished.
    fn pinned_ints_mut<'p>(&self, p: &'p mut Self::PinnedInts) -> Result<&'p mut [i32]>;
    /// The host side of pinned floats (same waiting rule).
    fn pinned_floats_ref<'p>(&self, p: &'p Self::PinnedFloats) -> Result<&'p [f32]>;

    /// Program op: `dst[..len] = src[..len]` (host to device).
    fn copy_in_ints(&self, src: &Self::PinnedInts, dst: &mut Self::Ints, len: usize) -> Result<()>;
    /// Program op: `dst[..len] = src[..len]` (device to host).
    fn copy_out_ints(&self, src: &Self::Ints, dst: &mut Self::PinnedInts, len: usize)
        -> Result<()>;
    /// Program op: `dst[..len] = src[..len]` (device to host).
    fn copy_out_floats(
        &self,
        src: &Self::Buf,
        dst: &mut Self::PinnedFloats,
        len: usize,
    ) -> Result<()>;

    /// Runs `program` now, eagerly: never captured, for programs whose shapes vary from call to
    /// call (a prompt prefill). Returns when its work is done.
    fn run_eager(&self, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()> {
        program(self)
    }

    /// Queues `program` behind the work already queued and returns without waiting for it: for
    /// programs that read only device memory (a slot's reset at admission), so that admitting a
    /// stream never waits for the step in flight.
    fn run_queued(&self, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()> {
        program(self)
    }

    /// Program op: see [`GatherArgs`].
    fn gather_rows(&self, args: GatherArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`ScatterArgs`].
    fn scatter_rows(&self, args: ScatterArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`CopyRowsArgs`].
    fn copy_rows(&self, args: CopyRowsArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`FeedbackArgs`].
    fn feedback_embed(&self, args: FeedbackArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`EmbedSumArgs`].
    fn embed_sum(&self, args: EmbedSumArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`RmsNormArgs`].
    fn rms_norm(&self, args: RmsNormArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`AddRowArgs`].
    fn add_row(&self, args: AddRowArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`QkNormRopeArgs`].
    fn qk_norm_rope(&self, args: QkNormRopeArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`PagedAttentionArgs`].
    fn paged_attention(&self, args: PagedAttentionArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`RopeAttentionArgs`]; by default the two ops apart.
    fn rope_paged_attention(&self, args: RopeAttentionArgs<'_, Self>) -> Result<()> {
        rope_paged_attention_apart(self, args)
    }
    /// Program op: see [`SwigluArgs`].
    fn swiglu(&self, args: SwigluArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`CfgDrawArgs`].
    fn cfg_draw(&self, args: CfgDrawArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`LinearQ8Args`].
    fn linear_q8(&self, args: LinearQ8Args<'_, Self>) -> Result<()>;
    /// Program op: see [`HadamardArgs`].
    fn hadamard(&self, args: HadamardArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`FusedLinearArgs`].
    fn fused_linear(&self, args: FusedLinearArgs<'_, Self>) -> Result<()>;
    /// Tells the backend the order in which a step's products read `seq` (each entry's
    /// successor is the next one), once, outside programs: a backend may then stream a weight
    /// into cache while the product before it ends. A weight named twice keeps its last successor.
    /// Results never depend on it; the CPU ignores it.
    fn sequence_weights(&self, seq: &[SequencedWeight<'_, Self>]) -> Result<()> {
        let _ = seq;
        Ok(())
    }
}
