#!/usr/bin/env bash
# Overload benchmark (not in CI): drives the bookstore with wrk while the
# pricing service (`coretry faults`) is (a) healthy, (b) failing 100% with
# 503, (c) failing 50% with 503, (d) slower than the attempt limit; each with
# neither the retry budget nor the retry gate, the budget, the gate, and both.
# Reports per scenario: pricing requests per bookstore request
# (amplification), bookstore p50/p99 latency, success rate, budget denials and
# gate denials (operations stopped as dependency_unhealthy); and checks the
# mission bound under (b) with the budget, with and without the gate:
# amplification <= 1.1 + 20/N (N = bookstore requests that called pricing).
#
# Pricing's calls are counted in full: the entries of its /_log plus its
# "dropped" count (the log keeps only the newest LOG_LIMIT entries). They are
# reported beside the bookstore's own attempt counter (coretry_attempts_total,
# which also counts attempts that never reached pricing), and the run fails
# when the two cannot both be true: pricing counted more calls than the
# bookstore made attempts, fewer calls than the bookstore answered 200 (each
# of those needed one answered call), or a log that dropped entries without
# being full or without saying how many.
#
#   tests/bench/overload.sh [BUILD_DIR] [SECONDS_PER_SCENARIO]
#
# BUILD_DIR defaults to build/release (cmake --preset release && cmake --build
# --preset release --target coretry_cli coretry_bookstore_app). Needs wrk and
# curl. Exits 1 if the bound is broken or a count check fails. LOG_LIMIT
# (default 10000) is passed to the pricing server's --log-limit.
set -euo pipefail

build=${1:-build/release}
seconds=${2:-10}
connections=${CONNECTIONS:-32}
log_limit=${LOG_LIMIT:-10000}
coretry="$build/apps/cli/coretry"
bookstore="$build/apps/bookstore/coretry-bookstore"
for tool in "$coretry" "$bookstore"; do
  [[ -x $tool ]] || { echo "missing $tool: build the release preset first" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install wrk)" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is missing" >&2; exit 2; }

source "$(dirname "${BASH_SOURCE[0]}")/servers.sh" # scratch, start, sample
scratch overload

start "$work/pricing.out" "$coretry" faults --listen 127.0.0.1:0 --log-limit "$log_limit"
pricing=$url
pricing_pid=$pid

declare -A target=(
  [a]="/status/200"
  [b]="/status/503"
  [c]="/status/503?percent=50"
  [d]="/status/200?delay=300"
)
declare -A title=(
  [a]="(a) healthy"
  [b]="(b) 100% 503"
  [c]="(c) 50% 503"
  [d]="(d) slow (300 ms > 250 ms attempt limit)"
)

