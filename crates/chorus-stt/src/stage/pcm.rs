//! PCM in: samples of any chunk size, buffered on the host into 80 ms frames, and the staging
//! of the in-frame encoder's rows.

use chorus_core::{Error, LmOps, Result, FRAME_SAMPLES, NO_CODE};
use chorus_mimi::encoder::WANTED;

use super::{Input, Stream, StreamId, SttStage};

impl Stream {
    /// Refuses `more` frames past the stage's `max_frames` (position 0 is the initial input;
    /// frame k is position k + 1; a partial frame counts).
    pub(super) fn room(
        &self,
        id: StreamId,
        max_frames: usize,
        more: usize,
        op: &'static str,
    ) -> Result<()> {
        if self.ended {
            return Err(Error::input(op, format!("stream {id} has ended")));
        }
        let frames = self.position + self.queue.len() - 1;
        if frames + more > max_frames {
            return Err(Error::input(
                op,
                format!("stream {id} reached the stage's {max_frames} frames"),
            ));
        }
        Ok(())
    }
}

impl<B: LmOps> SttStage<B> {
    /// Queues 24 kHz mono samples (any number, values finite) for stream `id` of a stage built
    /// [`SttStage::with_encoder`]; every full 80 ms frame becomes one position's input, the rest
    /// waits for more (or for [`SttStage::end`], which completes it with silence). Bad samples
    /// are refused with nothing queued.
    pub fn push_pcm(&mut self, id: StreamId, samples: &[f32]) -> Result<()> {
        const OP: &str = "SttStage::push_pcm";
        if self.encoder.is_none() {
            return Err(Error::input(
                OP,
                "this stage takes Mimi codes (built without an encoder): push_frame",
            ));
        }
        if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
            return Err(Error::input(
                OP,
                format!("sample {i} of {} is not finite", samples.len()),
            ));
        }
        let max_frames = self.opts.max_frames;
        let s = self.find(id, OP)?;
        let total = s.tail.len() + samples.len();
        s.room(id, max_frames, total.div_ceil(FRAME_SAMPLES), OP)?;
        let mut rest = samples;
        if !s.tail.is_empty() {
            let take = (FRAME_SAMPLES - s.tail.len()).min(rest.len());
            s.tail.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if s.tail.len() == FRAME_SAMPLES {
                let frame = std::mem::take(&mut s.tail);
                s.queue.push_back(Input::Pcm(frame));
            }
        }
        let mut chunks = rest.chunks_exact(FRAME_SAMPLES);
        for f in &mut chunks {
            s.queue.push_back(Input::Pcm(f.to_vec()));
        }
        s.tail.extend_from_slice(chunks.remainder());
        Ok(())
    }

    /// Samples stream `id` has pushed that do not fill a frame yet.
    pub fn buffered_samples(&self, id: StreamId) -> Option<usize> {
        let s = &self.streams[self.index_of(id)?];
        let queued = s
            .queue
            .iter()
            .filter(|i| matches!(i, Input::Pcm(_)))
            .count();
        Some(queued * FRAME_SAMPLES + s.tail.len())
    }

    /// Writes the encoder rows of the streams in `self.launch` into bucket `bucket`'s half
    /// `half`: a PCM frame on the stream's slot (its own table row), anything else (position
    /// 0, padding) on the dummy slot with silence and the initial codes' row.
    pub(super) fn stage_audio(&mut self, bucket: usize, half: usize) -> Result<()> {
        let Some(enc) = &self.encoder else {
            return Ok(());
        };
        let nq = enc.mimi.cfg.num_quantizers;
        let books = self.books;
        let initial_row = self.opts.buckets.largest() as i32;
        let dummy = self.seats.dummy_slot() as i32;
        let be = &self.be;
        let Some(io) = self.pipe.buckets[bucket].halves[half].audio.as_mut() else {
            return Ok(());
        };
        let (streams, launch) = (&self.streams, &self.launch);
        // The pipeline waited for this half's last step.
        let v = be.staging_view_nowait(&mut io.staging)?;
        let select = be.pinned_ints_nowait(&mut io.select.host);
        for (r, sel) in select.iter_mut().enumerate() {
            let s = launch.get(r).map(|&j| &streams[j]);
            let frame = match s.and_then(|s| s.queue.front()) {
                Some(Input::Pcm(f)) => Some(f),
                _ => None,
            };
            // Every row asks for the codebooks the model reads, so the embedding reads codes
            // in range on every row, the discarded ones included.
            let codes = &mut v.codes[r * nq..(r + 1) * nq];
            codes[..books].fill(WANTED);
            codes[books..].fill(NO_CODE);
            let pcm = &mut v.pcm[r * FRAME_SAMPLES..(r + 1) * FRAME_SAMPLES];
            match (s, frame) {
                (Some(s), Some(f)) => {
                    v.slots[r] = s.seat.slot as i32;
                    pcm.copy_from_slice(f);
                    *sel = r as i32;
                }
                _ => {
                    v.slots[r] = dummy;
                    pcm.fill(0.0);
                    *sel = initial_row;
                }
            }
        }
        Ok(())
    }
}
