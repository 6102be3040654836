#!/usr/bin/env bash
# Chorus's CPU Mimi encoder next to Kyutai's `moshi` 0.6.4 crate (candle 0.9.2) Mimi encoder, on
# this machine: same weights, streaming one 80 ms frame (1920 samples) per call, f32, n_q 8, the
# same thread count for both.
#
#   scripts/bench_moshi_encoder.sh          # from anywhere; paths are relative to the repo root
#
# Steps:
#  1. weights: Chorus's seeded random Mimi (weightgen, decoder + encoder) in Kyutai's original
#     layout, plus the 32 `_codebook._initialized` flags (= 1.0) that moshi reads and the
#     generator does not draw (tools/moshi-bench/make_weights.py). Written once to $WORK.
#  2. builds, release, at nice 19: `chorus` (workspace) and tools/moshi-bench (its own workspace
#     and target dir; `-C target-cpu=native` as bench/peer-moshi does, MOSHI_RUSTFLAGS overrides).
#  3. exactness (untimed): moshi's streaming codes and latents, and `chorus encode`'s codes, for
#     the fixture speech (140 frames) against the transformers oracle of the same Kyutai-layout
#     draw (tests/fixtures/encoder/enc_kyutai_speech.*).
#  4. timing per batch size: `chorus bench --encode --threads T` (130 warm-up steps, its own
#     tones + noise signal) and `moshi-bench --threads T` (RAYON_NUM_THREADS=T too; same 130
#     warm-up steps, then the fixture speech cycled), each for BENCH_SECONDS.
#
# Environment: THREADS (default: nproc), BATCHES (default "1"; e.g. "1,8"), N_Q (8),
# BENCH_SECONDS (8), WARMUP (130, moshi side; chorus bench's is fixed at 130), WORK
# (target/moshi-bench-work), PYTHON (python3; a venv with numpy + safetensors is made in $WORK
# when it lacks them), BOOST=1 (root, Linux: each timed run in its own session whose scheduler
# autogroup is at nice -20, so other sessions' builds disturb it less), SKIP_BUILD=1.
#
# Each timed run also prints `background_cores`: the average number of cores busy with OTHER
# processes while it ran (from /proc/stat minus the run's own CPU time); only runs with this near
# 0 describe the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

THREADS=${THREADS:-$(nproc)}
BATCHES=${BATCHES:-1}
N_Q=${N_Q:-8}
BENCH_SECONDS=${BENCH_SECONDS:-8}
WARMUP=${WARMUP:-130}
WORK=${WORK:-target/moshi-bench-work}
PYTHON=${PYTHON:-python3}
MOSHI_RUSTFLAGS=${MOSHI_RUSTFLAGS:--C target-cpu=native}
FX=tests/fixtures/encoder
AUDIO=$FX/enc_kyutai_speech.audio.npy
ORACLE_CODES=$FX/enc_kyutai_speech.codes.npy
ORACLE_LATENT=$FX/enc_kyutai_speech.latent.npy
WEIGHTS=$WORK/mimi_kyutai_random.safetensors
CHORUS=./target/release/chorus
MOSHI=./tools/moshi-bench/target/release/moshi-bench
mkdir -p "$WORK"

log() { echo "# $*" >&2; }

# ---- 1. weights
if ! "$PYTHON" -c 'import numpy, safetensors' 2>/dev/null; then
  if [[ ! -x $WORK/venv/bin/python ]]; then
    log "making $WORK/venv (numpy, safetensors)"
    "$PYTHON" -m venv "$WORK/venv"
    "$WORK/venv/bin/pip" install -q numpy safetensors
  fi
  PYTHON=$WORK/venv/bin/python
fi
if [[ ! -s $WEIGHTS ]]; then
  "$PYTHON" tools/moshi-bench/make_weights.py "$WEIGHTS.tmp" >&2
  mv "$WEIGHTS.tmp" "$WEIGHTS"
fi
log "weights: $WEIGHTS"

# ---- 2. builds
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  t0=$(date +%s)
  nice -n 19 cargo build --release -p chorus >&2
  t1=$(date +%s)
  (cd tools/moshi-bench && RUSTFLAGS="$MOSHI_RUSTFLAGS" nice -n 19 cargo build --release --locked >&2)
  t2=$(date +%s)
  log "build seconds: chorus $((t1 - t0)), moshi-bench $((t2 - t1)) (RUSTFLAGS=\"$MOSHI_RUSTFLAGS\")"
fi
[[ -x $CHORUS && -x $MOSHI ]] || { echo "missing $CHORUS or $MOSHI" >&2; exit 1; }

# ---- 3. exactness (untimed)
echo "== exactness: $AUDIO (140 frames), n_q $N_Q, vs transformers oracle $ORACLE_CODES"
RAYON_NUM_THREADS=$THREADS "$MOSHI" --model "$WEIGHTS" --audio "$AUDIO" --n-q "$N_Q" \
  --threads "$THREADS" --warmup 0 --seconds 0 --codes-out "$WORK/moshi_codes.npy" \
  --reference "$ORACLE_CODES" --latent-ref "$ORACLE_LATENT" |
  sed -n 's/^  agreement/MOSHI  codes agreement/p; s/^  total/MOSHI  codes total/p; s/^  streaming latent/MOSHI  streaming latent/p'
