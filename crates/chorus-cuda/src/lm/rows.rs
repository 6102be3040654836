//! Row ops of the LM (kernels/lm_rows.cu): gathers, scatters, strided copies, the feedback
//! embedding, fused add + RMSNorm, position rows, SwiGLU, q/k norm + RoPE.
//!
//! Every op checks its buffer lengths (O(1), no device read), then makes exactly one launch (none
//! when there is nothing to do): no allocation, no sync, so a frame program captures it as one
//! graph node.
//!
//! - Row kernels (gather, scatter, copy, feedback, add_row, swiglu) use one layout: block `b`
//!   handles segment `b % segs` of row `b / segs`, one chunk per thread, where a chunk is one
//!   16-byte vector (`16 / element size` elements) when every row start and width is a multiple
//!   of it and the pointers are 16-byte aligned, else one element. `segs * block >= chunks`.
//! - `rms_norm`: one block per row, the row held in registers between the two passes (a reload
//!   path for rows too wide for that gives the same bits); `qk_norm_rope`: a group of
//!   `half / vector` lanes per (token, q or k head), one 16-byte access per lane and half (8 lanes
//!   in bf16 and 16 in f32 for head_dim 128), else one warp per head.
//! - Ids, codes and positions live on the device and are not validated here (the callers check
//!   them at the API edge, the CPU backend checks them too); the kernels only never leave their
//!   tables: an out-of-range id gathers a zero row and is skipped by a scatter, an out-of-range
//!   code adds nothing to the feedback embedding, a RoPE position is clamped to the table.
use chorus_core::lm_ops::{
    AddRowArgs, CopyRowsArgs, EmbedSumArgs, FeedbackArgs, GatherArgs, HeadGeom, QkNormRopeArgs,
    RmsNormArgs, RopeOf, ScatterArgs, SwigluArgs,
};
use chorus_core::{Precision, Result};

use super::check_len;
use crate::backend::{CudaBackend, CudaBuf};
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};

/// Largest block of the row kernels.
const ROW_THREADS: usize = 256;
/// Mirrors `LMR_NORM_MAX_THREADS` and `LMR_NORM_ITEMS` in `lm_rows.cu`.
const NORM_MAX_THREADS: usize = 1024;
const NORM_ITEMS: usize = 2;
/// Threads per block of `lm_qk_norm_rope` (whole warps).
const ROPE_THREADS: usize = 256;

/// `v` as a kernel `int`.
fn int(op: &'static str, name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| cuda_error(op, format!("`{name}` = {v} exceeds the i32 range")))
}

/// `v` as a kernel `long long`.
fn long(op: &'static str, name: &str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| cuda_error(op, format!("`{name}` = {v} exceeds the i64 range")))
}

use super::t_ptr;

/// Elements of `T` in one 16-byte access.
fn vec_elems(be: &CudaBackend) -> usize {
    16 / be.esize()
}

/// Whether every element count is a multiple of a 16-byte vector and every pointer is aligned.
fn vectorizable(be: &CudaBackend, counts: &[usize], ptrs: &[u64]) -> bool {
    let v = vec_elems(be);
    counts.iter().all(|c| c % v == 0) && ptrs.iter().all(|p| p % 16 == 0)
}

/// Launch of the row layout over `rows` rows of `chunks` chunks, and its segments per row.
fn row_launch(op: &'static str, rows: usize, chunks: usize) -> Result<(Launch, i32)> {
    let block = chunks.next_multiple_of(32).clamp(32, ROW_THREADS);
    let segs = chunks.div_ceil(block).max(1);
    let grid = rows
        .checked_mul(segs)
        .filter(|&g| g <= i32::MAX as usize)
        .ok_or_else(|| {
            cuda_error(
                op,
                format!("{rows} rows of {chunks} chunks exceed one launch's grid"),
            )
        })?;
    Ok((
        Launch {
            grid: grid as u32,
            block: block as u32,
            smem: 0,
        },
        segs as i32,
    ))
}

fn nonzero_dim(op: &'static str, dim: usize) -> Result<()> {
    if dim == 0 {
        return Err(cuda_error(op, "dim must be at least 1"));
    }
    Ok(())
}

