#!/usr/bin/env bash
# Everything committed but not yet run on a GPU, most important first, in one call of at most
# ten minutes: each part runs under its own time limit (cut to what is left of PENDING_BUDGET
# seconds, default 570), writes its whole log to $OUT/NAME.log and prints the lines that carry
# results. Binaries from scripts/device/build_bins.sh (packed in .device-pack/). Parts:
#   codec      the codec attention over query spans: ops, decoder, encoder_chunk;
#   ops        the `ops` test binary's cases matching OPS_FILTER (default: all);
#   lm_attn    every paged-attention test (the tensor-core and plain decodes, 8-bit caches and
#              their writes, prefill, windows, the draw's per-row sampling, the fused combine, the
#              rotation with the KV write); the STT stage's CUDA tests (8-bit rings among them);
#   fusions    scripts/device/fusions_ab.sh (bulk-copy GEMV with the norm and epilogues in the
#              product, fused combine, rotation with the KV write: tests, then the A/B);
#   whole      scripts/device/codec_whole_file.sh in bf16;
#   retest     the two test cases fixed after their first run (bulk-copy fused products, the fused
#              combine with groups of 8);
#   stt_tests  the STT stage's CUDA tests (the 8-bit rings among them);
#   stt_side   scripts/device/stt_side_by_side.sh (the LM step, Chorus and transformers);
#   stt_1b     scripts/device/stt_capacity.sh, stt-1b-en_fr at 1,300 streams, bf16 rings;
#   stt_fp8    the same at 2,500 streams over 8-bit rings (STT_FP8_STREAMS);
#   stt_fp8_plain the 1B's LM step over 8-bit rings, plain decode against tensor cores;
#   stt_2b6    stt-2.6b-en at 850 streams (STT_2B6_STREAMS);
#   stt_enc    `chorus stt-bench` with Mimi's encoder in the step over 8-bit rings at STT_ENC_STREAMS
#              (default 1024,1536,2500) past a fill of STT_ENC_FILL (250: a 20 s server run's);
#   attn_ab    scripts/device/attention_ab.sh (a decode attention change: its tests, then
#              music-bench and stt-bench before and after it, then ncu on the 8-bit decode);
#   music_tests the music stage's CUDA tests but the full-size ones;
#   stt_ab     `chorus stt-bench`'s LM step over 8-bit rings (STT_AB_STREAMS, default 2,500) with
#              the binary before a change (chorus_base), after it (chorus) and a build variant
#              (chorus_s2, when packed: two 8-bit decode stages, three blocks per SM), or AB_BINS;
#   music_ab   `chorus music-bench` over 8-bit caches at MUSIC_AB_SONGS (default 64,128) with the
#              same binaries, one process each (making the random weights takes ~100 s), model
#              MUSIC_AB_MODEL (default random; random-int8 for the int8 products; several,
#              space-separated, in turn), once under each setting of AB_ENVS (as GEMM_ENVS, for
#              stt_ab too; several variables of one setting comma-separated);
#   tts_ab     `chorus tts-bench` (CSM, the Mimi decode in the frame) at TTS_AB_UTTERANCES
#              (default 1,8), context 200, with the same binaries and settings as music_ab;
#   q8         the int8 products' tests: lm_q8 and lm_skinny (parity, invariance, bandwidth by row
#              count);
#   gemm       the int8 GEMM: the parity cases of each test binary in GEMM_BINS (default
#              lm_skinny; variants of the kernel built as lm_skinny_<name>), then its 128- and
#              256-row products (stream-K) for lm_skinny_base (the binary before the change, when
#              packed) and each of GEMM_BINS, then Nsight Compute's sections for one launch of
#              each of a layer's four products at 128 rows and of the sum kernel after each, for
#              GEMM_NCU (default the last of GEMM_BINS; gemm-ncu.txt); the products and the
#              profile once under each setting of GEMM_ENVS (e.g. "CHORUS_Q8_GEMM_WGMMA=0
#              CHORUS_Q8_GEMM_WGMMA=1"; default none), the profile under GEMM_NCU_ENV;
#   skinny     the skinny kernel's persistent grid (CudaOptions::skinny_persistent), the int8
#              input rotation inside it (q8_fused_rotation) and the L2 prefetch: their bits
#              against the paths without them and the CPU, the other skinny parity cases, then the
#              products by row count once under each setting of SKINNY_ENVS (default
#              "CHORUS_SKINNY_PERSISTENT=0 CHORUS_SKINNY_PERSISTENT=1");
#   prefetch   the L2 prefetch ahead of each product (CudaOptions::l2_prefetch_bytes): its
#              bits against none and the CPU, then the products by row count under each setting
#              of PREFETCH_ENVS (default "CHORUS_L2_PREFETCH_MB=0 CHORUS_L2_PREFETCH_MB=4
#              CHORUS_L2_PREFETCH_MB=12");
#   skinny_ncu Nsight Compute's sections for a layer's four int8 skinny products at one row under
#              each setting of SKINNY_ENVS (skinny-ncu-N.txt);
#   profile    scripts/device/music_profile.sh (a frame and a prefill op by op; PROFILE_MODELS,
#              PROFILE_SONGS, PROFILE_KV);
#   ncu_attn   scripts/device/ncu_attention.sh (Nsight Compute's sections for one 8-bit decode
#              attention launch in that step, both binaries);
#   stages     scripts/device/lm_stages_check.sh without STT and TTS (the int8 norm + rotation
#              A/B among them); not in the default list.
# PENDING_PARTS picks some of them (default: stt_fp8, to run with STT_RAMP_MS=2000: 2,500 STT
# streams through the server connecting at once, then over 2 s, each with the admission-to-first-
# step latency; the misses left are at each stream's first three frames).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
OUT=${OUT:-/tmp/pending}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${PENDING_BUDGET:-570}
# Lines of a log worth printing: results, failures, figures.
KEEP='^=====|test result|panick|FAILED|did not|ms/frame|songs|utterances|GB/s|rel L2|gemv |identical|parity|streams|real time|x real|exit status|Error|error:|^ +[0-9]|PASS|FAIL|largest|transformers|out of memory|Traceback|missed by|ncu|Duration|Throughput|Occupancy|Stall|stall|Warp Cycles|Eligible|Issued|Hit|Registers|Waves|Ipc|==PROF==|==ERROR=='
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
  "$BIN"/lm_attention --test-threads=1 --nocapture 2>&1
  # STT's windowed heads of 128 take the tensor-core decode, its rings 8-bit in some cases.
  "$BIN"/stt_cuda --test-threads=1 --nocapture 2>&1
}
# The parts that are functions run in a child shell under `timeout`.
export BIN
export GEMM_BINS=${GEMM_BINS:-lm_skinny}
export GEMM_NCU=${GEMM_NCU:-${GEMM_BINS##* }}
q8() {
  "$BIN"/lm_q8 --test-threads=1 --nocapture 2>&1
  "$BIN"/lm_skinny --test-threads=1 --nocapture 2>&1
}
gemm() {
  # Parity of every packed GEMM variant at once (the CPU reference dominates), then speed in turn.
  local v
  for v in $GEMM_BINS; do
    [ -x "$BIN/$v" ] || continue
    ("$BIN/$v" --test-threads=1 --nocapture int8_gemm fused_products_match 2>&1 \
      | sed "s/^/[$v] /" > "$OUT/gemm-parity-$v.log") &
  done
  wait
  # Every case's rel L2 stays in the logs; the printed part is the verdicts and the worst case.
  local f
  for f in "$OUT"/gemm-parity-*.log; do
    grep -v '\] parity' "$f"
    grep -o 'rel L2 [0-9.e-]*' "$f" | sort -g -k3 | tail -1 | sed "s|^|worst of $(basename "$f"): |"
  done
  for v in lm_skinny_base $GEMM_BINS; do
    [ -x "$BIN/$v" ] || continue
    for e in ${GEMM_ENVS:-NO_SETTING=}; do
      echo "== $v $e"
      env "$e" "$BIN/$v" --test-threads=1 --nocapture skinny_products_bandwidth 2>&1 \
        | grep -E 'n=(128|256) \(default\)|test result'
    done
  done
  env ${GEMM_NCU_ENV:-NO_SETTING=} ncu --clock-control none --kernel-name regex:'lm_q8_(gemm|wgmma)' --launch-count 8 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
    --section ComputeWorkloadAnalysis -f -o "$OUT/gemm-ncu" \
    "$BIN/$GEMM_NCU" --test-threads=1 --nocapture skinny_products_bandwidth > "$OUT/gemm-ncu.log" 2>&1
  echo "ncu exit $? ($GEMM_NCU)"
  ncu -i "$OUT/gemm-ncu.ncu-rep" > "$OUT/gemm-ncu.txt" 2>&1
  grep -E 'Duration|Throughput|Registers|Stall|Issued|Eligible|Occupancy|Waves|Grid Size|Pipe|lm_q8_' "$OUT/gemm-ncu.txt" | head -240
}
export SKINNY_ENVS=${SKINNY_ENVS:-CHORUS_SKINNY_PERSISTENT=0 CHORUS_SKINNY_PERSISTENT=1}
skinny() {
  "$BIN"/lm_skinny --test-threads=1 --nocapture persistent a_rows_bits fused_products_match int8_rotation \
    l2_prefetch 2>&1 \
    > "$OUT/skinny-parity.log"
  grep -v '^parity' "$OUT/skinny-parity.log"
  grep -o 'rel L2 [0-9.e-]*' "$OUT/skinny-parity.log" | sort -g -k3 | tail -1 | sed 's/^/worst: /'
  bandwidth_under "$SKINNY_ENVS"
}
# bandwidth_under "SETTINGS": the products by row count once under each setting.
bandwidth_under() {
  local e
  for e in $1; do
    echo "== $e"
    env ${e//,/ } "$BIN"/lm_skinny --test-threads=1 --nocapture skinny_products_bandwidth 2>&1 \
      | grep -E '\((skinny kernel|default|ops apart)\)|test result'
  done
}
export PREFETCH_ENVS=${PREFETCH_ENVS:-CHORUS_L2_PREFETCH_MB=0 CHORUS_L2_PREFETCH_MB=4 CHORUS_L2_PREFETCH_MB=12}
prefetch() {
  "$BIN"/lm_skinny --test-threads=1 --nocapture l2_prefetch 2>&1 | grep -v '^parity'
  bandwidth_under "$PREFETCH_ENVS"
}
skinny_ncu() {
  local e i=0
  for e in $SKINNY_ENVS; do
    i=$((i + 1))
    echo "== $e"
    env "$e" ncu --clock-control none --kernel-name regex:'lm_skinny_q8' --launch-count 4 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      -f -o "$OUT/skinny-ncu-$i" "$BIN"/lm_skinny --test-threads=1 --nocapture skinny_products_bandwidth \
      > "$OUT/skinny-ncu-$i.log" 2>&1
    echo "ncu exit $?"
    ncu -i "$OUT/skinny-ncu-$i.ncu-rep" > "$OUT/skinny-ncu-$i.txt" 2>&1
    grep -E 'lm_skinny_q8|Duration|DRAM Throughput|Memory Throughput|Grid Size|Achieved Occupancy|Waves' \
      "$OUT/skinny-ncu-$i.txt" | head -40
  done
}
retest() {
  "$BIN"/lm_skinny --test-threads=1 --nocapture bulk_copy 2>&1
  "$BIN"/lm_attention --test-threads=1 --nocapture combine 2>&1
}
# The LM step over 8-bit rings on the plain and the tensor-core decode (STT's groups of 1).
stt_fp8_plain() {
  for mma in 0 1; do
    echo "== CHORUS_LM_ATTENTION_MMA=$mma"
    CHORUS_LM_ATTENTION_MMA=$mma "$BIN"/chorus stt-bench --device cuda --steps 10 --model random \
      --kv-cache fp8 --streams ${STT_FP8_BENCH:-2000,2500} 2>&1
  done
}
# each_bin "BINS" ARGS...: `chorus ARGS` with each packed binary of BINS in turn.
each_bin() {
  local bins=$1
  shift
  for b in $bins; do
    [ -x "$BIN/$b" ] || continue
    for e in ${AB_ENVS:-NO_SETTING=}; do
      echo "== $b $e"
      env ${e//,/ } "$BIN/$b" "$@" 2>&1 | grep -v '^warning'
    done
  done
}
stt_ab() {
  each_bin "${AB_BINS:-chorus_base chorus chorus_s2}" stt-bench --device cuda --steps 10 --model random \
    --kv-cache fp8 --streams ${STT_AB_STREAMS:-2500}
}
stt_enc() {
  "$BIN"/chorus stt-bench --device cuda --model random --mimi random --kv-cache fp8 --steps 10 \
    --fill ${STT_ENC_FILL:-250} --streams ${STT_ENC_STREAMS:-1024,1536,2500} 2>&1 | grep -v '^warning'
}
music_ab() {
  local model
  for model in ${MUSIC_AB_MODEL:-random}; do
    each_bin "${AB_BINS:-chorus_base chorus}" music-bench --device cuda --model $model --kv-cache fp8 \
      --songs ${MUSIC_AB_SONGS:-64,128} --context 1000 --frames 10
  done
}
tts_ab() {
  each_bin "${AB_BINS:-chorus_base chorus}" tts-bench --device cuda --model random \
    --utterances ${TTS_AB_UTTERANCES:-1,8} --context 200 --frames 10
}
export -f codec lm_attn q8 gemm skinny bandwidth_under prefetch skinny_ncu tts_ab retest stt_fp8_plain each_bin stt_ab stt_enc music_ab
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export OPS_FILTER=${OPS_FILTER-reset}
for p in ${PENDING_PARTS:-stt_fp8}; do
  case $p in
    codec) part codec 90 bash -c codec ;;
    ops) part ops 90 "$BIN"/ops --test-threads=1 --nocapture ${OPS_FILTER:-} ;;
    lm_attn) part lm_attn 150 bash -c lm_attn ;;
    fusions) part fusions 300 bash scripts/device/fusions_ab.sh ;;
    stages) part stages 150 env SKIP_STT=1 SKIP_TTS=1 bash scripts/device/lm_stages_check.sh ;;
    whole) part whole 80 env WHOLE_PRECISIONS=bf16 bash scripts/device/codec_whole_file.sh ;;
    retest) part retest 90 bash -c retest ;;
    q8) part q8 200 bash -c q8 ;;
    gemm) part gemm ${GEMM_LIMIT:-240} bash -c gemm ;;
    skinny) part skinny ${SKINNY_LIMIT:-200} bash -c skinny ;;
    prefetch) part prefetch 150 bash -c prefetch ;;
    skinny_ncu) part skinny_ncu 150 bash -c skinny_ncu ;;
    stt_tests) part stt_tests 120 "$BIN"/stt_cuda --test-threads=1 --nocapture ${STT_TESTS_FILTER:-} ;;
    stt_side) part stt_side 200 bash scripts/device/stt_side_by_side.sh ;;
    stt_1b) part stt_1b 80 env STT_STREAMS=${STT_1B_STREAMS:-1300} bash scripts/device/stt_capacity.sh ;;
    stt_fp8) part stt_fp8 420 env STT_STREAMS="${STT_FP8_STREAMS:-2500}" STT_KV_CACHE=fp8 STT_OUT="$OUT/stt_capacity" bash scripts/device/stt_capacity.sh ;;
    attn_ab) part attn_ab 330 bash scripts/device/attention_ab.sh ;;
    music_tests) part music_tests 200 "$BIN"/music_cuda --test-threads=1 --skip full_size ;;
    stt_fp8_plain) part stt_fp8_plain 120 bash -c stt_fp8_plain ;;
    stt_ab) part stt_ab 120 bash -c stt_ab ;;
    music_ab) part music_ab ${MUSIC_AB_LIMIT:-240} bash -c music_ab ;;
    tts_ab) part tts_ab 150 bash -c tts_ab ;;
    stt_enc) part stt_enc 150 bash -c stt_enc ;;
    profile) part profile ${PROFILE_LIMIT:-200} bash scripts/device/music_profile.sh ;;
    ncu_attn) part ncu_attn 330 bash scripts/device/ncu_attention.sh ;;
    stt_2b6) part stt_2b6 80 env STT_STREAMS="${STT_2B6_STREAMS:-850}" STT_MODEL=random-2.6b bash scripts/device/stt_capacity.sh ;;
    *) echo "unknown part $p" && status=1 ;;
  esac
done
section "pending exit status: $status"
exit $status
