#!/usr/bin/env bash
# Pricing at three addresses behind one name (not in CI; needs wrk, curl,
# python3): 127.0.0.2 answers every request 503 (a small Python server),
# 127.0.0.3 and 127.0.0.4 are `coretry faults` serving PRICING_PATH, all on
# one port. A bookstore (default policy) reaches them as
# `--pricing-resolve pricing:PORT:127.0.0.2,127.0.0.3,127.0.0.4` and is driven
# by wrk (2 threads, 8 keep-alive connections) for SECONDS. Prints the
# requests, the share answered 200, the calls each address received, the
# share of calls 127.0.0.2 received after it was first ejected, whether it
# was called again once its ejection time (30 s) was up, and the ejections
# the bookstore counted. BALANCE (default least_cost) is the bookstore's
# --pricing-balance.
#
#   tests/bench/many_addresses.sh BUILD_DIR SECONDS [PRICING_PATH]
set -euo pipefail
build=$1; secs=$2; path=${3:-/status/200}; balance=${BALANCE:-least_cost}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# The port: one that is free on all three addresses.
port=$(python3 -c "
import socket
for _ in range(50):
    s = socket.socket(); s.bind(('127.0.0.3', 0)); p = s.getsockname()[1]; s.close()
    ok = True
    for a in ('127.0.0.2', '127.0.0.4'):
        t = socket.socket()
        try: t.bind((a, p))
        except OSError: ok = False
        t.close()
    if ok: print(p); break
")

cat >"$work/503.py" <<'EOF'
import http.server, sys, time, threading
lock = threading.Lock()
log = open(sys.argv[2], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        with lock: log.write("%.6f\n" % time.time())
        self.send_response(503); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.2", int(sys.argv[1])), H).serve_forever()
EOF
python3 "$work/503.py" "$port" "$work/503.log" &
"$build/apps/cli/coretry" faults --listen "127.0.0.3:$port" >"$work/p3.out" 2>&1 &
"$build/apps/cli/coretry" faults --listen "127.0.0.4:$port" >"$work/p4.out" 2>&1 &
for _ in $(seq 100); do grep -q listening "$work/p3.out" 2>/dev/null && grep -q listening "$work/p4.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.3
"$build/apps/bookstore/coretry-bookstore" --listen 127.0.0.1:0 --pricing "http://pricing:$port$path" \
  --pricing-resolve "pricing:$port:127.0.0.2,127.0.0.3,127.0.0.4" --pricing-balance "$balance" >"$work/b.out" 2>&1 &
for _ in $(seq 100); do grep -q listening "$work/b.out" 2>/dev/null && break; sleep 0.1; done
burl=$(grep -o 'http://[0-9.:]*' "$work/b.out" | head -1)
start=$(python3 -c 'import time; print(time.time())')
wrk -t2 -c8 -d"${secs}s" "$burl/books/1" >"$work/wrk.txt"
sleep 1
curl -s "$burl/metrics" >"$work/m.txt"
curl -s "http://127.0.0.3:$port/_log" >"$work/log3.json"
curl -s "http://127.0.0.4:$port/_log" >"$work/log4.json"
total=$(grep -o '[0-9]* requests in' "$work/wrk.txt" | awk '{print $1}')
non2xx=$(grep -o 'Non-2xx or 3xx responses: [0-9]*' "$work/wrk.txt" | awk '{print $NF}' || true); non2xx=${non2xx:-0}
python3 - "$work" "$start" "$total" "$non2xx" <<'EOF'
import json, sys
work, start, total, non2xx = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def calls(name):
    d = json.load(open(f"{work}/{name}"))
    return len(d.get("requests", [])) + d.get("dropped", 0)
times = [float(l) for l in open(f"{work}/503.log") if l.strip()]
c2, c3, c4 = len(times), calls("log3.json"), calls("log4.json")
all_calls = c2 + c3 + c4
metrics = open(f"{work}/m.txt").read().splitlines()
ejections = next((l.split()[-1] for l in metrics if l.startswith("coretry_address_ejections_total")), "?")
# The first ejection comes with the fifth 503 in a row; calls after it:
after = times[5:]
window_end = start + 30
later = [t for t in times if t > window_end]
print(f"requests={total} served={100 * (total - non2xx) / total:.2f}% pricing_calls={all_calls} "
      f"127.0.0.2={c2} 127.0.0.3={c3} 127.0.0.4={c4} "
      f"after_first_ejection={len(after)} ({100 * len(after) / max(all_calls - 5, 1):.2f}% of later calls) "
      f"called_after_30s={len(later)} ejections={ejections}")
EOF
