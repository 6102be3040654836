//! `chorus encode --audio-dir DIR` / `--list FILE`: every audio file to codes `.npy` under
//! `--out-dir`, many files side by side on the encoder.

use super::files::{codes_done, expected_frames};
use super::pipeline::{run, Pipeline};
use super::walk::{jobs, read_list, walk_dir, AUDIO_EXTENSIONS};
use super::BulkOptions;
use crate::encode::EncodeArgs;
use anyhow::{bail, Result};
use chorus_core::{Buckets, DEFAULT_BUCKETS};
use chorus_runtime::bulk::{read_audio_input, EncodeBatch, EncodedFile};
use chorus_runtime::{open_encoder, EncoderSpec};

/// Encodes the data set `args` names (`--audio-dir` or `--list`).
pub fn run_encode(args: &EncodeArgs, bulk: &BulkOptions) -> Result<()> {
    let Some(out_dir) = &bulk.out_dir else {
        bail!("--audio-dir and --list need --out-dir");
    };
    if args.latents.is_some() {
        bail!("--latents is for one file (--audio); a bulk run writes codes only");
    }
    let found = match (&args.audio_dir, &args.list) {
        (Some(dir), _) => walk_dir(dir, AUDIO_EXTENSIONS, out_dir)?,
        (None, Some(list)) => read_list(list, args.root.as_deref())?,
        (None, None) => bail!("give --audio-dir or --list"),
    };
    let model = crate::load(&args.model)?;
    let (n_q, nq_max) = (args.n_q, model.config.num_quantizers);
    if n_q == 0 || n_q > nq_max {
        bail!("--n-q {n_q} outside 1..={nq_max}");
    }
    let cardinality = model.config.codebook_size;
    let (jobs, failed) = jobs(found, out_dir, "npy");
    let batch = bulk.batch_for(args.device).clamp(1, jobs.len().max(1));
    let spec = EncoderSpec {
        device: args.device,
        precision: args.precision,
        max_slots: batch,
        buckets: Buckets::new(DEFAULT_BUCKETS)?.capped(batch)?,
        threads: None,
        cuda_device: 0,
        chunk_frames: chorus_runtime::whole_file_encode_chunk(args.device),
    };
    let mut enc = open_encoder(&model, &spec)?;
    drop(model);
    eprintln!(
        "encoding {} file(s), {batch} side by side, n_q = {n_q} on {}",
        jobs.len(),
        enc.describe()
    );
    let allow_truncated = args.allow_truncated;
    let pipeline = Pipeline {
        jobs,
        failed,
        readers: bulk.readers_for(args.device),
        queue: batch,
        load: Box::new(move |job, report| {
            if codes_done(&job.output, n_q, cardinality, expected_frames(&job.input)) {
                return Ok(None);
            }
            let audio = read_audio_input(&job.input, allow_truncated, None)?;
            if let Some(missing) = &audio.truncated {
                report.note(&format!(
                    "warning: {}: {missing}; encoding the {:.2} s that decoded",
                    job.input.display(),
                    audio.seconds
                ));
            }
            Ok(Some(audio))
        }),
        serialize: Box::new(|f: EncodedFile| {
            Ok(chorus_core::npy::write_npy_i64(
                &[f.n_q, f.frames],
                &f.codes,
            ))
        }),
        verb: "encoded",
    };
    let mut files = EncodeBatch::new((0..batch).collect(), n_q)?;
    run(pipeline, &mut files, |b| Ok(b.step(enc.as_mut())?))
}
