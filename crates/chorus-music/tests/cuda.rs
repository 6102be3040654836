//! The stage on the CUDA backend (skipped without a GPU): the oracle's teacher-forced traces in
//! f32 (rel L2 <= 1e-4) and bf16 (<= 2e-2), and free-running codes in `noise` mode identical to
//! the CPU backend and the oracle, every frame one graph replay.

mod common;

use chorus_core::Precision;
use chorus_cuda::{CudaBackend, CudaOptions};
use chorus_music::{SemanticStage, StageOptions};
use common::oracle::{assert_codes_match, free_run, teacher_forcing_errors, CONTEXT};
use common::*;

fn cuda_stage(precision: Precision, songs: usize) -> Option<SemanticStage<CudaBackend>> {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return None;
    }
    let be = CudaBackend::new(CudaOptions {
        precision,
        ..Default::default()
    })
    .unwrap();
    let opts = StageOptions::for_songs(songs, CONTEXT).unwrap();
    let mut st = SemanticStage::new(be, &small_model(1.0), opts).unwrap();
    st.warmup().unwrap();
    Some(st)
}

#[test]
fn cuda_teacher_forcing_matches_the_oracle_in_f32_and_bf16() {
    for (precision, tol) in [(Precision::F32, 1e-4), (Precision::Bf16, 2e-2)] {
        let Some(mut st) = cuda_stage(precision, 1) else {
            return;
        };
        for (name, e) in teacher_forcing_errors(&mut st) {
            eprintln!(
                "cuda {} teacher forcing {name}: rel L2 {e:.3e} (bound {tol:e})",
                precision.name()
            );
            assert!(
                e <= tol,
                "cuda {}: {name} rel L2 {e:.3e} > {tol:e}",
                precision.name()
            );
        }
    }
}

#[test]
fn cuda_free_running_noise_codes_equal_the_cpu_backend_and_the_oracle() {
    let Some(mut st) = cuda_stage(Precision::F32, 1) else {
        return;
    };
    let fx = fixture("small_noise");
    let want = code_frames(&fx, "codes");
    let frames = want.len() - 1;
    let sampling = chorus_music::Sampling::Noise(7);
    let (cuda_codes, cuda_hidden, _) = free_run(&mut st, "small_noise", sampling, false, frames);
    let mut cpu = stage(&small_model(1.0), 1, CONTEXT);
    let (cpu_codes, cpu_hidden, _) = free_run(&mut cpu, "small_noise", sampling, false, frames);
    assert_eq!(cuda_codes, cpu_codes, "CUDA f32 and CPU codes differ");
    assert!(assert_codes_match("small_noise", &cuda_codes, &want));
    let e = rel_l2(&cuda_hidden, &cpu_hidden);
    eprintln!("cuda f32 free-running frame hiddens vs CPU: rel L2 {e:.3e}");
    assert!(e <= 1e-4);
}

/// Full size, on the GPU machine: the real architecture with the seeded random weights, against
/// the oracle's full-size fixture (`scripts/device/music_full_oracle.sh` writes it; the test runs
/// when `CHORUS_MUSIC_FULL_FIXTURE` names it): f32 within 1e-4, bf16 within 2e-2.
#[test]
fn full_size_teacher_forcing_matches_the_oracle() {
    let Some(path) = std::env::var_os("CHORUS_MUSIC_FULL_FIXTURE") else {
        eprintln!("skipped: CHORUS_MUSIC_FULL_FIXTURE is not set");
        return;
    };
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let fx = chorus_core::checkpoint::SafetensorsFile::open(std::path::Path::new(&path)).unwrap();
    let t0 = std::time::Instant::now();
    let model = chorus_music::load_music_model("random").unwrap();
    eprintln!(
        "full-size random weights drawn in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    for (precision, tol) in [(Precision::F32, 1e-4), (Precision::Bf16, 2e-2)] {
        let be = CudaBackend::new(CudaOptions {
            precision,
            ..Default::default()
        })
        .unwrap();
        let mut st =
            SemanticStage::new(be, &model, StageOptions::for_songs(1, CONTEXT).unwrap()).unwrap();
        st.warmup().unwrap();
        for (name, e) in common::oracle::teacher_forcing_errors_on(&mut st, &fx) {
            eprintln!(
                "full size cuda {} teacher forcing {name}: rel L2 {e:.3e} (bound {tol:e})",
                precision.name()
            );
            assert!(
                e <= tol,
                "full size cuda {}: {name} rel L2 {e:.3e} > {tol:e}",
                precision.name()
            );
        }
    }
}

