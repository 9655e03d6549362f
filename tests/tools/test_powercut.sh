#!/usr/bin/env bash
# Checks the simulated power cut: rows committed with synchronous=FULL
# survive, rows committed with synchronous=OFF (never fsynced) are lost.
# Usage: test_powercut.sh SHIM RESTORE SQLITE3
set -euo pipefail
shim=$1 restore=$2 sqlite=$3
dir=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir "$dir/db"
fifo=$dir/in
mkfifo "$fifo"
NMQ_POWERCUT_DIR=$dir/db NMQ_POWERCUT_LOG=$dir/undo.log LD_PRELOAD=$shim \
	ASAN_OPTIONS=verify_asan_link_order=0 "$sqlite" "$dir/db/x.db" <"$fifo" >"$dir/out" &
pid=$!
exec 3>"$fifo"
cat >&3 <<SQL
PRAGMA journal_mode=WAL;
PRAGMA synchronous=FULL;
CREATE TABLE t(x);
INSERT INTO t VALUES(1);
INSERT INTO t VALUES(2);
PRAGMA synchronous=OFF;
INSERT INTO t VALUES(3);
INSERT INTO t VALUES(4);
SELECT 'count', count(*) FROM t;
SQL
for _ in $(seq 100); do grep -q '^count|4$' "$dir/out" && break; sleep 0.05; done
grep -q '^count|4$' "$dir/out" || { echo "FAIL: sqlite3 did not write 4 rows"; exit 1; }
kill -9 $pid
wait $pid 2>/dev/null || true
exec 3>&-
"$restore" "$dir/undo.log"
got=$("$sqlite" "$dir/db/x.db" 'SELECT group_concat(x) FROM t')
if [ "$got" != "1,2" ]; then
	echo "FAIL: after the power cut the table holds '$got', expected '1,2'"
	exit 1
fi
echo "ok: synced rows kept, unsynced rows lost"
