//! One step: launch the next frame of every utterance that has one left, then read the previous
//! frame's outputs (a frame late, after waiting for that frame only), emit its frames and ends,
//! and retire ended utterances. An utterance that drew its end frame in frame `f - 1` has
//! already run frame `f`, whose output is discarded. A joining utterance has no frame until its
//! prompt is in: each frame prefills one chunk of the first joining utterance's prompt, and a
//! frame of padding alone carries it when nothing else runs.

use chorus_core::lm_ops::DrawMode;
use chorus_core::{Error, LmOps, Result, FRAME_SAMPLES};
use chorus_lm::chunk::{plan, ChunkPlan, ChunkTarget, PAD_TOKEN};
use chorus_lm::pipeline::{self, FrameLoop};
use chorus_lm::Pending;

use super::{Half, Launched, TtsStage};
use crate::frame::{frame_program, FrameCall, Model, PADDING_ROW};
use crate::prefill::{prompt_rows, TEXT_COL};
use crate::utterance::{EndReason, UtteranceEvent};

impl<B: LmOps> TtsStage<B> {
    /// Launches the next frame of every utterance that has one, then hands the previous frame's
    /// frames and ends to `sink` (chorus-lm's [`pipeline::step`]). Returns the number of
    /// utterances launched (0 once every utterance awaits only its last read, which this call
    /// then delivers).
    pub fn step(&mut self, sink: &mut dyn FnMut(UtteranceEvent<'_>)) -> Result<usize> {
        pipeline::step(self, sink)
    }

    /// Captures every bucket's frame program on padding alone, before any utterance is admitted
    /// ([`pipeline::warm_up`]).
    pub fn warmup(&mut self) -> Result<()> {
        pipeline::warm_up(self, "TtsStage::warmup")
    }

    /// Bucket sizes and the program key of each (half 0) of the frames that also prefill a
    /// prompt chunk, for device timing (none when the stage prefills whole prompts).
    pub fn chunk_bucket_keys(&self) -> Vec<(usize, usize)> {
        if self.opts.prefill_chunk == 0 {
            return Vec::new();
        }
        (0..self.pipe.buckets.len())
            .map(|b| (self.pipe.buckets[b].size, self.pipe.key(b, 0, 1)))
            .collect()
    }

    /// Picks the utterances with a frame left and the first joining utterance's next prompt
    /// chunk, stages their inputs and launches the frame; returns the utterances launched, the
    /// joining one included.
    fn launch_utterances(&mut self) -> Result<usize> {
        self.launch.clear();
        for (i, u) in self.utts.iter().enumerate() {
            let forced_left = u.forced.as_ref().is_none_or(|f| u.frame < f.len());
            // Frames 0..max_frames; none runs past the reservation.
            if u.joining.is_none() && u.frame < u.max_frames && forced_left {
                self.launch.push(i);
            }
        }
        let joining = self.utts.iter().position(|u| u.joining.is_some());
        self.last.0.clear();
        if self.launch.is_empty() && joining.is_none() {
            return Ok(0);
        }
        // A frame of padding alone carries the chunk when no utterance runs yet.
        let bucket = self.pipe.pick(self.launch.len().max(1))?;
        let half = self.pipe.half();
        for &i in &self.launch {
            let u = &mut self.utts[i];
            // Frame f's codes are fed back at position P + f.
            self.seats.grow(&mut u.seat, u.prompt_len + u.frame + 1);
        }
        self.stage_inputs(bucket, half)?;
        let plan = match joining {
            Some(j) => Some((j, self.stage_chunk(bucket, half, Some(j))?)),
            None => None,
        };
        self.run_frame(bucket, half, plan.is_some())?;
        if let Some((j, plan)) = plan {
            let u = &mut self.utts[j];
            if plan.last.is_some() {
                // Its hidden is in its state row once this frame has run: frames follow.
                u.joining = None;
            } else if let Some(jn) = u.joining.as_mut() {
                jn.done = plan.done;
            }
        }
        let mut rows = Vec::with_capacity(self.launch.len());
        for &i in &self.launch {
            let u = &mut self.utts[i];
            rows.push((u.id, u.frame));
            self.last.0.push(u.id);
            u.frame += 1;
        }
        self.last.1 = bucket;
        self.last.2 = half;
        self.pipe.launched(bucket, rows);
        Ok(self.last.0.len() + usize::from(plan.is_some()))
    }

    /// Stages the next prompt chunk of utterance `utt` (`None`: a chunk of padding alone, for
    /// warm-up) into `bucket`'s `half`; returns where the chunk lies.
    fn stage_chunk(&mut self, bucket: usize, half: usize, utt: Option<usize>) -> Result<ChunkPlan> {
        let be = &self.be;
        let books = self.c.num_codebooks;
        let frame_rows = self.pipe.buckets[bucket].size;
        let Some(c) = self.pipe.buckets[bucket].halves[half].chunk.as_mut() else {
            return Err(Error::config(
                "TtsStage::stage_chunk",
                "the stage was built without chunked prefill (prefill_chunk 0)",
            ));
        };
        let n = c.chunk;
        let u = utt.map(|i| &self.utts[i]);
        let jn = u.and_then(|u| u.joining.as_ref());
        let plan = match jn {
            Some(j) => plan(j.done, j.prompt.len(), n),
            None => ChunkPlan {
                start: 0,
                done: 0,
                last: None,
            },
        };
        let stride = 1 + books;
        let ids = be.pinned_ints_nowait(&mut c.ids.host);
        let frames = jn.map_or(&[][..], |j| {
            &j.prompt[plan.start..(plan.start + n).min(j.prompt.len())]
        });
        let (real, pad) = ids.split_at_mut(frames.len() * stride);
        prompt_rows(frames, books, real);
        // Padding positions: a text row of the padding token (nothing reads what they write).
        for row in pad.chunks_exact_mut(stride) {
            row.fill(-1);
            row[TEXT_COL] = PAD_TOKEN as i32;
        }
        let target = ChunkTarget {
            plan,
            seat: u.map(|u| &u.seat),
            frame_rows,
            dummy_slot: self.seats.dummy_slot(),
        };
        c.fill(be, &self.seats, &target);
        Ok(plan)
    }

    /// Queues bucket `bucket`'s frame program on half `half` (with the staged prompt chunk if
    /// `with_chunk`).
    fn run_frame(&mut self, bucket: usize, half: usize, with_chunk: bool) -> Result<()> {
        let n = self.pipe.buckets[bucket].size;
        let model = Model {
            c: &self.c,
            w: &self.w,
            draws: self.opts.draws,
        };
        let bufs = &mut self.bufs;
        let (caches, hidden_state) = (&mut self.caches, &mut self.hidden_state);
        let mut mimi = self.mimi.as_mut();
        let (block_size, max_blocks) = (self.opts.block_size, self.seats.max_blocks());
        let mut program = |be: &B, io: &mut Half<B>| {
            let call = FrameCall {
                inputs: &mut io.inputs,
                outputs: &mut io.outputs,
                hidden_state: &mut *hidden_state,
                caches: &mut *caches,
                mimi: mimi.as_deref_mut(),
                n,
                block_size,
                max_blocks,
                chunk: io.chunk.as_mut().filter(|_| with_chunk),
            };
            frame_program(be, &model, bufs, call)
        };
        let variant = usize::from(with_chunk);
        self.pipe
            .run(&self.be, (bucket, half, variant), &mut program)
    }

    /// Writes the inputs of the utterances in `self.launch`; padding rows get the dummy slot and
    /// the null block. The half's previous frame finished before the last step returned.
    fn stage_inputs(&mut self, bucket: usize, half: usize) -> Result<()> {
        let be = &self.be;
        let books = self.c.num_codebooks;
        let inputs = &mut self.pipe.buckets[bucket].halves[half].inputs;
        let dummy = self.seats.dummy_slot() as i32;
        let (utts, launch) = (&self.utts, &self.launch);
        let get = |i: usize| launch.get(i).map(|&j| &utts[j]);
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.slots.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(dummy, |u| u.seat.slot as i32);
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.start.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(0, |u| (u.prompt_len + u.frame) as i32);
        }
        let max_blocks = self.seats.max_blocks();
        let tables = be.pinned_ints_nowait(&mut inputs.tables.host);
        for (i, t) in tables.chunks_exact_mut(max_blocks).enumerate() {
            self.seats.fill_tables(get(i).map(|u| &u.seat), t);
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.mode.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(DrawMode::Greedy, |u| u.mode) as i32;
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.seeds.host)
            .chunks_exact_mut(2)
            .enumerate()
        {
            let seed = get(i).map_or(0, |u| u.seed);
            v[0] = seed as u32 as i32;
            v[1] = (seed >> 32) as u32 as i32;
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.sampling.host)
            .chunks_exact_mut(2)
            .enumerate()
        {
            v.copy_from_slice(&get(i).map_or(PADDING_ROW, |u| u.sampling));
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.draws.host)
            .iter_mut()
            .enumerate()
        {
            // Draw d = codebooks * f + level: an utterance's noise depends on its frames alone.
            *v = get(i).map_or(0, |u| (u.frame * books) as i32);
        }
        let codes = be.pinned_ints_nowait(&mut inputs.codes.host);
        for (i, row) in codes.chunks_exact_mut(books).enumerate() {
            let forced = get(i).and_then(|u| u.forced.as_ref().and_then(|f| f.get(u.frame)));
            for (l, v) in row.iter_mut().enumerate() {
                *v = forced.map_or(-1, |c| c[l] as i32);
            }
        }
        Ok(())
    }

