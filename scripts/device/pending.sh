#!/usr/bin/env bash
# Everything committed but not yet run on a GPU, most important first, in one call of at most
# ten minutes: each part runs under its own time limit (cut to what is left of PENDING_BUDGET
# seconds, default 570), writes its whole log to $OUT/NAME.log and prints the lines that carry
# results. Binaries from scripts/device/build_bins.sh (packed in .device-pack/). Parts:
#   codec      the codec attention over query spans: ops, decoder, encoder_chunk;
#   lm_attn    the tensor-core decode (groups of 8), the plain kernel in bf16, windows, the draw's
#              per-row sampling, the fused combine, the rotation with the KV write; the STT
#              stage's CUDA tests (its windowed heads on the tensor-core decode);
#   fusions    scripts/device/fusions_ab.sh (bulk-copy GEMV with the norm and epilogues in the
#              product, fused combine, rotation with the KV write: tests, then the A/B);
#   whole      scripts/device/codec_whole_file.sh in bf16;
#   stt        scripts/device/stt_capacity.sh at 512 streams;
#   stages     scripts/device/lm_stages_check.sh without STT and TTS (the int8 norm + rotation
#              A/B among them); not in the default list.
# PENDING_PARTS picks some of them (default: codec lm_attn fusions whole stt, in this order).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
OUT=${OUT:-/tmp/pending}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${PENDING_BUDGET:-570}
# Lines of a log worth printing: results, failures, figures.
KEEP='test result|panick|FAILED|did not|ms/frame|songs|utterances|GB/s|rel L2|gemv |identical|parity|streams|real time|x real|exit status|Error|error:'
# part NAME SECONDS CMD...: CMD under min(SECONDS, the time left), its log in $OUT/NAME.log.
part() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 20 ]; then
    echo "== $name: not run (${left}s left)"
    status=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  section "$name (limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  grep -aE "$KEEP" "$OUT/$name.log" | grep -v "^test .* ok$" | tail -60
  echo "-- $name: rc $rc, $(($(date +%s) - START))s since the start"
  [ "$rc" -ne 0 ] && status=1
}
codec() {
  for t in ops decoder encoder_chunk; do
    echo "== $t"
    "$BIN/$t" --test-threads=1 --nocapture 2>&1
  done
}
lm_attn() {
  for t in mma decode window draw combine rope_kv; do
    "$BIN"/lm_attention --test-threads=1 --nocapture $t 2>&1
  done
  # STT's windowed heads of 128 now take the tensor-core decode by default.
  "$BIN"/stt_cuda --test-threads=1 --nocapture 2>&1
}
# The parts that are functions run in a child shell under `timeout`.
export BIN
export -f codec lm_attn
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for p in ${PENDING_PARTS:-codec lm_attn fusions whole stt}; do
  case $p in
    codec) part codec 90 bash -c codec ;;
    lm_attn) part lm_attn 150 bash -c lm_attn ;;
    fusions) part fusions 300 bash scripts/device/fusions_ab.sh ;;
    stages) part stages 150 env SKIP_STT=1 SKIP_TTS=1 bash scripts/device/lm_stages_check.sh ;;
    whole) part whole 80 env WHOLE_PRECISIONS=bf16 bash scripts/device/codec_whole_file.sh ;;
    stt) part stt 70 env STT_STREAMS=512 bash scripts/device/stt_capacity.sh ;;
    *) echo "unknown part $p" && status=1 ;;
  esac
done
section "pending exit status: $status"
exit $status
