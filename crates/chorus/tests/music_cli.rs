//! `chorus music` end to end on the reduced model: a song file with the shapes and dtypes the
//! acoustic stage reads, the same file again for the same seed, and clear errors for bad input.

use chorus_core::checkpoint::SafetensorsFile;
use chorus_core::npy::write_npy_i64;
use std::process::{Command, Output};

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("chorus-music-cli-")
        .tempdir()
        .unwrap()
}

/// A `[P]` prompt of ids: the upstream frame of special tokens around random base-vocabulary ids.
fn prompt_file(d: &std::path::Path) -> String {
    let mut ids: Vec<i64> = vec![151_644, 151_671];
    ids.extend((0..20).map(|i| (i * 7919 % 151_643) as i64));
    ids.extend([151_674, 151_645, 151_669]);
    let p = d.join("prompt.npy");
    std::fs::write(&p, write_npy_i64(&[ids.len()], &ids)).unwrap();
    p.to_str().unwrap().to_string()
}

fn music(prompt: &str, out: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "music",
        "--model",
        "random-small",
        "--prompt-ids",
        prompt,
        "--out",
        out,
        "--threads",
        "2",
    ];
    args.extend_from_slice(extra);
    chorus(&args)
}

#[test]
fn writes_codes_and_frame_hiddens_and_repeats_for_the_same_seed() {
    let d_tmp = dir();
    let d = d_tmp.path();
    let prompt = prompt_file(d);
    let (a, b) = (d.join("a.safetensors"), d.join("b.safetensors"));
    for out in [&a, &b] {
        let o = music(
            &prompt,
            out.to_str().unwrap(),
            &["--seconds", "1", "--seed", "3", "--no-end"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let f = SafetensorsFile::open(&a).unwrap();
    let (shape, codes) = f.load_i32("codes").unwrap();
    assert_eq!(shape, vec![25, 8], "1 s = 25 frames of 8 codes");
    assert!(codes
        .chunks(8)
        .all(|c| (0..16_384).contains(&c[0]) && c[1..].iter().all(|&x| (0..1024).contains(&x))));
    assert_eq!(f.dtype_name("frame_hiddens"), Some("BF16"));
    let h = f.load_rows("frame_hiddens", None).unwrap();
    assert_eq!(h.shape, vec![25, 8 * 256]);
    assert!(h.data.iter().all(|x| x.is_finite()) && h.data.iter().any(|&x| x != 0.0));
    assert_eq!(
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        "same seed, same song"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let d_tmp = dir();
    let d = d_tmp.path();
    let prompt = prompt_file(d);
    let out = d.join("x.safetensors");
    let out = out.to_str().unwrap();
    let o = music(&prompt, out, &["--seconds", "0.5"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("outside 1..=360"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = music(&prompt, out, &["--seconds", "1", "--sampling", "topp"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown sampling mode `topp`"));
    let o = chorus(&[
        "music",
        "--model",
        "random-small",
        "--seconds",
        "1",
        "--out",
        out,
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--prompt-ids"));
    let bad = d.join("bad.npy");
    std::fs::write(
        &bad,
        write_npy_i64(&[4], &[151_644, 250_000, 151_645, 151_669]),
    )
    .unwrap();
    let o = music(bad.to_str().unwrap(), out, &["--seconds", "1"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("250000"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