printf '%s\n' "wrk: $connections connections, 2 threads, ${seconds} s per scenario; bookstore: 2 threads, default policy (3 attempts, 1000 ms deadline, 250 ms per attempt)"
printf '\n| scenario | budget | gate | bookstore requests (N) | bookstore attempts | pricing requests | amplification | p50 | p99 | success | budget denials | gate denials |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
verdict=0
bound_lines=()
count_problems=()
# Neither, the budget, the gate, both.
for mode in "off off" "on off" "off on" "on on"; do
  read -r budget gate <<<"$mode"
  for s in a b c d; do
    start "$work/book.out" "$bookstore" --listen 127.0.0.1:0 --pricing "$pricing${target[$s]}" --budget "$budget" \
      --gate "$gate" --threads 2
    book=$url
    book_pid=$pid
    curl -s "$pricing/_reset" >/dev/null
    wrk -t2 -c"$connections" -d"${seconds}s" --latency "$book/books/1" >"$work/wrk.txt"
    # Requests whose wrk connection is gone may still be retrying: wait for
    # them, so that the bookstore's counts and pricing's log cover the same calls.
    for _ in $(seq 100); do
      curl -s "$book/metrics" >"$work/metrics.txt"
      [[ $(sample "$work/metrics.txt" bookstore_in_flight_requests) == 1 ]] && break # the scrape itself
      sleep 0.05
    done
    kill -TERM "$book_pid"
    wait "$book_pid" || { echo "bookstore exited with $?" >&2; exit 1; }
    # Every call pricing received: the entries its log kept plus the ones it
    # dropped to stay within --log-limit.
    curl -s "$pricing/_log" >"$work/log.json"
    logged=$(grep -o '"method":' "$work/log.json" | wc -l)
    dropped=$(grep -o '"dropped":[0-9]*' "$work/log.json" | cut -d: -f2)
    if [[ -z $dropped ]]; then
      count_problems+=("${title[$s]}, budget $budget, gate $gate: pricing's log has no \"dropped\" count; calls past its limit would go uncounted")
      dropped=0
    elif (( logged > log_limit || (dropped > 0 && logged != log_limit) )); then
      count_problems+=("${title[$s]}, budget $budget, gate $gate: pricing's log holds $logged entries and dropped $dropped with a limit of $log_limit: entries were lost uncounted")
    fi
    calls=$((logged + dropped))

    route='route="/books/{id}"'
    n=$(sample "$work/metrics.txt" "coretry_operations_total{$route}")
    attempts=$(sample "$work/metrics.txt" "coretry_attempts_total{$route}")
    ok=$(sample "$work/metrics.txt" "bookstore_responses_total{$route,code=\"200\"}")
    total=$(awk -v r="bookstore_responses_total{$route," 'index($0, r) == 1 { sum += $NF } END { print sum + 0 }' "$work/metrics.txt")
    denied=$(sample "$work/metrics.txt" "coretry_stops_total{$route,reason=\"budget_exhausted\"}")
    gate_denied=$(sample "$work/metrics.txt" "coretry_stops_total{$route,reason=\"dependency_unhealthy\"}")
    p50=$(awk '$1 == "50%" { print $2 }' "$work/wrk.txt")
    p99=$(awk '$1 == "99%" { print $2 }' "$work/wrk.txt")
    amplification=$(awk -v c="$calls" -v n="$n" 'BEGIN { printf "%.3f", n ? c / n : 0 }')
    success=$(awk -v ok="$ok" -v t="$total" 'BEGIN { printf "%.1f%%", t ? 100 * ok / t : 0 }')
    printf '| %s | %s | %s | %d | %d | %d | %s | %s | %s | %s | %d | %d |\n' "${title[$s]}" "$budget" "$gate" "$n" \
      "$attempts" "$calls" "$amplification" "$p50" "$p99" "$success" "$denied" "$gate_denied"
    # An attempt is counted when it starts, whether or not it reaches pricing:
    # pricing can see fewer calls than the attempts, never more.
    if (( calls > attempts )); then
      count_problems+=("${title[$s]}, budget $budget, gate $gate: pricing counted $calls calls ($logged logged + $dropped dropped), more than the bookstore's $attempts attempts")
    fi
    # A 200 from the bookstore carries pricing's answer: one call at least.
    if (( calls < ok )); then
      count_problems+=("${title[$s]}, budget $budget, gate $gate: pricing counted $calls calls ($logged logged + $dropped dropped), fewer than the bookstore's $ok answers 200")
    fi
    # The gate takes nothing from the budget's bound: a retry it holds or
    # denies takes no token.
    if [[ $s == b && $budget == on ]]; then
      with="the budget"
      [[ $gate == on ]] && with="the budget and the gate"
      bound=$(awk -v n="$n" 'BEGIN { printf "%.4f", 1.1 + 20 / n }')
      amplification=$(awk -v c="$calls" -v n="$n" 'BEGIN { printf "%.4f", n ? c / n : 0 }')
      if awk -v c="$calls" -v n="$n" 'BEGIN { exit !(c / n <= 1.1 + 20 / n) }'; then
        bound_lines+=("PASS: (b) with $with: amplification $amplification <= 1.1 + 20/N = $bound (N = $n)")
      else
        bound_lines+=("FAIL: (b) with $with: amplification $amplification > 1.1 + 20/N = $bound (N = $n)")
        verdict=1
      fi
    fi
  done
done
echo
printf '%s\n' "${bound_lines[@]}"
if (( ${#count_problems[@]} > 0 )); then
  for problem in "${count_problems[@]}"; do echo "FAIL: counts: $problem"; done
  verdict=1
else
  echo "PASS: counts: in every scenario pricing's calls (logged + dropped) are between the bookstore's 200 answers and its attempts"
fi
kill -TERM "$pricing_pid"
exit $verdict
