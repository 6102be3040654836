//! moshi-bench: Kyutai's `moshi` crate (candle, CPU, f32) Mimi encoder, streamed one 80 ms frame
//! (1920 samples) per `Mimi::encode_step` call, timed per call.
//!
//! Usage:
//!   moshi-bench --model mimi.safetensors --audio speech.npy [--n-q 8] [--batch 1]
//!               [--threads N] [--warmup 130] [--seconds 3] [--codes-out codes.npy]
//!               [--reference oracle_codes.npy] [--latent-ref oracle_latent.npy] [--json]
//!
//! The audio (mono f32 at 24 kHz, `.npy` `<f4` or raw little-endian `.f32`) is fed frame by frame
//! and cycled when the run is longer than the file; the codes of the first pass over the file
//! (stream 0) go to `--codes-out` as int64 `[n_q, frames]`. With `--batch B > 1`, B streams are
//! stepped at once (input `[B, 1, 1920]`), stream `s` reading the file shifted by `s * 17` frames.
//!
//! Timing: steps before `--warmup` (default 130, as `chorus bench`: past the 250-token window,
//! 125 frames) are untimed; then steps run until `--seconds` and `--min-steps` are both reached.
//! Each timed step covers building the input tensor, `encode_step`, and the codes copied to host.
//! `--reference` prints the per-level agreement of stream 0's codes with a `[n_q', frames]` .npy;
//! `--latent-ref` (untimed) runs the same modules as `encode_step` up to the quantizer, streaming,
//! and prints the relative L2 of those latents against a float32 `[frames, 512]` .npy (written
//! to the path in `MOSHI_BENCH_LATENTS_OUT` when that is set).
//!
//! Threads: candle's CPU matmul (gemm) reads `RAYON_NUM_THREADS` (else every core) and its other
//! parallel loops run on rayon's global pool; `--threads N` sets both to N before any work.

use anyhow::{bail, Context, Result};
use candle::{DType, Device, Tensor};
use moshi::mimi::{Config, Mimi};
use moshi::{StreamMask, StreamTensor, StreamingModule};
use std::path::{Path, PathBuf};
use std::time::Instant;

const FRAME: usize = 1920;
const STREAM_SHIFT: usize = 17;

struct Args {
    model: PathBuf,
    audio: PathBuf,
    n_q: usize,
    batch: usize,
    threads: Option<usize>,
    warmup: usize,
    seconds: f64,
    min_steps: usize,
    codes_out: Option<PathBuf>,
    reference: Option<PathBuf>,
    latent_ref: Option<PathBuf>,
    json: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        model: PathBuf::new(),
        audio: PathBuf::new(),
        n_q: 8,
        batch: 1,
        threads: None,
        warmup: 130,
        seconds: 3.0,
        min_steps: 10,
        codes_out: None,
        reference: None,
        latent_ref: None,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().with_context(|| format!("{k} needs a value"));
        match k.as_str() {
            "--model" => a.model = v()?.into(),
            "--audio" => a.audio = v()?.into(),
            "--n-q" => a.n_q = v()?.parse()?,
            "--batch" => a.batch = v()?.parse()?,
            "--threads" => a.threads = Some(v()?.parse()?),
            "--warmup" => a.warmup = v()?.parse()?,
            "--seconds" => a.seconds = v()?.parse()?,
            "--min-steps" => a.min_steps = v()?.parse()?,
            "--codes-out" => a.codes_out = Some(v()?.into()),
            "--reference" => a.reference = Some(v()?.into()),
            "--latent-ref" => a.latent_ref = Some(v()?.into()),
            "--json" => a.json = true,
            "-h" | "--help" => {
                let doc: Vec<&str> = include_str!("main.rs").lines().take_while(|l| l.starts_with("//!")).map(|l| l.trim_start_matches("//!").trim_start_matches(' ')).collect();
                println!("{}", doc.join("\n"));
                std::process::exit(0);
            }
            _ => bail!("unknown argument {k}"),
        }
    }
    if a.model.as_os_str().is_empty() || a.audio.as_os_str().is_empty() {
        bail!("--model and --audio are required (see --help)");
    }
    if a.batch == 0 || a.n_q == 0 || a.n_q > 32 {
        bail!("--batch >= 1 and --n-q in 1..=32");
    }
    Ok(a)
}