/// The batch-invariant mode (`CudaOptions::batch_invariant`): a seeded song's codes and hiddens
/// on CUDA bf16 are the same bits alone and beside 1, 7, 63 and 127 other songs (buckets of 1 to
/// 128; one of the others joins at frame 3), the others joining at other frames with their
/// prompts chunked into its frames. The model
/// is `random-small` with a depth MLP of 512, so that every product takes the skinny kernel.
#[test]
fn cuda_bf16_song_is_bit_identical_in_any_batch_in_the_invariant_mode() {
    use chorus_music::{Sampling, SongEvent, SongRequest};
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let depth = chorus_music::DepthConfig {
        intermediate_size: 512,
        ..chorus_music::DepthConfig::small()
    };
    let model =
        chorus_music::load::random_model(chorus_music::Qwen3Config::small(), depth, 1.0).unwrap();
    let be = CudaBackend::new(CudaOptions {
        precision: Precision::Bf16,
        batch_invariant: true,
        ..Default::default()
    })
    .unwrap();
    let context = 160;
    let opts = StageOptions::for_songs(128, context).unwrap();
    let mut st = SemanticStage::new(be, &model, opts).unwrap();
    st.warmup().unwrap();
    let request = |seed: u64| {
        let mut rng = chorus_core::rng::SplitMix64::new(seed);
        let cond = (0..24).map(|_| (rng.next_u64() % 151_643) as u32).collect();
        SongRequest {
            prompt: chorus_music::prompt::PromptIds::from_cond(cond, 200_000).unwrap(),
            max_frames: 12,
            sampling: Sampling::Seeded(seed),
            allow_end: false,
            forced: None,
        }
    };
    let mut runs = Vec::new();
    for others in [0usize, 1, 7, 63, 126] {
        let mut outs: Vec<(Vec<[u32; 8]>, Vec<u32>)> = Vec::new();
        let mine = st.add_song(request(7)).unwrap();
        for s in 0..others {
            st.add_song(request(100 + s as u64)).unwrap();
        }
        let mut frame = 0;
        while st.active() > 0 {
            if frame == 3 && others > 0 {
                // One more joins mid-song (its prompt is chunked into this song's frames).
                st.add_song(request(999)).unwrap();
            }
            st.step(&mut |ev| {
                if let SongEvent::Frame {
                    song,
                    codes,
                    hidden,
                    ..
                } = ev
                {
                    if song == mine {
                        outs.push((vec![codes], hidden.iter().map(|x| x.to_bits()).collect()));
                    }
                }
            })
            .unwrap();
            frame += 1;
        }
        eprintln!(
            "bf16 invariant mode: song beside {others} others, {} frames",
            outs.len()
        );
        runs.push(outs);
    }
    for (i, r) in runs.iter().enumerate().skip(1) {
        assert_eq!(r.len(), runs[0].len());
        for (f, (a, b)) in r.iter().zip(&runs[0]).enumerate() {
            assert_eq!(a.0, b.0, "run {i}: codes of frame {f} differ");
            assert!(a.1 == b.1, "run {i}: hiddens of frame {f} differ");
        }
    }
}

