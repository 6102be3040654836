//! `chorus transcribe` end to end on `random-small` (with the random Mimi encoder): one step per
//! frame of the file and of the silence around it, plus position 0; words with times, VAD rows;
//! the same output twice; bad inputs are named errors.

use std::path::Path;
use std::process::{Command, Output};

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("chorus-stt-cli-")
        .tempdir()
        .unwrap()
}

/// 1.5 s of a modulated tone at 24 kHz.
fn wav(path: &Path) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 24_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..36_000 {
        let t = i as f32 / 24_000.0;
        let tau = std::f32::consts::TAU;
        let x = 0.3 * (tau * 220.0 * t).sin() * (tau * 1.3 * t).sin();
        w.write_sample((x * 32767.0) as i16).unwrap();
    }
    w.finalize().unwrap();
}

fn transcribe(audio: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "transcribe",
        "--model",
        "random-small",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--audio",
        audio.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    chorus(&args)
}

#[test]
fn transcribes_with_times_and_vad_and_repeats() {
    let d_tmp = dir();
    let d = d_tmp.path();
    let audio = d.join("tone.wav");
    wav(&audio);
    let o = transcribe(&audio, &["--timestamps", "--vad"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // 1.5 s = 18.75 frames, padded to 19, then the flush of 6 + 13 frames: 38 frames, 39 steps.
    assert!(
        err.contains("38 frames") && err.contains("39 steps"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("time\t")).unwrap();
    assert_eq!(lines.len() - header - 1, 39, "one VAD row per step");
    for l in &lines[1..header] {
        let cols: Vec<&str> = l.split('\t').collect();
        assert_eq!(cols.len(), 3, "{l}");
        assert!(cols[0].parse::<f32>().is_ok(), "{l}");
    }
    for l in &lines[header + 1..] {
        let probs: Vec<f32> = l.split('\t').skip(1).map(|x| x.parse().unwrap()).collect();
        assert!(
            probs.len() == 4 && probs.iter().all(|p| (0.0..=1.0).contains(p)),
            "{l}"
        );
    }
    let again = transcribe(&audio, &["--timestamps", "--vad"]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), out);
}

#[test]
fn bad_inputs_are_named_errors() {
    let d_tmp = dir();
    let d = d_tmp.path();
    let o = transcribe(&d.join("missing.wav"), &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("missing.wav"), "{err}");
    let audio = d.join("tone2.wav");
    wav(&audio);
    let bad = d.join("bad.model");
    std::fs::write(&bad, [0xff, 0xff, 0xff]).unwrap();
    let o = transcribe(&audio, &["--tokenizer", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a SentencePiece model"),
        "{err}"
    );
    let o = transcribe(&audio, &["--sampling", "loud"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unknown sampling mode `loud`"),
        "{err}"
    );
}

#[test]
fn stt_bench_prints_one_row_per_point() {
    // Codes in, then PCM through Mimi's encoder inside the step.
    for (extra, input) in [(&[][..], "codes"), (&["--mimi", "random"][..], "pcm")] {
        let mut args = vec![
            "stt-bench",
            "--model",
            "random-small",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--streams",
            "1,3",
            "--steps",
            "3",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = chorus(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout);
        let rows: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        for (row, n) in rows.iter().zip([1, 3]) {
            assert_eq!(row["streams"], n);
            assert_eq!(row["input"], input);
            assert_eq!(row["fill"], 6, "the window of random-small");
            assert!(row["ms_per_step_median"].as_f64().unwrap() > 0.0);
        }
    }
}

/// The committed espeak-ng fixture (crates/chorus-stt/tests/fixtures, written by
/// tools/fixtures/stt_speech_oracle.py): `chorus transcribe`'s own decode, padding and stage give
/// transformers' greedy tokens at every step.
#[test]
fn espeak_speech_gives_the_oracles_tokens() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../chorus-stt/tests/fixtures");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("stt_speech.json")).unwrap()).unwrap();
    let want: Vec<u64> = meta["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    let o = transcribe(&fixtures.join("speech.wav"), &["--tokens"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("tokens\t"))
        .unwrap();
    let got: Vec<u64> = line.split(' ').map(|t| t.parse().unwrap()).collect();
    assert_eq!(got, want);
}
