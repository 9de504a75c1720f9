#!/usr/bin/env bash
# Fleet benchmark (not in CI): eight bookstores on this machine, one
# redis-server started here on a free loopback port, and the pricing service
# (`coretry faults`). Each scenario runs the same fleet twice: every
# bookstore with its own budget and gate ("local"), then all of them sharing
# one budget and one gate through Redis ("shared", --shared-state).
#
#   (1) budget bound: pricing always 503, budget on, gate off; REQUESTS
#       bookstore requests (default 400) spread evenly over the eight and sent
#       at once (one curl, --parallel). Pricing's calls are counted from its
#       log. The bound of one process serving them all: 1.1 x N + 20.
#   (2) probe rate: pricing always 503, gate on, budget off, wrk on every
#       bookstore for SECONDS; the retries the gates let through (probes,
#       from each bookstore's /metrics) per second once they are closed,
#       summed over the fleet, against one gate's (1 per 100 ms).
#   (3) Redis killed: pricing healthy, budget and gate on, wrk on every
#       bookstore for SECONDS; redis-server is killed (SIGKILL) a third of the
#       way in and started again (empty) at two thirds. Reports wrk's errors,
#       non-2xx answers and largest latency against the same run without
#       Redis, and how long after the restart every bookstore shared again.
#   (4) Redis commands per bookstore request at steady state (INFO
#       commandstats), during the first third of (3).
#
#   tests/bench/fleet.sh [BUILD_DIR] [SECONDS]
#
# FLEET=N runs N bookstores instead of eight. TLS=1 makes the redis-server
# TLS-only (--port 0, --tls-port, a CA and certificate made here with the
# openssl command) and the bookstores share through rediss:// with
# --shared-state-cacert.
#
# BUILD_DIR defaults to build/release (cmake --preset release && cmake --build
# --preset release --target coretry_cli coretry_bookstore_app). Needs
# redis-server, redis-cli, wrk and curl. Exits 1 when the shared fleet breaks
# the bound of (1).
set -euo pipefail

build=${1:-build/release}
seconds=${2:-10}
requests=${REQUESTS:-400}
fleet=${FLEET:-8}
tls=${TLS:-0}
coretry="$build/apps/cli/coretry"
bookstore="$build/apps/bookstore/coretry-bookstore"
for tool in "$coretry" "$bookstore"; do
  [[ -x $tool ]] || { echo "missing $tool: build the release preset first" >&2; exit 2; }
done
for tool in redis-server redis-cli wrk curl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 2; }
done

work=$(mktemp -d /tmp/coretry-fleet-XXXXXX)
pids=()
redis_pid=
cleanup() {
  for pid in "${pids[@]}" $redis_pid; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/servers.sh" # start, sample

# With TLS=1: a CA and a certificate for 127.0.0.1, made for this run.
redis_listen=()
cli_tls=()
scheme=redis
tls_options=()
if [[ $tls == 1 ]]; then
  command -v openssl >/dev/null || { echo "openssl is missing" >&2; exit 2; }
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=fleet-ca \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout "$work/redis.key" -out "$work/redis.csr" 2>/dev/null
  openssl x509 -req -in "$work/redis.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 1 \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1\n') -out "$work/redis.pem" 2>/dev/null
  cli_tls=(--tls --cacert "$work/ca.pem")
  scheme=rediss
  tls_options=(--shared-state-cacert "$work/ca.pem")
fi
rcli() { redis-cli -p "$redis_port" "${cli_tls[@]}" "$@"; }

# redis-server on a free loopback port (no persistence; with TLS=1 TLS-only);
# sets $redis_port.
start_redis() {
  local port=${1:-}
  for _ in $(seq 20); do
    [[ -n $port ]] || port=$((20000 + RANDOM % 40000))
    if [[ $tls == 1 ]]; then
      redis_listen=(--port 0 --tls-port "$port" --tls-cert-file "$work/redis.pem" --tls-key-file "$work/redis.key"
                    --tls-ca-cert-file "$work/ca.pem" --tls-auth-clients no)
    else
      redis_listen=(--port "$port")
    fi
    redis-server "${redis_listen[@]}" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 100); do
      if redis-cli -p "$port" "${cli_tls[@]}" ping 2>/dev/null | grep -q PONG; then redis_port=$port; return 0; fi
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.02
    done
    kill -KILL "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    [[ -n ${1:-} ]] && break
    port=
  done
  echo "redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1
}

