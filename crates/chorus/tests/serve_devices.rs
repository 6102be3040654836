//! `chorus serve` devices: `--devices` lists refused with the bad entry named, a one-device
//! server (a pool of one) reporting its device in `/healthz` and `/metrics`, and the stand-in
//! `--model fake` serving real-time streams that `chorus loadgen` checks frame by frame.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use chorus_server::loadgen::http_request;

/// How long the CPU server may take to load random weights and warm up.
const START_WAIT: Duration = Duration::from_secs(120);

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .output()
        .expect("run chorus")
}

fn serve_fails_naming(extra: &[&str], needles: &[&str]) {
    let mut args = vec!["serve", "--model", "random", "--port", "0"];
    args.extend_from_slice(extra);
    let o = chorus(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{extra:?} started a server");
    assert!(
        needles.iter().any(|n| err.contains(n)),
        "{extra:?}: expected one of {needles:?} in:\n{err}"
    );
}

#[test]
fn bad_device_lists_are_refused_naming_the_entry() {
    serve_fails_naming(&["--devices", "x"], &["`x` in `--devices x`"]);
    serve_fails_naming(&["--devices", "0,x"], &["`x` in `--devices 0,x`"]);
    serve_fails_naming(&["--devices", "0,0"], &["device 0 is given twice"]);
    serve_fails_naming(
        &["--device", "cpu", "--devices", "0"],
        &["drop --device cpu"],
    );
    // No host has this many devices: without CUDA it is "none visible", with it "not visible".
    serve_fails_naming(
        &["--devices", "4096"],
        &[
            "no CUDA device is visible",
            "device 4096 in `--devices` is not visible",
        ],
    );
}

#[test]
fn help_says_max_streams_is_per_device() {
    let o = chorus(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--devices"), "{help}");
    assert!(help.contains("per device"), "{help}");
}

/// A running `chorus serve` and its address; killed (SIGTERM, then waited for) when dropped.
struct Served {
    child: Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Starts `chorus serve ARGS --port 0` and waits for the address it prints.
fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chorus"))
        .arg("serve")
        .args(args)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chorus serve");
    let stdout = child.stdout.take().expect("piped stdout");
    let started = Instant::now();
    let mut addr = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("stdout line");
        if let Some(a) = line.strip_prefix("listening on http://") {
            addr = Some(a.trim().to_string());
            break;
        }
        assert!(started.elapsed() < START_WAIT, "server did not start");
    }
    let addr = addr.expect("the server printed its address");
    Served { child, addr }
}

#[test]
fn a_one_device_server_reports_device_0() {
    let served = serve(&[
        "--model",
        "random",
        "--device",
        "cpu",
        "--max-streams",
        "2",
        "--buckets",
        "1,2",
        "--threads",
        "1",
    ]);
    let addr = served.addr.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (health, metrics) = rt.block_on(async {
        let (status, health) = http_request(&addr, "GET", "/healthz", vec![])
            .await
            .unwrap();
        assert_eq!(status, 200);
        let (_, metrics) = http_request(&addr, "GET", "/metrics", vec![])
            .await
            .unwrap();
        (health, String::from_utf8(metrics).unwrap())
    });
    drop(served);
    let health: serde_json::Value = serde_json::from_slice(&health).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["max_streams"], 2);
    let devices = health["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{health}");
    assert_eq!(devices[0]["device"], 0);
    assert_eq!(devices[0]["state"], "ok");
    assert_eq!(devices[0]["free_slots"], 2);
    assert!(
        devices[0]["name"].as_str().unwrap().contains("cpu"),
        "{health}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "chorus_free_slots{device=\"0\"} 2"),
        "{metrics}"
    );
}

#[test]
fn a_fake_model_server_serves_loadgen_streams_exactly() {
    let served = serve(&[
        "--model",
        "fake",
        "--fake-step-ms",
        "2",
        "--max-streams",
        "16",
    ]);
    let url = format!("ws://{}", served.addr);
    let o = chorus(&[
        "loadgen",
        "--url",
        &url,
        "--streams",
        "12",
        "--duration",
        "1.6",
        "--strict",
        "--json",
    ]);
    assert!(
        o.status.success(),
        "loadgen failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 1.6 s of real time is 20 frames per stream, every one checked against a whole-file decode.
    assert_eq!(report["streams_completed"], 12, "{report}");
    assert_eq!(report["frames_received"], 12 * 20, "{report}");
    assert_eq!(report["verify"]["frames_checked"], 12 * 20, "{report}");
    assert_eq!(report["verify"]["bit_exact"], true, "{report}");
    assert_eq!(report["server"]["decoder"], "fake", "{report}");
    drop(served);
    // The step time belongs to the stand-in alone.
    let o = chorus(&[
        "serve",
        "--model",
        "random",
        "--fake-step-ms",
        "1",
        "--port",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--fake-step-ms is for `--model fake` only"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_stage_device_flag_beside_devices_is_refused() {
    for flag in ["--music-device", "--tts-device", "--stt-device"] {
        let o = chorus(&[
            "serve",
            "--model",
            "fake",
            "--devices",
            "0,1",
            flag,
            "cpu",
            "--port",
            "0",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "{flag} beside --devices started a server"
        );
        assert!(err.contains(&format!("{flag} and --devices")), "{err}");
    }
}

#[test]
fn with_devices_the_music_stage_runs_once_per_device() {
    let served = serve(&[
        "--model",
        "fake",
        "--devices",
        "0,1",
        "--music-model",
        "random-small",
        "--music-songs",
        "1",
        "--music-context",
        "128",
        "--threads",
        "1",
    ]);
    let addr = served.addr.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (health, song) = rt.block_on(async {
        let (_, health) = http_request(&addr, "GET", "/healthz", vec![])
            .await
            .unwrap();
        let body = br#"{"prompt_ids":[151644,100,107,114,151645,151669],"seconds":1,"max_frames":3,"seed":1,"allow_end":false}"#;
        let song = http_request(&addr, "POST", "/v1/music?format=json", body.to_vec())
            .await
            .unwrap();
        (health, song)
    });
    drop(served);
    let health: serde_json::Value = serde_json::from_slice(&health).unwrap();
    let devices = health["music"]["devices"].as_array().unwrap();
    let got: Vec<(u64, &str)> = devices
        .iter()
        .map(|d| (d["device"].as_u64().unwrap(), d["state"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [(0, "ok"), (1, "ok")], "{health}");
    assert_eq!(health["music"]["max_songs"], 2, "{health}");
    let (status, body) = song;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let song: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(song["frames"], 3, "{song}");
}
