//! Decoded PCM handed to streams without a copy or an allocation per frame: a step writes all its
//! rows into one pooled block, and each frame's event holds the block and its row. A block goes
//! back to the pool once no stream holds a frame of it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use chorus_core::FRAME_SAMPLES;

/// Host memory the engine's PCM blocks may take at most. Readers release a step's frames once
/// their connection has sent them (a few steps later under load); when slow readers hold every
/// block, a step's frames are copied out one by one instead (counted in
/// `chorus_pcm_copied_frames_total`), as blocks pinned by a few lagging frames would otherwise
/// hold far more memory than the frames.
pub const MAX_PCM_POOL_BYTES: usize = 256 << 20;
/// Blocks kept at least, and at most, whatever their size.
pub const MIN_PCM_BLOCKS: usize = 4;
pub const MAX_PCM_BLOCKS: usize = 64;

/// One step's PCM, `[rows, FRAME_SAMPLES]`.
struct Block {
    samples: Box<[f32]>,
}

#[derive(Clone)]
enum Storage {
    /// Row `row` of a step's block.
    Shared { block: Arc<Block>, row: usize },
    /// A frame of its own (a step decoded frame by frame, or the pool exhausted).
    Owned(Arc<[f32]>),
}

/// One frame of decoded PCM (`FRAME_SAMPLES` samples); cloning it shares the samples.
#[derive(Clone)]
pub struct PcmFrame(Storage);

impl PcmFrame {
    /// A frame holding a copy of `samples`.
    pub fn from_samples(samples: &[f32]) -> Self {
        Self(Storage::Owned(samples.into()))
    }

    /// Whether the frame shares a step's block (no copy was made for it).
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Storage::Shared { .. })
    }
}

impl Deref for PcmFrame {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match &self.0 {
            Storage::Shared { block, row } => {
                &block.samples[row * FRAME_SAMPLES..(row + 1) * FRAME_SAMPLES]
            }
            Storage::Owned(samples) => samples,
        }
    }
}

impl PartialEq for PcmFrame {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for PcmFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PcmFrame({} samples)", self.len())
    }
}

/// The engine thread's blocks, each sized for the largest batch.
pub(crate) struct PcmPool {
    blocks: Vec<Arc<Block>>,
    rows: usize,
    /// Blocks this pool may allocate (from [`MAX_PCM_POOL_BYTES`]).
    cap: usize,
    /// The block the current step writes (an index into `blocks`), or `None` when every block is
    /// held and the step writes `spare`.
    current: Option<usize>,
    /// Where a step writes when no block is free; its frames are then copied out.
    spare: Box<[f32]>,
}

impl PcmPool {
    pub(crate) fn new(rows: usize) -> Self {
        let block_bytes = (rows * FRAME_SAMPLES * std::mem::size_of::<f32>()).max(1);
        let cap = (MAX_PCM_POOL_BYTES / block_bytes).clamp(MIN_PCM_BLOCKS, MAX_PCM_BLOCKS);
        Self {
            blocks: Vec::with_capacity(cap),
            rows,
            cap,
            current: None,
            spare: vec![0.0; rows * FRAME_SAMPLES].into_boxed_slice(),
        }
    }

    /// The buffer the next step writes its `rows` rows into: a block no stream holds (a new one
    /// while the pool is below its cap), else the spare buffer.
    pub(crate) fn writable(&mut self, rows: usize) -> &mut [f32] {
        self.current = self
            .blocks
            .iter()
            .position(|b| Arc::strong_count(b) == 1)
            .or_else(|| {
                (self.blocks.len() < self.cap).then(|| {
                    self.blocks.push(Arc::new(Block {
                        samples: vec![0.0; self.rows * FRAME_SAMPLES].into_boxed_slice(),
                    }));
                    self.blocks.len() - 1
                })
            });
        let n = rows * FRAME_SAMPLES;
        match self.current {
            // `get_mut` succeeds: the pool holds the only reference (no weak ones are made).
            Some(i) => match Arc::get_mut(&mut self.blocks[i]) {
                Some(block) => &mut block.samples[..n],
                None => {
                    self.current = None;
                    &mut self.spare[..n]
                }
            },
            None => &mut self.spare[..n],
        }
    }

    /// Row `row` of what the last step wrote, as a frame for a stream.
    pub(crate) fn frame(&self, row: usize) -> PcmFrame {
        match self.current {
            Some(i) => PcmFrame(Storage::Shared {
                block: self.blocks[i].clone(),
                row,
            }),
            None => {
                PcmFrame::from_samples(&self.spare[row * FRAME_SAMPLES..(row + 1) * FRAME_SAMPLES])
            }
        }
    }

    /// Whether the last step's frames are copies (every block was held).
    pub(crate) fn copying(&self) -> bool {
        self.current.is_none()
    }

    /// Blocks allocated so far.
    #[cfg(test)]
    fn blocks(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(pool: &mut PcmPool, rows: usize, base: f32) {
        for (i, v) in pool.writable(rows).iter_mut().enumerate() {
            *v = base + i as f32;
        }
    }

    #[test]
    fn frames_share_the_block_and_keep_their_rows() {
        let mut pool = PcmPool::new(4);
        fill(&mut pool, 3, 0.0);
        let frames: Vec<PcmFrame> = (0..3).map(|r| pool.frame(r)).collect();
        for (r, f) in frames.iter().enumerate() {
            assert!(f.is_shared());
            assert_eq!(f.len(), FRAME_SAMPLES);
            assert_eq!(f[0], (r * FRAME_SAMPLES) as f32);
        }
        // The block is held: the next step takes a second one and leaves the frames intact.
        fill(&mut pool, 3, 1e6);
        assert_eq!(pool.blocks(), 2);
        assert_eq!(frames[1][0], FRAME_SAMPLES as f32);
    }

    #[test]
    fn released_blocks_are_reused_without_allocating() {
        let mut pool = PcmPool::new(2);
        for step in 0..100 {
            fill(&mut pool, 2, step as f32);
            let f = pool.frame(1);
            assert_eq!(f[0], step as f32 + FRAME_SAMPLES as f32);
        }
        assert_eq!(pool.blocks(), 1);
    }

    #[test]
    fn the_cap_follows_the_block_size() {
        assert_eq!(PcmPool::new(1).cap, MAX_PCM_BLOCKS);
        // 1024 rows: 7.5 MiB blocks, 34 of them in 256 MiB.
        assert_eq!(PcmPool::new(1024).cap, 34);
        assert_eq!(PcmPool::new(1 << 16).cap, MIN_PCM_BLOCKS);
    }

    #[test]
    fn held_blocks_past_the_cap_fall_back_to_copies() {
        let mut pool = PcmPool::new(1);
        let cap = pool.cap;
        let mut held = Vec::new();
        for step in 0..cap + 3 {
            fill(&mut pool, 1, step as f32);
            assert_eq!(pool.copying(), step >= cap);
            held.push(pool.frame(0));
        }
        assert_eq!(pool.blocks(), cap);
        assert!(held[..cap].iter().all(PcmFrame::is_shared));
        assert!(!held[cap].is_shared());
        // Every frame still reads what its own step wrote.
        for (step, f) in held.iter().enumerate() {
            assert_eq!(f[0], step as f32);
        }
        // Once readers let go, blocks are shared again.
        held.clear();
        fill(&mut pool, 1, 7.0);
        assert!(pool.frame(0).is_shared());
    }
}
