# Drives the bookstore (not in CI): CLIENTS keep-alive clients send REQUESTS
# GET /books/N each, one after the other; prints the status codes and the
# latency percentiles.
#
#   python3 tests/bench/tail_load.py BOOKSTORE_PORT CLIENTS REQUESTS
import http.client, sys, threading, time
port, clients, per = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lat, codes = [], {}
lock = threading.Lock()
def run(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(per):
        t = time.monotonic()
        c.request("GET", "/books/%d" % (k * per + i + 1))
        r = c.getresponse(); r.read()
        d = time.monotonic() - t
        with lock:
            lat.append(d); codes[r.status] = codes.get(r.status, 0) + 1
ts = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
[t.start() for t in ts]; [t.join() for t in ts]
lat.sort(); n = len(lat)
q = lambda p: lat[min(n - 1, int(p * n))] * 1000
print("requests %d codes %s p50 %.1f ms p99 %.1f ms p99.9 %.1f ms" % (n, codes, q(0.5), q(0.99), q(0.999)))
