#!/usr/bin/env bash
# Slow-client benchmark (not in CI): attacks the bookstore and `coretry
# faults` on loopback, each at its default limits (512 clients, 10 s header
# and send timeouts, 30 s keep-alive), with slowhttptest's slowloris (-H),
# slow body (-B) and slow read (-X), and with an idle keep-alive flood (cap +
# 64 connections that each take one answer and stay idle, opened again when
# closed). Meanwhile a legitimate client asks once every 200 ms on a fresh
# connection (curl, 2 s limit). Prints per attack and server: the share of
# legitimate requests answered 200 within 2 s, the server's CPU (cores) and
# resident memory growth during the attack, and how long after the attack
# it answers again. Loopback only; each attack stops by itself.
#
#   tests/bench/slow_clients.sh [BUILD_DIR] [SECONDS_PER_ATTACK]
#
# BUILD_DIR defaults to build/release (cmake --preset release && cmake --build
# --preset release --target coretry_cli coretry_bookstore_app). Needs
# slowhttptest (apt-get install slowhttptest), curl and python3 (the idle
# flood). SECONDS_PER_ATTACK defaults to 40. ATTACKS (default "slowloris
# slow_body slow_read idle_flood") and SERVERS (default "bookstore faults")
# choose what runs. Exits 1 when a target is missed: at least 95% answered
# during the idle flood and 75% during the others, CPU under half a core,
# memory growth under 64 MiB, service again within 2 s.
set -euo pipefail

build=${1:-build/release}
seconds=${2:-40}
attacks=${ATTACKS:-slowloris slow_body slow_read idle_flood}
servers=${SERVERS:-bookstore faults}
coretry="$build/apps/cli/coretry"
bookstore="$build/apps/bookstore/coretry-bookstore"
for tool in "$coretry" "$bookstore"; do
  [[ -x $tool ]] || { echo "missing $tool: build the release preset first" >&2; exit 2; }
done
for tool in slowhttptest curl python3; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install $tool)" >&2; exit 2; }
done
# slowhttptest holds 1,000 connections, the flood 576.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) >= 4096 )) || { echo "needs 4096 descriptors (ulimit -n), has $(ulimit -n)" >&2; exit 2; }

source "$(dirname "${BASH_SOURCE[0]}")/servers.sh" # scratch, start, sample
scratch slow-clients

# The bookstore's pricing service, not under attack.
start "$work/pricing.out" "$coretry" faults --listen 127.0.0.1:0 --log-limit 0 --max-clients 2048
pricing=$url

cap=512
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }

# Asks $1 every 200 ms for $2 seconds, each on a fresh connection with a 2 s
# limit; prints "answered asked".
legitimate() {
  local url=$1 until=$((SECONDS + $2)) out="$work/legitimate.$RANDOM"
  : >"$out"
  while (( SECONDS < until )); do
    { curl -s -o /dev/null -m 2 -w '%{http_code}\n' "$url" || true; } >>"$out" &
    sleep 0.2
  done
  wait
  awk '$1 == "200" { ok++ } END { print ok + 0, NR }' "$out"
}

# cap + 64 connections, each sends one request, reads its answer and stays
# idle; a connection the server closes is opened again (at most 200 a second).
idle_flood() {
  python3 - "$1" "$2" "$3" "$(( cap + 64 ))" <<'EOF'
import selectors, socket, sys, time
port, path, seconds, count = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
request = ("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").encode()
end = time.monotonic() + seconds
selector = selectors.DefaultSelector()
open_now = 0
def connect():
    global open_now
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    selector.register(s, selectors.EVENT_WRITE)
    open_now += 1
for _ in range(count):
    connect()
second, opened, reopened = int(time.monotonic()), 0, 0
while time.monotonic() < end:
    for key, events in selector.select(timeout=0.1):
        s = key.fileobj
        try:
            if events & selectors.EVENT_WRITE:
                s.send(request)
                selector.modify(s, selectors.EVENT_READ)
                continue
            if s.recv(65536):  # the one answer, then idle; its bytes are dropped
                continue
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            pass
        selector.unregister(s)  # closed by the server: opened again below
        s.close()
        open_now -= 1
        reopened += 1
    if int(time.monotonic()) != second:
        second, opened = int(time.monotonic()), 0
    while open_now < count and opened < 200:
        connect()
        opened += 1
print("connections closed by the server and opened again:", reopened)
EOF
}

