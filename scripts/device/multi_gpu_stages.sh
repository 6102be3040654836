#!/usr/bin/env bash
# Music songs and encode streams on one and then two GPUs of one host, through the real server:
# `chorus serve --devices 0` and then `--devices 0,1` (one music stage and one encoder per GPU,
# each new job placed on the GPU with the most free KV blocks or slots), printing each run's
# frames/s and the two-GPU figure over the one-GPU one (issue 25 asks >= 1.9 for each).
#
# Music: SONGS_PER_GPU songs per GPU (default 64) at once, each `POST /v1/music?format=json` of
# MUSIC_FRAMES frames (default 500, 20 s of music) with its own seed and END off, so every song
# runs its whole length; frames/s = every song's frames over the wall time from the first request
# to the last answer (prefill included). The server runs `--music-songs SONGS_PER_GPU` per GPU, so
# a one-GPU run of 2 x SONGS_PER_GPU would be refused as busy: each run sends exactly its GPUs'
# songs.
# Encode: ENCODE_PER_GPU streams per GPU (default 1024, one GPU's capacity; docs/PERFORMANCE.md,
# "H200: encoder") of `chorus loadgen --input pcm --rate max` for ENCODE_SECONDS of audio each;
# frames/s is the load generator's.
#
# Usage: scripts/device/multi_gpu_stages.sh [music|encode|both]
# CHORUS (default target/release/chorus) names the binary; MUSIC_MODEL (default random: the
# full-size architecture with random weights) the music model; MUSIC_CONTEXT (default 1024) the
# positions per song; PORT (default 8095); SERVE_ARGS extra `chorus serve` flags. Needs curl,
# python3 and two visible GPUs.
set -uo pipefail
what=${1:-both}
bin=${CHORUS:-target/release/chorus}
port=${PORT:-8095}
songs_per=${SONGS_PER_GPU:-64}
frames=${MUSIC_FRAMES:-500}
context=${MUSIC_CONTEXT:-1024}
encode_per=${ENCODE_PER_GPU:-1024}
encode_secs=${ENCODE_SECONDS:-20}
log=${SERVE_LOG:-/tmp/chorus-multi-gpu-stages.log}
work=$(mktemp -d)
server=
stop_server() {
  [[ -n $server ]] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
  server=
}
trap 'stop_server; rm -rf "$work"' EXIT

if ((frames + 64 > context)); then
  echo "# MUSIC_FRAMES $frames needs MUSIC_CONTEXT above $((frames + 64)) (prompt and END)" >&2
  exit 2
fi
visible=$(nvidia-smi -L 2>/dev/null | wc -l)
if ((visible < 2)); then
  echo "# this script needs two GPUs; nvidia-smi lists $visible" >&2
  exit 2
fi
nvidia-smi -L
git log -1 --format='# tree %h %s' 2>/dev/null || true

# Starts `chorus serve --devices $1` with the stage flags that follow, and waits until ready.
start_server() {
  local devices=$1
  shift
  # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags.
  "$bin" serve --model random --devices "$devices" --port "$port" --max-streams 64 \
    --max-connections-per-client 0 "$@" ${SERVE_ARGS:-} >"$log.$devices" 2>&1 &
  server=$!
  for ((t = 0; t < 900; t++)); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$server" 2>/dev/null || { echo "# the server exited:"; cat "$log.$devices"; exit 1; }
    sleep 1
  done
  echo "# the server did not come up in 900 s"
  cat "$log.$devices"
  exit 1
}

# Plays `n` songs at once; prints frames/s (and a line with the details) on the last line.
play_music() {
  local n=$1 i
  rm -f "$work"/song-*
  local t0 t1
  t0=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do
    local ids
    ids=$(python3 -c 'import sys; s=int(sys.argv[1]); print([151644] + [100 + (s * 31 + 7 * k) % 150000 for k in range(24)] + [151645, 151669])' "$i")
    curl -s -o "$work/song-$i.json" -w '%{http_code}\n' -X POST \
      "http://127.0.0.1:$port/v1/music?format=json" \
      -d "{\"prompt_ids\":$ids,\"seconds\":$(((frames + 24) / 25)),\"max_frames\":$frames,\"seed\":$i,\"allow_end\":false}" \
      >"$work/song-$i.status" &
  done
  wait
  t1=$(date +%s.%N)
  python3 - "$work" "$n" "$t0" "$t1" <<'PY'
import json, glob, sys, os
work, n, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
frames, bad = 0, []
for i in range(n):
    status = open(os.path.join(work, f"song-{i}.status")).read().strip()
    body = open(os.path.join(work, f"song-{i}.json")).read()
    if status != "200":
        bad.append(f"song {i}: HTTP {status} {body[:200]}")
        continue
    frames += json.loads(body)["frames"]
wall = t1 - t0
for b in bad[:5]:
    print("# " + b)
print(f"# music: {n} songs, {frames} frames in {wall:.2f} s, {len(bad)} failed")
print(f"{frames / wall:.1f}")
PY
}

# Plays `n` encode streams at full rate; prints frames/s on the last line.
play_encode() {
  local n=$1
  "$bin" loadgen --url "ws://127.0.0.1:$port" --input pcm --streams "$n" \
    --duration "$encode_secs" --rate max --n-q 8 --verify-streams 0 --wait-ready 600 --json \
    >"$work/encode.json" 2>"$work/encode.err" || { cat "$work/encode.err"; }
  python3 - "$work/encode.json" "$n" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"# encode: {sys.argv[2]} streams, {r['frames_received']} frames in {r['elapsed_s']:.2f} s, "
      f"errors {r['errors']}, p99 {r['latency_ms']['p99']:.1f} ms")
print(f"{r['frames_per_second']:.1f}")
PY
}

# Runs `kind` (music or encode) on one GPU and on two; prints both figures and the ratio.
measure() {
  local kind=$1 one two
  for devices in 0 0,1; do
    local gpus=$(( ${#devices} / 2 + 1 ))
    echo "# $(date -u +%FT%TZ) $kind on --devices $devices"
    if [[ $kind == music ]]; then
      start_server "$devices" --music-model "${MUSIC_MODEL:-random}" --music-songs "$songs_per" \
        --music-context "$context" --encode-streams 0
      # A first song per GPU warms the kernels and the graphs before the timed run.
      play_music "$gpus" >/dev/null
      play_music $((songs_per * gpus)) | tee "$work/out"
    else
      start_server "$devices" --encode-streams "$encode_per"
      play_encode "$encode_per" >/dev/null
      play_encode $((encode_per * gpus)) | tee "$work/out"
    fi
    local fps
    fps=$(tail -n 1 "$work/out")
    curl -s "http://127.0.0.1:$port/healthz" | python3 -c 'import json, sys
h = json.load(sys.stdin)
for k in ("music", "encoder"):
    if h.get(k):
        print("# " + k + " devices: " + json.dumps(h[k]["devices"]))'
    stop_server
    if [[ $devices == 0 ]]; then one=$fps; else two=$fps; fi
  done
  python3 -c 'import sys; a, b = float(sys.argv[2]), float(sys.argv[3])
print(f"{sys.argv[1]}: 1 GPU {a:.1f} frames/s, 2 GPUs {b:.1f} frames/s, ratio {b / a:.3f}")' \
    "$kind" "$one" "$two"
}

case $what in
  music) measure music ;;
  encode) measure encode ;;
  both) measure music; measure encode ;;
  *) echo "usage: $0 [music|encode|both]" >&2; exit 2 ;;
esac