pub(crate) fn gather_rows(be: &CudaBackend, a: GatherArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "gather_rows";
    let _timer = be.op_timer(OP);
    let (rows, dim, per_id) = (a.rows, a.dim, a.rows_per_id);
    if rows == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    if per_id == 0 {
        return Err(cuda_error(OP, "rows_per_id must be at least 1"));
    }
    let ids_n = (rows - 1) / per_id + 1;
    check_len(
        OP,
        "ids",
        a.ids.len,
        (ids_n - 1) * a.ids_stride + a.ids_col + 1,
    )?;
    check_len(OP, "out", a.out.len, rows * dim)?;
    let table = t_ptr(be, OP, "table", a.table)?;
    let out = t_ptr(be, OP, "out", a.out)?;
    let ids = a.ids.mem.ptr();
    let vec = vectorizable(be, &[dim], &[table, out]);
    let chunks = if vec { dim / vec_elems(be) } else { dim };
    let (cfg, segs) = row_launch(OP, rows, chunks)?;
    let dim32 = int(OP, "dim", dim)?;
    let per_id = int(OP, "rows_per_id", per_id)?;
    let stride = int(OP, "ids_stride", a.ids_stride)?;
    let col = int(OP, "ids_col", a.ids_col)?;
    let offset = int(OP, "offset", a.offset)?;
    // Ids past the table gather zeros; a table past the i32 range is clamped (never read past).
    let table_rows = (a.table.len / dim).min(i32::MAX as usize) as i32;
    let (scale, vec) = (a.scale, i32::from(vec));
    be.launch(
        Kernel::LmGatherRows,
        cfg,
        &mut kargs![
            &table,
            &ids,
            &out,
            &dim32,
            &per_id,
            &stride,
            &col,
            &offset,
            &table_rows,
            &scale,
            &segs,
            &vec
        ],
    )
}

/// Rows run concurrently; a row whose id a later row names again writes nothing, so the result
/// is the reference's row order (last write wins), duplicate dummy rows included.
pub(crate) fn scatter_rows(be: &CudaBackend, a: ScatterArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "scatter_rows";
    let _timer = be.op_timer(OP);
    let (rows, dim) = (a.rows, a.dim);
    if rows == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    check_len(OP, "src", a.src.len, rows * dim)?;
    check_len(OP, "ids", a.ids.len, rows)?;
    let src = t_ptr(be, OP, "src", a.src)?;
    let table = t_ptr(be, OP, "table", a.table)?;
    let ids = a.ids.mem.ptr();
    let vec = vectorizable(be, &[dim], &[src, table]);
    let chunks = if vec { dim / vec_elems(be) } else { dim };
    let (cfg, segs) = row_launch(OP, rows, chunks)?;
    let rows32 = int(OP, "rows", rows)?;
    let dim32 = int(OP, "dim", dim)?;
    let table_rows = (a.table.len / dim).min(i32::MAX as usize) as i32;
    let vec = i32::from(vec);
    be.launch(
        Kernel::LmScatterRows,
        cfg,
        &mut kargs![
            &src,
            &ids,
            &table,
            &rows32,
            &dim32,
            &table_rows,
            &segs,
            &vec
        ],
    )
}

pub(crate) fn copy_rows(be: &CudaBackend, a: CopyRowsArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "copy_rows";
    let _timer = be.op_timer(OP);
    let (rows, len) = (a.rows, a.len);
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let last = rows - 1;
    check_len(
        OP,
        "src",
        a.src.len,
        a.src_offset + last * a.src_stride + len,
    )?;
    check_len(
        OP,
        "dst",
        a.dst.len,
        a.dst_offset + last * a.dst_stride + len,
    )?;
    let src = t_ptr(be, OP, "src", a.src)?;
    let dst = t_ptr(be, OP, "dst", a.dst)?;
    let vec = vectorizable(
        be,
        &[len, a.src_offset, a.src_stride, a.dst_offset, a.dst_stride],
        &[src, dst],
    );
    let chunks = if vec { len / vec_elems(be) } else { len };
    let (cfg, segs) = row_launch(OP, rows, chunks)?;
    let len32 = int(OP, "len", len)?;
    let src_offset = long(OP, "src_offset", a.src_offset)?;
    let src_stride = long(OP, "src_stride", a.src_stride)?;
    let dst_offset = long(OP, "dst_offset", a.dst_offset)?;
    let dst_stride = long(OP, "dst_stride", a.dst_stride)?;
    let vec = i32::from(vec);
    be.launch(
        Kernel::LmCopyRows,
        cfg,
        &mut kargs![
            &src,
            &dst,
            &len32,
            &src_offset,
            &src_stride,
            &dst_offset,
            &dst_stride,
            &segs,
            &vec
        ],
    )
}

