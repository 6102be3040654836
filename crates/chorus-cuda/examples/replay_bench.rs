//! Device time per step of the Mimi slot decoder on CUDA (random weights of the real
//! architecture, 8 codebooks): the median of CUDA-event-timed graph replays per bucket, then a
//! per-op breakdown from one eager profiled run.
//!
//! Usage: `replay_bench [bf16|f32] [buckets, e.g. 1,64,1024] [replays]
//! [mma|mma-wide|mma-apart|mma-scalar-attn|tap-split|im2col] [gemv_min_k]` (convolutions: tensor
//! cores where they apply with fused residual blocks, the default; `mma-wide` adds the wide kernel
//! and the phase-form upsampling; `mma-apart` runs each residual block as its two convolutions;
//! `mma-scalar-attn` is the default with attention on the CUDA cores; `mma-transposed` runs
//! the upsampling as transposed convolutions (cuBLAS into `kernel * c_out` columns, then an
//! overlap pass) with every convolution the implicit GEMM takes on it; else
//! the tap-split or im2col cuBLAS paths; products of at most two rows with at least `gemv_min_k` columns take the
//! GEMV kernel, default `chorus_cuda::GEMV_MIN_K`).

use chorus_core::{Backend, Buckets, Precision};
use chorus_cuda::{CudaBackend, CudaOptions};
use chorus_mimi::random::random_model;
use chorus_mimi::{DecoderOptions, MimiConfig, SlotDecoder};

const SEED: u64 = 0xbe4c;
const CODEBOOKS: usize = 8;
/// Overrides `CudaOptions::conv_mma_max_out` (for A/B runs of the path choice).
const MAX_OUT_ENV: &str = "REPLAY_MMA_MAX_OUT";
/// `0` turns `CudaOptions::gemm_epilogue` off (for A/B runs).
const EPILOGUE_ENV: &str = "REPLAY_GEMM_EPILOGUE";
/// Steps run before timing: 2 tokens each, past the 250-token window.
const FILL_STEPS: usize = 130;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let precision = Precision::parse(args.get(1).map_or("bf16", String::as_str))?;
    let buckets = Buckets::parse(args.get(2).map_or("1,64,1024", String::as_str))?;
    let replays: usize = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let conv_path = args.get(4).map_or("mma", String::as_str);
    const PATHS: [&str; 7] = [
        "mma",
        "mma-wide",
        "mma-apart",
        "mma-scalar-attn",
        "mma-transposed",
        "tap-split",
        "im2col",
    ];
    if !PATHS.contains(&conv_path) {
        return Err(format!(
            "unknown convolution path `{conv_path}` (one of {})",
            PATHS.join(", ")
        )
        .into());
    }
    let gemv_min_k: usize = args
        .get(5)
        .map_or(Ok(chorus_cuda::GEMV_MIN_K), |s| s.parse())?;
    let tap_split = conv_path != "im2col";
    let cfg = MimiConfig {
        num_quantizers: CODEBOOKS,
        ..Default::default()
    };
    let model = random_model(&cfg, SEED)?;
    let be = CudaBackend::new(CudaOptions {
        precision,
        conv_tap_split: tap_split,
        conv_mma: conv_path.starts_with("mma"),
        phase_upsampling: conv_path != "mma-transposed",
        conv_mma_max_out: match std::env::var(MAX_OUT_ENV) {
            Ok(v) => v.parse()?,
            Err(_) if conv_path == "mma-transposed" => usize::MAX,
            Err(_) => chorus_cuda::DEFAULT_CONV_MMA_MAX_OUT,
        },
        fuse_res_block: conv_path != "mma-apart",
        conv_wide: conv_path == "mma-wide",
        attention_mma: conv_path != "mma-scalar-attn",
        gemm_epilogue: std::env::var(EPILOGUE_ENV).map_or(true, |v| v != "0"),
        gemv_min_k,
        ..Default::default()
    })?;
    let opts = DecoderOptions {
        max_slots: buckets.largest(),
        buckets: buckets.clone(),
        chunk_frames: 1,
    };
    let t0 = std::time::Instant::now();
    let mut dec = SlotDecoder::from_weights(be, &model.config, &model.weights, opts)?;
    dec.warmup()?;
    println!(
        "replay_bench: {} ({}, {}, gemv_min_k {}), setup + capture {:.1} s",
        dec.backend().device_description(),
        precision.name(),
        conv_path,
        gemv_min_k,
        t0.elapsed().as_secs_f64()
    );
    // Fill every slot's KV ring past the window first: timing empty rings would measure attention
    // over two keys instead of 250.
    let card = model.config.codebook_size as u64;
    let mut rng = SEED;
    let mut codes = |n: usize| -> Vec<u32> {
        (0..n * CODEBOOKS)
            .map(|_| {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((rng >> 33) % card) as u32
            })
            .collect()
    };
    let all: Vec<usize> = (0..buckets.largest()).collect();
    for _ in 0..FILL_STEPS {
        dec.step_codes(&all, &codes(all.len()), CODEBOOKS)?;
    }
    for &b in buckets.sizes() {
        dec.step_codes(&all[..b], &codes(b), CODEBOOKS)?;
    }
    println!(
        "over warm-up and capture: {} tensor-core convolutions ({} wide), {} tensor-core \
         attentions, {} products with an epilogue",
        dec.backend().tensor_core_convs(),
        dec.backend().wide_convs(),
        dec.backend().tensor_core_attentions(),
        dec.backend().epilogue_gemms()
    );
    println!(
        "{:>6} {:>6} {:>10} {:>10} {:>10} {:>12}",
        "batch", "nodes", "p10 ms", "median ms", "p90 ms", "frames/s"
    );
    for (i, &b) in buckets.sizes().iter().enumerate() {
        let mut t = dec.backend().time_replay(i, replays)?;
        t.sort_by(f32::total_cmp);
        let q = |f: f64| t[((t.len() - 1) as f64 * f) as usize];
        let med = q(0.5);
        println!(
            "{b:>6} {:>6} {:>10.4} {:>10.4} {:>10.4} {:>12.0}",
            dec.backend().graph_nodes(i).unwrap_or(0),
            q(0.1),
            med,
            q(0.9),
            b as f32 * 1e3 / med
        );
    }
    for (i, &b) in buckets.sizes().iter().enumerate() {
        dec.backend().set_profiling(true);
        dec.replay_bucket(i)?;
        dec.backend().set_profiling(false);
        let calls = dec.backend().take_profile_calls()?;
        let total: f32 = calls.iter().map(|c| c.1).sum();
        let mut sums: Vec<(&str, f32, usize)> = Vec::new();
        for &(op, ms) in &calls {
            match sums.iter_mut().find(|s| s.0 == op) {
                Some(s) => {
                    s.1 += ms;
                    s.2 += 1;
                }
                None => sums.push((op, ms, 1)),
            }
        }
        let parts: Vec<String> = sums
            .iter()
            .map(|(op, ms, n)| format!("{op} {ms:.3}/{n}"))
            .collect();
        println!(
            "profile batch {b}: eager sum {total:.3} ms: {}",
            parts.join(", ")
        );
        if i + 1 == buckets.sizes().len() {
            let seq: Vec<String> = calls
                .iter()
                .filter(|c| c.0.starts_with("conv") || c.0 == "attention" || c.0 == "res_block")
                .map(|(op, ms)| format!("{op}:{ms:.3}"))
                .collect();
            println!(
                "profile batch {b} conv/res_block/attention calls in order: {}",
                seq.join(" ")
            );
        }
    }
    Ok(())
}
