//! The op set every backend implements.
//!
//! Layout conventions (all row-major):
//! - activations are channels-last: `[rows, time, channels]`, `rows` being the bucket size;
//! - per-slot state buffers have `total_rows = max_slots + 1` rows (the last is the dummy row that
//!   padded bucket entries use), and each op reads and writes only the rows named by `slots`;
//! - weights are uploaded already in the layout the op documents (transformed once at load time).
//!
//! Ops are called only inside a program run by [`Backend::run`], except for allocation, uploads,
//! staging access and the row fills of [`Backend::zero_row`] / [`Backend::fill_ints`].

use crate::Result;

/// Numeric mode of a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 storage and arithmetic (TF32 off on CUDA).
    F32,
    /// bf16 storage with f32 accumulation.
    Bf16,
}

impl Precision {
    /// Parses `f32` or `bf16`.
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "f32" | "fp32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            other => Err(crate::Error::config(
                "Precision::parse",
                format!("unknown precision `{other}` (expected f32 or bf16)"),
            )),
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }
}

/// What a float buffer holds, so that a backend can choose its storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufRole {
    /// Model weights.
    Weight,
    /// Per-step activations.
    Activation,
    /// Per-slot streaming state (conv history, transposed-conv tails, KV rings).
    State,
    /// A lookup table stored in f32 on every backend (the RoPE cos/sin table).
    Table,
    /// A block pool written only where a step's inputs point (a paged KV cache): a warm-up run
    /// on padding inputs touches only its null block, so backends need not snapshot it.
    Pool,
    /// Like [`BufRole::Pool`], in 8-bit floats (`crate::fp8`): one byte per element on a device,
    /// f32 holding the same values on the CPU. Written and read by paged attention only.
    Pool8,
}

/// Host-visible step I/O of one bucket (pinned memory on CUDA).
pub struct StagingView<'a> {
    /// `[rows]` slot ids; padded entries hold the dummy row.
    pub slots: &'a mut [i32],
    /// `[rows, MAX_CODEBOOKS]` codes; absent codebooks hold [`crate::NO_CODE`].
    pub codes: &'a mut [i32],
    /// `[rows, latent_dim]` latents added to the embedded codes (zero for code streams).
    pub latents: &'a mut [f32],
    /// `[rows, samples]` PCM: written by a decode step, read by an encode step.
    pub pcm: &'a mut [f32],
}

/// Sizes of one bucket's staging buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingDims {
    pub rows: usize,
    pub codebooks: usize,
    pub latent_dim: usize,
    pub samples: usize,
}

/// `out[r] = latents[r] + sum_q table[q, codes[r, q]]` over the codebooks whose code is not
/// [`crate::NO_CODE`]. Codes are validated at the API edge.
pub struct EmbedArgs<'a, B: Backend + ?Sized> {
    /// `[rows, codebooks]` i32.
    pub codes: &'a B::Ints,
    /// `[codebooks, cardinality, dim]`: each codebook's entries folded through its output projection.
    pub table: &'a B::Buf,
    /// `[rows, dim]`.
    pub latents: &'a B::Buf,
    /// `[rows, dim]`.
    pub out: &'a mut B::Buf,
    pub rows: usize,
    pub codebooks: usize,
    pub cardinality: usize,
    pub dim: usize,
}

/// Geometry of a stride-one causal convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dGeom {
    pub rows: usize,
    /// Time steps of input and output per row.
    pub time: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub dilation: usize,
    /// Apply ELU (alpha 1) to the input first; the history then holds ELU'd columns.
    pub elu_input: bool,
}

impl Conv1dGeom {
    /// Columns of history kept per slot: `(kernel - 1) * dilation`.
    pub fn history(&self) -> usize {
        (self.kernel - 1) * self.dilation
    }
}

