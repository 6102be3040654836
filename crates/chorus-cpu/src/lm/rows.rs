//! Row movement: gathers (embedding lookups), scatters (per-song state write-back), strided row
//! copies, the LM feedback embedding and the learned-position add.

use crate::{check, CpuBackend};
use chorus_core::lm_ops::{
    AddRowArgs, CopyRowsArgs, EmbedSumArgs, FeedbackArgs, GatherArgs, ScatterArgs,
};
use chorus_core::{Error, Result};
use rayon::prelude::*;

/// Elements per rayon task for row copies (below this, splitting costs more than it saves).
const ROW_GRAIN_ELEMS: usize = 16 * 1024;

/// Row `offset + id` of a table of `table_rows` rows, or an error naming the op.
fn table_row(op: &'static str, id: i32, offset: usize, table_rows: usize) -> Result<usize> {
    let row = usize::try_from(id).ok().map(|id| id + offset);
    match row {
        Some(row) if row < table_rows => Ok(row),
        _ => Err(Error::input(
            op,
            format!("id {id} (+ offset {offset}) is outside the table's {table_rows} rows"),
        )),
    }
}

/// Fails on a zero row width (a table's row count would be undefined).
fn nonzero_dim(op: &'static str, dim: usize) -> Result<()> {
    if dim == 0 {
        return Err(Error::input(op, "dim must be at least 1"));
    }
    Ok(())
}

pub(super) fn gather_rows(be: &CpuBackend, a: GatherArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "gather_rows";
    let (rows, dim, per_id) = (a.rows, a.dim, a.rows_per_id);
    if rows == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    if per_id == 0 {
        return Err(Error::input(OP, "rows_per_id must be at least 1"));
    }
    let ids_n = (rows - 1) / per_id + 1;
    check::at_least(
        OP,
        "ids",
        a.ids.len(),
        (ids_n - 1) * a.ids_stride + a.ids_col + 1,
    )?;
    check::at_least(OP, "out", a.out.len(), rows * dim)?;
    let table_rows = a.table.len() / dim;
    for i in 0..ids_n {
        table_row(
            OP,
            a.ids.0[i * a.ids_stride + a.ids_col],
            a.offset,
            table_rows,
        )?;
    }
    let (ids, table, scale) = (&a.ids.0, &a.table.0, a.scale);
    let (stride, col, offset) = (a.ids_stride, a.ids_col, a.offset);
    let out = &mut a.out.0[..rows * dim];
    be.install(|| {
        out.par_chunks_mut(dim)
            .with_min_len((ROW_GRAIN_ELEMS / dim).max(1))
            .enumerate()
            .for_each(|(r, o)| {
                // In range: every id was checked above.
                let row = ids[(r / per_id) * stride + col] as usize + offset;
                for (d, &t) in o.iter_mut().zip(&table[row * dim..(row + 1) * dim]) {
                    *d = scale * t;
                }
            });
    });
    Ok(())
}

pub(super) fn scatter_rows(a: ScatterArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "scatter_rows";
    let (rows, dim) = (a.rows, a.dim);
    if rows == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    check::at_least(OP, "src", a.src.len(), rows * dim)?;
    check::at_least(OP, "ids", a.ids.len(), rows)?;
    let table_rows = a.table.len() / dim;
    for &id in &a.ids.0[..rows] {
        table_row(OP, id, 0, table_rows)?;
    }
    // Row order: padded rows may all name the dummy row, and the last write must win.
    for (r, s) in a.src.0[..rows * dim].chunks_exact(dim).enumerate() {
        let row = a.ids.0[r] as usize;
        a.table.0[row * dim..(row + 1) * dim].copy_from_slice(s);
    }
    Ok(())
}

pub(super) fn copy_rows(a: CopyRowsArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "copy_rows";
    let (rows, len) = (a.rows, a.len);
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let last = rows - 1;
    check::at_least(
        OP,
        "src",
        a.src.len(),
        a.src_offset + last * a.src_stride + len,
    )?;
    check::at_least(
        OP,
        "dst",
        a.dst.len(),
        a.dst_offset + last * a.dst_stride + len,
    )?;
    for r in 0..rows {
        let s = a.src_offset + r * a.src_stride;
        let d = a.dst_offset + r * a.dst_stride;
        a.dst.0[d..d + len].copy_from_slice(&a.src.0[s..s + len]);
    }
    Ok(())
}

