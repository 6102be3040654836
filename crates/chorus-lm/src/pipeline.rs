//! The one-graph-per-frame step loop's device side: per bucket of request counts, two halves of
//! step I/O, and the frame in flight.
//!
//! Frame `f` uses half `f % 2` of its bucket, so the host fills frame `f + 1`'s inputs and reads
//! frame `f - 1`'s outputs while the device runs frame `f`; each half has a completion marker, and
//! the host waits for one frame only, a frame late. A frame program is launched under the key
//! `2 * bucket + half`, so a graph-capturing backend keeps one graph per bucket and half.

use chorus_core::{Buckets, LmOps, Result};

/// One bucket's step I/O, twice.
pub struct Bucket<T> {
    /// Requests a step of this bucket runs (padding included).
    pub size: usize,
    pub halves: [T; 2],
}

/// Every bucket's I/O, the halves' markers, and the launched frame the host has not read yet
/// (with its payload `P`: what the host needs to read it).
pub struct Pipeline<B: LmOps, T, P> {
    pub buckets: Vec<Bucket<T>>,
    sizes: Buckets,
    marks: [B::Mark; 2],
    half: usize,
    pending: Option<Pending<P>>,
}

/// A launched frame: its bucket, half and payload.
pub struct Pending<P> {
    pub bucket: usize,
    pub half: usize,
    pub payload: P,
}

impl<B: LmOps, T, P> Pipeline<B, T, P> {
    /// I/O for every bucket of `sizes`, two halves each, made by `make(bucket size)`.
    pub fn new(be: &B, sizes: &Buckets, mut make: impl FnMut(usize) -> Result<T>) -> Result<Self> {
        let buckets = sizes
            .sizes()
            .iter()
            .map(|&size| {
                Ok(Bucket {
                    size,
                    halves: [make(size)?, make(size)?],
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            buckets,
            sizes: sizes.clone(),
            marks: [be.mark()?, be.mark()?],
            half: 0,
            pending: None,
        })
    }

    /// The bucket that runs `n` requests (the smallest that holds them).
    pub fn pick(&self, n: usize) -> Result<usize> {
        let size = self.sizes.pick(n)?;
        Ok(self
            .buckets
            .iter()
            .position(|b| b.size == size)
            .unwrap_or(0))
    }

    /// The half the next launch uses.
    pub fn half(&self) -> usize {
        self.half
    }

    /// The backend's program key of a bucket's half.
    pub fn key(bucket: usize, half: usize) -> usize {
        2 * bucket + half
    }

    /// Bucket sizes with the program key of each one's half 0 (for device timing).
    pub fn keys(&self) -> Vec<(usize, usize)> {
        (0..self.buckets.len())
            .map(|b| (self.buckets[b].size, Self::key(b, 0)))
            .collect()
    }

    /// Queues `program` for `bucket` on `half` over that half's I/O, recording the half's marker,
    /// without waiting.
    pub fn run(
        &mut self,
        be: &B,
        (bucket, half): (usize, usize),
        program: &mut dyn FnMut(&B, &mut T) -> Result<()>,
    ) -> Result<()> {
        let io = &mut self.buckets[bucket].halves[half];
        be.launch(
            Self::key(bucket, half),
            &mut |b: &B| program(b, &mut *io),
            &mut self.marks[half],
        )
    }

    /// Records a frame just launched on the current half as the one in flight and moves to the
    /// other half. The previous one must have been taken ([`Pipeline::take`]).
    pub fn launched(&mut self, bucket: usize, payload: P) {
        self.pending = Some(Pending {
            bucket,
            half: self.half,
            payload,
        });
        self.half ^= 1;
    }

    /// Takes the frame in flight, if any, without waiting for it.
    pub fn take(&mut self) -> Option<Pending<P>> {
        self.pending.take()
    }

    /// Blocks until the last frame launched on `half` has finished.
    pub fn wait(&self, be: &B, half: usize) -> Result<()> {
        be.wait(&self.marks[half])
    }
}
