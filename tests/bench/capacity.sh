#!/usr/bin/env bash
# Overload of a dependency through the bookstore (not in CI; it measures, it
# asserts nothing). Pricing is `coretry faults` in capacity mode: WORKERS
# workers x SERVICE_MS ms on a timer (320 requests/s with the defaults, 8 x
# 25 ms), a FIFO queue that works off every queued request even when its
# caller has gone. The bookstore runs at its defaults except the option
# under test; coretry-load sends open-loop Poisson arrivals on kept-alive
# connections. It prints:
#
#  1. a table at 0.8x, 2x, 4x and 10x capacity, for no limit
#     (--concurrency-limit off), the gate's client-side throttling of first
#     attempts (--throttle-first-attempts on, no limit) and the adaptive
#     limit (the default): goodput over the last 10 s of the run as a share
#     of capacity, the share of requests answered 200, p99 of the 200s, the
#     share of refusals (answers other than 200) within 10 ms of arrival,
#     and pricing's wasted work (requests it worked off for a caller that
#     had gone, as a share of all it did);
#  2. recovery: 4x for SECONDS, then 0.5x for 8 s: the lowest share of 200s
#     in a 500 ms window from 500 ms after the drop;
#  3. capacity halved: 1.5x the old capacity, the workers halved after 5 s:
#     the most permits the bookstore held from 2 s after the change, and the
#     goodput of the 10 s after it as a share of the new capacity;
#  4. a fleet: three bookstores in front of one pricing at 2x in all: the
#     fleet's goodput as a share of capacity, and the lowest bookstore's
#     goodput as a share of an equal share.
#
#   tests/bench/capacity.sh [BUILD_DIR] [SECONDS]
#
# BUILD_DIR defaults to build/release (cmake --preset release && cmake
# --build --preset release --target coretry_cli coretry_bookstore_app
# coretry_load). SECONDS (default 15) is each run's length. WORKERS,
# SERVICE_MS and SEED may be set in the environment. Needs python3.
set -euo pipefail

build=${1:-build/release}
seconds=${2:-15}
workers=${WORKERS:-8}
service_ms=${SERVICE_MS:-25}
seed=${SEED:-1}
coretry="$build/apps/cli/coretry"
bookstore="$build/apps/bookstore/coretry-bookstore"
load="$build/apps/load/coretry-load"
for tool in "$coretry" "$bookstore" "$load"; do
  [[ -x $tool ]] || { echo "missing $tool: build the release preset first" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "python3 is missing" >&2; exit 2; }
(( seconds > 10 )) || { echo "SECONDS must be above 10 (goodput is measured over the last 10 s)" >&2; exit 2; }
capacity=$(( workers * 1000 / service_ms ))
ulimit -n 65536 2>/dev/null || true

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts a program that prints "listening on URL" first; sets the variable
# named VAR to the URL.
start() {
  local var=$1 out=$2
  shift 2
  "$@" >"$out" 2>"$out.err" &
  pids+=($!)
  for _ in $(seq 200); do
    if grep -q '^listening on ' "$out" 2>/dev/null; then
      printf -v "$var" '%s' "$(sed -n 's/^listening on //p' "$out" | head -1)"
      return
    fi
    sleep 0.05
  done
  echo "$* did not start: $(cat "$out.err")" >&2
  exit 1
}

stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

# A GET on loopback; prints the body.
http_get() {
  python3 - "$1" <<'EOF'
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
EOF
}

pricing_start() {
  start pricing "$work/pricing.out" "$coretry" faults --listen 127.0.0.1:0 --workers "$workers" --service-ms "$service_ms" \
    --max-clients 20000 --log-limit 0
}

# Sets the variable named VAR to the URL of a bookstore calling PRICING.
bookstore_start() {
  local var=$1 pricing=$2
  shift 2
  start "$var" "$work/$var.out" "$bookstore" --listen 127.0.0.1:0 --pricing "$pricing/capacity/{id}" \
    --max-clients 20000 "$@"
}

# Pricing's counters once its queue has drained (at most 30 s).
pricing_settled() {
  local url=$1 stats
  for _ in $(seq 300); do
    stats=$(http_get "$url/_capacity")
    if python3 -c 'import json,sys; s=json.loads(sys.argv[1]); sys.exit(0 if s["queue_length"]==0 and s["busy_workers"]==0 else 1)' "$stats"; then
      echo "$stats"
      return
    fi
    sleep 0.1
  done
  echo "$stats"
}

# coretry-load against URL with phases; JSON lines to FILE.
run_load() {
  local url=$1 file=$2
  shift 2
  "$load" "$url/books/1" "$@" --seed "$seed" --connections 10000 --timeout 1500 --window 500 --json >"$file"
}

echo "pricing: $workers workers x $service_ms ms = $capacity requests/s; runs of $seconds s, seed $seed; $(date -u +%F)"
echo
echo "| limit | load | goodput (last 10 s) | answered 200 | p99 of 200s | refusals within 10 ms | pricing's work wasted |"
echo "|---|---|---|---|---|---|---|"
for mode in off throttle adaptive; do
  case $mode in
  off) flags=(--concurrency-limit off) ;;
  throttle) flags=(--concurrency-limit off --throttle-first-attempts on) ;;
  adaptive) flags=() ;;
  esac
  for x in 0.8 2 4 10; do
    pricing_start
    bookstore_start store "$pricing" "${flags[@]}"
    rate=$(python3 -c "print(round($x * $capacity))")
    run_load "$store" "$work/load.json" --phase "$rate:$seconds"
    stats=$(pricing_settled "$pricing")
    python3 - "$work/load.json" "$stats" "$mode" "$x" "$capacity" "$seconds" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
