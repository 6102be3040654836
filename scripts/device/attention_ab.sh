#!/usr/bin/env bash
# A change to the decode attention on the GPU machine, in one call: its tests (lm_attention's
# mma, fp8, decode and window cases), then the same benchmarks with the binary before it
# ($BIN/chorus_base, when packed) and after it ($BIN/chorus): `chorus music-bench` over 8-bit and
# bf16 caches (AB_SONGS, default 1,64,128, context 1,000; AB_CONTEXTS adds a `--contexts` sweep)
# and `chorus stt-bench`'s LM step (the 1B over 8-bit rings at AB_STT_FP8, default 2,500 streams;
# bf16 rings at AB_STT_BF16, 1,300; 0 skips them). AB_KV picks the music caches (default "fp8
# bf16"); then Nsight Compute on the 8-bit decode (AB_NCU=0 skips it). AB_BINS lists other
# binaries to compare.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "lm_attention (mma, decode, window)"
for t in mma fp8 decode window; do
  "$BIN"/lm_attention --test-threads=1 --nocapture $t 2>&1 | grep -E "^test |test result|panick|rel L2" || status=1
done
bins=${AB_BINS:-chorus}
[ -z "${AB_BINS:-}" ] && [ -x "$BIN/chorus_base" ] && bins="chorus_base chorus"
for kv in ${AB_KV:-fp8 bf16}; do
  for b in $bins; do
    section "$b music-bench --kv-cache $kv"
    "$BIN/$b" music-bench --device cuda --model random --kv-cache $kv --songs ${AB_SONGS:-1,64,128} \
      --context 1000 ${AB_CONTEXTS:+--contexts $AB_CONTEXTS} --frames 10 2>&1 | grep -v '^warning' || status=1
  done
done
for b in $bins; do
  section "$b stt-bench, 8-bit rings"
  "$BIN/$b" stt-bench --device cuda --steps 10 --model random --kv-cache fp8 --streams ${AB_STT_FP8:-2500} 2>&1 \
    | grep -v '^warning' || status=1
  [ "${AB_STT_BF16:-1300}" = 0 ] && continue
  section "$b stt-bench, bf16 rings"
  "$BIN/$b" stt-bench --device cuda --steps 10 --model random --streams ${AB_STT_BF16:-1300} 2>&1 \
    | grep -v '^warning' || status=1
done
# Nsight Compute on the 8-bit decode at 128 songs, before and after (AB_NCU=0 skips it).
if [ "${AB_NCU:-1}" = 1 ]; then
  for b in $bins; do
    section "$b: ncu, lm_paged_attention_mma8 at 128 songs"
    CHORUS_BIN="$BIN/$b" KERNELS=lm_paged_attention_mma8 SONGS=128 EXTRA="--kv-cache fp8" SKIP=40 COUNT=4 \
      bash scripts/device/ncu_music.sh 2>&1 | tail -6
  done
fi
section "attention A/B exit status: $status"
exit $status
