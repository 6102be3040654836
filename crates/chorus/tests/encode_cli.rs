//! `chorus encode` end to end: every input format, the transformers oracle's codes from a WAV of
//! its audio, the round trip through `chorus decode`, and bad or cut-short audio refused clearly.

use chorus_core::npy::{read_npy, NpyData};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-encode-{name}-"))
        .tempdir()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn encode(audio: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "encode",
        "--model",
        "random",
        "--device",
        "cpu",
        "--audio",
        audio.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    chorus(&args)
}

fn read_codes(path: &Path) -> (Vec<usize>, Vec<i64>) {
    let a = read_npy(&std::fs::read(path).unwrap(), "codes").unwrap();
    match a.data {
        NpyData::Int(v) => (a.shape, v),
        NpyData::Float(_) => panic!("codes must be integers"),
    }
}

#[test]
fn every_format_encodes_and_decodes_back() {
    let d_tmp = dir("formats");
    let d = d_tmp.path();
    let data = repo().join("crates/chorus-audio/tests/data");
    for name in [
        "speech_44k1_stereo_s16.wav",
        "speech_48k_mono.flac",
        "speech_44k1_mono.mp3",
        "speech_22k05_mono_vorbis.ogg",
        "speech_48k_stereo.opus",
    ] {
        let out = d.join(format!("{name}.npy"));
        let o = encode(&data.join(name), &out, &["--n-q", "4"]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let (shape, codes) = read_codes(&out);
        assert_eq!(shape[0], 4, "{name}");
        assert!(shape[1] >= 4, "{name}: {shape:?}");
        assert!(codes.iter().all(|&c| (0..2048).contains(&c)), "{name}");
        let wav = d.join(format!("{name}.wav"));
        let o = chorus(&[
            "decode",
            "--model",
            "random",
            "--device",
            "cpu",
            "--codes",
            out.to_str().unwrap(),
            "--out",
            wav.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{name} round trip: {}", stderr(&o));
        let r = hound::WavReader::open(&wav).unwrap();
        assert_eq!(r.duration() as usize, shape[1] * 1920, "{name}");
    }
}

/// The oracle's speech as a 24 kHz float WAV encodes to transformers' codes, every level.
#[test]
fn oracle_audio_encodes_to_the_oracle_codes() {
    let d_tmp = dir("oracle");
    let d = d_tmp.path();
    let fx = repo().join("tests/fixtures/encoder");
    let audio = match read_npy(
        &std::fs::read(fx.join("enc_hf_speech.audio.npy")).unwrap(),
        "a",
    )
    .unwrap()
    .data
    {
        NpyData::Float(v) => v,
        NpyData::Int(_) => panic!("audio must be floats"),
    };
    // One whole-file chunk step (the CPU's), then a padded one for the tail, against the oracle.
    let frames = chorus_core::CPU_WHOLE_FILE_ENCODE_CHUNK + 4;
    let wav = d.join("speech.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 24_000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(&wav, spec).unwrap();
    for &s in &audio[..frames * 1920] {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    let out = d.join("codes.npy");
    let o = encode(&wav, &out, &["--n-q", "32"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (shape, got) = read_codes(&out);
    assert_eq!(shape, vec![32, frames]);
    let (want_shape, want) = read_codes(&fx.join("enc_hf_speech.codes.npy"));
    let total = want_shape[1];
    for q in 0..32 {
        assert_eq!(
            got[q * frames..(q + 1) * frames],
            want[q * total..q * total + frames],
            "level {q}"
        );
    }
}

#[test]
fn bad_and_cut_short_audio_is_refused_clearly() {
    let d_tmp = dir("bad");
    let d = d_tmp.path();
    let out = d.join("c.npy");
    let junk = d.join("junk.wav");
    std::fs::write(&junk, b"this is not audio at all, just some text").unwrap();
    let o = encode(&junk, &out, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("junk.wav"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));

    let o = encode(&d.join("missing.flac"), &out, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing.flac"), "{}", stderr(&o));

    let src = repo().join("crates/chorus-audio/tests/data/speech_44k1_stereo_s16.wav");
    let bytes = std::fs::read(&src).unwrap();
    let cut = d.join("cut.wav");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let o = encode(&cut, &out, &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("cut short") && e.contains("--allow-truncated"),
        "{e}"
    );
    let o = encode(&cut, &out, &["--allow-truncated"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = encode(&src, &out, &["--n-q", "33"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--n-q 33"), "{}", stderr(&o));
}
