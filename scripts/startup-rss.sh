#!/usr/bin/env bash
# Startup memory of the broker on the shipped configuration, side by side
# with Debian's mosquitto: each broker is started RUNS times, alternating,
# and 2 s after each start its VmRSS, RssAnon and RssFile are read from
# /proc/PID/status (and its thread count). Prints one line per start and
# the median, minimum and maximum of each broker, with the ratio of the
# medians.
#
# Usage: scripts/startup-rss.sh [-r RUNS] [-b nanomq|mosquitto|both] [-n BIN]
#   -n BIN   the nanomq binary (default: build/bench/src/nanomq, built as
#            scripts/bench.sh builds it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
which=both
bin=""
while getopts "r:b:n:" o; do
	case $o in
	r) runs=$OPTARG ;;
	b) which=$OPTARG ;;
	n) bin=$OPTARG ;;
	*) sed -n '2,13p' "$0" >&2; exit 2 ;;
	esac
done
if [ -z "$bin" ]; then
	bin=$root/build/bench/src/nanomq
	cmake -S "$root" -B "$root/build/bench" -DCMAKE_BUILD_TYPE=Release -DBUILD_BENCH=ON >/dev/null
	cmake --build "$root/build/bench" -j"$(nproc)" --target nanomq >/dev/null
fi
if [ "$which" != nanomq ] && ! command -v mosquitto >/dev/null; then
	echo "startup-rss.sh: mosquitto is not installed (apt-get install mosquitto)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$tmp"' EXIT
free_port() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Waits until something listens on TCP port $1, without connecting to it (a
# connection would make the broker run its accept path and count that too).
wait_port() {
	local hex
	hex=$(printf ':%04X ' "$1")
	for _ in $(seq 200); do
		grep -q "$hex[0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

# One start: prints "broker VmRSS RssAnon RssFile threads" (kB).
measure() {
	local broker=$1 port pid
	port=$(free_port)
	if [ "$broker" = nanomq ]; then
		# The shipped file with only the TCP bind moved to a free port and
		# a private command channel.
		sed -e "s/0\.0\.0\.0:1883/0.0.0.0:$port/" \
		    -e "s#ipc:///tmp/nanomq_cmd.ipc#ipc://$tmp/cmd.ipc#" "$root/etc/nanomq.conf" >"$tmp/nanomq.conf"
		NANOMQ_PID_FILE=$tmp/nanomq.pid "$bin" start --conf "$tmp/nanomq.conf" >"$tmp/log" 2>&1 &
	else
		printf 'listener %s 0.0.0.0\nallow_anonymous true\n' "$port" >"$tmp/mosquitto.conf"
		mosquitto -c "$tmp/mosquitto.conf" >"$tmp/log" 2>&1 &
	fi
	pid=$!
	if ! wait_port "$port"; then
		echo "startup-rss.sh: $broker did not listen on $port" >&2
		cat "$tmp/log" >&2
		exit 1
	fi
	sleep 2
	awk -v b="$broker" '/^VmRSS/{r=$2} /^RssAnon/{a=$2} /^RssFile/{f=$2} /^Threads/{t=$2}
	    END{print b, r, a, f, t}' "/proc/$pid/status"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

echo "broker VmRSS_kB RssAnon_kB RssFile_kB threads"
for i in $(seq "$runs"); do
	if [ "$which" != mosquitto ]; then measure nanomq; fi
	if [ "$which" != nanomq ]; then measure mosquitto; fi
done | tee "$tmp/all"
/usr/bin/python3 - "$tmp/all" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for b in ("nanomq", "mosquitto"):
    r = [[int(x) for x in row[1:]] for row in rows if row[0] == b]
    if not r:
        continue
    cols = list(zip(*r))
    med[b] = statistics.median(cols[0])
    print("%-9s VmRSS median %5.0f kB (min %d, max %d), RssAnon median %.0f kB, RssFile median %.0f kB, threads %d"
          % (b, med[b], min(cols[0]), max(cols[0]), statistics.median(cols[1]),
             statistics.median(cols[2]), cols[3][0]))
if len(med) == 2:
    print("ratio nanomq/mosquitto (VmRSS medians): %.2f" % (med["nanomq"] / med["mosquitto"]))
EOF
