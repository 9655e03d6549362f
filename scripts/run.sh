#!/usr/bin/env bash
# Installs what is missing, builds a release binary and runs the broker in
# the foreground on etc/nanomq.conf (MQTT on port 1883). Extra arguments go
# to `nanomq start`, e.g. scripts/run.sh --log_level info
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/deps.sh"
nmq_install_deps
build="$root/build/release"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)"
exec "$build/src/nanomq" start --conf "$root/etc/nanomq.conf" "$@"
