//! A join measured on any stage that prefills joining requests in chunks (music-bench's
//! `--join-songs`, tts-bench's `--join`): the running requests' frames before a request joins,
//! while it is prefilled in chunks inside their frames, and the gap a whole prefill makes instead.

use std::time::Instant;

use anyhow::{bail, Result};

/// Steps timed before the request joins.
pub const STEADY_STEPS: usize = 6;
/// Untimed steps after the running requests' admission.
pub const WARMUP_STEPS: usize = 2;
/// CUDA-event-timed replays of each frame graph.
const DEVICE_REPLAYS: usize = 20;

/// What a measured stage does (both stages' ids are `u64`).
pub trait JoinStage {
    type Request;
    /// Admits a request: prefilled whole at once if `whole`, else as the stage chooses (in chunks
    /// beside running requests).
    fn admit(&mut self, req: Self::Request, whole: bool) -> Result<u64>;
    /// One step; returns whether it handed over a frame of `id`.
    fn step_for(&mut self, id: u64) -> Result<bool>;
    /// Cancels `id` if it is still running.
    fn cancel(&mut self, id: u64);
    /// Steps until nothing is in flight.
    fn drain(&mut self) -> Result<()>;
    /// CUDA only: device ms of the frame graph holding `n` requests, with a prompt chunk if
    /// `chunk`.
    fn device_ms(&self, n: usize, chunk: bool, iters: usize) -> Result<Option<f64>>;
}

/// The requests of one measurement.
pub struct JoinRun<R> {
    pub running: Vec<R>,
    /// Joins in chunks.
    pub joiner: R,
    /// Joins prefilled whole, after the joiner's first frame.
    pub whole: R,
    /// Steps the joiner may take to its first frame.
    pub max_steps: usize,
}

/// Runs `run` on `stage` and returns the figures as one line; `what` names a request ("song").
pub fn measure<S: JoinStage>(
    stage: &mut S,
    run: JoinRun<S::Request>,
    what: &str,
) -> Result<String> {
    let n = run.running.len();
    let mut ids = Vec::with_capacity(n + 2);
    for req in run.running {
        ids.push(stage.admit(req, true)?);
    }
    let probe = ids.first().copied().unwrap_or(u64::MAX);
    for _ in 0..WARMUP_STEPS {
        stage.step_for(probe)?;
    }
    let mut steady = Vec::with_capacity(STEADY_STEPS);
    for _ in 0..STEADY_STEPS {
        let t = Instant::now();
        stage.step_for(probe)?;
        steady.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let steady_device = stage.device_ms(n, false, DEVICE_REPLAYS)?;
    let joining_device = stage.device_ms(n, true, DEVICE_REPLAYS)?;
    // Chunked: step until the joiner's first frame arrives.
    let t0 = Instant::now();
    let joiner = stage.admit(run.joiner, false)?;
    ids.push(joiner);
    let mut during = Vec::new();
    let first = loop {
        let t = Instant::now();
        let got = stage.step_for(joiner)?;
        during.push(t.elapsed().as_secs_f64() * 1e3);
        if got {
            break t0.elapsed().as_secs_f64() * 1e3;
        }
        if during.len() > run.max_steps {
            bail!(
                "the joining {what} did not start within {} steps",
                run.max_steps
            );
        }
    };
    // Whole: the running requests' next frame waits for the prefill.
    let t1 = Instant::now();
    ids.push(stage.admit(run.whole, true)?);
    stage.step_for(probe)?;
    let whole_gap = t1.elapsed().as_secs_f64() * 1e3;
    for id in ids {
        stage.cancel(id);
    }
    stage.drain()?;
    steady.sort_by(f64::total_cmp);
    let base = steady[steady.len() / 2];
    let max = during.iter().cloned().fold(0.0, f64::max);
    let mean = during.iter().sum::<f64>() / during.len() as f64;
    let pct = |x: f64| 100.0 * (x / base - 1.0);
    let dev = match (steady_device, joining_device) {
        (Some(s), Some(j)) => format!(
            "; device {s:.3} ms/frame, {j:.3} ms with a chunk (+{:.1}%)",
            100.0 * (j / s - 1.0)
        ),
        _ => String::new(),
    };
    Ok(format!(
        "beside {n} running: steady {base:.3} ms/frame{dev}; while it joins {} steps, mean \
         {mean:.3} ms (+{:.1}%), max {max:.3} ms (+{:.1}%), its first frame {first:.1} ms after \
         admission; prefilled whole instead: a {whole_gap:.2} ms gap (+{:.1}%); steps while it \
         joined (ms): {}",
        during.len(),
        pct(mean),
        pct(max),
        pct(whole_gap),
        during
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    ))
}
