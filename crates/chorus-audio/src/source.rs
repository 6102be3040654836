//! A reader that publishes its byte position, so decoders can report progress and error offsets.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use symphonia::core::io::MediaSource;

/// Shared view of a `Tracked` reader's position (the reader itself moves into the decoder).
#[derive(Clone, Default)]
pub(crate) struct Position(Arc<AtomicU64>);

impl Position {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Wraps a seekable reader of known length and keeps `Position` current.
pub(crate) struct Tracked<R> {
    inner: R,
    pos: Position,
    len: u64,
}

impl<R: Read + Seek> Tracked<R> {
    /// Wraps `inner`, which must be positioned at its start; `len` is its total length and `pos`
    /// the handle that will follow the position.
    pub(crate) fn new(inner: R, len: u64, pos: Position) -> Self {
        Self { inner, pos, len }
    }
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos.0.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: Seek> Seek for Tracked<R> {
    fn seek(&mut self, from: SeekFrom) -> io::Result<u64> {
        let at = self.inner.seek(from)?;
        self.pos.0.store(at, Ordering::Relaxed);
        Ok(at)
    }
}

impl<R: Read + Seek + Send + Sync> MediaSource for Tracked<R> {
    fn is_seekable(&self) -> bool {
        true
    }

    fn byte_len(&self) -> Option<u64> {
        Some(self.len)
    }
}
