#!/usr/bin/env bash
# Attempt limits, fixed or observed (not in CI; needs wrk, curl, python3):
# starts `coretry faults` as pricing, serving PRICING_PATH, and a bookstore
# (default policy) with --attempt-timeout ATTEMPT_TIMEOUT, drives it with wrk
# (2 threads, 8 keep-alive connections) for SECONDS, and prints the requests,
# the share answered 200, wrk's p50 and p99, the calls pricing received (its
# log plus `dropped`), the attempt histogram's count and the last limit.
#
#   tests/bench/attempt_limits.sh BUILD_DIR PRICING_PATH ATTEMPT_TIMEOUT SECONDS
set -euo pipefail
build=$1; path=$2; at=$3; secs=$4
work=$(mktemp -d)
"$build/apps/cli/coretry" faults --listen 127.0.0.1:0 --max-clients "${PRICING_MAX_CLIENTS:-512}" >"$work/p.out" 2>&1 &
ppid_=$!
for _ in $(seq 100); do grep -q listening "$work/p.out" 2>/dev/null && break; sleep 0.1; done
purl=$(grep -o 'http://[0-9.:]*' "$work/p.out" | head -1)
"$build/apps/bookstore/coretry-bookstore" --listen 127.0.0.1:0 --pricing "$purl$path" --attempt-timeout "$at" >"$work/b.out" 2>&1 &
bpid=$!
for _ in $(seq 100); do grep -q listening "$work/b.out" 2>/dev/null && break; sleep 0.1; done
burl=$(grep -o 'http://[0-9.:]*' "$work/b.out" | head -1)
wrk -t2 -c8 -d"${secs}s" --latency "$burl/books/1" >"$work/wrk.txt"
sleep 1.5
curl -s "$burl/metrics" >"$work/m.txt"
curl -s "$purl/_log" >"$work/log.json"
kill $bpid $ppid_ 2>/dev/null || true
wait 2>/dev/null || true
total=$(grep -o '[0-9]* requests in' "$work/wrk.txt" | awk '{print $1}')
non2xx=$(grep -o 'Non-2xx or 3xx responses: [0-9]*' "$work/wrk.txt" | awk '{print $NF}' || true); non2xx=${non2xx:-0}
p50=$(awk '/Latency Distribution/{f=1} f&&/ 50%/{print $2}' "$work/wrk.txt")
p99=$(awk '/Latency Distribution/{f=1} f&&/ 99%/{print $2}' "$work/wrk.txt")
calls=$(python3 -c "import json,sys;d=json.load(open('$work/log.json'));print(len(d.get('requests',d.get('log',[])))+d.get('dropped',0))")
hist=$(awk '/^coretry_attempt_duration_seconds_count\{route="\/books\/\{id\}"/{s+=$2} END{print s}' "$work/m.txt")
limit=$(awk '/^coretry_attempt_limit_seconds\{route="\/books\/\{id\}"/{print $2}' "$work/m.txt")
echo "path=$path attempt-timeout=$at requests=$total non2xx=$non2xx served=$(python3 -c "print(round(100*($total-$non2xx)/$total,2))")% p50=$p50 p99=$p99 pricing_calls=$calls histogram_count=$hist limit_s=$limit"
rm -rf "$work"
