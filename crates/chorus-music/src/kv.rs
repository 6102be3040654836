//! The KV block pool: integers only (the device tensors live in the stage).
//!
//! Block 0 is the null block: padded rows of a bucket point at it and it is never handed out.
//! A song reserves its worst case at admission (counts only), then takes real blocks as its
//! positions grow; since every take is covered by a reservation, a take never fails and no song
//! can run out of blocks halfway. Ending a song returns its blocks and the unused reservation.

use chorus_core::{Error, Result};

/// The block every padded row points at; never allocated to a song.
pub const NULL_BLOCK: u32 = 0;
/// Positions per KV block (FlashAttention's paged layout wants a multiple of 256).
pub const DEFAULT_BLOCK_SIZE: usize = 256;

/// Free blocks and outstanding reservations.
#[derive(Debug)]
pub struct BlockPool {
    free: Vec<u32>,
    /// Blocks promised to songs and not yet taken.
    reserved: usize,
    usable: usize,
}

/// A song's claim on the pool: how many more blocks it may take.
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

    /// Blocks a song may use at most (all but the null block).
    pub fn usable(&self) -> usize {
        self.usable
    }

    /// Blocks neither taken nor promised.
    pub fn available(&self) -> usize {
        self.free.len() - self.reserved
    }

    /// Blocks taken by songs.
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

    /// Returns a song's blocks and the rest of its reservation.
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
    fn blocks_for_rounds_up() {
        assert_eq!(blocks_for(256, 256), 1);
        assert_eq!(blocks_for(257, 256), 2);
        assert_eq!(blocks_for(0, 256), 0);
    }
}