// ---------------------------------------------------------------- npy (just what is needed)

/// (descr, shape, data bytes)
fn read_npy(path: &Path) -> Result<(String, Vec<usize>, Vec<u8>)> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        bail!("{}: not an .npy file", path.display());
    }
    let (hlen, off) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let header = std::str::from_utf8(&b[off..off + hlen])?;
    let field = |key: &str| -> Result<&str> {
        let i = header.find(key).with_context(|| format!("npy header lacks {key}"))?;
        Ok(&header[i + key.len()..])
    };
    let descr = field("'descr':")?.trim_start();
    let descr = descr[1..].split('\'').next().unwrap_or("").to_string();
    let fortran = field("'fortran_order':")?.trim_start().starts_with("True");
    let shape_s = field("'shape':")?;
    let shape_s = &shape_s[shape_s.find('(').unwrap() + 1..shape_s.find(')').unwrap()];
    let shape = shape_s
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let data = b[off + hlen..].to_vec();
    if !fortran || shape.iter().filter(|&&d| d != 1).count() <= 1 {
        return Ok((descr, shape, data));
    }
    if shape.len() != 2 {
        bail!("{}: fortran-order arrays of rank > 2 not supported", path.display());
    }
    // Column-major [r, c] to row-major.
    let w = descr[2..].parse::<usize>()?;
    let (r, c) = (shape[0], shape[1]);
    let mut out = vec![0u8; data.len()];
    for i in 0..r {
        for j in 0..c {
            let (src, dst) = ((j * r + i) * w, (i * c + j) * w);
            out[dst..dst + w].copy_from_slice(&data[src..src + w]);
        }
    }
    Ok((descr, shape, out))
}

fn write_npy_i64(path: &Path, shape: &[usize], data: &[i64]) -> Result<()> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy(path, "<i8", shape, &bytes)
}

fn write_npy(path: &Path, descr: &str, shape: &[usize], bytes: &[u8]) -> Result<()> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(bytes);
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

fn read_audio(path: &Path) -> Result<Vec<f32>> {
    let f32s = |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    if path.extension().and_then(|e| e.to_str()) == Some("npy") {
        let (descr, shape, data) = read_npy(path)?;
        if descr != "<f4" || shape.iter().filter(|&&d| d != 1).count() > 1 {
            bail!("{}: want a mono float32 array, got {descr} {shape:?}", path.display());
        }
        Ok(f32s(&data))
    } else {
        Ok(f32s(&std::fs::read(path).with_context(|| format!("reading {}", path.display()))?))
    }
}

fn read_codes(path: &Path) -> Result<(Vec<usize>, Vec<i64>)> {
    let (descr, shape, data) = read_npy(path)?;
    let v = match descr.as_str() {
        "<i4" => data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
        "<i8" => data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect(),
        "<u4" => data.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
        d => bail!("{}: codes dtype {d} not supported", path.display()),
    };
    if shape.len() != 2 {
        bail!("{}: want codes [n_q, frames], got {shape:?}", path.display());
    }
    Ok((shape, v))
}

