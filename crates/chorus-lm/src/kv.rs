//! The KV block pool: integers only (the device tensors are [`crate::LayerCache`]s, owned by the
//! model's stage).
//!
//! Block 0 is the null block: padded rows of a bucket point at it and it is never handed out.
//! A sequence (a song, with one block table per CFG row) reserves its worst case at admission
//! (counts only), then takes real blocks as its positions grow; since every take is covered by a
//! reservation, a take never fails and no sequence can run out of blocks halfway. Ending it
//! returns its blocks and the unused reservation.

use chorus_core::{Error, Result};

/// The block every padded row points at; never allocated to a sequence.
pub const NULL_BLOCK: u32 = 0;
/// Positions per KV block (FlashAttention's paged layout wants a multiple of 256).
pub const DEFAULT_BLOCK_SIZE: usize = 256;

/// Free blocks and outstanding reservations.
#[derive(Debug)]
pub struct BlockPool {
    free: Vec<u32>,
    /// Blocks promised to sequences and not yet taken.
    reserved: usize,
    usable: usize,
}

/// A sequence's claim on the pool: how many more blocks it may take.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    left: usize,
}

impl Reservation {
    /// Blocks this reservation may still take.
    pub fn left(&self) -> usize {
        self.left
    }
}

impl BlockPool {
    /// A pool of `total` blocks, block 0 being the null block.
    pub fn new(total: usize) -> Result<Self> {
        if total < 2 {
            return Err(Error::config(
                "BlockPool::new",
                format!("{total} KV blocks: need the null block and at least one more"),
            ));
        }
        // Popped from the back: low ids first, which keeps tests readable.
        let free = (1..total as u32).rev().collect();
        Ok(Self {
            free,
            reserved: 0,
            usable: total - 1,
        })
    }

    /// Blocks a sequence may use at most (all but the null block).
    pub fn usable(&self) -> usize {
        self.usable
    }

    /// Blocks neither taken nor promised.
    pub fn available(&self) -> usize {
        self.free.len() - self.reserved
    }

    /// Blocks taken by sequences.
    pub fn in_use(&self) -> usize {
        self.usable - self.free.len()
    }

    /// Promises `n` blocks, or says how many are available.
    pub fn reserve(&mut self, n: usize) -> Result<Reservation> {
        if n > self.available() {
            return Err(Error::input(
                "BlockPool::reserve",
                format!(
                    "KV pool busy: the song needs {n} blocks, {} of {} are available",
                    self.available(),
                    self.usable
                ),
            ));
        }
        self.reserved += n;
        Ok(Reservation { left: n })
    }

    /// Takes one block under `r`; `None` when the reservation is spent (a caller bug, not a
    /// shortage: reservations never exceed the free list).
    pub fn take(&mut self, r: &mut Reservation) -> Option<u32> {
        if r.left == 0 {
            return None;
        }
        let block = self.free.pop()?;
        r.left -= 1;
        self.reserved -= 1;
        Some(block)
    }

    /// Takes blocks under `r` until each of `rows` (one block table per row) holds `positions`
    /// positions; a spent reservation stops it early (see [`BlockPool::take`]).
    pub fn grow(
        &mut self,
        r: &mut Reservation,
        rows: &mut [Vec<u32>],
        positions: usize,
        block_size: usize,
    ) {
        let need = blocks_for(positions, block_size);
        for row in rows.iter_mut() {
            while row.len() < need {
                // A reservation for the worst case covers every take, so this only stops on a
                // caller bug, never on a shortage.
                match self.take(r) {
                    Some(b) => row.push(b),
                    None => break,
                }
            }
        }
    }

    /// Returns a sequence's blocks and the rest of its reservation.
    pub fn release(&mut self, blocks: impl IntoIterator<Item = u32>, r: Reservation) {
        self.reserved -= r.left;
        self.free
            .extend(blocks.into_iter().filter(|&b| b != NULL_BLOCK));
    }
}

/// Blocks needed to hold `positions` positions.
pub fn blocks_for(positions: usize, block_size: usize) -> usize {
    positions.div_ceil(block_size)
}

