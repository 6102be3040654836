//! `chorus serve` as a person meets it: a user's mistake (missing model, hub offline, taken port,
//! bad key file, bad flag value) prints its message and the fix on one line and never a stack
//! trace; with keys every endpoint but /healthz needs one, and SIGHUP re-reads the key file.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn temp(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-serve-gate-{name}-"))
        .tempdir()
        .unwrap()
}

fn serve_output(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_chorus"));
    cmd.arg("serve").args(args).env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run chorus")
}

/// `serve ARGS` fails with `needles` in its one error line and no trace.
fn fails_with(args: &[&str], env: &[(&str, &str)], needles: &[&str]) {
    let o = serve_output(args, env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} started a server");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{args:?}: no error line in:\n{err}"));
    for n in needles {
        assert!(line.contains(n), "{args:?}: `{n}` not in: {line}");
    }
    for bad in ["panicked", "backtrace", "stack", "   0: "] {
        assert!(!err.contains(bad), "{args:?} printed a trace:\n{err}");
    }
}

#[test]
fn serve_mistakes_print_the_message_and_the_fix_without_a_trace() {
    let d_tmp = temp("mistakes");
    let d = d_tmp.path();
    fails_with(
        &["--model", "/nonexistent/mimi.safetensors", "--port", "0"],
        &[],
        &["/nonexistent/mimi.safetensors", "fix: check the path"],
    );
    let hf_home = d.join("hf");
    fails_with(
        &["--model", "someorg/not-cached", "--port", "0"],
        &[
            ("HF_HUB_OFFLINE", "1"),
            ("HF_HOME", hf_home.to_str().unwrap()),
        ],
        &[
            "someorg/not-cached",
            "HF_HUB_OFFLINE",
            "pass a local checkpoint",
        ],
    );
    fails_with(
        &[
            "--model",
            "fake",
            "--api-keys",
            "/nonexistent/keys",
            "--port",
            "0",
        ],
        &[],
        &["/nonexistent/keys", "fix: give --api-keys a readable file"],
    );
    let bad = d.join("bad-keys");
    std::fs::write(&bad, "# keys\ngood-key\nnot a key\n").unwrap();
    fails_with(
        &[
            "--model",
            "fake",
            "--api-keys",
            bad.to_str().unwrap(),
            "--port",
            "0",
        ],
        &[],
        &["line 3", "fix:"],
    );
    let empty = d.join("empty-keys");
    std::fs::write(&empty, "# none yet\n").unwrap();
    fails_with(
        &[
            "--model",
            "fake",
            "--api-keys",
            empty.to_str().unwrap(),
            "--port",
            "0",
        ],
        &[],
        &["holds no key", "fix:"],
    );
    fails_with(
        &["--model", "fake", "--port", "0"],
        &[("CHORUS_API_KEYS", " , ")],
        &["CHORUS_API_KEYS", "fix:"],
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    fails_with(
        &["--model", "fake", "--port", &port],
        &[],
        &[
            &format!("port {port}"),
            "fix: another process listens",
            "--port 0",
        ],
    );
    fails_with(
        &["--model", "fake", "--max-decode-body", "8MB"],
        &[],
        &["8MB", "not a byte count"],
    );
    fails_with(
        &["--model", "fake", "--header-timeout", "0"],
        &[],
        &["not a positive number of seconds"],
    );
    fails_with(
        &["--model", "fake", "--max-ws-message", "1K", "--port", "0"],
        &[],
        &["--max-pending-frames 32", "raise --max-ws-message"],
    );
}

/// A running `chorus serve --model fake`; SIGTERM and waited for when dropped.
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

fn serve(args: &[&str], stderr: &std::path::Path) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(["serve", "--model", "fake", "--port", "0"])
        .args(args)
        .env_remove("CHORUS_API_KEYS")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("start chorus serve");
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout)
        .lines()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("listening on http://"))
        .expect("the server printed its address");
    let addr = line
        .trim_start_matches("listening on http://")
        .trim()
        .to_string();
    Served { child, addr }
}