/// Causal convolution with per-slot history:
/// `out[r, t, o] = bias[o] + residual[r, t, o] + sum_{j, i} w[o, j, i] * xin[r, t + j*dilation, i]`
/// where `xin[r] = concat(state[slots[r]], f(x[r]))` along time (f = ELU or identity), and the last
/// `history` columns of `xin[r]` are written back to `state[slots[r]]`.
pub struct Conv1dArgs<'a, B: Backend + ?Sized> {
    /// `[rows, time, c_in]`.
    pub x: &'a B::Buf,
    /// `[c_out, kernel, c_in]`.
    pub w: &'a B::Buf,
    /// `[c_out]`.
    pub bias: Option<&'a B::Buf>,
    /// `[total_rows, history, c_in]`; `None` only when `history == 0`.
    pub state: Option<&'a mut B::Buf>,
    /// `[rows]`.
    pub slots: &'a B::Ints,
    /// `[rows, time, c_out]`, added to the output.
    pub residual: Option<&'a B::Buf>,
    /// `[rows, time, c_out]`.
    pub out: &'a mut B::Buf,
    pub geom: Conv1dGeom,
}

/// Geometry of a streaming transposed convolution (`kernel > stride`, no padding on the left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTr1dGeom {
    pub rows: usize,
    /// Input time steps per row; the output has `time * stride`.
    pub time: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
    /// `true`: depthwise (`groups == c_in == c_out`); `false`: dense.
    pub depthwise: bool,
    pub elu_input: bool,
}

impl ConvTr1dGeom {
    /// Columns of output tail kept per slot: `kernel - stride`.
    pub fn tail(&self) -> usize {
        self.kernel - self.stride
    }
}

/// Streaming transposed convolution: with `y` the full transposed convolution of `f(x[r])`
/// (length `time*stride + tail`, no bias), `out[r] = y[.., :time*stride] + bias`, plus
/// `state[slots[r]]` added to its first `tail` columns; then `state[slots[r]] = y[.., time*stride..]`
/// (the bias-free tail, so the bias is added exactly once).
pub struct ConvTr1dArgs<'a, B: Backend + ?Sized> {
    /// `[rows, time, c_in]`.
    pub x: &'a B::Buf,
    /// Dense: `[c_in, kernel, c_out]`; depthwise: `[c_out, kernel]`.
    pub w: &'a B::Buf,
    /// `[c_out]`.
    pub bias: Option<&'a B::Buf>,
    /// `[total_rows, tail, c_out]`.
    pub state: &'a mut B::Buf,
    /// `[rows]`.
    pub slots: &'a B::Ints,
    /// `[rows, time*stride, c_out]`.
    pub out: &'a mut B::Buf,
    pub geom: ConvTr1dGeom,
}

/// `out = LayerNorm(x) * gamma + beta` over the last axis.
pub struct LayerNormArgs<'a, B: Backend + ?Sized> {
    /// `[n, dim]`.
    pub x: &'a B::Buf,
    pub gamma: &'a B::Buf,
    pub beta: &'a B::Buf,
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub dim: usize,
    pub eps: f32,
}

/// A pre-norm product, `out[n, m] = act(LayerNorm(x)[n, k] @ w[m, k]^T)` with `act` GELU or none:
/// a transformer's norm-then-projection. `norm.out` receives the normalised rows where a backend
/// computes them apart; a backend fusing the norm into the product may leave it untouched.
pub struct NormLinearArgs<'a, B: Backend + ?Sized> {
    /// `norm.dim` is the product's `k`.
    pub norm: LayerNormArgs<'a, B>,
    pub w: &'a B::Buf,
    pub out: &'a mut B::Buf,
    pub m: usize,
    /// Exact (erf) GELU on the product.
    pub gelu: bool,
}

