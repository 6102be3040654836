//! A deterministic stand-in decoder for tests and protocol demos.
//!
//! Each slot keeps a 64-bit digest of every input since its last reset; a frame's PCM is a
//! function of that digest, so reordering, lost resets and state shared between slots all
//! change the output. [`FakeDecoder::reference`] decodes one stream offline the same way.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use chorus_core::{
    Error, Frame, FrameDecoder, FrameInput, Result, StateBytes, StepDone, FRAME_SAMPLES,
};

/// Codebook entries of the fake model.
pub const FAKE_CODEBOOK_SIZE: usize = 2048;
/// Codebooks of the fake model.
pub const FAKE_CODEBOOKS: usize = 32;
/// Latent size of the fake model.
pub const FAKE_LATENT_DIM: usize = 16;
/// Steps a pipelined fake decoder holds queued.
const FAKE_PIPELINE_DEPTH: usize = 2;
/// A frame whose first code is this makes the step fail as [`FakeOptions::poison`] says.
pub const POISON_CODE: u32 = 2047;

/// How the fake decoder treats a frame starting with [`POISON_CODE`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Poison {
    /// Decode it like any other.
    #[default]
    Off,
    /// Refuse the step as invalid input before touching any state.
    Validation,
    /// Fail the step as a backend error after the state was updated.
    Backend,
}

/// Holds the fake decoder's steps until a test opens it: the test learns when a step is waiting
/// at it, queues what it wants the next step to see, then opens it.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<GateState>, Condvar)>);