/// Writes the block tables of `rows` (`[rows.len(), max_blocks]` at the front of `dst`), unused
/// entries the null block.
pub fn fill_tables(dst: &mut [i32], rows: &[Vec<u32>], max_blocks: usize) {
    for (t, row) in dst.chunks_mut(max_blocks).zip(rows) {
        t.fill(NULL_BLOCK as i32);
        for (d, &b) in t.iter_mut().zip(row) {
            *d = b as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_bounds_takes_and_release_returns_everything() {
        let mut pool = BlockPool::new(5).unwrap();
        assert_eq!(pool.usable(), 4);
        let mut a = pool.reserve(3).unwrap();
        assert_eq!(pool.available(), 1);
        assert!(pool.reserve(2).is_err());
        let b1 = pool.take(&mut a).unwrap();
        let b2 = pool.take(&mut a).unwrap();
        assert_ne!(b1, NULL_BLOCK);
        assert_ne!(b1, b2);
        assert_eq!(pool.in_use(), 2);
        assert_eq!(pool.available(), 1);
        pool.release([b1, b2], a);
        assert_eq!(pool.available(), 4);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn a_spent_reservation_takes_nothing() {
        let mut pool = BlockPool::new(3).unwrap();
        let mut r = pool.reserve(1).unwrap();
        assert!(pool.take(&mut r).is_some());
        assert!(pool.take(&mut r).is_none());
    }

    #[test]
    fn exhaustion_is_a_clear_error() {
        let mut pool = BlockPool::new(3).unwrap();
        let err = pool.reserve(3).unwrap_err().to_string();
        assert!(err.contains("needs 3 blocks, 2 of 2"), "{err}");
        assert!(BlockPool::new(1).is_err());
    }

    #[test]
    fn grow_fills_every_row_and_stops_at_the_reservation() {
        let mut pool = BlockPool::new(8).unwrap();
        let mut r = pool.reserve(2 * blocks_for(600, 256)).unwrap();
        let mut rows = [Vec::new(), Vec::new()];
        pool.grow(&mut r, &mut rows, 257, 256);
        assert_eq!(rows, [vec![1, 2], vec![3, 4]]);
        assert_eq!(r.left(), 2);
        // Already long enough: nothing is taken.
        pool.grow(&mut r, &mut rows, 300, 256);
        assert_eq!(r.left(), 2);
        // Past the reservation: the first row gets the last two blocks, the second none.
        pool.grow(&mut r, &mut rows, 1024, 256);
        assert_eq!(rows, [vec![1, 2, 5, 6], vec![3, 4]]);
        assert_eq!(r.left(), 0);
        assert_eq!(pool.in_use(), 6);
        pool.release(rows.into_iter().flatten(), r);
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.available(), 7);
    }

    #[test]
    fn fill_tables_pads_with_the_null_block() {
        let mut dst = [-1i32; 7];
        fill_tables(&mut dst, &[vec![4, 5], vec![6]], 3);
        assert_eq!(dst, [4, 5, 0, 6, 0, 0, -1]);
    }

    #[test]
    fn released_blocks_are_handed_out_again() {
        let mut pool = BlockPool::new(3).unwrap();
        let mut a = pool.reserve(2).unwrap();
        let taken = [pool.take(&mut a).unwrap(), pool.take(&mut a).unwrap()];
        // The null block in a released table is never put back on the free list.
        pool.release(taken.into_iter().chain([NULL_BLOCK]), a);
        let mut b = pool.reserve(2).unwrap();
        let mut again = [pool.take(&mut b).unwrap(), pool.take(&mut b).unwrap()];
        again.sort_unstable();
        assert_eq!(again, [1, 2]);
        assert!(pool.reserve(1).is_err());
    }

    #[test]
    fn blocks_for_rounds_up() {
        assert_eq!(blocks_for(256, 256), 1);
        assert_eq!(blocks_for(257, 256), 2);
        assert_eq!(blocks_for(0, 256), 0);
    }
}
