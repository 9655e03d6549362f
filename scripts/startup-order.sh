#!/usr/bin/env bash
# Rewrites cmake/startup-functions.txt: the functions of the release broker
# that run from exec until it idles on etc/nanomq.conf. The build places
# them together ahead of .text (NMQ_STARTUP_ORDER in CMakeLists.txt), so that
# startup touches one 64 KiB window of code instead of several. Run it after
# changing what happens at startup, and commit the result; a function that
# is missing from the list only costs resident memory, never correctness.
#
# Needs valgrind (callgrind). Usage: scripts/startup-order.sh [build dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
out=$root/cmake/startup-functions.txt
command -v valgrind >/dev/null || { echo "startup-order.sh: needs valgrind" >&2; exit 1; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target nanomq >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The shipped configuration, on a free port and a private command channel.
sed -e "s/0\.0\.0\.0:1883/127.0.0.1:$port/" \
    -e "s#ipc:///tmp/nanomq_cmd.ipc#ipc://$tmp/cmd.ipc#" "$root/etc/nanomq.conf" >"$tmp/nanomq.conf"
grep -q "127.0.0.1:$port" "$tmp/nanomq.conf" || { echo "startup-order.sh: no 0.0.0.0:1883 bind in etc/nanomq.conf" >&2; exit 1; }

NANOMQ_PID_FILE=$tmp/nanomq.pid valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
    "$build/src/nanomq" start --conf "$tmp/nanomq.conf" >"$tmp/log" 2>&1 &
vg=$!
# Until the listener answers, then a few idle seconds (timer ticks, worker
# loops), then dump what ran so far: the shutdown path is left out.
for _ in $(seq 100); do
    if /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
        break
    fi
    sleep 0.2
done
sleep 3
callgrind_control -d "$vg" >/dev/null 2>&1
sleep 1
{ kill -9 "$vg" && wait "$vg"; } 2>/dev/null || true
dump=$(ls "$tmp"/cg.out.* 2>/dev/null | head -1)
[ -n "$dump" ] || { echo "startup-order.sh: no callgrind dump" >&2; cat "$tmp/log" >&2; exit 1; }

{
    echo "# Functions of nanomq that run from exec until it idles on etc/nanomq.conf,"
    echo "# written by scripts/startup-order.sh (release build, $(date -u +%Y-%m-%d))."
    echo "# The build places them together ahead of .text; see NMQ_STARTUP_ORDER."
    # Functions of the executable only: callgrind names the others' objects.
    callgrind_annotate --threshold=100 "$dump" 2>/dev/null \
        | grep -E '^ *[0-9,]+ +\([^)]*\) +\?\?\?:[A-Za-z_][A-Za-z0-9_.]*'"'"'?[0-9]* \[(\?\?\?|'"$build"'/src/nanomq)\]' \
        | sed -E 's/^ *[0-9,]+ +\([^)]*\) +\?\?\?://; s/ \[.*//; s/'"'"'[0-9]*$//' \
        | sort -u
} >"$out.tmp"
n=$(grep -vc '^#' "$out.tmp" || true)
[ "$n" -gt 20 ] || { echo "startup-order.sh: only $n functions found" >&2; exit 1; }
mv "$out.tmp" "$out"
echo "startup-order.sh: $n functions in ${out#"$root"/}"