# Starts the fleet: $1 local|shared, then bookstore options. Sets books[].
books=()
book_pids=()
start_fleet() {
  local mode=$1; shift
  local shared=()
  [[ $mode == shared ]] && shared=(--shared-state "$scheme://127.0.0.1:$redis_port" "${tls_options[@]}"
                                   --shared-state-prefix "bench-$RANDOM$RANDOM")
  books=()
  book_pids=()
  for i in $(seq 0 $((fleet - 1))); do
    start "$work/book$i.out" "$bookstore" --listen 127.0.0.1:0 --threads 1 "${shared[@]}" "$@"
    books+=("$url")
    book_pids+=("$pid")
  done
  if [[ $mode == shared ]]; then wait_shared 10 >/dev/null || { echo "the fleet never shared" >&2; exit 1; }; fi
}
stop_fleet() {
  for pid in "${book_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${book_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
# Waits until every bookstore says it shares; prints the seconds it took.
wait_shared() {
  local limit=$1 begin now
  begin=$(date +%s.%N)
  while :; do
    local all=1
    for b in "${books[@]}"; do
      curl -s "$b/metrics" >"$work/m.txt"
      [[ $(sample "$work/m.txt" coretry_shared_state_up) == 1 ]] || { all=0; break; }
    done
    now=$(date +%s.%N)
    if (( all )); then awk -v a="$begin" -v b="$now" 'BEGIN { printf "%.2f\n", b - a }'; return 0; fi
    awk -v a="$begin" -v b="$now" -v l="$limit" 'BEGIN { exit !(b - a > l) }' && return 1
    sleep 0.02
  done
}
# Sum of one sample over the fleet's /metrics.
fleet_sum() {
  local total=0 v
  for b in "${books[@]}"; do
    curl -s "$b/metrics" >"$work/m.txt"
    v=$(sample "$work/m.txt" "$1")
    total=$(awk -v t="$total" -v v="$v" 'BEGIN { printf "%.0f", t + v }')
  done
  echo "$total"
}
pricing_calls() {
  curl -s "$pricing/_log" >"$work/log.json"
  local logged dropped
  logged=$(grep -o '"method":' "$work/log.json" | wc -l)
  dropped=$(grep -o '"dropped":[0-9]*' "$work/log.json" | cut -d: -f2)
  echo $((logged + ${dropped:-0}))
}

start_redis
start "$work/pricing.out" "$coretry" faults --listen 127.0.0.1:0 --log-limit 100000
pricing=$url
verdict=0
gate='dependency="pricing"'

echo "fleet: $fleet bookstores (1 thread each), one redis-server$([[ $tls == 1 ]] && echo " (TLS only, rediss://)"), pricing = coretry faults; $(date -u +%F)"

echo
echo "(1) budget bound: pricing 100% 503, budget on, gate off, $requests requests at once over $fleet bookstores"
echo
echo "| state | bookstore requests (N) | pricing requests | per request | bound 1.1 x N + 20 | answered |"
echo "|---|---|---|---|---|---|"
bound=$(awk -v n="$requests" 'BEGIN { printf "%.0f", 1.1 * n + 20 }')
for mode in local shared; do
  start_fleet "$mode" --pricing "$pricing/status/503" --budget on --gate off
  # Sharing has begun: the leases are full; the bucket starts full (20).
  curl -s "$pricing/_reset" >/dev/null
  urls=()
  for i in $(seq 0 $((requests - 1))); do urls+=(-o /dev/null "${books[i % fleet]}/books/$i"); done
  # curl runs at most 300 transfers at once: two of them, half each.
  half=$((requests / 2 * 3)) # three words per request: -o /dev/null URL
  curl -s --parallel --parallel-immediate --parallel-max 300 -w "%{http_code}\n" "${urls[@]:0:half}" \
    >"$work/codes1.txt" 2>/dev/null &
  first=$!
  curl -s --parallel --parallel-immediate --parallel-max 300 -w "%{http_code}\n" "${urls[@]:half}" \
    >"$work/codes2.txt" 2>/dev/null || true
  wait "$first" || true
  cat "$work/codes1.txt" "$work/codes2.txt" >"$work/codes.txt"
  answered=$(grep -c -E '^[1-5][0-9][0-9]$' "$work/codes.txt" || true)
  calls=$(pricing_calls)
  stop_fleet
  per=$(awk -v c="$calls" -v n="$requests" 'BEGIN { printf "%.3f", c / n }')
  echo "| $mode | $requests | $calls | $per | $bound | $answered |"
  if [[ $mode == shared ]] && (( calls > bound )); then verdict=1; fi
done

echo
echo "(2) probe rate: pricing 100% 503, gate on, budget off, wrk -t1 -c4 on each bookstore for ${seconds} s"
echo
echo "| state | probes while closed | seconds | fleet probes per second | one gate's |"
echo "|---|---|---|---|---|"
for mode in local shared; do
  start_fleet "$mode" --pricing "$pricing/status/503" --budget off --gate on
  wrk_pids=()
  for b in "${books[@]}"; do
    wrk -t1 -c4 -d"${seconds}s" "$b/books/1" >/dev/null 2>&1 &
    wrk_pids+=($!)
  done
  # The gates close within the first second or two; count from a third in.
  settle=$(awk -v s="$seconds" 'BEGIN { printf "%.1f", s / 3 }')
  sleep "$settle"
  before=$(fleet_sum "coretry_gate_answers_total{$gate,answer=\"probe\"}")
  t0=$(date +%s.%N)
  sleep "$(awk -v s="$seconds" 'BEGIN { printf "%.1f", s / 2 }')"
  after=$(fleet_sum "coretry_gate_answers_total{$gate,answer=\"probe\"}")
  t1=$(date +%s.%N)
  for p in "${wrk_pids[@]}"; do wait "$p" || true; done
  stop_fleet
  awk -v a="$before" -v b="$after" -v t0="$t0" -v t1="$t1" -v m="$mode" \
    'BEGIN { d = t1 - t0; printf "| %s | %d | %.1f | %.1f | 10 |\n", m, b - a, d, (b - a) / d }'
done

echo
echo "(3) Redis killed: pricing healthy, budget and gate on, wrk -t1 -c4 on each bookstore for ${seconds} s;"
echo "    shared: redis-server SIGKILLed at ${seconds}/3 s, started again (empty) at 2 x ${seconds}/3 s"
echo
echo "| state | requests | socket errors | non-2xx | largest latency | shared again after restart | Redis commands per request (before the kill) |"
echo "|---|---|---|---|---|---|---|"
for mode in local shared; do
  start_fleet "$mode" --pricing "$pricing/status/200" --budget on --gate on
  wrk_pids=()
  for i in "${!books[@]}"; do
    wrk -t1 -c4 -d"${seconds}s" --latency "${books[i]}/books/1" >"$work/wrk$i.txt" 2>&1 &
    wrk_pids+=($!)
  done
  third=$(awk -v s="$seconds" 'BEGIN { printf "%.2f", s / 3 }')
  resumed="-"
  per_request="-"
  if [[ $mode == shared ]]; then
    # Steady state: from 1 s in (the leases are full) to the kill.
    sleep 1
    rcli config resetstat >/dev/null
    served0=$(fleet_sum "coretry_operations_total{route=\"/books/{id}\"}")
    sleep "$(awk -v t="$third" 'BEGIN { printf "%.2f", t - 1 }')"
    served1=$(fleet_sum "coretry_operations_total{route=\"/books/{id}\"}")
    commands=$(rcli info commandstats | awk -F'[=,:]' '/^cmdstat_/ && !/cmdstat_(info|config)/ { s += $3 } END { print s + 0 }')
    per_request=$(awk -v c="$commands" -v n="$((served1 - served0))" 'BEGIN { printf "%.4f (%d / %d)", n ? c / n : 0, c, n }')
    kill -KILL "$redis_pid"
    wait "$redis_pid" 2>/dev/null || true
    sleep "$third"
    start_redis "$redis_port"
    resumed=$(wait_shared 10 || echo "not within 10")
    resumed="$resumed s"
  fi
  for p in "${wrk_pids[@]}"; do wait "$p" || true; done
  stop_fleet
  total=0 errors=0 non2xx=0 worst=0
  for i in "${!books[@]}"; do
    f="$work/wrk$i.txt"
    n=$(awk '/requests in/ { print $1 }' "$f")
    total=$((total + ${n:-0}))
    e=$(awk '/Socket errors/ { gsub(",", ""); s = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; print s }' "$f")
    errors=$((errors + ${e:-0}))
    x=$(awk '/Non-2xx/ { print $NF }' "$f")
    non2xx=$((non2xx + ${x:-0}))
    m=$(awk '$1 == "Latency" && NF >= 4 { print $4 }' "$f")
    worst=$(awk -v w="$worst" -v m="$m" 'BEGIN {
      v = m + 0; if (m ~ /us$/) v /= 1000; else if (m ~ /ms$/) v += 0; else if (m ~ /s$/) v *= 1000;
      print (v > w ? v : w) }')
  done
  echo "| $mode | $total | $errors | $non2xx | ${worst} ms | $resumed | $per_request |"
done

echo
if (( verdict )); then
  echo "FAIL: (1) the shared fleet sent pricing more than 1.1 x N + 20"
else
  echo "PASS: (1) the shared fleet stayed within 1.1 x N + 20"
fi
exit $verdict
