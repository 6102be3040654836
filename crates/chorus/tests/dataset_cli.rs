//! `chorus encode --audio-dir`/`--list` and `chorus decode --codes-dir` end to end: every file's
//! output equals its single-file run, a broken input is named and the rest go on, valid outputs
//! are skipped, damaged ones redone, and no partial file is left behind.

use chorus_core::npy::{read_npy, write_npy_i64, NpyData};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Codebooks of the test codes.
const N_Q: &str = "4";
/// Files side by side: fewer than the files, so slots are reused.
const BATCH: &str = "3";

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn model_args() -> Vec<&'static str> {
    vec!["--model", "random", "--device", "cpu"]
}

fn dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-dataset-{name}-"))
        .tempdir()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A WAV of `seconds` of a tone and noise at `rate` with `channels`, 16-bit or float.
fn wav(path: &Path, rate: u32, channels: u16, seconds: f64, float: bool) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: if float { 32 } else { 16 },
        sample_format: if float {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    let mut rng = u64::from(rate) * 7 + u64::from(channels);
    for i in 0..(f64::from(rate) * seconds) as usize {
        for c in 0..channels {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let noise = (rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let t = i as f32 / rate as f32;
            let v = 0.3 * (t * (220.0 + 50.0 * f32::from(c)) * std::f32::consts::TAU).sin()
                + 0.1 * noise;
            if float {
                w.write_sample(v).unwrap();
            } else {
                w.write_sample((v * 30000.0) as i16).unwrap();
            }
        }
    }
    w.finalize().unwrap();
}

fn codes(path: &Path) -> (Vec<usize>, Vec<i64>) {
    let a = read_npy(&std::fs::read(path).unwrap(), "codes").unwrap();
    match a.data {
        NpyData::Int(v) => (a.shape, v),
        NpyData::Float(_) => panic!("{}: codes must be integers", path.display()),
    }
}

/// Files left under `d` whose name says they were being written.
fn partials(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(partials(&p));
        } else if p.to_string_lossy().ends_with(".partial") {
            out.push(p);
        }
    }
    out
}

/// The data set: WAVs of several rates, channel counts and lengths in nested folders, FLAC and
/// MP3, a broken file, one whose output is already done and one whose output is damaged.
fn data_set(root: &Path) -> Vec<&'static str> {
    let audio = Path::new(env!("CARGO_MANIFEST_DIR")).join("../chorus-audio/tests/data");
    wav(&root.join("a.wav"), 24_000, 1, 1.3, false);
    wav(&root.join("sub/b.wav"), 44_100, 2, 0.7, false);
    wav(&root.join("sub/deep/c.wav"), 16_000, 1, 2.1, true);
    wav(&root.join("done.wav"), 24_000, 1, 0.5, false);
    wav(&root.join("stale.wav"), 48_000, 1, 0.9, false);
    std::fs::copy(audio.join("speech_48k_mono.flac"), root.join("sub/d.flac")).unwrap();
    std::fs::copy(audio.join("speech_44k1_mono.mp3"), root.join("e.MP3")).unwrap();
    std::fs::write(
        root.join("sub/broken.wav"),
        b"RIFF this is not a wave file at all",
    )
    .unwrap();
    std::fs::write(root.join("notes.txt"), b"not audio: not walked").unwrap();
    vec![
        "a.wav",
        "sub/b.wav",
        "sub/deep/c.wav",
        "stale.wav",
        "sub/d.flac",
        "e.MP3",
    ]
}

fn encode_dir(input: &Path, out: &Path) -> Output {
    let mut args = vec!["encode"];
    args.extend(model_args());
    args.extend([
        "--audio-dir",
        s(input),
        "--out-dir",
        s(out),
        "--n-q",
        N_Q,
        "--batch",
        BATCH,
    ]);
    chorus(&args)
}

