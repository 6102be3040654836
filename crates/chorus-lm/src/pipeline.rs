//! The one-graph-per-frame step loop's device side: per bucket of request counts, two halves of
//! step I/O, and the frame in flight.
//!
//! Frame `f` uses half `f % 2` of its bucket, so the host fills frame `f + 1`'s inputs and reads
//! frame `f - 1`'s outputs while the device runs frame `f`; each half has a completion marker, and
//! the host waits for one frame only, a frame late. A frame program is launched under one key
//! per bucket, half and variant (a model's frame may come in variants, such as one that also
//! prefills a prompt chunk), so a graph-capturing backend keeps one graph for each.

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

    /// The backend's program key of a bucket's half in frame variant `variant`.
    pub fn key(&self, bucket: usize, half: usize, variant: usize) -> usize {
        2 * (variant * self.buckets.len() + bucket) + half
    }

    /// Bucket sizes with the program key of each one's half 0, variant 0 (for device timing).
    pub fn keys(&self) -> Vec<(usize, usize)> {
        (0..self.buckets.len())
            .map(|b| (self.buckets[b].size, self.key(b, 0, 0)))
            .collect()
    }

    /// Queues `program` (frame variant `variant`) for `bucket` on `half` over that half's I/O,
    /// recording the half's marker, without waiting.
    pub fn run(
        &mut self,
        be: &B,
        (bucket, half, variant): (usize, usize, usize),
        program: &mut dyn FnMut(&B, &mut T) -> Result<()>,
    ) -> Result<()> {
        let key = self.key(bucket, half, variant);
        let io = &mut self.buckets[bucket].halves[half];
        be.launch(
            key,
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

    /// The frame in flight, if any (launched and not yet taken).
    pub fn pending(&self) -> Option<&Pending<P>> {
        self.pending.as_ref()
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

/// What a model's stage provides so that the step loop itself is written once ([`step`],
/// [`warm_up`]): the model picks, stages and launches its frames and reads their outputs. `'s`
/// is the lifetime of the caller's sink.
pub trait FrameLoop<'s> {
    /// What the host needs to read a launched frame.
    type Launched;
    /// The caller's receiver of a step's events (`dyn FnMut(Event<'_>) + 's`).
    type Sink: ?Sized + 's;
    /// Picks the requests with a frame left, stages their inputs and launches the frame
    /// (recording it with [`Pipeline::launched`]); returns how many it launched (0: none).
    fn launch_frame(&mut self) -> Result<usize>;
    /// Stages padding-only inputs for `bucket`'s `half` and queues its program in frame variant
    /// `variant`.
    fn run_padding(&mut self, bucket: usize, half: usize, variant: usize) -> Result<()>;
    /// Frame variants the model launches (each bucket and half has one program per variant).
    fn variants(&self) -> usize {
        1
    }
    /// Reads a finished frame's outputs, hands its events to `sink`, retires ended requests.
    fn collect(&mut self, prev: &Pending<Self::Launched>, sink: &mut Self::Sink) -> Result<()>;
    /// Takes the frame in flight without waiting ([`Pipeline::take`]).
    fn take_pending(&mut self) -> Option<Pending<Self::Launched>>;
    /// Waits for the last frame launched on `half` ([`Pipeline::wait`]).
    fn wait_half(&self, half: usize) -> Result<()>;
    /// Buckets of the pipeline.
    fn bucket_count(&self) -> usize;
    /// True while some request is admitted.
    fn has_requests(&self) -> bool;
}

/// One step: launches the next frame of every request that has one, then reads the previous
/// frame's outputs (a frame late, after waiting for that frame only). The frame in flight is
/// read even when the launch fails, so no output is lost and the halves stay in step (a failed
/// launch advances neither the half nor any request). Returns the requests launched.
pub fn step<'s, S: FrameLoop<'s>>(s: &mut S, sink: &mut S::Sink) -> Result<usize> {
    let prev = s.take_pending();
    let launched = s.launch_frame();
    if let Some(prev) = prev {
        s.wait_half(prev.half)?;
        s.collect(&prev, sink)?;
    }
    launched
}

/// Reads the frame in flight, if any, without launching another (a caller gathering requests
/// for a fuller next frame). Returns whether one was read.
pub fn read_pending<'s, S: FrameLoop<'s>>(s: &mut S, sink: &mut S::Sink) -> Result<bool> {
    let Some(prev) = s.take_pending() else {
        return Ok(false);
    };
    s.wait_half(prev.half)?;
    s.collect(&prev, sink)?;
    Ok(true)
}

/// Runs every bucket's frame program (every variant) on both halves on padding alone (the dummy slot, the null
/// block), before any request is admitted: a graph-capturing backend captures them here instead
/// of when a bucket is first needed. `op` names the caller in the error.
pub fn warm_up<'s, S: FrameLoop<'s>>(s: &mut S, op: &'static str) -> Result<()> {
    if s.has_requests() {
        return Err(chorus_core::Error::input(
            op,
            "warm up before admitting requests",
        ));
    }
    // Largest bucket first: a backend's scratch grows to its size once, where in ascending order
    // each capture kept the smaller region the one before it had captured (2,500 STT streams
    // held ~4 GB of them, docs/PERFORMANCE.md).
    for bucket in (0..s.bucket_count()).rev() {
        for variant in 0..s.variants() {
            for half in 0..2 {
                s.run_padding(bucket, half, variant)?;
                s.wait_half(half)?;
            }
        }
    }
    Ok(())
}
