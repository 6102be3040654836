//! One step: launch the next position of every stream with an input queued, then read the
//! previous step's outputs (a step late, after waiting for that step only), emit its tokens,
//! words and ends, and retire ended streams.

use chorus_core::lm_ops::DrawMode;
use chorus_core::{LmOps, Result, NO_ROW};
use chorus_lm::pipeline::{self, FrameLoop};
use chorus_lm::Pending;

use super::{stream_index, Half, Input, Launched, StreamEvent, StreamId, SttStage};
use crate::frame::{step_program, AudioCall, Model, StepCall};
use crate::words::WordEvent;

impl<B: LmOps> SttStage<B> {
    /// Launches the next position of every stream with an input, then hands the previous step's
    /// events to `sink` (chorus-lm's [`pipeline::step`]). Returns the streams launched.
    pub fn step(&mut self, sink: &mut dyn FnMut(StreamEvent<'_>)) -> Result<usize> {
        let launched = pipeline::step(self, sink)?;
        self.retire_ended(sink);
        Ok(launched)
    }

    /// Reads the step in flight, if any, and launches nothing: a server gathering streams for a
    /// fuller next step. Ended streams whose last position it read leave.
    pub fn read_in_flight(&mut self, sink: &mut dyn FnMut(StreamEvent<'_>)) -> Result<()> {
        pipeline::read_pending(self, sink)?;
        self.retire_ended(sink);
        Ok(())
    }

    /// Whether a launched step has not been read yet.
    pub fn step_in_flight(&self) -> bool {
        self.pipe.pending().is_some()
    }

    /// Streams with an input queued: the next step's rows.
    pub fn queued_streams(&self) -> usize {
        self.streams.iter().filter(|s| !s.queue.is_empty()).count()
    }

    /// Captures every bucket's step on padding alone, before any stream is admitted.
    pub fn warmup(&mut self) -> Result<()> {
        pipeline::warm_up(self, "SttStage::warmup")
    }

    /// Steps until every queued input has run and been read (streams that were ended leave).
    pub fn drain(&mut self, sink: &mut dyn FnMut(StreamEvent<'_>)) -> Result<()> {
        // A step that launches nothing has read the last one in flight.
        while self.step(sink)? > 0 {}
        Ok(())
    }

    /// Whether [`SttStage::step`] has anything to do: a stream with an input queued (a whole
    /// frame, or its position 0), an ended stream to retire, or a step in flight to read. A
    /// server sleeps while it has not.
    pub fn has_work(&self) -> bool {
        self.pipe.pending().is_some() || self.streams.iter().any(|s| !s.queue.is_empty() || s.ended)
    }

    fn launch_streams(&mut self) -> Result<usize> {
        self.launch.clear();
        for (i, s) in self.streams.iter().enumerate() {
            if !s.queue.is_empty() {
                self.launch.push(i);
            }
        }
        if self.launch.is_empty() {
            return Ok(0);
        }
        let bucket = self.pipe.pick(self.launch.len())?;
        let half = self.pipe.half();
        self.stage_inputs(bucket, half)?;
        self.stage_audio(bucket, half)?;
        self.run_step(bucket, half)?;
        let mut rows = Vec::with_capacity(self.launch.len());
        for &i in &self.launch {
            let s = &mut self.streams[i];
            s.queue.pop_front();
            rows.push((s.id, s.position, s.epoch));
            s.position += 1;
        }
        let n = rows.len();
        self.pipe.launched(bucket, rows);
        Ok(n)
    }

    fn run_step(&mut self, bucket: usize, half: usize) -> Result<()> {
        let n = self.pipe.buckets[bucket].size;
        let model = Model {
            c: &self.c,
            w: &self.w,
            draws: self.opts.draws,
            codebooks: self.books,
        };
        let bufs = &mut self.bufs;
        let (caches, text_state) = (&mut self.caches, &mut self.text_state);
        let initial = &self.initial_row.row;
        let (block_size, max_blocks) = (self.seats.block_size(), self.seats.max_blocks());
        let mut encoder = self.encoder.as_mut();
        let mut program = |be: &B, io: &mut Half<B>| {
            let audio = match (encoder.as_deref_mut(), io.audio.as_mut()) {
                (Some(e), Some(a)) => Some(AudioCall {
                    mimi: &mut e.mimi,
                    staging: &a.staging,
                    select: &mut a.select,
                    table: &mut e.table,
                    codes_out: &mut a.codes,
                }),
                _ => None,
            };
            let call = StepCall {
                audio,
                inputs: &mut io.inputs,
                outputs: &mut io.outputs,
                text_state: &mut *text_state,
                initial,
                caches: &mut *caches,
                n,
                block_size,
                max_blocks,
            };
            step_program(be, &model, bufs, call)
        };
        self.pipe.run(&self.be, (bucket, half, 0), &mut program)
    }

    /// Writes the inputs of the streams in `self.launch`; padding rows get the dummy slot, the
    /// null block and the initial codes.
    fn stage_inputs(&mut self, bucket: usize, half: usize) -> Result<()> {
        let be = &self.be;
        let books = self.books;
        let initial = self.c.ids.initial_audio as i32;
        let inputs = &mut self.pipe.buckets[bucket].halves[half].inputs;
        let dummy = self.seats.dummy_slot() as i32;
        let (streams, launch) = (&self.streams, &self.launch);
        let get = |i: usize| launch.get(i).map(|&j| &streams[j]);
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.slots.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(dummy, |s| s.seat.slot as i32);
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.start.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(0, |s| s.position as i32);
        }
        // The slots of admitted streams (position 0), then NO_ROW.
        let resets = be.pinned_ints_nowait(&mut inputs.resets.host);
        resets.fill(NO_ROW);
        let fresh = launch
            .iter()
            .map(|&j| &streams[j])
            .filter(|s| s.position == 0);
        for (v, s) in resets.iter_mut().zip(fresh) {
            *v = s.seat.slot as i32;
        }
        let max_blocks = self.seats.max_blocks();
        let tables = be.pinned_ints_nowait(&mut inputs.tables.host);
        for (i, t) in tables.chunks_exact_mut(max_blocks).enumerate() {
            self.seats.fill_tables(get(i).map(|s| &s.seat), t);
        }
        let codes = be.pinned_ints_nowait(&mut inputs.codes.host);
        for (i, row) in codes.chunks_exact_mut(books).enumerate() {
            match get(i).and_then(|s| s.queue.front()) {
                Some(Input::Codes(frame)) => {
                    for (d, &c) in row.iter_mut().zip(frame) {
                        *d = c as i32;
                    }
                }
                _ => row.fill(initial),
            }
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.tokens.host)
            .iter_mut()
            .enumerate()
        {
            let forced = get(i).and_then(|s| s.forced.as_ref().and_then(|f| f.get(s.position)));
            *v = forced.map_or(-1, |&t| t as i32);
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.mode.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(DrawMode::Greedy, |s| s.mode) as i32;
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.seeds.host)
            .chunks_exact_mut(2)
            .enumerate()
        {
            let seed = get(i).map_or(0, |s| s.seed);
            v[0] = seed as u32 as i32;
            v[1] = (seed >> 32) as u32 as i32;
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.draws.host)
            .iter_mut()
            .enumerate()
        {
            // Draw d = position: a stream's noise depends on its positions alone.
            *v = get(i).map_or(0, |s| s.position as i32);
        }
        Ok(())
    }

    /// Reads a finished step's outputs, emits tokens and words, retires ended streams.
    fn collect_streams(
        &mut self,
        prev: &Pending<Launched>,
        sink: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<()> {
        let c = &self.c;
        let (heads, classes, vocab) = (c.extra_heads, c.extra_head_dim, c.text_vocab);
        let half = &mut self.pipe.buckets[prev.bucket].halves[prev.half];
        let (out, audio) = (&mut half.outputs, half.audio.as_mut());
        let tokens = self.be.pinned_ints_nowait(&mut out.tokens);
        let vad = out.vad.as_ref().map(|p| self.be.pinned_floats_nowait(p));
        let logits = out.logits.as_ref().map(|p| self.be.pinned_floats_nowait(p));
        let codes = audio.map(|a| &*self.be.pinned_ints_nowait(&mut a.codes));
        let nq = self
            .encoder
            .as_ref()
            .map_or(0, |e| e.mimi.cfg.num_quantizers);
        let mut probs = vec![0f32; heads];
        for (i, &(id, position, epoch)) in prev.payload.iter().enumerate() {
            // A stream cancelled or reset since the launch: its row is discarded.
            let Some(s) = stream_index(&self.streams, id)
                .map(|j| &mut self.streams[j])
                .filter(|s| s.epoch == epoch)
            else {
                continue;
            };
            let token = tokens[i] as u32;
            if let Some(v) = vad {
                let row = &v[i * heads * classes..(i + 1) * heads * classes];
                for (p, head) in probs.iter_mut().zip(row.chunks_exact(classes)) {
                    *p = class0_probability(head);
                }
            }
            sink(StreamEvent::Token {
                stream: id,
                position,
                token,
                vad: vad.map(|_| probs.as_slice()),
                logits: logits.map(|l| &l[i * vocab..(i + 1) * vocab]),
                codes: codes
                    .filter(|_| position > 0)
                    .map(|k| &k[i * nq..(i + 1) * nq]),
            });
            s.words.push(token, &mut |event| {
                sink(StreamEvent::Word { stream: id, event })
            });
        }
        Ok(())
    }

    /// Ended streams with nothing queued and nothing in flight close their words and leave.
    fn retire_ended(&mut self, sink: &mut dyn FnMut(StreamEvent<'_>)) {
        let mut i = 0;
        while i < self.streams.len() {
            let s = &self.streams[i];
            if s.ended && s.queue.is_empty() && !self.in_flight(s.id) {
                let mut s = self.streams.remove(i);
                let id = s.id;
                s.words
                    .finish(&mut |event: WordEvent| sink(StreamEvent::Word { stream: id, event }));
                self.seats.release(s.seat);
                sink(StreamEvent::Ended {
                    stream: id,
                    positions: s.position,
                });
            } else {
                i += 1;
            }
        }
    }

    /// True when the step in flight (launched, not read) ran stream `id`.
    fn in_flight(&self, id: StreamId) -> bool {
        self.pipe
            .pending()
            .is_some_and(|p| p.payload.iter().any(|&(s, _, _)| s == id))
    }
}

/// `softmax(logits)[0]` in f64 (the server reports class 0 of each head).
fn class0_probability(logits: &[f32]) -> f32 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    ((logits[0] as f64 - max).exp() / sum) as f32
}

impl<'s, B: LmOps> FrameLoop<'s> for SttStage<B> {
    type Launched = Launched;
    type Sink = dyn for<'e> FnMut(StreamEvent<'e>) + 's;

    fn launch_frame(&mut self) -> Result<usize> {
        self.launch_streams()
    }

    fn run_padding(&mut self, bucket: usize, half: usize, _variant: usize) -> Result<()> {
        self.launch.clear();
        self.stage_inputs(bucket, half)?;
        self.stage_audio(bucket, half)?;
        self.run_step(bucket, half)
    }

    fn collect(&mut self, prev: &Pending<Launched>, sink: &mut Self::Sink) -> Result<()> {
        self.collect_streams(prev, sink)
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
        !self.streams.is_empty()
    }
}
