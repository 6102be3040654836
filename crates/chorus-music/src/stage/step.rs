//! One step: launch the next frame of every song that has one left, then read the previous
//! frame's outputs (a frame late, after waiting for that frame only), emit its frames and ends,
//! and retire ended songs. The device runs frame `f` while the host reads frame `f - 1` and
//! prepares frame `f + 1`; a song that drew END in frame `f - 1` has already run frame `f`, whose
//! output is discarded.

use chorus_core::lm_ops::DrawMode;
use chorus_core::{Error, LmOps, Result};

use chorus_lm::pipeline::{self, FrameLoop};
use chorus_lm::Pending;

use super::{Launched, SemanticStage};
use crate::config::{DRAWS_PER_FRAME, END_COLUMN};
use crate::frame::{frame_program, FrameCall, Models};
use crate::song::{EndReason, SongEvent, LEVELS};
use chorus_lm::chunk::{plan, ChunkPlan, ChunkTarget, PAD_TOKEN};

impl<B: LmOps> SemanticStage<B> {
    /// Launches the next frame of every song that has one, then hands the previous frame's
    /// emitted frames and ends to `sink` (chorus-lm's [`pipeline::step`]). Returns the number of
    /// songs launched (0 once every song awaits only its last read, which this call delivers).
    pub fn step(&mut self, sink: &mut dyn FnMut(SongEvent<'_>)) -> Result<usize> {
        pipeline::step(self, sink)
    }

    /// Captures every bucket's frame program on padding alone, before any song is admitted
    /// ([`pipeline::warm_up`]).
    pub fn warmup(&mut self) -> Result<()> {
        pipeline::warm_up(self, "SemanticStage::warmup")
    }

    /// Bucket sizes and the backend's program key of each (half 0), for device timing.
    pub fn bucket_keys(&self) -> Vec<(usize, usize)> {
        self.pipe.keys()
    }

    /// Like [`SemanticStage::bucket_keys`], of the frames that also prefill a prompt chunk
    /// (none when the stage prefills whole prompts).
    pub fn chunk_bucket_keys(&self) -> Vec<(usize, usize)> {
        if self.opts.prefill_chunk == 0 {
            return Vec::new();
        }
        (0..self.pipe.buckets.len())
            .map(|b| (self.pipe.buckets[b].size, self.pipe.key(b, 0, 1)))
            .collect()
    }

    /// Picks the songs with a frame left and the first joining song's next prompt chunk, stages
    /// their inputs and launches the frame (the pipeline then holds it as the frame in flight);
    /// returns the songs launched, the joining one included.
    fn launch_songs(&mut self) -> Result<usize> {
        self.launch.clear();
        for (i, s) in self.songs.iter().enumerate() {
            let forced_left = s.forced.as_ref().is_none_or(|f| s.frame < f.len());
            // Loop frames 0..=max_frames emit max_frames frames; none runs past the reservation.
            if s.joining.is_none() && s.frame <= s.max_frames && forced_left {
                self.launch.push(i);
            }
        }
        let joining = self.songs.iter().position(|s| s.joining.is_some());
        self.last.0.clear();
        if self.launch.is_empty() && joining.is_none() {
            return Ok(0);
        }
        // A frame of padding alone carries a chunk when no song runs yet.
        let bucket = self.pipe.pick(self.launch.len().max(1))?;
        let half = self.pipe.half();
        for &i in &self.launch {
            let s = &mut self.songs[i];
            let pos = s.prompt_len + s.frame;
            self.seats.grow(&mut s.seat, pos + 1);
        }
        self.stage_inputs(bucket, half)?;
        let plan = match joining {
            Some(j) => Some((j, self.stage_chunk(bucket, half, Some(j))?)),
            None => None,
        };
        self.run_frame(bucket, half, plan.is_some())?;
        if let Some((j, plan)) = plan {
            let s = &mut self.songs[j];
            if plan.last.is_some() {
                s.joining = None;
            } else if let Some(jn) = s.joining.as_mut() {
                jn.done = plan.done;
            }
        }
        let mut rows = Vec::with_capacity(self.launch.len());
        for &i in &self.launch {
            let s = &mut self.songs[i];
            rows.push((s.id, s.frame));
            self.last.0.push(s.id);
            s.frame += 1;
        }
        self.last.1 = bucket;
        self.last.2 = half;
        self.pipe.launched(bucket, rows);
        Ok(self.last.0.len() + usize::from(plan.is_some()))
    }

    /// Stages the next prompt chunk of song `song` (`None`: a chunk of padding alone, for warm-up)
    /// into `bucket`'s `half`; returns where the chunk lies.
    fn stage_chunk(
        &mut self,
        bucket: usize,
        half: usize,
        song: Option<usize>,
    ) -> Result<ChunkPlan> {
        let be = &self.be;
        let rows = 2 * self.pipe.buckets[bucket].size;
        let Some(c) = self.pipe.buckets[bucket].halves[half].chunk.as_mut() else {
            return Err(Error::config(
                "SemanticStage::stage_chunk",
                "the stage was built without chunked prefill (prefill_chunk 0)",
            ));
        };
        let n = c.chunk;
        let s = song.map(|i| &self.songs[i]);
        let jn = s.and_then(|s| s.joining.as_ref());
        let plan = match jn {
            Some(j) => plan(j.done, j.prompt.len(), n),
            None => ChunkPlan {
                start: 0,
                done: 0,
                last: None,
            },
        };
        let ids = be.pinned_ints_nowait(&mut c.ids.host);
        for (r, row) in ids.chunks_exact_mut(n).enumerate() {
            let src = jn.map(|j| {
                if r == 0 {
                    &j.prompt.cond
                } else {
                    &j.prompt.uncond
                }
            });
            for (t, v) in row.iter_mut().enumerate() {
                let tok = src.and_then(|p| p.get(plan.start + t)).copied();
                *v = tok.unwrap_or(PAD_TOKEN) as i32;
            }
        }
        let target = ChunkTarget {
            plan,
            seat: s.map(|s| &s.seat),
            frame_rows: rows,
            dummy_slot: self.opts.max_songs,
        };
        c.fill(be, &self.seats, &target);
        Ok(plan)
    }

    /// Queues bucket `bucket`'s frame program on half `half` (with the staged prompt chunk if
    /// `with_chunk`) and records that half's marker.
    fn run_frame(&mut self, bucket: usize, half: usize, with_chunk: bool) -> Result<()> {
        let size = self.pipe.buckets[bucket].size;
        let models = Models {
            lm: &self.lm,
            depth: &self.depth,
            w: &self.w,
        };
        let bufs = &mut self.bufs;
        let (lm_caches, hidden_state) = (&mut self.lm_caches, &mut self.hidden_state);
        let (block_size, max_blocks) = (self.opts.block_size, self.max_blocks);
        let mut program = |be: &B, io: &mut super::Half<B>| {
            let call = FrameCall {
                inputs: &mut io.inputs,
                outputs: &mut io.outputs,
                hidden_state: &mut *hidden_state,
                lm_caches: &mut *lm_caches,
                songs: size,
                block_size,
                max_blocks,
                chunk: io.chunk.as_mut().filter(|_| with_chunk),
            };
            frame_program(be, &models, bufs, call)
        };
        let variant = usize::from(with_chunk);
        self.pipe
            .run(&self.be, (bucket, half, variant), &mut program)
    }

    /// Writes the per-song inputs of the songs in `self.launch`; padding rows get the dummy slot
    /// and the null block. The half's previous frame finished before the last step returned.
    fn stage_inputs(&mut self, bucket: usize, half: usize) -> Result<()> {
        let be = &self.be;
        let inputs = &mut self.pipe.buckets[bucket].halves[half].inputs;
        let dummy = self.opts.max_songs as i32;
        let (songs, launch) = (&self.songs, &self.launch);
        let get = |i: usize| launch.get(i).map(|&j| &songs[j]);
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.slots.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).map_or(dummy, |s| s.seat.slot as i32);
        }
        for (r, v) in be
            .pinned_ints_nowait(&mut inputs.start.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(r / 2).map_or(0, |s| (s.prompt_len + s.frame) as i32);
        }
        let tables = be.pinned_ints_nowait(&mut inputs.tables.host);
        for (i, t) in tables.chunks_exact_mut(2 * self.max_blocks).enumerate() {
            self.seats.fill_tables(get(i).map(|s| &s.seat), t);
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
            *v = get(i).map_or(0, |s| (s.frame as u32 * DRAWS_PER_FRAME) as i32);
        }
        for (i, v) in be
            .pinned_ints_nowait(&mut inputs.allow_end.host)
            .iter_mut()
            .enumerate()
        {
            *v = get(i).is_some_and(|s| s.allow_end) as i32;
        }
        let codes = be.pinned_ints_nowait(&mut inputs.codes.host);
        for (i, row) in codes.chunks_exact_mut(LEVELS).enumerate() {
            let forced = get(i).and_then(|s| s.forced.as_ref().and_then(|f| f.get(s.frame)));
            for (l, v) in row.iter_mut().enumerate() {
                *v = forced.map_or(-1, |c| c[l] as i32);
            }
        }
        Ok(())
    }

    /// Reads a finished frame's outputs, emits frames and ends, and retires ended songs.
    fn collect_songs(
        &mut self,
        prev: &Pending<Launched>,
        sink: &mut dyn FnMut(SongEvent<'_>),
    ) -> Result<()> {
        let h8 = LEVELS * self.lm.hidden_size;
        let out = &mut self.pipe.buckets[prev.bucket].halves[prev.half].outputs;
        let codes = self.be.pinned_ints_nowait(&mut out.codes);
        let hiddens = self.be.pinned_floats_nowait(&out.hiddens);
        let mut ended = Vec::new();
        for (i, &(id, f)) in prev.payload.iter().enumerate() {
            // A song cancelled since the launch is gone; its row is discarded.
            let Some(song) = self.songs.iter_mut().find(|s| s.id == id) else {
                continue;
            };
            let row = &codes[i * LEVELS..(i + 1) * LEVELS];
            let reason = if row[0] as usize == END_COLUMN {
                Some(EndReason::End)
            } else {
                if f > 0 {
                    let c: [u32; LEVELS] = std::array::from_fn(|l| row[l] as u32);
                    let hidden = &hiddens[i * h8..(i + 1) * h8];
                    sink(SongEvent::Frame {
                        song: id,
                        index: song.emitted,
                        codes: c,
                        hidden,
                    });
                    song.emitted += 1;
                }
                if song.emitted == song.max_frames {
                    Some(EndReason::MaxFrames)
                } else if song.forced.as_ref().is_some_and(|fc| f + 1 >= fc.len()) {
                    Some(EndReason::ForcedDone)
                } else {
                    None
                }
            };
            if let Some(reason) = reason {
                ended.push((id, reason, song.emitted));
            }
        }
        for (id, reason, frames) in ended {
            if let Some(i) = self.songs.iter().position(|s| s.id == id) {
                let song = self.songs.remove(i);
                self.finish(song);
            }
            sink(SongEvent::Ended {
                song: id,
                reason,
                frames,
            });
        }
        Ok(())
    }
}

impl<'s, B: LmOps> FrameLoop<'s> for SemanticStage<B> {
    type Launched = Launched;
    type Sink = dyn for<'e> FnMut(SongEvent<'e>) + 's;

    fn launch_frame(&mut self) -> Result<usize> {
        self.launch_songs()
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
        self.collect_songs(prev, sink)
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
        !self.songs.is_empty()
    }
}
