#!/usr/bin/env bash
# On the device machine: the next product's weights asked of L2 from the end of each skinny
# product (CudaOptions::next_prefetch_bytes). Its bits against none and the CPU, then the skinny
# products by row count and `chorus music-bench` over int8 weights at 1 and 8 songs, once under
# each setting of NEXT_ENVS (several variables of one setting comma-separated). Binaries from
# scripts/device/build_bins.sh (chorus and lm_skinny are enough).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
NEXT_ENVS=${NEXT_ENVS:-NO_SETTING= CHORUS_NEXT_PREFETCH_MB=16 CHORUS_NEXT_PREFETCH_MB=32 CHORUS_NEXT_PREFETCH_MB=16,CHORUS_NEXT_PREFETCH_FIRST=1}
section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
section "parity: next_prefetch_changes_no_bits"
timeout 150 "$BIN"/lm_skinny --test-threads=1 --nocapture next_prefetch 2>&1 | grep -vE "^parity" | tail -8 || status=1
for e in $NEXT_ENVS; do
  section "skinny products by row count: $e"
  timeout 90 env ${e//,/ } "$BIN"/lm_skinny --test-threads=1 --nocapture skinny_products_bandwidth 2>&1 \
    | grep -E "int8 n=|bf16 n=.*skinny kernel|test result" || status=1
done
for e in $NEXT_ENVS; do
  section "music-bench int8, fp8 KV: $e"
  timeout 80 env ${e//,/ } "$BIN"/chorus music-bench --device cuda --model random-int8 --kv-cache fp8 \
    --songs 1,8 --context 1000 --frames 10 2>&1 | grep -vE "^warning" | tail -4 || status=1
done
section "next_prefetch_ab exit status: $status"
exit $status