/// `GET path` with `auth` header lines; the status.
fn get(addr: &str, path: &str, auth: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: chorus\r\nconnection: close\r\n{auth}\r\n");
    tcp.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

fn wait_for(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn keys_guard_every_endpoint_but_healthz_and_sighup_reloads_them() {
    let d_tmp = temp("keys");
    let d = d_tmp.path();
    let keys = d.join("keys");
    std::fs::write(&keys, "# ops\nold-key\n").unwrap();
    let log = d.join("stderr");
    let served = serve(&["--api-keys", keys.to_str().unwrap()], &log);
    let addr = served.addr.clone();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("API keys: 1 in force"), "{text}");
    assert!(text.contains("limits: connections"), "{text}");
    assert_eq!(get(&addr, "/healthz", ""), 200);
    assert_eq!(get(&addr, "/metrics", ""), 401);
    assert_eq!(
        get(&addr, "/metrics", "authorization: Bearer old-key\r\n"),
        200
    );
    std::fs::write(&keys, "new-key\n").unwrap();
    let hup = || {
        Command::new("kill")
            .args(["-HUP", &served.child.id().to_string()])
            .status()
            .unwrap()
    };
    hup();
    wait_for("the new key", || {
        get(&addr, "/metrics", "kyutai-api-key: new-key\r\n") == 200
    });
    assert_eq!(get(&addr, "/metrics", "kyutai-api-key: old-key\r\n"), 401);
    // A broken file keeps the keys in force and says so.
    std::fs::write(&keys, "\n").unwrap();
    hup();
    wait_for("the reload warning", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("not reloaded")
    });
    assert_eq!(get(&addr, "/metrics?api_key=new-key", ""), 200);
    drop(served);
    let open_log = d.join("stderr-open");
    let open = serve(&[], &open_log);
    let text = std::fs::read_to_string(&open_log).unwrap();
    assert!(
        text.contains("no API keys: every client is served"),
        "{text}"
    );
    assert_eq!(get(&open.addr, "/metrics", ""), 200);
    drop(open);
}

/// `METHOD path` with a JSON body; the status line's code and the raw answer (headers and body).
fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let mut tcp = TcpStream::connect(addr).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: chorus\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).unwrap();
    let status = String::from_utf8_lossy(&answer[..12])
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (status, answer)
}

#[test]
fn tts_model_serves_v1_tts_and_its_metrics() {
    let d_tmp = temp("tts");
    let d = d_tmp.path();
    let log = d.join("stderr");
    let served = serve(
        &[
            "--tts-model",
            "random-small",
            "--tts-utterances",
            "1",
            "--threads",
            "1",
        ],
        &log,
    );
    let body = r#"{"text":"Hello.","max_frames":3,"seed":1}"#;
    let (status, answer) = request(&served.addr, "POST", "/v1/tts", body);
    let text = String::from_utf8_lossy(&answer).into_owned();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("x-chorus-frames: 3"), "{text}");
    let wav = answer
        .windows(4)
        .position(|w| w == b"RIFF")
        .expect("a WAV body");
    let reader = hound::WavReader::new(std::io::Cursor::new(&answer[wav..])).unwrap();
    assert_eq!(reader.len() as usize, 3 * 1920);
    let (status, answer) = request(&served.addr, "POST", "/v1/tts", r#"{"text":""}"#);
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&answer).contains("empty"));
    let (status, answer) = request(&served.addr, "GET", "/metrics", "");
    let text = String::from_utf8_lossy(&answer).into_owned();
    assert_eq!(status, 200);
    for line in ["chorus_tts_utterance_slots 1", "chorus_tts_frames_total 3"] {
        assert!(text.contains(line), "no `{line}` in {text}");
    }
    drop(served);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("tts: "), "{logged}");
}