    /// Reads a finished frame's codes, emits frames and ends, and retires ended utterances.
    fn collect_utterances(
        &mut self,
        prev: &Pending<Launched>,
        sink: &mut dyn FnMut(UtteranceEvent<'_>),
    ) -> Result<()> {
        let books = self.c.num_codebooks;
        let out = &mut self.pipe.buckets[prev.bucket].halves[prev.half].outputs;
        let codes = self.be.pinned_ints_nowait(&mut out.codes);
        let pcm = out.pcm.as_ref().map(|p| self.be.pinned_floats_nowait(p));
        let mut ended = Vec::new();
        let mut frame = vec![0u32; books];
        for (i, &(id, f)) in prev.payload.iter().enumerate() {
            // An utterance cancelled since the launch is gone; its row is discarded.
            let Some(u) = self.utts.iter_mut().find(|u| u.id == id) else {
                continue;
            };
            let row = &codes[i * books..(i + 1) * books];
            let reason = if row.iter().all(|&c| c == 0) {
                Some(EndReason::EndFrame)
            } else {
                for (d, &c) in frame.iter_mut().zip(row) {
                    *d = c as u32;
                }
                sink(UtteranceEvent::Frame {
                    utterance: id,
                    index: u.emitted,
                    codes: &frame,
                    pcm: pcm.map(|p| &p[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES]),
                });
                u.emitted += 1;
                if u.emitted == u.max_frames {
                    Some(EndReason::MaxFrames)
                } else if u.forced.as_ref().is_some_and(|fc| f + 1 >= fc.len()) {
                    Some(EndReason::ForcedDone)
                } else {
                    None
                }
            };
            if let Some(reason) = reason {
                ended.push((id, reason, u.emitted));
            }
        }
        for (id, reason, frames) in ended {
            if let Some(i) = self.utts.iter().position(|u| u.id == id) {
                let u = self.utts.remove(i);
                self.seats.release(u.seat);
            }
            sink(UtteranceEvent::Ended {
                utterance: id,
                reason,
                frames,
            });
        }
        Ok(())
    }
}

impl<'s, B: LmOps> FrameLoop<'s> for TtsStage<B> {
    type Launched = Launched;
    type Sink = dyn for<'e> FnMut(UtteranceEvent<'e>) + 's;

    fn launch_frame(&mut self) -> Result<usize> {
        self.launch_utterances()
    }

    fn run_padding(&mut self, bucket: usize, half: usize, variant: usize) -> Result<()> {
        self.launch.clear();
        self.stage_inputs(bucket, half)?;
        let with_chunk = variant == 1;
        if with_chunk {
            self.stage_chunk(bucket, half, None)?;
        }
        self.run_frame(bucket, half, with_chunk)
    }

    fn variants(&self) -> usize {
        // Frames without a chunk, and with one when the stage prefills in chunks.
        1 + usize::from(self.opts.prefill_chunk > 0)
    }

    fn collect(&mut self, prev: &Pending<Launched>, sink: &mut Self::Sink) -> Result<()> {
        self.collect_utterances(prev, sink)
    }

    fn take_pending(&mut self) -> Option<Pending<Launched>> {
        self.pipe.take()
    }

    fn wait_half(&self, half: usize) -> Result<()> {
        self.pipe.wait(&self.be, half)
    }

    fn bucket_count(&self) -> usize {
        self.pipe.buckets.len()
    }

    fn has_requests(&self) -> bool {
        !self.utts.is_empty()
    }
}