#[test]
fn a_data_set_encodes_as_each_file_alone_resumes_and_decodes_back() {
    let d_tmp = dir("encode");
    let d = d_tmp.path();
    let (input, out) = (d.join("in"), d.join("out"));
    let encoded = data_set(&input);
    // 0.5 s at 24 kHz = 6.25 frames: 7. Zeros are valid codes no encode of this audio makes.
    let done = vec![0i64; 4 * 7];
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("done.npy"), write_npy_i64(&[4, 7], &done)).unwrap();
    std::fs::write(out.join("stale.npy"), b"\x93NUMPY damaged").unwrap();

    let o = encode_dir(&input, &out);
    let e = stderr(&o);
    assert!(
        !o.status.success(),
        "a broken input makes the run fail: {e}"
    );
    assert!(
        e.contains("sub/broken.wav") && e.contains("1 failed"),
        "{e}"
    );
    assert!(
        e.contains("encoded 6 file(s)") && e.contains("skipped 1"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(
        codes(&out.join("done.npy")).1,
        done,
        "a done output is left alone"
    );
    assert!(!out.join("sub/broken.npy").exists() && !out.join("notes.npy").exists());
    assert_eq!(partials(&out), Vec::<PathBuf>::new());

    let alone = d.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    for name in &encoded {
        let want = alone.join(name.replace('/', "_")).with_extension("npy");
        let mut args = vec!["encode"];
        args.extend(model_args());
        let src = input.join(name);
        args.extend(["--audio", s(&src), "--out", s(&want), "--n-q", N_Q]);
        let o = chorus(&args);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let got = out.join(name).with_extension("npy");
        let (shape, values) = codes(&got);
        assert_eq!(shape[0], 4, "{name}");
        assert_eq!(
            (shape, values),
            codes(&want),
            "{name}: bulk codes differ from `chorus encode`"
        );
    }

    // The second run finds everything done (the broken file still fails).
    let o = encode_dir(&input, &out);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("encoded 0 file(s)") && e.contains("skipped 7"),
        "{e}"
    );

    // A list of some of the files (relative and absolute) gives the same codes.
    let list = input.join("files.txt");
    let abs = input.join("sub/deep/c.wav");
    std::fs::write(&list, format!("# two files\na.wav\n{}\n", s(&abs))).unwrap();
    let listed = d.join("listed");
    let mut args = vec!["encode"];
    args.extend(model_args());
    args.extend(["--list", s(&list), "--out-dir", s(&listed), "--n-q", N_Q]);
    let o = chorus(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["a.npy", "sub/deep/c.npy"] {
        assert_eq!(codes(&listed.join(name)), codes(&out.join(name)), "{name}");
    }

    // Decode the codes folder back: each WAV equals `chorus decode` of its file, bytes for bytes.
    std::fs::write(
        out.join("sub/bad.npy"),
        write_npy_i64(&[4, 2], &[0, 1, 2, 3, 4, 5, 6, 9999]),
    )
    .unwrap();
    let wavs = d.join("wav");
    let decode_dir = || {
        let mut args = vec!["decode"];
        args.extend(model_args());
        args.extend([
            "--codes-dir",
            s(&out),
            "--out-dir",
            s(&wavs),
            "--batch",
            BATCH,
        ]);
        chorus(&args)
    };
    let o = decode_dir();
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("sub/bad.npy") && e.contains("9999") && e.contains("decoded 7 file(s)"),
        "{e}"
    );
    for name in encoded.iter().copied().chain(["done.wav"]) {
        let codes_file = out.join(name).with_extension("npy");
        let want = alone.join(name.replace('/', "_")).with_extension("wav");
        let mut args = vec!["decode"];
        args.extend(model_args());
        args.extend(["--codes", s(&codes_file), "--out", s(&want)]);
        let o = chorus(&args);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let got = std::fs::read(wavs.join(name).with_extension("wav")).unwrap();
        assert!(
            got == std::fs::read(&want).unwrap(),
            "{name}: bulk WAV differs from `chorus decode`"
        );
    }
    assert_eq!(partials(&wavs), Vec::<PathBuf>::new());
    let o = decode_dir();
    let e = stderr(&o);
    assert!(
        e.contains("decoded 0 file(s)") && e.contains("skipped 7"),
        "{e}"
    );
}

#[test]
fn bulk_arguments_are_checked() {
    let d_tmp = dir("args");
    let d = d_tmp.path();
    let mut args = vec!["encode"];
    args.extend(model_args());
    args.extend(["--audio-dir", s(d)]);
    let o = chorus(&args);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--out-dir"), "{}", stderr(&o));
    let missing = d.join("missing");
    let mut args = vec!["encode"];
    args.extend(model_args());
    args.extend(["--audio-dir", s(&missing), "--out-dir", s(d)]);
    let o = chorus(&args);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a folder"), "{}", stderr(&o));
    // An empty folder is a run of nothing, not an error.
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut args = vec!["encode"];
    args.extend(model_args());
    let o_dir = d.join("o");
    args.extend(["--audio-dir", s(&empty), "--out-dir", s(&o_dir)]);
    let o = chorus(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("encoded 0 file(s)"), "{}", stderr(&o));
}