impl<'a, B: Backend + ?Sized> NormLinearArgs<'a, B> {
    /// Runs the op as its three parts, for a backend that does not fuse them: `norm` writes the
    /// normalised rows into `norm.out`, `product` multiplies them, and `gelu` (when asked) applies
    /// the activation over the product's `n * m` outputs.
    pub fn apart(
        self,
        norm: impl FnOnce(LayerNormArgs<'_, B>) -> Result<()>,
        product: impl FnOnce(LinearArgs<'_, B>) -> Result<()>,
        gelu: impl FnOnce(&mut B::Buf, usize) -> Result<()>,
    ) -> Result<()> {
        let LayerNormArgs {
            x,
            gamma,
            beta,
            out: normed,
            n,
            dim,
            eps,
        } = self.norm;
        norm(LayerNormArgs {
            x,
            gamma,
            beta,
            out: &mut *normed,
            n,
            dim,
            eps,
        })?;
        product(LinearArgs {
            x: normed,
            w: self.w,
            out: &mut *self.out,
            n,
            k: dim,
            m: self.m,
        })?;
        if self.gelu {
            gelu(self.out, n * self.m)?;
        }
        Ok(())
    }
}

/// `out[n, m] = x[n, k] @ w[m, k]^T` (PyTorch `nn.Linear` layout, no bias).
pub struct LinearArgs<'a, B: Backend + ?Sized> {
    pub x: &'a B::Buf,
    pub w: &'a B::Buf,
    pub out: &'a mut B::Buf,
    pub n: usize,
    pub k: usize,
    pub m: usize,
}

/// Geometry of one streaming attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionGeom {
    pub rows: usize,
    /// New tokens per row in this step.
    pub time: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// KV ring capacity per slot ([`crate::KV_RING`]).
    pub ring: usize,
    /// A query at position p sees keys at positions k with `p - window < k <= p`.
    pub window: usize,
    pub rope_theta: f32,
}

/// Sliding-window causal self-attention over a per-slot KV ring with absolute RoPE positions.
///
/// Token `t` of row `r` sits at position `p = tokens[slots[r]] + t`. The op applies rotate-half
/// RoPE at `p` to q and k, writes k and v to ring entry `p % ring` of `kv[slots[r]]`, then attends
/// each query to the keys in its window (queries see the new keys of their own step) with
/// softmax scale `1/sqrt(head_dim)`. It does not advance `tokens` ([`Backend::advance_tokens`] does).
pub struct AttentionArgs<'a, B: Backend + ?Sized> {
    /// `[rows * time, 3 * heads * head_dim]`: q, then k, then v; heads contiguous within each.
    pub qkv: &'a B::Buf,
    /// `[total_rows, heads, 2, ring, head_dim]`: per head its keys, then its values (each head's
    /// window is two contiguous runs, read in long bursts).
    pub kv: &'a mut B::Buf,
    /// `[total_rows]` tokens seen by each slot before this step.
    pub tokens: &'a B::Ints,
    /// `[rows]`.
    pub slots: &'a B::Ints,
    /// `[rows * time, heads * head_dim]`.
    pub out: &'a mut B::Buf,
    pub geom: AttentionGeom,
}

/// Fills the history of a fresh slot with copies of its first input column, the streaming form
/// of a `replicate`-padded causal convolution (transformers `MimiConv1d` with
/// `pad_mode="replicate"`, Mimi's `downsample`): for each row `r` with `tokens[slots[r]] == 0`,
/// every one of the `history` columns of `state[slots[r]]` becomes `x[r, 0, :]`.
pub struct ReplicateArgs<'a, B: Backend + ?Sized> {
    /// `[rows, time, channels]`.
    pub x: &'a B::Buf,
    /// `[total_rows, history, channels]`.
    pub state: &'a mut B::Buf,
    /// `[total_rows]` tokens seen by each slot before this step.
    pub tokens: &'a B::Ints,
    /// `[rows]`.
    pub slots: &'a B::Ints,
    pub rows: usize,
    pub time: usize,
    pub channels: usize,
    pub history: usize,
}

/// Resets the state rows of the slots a step admits, inside the step (one launch for any number
/// of them, where a reset per admission queued a fill per state buffer while the first frames
/// waited): for each entry `list[i]`, `i < count`, other than [`crate::NO_ROW`], row `list[i]` of
/// `buf` (`[_, row_len]`) becomes `src` (a `[row_len]` row) or zeros.
pub struct ResetRowsArgs<'a, B: Backend + ?Sized> {
    pub buf: &'a mut B::Buf,
    pub row_len: usize,
    /// `[count]` row indices; [`crate::NO_ROW`] entries are skipped.
    pub list: &'a B::Ints,
    pub count: usize,
    /// The row every listed row becomes; `None`: zeros.
    pub src: Option<&'a B::Buf>,
}