if "$CHORUS" encode --help >/dev/null 2>&1; then
  # A float32 WAV of the same samples (chorus encode reads audio files, not .npy).
  "$PYTHON" - "$AUDIO" "$WORK/speech_f32.wav" <<'EOF'
import struct, sys
import numpy as np
a = np.load(sys.argv[1]).astype("<f4").ravel()
d = a.tobytes()
fmt = struct.pack("<HHIIHHH", 3, 1, 24000, 24000 * 4, 4, 32, 0)
body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"fact" + struct.pack("<II", 4, len(a)) + b"data" + struct.pack("<I", len(d)) + d
open(sys.argv[2], "wb").write(b"RIFF" + struct.pack("<I", len(body)) + body)
EOF
  "$CHORUS" encode --model "$WEIGHTS" --audio "$WORK/speech_f32.wav" --out "$WORK/chorus_codes.npy" \
    --n-q "$N_Q" --device cpu 2>/dev/null >&2
  "$PYTHON" - "$WORK/chorus_codes.npy" "$WORK/moshi_codes.npy" "$ORACLE_CODES" "$N_Q" <<'EOF'
import sys
import numpy as np
c, m, r = (np.load(p) for p in sys.argv[1:4])
q = int(sys.argv[4])
t = min(c.shape[1], m.shape[1], r.shape[1])
c, m, r = c[:q, :t].astype(np.int64), m[:q, :t].astype(np.int64), r[:q, :t].astype(np.int64)
lv = lambda a, b: " ".join(f"L{i} {int((a[i] == b[i]).sum())}/{t}" for i in range(q))
print(f"CHORUS codes agreement with oracle over {t} frames, per level: {lv(c, r)}")
print(f"CHORUS codes total {int((c == r).sum())}/{c.size}")
print(f"MOSHI-vs-CHORUS codes per level: {lv(m, c)}")
bad = np.argwhere(m != r)
if len(bad):
    print(f"MOSHI  differing (level, frame): {[tuple(map(int, x)) for x in bad[:16]]}")
EOF
else
  echo "CHORUS codes: skipped (this chorus binary has no 'encode' subcommand)"
fi

# ---- 4. timing
boost() {
  if [[ "${BOOST:-0}" == 1 ]]; then
    setsid -w bash -c 'echo -20 > /proc/self/autogroup && exec nice -n -20 "$0" "$@"' "$@"
  else
    "$@"
  fi
}
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
HZ=$(getconf CLK_TCK)
# run_timed LABEL CMD...: runs CMD, saves stdout in $WORK/out.txt, prints the background cores.
run_timed() {
  local b0 b1 t0 t1 own
  b0=$(busy_jiffies); t0=$(date +%s.%N)
  local tf=$WORK/times.txt
  { TIMEFORMAT='%U %S'; time boost "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"; } 2>"$tf"
  t1=$(date +%s.%N); b1=$(busy_jiffies)
  own=$(awk '{print $1+$2}' "$tf" | tail -1)
  awk -v b0="$b0" -v b1="$b1" -v hz="$HZ" -v t0="$t0" -v t1="$t1" -v own="$own" \
    'BEGIN { w = t1 - t0; bg = ((b1 - b0) / hz - own) / w; if (bg < 0) bg = 0;
             printf "own_cores %.2f background_cores %.2f", own / w, bg }'
}

echo "== timing: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, threads $THREADS, n_q $N_Q, f32, ${BENCH_SECONDS}s per run, commit $(git rev-parse --short HEAD)$( [[ -n $(git status --porcelain -uno) ]] && echo '+dirty')"
for B in ${BATCHES//,/ }; do
  bg=$(run_timed "$CHORUS" bench --encode --model "$WEIGHTS" --device cpu --batch "$B" --n-q "$N_Q" \
    --threads "$THREADS" --seconds "$BENCH_SECONDS" --json)
  "$PYTHON" - "$WORK/out.txt" "$bg" <<'EOF'
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
print(f"CHORUS encoder  batch {r['batch']} n_q {r['n_q']} [{r['device']}]: {r['frames_per_s']:.2f} frames/s, "
      f"ms/step median {r['ms_per_step_median']:.3f} p90 {r['ms_per_step_p90']:.3f}, "
      f"ms/frame {r['ms_per_step_median'] / r['batch']:.3f}, steps {r['steps']}, {sys.argv[2]}")
EOF
  bg=$(run_timed env RAYON_NUM_THREADS="$THREADS" "$MOSHI" --model "$WEIGHTS" --audio "$AUDIO" \
    --n-q "$N_Q" --batch "$B" --threads "$THREADS" --warmup "$WARMUP" --seconds "$BENCH_SECONDS" --json)
  "$PYTHON" - "$WORK/out.txt" "$bg" <<'EOF'
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
print(f"MOSHI  encoder  batch {r['batch']} n_q {r['n_q']} [{r['impl']} candle cpu f32, {r['threads']} threads]: "
      f"{r['frames_per_s']:.2f} frames/s, ms/step median {r['ms_per_step_median']:.3f} p90 {r['ms_per_step_p90']:.3f}, "
      f"ms/frame {r['ms_per_step_median'] / r['batch']:.3f}, steps {r['steps']}, {sys.argv[2]}")
EOF
done
