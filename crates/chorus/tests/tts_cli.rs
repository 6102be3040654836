//! `chorus tts` end to end on `random-small`: the WAV holds every generated frame's audio (as
//! decoded inside the frame program), which equals `chorus decode` of the written codes; the
//! same seed gives the same codes; bad inputs are named errors.

use std::process::{Command, Output};

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("chorus-tts-cli-")
        .tempdir()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tts(d: &std::path::Path, name: &str, extra: &[&str]) -> Output {
    let (out, codes) = (d.join(format!("{name}.wav")), d.join(format!("{name}.npy")));
    let mut args = vec![
        "tts",
        "--model",
        "random-small",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--text",
        "How are you?",
        "--max-seconds",
        "1.6",
        "--out",
        out.to_str().unwrap(),
        "--codes",
        codes.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    chorus(&args)
}

/// 16-bit samples of a WAV file written by chorus (44-byte header).
fn samples(p: &std::path::Path) -> Vec<i16> {
    let b = std::fs::read(p).unwrap();
    b[44..]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[test]
fn speech_equals_the_decode_of_its_codes_and_repeats_with_its_seed() {
    let d_tmp = dir();
    let d = d_tmp.path();
    let o = tts(d, "a", &["--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("20 frames (1.60 s of audio)") && err.contains("ended by the length cap"),
        "{err}"
    );
    let pcm = samples(&d.join("a.wav"));
    assert_eq!(pcm.len(), 20 * 1920);
    assert!(pcm.iter().any(|&s| s != 0), "silent output");
    // The codes through the host-side decoder: the same audio the frame program decoded.
    let back = d.join("back.wav");
    let o = chorus(&[
        "decode",
        "--model",
        "random",
        "--device",
        "cpu",
        "--codes",
        d.join("a.npy").to_str().unwrap(),
        "--out",
        back.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let host = samples(&back);
    assert_eq!(host.len(), pcm.len());
    let worst = pcm
        .iter()
        .zip(&host)
        .map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs())
        .max();
    assert!(
        worst <= Some(1),
        "in-frame and host decode differ by {worst:?} LSB"
    );
    // Same seed, same codes; another seed, other codes.
    assert!(tts(d, "b", &["--seed", "3"]).status.success());
    assert!(tts(d, "c", &["--seed", "4"]).status.success());
    let read = |n: &str| std::fs::read(d.join(format!("{n}.npy"))).unwrap();
    assert_eq!(read("a"), read("b"));
    assert_ne!(read("a"), read("c"));
}

#[test]
fn bad_inputs_are_named() {
    let d_tmp = dir();
    let d = d_tmp.path();
    let out = d.join("x.wav");
    let base = [
        "tts",
        "--model",
        "random-small",
        "--device",
        "cpu",
        "--out",
        out.to_str().unwrap(),
    ];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        stderr(&chorus(&a))
    };
    assert!(run(&[]).contains("give --text"));
    assert!(run(&["--text", "hi", "--sampling", "fancy"]).contains("unknown sampling mode `fancy`"));
    let e = run(&["--text", "hi", "--max-seconds", "200"]);
    assert!(e.contains("exceed the backbone's 256"), "{e}");
    // A recording's Mimi codes (0..2048) do not fit the small model's 11 classes: named, with
    // the frame and codebook.
    let codes = d.join("ctx.npy");
    let values: Vec<i64> = (0..8 * 3).map(|i| 100 + i).collect();
    std::fs::write(&codes, chorus_core::npy::write_npy_i64(&[8, 3], &values)).unwrap();
    let wav = d.join("ctx.wav");
    let o = chorus(&[
        "decode",
        "--model",
        "random",
        "--device",
        "cpu",
        "--codes",
        codes.to_str().unwrap(),
        "--out",
        wav.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = run(&[
        "--text",
        "hi",
        "--context",
        wav.to_str().unwrap(),
        "--context-text",
        "hello",
    ]);
    assert!(
        e.contains("context segment 0, audio frame 0") && e.contains("outside [0, 11)"),
        "{e}"
    );
    assert!(!out.exists(), "no output after an error");
}