// ---------------------------------------------------------------- bench

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() -> Result<()> {
    let args = parse_args()?;
    if let Some(n) = args.threads {
        // Before any candle / rayon work: gemm reads the variable on every matmul, rayon once.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global()?;
    }
    let threads = candle::utils::get_num_threads();
    let rayon_threads = rayon::current_num_threads();

    let audio = read_audio(&args.audio)?;
    let n_frames = audio.len() / FRAME;
    if n_frames == 0 {
        bail!("{}: shorter than one frame", args.audio.display());
    }
    let dev = Device::Cpu;
    let t_load = Instant::now();
    let vb = unsafe {
        candle_nn::VarBuilder::from_mmaped_safetensors(&[&args.model], DType::F32, &dev)?
    };
    let vb_latent = vb.clone();
    let mut mimi = Mimi::new(Config::v0_1(Some(args.n_q)), vb)
        .with_context(|| format!("loading {} with moshi::mimi::Mimi::new", args.model.display()))?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let b = args.batch;
    let mask = StreamMask::empty();
    let mut codes0: Vec<Vec<i64>> = vec![Vec::new(); args.n_q]; // [n_q][frames], stream 0
    let mut times: Vec<f64> = Vec::new(); // every step, ms
    let mut produced_at: Vec<usize> = Vec::new();
    let budget = std::time::Duration::from_secs_f64(args.seconds);
    let mut timed_start: Option<Instant> = None;
    let mut step = 0usize;
    let mut buf = vec![0f32; b * FRAME];
    loop {
        let timed = step >= args.warmup;
        if timed && timed_start.is_none() {
            timed_start = Some(Instant::now());
        }
        let n_timed = step.saturating_sub(args.warmup);
        if step >= n_frames
            && timed
            && n_timed >= args.min_steps
            && timed_start.unwrap().elapsed() >= budget
        {
            break;
        }
        for s in 0..b {
            let f = (step + s * STREAM_SHIFT) % n_frames;
            buf[s * FRAME..(s + 1) * FRAME].copy_from_slice(&audio[f * FRAME..(f + 1) * FRAME]);
        }
        let t = Instant::now();
        let xs = Tensor::from_slice(&buf, (b, 1, FRAME), &dev)?;
        let out = mimi.encode_step(&StreamTensor::from_tensor(xs), &mask)?;
        // Codes to the host inside the timed region (as a server hands them out).
        let host: Option<Vec<Vec<Vec<u32>>>> = match out.as_option() {
            Some(c) => Some(c.to_dtype(DType::U32)?.to_vec3::<u32>()?),
            None => None,
        };
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if let Some(h) = host {
            // [B, n_q, T_new]
            for (q, row) in h[0].iter().enumerate() {
                if q < args.n_q {
                    for &c in row {
                        if codes0[q].len() < n_frames {
                            codes0[q].push(c as i64);
                        }
                    }
                }
            }
            produced_at.push(step);
        }
        step += 1;
    }
    let total_s = timed_start.unwrap().elapsed().as_secs_f64();
    let steady = &times[args.warmup..];
    let mut sorted = steady.to_vec();
    sorted.sort_by(f64::total_cmp);
    let med = pct(&sorted, 0.5);
    let p90 = pct(&sorted, 0.9);
    let fps_wall = (b * steady.len()) as f64 / total_s;
    let fps_median = b as f64 * 1e3 / med;
    // The first pass over the file after a short warm-up (10 steps): the window is still filling.
    let early: Vec<f64> = times[10.min(n_frames)..n_frames.min(times.len())].to_vec();
    let mut early_sorted = early.clone();
    early_sorted.sort_by(f64::total_cmp);

    let got = codes0[0].len();
    if let Some(p) = &args.codes_out {
        let mut flat = Vec::with_capacity(args.n_q * got);
        for row in &codes0 {
            flat.extend_from_slice(&row[..got]);
        }
        write_npy_i64(p, &[args.n_q, got], &flat)?;
    }

    if args.json {
        println!(
            "{{\"impl\":\"moshi-{}\",\"batch\":{b},\"n_q\":{},\"threads\":{threads},\"rayon_threads\":{rayon_threads},\"warmup\":{},\"steps\":{},\"ms_per_step_median\":{med:.4},\"ms_per_step_p90\":{p90:.4},\"frames_per_s\":{fps_wall:.2},\"frames_per_s_from_median\":{fps_median:.2}}}",
            MOSHI_VERSION, args.n_q, args.warmup, steady.len()
        );
    } else {
        println!("moshi {MOSHI_VERSION} (candle {CANDLE_VERSION}) Mimi encoder, CPU f32, Mimi::encode_step one {FRAME}-sample frame per call");
        println!("  model {} (loaded in {load_ms:.0} ms), audio {} ({n_frames} frames)", args.model.display(), args.audio.display());
        println!("  threads: candle gemm {threads}, rayon pool {rayon_threads}; batch {b}; n_q {}", args.n_q);
        println!(
            "  steady state (after {} warm-up steps, {} timed steps, {total_s:.2} s): {fps_wall:.2} frames/s, ms/step median {med:.3} p90 {p90:.3} (frames/s from median {fps_median:.2})",
            args.warmup,
            steady.len()
        );
        if !early.is_empty() {
            println!(
                "  file first pass, steps 10..{}: ms/step median {:.3} p90 {:.3}",
                10 + early.len(),
                pct(&early_sorted, 0.5),
                pct(&early_sorted, 0.9)
            );
        }
        println!("  codes: first produced at step {:?}, {got} frames of stream 0 kept", produced_at.first());
    }

    if let Some(r) = &args.reference {
        let (shape, refc) = read_codes(r)?;
        let (rq, rt) = (shape[0], shape[1]);
        let t = rt.min(got);
        let mut line = format!("  agreement with {} over {t} frames, per level:", r.display());
        let mut all = 0usize;
        for q in 0..args.n_q.min(rq) {
            let same = (0..t).filter(|&i| codes0[q][i] == refc[q * rt + i]).count();
            all += same;
            line.push_str(&format!(" L{q} {same}/{t}"));
        }
        println!("{line}");
        println!(
            "  total {all}/{} ({:.2}%)",
            t * args.n_q.min(rq),
            100.0 * all as f64 / (t * args.n_q.min(rq)).max(1) as f64
        );
    }
    if let Some(r) = &args.latent_ref {
        // Not timed: the streaming latents (output of `downsample`, what `encode_step` hands
        // to the quantizer), frame by frame through the same modules `Mimi::encode_step` chains
        // (moshi's `Mimi` keeps them private, so they are built here from the same weights).
        let (descr, shape, data) = read_npy(r)?;
        if descr != "<f4" || shape.len() != 2 {
            bail!("{}: want float32 [frames, dim], got {descr} {shape:?}", r.display());
        }
        let refl: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        let cfg = Config::v0_1(Some(args.n_q));
        let dim = cfg.seanet.dimension;
        let mut enc = moshi::seanet::SeaNetEncoder::new(&cfg.seanet, vb_latent.pp("encoder"))?;
        let mut tr = moshi::transformer::Transformer::new(None, dim, &cfg.transformer, vb_latent.pp("encoder_transformer"))?;
        let mut ds = moshi::conv::ConvDownsample1d::new(2, dim, true, true, vb_latent.pp("downsample"))?;
        let mut rows = Vec::new();
        for f in 0..n_frames {
            let x = Tensor::from_slice(&audio[f * FRAME..(f + 1) * FRAME], (1, 1, FRAME), &dev)?;
            let xs = enc.step(&StreamTensor::from_tensor(x), &mask)?;
            let xs = tr.step(&xs, &mask)?;
            let xs = ds.step(&xs, &mask)?;
            if let Some(l) = xs.as_option() {
                rows.push(l.squeeze(0)?.t()?); // [T_new, dim]
            }
        }
        let lat = Tensor::cat(&rows, 0)?.contiguous()?;
        let (t, d) = lat.dims2()?;
        let t = t.min(shape[0]);
        if d != shape[1] {
            bail!("latent dim {d} vs reference {}", shape[1]);
        }
        let lat = lat.flatten_all()?.to_vec1::<f32>()?;
        if let Ok(p) = std::env::var("MOSHI_BENCH_LATENTS_OUT") {
            let bytes: Vec<u8> = lat.iter().flat_map(|v| v.to_le_bytes()).collect();
            write_npy(Path::new(&p), "<f4", &[lat.len() / d, d], &bytes)?;
        }
        let (mut num, mut den, mut maxabs) = (0f64, 0f64, 0f64);
        for i in 0..t * d {
            let e = (lat[i] - refl[i]) as f64;
            num += e * e;
            den += (refl[i] as f64).powi(2);
            maxabs = maxabs.max(e.abs());
        }
        println!(
            "  streaming latent (pre-quantizer) vs {} over {t} frames: relative L2 {:.3e}, max abs diff {maxabs:.3e}",
            r.display(),
            (num / den).sqrt()
        );
    }
    Ok(())
}

const MOSHI_VERSION: &str = "0.6.4";
const CANDLE_VERSION: &str = "0.9.2";
