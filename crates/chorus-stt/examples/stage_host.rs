//! The stage's host-side work per stream at server sizes, without a step: admitting N streams,
//! then rounds of what a server's owner thread does for every stream between steps (how much
//! is buffered, one frame of PCM pushed). Prints microseconds per round; a lookup that scans the
//! streams makes a round grow with N squared.
//!
//! `cargo run --release -p chorus-stt --example stage_host -- 2500`

use std::time::Instant;

use chorus_core::FRAME_SAMPLES;
use chorus_cpu::CpuBackend;
use chorus_mimi::random::{random_model as random_mimi, small_config};
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{random_model, StreamRequest, SttConfig, SttOptions, SttStage};

/// Rounds timed per count (each pushes one frame per stream; the stage holds a few).
const ROUNDS: usize = 4;

fn main() -> chorus_core::Result<()> {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![500, 1300, 2500]
    } else {
        counts
    };
    let stt = random_model(SttConfig::random_small(), RANDOM_STT_SEED)?;
    let mimi = random_mimi(&small_config(), 0x51)?;
    let frame = vec![0.01f32; FRAME_SAMPLES];
    println!(" streams   admit ms   round us   us/stream");
    for n in counts {
        let mut opts = SttOptions::for_streams(n)?;
        opts.max_frames = 2 * ROUNDS;
        let mut st = SttStage::with_encoder(CpuBackend::new(Some(1))?, &stt, &mimi, opts)?;
        let t = Instant::now();
        let ids = (0..n)
            .map(|_| st.add(StreamRequest::default()))
            .collect::<chorus_core::Result<Vec<_>>>()?;
        let admit = t.elapsed().as_secs_f64() * 1e3;
        let mut best = f64::INFINITY;
        let mut queued = 0usize;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            for &id in &ids {
                queued += st.buffered_samples(id).unwrap_or(0);
                st.push_pcm(id, &frame)?;
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e6);
        }
        std::hint::black_box(queued);
        println!(
            "{n:>8} {admit:>10.1} {best:>10.0} {:>11.2}",
            best / n as f64
        );
    }
    Ok(())
}
