#!/usr/bin/env bash
# Builds (on the development machine) the release binaries that scripts/gpu_check.sh runs on the
# device machine, strips them, and copies them with the seed design into .device-bin/.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=.device-bin
mkdir -p "$BIN"
msgs=$(cargo test -p chorus-cuda --release --no-run --message-format=json 2>/dev/null)
for t in nvrtc_compile ops res_block decoder oracle encoder encoder_chunk lm_rows lm_attention lm_gemv lm_q8 lm_skinny; do
  exe=$(echo "$msgs" | python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m['target']['name'] == '$t' and m.get('executable'):
        print(m['executable'])
" | tail -1)
  [ -n "$exe" ] && cp "$exe" "$BIN/$t" && strip "$BIN/$t"
done
# The music stage's CUDA test lives in chorus-music (it reuses the oracle fixtures' helpers).
exe=$(cargo test -p chorus-music --release --test cuda --no-run --message-format=json 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m['target']['name'] == 'cuda' and m.get('executable'):
        print(m['executable'])
" | tail -1)
[ -n "$exe" ] && cp "$exe" "$BIN/music_cuda" && strip "$BIN/music_cuda"
# The CSM stage's CUDA test (the oracle cases on the device).
exe=$(cargo test -p chorus-csm --release --test cuda --no-run --message-format=json 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m['target']['name'] == 'cuda' and m.get('executable'):
        print(m['executable'])
" | tail -1)
[ -n "$exe" ] && cp "$exe" "$BIN/csm_cuda" && strip "$BIN/csm_cuda"
# The STT stage's CUDA test (the oracle case and the full-size bf16 check on the device).
exe=$(cargo test -p chorus-stt --release --test cuda --no-run --message-format=json 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m['target']['name'] == 'cuda' and m.get('executable'):
        print(m['executable'])
" | tail -1)
[ -n "$exe" ] && cp "$exe" "$BIN/stt_cuda" && strip "$BIN/stt_cuda"
cargo build -p chorus-cuda --release --example replay_bench
cp target/release/examples/replay_bench "$BIN/" && strip "$BIN/replay_bench"
if cargo build -p chorus --release 2>/dev/null; then cp target/release/chorus "$BIN/" && strip "$BIN/chorus"; fi
[ -f ../shared/seeds/static_mimi_reference.py ] && cp ../shared/seeds/static_mimi_reference.py "$BIN/"
ls -la "$BIN"
du -sh "$BIN"
# The carry to the device is 64 MiB with the tree: the binaries travel xz-packed in .device-pack/
# (a quarter of their size); scripts/device/cuda_env.sh unpacks them there. PACK_BINS lists the
# ones to pack (default: all).
mkdir -p .device-pack
(cd "$BIN" && tar -cf - ${PACK_BINS:-*}) | xz -T2 -6 > .device-pack/bins.tar.xz
ls -la .device-pack