pub(super) fn feedback_embed(be: &CpuBackend, a: FeedbackArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "feedback_embed";
    let (songs, dim, levels, stride, card) =
        (a.songs, a.dim, a.levels, a.codes_stride, a.cardinality);
    if songs == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    if levels == 0 || levels > stride {
        return Err(Error::input(
            OP,
            format!("levels {levels} must be in 1..=codes_stride ({stride})"),
        ));
    }
    check::at_least(OP, "codes", a.codes.len(), songs * stride)?;
    check::at_least(OP, "audio", a.audio.len(), (levels - 1) * card * dim)?;
    check::at_least(OP, "out", a.out.len(), 2 * songs * dim)?;
    let embed_rows = a.embed.len() / dim;
    let codes = &a.codes.0[..songs * stride];
    for (s, c) in codes.chunks_exact(stride).enumerate() {
        for (l, &code) in c[..levels].iter().enumerate() {
            let limit = if l == 0 {
                embed_rows.saturating_sub(a.offset)
            } else {
                card
            };
            if code < 0 || code as usize >= limit {
                return Err(Error::CodeOutOfRange {
                    op: OP,
                    row: s,
                    codebook: l,
                    code: i64::from(code),
                    cardinality: limit,
                });
            }
        }
    }
    let (embed, audio, offset, scale) = (&a.embed.0, &a.audio.0, a.offset, a.scale);
    let out = &mut a.out.0[..2 * songs * dim];
    be.install(|| {
        out.par_chunks_mut(2 * dim)
            .zip(codes.par_chunks(stride))
            .for_each(|(pair, c)| {
                let (o, twin) = pair.split_at_mut(dim);
                // The audio rows first, in order of level (codes checked above)...
                let audio_row = |l: usize| {
                    let at = ((l - 1) * card + c[l] as usize) * dim;
                    &audio[at..at + dim]
                };
                if levels > 1 {
                    o.copy_from_slice(audio_row(1));
                    for l in 2..levels {
                        o.iter_mut().zip(audio_row(l)).for_each(|(d, &x)| *d += x);
                    }
                } else {
                    o.fill(0.0);
                }
                // ...then added to the embed row, then scaled.
                let at = (offset + c[0] as usize) * dim;
                for (d, &e) in o.iter_mut().zip(&embed[at..at + dim]) {
                    *d = scale * (e + *d);
                }
                twin.copy_from_slice(o);
            });
    });
    Ok(())
}

pub(super) fn embed_sum(be: &CpuBackend, a: EmbedSumArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "embed_sum";
    let (rows, dim, stride, levels, card) = (a.rows, a.dim, a.stride, a.levels, a.cardinality);
    if rows == 0 {
        return Ok(());
    }
    nonzero_dim(OP, dim)?;
    let text_cols = if a.text.is_some() { a.text_col + 1 } else { 0 };
    if a.codes_col + levels > stride || text_cols > stride {
        return Err(Error::input(
            OP,
            format!(
                "columns (text {:?}, codes {}..{}) must fit the stride {stride}",
                a.text.map(|_| a.text_col),
                a.codes_col,
                a.codes_col + levels
            ),
        ));
    }
    check::at_least(OP, "ids", a.ids.len(), rows * stride)?;
    check::at_least(OP, "audio", a.audio.len(), levels * card * dim)?;
    check::at_least(OP, "out", a.out.len(), rows * dim)?;
    let ids = &a.ids.0[..rows * stride];
    let text_rows = a.text.map_or(0, |t| t.len() / dim);
    for (r, row) in ids.chunks_exact(stride).enumerate() {
        if let Some(t) = a.text.map(|_| row[a.text_col]).filter(|&t| t >= 0) {
            if t as usize >= text_rows {
                return Err(Error::input(
                    OP,
                    format!("row {r}: text id {t} is outside the text table of {text_rows} rows"),
                ));
            }
        }
        for (l, &c) in row[a.codes_col..a.codes_col + levels].iter().enumerate() {
            if c >= 0 && c as usize >= card {
                return Err(Error::CodeOutOfRange {
                    op: OP,
                    row: r,
                    codebook: l,
                    code: i64::from(c),
                    cardinality: card,
                });
            }
        }
    }
    let (text, audio, text_col, codes_col) =
        (a.text.map(|t| &t.0), &a.audio.0, a.text_col, a.codes_col);
    let out = &mut a.out.0[..rows * dim];
    be.install(|| {
        out.par_chunks_mut(dim)
            .zip(ids.par_chunks(stride))
            .for_each(|(o, row)| {
                o.fill(0.0);
                // Ids checked above: a present one is inside its table.
                let mut add = |table: &[f32], at: usize| {
                    o.iter_mut()
                        .zip(&table[at * dim..(at + 1) * dim])
                        .for_each(|(d, &x)| *d += x);
                };
                if let Some(t) = text.filter(|_| row[text_col] >= 0) {
                    add(t, row[text_col] as usize);
                }
                for (l, &c) in row[codes_col..codes_col + levels].iter().enumerate() {
                    if c >= 0 {
                        add(audio, l * card + c as usize);
                    }
                }
            });
    });
    Ok(())
}

pub(super) fn add_row(a: AddRowArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "add_row";
    let (n, dim, row) = (a.n, a.dim, a.row);
    check::at_least(OP, "x", a.x.len(), n * dim)?;
    check::at_least(OP, "table", a.table.len(), (row + 1) * dim)?;
    if dim == 0 {
        return Ok(());
    }
    let t = &a.table.0[row * dim..(row + 1) * dim];
    for xr in a.x.0[..n * dim].chunks_exact_mut(dim) {
        xr.iter_mut().zip(t).for_each(|(d, &v)| *d += v);
    }
    Ok(())
}