/// One thread per chunk of a song's row sums its audio rows in order of level, adds the embed
/// row, scales, and writes both rows of the pair (the reference's order, in f32).
pub(crate) fn feedback_embed(be: &CudaBackend, a: FeedbackArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "feedback_embed";
    let _timer = be.op_timer(OP);
    let (songs, dim, levels, stride, card) =
        (a.songs, a.dim, a.levels, a.codes_stride, a.cardinality);
    if songs == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    if levels == 0 || levels > stride {
        return Err(cuda_error(
            OP,
            format!("levels {levels} must be in 1..=codes_stride ({stride})"),
        ));
    }
    check_len(OP, "codes", a.codes.len, songs * stride)?;
    check_len(OP, "audio", a.audio.len, (levels - 1) * card * dim)?;
    check_len(OP, "out", a.out.len, 2 * songs * dim)?;
    let embed = t_ptr(be, OP, "embed", a.embed)?;
    let audio = t_ptr(be, OP, "audio", a.audio)?;
    let out = t_ptr(be, OP, "out", a.out)?;
    let codes = a.codes.mem.ptr();
    let vec = vectorizable(be, &[dim], &[embed, audio, out]);
    let chunks = if vec { dim / vec_elems(be) } else { dim };
    let (cfg, segs) = row_launch(OP, songs, chunks)?;
    let dim32 = int(OP, "dim", dim)?;
    let levels = int(OP, "levels", levels)?;
    let stride = int(OP, "codes_stride", stride)?;
    let offset = int(OP, "offset", a.offset)?;
    let card = int(OP, "cardinality", card)?;
    let embed_rows = (a.embed.len / dim).min(i32::MAX as usize) as i32;
    let (scale, vec) = (a.scale, i32::from(vec));
    be.launch(
        Kernel::LmFeedbackEmbed,
        cfg,
        &mut kargs![
            &embed,
            &audio,
            &codes,
            &out,
            &dim32,
            &levels,
            &stride,
            &offset,
            &card,
            &embed_rows,
            &scale,
            &segs,
            &vec
        ],
    )
}

/// One thread per chunk of a row sums the text row and the present codes' audio rows in order,
/// in f32 (the CPU backend's order).
pub(crate) fn embed_sum(be: &CudaBackend, a: EmbedSumArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "embed_sum";
    let _timer = be.op_timer(OP);
    let (rows, dim, stride, levels, card) = (a.rows, a.dim, a.stride, a.levels, a.cardinality);
    if rows == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    let text_cols = if a.text.is_some() { a.text_col + 1 } else { 0 };
    if a.codes_col + levels > stride || text_cols > stride {
        return Err(cuda_error(
            OP,
            format!(
                "columns (text {:?}, codes {}..{}) must fit the stride {stride}",
                a.text.map(|_| a.text_col),
                a.codes_col,
                a.codes_col + levels
            ),
        ));
    }
    check_len(OP, "ids", a.ids.len, rows * stride)?;
    check_len(OP, "audio", a.audio.len, levels * card * dim)?;
    check_len(OP, "out", a.out.len, rows * dim)?;
    let text = match a.text {
        Some(t) => t_ptr(be, OP, "text", t)?,
        None => 0,
    };
    let audio = t_ptr(be, OP, "audio", a.audio)?;
    let out = t_ptr(be, OP, "out", a.out)?;
    let ids = a.ids.mem.ptr();
    // A null text pointer is 0: aligned, so it does not veto the vector layout.
    let vec = vectorizable(be, &[dim], &[text, audio, out]);
    let chunks = if vec { dim / vec_elems(be) } else { dim };
    let (cfg, segs) = row_launch(OP, rows, chunks)?;
    let text_rows = a.text.map_or(0, |t| (t.len / dim).min(i32::MAX as usize)) as i32;
    let ints = [
        int(OP, "dim", dim)?,
        int(OP, "stride", stride)?,
        int(OP, "text_col", a.text_col)?,
        int(OP, "codes_col", a.codes_col)?,
        int(OP, "levels", levels)?,
        int(OP, "cardinality", card)?,
    ];
    let [dim32, stride, text_col, codes_col, levels, card] = ints;
    let vec = i32::from(vec);
    be.launch(
        Kernel::LmEmbedSum,
        cfg,
        &mut kargs![
            &text, &audio, &ids, &out, &dim32, &stride, &text_col, &codes_col, &levels, &card,
            &text_rows, &segs, &vec
        ],
    )
}