stats = json.loads(sys.argv[2])
mode, x, capacity, seconds = sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
windows = [l for l in lines if not l.get("summary")]
summary = [l for l in lines if l.get("summary")][0]
last = [w for w in windows if w["start_ms"] >= (seconds - 10) * 1000 and w["start_ms"] < seconds * 1000]
goodput = sum(w["status_200"] for w in last) / 10.0
sent = summary["sent"] + summary["not_sent"]
non200 = [(w["status_503"] + w["status_504"] + w["status_other"], w["non200_fast_share"]) for w in windows]
refusals = sum(n for n, _ in non200)
fast = sum(n * (s or 0) for n, s in non200)
did = stats["completed"]
wasted = stats["wasted"] / did if did else 0.0
p99 = summary.get("p99_ms")
name = {"off": "none", "throttle": "gate's first-attempt throttling", "adaptive": "adaptive (default)"}[mode]
print(f"| {name} | {x}x | {100 * goodput / capacity:.1f}% | {100 * summary['status_200'] / sent:.1f}% | "
      f"{'-' if p99 is None else f'{p99:.0f} ms'} | {'-' if not refusals else f'{100 * fast / refusals:.1f}%'} | "
      f"{100 * wasted:.1f}% |")
EOF
    stop_all
  done
done

echo
echo "Recovery: ${seconds} s at 4x, then 8 s at 0.5x"
echo
echo "| limit | lowest share of 200s in a 500 ms window, from 500 ms after the drop |"
echo "|---|---|"
for mode in off adaptive; do
  flags=()
  [[ $mode == off ]] && flags=(--concurrency-limit off)
  pricing_start
  bookstore_start store "$pricing" "${flags[@]}"
  run_load "$store" "$work/load.json" --phase "$((4 * capacity)):$seconds" --phase "$((capacity / 2)):8"
  python3 - "$work/load.json" "$mode" "$seconds" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
drop = float(sys.argv[3]) * 1000
after = [l for l in lines if not l.get("summary") and l["start_ms"] >= drop + 500 and l["start_ms"] < drop + 8000]
shares = []
for w in after:
    answered = w["status_200"] + w["status_503"] + w["status_504"] + w["status_other"] + w["timeouts"] + w["errors"]
    if answered: shares.append(w["status_200"] / answered)
print(f"| {'none' if sys.argv[2] == 'off' else 'adaptive (default)'} | {100 * min(shares):.1f}% |")
EOF
  stop_all
done

echo
echo "Capacity halved: $((3 * capacity / 2)) requests/s, $workers -> $((workers / 2)) workers after 5 s"
echo
echo "| limit | most permits held from 2 s after the change | goodput of the next 10 s / new capacity |"
echo "|---|---|---|"
for mode in adaptive; do
  pricing_start
  bookstore_start store "$pricing"
  run_load "$store" "$work/load.json" --phase "$((3 * capacity / 2)):17" &
  loader=$!
  sleep 5
  http_get "$pricing/_capacity?workers=$((workers / 2))" >/dev/null
  sleep 2
  most=0
  for _ in $(seq 50); do
    held=$(http_get "$store/metrics" | sed -n 's/^coretry_concurrency_in_flight{dependency="pricing"} //p')
    most=$(python3 -c "print(max($most, int(float('${held:-0}'))))")
    sleep 0.1
  done
  wait "$loader"
  python3 - "$work/load.json" "$most" "$((capacity / 2))" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
after = [l for l in lines if not l.get("summary") and 5000 <= l["start_ms"] < 15000]
goodput = sum(w["status_200"] for w in after) / 10.0
print(f"| adaptive (default) | {sys.argv[2]} | {100 * goodput / float(sys.argv[3]):.1f}% |")
EOF
  stop_all
done

echo
echo "A fleet: three bookstores in front of one pricing, $((2 * capacity)) requests/s in all"
echo
pricing_start
bookstore_start store1 "$pricing"
bookstore_start store2 "$pricing"
bookstore_start store3 "$pricing"
stores=("$store1" "$store2" "$store3")
share=$((2 * capacity / 3))
loaders=()
for i in 0 1 2; do
  "$load" "${stores[$i]}/books/1" --phase "$share:$seconds" --seed $((seed + i)) --connections 10000 --timeout 1500 \
    --window 500 --json >"$work/fleet$i.json" &
  loaders+=($!)
done
for loader in "${loaders[@]}"; do wait "$loader"; done
python3 - "$capacity" "$seconds" "$work"/fleet0.json "$work"/fleet1.json "$work"/fleet2.json <<'EOF'
import json, sys
capacity, seconds = float(sys.argv[1]), float(sys.argv[2])
goodputs = []
for path in sys.argv[3:]:
    lines = [json.loads(l) for l in open(path) if l.strip()]
    last = [l for l in lines if not l.get("summary") and (seconds - 10) * 1000 <= l["start_ms"] < seconds * 1000]
    goodputs.append(sum(w["status_200"] for w in last) / 10.0)
total = sum(goodputs)
print("| fleet goodput / capacity | each bookstore's goodput / an equal share |")
print("|---|---|")
print(f"| {100 * total / capacity:.1f}% | " + ", ".join(f"{100 * g / (capacity / 3):.0f}%" for g in goodputs) + " |")
EOF
stop_all
