#!/usr/bin/env bash
# Counts the syncs (fsync, fdatasync, syncfs: the calls that flush) `amiss serve` makes per
# webhook, the figure docs/benchmarks.md quotes, and the sync_file_range calls apart. serve
# runs on a fresh root, strace attaches to it once it listens (so the root's creation and
# preparation are not counted), N signed pushes are sent C at a time, and strace is stopped
# once the root holds all N done (admitted, evaluated, saved, published to the log,
# completed). Usage: bench/serve-syncs.sh [N] [C].
# Needs strace (Debian: apt-get install -y strace). STRACE=0 sends the same load untraced, for
# throughput (strace stops serve at every system call and slows it several times over).
set -euo pipefail
N=${1:-2000}
C=${2:-1}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
work=$(mktemp -d)
trap 'kill $serve 2>/dev/null || true; rm -rf "$work"' EXIT
export AMISS_DEMO_SECRET=${AMISS_DEMO_SECRET:-whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}
(cd "$top" && go build -o "$work/amiss" ./cmd/amiss)
(cd "$here" && go build -o "$work/hooks" ./hooks)
port=$((20000 + RANDOM % 20000))
"$work/amiss" serve -config "$top/examples/amiss.yaml" -root "$work/root" -listen 127.0.0.1:$port \
	-cleanup-every 1h >"$work/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
if [ "${STRACE:-1}" = 0 ]; then
	"$work/hooks" -url "http://127.0.0.1:$port/hooks/demo" -n "$N" -c "$C" -root "$work/root"
	exit 0
fi
strace -f -c -e trace=fsync,fdatasync,syncfs,sync_file_range -p "$serve" -o "$work/strace.out" &
tracer=$!
sleep 1
"$work/hooks" -url "http://127.0.0.1:$port/hooks/demo" -n "$N" -c "$C" -root "$work/root"
kill -INT $tracer
wait $tracer || true
cat "$work/strace.out"
# A sync is a call that flushes: fsync, fdatasync, syncfs. sync_file_range (a write-back
# started or waited for, a write-back error checked) flushes nothing and is counted apart.
# In strace -c's table the calls are the 4th field and the system call the last.
calls() { awk -v want="$1" '$NF ~ "^(" want ")$" {n += $4} END {print n + 0}' "$work/strace.out"; }
syncs=$(calls 'fsync|fdatasync|syncfs')
ranges=$(calls sync_file_range)
echo "webhooks $N, concurrency $C: $syncs syncs (fsync $(calls fsync), fdatasync $(calls fdatasync), syncfs $(calls syncfs)):" \
	"$(awk -v c="$syncs" -v n="$N" 'BEGIN {printf "%.2f", c/n}') per webhook;" \
	"sync_file_range $ranges ($(awk -v c="$ranges" -v n="$N" 'BEGIN {printf "%.2f", c/n}') per webhook, flushing nothing)"