/// A song joining running ones is prefilled in chunks inside their frames: on CUDA its codes equal
/// those of the same song prefilled whole (f32: hiddens within 1e-5; bf16 in the batch-invariant
/// mode: the same bits), and the running songs' outputs do not change.
#[test]
fn cuda_chunked_prefill_equals_whole_prefill() {
    use chorus_music::{Sampling, SongEvent, SongRequest};
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let depth = chorus_music::DepthConfig {
        intermediate_size: 512,
        ..chorus_music::DepthConfig::small()
    };
    let model =
        chorus_music::load::random_model(chorus_music::Qwen3Config::small(), depth, 1.0).unwrap();
    // (prompt length, frames, seed, the frame it joins at).
    let reqs = [
        (40usize, 10usize, 31u64, 0usize),
        (20, 6, 32, 1),
        (5, 6, 33, 2),
        (70, 4, 34, 2),
    ];
    let run = |precision: Precision, invariant: bool, chunk: usize| {
        let be = CudaBackend::new(CudaOptions {
            precision,
            batch_invariant: invariant,
            ..Default::default()
        })
        .unwrap();
        let mut opts = StageOptions::for_songs(4, 160).unwrap();
        opts.prefill_chunk = chunk;
        let mut st = SemanticStage::new(be, &model, opts).unwrap();
        st.warmup().unwrap();
        let mut outs: Vec<(Vec<[u32; 8]>, Vec<f32>)> = vec![Default::default(); reqs.len()];
        let mut ids = Vec::new();
        for f in 0..100 {
            for &(len, frames, seed, at) in &reqs {
                if at == f {
                    let mut rng = chorus_core::rng::SplitMix64::new(seed);
                    let cond = (0..len)
                        .map(|_| (rng.next_u64() % 151_643) as u32)
                        .collect();
                    let req = SongRequest {
                        prompt: chorus_music::prompt::PromptIds::from_cond(cond, 200_000).unwrap(),
                        max_frames: frames,
                        sampling: Sampling::Seeded(seed),
                        allow_end: false,
                        forced: None,
                    };
                    ids.push(st.add_song(req).unwrap());
                }
            }
            st.step(&mut |ev| {
                if let SongEvent::Frame {
                    song,
                    codes,
                    hidden,
                    ..
                } = ev
                {
                    let i = ids.iter().position(|&x| x == song).unwrap();
                    outs[i].0.push(codes);
                    outs[i].1.extend_from_slice(hidden);
                }
            })
            .unwrap();
            if f > 2 && st.active() == 0 {
                break;
            }
        }
        outs
    };
    for (precision, invariant) in [(Precision::F32, false), (Precision::Bf16, true)] {
        let whole = run(precision, invariant, 0);
        for chunk in [8, 64] {
            let chunked = run(precision, invariant, chunk);
            for (i, (c, w)) in chunked.iter().zip(&whole).enumerate() {
                assert_eq!(c.0.len(), reqs[i].1, "song {i}");
                assert_eq!(
                    c.0,
                    w.0,
                    "{}: song {i} codes, chunks of {chunk}",
                    precision.name()
                );
                let e = rel_l2(&c.1, &w.1);
                eprintln!(
                    "cuda {} invariant {invariant}: song {i} chunks of {chunk} vs whole: hiddens rel L2 {e:.3e}",
                    precision.name()
                );
                if invariant {
                    assert!(
                        c.1.iter()
                            .zip(&w.1)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "bf16 invariant: song {i} hiddens differ with chunks of {chunk}"
                    );
                } else {
                    assert!(e <= 1e-5, "f32: song {i} rel L2 {e:.3e}");
                }
            }
        }
    }
}

/// The 8-bit KV cache on CUDA (sm_89+): teacher-forced against the oracle, within the bound the
/// format has on the CPU (`tests/fp8.rs`), in f32 and bf16 storage.
#[test]
fn cuda_fp8_kv_cache_stays_near_the_oracle_when_teacher_forced() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    for precision in [Precision::F32, Precision::Bf16] {
        let be = CudaBackend::new(CudaOptions {
            precision,
            ..Default::default()
        })
        .unwrap();
        let mut opts = StageOptions::for_songs(1, CONTEXT).unwrap();
        opts.kv_cache = chorus_music::KvCache::Fp8;
        let mut st = SemanticStage::new(be, &small_model(1.0), opts).unwrap();
        st.warmup().unwrap();
        for (name, e) in teacher_forcing_errors(&mut st) {
            eprintln!(
                "cuda {} fp8 KV cache teacher forcing {name}: rel L2 {e:.3e} (bound 5e-2)",
                precision.name()
            );
            assert!(
                e <= 5e-2,
                "cuda {}: {name} rel L2 {e:.3e}",
                precision.name()
            );
        }
    }
}
