# Shared by the benchmark scripts (sourced, not run): a scratch directory,
# starting the programs under test and stopping them on exit, and reading
# their /metrics.

# Makes $work, a scratch directory named for the benchmark ($1), and an
# empty `pids`; on exit every program in pids is stopped with SIGTERM and
# $work removed.
scratch() {
  work=$(mktemp -d "/tmp/coretry-$1-XXXXXX")
  pids=()
  trap stop_all EXIT
}
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# Starts a program that prints "listening on URL"; sets $url and $pid and
# adds the pid to pids. Fails the script if no address comes within 10 s.
start() {
  local out=$1; shift
  # Emptied here, before the program starts in the background: otherwise the
  # loop below may read the previous program's address from the same file.
  : >"$out"
  "$@" >"$out" 2>"$out.err" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    url=$(sed -n 's/^listening on //p' "$out")
    [[ -n $url ]] && return 0
    sleep 0.05
  done
  echo "did not start: $*" >&2; cat "$out.err" >&2; exit 1
}

# The value of one sample of a Prometheus text file (0 when absent).
sample() { awk -v key="$2" 'index($0, key " ") == 1 { print $NF; found = 1 } END { if (!found) print 0 }' "$1"; }
