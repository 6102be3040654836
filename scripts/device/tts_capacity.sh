#!/usr/bin/env bash
# TTS streams through the server on the GPU machine: `chorus serve` with the CSM stage on CUDA
# (random weights of csm-1b and Mimi, TTS_UTTERANCES seats), then `chorus loadgen --input text`
# at each of TTS_STREAMS concurrent speakers (each asking for one utterance after another) for
# TTS_SECONDS, printing the gaps between frames (p99 under 80 ms is real time), time to first
# audio and frames/s. TTS_PREFILL_CHUNK sets the stage's prefill chunk (0: whole prompts).
# Expects .device-bin/chorus.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
PORT=${TTS_PORT:-8093}
"$BIN"/chorus serve --port "$PORT" --model random --device cuda --tts-model random --tts-mimi random \
  --tts-device cuda --tts-utterances "${TTS_UTTERANCES:-256}" ${TTS_PREFILL_CHUNK:+--tts-prefill-chunk "$TTS_PREFILL_CHUNK"} \
  > /tmp/tts_serve.log 2>&1 &
server=$!
for _ in $(seq 1 240); do
  grep -q "listening" /tmp/tts_serve.log 2>/dev/null && break
  kill -0 $server 2>/dev/null || break
  sleep 1
done
head -20 /tmp/tts_serve.log
for n in ${TTS_STREAMS:-64 128 256}; do
  echo "=================== loadgen --input text --streams $n ==================="
  "$BIN"/chorus loadgen --url "ws://127.0.0.1:$PORT" --input text --streams "$n" \
    --duration "${TTS_SECONDS:-20}" --frames "${TTS_FRAMES:-100}" 2>&1 || status=1
done
kill $server 2>/dev/null; wait $server 2>/dev/null
exit $status
