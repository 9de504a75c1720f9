#!/usr/bin/env bash
# Hedging through the bookstore (not in CI; needs python3 and curl): for each
# row a fresh pricing and a fresh bookstore (default policy), 8 keep-alive
# clients sending REQUESTS_PER_CLIENT requests each (tests/bench/tail_load.py).
# Prints, per row: the requests, their status codes, p50, p99 and p99.9,
# pricing calls per request, and the hedges the bookstore sent and refused.
#
#   tests/bench/hedging.sh BUILD_DIR [REQUESTS_PER_CLIENT]
#   FAULTS_TAIL=1 tests/bench/hedging.sh ...   (the tail rows only, from `coretry faults`)
#
# Rows: pricing with a slow tail (tests/bench/tail_pricing.py: 2 ms, 1 s for
# 2% of calls) without hedging, with --hedge-after p95 and with 10 ms;
# pricing down (`coretry faults`, every answer 503) without hedging and with
# p95 and 10 ms; pricing uniformly slow (every answer after 300 ms,
# --attempt-timeout 600; a fifth of the requests) without hedging and with p95.
set -euo pipefail
build=$1; per=${2:-250}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# row LABEL PRICING (tail|down|slow) [bookstore options...]
row() {
  local label=$1 kind=$2; shift 2
  local per=$per
  [ "$kind" = slow ] && per=$(( per / 5 > 10 ? per / 5 : 10 )) # 300 ms each: fewer
  local pport purl calls_before calls_after ppid bpid
  if [ "$kind" = tail ]; then
    pport=$(free_port)
    python3 "$here/tail_pricing.py" "$pport" 0.02 & ppid=$!
    sleep 0.5
    purl="http://127.0.0.1:$pport/price/{id}"
  else
    "$build/apps/cli/coretry" faults --listen 127.0.0.1:0 >"$work/p.out" 2>&1 & ppid=$!
    wait_for "$work/p.out"
    pport=$(grep -o 'http://[0-9.:]*' "$work/p.out" | head -1 | sed 's/.*://')
    case $kind in
      down) purl="http://127.0.0.1:$pport/status/503" ;;
      slow) purl="http://127.0.0.1:$pport/status/200?delay=300" ;;
      faults-tail) purl="http://127.0.0.1:$pport/status/200?delay=1000&percent=2" ;;
    esac
  fi
  "$build/apps/bookstore/coretry-bookstore" --listen 127.0.0.1:0 --pricing "$purl" "$@" >"$work/b.out" 2>&1 & bpid=$!
  wait_for "$work/b.out"
  local bport; bport=$(grep -o 'http://[0-9.:]*' "$work/b.out" | head -1 | sed 's/.*://')
  local load; load=$(python3 "$here/tail_load.py" "$bport" 8 "$per")
  sleep 0.5
  if [ "$kind" = tail ]; then
    calls_after=$(curl -s "http://127.0.0.1:$pport/_calls")
  else
    calls_after=$(curl -s "http://127.0.0.1:$pport/_log" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["requests"]) + d.get("dropped", 0))')
  fi
  local metrics; metrics=$(curl -s "http://127.0.0.1:$bport/metrics")
  local sent refused
  sent=$(echo "$metrics" | awk '/^coretry_hedges_total\{route="\/books\/\{id\}",result="sent"\}/{print $2}')
  refused=$(echo "$metrics" | awk '/^coretry_hedges_total\{route="\/books\/\{id\}",result="refused_budget"\}/{print $2}')
  kill $bpid $ppid 2>/dev/null || true
  wait $bpid $ppid 2>/dev/null || true
  local n=$((8 * per))
  echo "$label | $load | pricing calls per request $(python3 -c "print(round($calls_after / $n, 3))") | hedges sent ${sent:-0}, refused by the budget ${refused:-0}"
}

if [ -n "${FAULTS_TAIL:-}" ]; then
  # The same tail from `coretry faults` (C++; the other answers at once): on
  # a small machine the Python stand-in's own 2 ms become 8 to 11 ms.
  row "slow tail (faults), no hedging" faults-tail
  row "slow tail (faults), --hedge-after p95" faults-tail --hedge-after p95
  row "slow tail (faults), --hedge-after 10" faults-tail --hedge-after 10
  exit 0
fi
row "slow tail, no hedging" tail
row "slow tail, --hedge-after p95" tail --hedge-after p95
row "slow tail, --hedge-after 10" tail --hedge-after 10
row "pricing down, no hedging" down
row "pricing down, --hedge-after p95" down --hedge-after p95
row "pricing down, --hedge-after 10" down --hedge-after 10
row "uniformly 300 ms, no hedging" slow --attempt-timeout 600
row "uniformly 300 ms, --hedge-after p95" slow --attempt-timeout 600 --hedge-after p95
