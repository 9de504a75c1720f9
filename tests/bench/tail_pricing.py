# A pricing stand-in with a slow tail, for the bookstore's hedging figures
# (not in CI): every GET answers 200 after 2 ms, or after 1 s with
# probability TAIL (default 0.02); GET /_calls gives the calls so far.
#
#   python3 tests/bench/tail_pricing.py PORT [TAIL]
import http.server, random, sys, threading, time
tail = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
calls = 0
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The header and the body leave in two writes: with Nagle's algorithm
    # the body would wait for the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True
    def log_message(self, *a): pass
    def do_GET(self):
        global calls
        if self.path == "/_calls":
            body = str(calls).encode()
        else:
            with lock: calls += 1
            time.sleep(1.0 if random.random() < tail else 0.002)
            body = b'{"price":"12.50"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try: self.wfile.write(body)
        except Exception: pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
s.daemon_threads = True
s.serve_forever()