/// One block per row. Numerics (bf16 storage): `x = residual + delta` in f32; the sum of squares
/// is taken on that f32 `x` (as nano-vllm's fused add + RMSNorm), `residual` stores `x` rounded,
/// and `out` is `x * rsqrt(mean(x^2) + eps) * w` from the f32 `x`, rounded once. In f32 storage
/// this is the reference's arithmetic up to the summation order.
pub(crate) fn rms_norm(be: &CudaBackend, a: RmsNormArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "rms_norm";
    let _timer = be.op_timer(OP);
    let (n, dim) = (a.n, a.dim);
    check_len(OP, "residual", a.residual.len, n * dim)?;
    if let Some(d) = a.delta {
        check_len(OP, "delta", d.len, n * dim)?;
    }
    check_len(OP, "weight", a.weight.len, dim)?;
    check_len(OP, "out", a.out.len, n * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let residual = t_ptr(be, OP, "residual", a.residual)?;
    let delta = a.delta.map(|d| t_ptr(be, OP, "delta", d)).transpose()?;
    let weight = t_ptr(be, OP, "weight", a.weight)?;
    let out = t_ptr(be, OP, "out", a.out)?;
    norm_launch(
        be,
        [residual, delta.unwrap_or(0), weight, out],
        (n, dim),
        a.eps,
    )
}

/// The normed rows of `x` (`[n, dim]`) into `out` with `x` unchanged (`rms_norm` without a
/// delta): the input half of a `fused_linear` run apart.
pub(crate) fn rms_norm_rows(
    be: &CudaBackend,
    x: &CudaBuf,
    weight: &CudaBuf,
    eps: f32,
    out: &mut CudaBuf,
    (n, dim): (usize, usize),
) -> Result<()> {
    const OP: &str = "fused_linear";
    check_len(OP, "x", x.len, n * dim)?;
    check_len(OP, "norm.weight", weight.len, dim)?;
    check_len(OP, "scratch.normed", out.len, n * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let ptrs = [
        t_ptr(be, OP, "x", x)?,
        0,
        t_ptr(be, OP, "norm.weight", weight)?,
        t_ptr(be, OP, "scratch.normed", out)?,
    ];
    norm_launch(be, ptrs, (n, dim), eps)
}

/// Launches `lm_rms_norm` on `[residual, delta (0: none), weight, out]`.
fn norm_launch(be: &CudaBackend, ptrs: [u64; 4], (n, dim): (usize, usize), eps: f32) -> Result<()> {
    const OP: &str = "rms_norm";
    let [residual, delta, weight, out] = ptrs;
    let vec = vectorizable(be, &[dim], &[residual, delta, weight, out]);
    let chunks = if vec { dim / vec_elems(be) } else { dim };
    // The block width depends on `dim` only, so a row's bits do not depend on `n`.
    let cached = chunks <= NORM_MAX_THREADS * NORM_ITEMS;
    let block = if cached {
        chunks
            .div_ceil(NORM_ITEMS)
            .next_multiple_of(32)
            .clamp(32, NORM_MAX_THREADS)
    } else {
        NORM_MAX_THREADS
    };
    let cfg = Launch {
        grid: int(OP, "n", n)? as u32,
        block: block as u32,
        smem: 0,
    };
    let dim32 = int(OP, "dim", dim)?;
    let (vec, cached) = (i32::from(vec), i32::from(cached));
    be.launch(
        Kernel::LmRmsNorm,
        cfg,
        &mut kargs![&residual, &delta, &weight, &out, &dim32, &eps, &vec, &cached],
    )
}

pub(crate) fn add_row(be: &CudaBackend, a: AddRowArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "add_row";
    let _timer = be.op_timer(OP);
    let (n, dim, row) = (a.n, a.dim, a.row);
    check_len(OP, "x", a.x.len, n * dim)?;
    check_len(OP, "table", a.table.len, (row + 1) * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let x = t_ptr(be, OP, "x", a.x)?;
    let trow = t_ptr(be, OP, "table", a.table)? + (row * dim * be.esize()) as u64;
    let vec = vectorizable(be, &[dim], &[x, trow]);
    let chunks = if vec { dim / vec_elems(be) } else { dim };
    let (cfg, segs) = row_launch(OP, n, chunks)?;
    let dim32 = int(OP, "dim", dim)?;
    let vec = i32::from(vec);
    be.launch(
        Kernel::LmAddRow,
        cfg,
        &mut kargs![&x, &trow, &dim32, &segs, &vec],
    )
}

/// `silu(a) = a / (1 + expf(-a))` in f32, times the up half, rounded once.
pub(crate) fn swiglu(be: &CudaBackend, a: SwigluArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "swiglu";
    let _timer = be.op_timer(OP);
    let (n, inter) = (a.n, a.inter);
    check_len(OP, "x", a.x.len, n * 2 * inter)?;
    check_len(OP, "out", a.out.len, n * inter)?;
    if n == 0 || inter == 0 {
        return Ok(());
    }
    let x = t_ptr(be, OP, "x", a.x)?;
    let out = t_ptr(be, OP, "out", a.out)?;
    let vec = vectorizable(be, &[inter], &[x, out]);
    let chunks = if vec { inter / vec_elems(be) } else { inter };
    let (cfg, segs) = row_launch(OP, n, chunks)?;
    let inter32 = int(OP, "inter", inter)?;
    let vec = i32::from(vec);
    be.launch(
        Kernel::LmSwiglu,
        cfg,
        &mut kargs![&x, &out, &inter32, &segs, &vec],
    )
}

/// A group of lanes (or one warp) per (token, head) over the q heads then the k heads. Numerics: the head's sum of
/// squares, the norm and the rotation all in f32 from the stored inputs (cos and sin from the f32
/// table), rounded once when stored (nano-vllm rounds after the norm too; the single rounding is
/// the closer of the two to the f32 reference).
pub(crate) fn qk_norm_rope(be: &CudaBackend, a: QkNormRopeArgs<'_, CudaBackend>) -> Result<()> {
    let _timer = be.op_timer("qk_norm_rope");
    let rope = RopeOf {
        qk_norm: a.qk_norm,
        rope: a.rope,
        eps: a.eps,
    };
    match rope_call(be, a.qkv, &rope, a.start, (a.geom, a.first_token))? {
        Some(c) => c.launch(be),
        None => Ok(()),
    }
}

/// One checked `lm_qk_norm_rope` launch: its arguments and grid.
pub(crate) struct RopeCall {
    pub(crate) qkv: u64,
    pub(crate) q_norm: u64,
    pub(crate) k_norm: u64,
    pub(crate) rope: u64,
    pub(crate) start: u64,
    pub(crate) tokens: i32,
    pub(crate) time: i32,
    pub(crate) q_heads: i32,
    pub(crate) kv_heads: i32,
    pub(crate) head_dim: i32,
    pub(crate) max_pos: i32,
    pub(crate) eps: f32,
    pub(crate) normed: i32,
    /// Lanes per head of the vector layout; 0: the warp-per-head fallback.
    pub(crate) group: i32,
    pub(crate) pair: i32,
    pub(crate) cfg: Launch,
}

impl RopeCall {
    pub(crate) fn launch(&self, be: &CudaBackend) -> Result<()> {
        let c = self;
        be.launch(
            Kernel::LmQkNormRope,
            c.cfg,
            &mut kargs![
                &c.qkv,
                &c.q_norm,
                &c.k_norm,
                &c.rope,
                &c.start,
                &c.tokens,
                &c.time,
                &c.q_heads,
                &c.kv_heads,
                &c.head_dim,
                &c.max_pos,
                &c.eps,
                &c.normed,
                &c.group,
                &c.pair
            ],
        )
    }
}

/// Checks the rotation of `(geom, first_token)`'s tokens of `qkv` and builds its launch (`None`:
/// nothing to rotate).
pub(crate) fn rope_call(
    be: &CudaBackend,
    qkv: &CudaBuf,
    r: &RopeOf<'_, CudaBackend>,
    start: &super::CudaInts,
    (g, first_token): (HeadGeom, usize),
) -> Result<Option<RopeCall>> {
    const OP: &str = "qk_norm_rope";
    let (hd, time) = (g.head_dim, g.time);
    if hd == 0 || hd % 2 != 0 {
        return Err(cuda_error(
            OP,
            format!("head_dim must be even and positive ({g:?})"),
        ));
    }
    let (tokens, width) = (g.tokens(), g.qkv_width());
    check_len(OP, "qkv", qkv.len, (first_token + tokens) * width)?;
    if let Some([q, k]) = r.qk_norm {
        check_len(OP, "q_norm", q.len, hd)?;
        check_len(OP, "k_norm", k.len, hd)?;
    }
    check_len(OP, "start", start.len, g.rows)?;
    let heads = g.q_heads + g.kv_heads;
    if tokens == 0 || heads == 0 {
        return Ok(None);
    }
    // Positions are device data: only the smallest table a call can use is checked here.
    check_len(OP, "rope", r.rope.len, time * hd)?;
    if !r.rope.f32 && be.precision != Precision::F32 {
        return Err(cuda_error(
            OP,
            "`rope` must be stored in f32 (BufRole::Table)",
        ));
    }
    let qkv = t_ptr(be, OP, "qkv", qkv)? + (first_token * width * be.esize()) as u64;
    // Without norms the kernel reads neither pointer; 0 keeps the alignment tests below true.
    let (q_norm, k_norm) = match r.qk_norm {
        Some([q, k]) => (t_ptr(be, OP, "q_norm", q)?, t_ptr(be, OP, "k_norm", k)?),
        None => (0, 0),
    };
    let half = hd / 2;
    // The vector layout: `group` lanes per head, one 16-byte access per lane and half.
    let v = vec_elems(be);
    let group = half / v;
    let rope = r.rope.mem.ptr();
    let aligned = [qkv, q_norm, k_norm, rope].iter().all(|p| p % 16 == 0);
    let vector = half % v == 0 && group.is_power_of_two() && group <= 32 && aligned;
    // Else one warp per head, by pairs when the half spans whole warps of them.
    let pair = half % 64 == 0 && [qkv, q_norm, k_norm, rope].iter().all(|p| p % 8 == 0);
    let lanes_per_head = if vector { group } else { 32 };
    let threads = tokens
        .checked_mul(heads)
        .and_then(|h| h.checked_mul(lanes_per_head))
        .filter(|&t| t <= i32::MAX as usize)
        .ok_or_else(|| {
            cuda_error(
                OP,
                format!("{tokens} tokens of {heads} heads exceed one launch"),
            )
        })?;
    int(OP, "qkv_width", width)?;
    Ok(Some(RopeCall {
        qkv,
        q_norm,
        k_norm,
        rope,
        start: start.mem.ptr(),
        tokens: int(OP, "tokens", tokens)?,
        time: int(OP, "time", time)?,
        q_heads: int(OP, "q_heads", g.q_heads)?,
        kv_heads: int(OP, "kv_heads", g.kv_heads)?,
        head_dim: int(OP, "head_dim", hd)?,
        max_pos: (r.rope.len / hd).min(i32::MAX as usize) as i32,
        eps: r.eps,
        normed: i32::from(r.qk_norm.is_some()),
        group: if vector { group as i32 } else { 0 },
        pair: i32::from(pair),
        cfg: Launch {
            grid: threads.div_ceil(ROPE_THREADS) as u32,
            block: ROPE_THREADS as u32,
            smem: 0,
        },
    }))
}
