#!/usr/bin/env bash
# Load spread over a dependency's addresses, through the bookstore (not in
# CI; it measures, it asserts nothing). Pricing is four `coretry faults`
# servers in capacity mode (WORKERS workers x SERVICE_MS ms on a timer, a
# FIFO queue), one on each of 127.0.0.2 to 127.0.0.5 on one port, behind one
# name: `--pricing-resolve pricing:PORT:127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5`.
# The odd address, where there is one, is 127.0.0.2: listed first, where the
# first-to-connect rule sends everything. coretry-load sends open-loop
# Poisson arrivals on kept-alive connections. Every case runs with
# --pricing-balance first_to_connect (before) and least_cost (after), each
# with --concurrency-limit off and adaptive (the default).
#
# Cases (the share is of the calls pricing's four servers received):
#  equal    four equal addresses (16 x 5 ms each) at RATE/s: each one's share
#  slow     127.0.0.2 answers in 80 ms (64 x 80 ms), the others in 5 ms, at
#           RATE/s: its share, and p99 against the equal run's
#  quarter  127.0.0.2 has a quarter of the others' capacity (2 x 25 ms
#           against 8 x 25 ms), at 60% of the total (624/s): p99 against
#           four equal (8 x 25 ms) at 60% of theirs (768/s)
#  return   four equal at RATE/s; 127.0.0.2 stops after 4 s (its connections
#           closed, new ones refused) and starts again after 8 s: how long
#           until it is called again, and its share of the calls in the
#           windows after that first call (from each server's /_capacity
#           counters, read every 100 ms; its fair share is 25%)
#
#   tests/bench/balance.sh [BUILD_DIR] [SECONDS]
#
# BUILD_DIR defaults to build/release (cmake --preset release && cmake
# --build --preset release --target coretry_cli coretry_bookstore_app
# coretry_load). SECONDS (default 15) is the length of each run but the
# return case's (SECONDS + 20). RATE (default 400), SEED (default 1),
# CASES (default "equal slow quarter return"), MODES (default
# "first_to_connect least_cost") and LIMITS (default "off adaptive") may be
# set in the environment. Needs python3.
set -euo pipefail

build=${1:-build/release}
seconds=${2:-15}
rate=${RATE:-400}
seed=${SEED:-1}
cases=${CASES:-equal slow quarter return}
modes=${MODES:-first_to_connect least_cost}
limits=${LIMITS:-off adaptive}
coretry="$build/apps/cli/coretry"
bookstore="$build/apps/bookstore/coretry-bookstore"
load="$build/apps/load/coretry-load"
for tool in "$coretry" "$bookstore" "$load"; do
  [[ -x $tool ]] || { echo "missing $tool: build the release preset first" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "python3 is missing" >&2; exit 2; }
ulimit -n 65536 2>/dev/null || true

source "$(dirname "${BASH_SOURCE[0]}")/servers.sh" # scratch, start
scratch balance
addresses=(127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5)

# A port free on all four addresses.
port=$(python3 - "${addresses[@]}" <<'EOF'
import socket, sys
for _ in range(100):
    s = socket.socket(); s.bind((sys.argv[1], 0)); p = s.getsockname()[1]; s.close()
    ok = True
    for a in sys.argv[2:]:
        t = socket.socket()
        try: t.bind((a, p))
        except OSError: ok = False
        t.close()
    if ok:
        print(p); break
EOF
)
[[ -n $port ]] || { echo "no port free on ${addresses[*]}" >&2; exit 1; }

# Stops every program of the run (servers.sh's stop_all, kept for the
# exit, also removes $work).
stop_run() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

declare -A server_pid
# server INDEX WORKERS SERVICE_MS: pricing at addresses[INDEX].
server() {
  start "$work/p$1.out" "$coretry" faults --listen "${addresses[$1]}:$port" --workers "$2" --service-ms "$3" \
    --max-clients 20000 --log-limit 0
  server_pid[$1]=$pid
}

# Requests each server was sent (admitted or refused at its queue), as
# "a b c d".
calls() {
  python3 - "$port" "${addresses[@]}" <<'EOF'
import json, sys, urllib.request
port = sys.argv[1]
out = []
for a in sys.argv[2:]:
    try:
        s = json.load(urllib.request.urlopen(f"http://{a}:{port}/_capacity", timeout=5))
        out.append(s["admitted"] + s["rejected"])
    except OSError:
        out.append(0)
print(" ".join(map(str, out)))
EOF
}

# bookstore MODE LIMIT: sets store to its URL.
bookstore_start() {
  local flags=(--pricing-balance "$1")
  [[ $2 == off ]] && flags+=(--concurrency-limit off)
  start "$work/store.out" "$bookstore" --listen 127.0.0.1:0 --pricing "http://pricing:$port/capacity/{id}" \
    --pricing-resolve "pricing:$port:$(IFS=,; echo "${addresses[*]}")" --max-clients 20000 "${flags[@]}"
  store=$url
}

# run_load RATE SECONDS FILE
run_load() {
  "$load" "$store/books/1" --phase "$1:$2" --seed "$seed" --connections 2000 --timeout 1500 --window 500 --json >"$3"
}

# Prints "p99 served%" of a load file.
load_summary() {
  python3 - "$1" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = [l for l in lines if l.get("summary")][0]
sent = s["sent"] + s["not_sent"]
p99 = s.get("p99_ms")
print(f"{'-' if p99 is None else f'{p99:.1f}'} {100 * s['status_200'] / sent:.2f}")
EOF
}

