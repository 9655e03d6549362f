#!/usr/bin/env bash
# Installs what is missing, builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer, checks formatting, runs every fuzz target
# briefly and then every unit and integration test through ctest. Exits
# non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/deps.sh"
nmq_install_deps test
jobs=$(nproc)

echo "== format check"
mapfile -t srcs < <(cd "$root" && git ls-files '*.c' '*.h' 2>/dev/null || find nng src tools tests -name '*.[ch]')
(cd "$root" && clang-format --dry-run --Werror "${srcs[@]}")

echo "== build (ASan + UBSan)"
build="$root/build/test"
cmake -S "$root" -B "$build" -DBUILD_TESTS=ON -DBUILD_BENCH=ON -DASAN=ON -DUBSAN=ON \
	-DDEBUG=ON >/dev/null
cmake --build "$build" -j"$jobs"

if command -v clang >/dev/null; then
	echo "== fuzz (brief: each target ~20 s over its seed corpus)"
	fbuild="$root/build/fuzz"
	CC=clang cmake -S "$root" -B "$fbuild" -DBUILD_FUZZ=ON -DBUILD_TESTS=ON >/dev/null
	for f in "$root"/tests/fuzz/fuzz_*.c; do
		cmake --build "$fbuild" -j"$jobs" --target "$(basename "$f" .c)"
	done
	(cd "$fbuild" && ctest -L fuzz --output-on-failure -j"$jobs")
fi

# A broker built without the durable store (cmake -DENABLE_SQLITE=OFF, as
# a small image without libsqlite3 would build it) must still link: no
# test runs it, so only this build finds a call left outside the guard.
echo "== build without the store (ENABLE_SQLITE=OFF)"
nbuild="$root/build/nostore"
cmake -S "$root" -B "$nbuild" -DENABLE_SQLITE=OFF >/dev/null
cmake --build "$nbuild" -j"$jobs" --target nanomq >/dev/null

echo "== ctest"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build"
ctest --output-on-failure -j"$jobs"
