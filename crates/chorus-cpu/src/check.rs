//! Cheap length checks at the top of each op: one comparison per buffer, so a caller bug returns
//! a named error instead of a slice-index panic deep in a kernel.

use chorus_core::{Error, Result};

/// Fails unless `len >= need`.
pub(crate) fn at_least(op: &'static str, name: &str, len: usize, need: usize) -> Result<()> {
    if len < need {
        return Err(Error::Shape {
            op,
            name: name.to_string(),
            expected: vec![need],
            found: vec![len],
        });
    }
    Ok(())
}

/// Converts slot ids to row indices, failing on any id outside `[0, total_rows)`.
pub(crate) fn slot(op: &'static str, id: i32, total_rows: usize) -> Result<usize> {
    if id < 0 || id as usize >= total_rows {
        return Err(Error::UnknownSlot {
            op,
            slot: id.max(0) as usize,
            max_slots: total_rows,
        });
    }
    Ok(id as usize)
}