/// Split residual vector quantisation of one latent per row (transformers
/// `MimiSplitResidualVectorQuantizer.encode`): the first `semantic_books` codebooks quantise
/// `proj[:cb_dim] @ x`, the rest `proj[cb_dim:] @ x`, each half residually: the nearest
/// codeword by squared distance (lowest index on ties), subtracted before the next level.
///
/// `codes` is in and out: a row quantises as many levels as it has leading entries other than
/// [`crate::NO_CODE`] on entry (its `n_q`), overwrites them with the chosen codes and leaves the
/// rest as they are. All arithmetic is f32 whatever the precision.
pub struct RvqEncodeArgs<'a, B: Backend + ?Sized> {
    /// `[rows, dim]` latents.
    pub x: &'a B::Buf,
    /// `[2 * cb_dim, dim]` f32 ([`BufRole::Table`]): the semantic then the acoustic `input_proj`.
    pub proj: &'a B::Buf,
    /// `[books, cb_dim, card]` f32 ([`BufRole::Table`]): each codebook transposed.
    pub codebooks: &'a B::Buf,
    /// `[books, card]` f32 ([`BufRole::Table`]): each codeword's squared norm.
    pub norms: &'a B::Buf,
    /// `[rows, books]` i32.
    pub codes: &'a mut B::Ints,
    pub rows: usize,
    pub dim: usize,
    pub cb_dim: usize,
    pub card: usize,
    pub books: usize,
    pub semantic_books: usize,
}

/// A compute backend: buffers, staging, the op set, and program execution.
pub trait Backend {
    /// A float buffer on the device (the backend picks the storage type per [`BufRole`]).
    type Buf;
    /// An i32 buffer on the device.
    type Ints;
    /// Host-visible I/O of one bucket.
    type Staging;

    /// Short name for reports: `cpu`, `cuda`.
    fn name(&self) -> &'static str;
    /// Numeric mode.
    fn precision(&self) -> Precision;

    /// Whether the decoder should run a dense transposed convolution of kernel `2 * stride` as
    /// the `stride` output phases of one two-tap convolution: one product with no overlap pass,
    /// which pays where the backend has a fast wide convolution.
    fn phase_upsampling(&self) -> bool {
        false
    }
    /// A human-readable description of the device.
    fn device_description(&self) -> String;
    /// Bytes per element of buffers of this role.
    fn bytes_per_element(&self, role: BufRole) -> usize;

    /// Allocates a zero-filled float buffer of `len` elements.
    fn zeros(&self, len: usize, role: BufRole) -> Result<Self::Buf>;
    /// Uploads host data (converted to the role's storage type).
    fn upload(&self, data: &[f32], role: BufRole) -> Result<Self::Buf>;
    /// Allocates an i32 buffer of `len` elements filled with `value`.
    fn ints(&self, len: usize, value: i32) -> Result<Self::Ints>;
    /// Copies a float buffer back to the host (tests and diagnostics; synchronises).
    fn download(&self, buf: &Self::Buf) -> Result<Vec<f32>>;
    /// Copies an i32 buffer back to the host (tests and diagnostics; synchronises).
    fn download_ints(&self, buf: &Self::Ints) -> Result<Vec<i32>>;

