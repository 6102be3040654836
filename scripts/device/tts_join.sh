#!/usr/bin/env bash
# Chunked prefill of the CSM stage on the GPU machine, in one call: the CSM CUDA tests (chunked
# equals whole prefill among them), `chorus tts-bench --join` timing the running utterances'
# frames while an utterance of a 128-frame prompt joins 1, 64 and 254 of them (chunked, and the
# gap of a whole prefill), then the server at 64 and 256 concurrent streams with chunked and with
# whole prefill (p99 gap between frames under 80 ms is real time). Expects .device-bin/ from
# scripts/device/build_bins.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
export RUST_BACKTRACE=1
section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
section "csm_cuda"
"$BIN"/csm_cuda --test-threads=1 --nocapture 2>&1 | grep -v '^$' || status=1
section "join: bf16, context 200, a 128-frame utterance joining 1, 64 and 254 running"
"$BIN"/chorus tts-bench --device cuda --model random --utterances ${JOIN_POINTS:-1,64,256} --context 200 \
  --frames 10 --join ${JOIN_RUNNING:-1,64,254} --join-prompt 128 2>&1 || status=1
for chunk in 64 0; do
  section "server, prefill chunk $chunk"
  TTS_STREAMS="${TTS_STREAMS:-64 256}" TTS_PREFILL_CHUNK=$chunk bash scripts/device/tts_capacity.sh || status=1
done
section "exit status: $status"
exit $status
