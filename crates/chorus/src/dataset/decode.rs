//! `chorus decode --codes-dir DIR`: every codes `.npy` to WAV under `--out-dir`, many files side
//! by side on the decoder, each in the steps `chorus decode` takes for it alone.

use super::files::wav_done;
use super::pipeline::{run, Pipeline};
use super::walk::{jobs, walk_dir, CODES_EXTENSIONS};
use super::BulkOptions;
use crate::decode::DecodeArgs;
use anyhow::{bail, Context, Result};
use chorus_core::codes::CodesBatch;
use chorus_core::{Buckets, DEFAULT_BUCKETS};
use chorus_runtime::bulk::{DecodeBatch, DecodeInput};
use chorus_runtime::device::{open_decoder, DecoderSpec};
use chorus_server::wav::{encode_wav, WavFormat};

/// Decodes every codes file under `--codes-dir`.
pub fn run_decode(args: &DecodeArgs, bulk: &BulkOptions) -> Result<()> {
    let (Some(dir), Some(out_dir)) = (&args.codes_dir, &bulk.out_dir) else {
        bail!("--codes-dir needs --out-dir");
    };
    let found = walk_dir(dir, CODES_EXTENSIONS, out_dir)?;
    let model = crate::load(&args.model)?;
    let (cardinality, nq_max) = (model.config.codebook_size, model.config.num_quantizers);
    let (jobs, failed) = jobs(found, out_dir, "wav");
    let batch = bulk.batch_for(args.device).clamp(1, jobs.len().max(1));
    let spec = DecoderSpec {
        device: args.device,
        precision: args.precision,
        max_slots: batch,
        buckets: Buckets::new(DEFAULT_BUCKETS)?.capped(batch)?,
        threads: None,
        // What `chorus decode` uses for one file, so each file's steps are the same.
        chunk_frames: chorus_runtime::whole_file_decode_chunk(args.device),
    };
    let mut dec = open_decoder(&model, &spec)?;
    drop(model);
    eprintln!(
        "decoding {} file(s), {batch} side by side, on {}",
        jobs.len(),
        dec.describe()
    );
    let format = if args.float {
        WavFormat::Float32
    } else {
        WavFormat::Pcm16
    };
    let pipeline = Pipeline {
        jobs,
        failed,
        readers: bulk.readers_for(args.device),
        queue: batch,
        load: Box::new(move |job, _| {
            let name = job.input.display().to_string();
            let bytes = std::fs::read(&job.input).with_context(|| format!("reading {name}"))?;
            let codes = CodesBatch::from_npy(&bytes, &name, cardinality, nq_max)?;
            let input = DecodeInput::new(codes, &name)?;
            if wav_done(&job.output, input.frames, format) {
                return Ok(None);
            }
            Ok(Some(input))
        }),
        serialize: Box::new(move |pcm: Vec<f32>| Ok(encode_wav(&pcm, format)?)),
        verb: "decoded",
    };
    let mut files = DecodeBatch::new((0..batch).collect())?;
    run(pipeline, &mut files, |b| Ok(b.step(dec.as_mut())?))
}