# steady NAME MODE LIMIT RATE W0 S0 W S: address 0 with W0 x S0, the rest
# W x S; prints a table row.
steady() {
  local name=$1 mode=$2 limit=$3 r=$4
  server 0 "$5" "$6"
  for i in 1 2 3; do server "$i" "$7" "$8"; done
  bookstore_start "$mode" "$limit"
  run_load "$r" "$seconds" "$work/load.json"
  read -r p99 served < <(load_summary "$work/load.json")
  read -r -a got < <(calls)
  stop_run
  python3 - "$name" "$mode" "$limit" "$r" "$p99" "$served" "${got[@]}" <<'EOF'
import sys
name, mode, limit, r, p99, served = sys.argv[1:7]
got = [int(x) for x in sys.argv[7:]]
total = sum(got) or 1
shares = " / ".join(f"{100 * g / total:.1f}%" for g in got)
print(f"| {name} | {mode} | {limit} | {r}/s | {shares} | {p99} ms | {served}% |")
EOF
}

# returning MODE LIMIT: address 0 stops at 4 s and starts again at 8 s.
returning() {
  local mode=$1 limit=$2 total=$((seconds + 20))
  for i in 0 1 2 3; do server "$i" 16 5; done
  bookstore_start "$mode" "$limit"
  # Every 100 ms, the calls each server was sent (its /_capacity counters:
  # admitted or refused at its queue); -1 while it does not answer. The odd
  # address's counters start again from 0 when it starts again.
  python3 - "$port" "$work/series.txt" "$total" "${addresses[@]}" <<'EOF' &
import json, sys, time, urllib.request
port, path, total, addresses = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
end = time.time() + total + 2
with open(path, "w") as out:
    while time.time() < end:
        t = time.time()
        counts = []
        for a in addresses:
            try:
                c = json.load(urllib.request.urlopen(f"http://{a}:{port}/_capacity", timeout=1))
                counts.append(c["admitted"] + c["rejected"])
            except (OSError, ValueError):
                counts.append(-1)
        out.write(f"{t:.3f} " + " ".join(map(str, counts)) + "\n")
        out.flush()
        time.sleep(max(0.0, 0.1 - (time.time() - t)))
EOF
  local poller=$!
  pids+=("$poller")
  run_load "$rate" "$total" "$work/load.json" &
  local loader=$!
  pids+=("$loader")
  sleep 4
  local odd=${server_pid[0]}
  kill "$odd" 2>/dev/null || true
  wait "$odd" 2>/dev/null || true
  local kept=()
  for pid in "${pids[@]}"; do [[ $pid == "$odd" ]] || kept+=("$pid"); done
  pids=("${kept[@]}")
  sleep 4
  server 0 16 5
  local back
  back=$(python3 -c 'import time; print(f"{time.time():.3f}")')
  wait "$loader"
  wait "$poller" 2>/dev/null || true
  read -r p99 served < <(load_summary "$work/load.json")
  stop_run
  python3 - "$work/series.txt" "$back" "$mode" "$limit" "$p99" "$served" <<'EOF'
import sys
path, back, mode, limit, p99, served = sys.argv[1], float(sys.argv[2]), *sys.argv[3:]
# From the odd address's start again: (time, its calls, everyone's calls).
series = []
for line in open(path):
    parts = line.split()
    t, counts = float(parts[0]), [int(c) for c in parts[1:]]
    if t >= back and min(counts) >= 0:
        series.append((t, counts[0], sum(counts)))
first = next((s for s in series if s[1] > 0), None)
def share(t0, t1):
    a = [s for s in series if s[0] <= t0] or series[:1]
    b = [s for s in series if s[0] <= t1]
    if not a or not b or b[-1][2] == a[-1][2]:
        return "-"
    return f"{100 * (b[-1][1] - a[-1][1]) / (b[-1][2] - a[-1][2]):.1f}%"
if first is None:
    print(f"| {mode} | {limit} | never | - | - | - | - | {p99} ms | {served}% |")
else:
    t = max(back, first[0] - 0.1)  # the first call came within the poll before
    print(f"| {mode} | {limit} | {t - back:.1f} s | {share(t, t + 0.5)} | {share(t + 0.5, t + 1)} | "
          f"{share(t + 1, t + 2)} | {share(t + 2, t + 5)} | {p99} ms | {served}% |")
EOF
}

echo "four addresses on port $port, odd one ${addresses[0]}; runs of $seconds s at $rate/s unless said, seed $seed; $(date -u +%F)"
for c in $cases; do
  echo
  case $c in
  equal | slow | quarter)
    echo "| case | balance | concurrency limit | load | share of ${addresses[*]} | p99 | answered 200 |"
    echo "|---|---|---|---|---|---|---|"
    for mode in $modes; do
      for limit in $limits; do
        case $c in
        equal) steady "four equal, 5 ms" "$mode" "$limit" "$rate" 16 5 16 5 ;;
        slow) steady "one at 80 ms" "$mode" "$limit" "$rate" 64 80 16 5 ;;
        quarter)
          steady "four equal, 8 x 25 ms" "$mode" "$limit" 768 8 25 8 25
          steady "one at a quarter" "$mode" "$limit" 624 2 25 8 25
          ;;
        esac
      done
    done
    ;;
  return)
    echo "Returning: ${addresses[0]} down from 4 s to 8 s of $((seconds + 20)) s at $rate/s; its share of the calls after its first call back (fair: 25%)"
    echo
    echo "| balance | concurrency limit | first call after its start | 0-0.5 s | 0.5-1 s | 1-2 s | 2-5 s | p99 | answered 200 |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for mode in $modes; do
      for limit in $limits; do returning "$mode" "$limit"; done
    done
    ;;
  *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
