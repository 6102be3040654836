#!/usr/bin/env bash
# Soak: `chorus serve --model random` with decode, encode and music (`--music-model random-small`)
# on the CPU under a steady load mix for DURATION seconds, sampling the server every 10 s (RSS,
# open files, threads from /proc; live streams, free slots, active songs, KV blocks from /metrics).
# Fails on a crash, a lost or inexact frame on a verified stream (`chorus loadgen --strict`), a
# song whose codes differ from the same request's first run, growth past warm-up, or slots, songs
# or KV blocks not returned once the load stops.
# Usage: scripts/soak.sh DURATION   (CI runs `scripts/soak.sh 120`)
# CHORUS (default target/release/chorus) names the binary; PORT (default 8093) the port; OUT
# (default a temporary directory) keeps samples.csv, the loadgen reports and the server log.
set -uo pipefail
duration=${1:?usage: scripts/soak.sh DURATION}
bin=${CHORUS:-target/release/chorus}
port=${PORT:-8093}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
# Sampling period, warm-up share of the run, and how far each figure may grow past warm-up.
period=10
warmup=$((duration / 4 > 20 ? duration / 4 : 20))
rss_growth_pct=${RSS_GROWTH_PCT:-25}
fd_slack=${FD_SLACK:-16}
thread_slack=${THREAD_SLACK:-4}
max_streams=8 encode_streams=2 songs=2

"$bin" serve --model random --device cpu --threads 2 --max-streams "$max_streams" \
  --encode-streams "$encode_streams" --music-model random-small --music-songs "$songs" \
  --music-context 256 --port "$port" --max-connections-per-client 0 >"$out/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
url="http://127.0.0.1:$port"
for _ in $(seq 600); do
  curl -sf "$url/healthz" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "FAIL: the server died at start"; cat "$out/serve.log"; exit 1; }
  sleep 0.5
done

metric() { # metric TEXT NAME: the sum of every sample of NAME
  awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { print s + 0 }' <<<"$1"
}
sample() { # one CSV row: seconds, rss_kb, fds, threads, live, free, songs, kv_in_use
  local m status
  m=$(curl -sf "$url/metrics") || return 1
  status=/proc/$server/status
  printf '%s,%s,%s,%s,%s,%s,%s,%s\n' "$SECONDS" \
    "$(awk '/^VmRSS/ {print $2}' "$status")" "$(ls /proc/$server/fd | wc -l)" \
    "$(awk '/^Threads/ {print $2}' "$status")" "$(metric "$m" chorus_live_streams)" \
    "$(metric "$m" chorus_free_slots)" "$(metric "$m" chorus_music_active_songs)" \
    "$(metric "$m" chorus_music_kv_blocks_in_use)"
}

fail=0
note() { echo "FAIL: $*"; fail=1; }
song='{"prompt_ids":[1,2,3,4,5,6,7,8],"seconds":1,"max_frames":12,"seed":5,"sampling":"seeded","allow_end":false}'
first_song=""
SECONDS=0
echo "seconds,rss_kb,fds,threads,live_streams,free_slots,active_songs,kv_blocks_in_use" >"$out/samples.csv"
# Every 10 s, under load or between rounds alike.
(while kill -0 $server 2>/dev/null; do
  sample >>"$out/samples.csv"
  sleep "$period"
done) &
sampler=$!
trap 'kill $sampler 2>/dev/null; kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
round=0
while ((SECONDS < duration)); do
  round=$((round + 1))
  # One round: verified decode streams, encode streams and two songs at once, about 10 s.
  "$bin" loadgen --url "ws://127.0.0.1:$port" --streams 4 --duration 8 --n-q 8 --seed "$round" \
    --strict --json >"$out/decode.$round.json" 2>"$out/decode.$round.err" &
  dec=$!
  "$bin" loadgen --url "ws://127.0.0.1:$port" --input pcm --streams 2 --duration 8 --seed "$round" \
    --strict --json >"$out/encode.$round.json" 2>"$out/encode.$round.err" &
  enc=$!
  for s in 1 2; do
    codes=$(curl -sf -X POST "$url/v1/music?format=json" -d "$song" | jq -c .codes) ||
      note "round $round: song $s failed"
    [[ -z $first_song ]] && first_song=$codes
    [[ $codes == "$first_song" ]] || note "round $round: song $s differs from the first run"
  done
  wait $dec || note "round $round: decode loadgen failed ($(tail -c 300 "$out/decode.$round.err"))"
  wait $enc || note "round $round: encode loadgen failed ($(tail -c 300 "$out/encode.$round.err"))"
  kill -0 $server 2>/dev/null || { note "the server crashed"; break; }
  ((fail)) && break
done
kill $sampler 2>/dev/null
wait $sampler 2>/dev/null

# Idle: every slot, song and block must come back.
sleep 3
idle=$(sample) || note "no /metrics after the load"
echo "$idle" >>"$out/samples.csv"
IFS=, read -r _ _ _ _ live free active kv <<<"$idle"
((live == 0)) || note "$live streams still live after the load"
((free == max_streams)) || note "$free of $max_streams slots free after the load"
((active == 0)) || note "$active songs still active after the load"
((kv == 0)) || note "$kv KV blocks still in use after the load"

# Growth past warm-up: the largest figure after warm-up against the largest during it.
awk -F, -v w="$warmup" -v r="$rss_growth_pct" -v f="$fd_slack" -v t="$thread_slack" '
  NR == 1 { next }
  $1 <= w { if ($2 > wr) wr = $2; if ($3 > wf) wf = $3; if ($4 > wt) wt = $4; next }
  { if ($2 > ar) ar = $2; if ($3 > af) af = $3; if ($4 > at) at = $4; n++ }
  END {
    if (n == 0) { print "FAIL: no sample after the warm-up of " w " s"; exit 1 }
    printf "warm-up peak: rss %d kB, %d fds, %d threads; after: rss %d kB (%+.1f%%), %d fds, %d threads\n",
      wr, wf, wt, ar, 100 * (ar - wr) / wr, af, at
    bad = 0
    if (ar > wr * (1 + r / 100)) { print "FAIL: RSS grew past " r "% after warm-up"; bad = 1 }
    if (af > wf + f) { print "FAIL: open files grew past warm-up"; bad = 1 }
    if (at > wt + t) { print "FAIL: threads grew past warm-up"; bad = 1 }
    exit bad
  }' "$out/samples.csv" || fail=1

verified=$(cat "$out"/decode.*.json 2>/dev/null | jq -s '[.[].verify.frames_checked // 0] | add')
mismatched=$(cat "$out"/decode.*.json 2>/dev/null | jq -s '[.[].verify.frames_mismatched // 0] | add')
encoded=$(cat "$out"/encode.*.json 2>/dev/null | jq -s '[.[].frames_received // 0] | add')
((mismatched == 0)) || note "$mismatched verified frames differ from a whole-file decode"
echo "rounds: $round; decode frames verified: $verified ($mismatched differ); encode frames: $encoded; songs: $((2 * round))"
column -s, -t <"$out/samples.csv"
if ((fail)); then
  echo "soak FAILED after ${SECONDS}s (logs in $out)"
  exit 1
fi
echo "soak passed: ${SECONDS}s"
