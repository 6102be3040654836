//! Admission to a step loop: each admitted request (a song, an utterance) takes a state slot and
//! a reservation of KV blocks for its worst case, so a running request never waits for memory;
//! blocks are taken as its positions grow and everything returns when it ends.
//!
//! A request owns `rows` block tables (two for a song's CFG rows, one for an utterance). The last
//! slot, `slots`, is the dummy slot that padded rows of a bucket use; it is never handed out.

use chorus_core::{Error, Result};

use crate::kv::{blocks_for, fill_tables, BlockPool, Reservation, NULL_BLOCK};

/// Free slots and the KV block pool.
#[derive(Debug)]
pub struct Seats {
    pool: BlockPool,
    free: Vec<usize>,
    slots: usize,
    rows: usize,
    block_size: usize,
    max_blocks: usize,
}

/// One admitted request's slot and blocks.
#[derive(Debug)]
pub struct Seat {
    pub slot: usize,
    /// One block table per row.
    pub blocks: Vec<Vec<u32>>,
    reservation: Reservation,
}

impl Seats {
    /// `slots` requests of `rows` rows each, over a pool of `kv_blocks` blocks (the null block
    /// included) of `block_size` positions; no row holds more than `max_positions` positions.
    pub fn new(
        slots: usize,
        rows: usize,
        kv_blocks: usize,
        block_size: usize,
        max_positions: usize,
    ) -> Result<Self> {
        if slots == 0 || rows == 0 || block_size == 0 || max_positions == 0 {
            return Err(Error::config(
                "Seats::new",
                format!("need positive slots ({slots}), rows ({rows}), block_size ({block_size}) and max_positions ({max_positions})"),
            ));
        }
        Ok(Self {
            pool: BlockPool::new(kv_blocks)?,
            free: (0..slots).rev().collect(),
            slots,
            rows,
            block_size,
            max_blocks: blocks_for(max_positions, block_size),
        })
    }

    /// Admits a request that may write `positions` positions per row; on an error (no slot, or
    /// not enough blocks) nothing changes. `what` names the request in the error ("song").
    pub fn admit(&mut self, positions: usize, what: &str) -> Result<Seat> {
        const OP: &str = "Seats::admit";
        let per_row = blocks_for(positions, self.block_size);
        if per_row > self.max_blocks {
            return Err(Error::input(
                OP,
                format!(
                    "the {what} needs {positions} positions per row, more than the {} a block table holds",
                    self.max_blocks * self.block_size
                ),
            ));
        }
        let Some(&slot) = self.free.last() else {
            return Err(Error::input(
                OP,
                format!("busy: all {} {what} slots are in use", self.slots),
            ));
        };
        let reservation = self.pool.reserve(self.rows * per_row).map_err(|_| {
            Error::input(
                OP,
                format!(
                    "KV pool busy: the {what} needs {} blocks, {} of {} are available",
                    self.rows * per_row,
                    self.pool.available(),
                    self.pool.usable()
                ),
            )
        })?;
        self.free.pop();
        Ok(Seat {
            slot,
            blocks: vec![Vec::new(); self.rows],
            reservation,
        })
    }

    /// Takes blocks until every row of `seat` holds `positions` positions (covered by its
    /// reservation when `positions` is within what it was admitted for).
    pub fn grow(&mut self, seat: &mut Seat, positions: usize) {
        let Seat {
            blocks,
            reservation,
            ..
        } = seat;
        self.pool
            .grow(reservation, blocks, positions, self.block_size);
    }

    /// Returns a seat's slot, blocks and unused reservation.
    pub fn release(&mut self, seat: Seat) {
        let Seat {
            slot,
            blocks,
            reservation,
        } = seat;
        self.pool.release(blocks.into_iter().flatten(), reservation);
        self.free.push(slot);
    }

    /// Writes the `rows` block tables of `seat` (`[rows, max_blocks]` at the front of `dst`),
    /// or null tables for a padded entry (`None`).
    pub fn fill_tables(&self, seat: Option<&Seat>, dst: &mut [i32]) {
        match seat {
            Some(s) => fill_tables(dst, &s.blocks, self.max_blocks),
            None => dst[..self.rows * self.max_blocks].fill(NULL_BLOCK as i32),
        }
    }

    /// The slot of padded rows.
    pub fn dummy_slot(&self) -> usize {
        self.slots
    }

    /// Slots in all (the dummy slot aside).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Block tables per request.
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Entries of one block table.
    pub fn max_blocks(&self) -> usize {
        self.max_blocks
    }

    /// KV blocks `(in use, available to new requests, usable in all)`.
    pub fn kv_blocks(&self) -> (usize, usize, usize) {
        (
            self.pool.in_use(),
            self.pool.available(),
            self.pool.usable(),
        )
    }

    /// Slots free now.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_reserves_the_worst_case_and_release_returns_everything() {
        // 2 slots of 2 rows, 9 blocks (8 usable) of 4 positions, at most 12 positions per row.
        let mut seats = Seats::new(2, 2, 9, 4, 12).unwrap();
        let mut a = seats.admit(9, "song").unwrap(); // 3 blocks per row: 6 reserved
        assert_eq!(seats.kv_blocks(), (0, 2, 8));
        seats.grow(&mut a, 5);
        assert_eq!(a.blocks.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
        assert_eq!(seats.kv_blocks(), (4, 2, 8));
        // 2 blocks per row do not fit in the 2 left: refused, nothing taken.
        let err = seats.admit(8, "song").unwrap_err().to_string();
        assert!(
            err.contains("KV pool busy: the song needs 4 blocks, 2 of 8"),
            "{err}"
        );
        assert_eq!(seats.kv_blocks(), (4, 2, 8));
        assert_eq!(seats.free_slots(), 1);
        let b = seats.admit(4, "song").unwrap();
        let err = seats.admit(1, "song").unwrap_err().to_string();
        assert!(err.contains("busy: all 2 song slots"), "{err}");
        let err = seats.admit(13, "song").unwrap_err().to_string();
        assert!(err.contains("13 positions per row"), "{err}");
        let mut tables = vec![-1; 2 * seats.max_blocks()];
        seats.fill_tables(Some(&a), &mut tables);
        assert_eq!(
            &tables[..3],
            &[a.blocks[0][0] as i32, a.blocks[0][1] as i32, 0]
        );
        seats.fill_tables(None, &mut tables);
        assert!(tables.iter().all(|&t| t == NULL_BLOCK as i32));
        seats.release(a);
        seats.release(b);
        assert_eq!(seats.kv_blocks(), (0, 8, 8));
        assert_eq!(seats.free_slots(), 2);
        assert_eq!(seats.dummy_slot(), 2);
    }
}