    /// Allocates one bucket's staging buffers.
    fn staging(&self, dims: StagingDims) -> Result<Self::Staging>;
    /// The host side of a staging area. On CUDA this waits until the last step that used it
    /// has finished, so the host never overwrites inputs still being read.
    fn staging_view<'s>(&self, staging: &'s mut Self::Staging) -> Result<StagingView<'s>>;
    /// The host side of a staging area without waiting: the caller has waited for every step
    /// that reads or writes it (a pipelined decoder alternates two areas per bucket).
    fn staging_view_nowait<'s>(&self, staging: &'s mut Self::Staging) -> Result<StagingView<'s>> {
        self.staging_view(staging)
    }

    /// Program op: copies the staged slots, codes and latents into device buffers.
    fn stage_in(
        &self,
        staging: &Self::Staging,
        slots: &mut Self::Ints,
        codes: &mut Self::Ints,
        latents: &mut Self::Buf,
    ) -> Result<()>;
    /// Program op: copies `[rows, samples]` PCM into the staging area.
    fn stage_out(&self, pcm: &Self::Buf, staging: &mut Self::Staging) -> Result<()>;

    /// Program op: copies the staged slots, code requests (`codes`, see [`RvqEncodeArgs`]) and
    /// `[rows, samples]` PCM into device buffers (the input of an encode step).
    fn stage_in_audio(
        &self,
        staging: &Self::Staging,
        slots: &mut Self::Ints,
        codes: &mut Self::Ints,
        pcm: &mut Self::Buf,
    ) -> Result<()>;
    /// Program op: copies `[rows, codebooks]` codes and `[rows, latent_dim]` latents into the
    /// staging area (the output of an encode step).
    fn stage_out_codes(
        &self,
        codes: &Self::Ints,
        latents: &Self::Buf,
        staging: &mut Self::Staging,
    ) -> Result<()>;
    /// Program op: see [`ResetRowsArgs`].
    fn reset_rows(&self, args: ResetRowsArgs<'_, Self>) -> Result<()>;
    /// Program op: `ints[list[i]] = value` for each entry of `list[..count]` other than
    /// [`crate::NO_ROW`] (the list of [`ResetRowsArgs`]).
    fn reset_ints(
        &self,
        ints: &mut Self::Ints,
        list: &Self::Ints,
        count: usize,
        value: i32,
    ) -> Result<()>;
    /// Program op: see [`ReplicateArgs`].
    fn replicate_history(&self, args: ReplicateArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`RvqEncodeArgs`].
    fn rvq_encode(&self, args: RvqEncodeArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`EmbedArgs`].
    fn embed_codes(&self, args: EmbedArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`Conv1dArgs`].
    fn conv1d(&self, args: Conv1dArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`crate::ResBlockArgs`].
    fn res_block(&self, args: crate::ResBlockArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`ConvTr1dArgs`].
    fn conv_tr1d(&self, args: ConvTr1dArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`LayerNormArgs`].
    fn layer_norm(&self, args: LayerNormArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`LinearArgs`].
    fn linear(&self, args: LinearArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`NormLinearArgs`].
    fn layer_norm_linear(&self, args: NormLinearArgs<'_, Self>) -> Result<()>;
    /// Program op: `out[n, m] += x[n, k] . w[m, k]^T`, a residual update in the product itself
    /// (a layer scale is folded into `w`'s rows at load time).
    fn linear_acc(&self, args: LinearArgs<'_, Self>) -> Result<()>;
    /// Program op: see [`AttentionArgs`].
    fn attention(&self, args: AttentionArgs<'_, Self>) -> Result<()>;
    /// Program op: exact (erf) GELU in place over `len` elements.
    fn gelu(&self, x: &mut Self::Buf, len: usize) -> Result<()>;
    /// Program op: `tokens[slots[r]] += count` for each of the `rows` entries, then
    /// `tokens[dummy] = 0` so that padding never accumulates a position.
    fn advance_tokens(
        &self,
        tokens: &mut Self::Ints,
        slots: &Self::Ints,
        rows: usize,
        count: i32,
        dummy: usize,
    ) -> Result<()>;

    /// Fill outside programs: zeroes elements `[row * row_len, (row + 1) * row_len)` (no host sync).
    fn zero_row(&self, buf: &mut Self::Buf, row: usize, row_len: usize) -> Result<()>;
    /// Fill outside programs: sets `ints[index] = value` (no host sync).
    fn fill_ints(&self, ints: &mut Self::Ints, index: usize, value: i32) -> Result<()>;

    /// Runs one step program for `key` (one key per bucket). The CPU runs `program` now; CUDA
    /// captures it into a graph on the first call for `key` (after warm-up runs) and replays it
    /// afterwards, then waits for the replay so that the staging PCM is ready.
    fn run(&self, key: usize, program: &mut dyn FnMut(&Self) -> Result<()>) -> Result<()>;
}