#[derive(Debug, Default)]
struct GateState {
    open: bool,
    waiting: bool,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        // The state is two flags, consistent even after a panic elsewhere.
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until a step is waiting at the gate.
    pub fn wait_for_step(&self) {
        let mut st = self.lock();
        while !st.waiting && !st.open {
            st = self.0 .1.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Lets every step through from now on.
    pub fn open(&self) {
        self.lock().open = true;
        self.0 .1.notify_all();
    }

    fn pass(&self) {
        let mut st = self.lock();
        st.waiting = true;
        self.0 .1.notify_all();
        while !st.open {
            st = self.0 .1.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Breaks the fake device for good once tripped, as a sticky CUDA error does: every later step,
/// queued step and reset fails with a backend error.
#[derive(Clone, Debug, Default)]
pub struct DeviceFault(Arc<AtomicBool>);

impl DeviceFault {
    /// Breaks the device from now on.
    pub fn trip(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn check(&self, op: &'static str) -> Result<()> {
        if self.0.load(Ordering::SeqCst) {
            return Err(Error::Backend {
                op,
                backend: "fake",
                reason: "device lost".into(),
            });
        }
        Ok(())
    }
}

/// Knobs of the fake decoder.
#[derive(Clone, Debug, Default)]
pub struct FakeOptions {
    pub max_slots: usize,
    pub largest_batch: usize,
    /// Sleep this long in every step (to model a slow device).
    pub step_delay: Duration,
    /// Steps wait here until it opens.
    pub gate: Option<Gate>,
    pub poison: Poison,
    /// Make `reset` a no-op (a broken decoder, to show that tests catch lost resets).
    pub ignore_reset: bool,
    /// Offer pipelined steps (`launch_step` / `finish_step`), as the CUDA decoder does: a
    /// device fault then surfaces when the step is finished.
    pub pipelined: bool,
    /// Breaks the whole device when tripped.
    pub fault: Option<DeviceFault>,
}

/// The slots of every step run, in order.
pub type StepLog = Arc<Mutex<Vec<Vec<usize>>>>;

/// The fake decoder.
pub struct FakeDecoder {
    opts: FakeOptions,
    digests: Vec<u64>,
    /// Steps run, shared with tests.
    pub steps: Arc<AtomicU64>,
    /// Slots of each successful step, shared with tests.
    pub log: StepLog,
    /// How many resets ran before each successful step (since the step before it), shared with
    /// tests.
    pub reset_log: Arc<Mutex<Vec<usize>>>,
    resets_since_step: usize,
    /// Pipelined steps launched and not yet finished: their PCM, or the fault to report.
    queued: VecDeque<Result<Vec<f32>>>,
}

fn mix(h: u64, v: u64) -> u64 {
    // splitmix64 finaliser over the running digest.
    let mut z = h ^ v.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn absorb(mut h: u64, input: FrameInput<'_>) -> u64 {
    match input {
        FrameInput::Codes(c) => {
            h = mix(h, c.len() as u64);
            for &x in c {
                h = mix(h, x as u64);
            }
        }
        FrameInput::Latent(l) => {
            for &x in l {
                h = mix(h, x.to_bits() as u64);
            }
        }
    }
    mix(h, 1)
}

fn render(h: u64, out: &mut [f32]) {
    for (j, s) in out.iter_mut().enumerate() {
        let v = mix(h, j as u64);
        *s = ((v >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
    }
}

impl FakeDecoder {
    pub fn new(opts: FakeOptions) -> Self {
        Self {
            digests: vec![0; opts.max_slots],
            opts,
            steps: Arc::new(AtomicU64::new(0)),
            log: StepLog::default(),
            reset_log: Arc::default(),
            resets_since_step: 0,
            queued: VecDeque::new(),
        }
    }

    /// Offline decode of one stream's frames from the zero state.
    pub fn reference<'a>(frames: impl IntoIterator<Item = FrameInput<'a>>) -> Vec<f32> {
        let mut h = 0;
        let mut out = Vec::new();
        for f in frames {
            h = absorb(h, f);
            let start = out.len();
            out.resize(start + FRAME_SAMPLES, 0.0);
            render(h, &mut out[start..]);
        }
        out
    }
}

impl FrameDecoder for FakeDecoder {
    fn max_slots(&self) -> usize {
        self.opts.max_slots
    }
    fn largest_batch(&self) -> usize {
        self.opts.largest_batch
    }
    fn codebook_size(&self) -> usize {
        FAKE_CODEBOOK_SIZE
    }
    fn max_codebooks(&self) -> usize {
        FAKE_CODEBOOKS
    }
    fn latent_dim(&self) -> usize {
        FAKE_LATENT_DIM
    }
    fn state_bytes(&self) -> StateBytes {
        StateBytes {
            index: 8,
            ..StateBytes::default()
        }
    }
    fn describe(&self) -> String {
        "fake".into()
    }

    fn step(&mut self, frames: &[Frame<'_>], pcm: &mut [f32]) -> Result<()> {
        // As the real decoder: a synchronous step would overtake the queued ones.
        if !self.queued.is_empty() {
            return Err(Error::input(
                "FakeDecoder::step",
                "pipelined steps are queued",
            ));
        }
        self.run(frames, pcm)
    }

    fn pipeline_depth(&self) -> usize {
        if self.opts.pipelined {
            FAKE_PIPELINE_DEPTH
        } else {
            0
        }
    }

    fn launch_step(&mut self, frames: &[Frame<'_>]) -> Result<()> {
        if !self.opts.pipelined || self.queued.len() >= FAKE_PIPELINE_DEPTH {
            return Err(Error::input(
                "FakeDecoder::launch_step",
                "no room to queue a step",
            ));
        }
        let mut pcm = vec![0f32; frames.len() * FRAME_SAMPLES];
        match self.run(frames, &mut pcm) {
            Ok(()) => self.queued.push_back(Ok(pcm)),
            // A device fault is seen when the step is finished, as on CUDA.
            Err(e @ Error::Backend { .. }) => self.queued.push_back(Err(e)),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    fn finish_step(&mut self, pcm: &mut [f32]) -> Result<StepDone> {
        let Some(done) = self.queued.pop_front() else {
            return Err(Error::input(
                "FakeDecoder::finish_step",
                "no step is queued",
            ));
        };
        self.check_fault("FakeDecoder::finish_step")?;
        let out = done?;
        pcm[..out.len()].copy_from_slice(&out);
        Ok(StepDone {
            rows: out.len() / FRAME_SAMPLES,
            device_seconds: self.opts.step_delay.as_secs_f64(),
        })
    }

    fn reset(&mut self, slot: usize) -> Result<()> {
        self.check_fault("FakeDecoder::reset")?;
        match self.digests.get_mut(slot) {
            Some(d) => {
                if !self.opts.ignore_reset {
                    *d = 0;
                }
                self.resets_since_step += 1;
                Ok(())
            }
            None => Err(Error::UnknownSlot {
                op: "FakeDecoder::reset",
                slot,
                max_slots: self.opts.max_slots,
            }),
        }
    }
}

impl FakeDecoder {
    fn check_fault(&self, op: &'static str) -> Result<()> {
        self.opts.fault.as_ref().map_or(Ok(()), |f| f.check(op))
    }

    /// One step of the fake model.
    fn run(&mut self, frames: &[Frame<'_>], pcm: &mut [f32]) -> Result<()> {
        self.check_fault("FakeDecoder::step")?;
        if frames.len() > self.opts.largest_batch {
            return Err(Error::BatchTooLarge {
                op: "FakeDecoder::step",
                batch: frames.len(),
                largest: self.opts.largest_batch,
            });
        }
        for (i, f) in frames.iter().enumerate() {
            if f.slot >= self.opts.max_slots {
                return Err(Error::UnknownSlot {
                    op: "FakeDecoder::step",
                    slot: f.slot,
                    max_slots: self.opts.max_slots,
                });
            }
            if frames[..i].iter().any(|g| g.slot == f.slot) {
                return Err(Error::input("FakeDecoder::step", "slot twice in one step"));
            }
        }
        let poisoned = frames
            .iter()
            .any(|f| matches!(f.input, FrameInput::Codes(c) if c.first() == Some(&POISON_CODE)));
        if poisoned && self.opts.poison == Poison::Validation {
            return Err(Error::input("FakeDecoder::step", "poisoned frame"));
        }
        if let Some(gate) = &self.opts.gate {
            gate.pass();
        }
        if !self.opts.step_delay.is_zero() {
            std::thread::sleep(self.opts.step_delay);
        }
        self.steps.fetch_add(1, Ordering::Relaxed);
        for (i, f) in frames.iter().enumerate() {
            self.digests[f.slot] = absorb(self.digests[f.slot], f.input);
            render(
                self.digests[f.slot],
                &mut pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES],
            );
        }
        if !(poisoned && self.opts.poison == Poison::Backend) {
            let slots = frames.iter().map(|f| f.slot).collect();
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(slots);
            self.reset_log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(std::mem::take(&mut self.resets_since_step));
        }
        if poisoned && self.opts.poison == Poison::Backend {
            // Models a device fault after the state was touched.
            return Err(Error::Backend {
                op: "FakeDecoder::step",
                backend: "fake",
                reason: "poisoned frame".into(),
            });
        }
        Ok(())
    }
}
