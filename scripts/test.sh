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
mapfile -t srcs < <(cd "$root" && git ls-files '*.c' '*.h' 2>/dev/null || find nng src include tests -name '*.[ch]')
(cd "$root" && clang-format --dry-run --Werror "${srcs[@]}")

echo "== build (ASan + UBSan)"
build="$root/build/test"
cmake -S "$root" -B "$build" -DBUILD_TESTS=ON -DBUILD_BENCH=ON -DASAN=ON -DUBSAN=ON \
	-DDEBUG=ON >/dev/null
cmake --build "$build" -j"$jobs"

if command -v clang >/dev/null; then
	echo "== fuzz (brief)"
	fbuild="$root/build/fuzz"
	CC=clang cmake -S "$root" -B "$fbuild" -DBUILD_FUZZ=ON -DBUILD_TESTS=ON >/dev/null
	cmake --build "$fbuild" -j"$jobs" --target fuzz_all
	for f in "$fbuild"/tests/fuzz/fuzz_*; do
		[ -x "$f" ] || continue
		name=$(basename "$f")
		corpus="$root/tests/fuzz/corpus/${name#fuzz_}"
		work=$(mktemp -d)
		echo "-- $name"
		"$f" -max_total_time="${NMQ_FUZZ_SECONDS:-20}" -rss_limit_mb=1024 "$work" "$corpus" \
			>"$work.log" 2>&1 || { tail -40 "$work.log"; exit 1; }
		rm -rf "$work" "$work.log"
	done
fi

echo "== ctest"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build"
ctest --output-on-failure -j"$jobs"
