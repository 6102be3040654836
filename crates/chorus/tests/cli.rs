//! The `chorus` binary end to end: decode to every output format, info, and every bad input
//! giving a clear error and a non-zero exit (never a panic).

use chorus_core::npy::{write_npy_f32, write_npy_i64};
use std::path::Path;
use std::process::{Command, Output};

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-cli-{name}-"))
        .tempdir()
        .unwrap()
}

fn codes_file(d: &Path, name: &str, shape: &[usize], f: impl Fn(usize) -> i64) -> String {
    let n: usize = shape.iter().product();
    let values: Vec<i64> = (0..n).map(f).collect();
    let p = d.join(name);
    std::fs::write(&p, write_npy_i64(shape, &values)).unwrap();
    p.to_str().unwrap().to_string()
}

fn decode(codes: &str, out: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "decode", "--model", "random", "--device", "cpu", "--codes", codes, "--out", out,
    ];
    args.extend_from_slice(extra);
    chorus(&args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn decodes_to_wav_float_wav_and_npy() {
    let d_tmp = dir("ok");
    let d = d_tmp.path();
    let codes = codes_file(d, "c.npy", &[8, 3], |i| (i * 37 % 2048) as i64);
    let wav = d.join("a.wav");
    let o = decode(&codes, wav.to_str().unwrap(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("noise"),
        "random weights must say their output is noise"
    );
    let r = hound::WavReader::open(&wav).unwrap();
    assert_eq!(
        (r.spec().sample_rate, r.spec().bits_per_sample, r.len()),
        (24_000, 16, 3 * 1920)
    );
    let fwav = d.join("f.wav");
    assert!(decode(&codes, fwav.to_str().unwrap(), &["--float"])
        .status
        .success());
    let r = hound::WavReader::open(&fwav).unwrap();
    assert_eq!(r.spec().sample_format, hound::SampleFormat::Float);
    let floats: Vec<f32> = r.into_samples().map(|s| s.unwrap()).collect();
    assert!(floats.iter().any(|v| v.abs() > 1e-4) && floats.iter().all(|v| v.is_finite()));
    let npy = d.join("p.npy");
    assert!(decode(&codes, npy.to_str().unwrap(), &[]).status.success());
    let a = chorus_core::npy::read_npy(&std::fs::read(&npy).unwrap(), "p").unwrap();
    assert_eq!(a.shape, vec![1, 3 * 1920]);
    assert_eq!(
        a.data,
        chorus_core::npy::NpyData::Float(floats),
        "npy equals the float WAV"
    );
}

#[test]
fn a_batch_writes_one_wav_per_stream() {
    let d_tmp = dir("batch");
    let d = d_tmp.path();
    let codes = codes_file(d, "b.npy", &[2, 4, 2], |i| (i * 101 % 2048) as i64);
    let o = decode(&codes, d.join("s.wav").to_str().unwrap(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    for i in 0..2 {
        let r = hound::WavReader::open(d.join(format!("s-{i}.wav"))).unwrap();
        assert_eq!(r.len(), 2 * 1920);
    }
}

#[test]
fn bad_codes_files_fail_cleanly() {
    let d_tmp = dir("bad");
    let d = d_tmp.path();
    let out = d.join("o.wav");
    let out = out.to_str().unwrap();
    let range = codes_file(d, "r.npy", &[2, 3], |i| if i == 4 { 2048 } else { 1 });
    let neg = codes_file(d, "n.npy", &[1, 2], |i| -(i as i64));
    let rank = codes_file(d, "k.npy", &[6], |_| 0);
    let many = codes_file(d, "m.npy", &[33, 1], |_| 0);
    let float = d.join("f.npy");
    std::fs::write(&float, write_npy_f32(&[2, 2], &[0.0; 4])).unwrap();
    let full = write_npy_i64(&[8, 4], &[1; 32]);
    let truncated = d.join("t.npy");
    std::fs::write(&truncated, &full[..full.len() - 9]).unwrap();
    let garbage = d.join("g.npy");
    std::fs::write(&garbage, b"definitely not numpy").unwrap();
    let cases = [
        (range.as_str(), "code 2048 at stream 0, frame 1, codebook 1"),
        (neg.as_str(), "code -1"),
        (rank.as_str(), "rank"),
        (many.as_str(), "n_q = 33"),
        (float.to_str().unwrap(), "integer"),
        (truncated.to_str().unwrap(), "truncated"),
        (garbage.to_str().unwrap(), "bad magic"),
        ("/nonexistent/codes.npy", "reading codes file"),
    ];
    for (file, needle) in cases {
        let o = decode(file, out, &[]);
        let e = stderr(&o);
        assert!(!o.status.success(), "{file} should fail");
        assert!(e.contains(needle), "{file}: expected `{needle}` in: {e}");
        assert!(!e.contains("panicked"), "{file} panicked: {e}");
    }
}

#[test]
fn info_prints_configuration_parameters_and_state() {
    let o = chorus(&["info", "--model", "random", "--device", "cpu"]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    for needle in [
        "layout:       Random",
        "parameters:",
        "8 layers",
        "state/slot:",
        "kv 8388608",
    ] {
        assert!(s.contains(needle), "expected `{needle}` in:\n{s}");
    }
}

#[test]
fn a_missing_model_is_a_clear_error() {
    let o = chorus(&[
        "info",
        "--model",
        "/nonexistent/model.safetensors",
        "--device",
        "cpu",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("/nonexistent/model.safetensors"),
        "{}",
        stderr(&o)
    );
}

/// A user's mistake prints its message and no stack trace, also with `RUST_BACKTRACE=1` in the
/// shell; `-v` adds the trace.
#[test]
fn errors_print_no_backtrace_unless_verbose() {
    let run = |extra: &[&str]| {
        let mut args = vec!["info", "--model", "/nonexistent/model.safetensors"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_chorus"))
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .output()
            .expect("run chorus")
    };
    let o = run(&[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.starts_with("error: "), "{e}");
    assert!(e.contains("/nonexistent/model.safetensors"), "{e}");
    assert!(!e.to_lowercase().contains("backtrace"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    let v = stderr(&run(&["-v"]));
    assert!(v.lines().count() > 1, "-v adds the trace: {v}");
}