# Runs attack $1 against server $2 at $3 (base URL) whose process is $4.
attack() {
  local name=$1 server=$2 base=$3 pid=$4 target port
  port=${base##*:}
  if [[ $server == bookstore ]]; then
    target="$base/books/1"
  else
    target="$base/status/200"
  fi
  # A target whose answer is larger than the slow reader's window: /metrics
  # of the bookstore, a 4 KB body of the fault server.
  local large="$base/metrics"
  [[ $server == faults ]] && large="$base/status/200?body=$(head -c 4000 /dev/zero | tr '\0' x)"
  local cpu_before rss_before rss_most attacker
  cpu_before=$(cpu_ticks "$pid")
  rss_before=$(rss_kib "$pid")
  rss_most=$rss_before
  case $name in
    slowloris) timeout $((seconds + 30)) slowhttptest -H -c 1000 -r 200 -i 10 -l "$seconds" -u "$large" -p 3 \
                 >"$work/attack.log" 2>&1 & ;;
    slow_body) timeout $((seconds + 30)) slowhttptest -B -c 1000 -r 200 -i 10 -s 8192 -l "$seconds" -u "$large" -p 3 \
                 >"$work/attack.log" 2>&1 & ;;
    slow_read) timeout $((seconds + 30)) slowhttptest -X -c 1000 -r 200 -k 3 -w 1 -y 512 -n 5 -z 32 -l "$seconds" \
                 -u "$large" -p 3 >"$work/attack.log" 2>&1 & ;;
    idle_flood) idle_flood "$port" "${target#"$base"}" "$seconds" >"$work/attack.log" 2>&1 & ;; # ends by itself
  esac
  attacker=$!
  pids+=("$attacker")
  sleep 2 # the attack takes its connections
  legitimate "$target" $((seconds - 4)) >"$work/legitimate.txt" &
  local legit=$!
  while kill -0 "$legit" 2>/dev/null; do
    local rss
    rss=$(rss_kib "$pid")
    (( rss > rss_most )) && rss_most=$rss
    sleep 1
  done
  wait "$legit" || true
  read -r answered asked <"$work/legitimate.txt"
  local cpu_after
  cpu_after=$(cpu_ticks "$pid")
  wait "$attacker" 2>/dev/null || true
  # Service again: the first 200 after the attack ends.
  local stopped=$(date +%s%N) recovered=""
  for _ in $(seq 100); do
    if [[ $(curl -s -o /dev/null -m 2 -w '%{http_code}' "$target" || true) == 200 ]]; then
      recovered=$(( ($(date +%s%N) - stopped) / 1000000 ))
      break
    fi
    sleep 0.1
  done
  # What the server counted: idle connections closed at the cap, responses
  # not taken in time, headers or bodies not received in time.
  local counted
  if [[ $server == bookstore ]]; then
    curl -s -m 5 "$base/metrics" >"$work/metrics.txt" || true
    counted="$(sample "$work/metrics.txt" bookstore_idle_closed_total) / $(sample "$work/metrics.txt" \
      bookstore_send_timeouts_total) / $(sample "$work/metrics.txt" 'bookstore_refused_requests_total{cause="header_timeout"}')"
  else
    counted=$(curl -s -m 5 "$base/_log" | python3 -c 'import json, sys
r = json.load(sys.stdin)["refused"]
print(r["idle_closed_at_cap"], "/", r["send_timeout"], "/", r["header_timeout"])' || echo "?")
  fi
  local share cores growth
  share=$(awk -v a="$answered" -v n="$asked" 'BEGIN { printf "%.1f", n ? 100 * a / n : 0 }')
  cores=$(awk -v t=$((cpu_after - cpu_before)) -v hz="$ticks" -v s="$seconds" 'BEGIN { printf "%.2f", t / hz / s }')
  growth=$(( (rss_most - rss_before) / 1024 ))
  printf '| %s | %s | %s%% (%d of %d) | %s | %d MiB | %s | %s |\n' "$name" "$server" "$share" "$answered" "$asked" \
    "$cores" "$growth" "${recovered:-never} ms" "$counted"
  local least=75
  [[ $name == idle_flood ]] && least=95
  if awk -v s="$share" -v l="$least" -v c="$cores" -v g="$growth" -v r="${recovered:-999999}" \
       'BEGIN { exit !(s >= l && c < 0.5 && g < 64 && r < 2000) }'; then
    verdicts+=("PASS: $name against $server")
  else
    verdicts+=("FAIL: $name against $server: ${share}% answered (target ${least}%), $cores cores, $growth MiB, service again after ${recovered:-never} ms")
  fi
}

verdicts=()
echo "each attack ${seconds} s; legitimate client: one GET every 200 ms on a fresh connection, answered 200 within 2 s"
printf '\n| attack | server | answered in 2 s | CPU (cores) | memory growth | service again after | closed: idle at cap / send timeout / header timeout |\n'
printf '|---|---|---|---|---|---|---|\n'
for server in $servers; do
  for name in $attacks; do
    # A fresh server per attack, at its default limits.
    if [[ $server == bookstore ]]; then
      start "$work/server.out" "$bookstore" --listen 127.0.0.1:0 --pricing "$pricing/status/200"
    else
      start "$work/server.out" "$coretry" faults --listen 127.0.0.1:0 --log-limit 0
    fi
    attack "$name" "$server" "$url" "$pid"
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
  done
done
echo
printf '%s\n' "${verdicts[@]}"
for verdict in "${verdicts[@]}"; do [[ $verdict == FAIL* ]] && exit 1; done
exit 0
