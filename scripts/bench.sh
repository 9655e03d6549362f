#!/usr/bin/env bash
# Benchmarks our broker against Debian's mosquitto with `nanomq_cli bench`.
#
# Each scenario runs once per broker (alternating which broker goes first),
# each time on a fresh broker started with the same limits (queue 1000,
# in flight 20, no persistence, TCP_NODELAY) on a free loopback port. The
# broker is pinned to CPU 0 and the load generator to CPU 1 (taskset). For
# every run the generator samples the broker's /proc/PID/stat (utime+stime,
# all threads) at the start of the measured window, when publishing stops
# and at the end of the drain, and its VmRSS/VmHWM, and prints one JSON
# line; this script collects the lines and prints a table with the ratio
# ours/mosquitto. docs/benchmarks.md explains the columns and the noise.
#
# Usage: scripts/bench.sh [options]
#   -s, --scenarios a,b,...  scenarios to run (default: all; see -l)
#   -l, --list               list the scenarios and exit
#   -d, --duration S         publishing time per run in seconds [10]
#   -r, --repeat N           runs per scenario and broker; the table shows
#                            the median and the spread (min..max) [1]
#   -b, --brokers LIST       nanomq,mosquitto | nanomq | mosquitto [both]
#   -o, --out FILE           also write the JSON lines to FILE
#       --no-build           use existing binaries
#   Environment: NANOMQ_BIN, NANOMQ_CLI_BIN override the binaries;
#   BENCH_QUEUE, BENCH_INFLIGHT override the broker limits; BENCH_MEMORY
#   sets our mqtt.max_message_memory (default 0, no cap; mosquitto's
#   memory_limit works differently and is left unset). Store scenarios:
#   BENCH_STORE_DURABILITY (fsync), BENCH_STORE_FLUSH (flush_mem_threshold,
#   100) and BENCH_STORE_CACHE (disk_cache_size; default BENCH_QUEUE x 1,000,
#   what mosquitto's per-session queues of 1,000 sessions hold, so that
#   neither broker drops a message the other keeps).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

scenarios_all=(fanout_q0 fanout_q1 fanout_q0_20 fanout_q1_20 four_q0 four_q1 pairs_q1 pairs_q1_1hz
	shared_q1 idle_10k startup tls_storm tls_storm_ec tls_resume tls_fanout_q0 tls_fanout_q1
	tls_pairs_q1_1hz bridge_fwd_q1 bridge_fwd_q1_tls bridge_drain_100k bridge_drain_100k_mem
	bridge_drain_100k_nocache bridge_drain_100k_fastremote bridge_drain_100k_mem_fastremote
	four_q1_scraped fanout_q1_scraped
	four_q1_webhook four_q1_4k four_q1_4k_webhook store_fanout_q1 store_pairs_q1 offline_q1 store_offline_q1
	offline_q1_keep store_offline_q1_keep)
duration=10
repeat=1
brokers=nanomq,mosquitto
out=""
build=1
sel=""
queue=${BENCH_QUEUE:-1000}
inflight=${BENCH_INFLIGHT:-20}

# Prints the bench arguments of a scenario. A leading "TLS rsa" or "TLS ec"
# runs it over TLS (listeners.ssl / mosquitto's TLS listener) with the RSA
# 2048 or ECDSA P-256 server certificate of scripts/gen-certs.sh.
scenario_args() {
	case "$1" in
	fanout_q0) echo "pubsub --pubs 1 --subs 1000 -t bench/fan -q 0 -I 0" ;;
	fanout_q1) echo "pubsub --pubs 1 --subs 1000 -t bench/fan -q 1 -I 0" ;;
	fanout_q0_20) echo "pubsub --pubs 1 --subs 1000 -t bench/fan -q 0 -I 50" ;;
	fanout_q1_20) echo "pubsub --pubs 1 --subs 1000 -t bench/fan -q 1 -I 50" ;;
	four_q0) echo "pubsub --pubs 4 --subs 4 -t bench/four -q 0 -I 0" ;;
	four_q1) echo "pubsub --pubs 4 --subs 4 -t bench/four -q 1 -I 0" ;;
	pairs_q1) echo "pubsub --pubs 1000 --subs 1000 -t bench/pair/%i -q 1 -I 0" ;;
	pairs_q1_1hz) echo "pubsub --pubs 1000 --subs 1000 -t bench/pair/%i -q 1 -I 1000" ;;
	tls_storm) echo "TLS rsa conn -c 600" ;;
	tls_storm_ec) echo "TLS ec conn -c 600" ;;
	tls_resume) echo "TLS rsa conn -c 2000 --resume" ;;
	tls_fanout_q0) echo "TLS rsa pubsub --pubs 1 --subs 1000 -t bench/fan -q 0 -I 0" ;;
	tls_fanout_q1) echo "TLS rsa pubsub --pubs 1 --subs 1000 -t bench/fan -q 1 -I 0" ;;
	tls_pairs_q1_1hz) echo "TLS rsa pubsub --pubs 1000 --subs 1000 -t bench/pair/%i -q 1 -I 1000" ;;
	shared_q1) echo "pubsub --pubs 1000 --subs 10 -t bench/sh/%i --sub-topic \$share/g/bench/sh/+ -q 1 -I 100" ;;
	four_q1_scraped) echo "SCRAPE pubsub --pubs 4 --subs 4 -t bench/four -q 1 -I 0" ;;
	# Webhooks on on_message_publish to a local receiver (ours only).
	four_q1_webhook) echo "WEBHOOK pubsub --pubs 4 --subs 4 -t bench/four -q 1 -I 0" ;;
	four_q1_4k) echo "pubsub --pubs 4 --subs 4 -t bench/four -q 1 -I 1" ;;
	four_q1_4k_webhook) echo "WEBHOOK pubsub --pubs 4 --subs 4 -t bench/four -q 1 -I 1" ;;
	# With the durable store (ours: sqlite, durability fsync; mosquitto:
	# persistence true); OFFLINE first leaves 1,000 persistent sessions
	# subscribed to bench/off/%i and disconnected.
	store_fanout_q1) echo "STORE pubsub --pubs 1 --subs 1000 -t bench/fan -q 1 -I 0 -C false" ;;
	store_pairs_q1) echo "STORE pubsub --pubs 1000 --subs 1000 -t bench/pair/%i -q 1 -I 0 -C false" ;;
	offline_q1) echo "OFFLINE pub -c 1000 -t bench/off/%i -q 1 -I 0" ;;
	store_offline_q1) echo "STORE OFFLINE pub -c 1000 -t bench/off/%i -q 1 -I 0" ;;
	# KEEP: the queues are large enough for the whole run (BENCH_KEEP_QUEUE
	# per session, 20,000): nothing is dropped or evicted.
	offline_q1_keep) echo "KEEP OFFLINE pub -c 1000 -t bench/off/%i -q 1 -I 0" ;;
	store_offline_q1_keep) echo "KEEP STORE OFFLINE pub -c 1000 -t bench/off/%i -q 1 -I 0" ;;
	fanout_q1_scraped) echo "SCRAPE pubsub --pubs 1 --subs 1000 -t bench/fan -q 1 -I 0" ;;
	idle_10k) echo "conn -c 10000" ;;
	startup) echo "startup" ;; # scripts/startup-rss.sh, not the generator
	bridge_fwd_q1) echo "bridge fwd" ;; # scripts/bench_bridge.py
	bridge_fwd_q1_tls) echo "bridge fwd_tls" ;;
	bridge_drain_100k) echo "bridge drain" ;;
	bridge_drain_100k_mem) echo "bridge drain_mem" ;;
	bridge_drain_100k_nocache) echo "bridge drain_nocache" ;;
	bridge_drain_100k_fastremote) echo "bridge drain_fastremote" ;;
	bridge_drain_100k_mem_fastremote) echo "bridge drain_mem_fastremote" ;;
	*) return 1 ;;
	esac
}

# Prints what a scenario is.
scenario_doc() {
	case "$1" in
	bridge_fwd_q1) echo "bridge: QoS 1 messages forwarded through a live link to a remote mosquitto (BENCH_BRIDGE_N, 200,000)" ;;
	bridge_fwd_q1_tls) echo "bridge: as bridge_fwd_q1, the link over TLS (the remote's RSA 2048 certificate of scripts/gen-certs.sh, verified)" ;;
	bridge_drain_100k) echo "bridge: 100,000 QoS 1 messages queued during an outage, then drained (ours: 1,024 in memory, the rest read back from its cache)" ;;
	bridge_drain_100k_mem) echo "bridge: as bridge_drain_100k, ours allowed as many in memory as Mosquitto (max_send_queue_len 200,000; still written through to its cache)" ;;
	bridge_drain_100k_nocache) echo "bridge: as bridge_drain_100k_mem, ours without its cache (memory only, like Mosquitto)" ;;
	bridge_drain_100k_fastremote) echo "bridge: as bridge_drain_100k, the remote being our broker for both bridges (Debian's mosquitto as the remote is CPU-bound during a drain)" ;;
	bridge_drain_100k_mem_fastremote) echo "bridge: as bridge_drain_100k_mem, the remote being our broker for both bridges" ;;
	fanout_q0) echo "1 publisher -> 1,000 subscribers, QoS 0, flat out" ;;
	fanout_q1) echo "1 publisher -> 1,000 subscribers, QoS 1, flat out" ;;
	fanout_q0_20) echo "1 publisher -> 1,000 subscribers, QoS 0, 20 msg/s" ;;
	fanout_q1_20) echo "1 publisher -> 1,000 subscribers, QoS 1, 20 msg/s" ;;
	four_q0) echo "4 publishers -> 4 subscribers (one topic), QoS 0, flat out" ;;
	four_q1) echo "4 publishers -> 4 subscribers (one topic), QoS 1, flat out" ;;
	pairs_q1) echo "1,000 publisher/subscriber pairs (own topic each), QoS 1, flat out" ;;
	pairs_q1_1hz) echo "1,000 publisher/subscriber pairs, QoS 1, 1 msg/s each" ;;
	tls_storm) echo "TLS: 600 connections at once, full handshakes (RSA-2048 certificate): CPU per connect" ;;
	tls_storm_ec) echo "TLS: as tls_storm with an ECDSA P-256 certificate" ;;
	tls_resume) echo "TLS: 2,000 connections resuming one session (ticket), RSA-2048: CPU per connect" ;;
	tls_fanout_q0) echo "TLS: 1 publisher -> 1,000 subscribers, QoS 0, flat out" ;;
	tls_fanout_q1) echo "TLS: 1 publisher -> 1,000 subscribers, QoS 1, flat out" ;;
	tls_pairs_q1_1hz) echo "TLS: 1,000 publisher/subscriber pairs, QoS 1, 1 msg/s each" ;;
	shared_q1) echo "1,000 publishers -> one 10-member shared subscription, QoS 1, 10 msg/s each" ;;
	four_q1_scraped) echo "four_q1 with the REST API scraped every second (/prometheus, /clients); ours only" ;;
	fanout_q1_scraped) echo "fanout_q1 with the REST API scraped every second (/prometheus, /clients); ours only" ;;
	four_q1_webhook) echo "four_q1 with a webhook on on_message_publish to a local HTTP/1.1 receiver; ours only" ;;
	four_q1_4k) echo "four_q1 paced at 1,000 msg/s per publisher (4,000 msg/s)" ;;
	four_q1_4k_webhook) echo "four_q1_4k with the webhook of four_q1_webhook; ours only" ;;
	idle_10k) echo "10,000 idle connections: connections/s and broker memory per connection" ;;
	startup) echo "memory 2 s after start on the default configuration (scripts/startup-rss.sh)" ;;
	store_fanout_q1) echo "store on: 1 publisher -> 1,000 persistent subscribers, QoS 1, flat out" ;;
	store_pairs_q1) echo "store on: 1,000 publisher/subscriber pairs (own topic each), persistent subscribers, QoS 1, flat out" ;;
	offline_q1) echo "1,000 publishers -> 1,000 offline persistent sessions, QoS 1, flat out (no store)" ;;
	store_offline_q1) echo "store on: 1,000 publishers -> 1,000 offline persistent sessions, QoS 1" ;;
	offline_q1_keep) echo "offline_q1 with queues that keep the whole run (max_mqueue_len BENCH_KEEP_QUEUE, 20,000): nothing dropped" ;;
	store_offline_q1_keep) echo "store_offline_q1 with disk_cache_size 20,000 x 1,000 (mosquitto: max_queued_messages 20,000): nothing evicted" ;;
	esac
}

while [ $# -gt 0 ]; do
	case "$1" in
	-s | --scenarios) sel=$2; shift 2 ;;
	-d | --duration) duration=$2; shift 2 ;;
	-r | --repeat) repeat=$2; shift 2 ;;
	-b | --brokers) brokers=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	--no-build) build=0; shift ;;
	-l | --list)
		for s in "${scenarios_all[@]}"; do
			printf '%-14s %s\n' "$s" "$(scenario_doc "$s")"
		done
		exit 0
		;;
	-h | --help) sed -n "2,24p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ -n "$sel" ]; then
	IFS=, read -r -a scenarios <<<"$sel"
else
	scenarios=("${scenarios_all[@]}")
fi
for s in "${scenarios[@]}"; do
	scenario_args "$s" >/dev/null || { echo "bench.sh: unknown scenario $s (see -l)" >&2; exit 2; }
done

# --- binaries ---------------------------------------------------------------
bdir="$root/build/bench"
if [ "$build" = 1 ] && [ -z "${NANOMQ_CLI_BIN:-}" ]; then
	. "$root/scripts/deps.sh"
	nmq_install_deps
	cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DBUILD_BENCH=ON >/dev/null
	cmake --build "$bdir" -j2 --target nanomq_cli
	if [[ ",$brokers," == *,nanomq,* ]] && [ -z "${NANOMQ_BIN:-}" ]; then
		cmake --build "$bdir" -j2 --target nanomq ||
			echo "bench.sh: our broker does not build; running mosquitto only" >&2
	fi
fi
cli=${NANOMQ_CLI_BIN:-$bdir/tools/nanomq_cli/nanomq_cli}
ours=${NANOMQ_BIN:-$bdir/src/nanomq}
[ -x "$cli" ] || { echo "bench.sh: no nanomq_cli at $cli" >&2; exit 1; }
if [[ ",$brokers," == *,mosquitto,* ]] && ! command -v mosquitto >/dev/null; then
	if [ "$(id -u)" -eq 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null
	else
		echo "bench.sh: install mosquitto (apt-get install mosquitto)" >&2
		exit 1
	fi
fi
mosq=$(command -v mosquitto || true)
list=()
IFS=, read -r -a want <<<"$brokers"
for b in "${want[@]}"; do
	case "$b" in
	nanomq)
		if [ -x "$ours" ]; then list+=(nanomq); else
			echo "bench.sh: skipping nanomq: no binary at $ours" >&2
		fi
		;;
	mosquitto) [ -n "$mosq" ] && list+=(mosquitto) ;;
	*) echo "bench.sh: unknown broker $b" >&2; exit 2 ;;
	esac
done
[ ${#list[@]} -gt 0 ] || { echo "bench.sh: no broker to run" >&2; exit 1; }

# 10,000 connections need about 10,100 descriptors on each side.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 10200 ]; then
	echo "bench.sh: ulimit -n is $(ulimit -n); idle_10k needs 10200" >&2
fi
cpus=$(nproc)
pin_broker=() pin_gen=()
if command -v taskset >/dev/null && [ "$cpus" -ge 2 ]; then
	pin_broker=(taskset -c 0)
	pin_gen=(taskset -c 1)
else
	echo "bench.sh: fewer than 2 CPUs or no taskset: not pinning" >&2
fi

work=$(mktemp -d /tmp/nmq-bench.XXXXXX)
results="$work/results.jsonl"
bpid=""
cleanup() {
	if [ -n "$bpid" ]; then kill "$bpid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# Prints a free TCP port.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Generates the test PKI once (readable by mosquitto, which drops to its
# own user).
pki_ready() {
	[ -f "$work/pki/ca.crt" ] && return 0
	bash "$root/scripts/gen-certs.sh" "$work/pki" >/dev/null
	chmod 711 "$work"
	chmod 755 "$work/pki"
	chmod 644 "$work/pki"/*
}

# Starts broker $1 on port $2 in the background; sets bpid. With $3 = rsa or
# ec the port is a TLS listener with that server certificate.
start_broker() {
	local b=$1 port=$2 tls=${3:-} hport=${4:-} store=${5:-} crt key
	if [ -n "$tls" ]; then
		pki_ready
		crt="$work/pki/server.crt" key="$work/pki/server.key"
		if [ "$tls" = ec ]; then
			crt="$work/pki/server-ec.crt" key="$work/pki/server-ec.key"
		fi
	fi
	if [ "$b" = mosquitto ]; then
		cat >"$work/mosquitto.conf" <<-EOF
			listener $port 127.0.0.1
			allow_anonymous true
			max_connections -1
			max_queued_messages $queue
			max_inflight_messages $inflight
			persistence false
			set_tcp_nodelay true
			log_dest none
		EOF
		if [ -n "$store" ]; then
			rm -rf "$work/mosq-db" && mkdir -p "$work/mosq-db" && chmod 777 "$work/mosq-db"
			sed -i 's/^persistence false$/persistence true/' "$work/mosquitto.conf"
			printf 'persistence_location %s/\n' "$work/mosq-db" >>"$work/mosquitto.conf"
		fi
		if [ -n "$tls" ]; then
			printf 'certfile %s\nkeyfile %s\n' "$crt" "$key" >>"$work/mosquitto.conf"
		fi
		"${pin_broker[@]}" "$mosq" -c "$work/mosquitto.conf" >"$work/broker.log" 2>&1 &
	else
		cat >"$work/nanomq.conf" <<-EOF
			listeners.tcp.bind = "127.0.0.1:$port"
			mqtt.max_mqueue_len = $queue
			mqtt.max_inflight_window = $inflight
			mqtt.max_message_memory = ${BENCH_MEMORY:-0}
			log.level = error
		EOF
		if [ -n "$store" ]; then
			rm -rf "$work/nmq-db"
			printf 'sqlite { mounted_file_path = "%s", durability = %s, flush_mem_threshold = %s, disk_cache_size = %s }\n' \
				"$work/nmq-db" "${BENCH_STORE_DURABILITY:-fsync}" "${BENCH_STORE_FLUSH:-100}" \
				"${BENCH_STORE_CACHE:-$((queue * 1000))}" >>"$work/nanomq.conf"
		fi
		if [ -n "$hport" ]; then
			printf 'http_server { port = %s, ip_addr = 127.0.0.1, auth_type = no_auth }\n' \
				"$hport" >>"$work/nanomq.conf"
		fi
		if [ -n "${BENCH_WEBHOOK_URL:-}" ]; then
			printf 'webhook { url = "%s", events = [{ event = "on_message_publish" }] }\n' \
				"$BENCH_WEBHOOK_URL" >>"$work/nanomq.conf"
		fi
		if [ -n "$tls" ]; then
			cat >"$work/nanomq.conf" <<-EOF
				listeners.tcp.bind = "127.0.0.1:$(free_port)"
				listeners.ssl { bind = "127.0.0.1:$port", certfile = "$crt", keyfile = "$key" }
				mqtt.max_mqueue_len = $queue
				mqtt.max_inflight_window = $inflight
				mqtt.max_message_memory = ${BENCH_MEMORY:-0}
				log.level = error
			EOF
		fi
		NANOMQ_PID_FILE="$work/nanomq.pid" "${pin_broker[@]}" "$ours" start \
			--conf "$work/nanomq.conf" >"$work/broker.log" 2>&1 &
	fi
	bpid=$!
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return 0
		fi
		kill -0 "$bpid" 2>/dev/null || break
		sleep 0.1
	done
	echo "bench.sh: $b did not start:" >&2
	cat "$work/broker.log" >&2
	return 1
}

# Stops the running broker.
stop_broker() {
	if [ -n "$bpid" ]; then
		kill "$bpid" 2>/dev/null || true
		wait "$bpid" 2>/dev/null || true
		bpid=""
	fi
}

# Measures broker $1's startup memory once (scripts/startup-rss.sh: the
# default configuration for ours, a plain listener for mosquitto, nothing
# connects); appends a JSON line, repetition $2.
run_startup() {
	local b=$1 rep=$2 line
	echo "== startup on $b (run $rep)" >&2
	line=$("$root/scripts/startup-rss.sh" -r 1 -b "$b" -n "$ours" 2>"$work/gen.err" |
		awk -v b="$b" '$1 == b && NF == 5 {
			printf "{\"vmrss_kb\":%d,\"rss_anon_kb\":%d,\"rss_file_kb\":%d,\"threads\":%d}",
			    $2, $3, $4, $5 }') || true
	if [ -z "$line" ]; then
		echo "bench.sh: startup on $b produced no report:" >&2
		tail -5 "$work/gen.err" >&2
		return 0
	fi
	printf '{"scenario":"startup","broker":"%s","run":%d,"report":%s}\n' "$b" "$rep" "$line" \
		>>"$results"
}

# Runs a bridge scenario ($1: fwd or drain, $2 messages) of broker $3,
# repetition $4 (scripts/bench_bridge.py: a remote mosquitto, the broker
# under test bridging to it, nanomq_cli publishing and counting); appends
# a JSON line.
run_bridge() {
	local mode=$1 n=$2 b=$3 rep=$4 s=$5 line dir
	echo "== $s on $b (run $rep)" >&2
	dir=$(mktemp -d "$work/bridge.XXXXXX")
	line=$(/usr/bin/python3 "$root/scripts/bench_bridge.py" "$mode" "$b" "$n" "$cli" "$ours" "$dir" \
		"${pin_broker[@]}" 2>"$work/gen.err" | tail -1) || true
	if [ -z "$line" ]; then
		echo "bench.sh: $s on $b produced no report:" >&2
		tail -5 "$work/gen.err" >&2
		return 0
	fi
	printf '{"scenario":"%s","broker":"%s","run":%d,"report":%s}\n' "$s" "$b" "$rep" "$line" \
		>>"$results"
}

# Runs scenario $1 against broker $2, repetition $3; appends a JSON line.
run_one() {
	local s=$1 b=$2 rep=$3 port args line
	if [ "$s" = startup ]; then
		run_startup "$b" "$rep"
		return 0
	fi
	if [ "$s" = bridge_fwd_q1 ] || [ "$s" = bridge_fwd_q1_tls ]; then
		run_bridge "fwd${s#bridge_fwd_q1}" "${BENCH_BRIDGE_N:-200000}" "$b" "$rep" "$s"
		return 0
	fi
	if [ "$s" = bridge_drain_100k ]; then
		run_bridge drain 100000 "$b" "$rep" "$s"
		return 0
	fi
	if [[ "$s" == bridge_drain_100k_* ]]; then
		run_bridge "drain_${s#bridge_drain_100k_}" 100000 "$b" "$rep" "$s"
		return 0
	fi
	port=$(free_port)
	read -r -a args <<<"$(scenario_args "$s")"
	local tls="" tlsargs=() hport="" spid="" store="" offline="" hook="" rpid=""
	# (start_broker sees this function's queue.)
	local queue=$queue
	if [ "${args[0]}" = KEEP ]; then
		queue=${BENCH_KEEP_QUEUE:-20000}
		args=("${args[@]:1}")
	fi
	if [ "${args[0]}" = STORE ]; then
		store=1
		args=("${args[@]:1}")
	fi
	if [ "${args[0]}" = OFFLINE ]; then
		offline=1
		args=("${args[@]:1}")
	fi
	if [ "${args[0]}" = TLS ]; then
		tls=${args[1]}
		args=("${args[@]:2}")
	fi
	if [ "${args[0]}" = SCRAPE ]; then
		args=("${args[@]:1}")
		if [ "$b" != nanomq ]; then
			echo "== $s: skipped on $b (no REST API)" >&2
			return 0
		fi
		hport=$(free_port)
	fi
	if [ "${args[0]}" = WEBHOOK ]; then
		args=("${args[@]:1}")
		if [ "$b" != nanomq ]; then
			echo "== $s: skipped on $b (no webhooks)" >&2
			return 0
		fi
		# The receiver: HTTP/1.1 with keep-alive, answers 200 to every
		# POST, on the generator's CPU; the REST API gives the counters.
		hook=$(free_port)
		hport=$(free_port)
		"${pin_gen[@]}" python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
' "$hook" &
		rpid=$!
		for _ in $(seq 50); do
			(exec 3<>"/dev/tcp/127.0.0.1/$hook") 2>/dev/null && break
			sleep 0.1
		done
		BENCH_WEBHOOK_URL="http://127.0.0.1:$hook/hook"
	fi
	start_broker "$b" "$port" "$tls" "$hport" "$store" || return 0
	if [ -n "$offline" ]; then
		# The sessions: subscribe, then go away (clean start false).
		"${pin_gen[@]}" "$cli" bench sub -c 1000 -t "bench/off/%i" -q 1 -C false \
			--prefix nmqoff -h 127.0.0.1 -p "$port" --parallel 1 -i 0 --duration 2 \
			--json >/dev/null 2>"$work/gen.err" || true
	fi
	# Bytes the broker writes to storage over the run (/proc/PID/io).
	local wb0 wb1
	wb0=$(awk '/^write_bytes/ {print $2}' "/proc/$bpid/io" 2>/dev/null || echo 0)
	if [ -n "$hport" ] && [ -z "$hook" ]; then
		# The scraper: what a Prometheus server and a dashboard would do,
		# once a second, on the generator's CPU.
		"${pin_gen[@]}" bash -c 'while :; do
			curl -s -o /dev/null "http://127.0.0.1:$1/api/v4/prometheus"
			curl -s -o /dev/null "http://127.0.0.1:$1/api/v4/clients?_limit=100"
			sleep 1; done' scraper "$hport" &
		spid=$!
	fi
	if [ -n "$tls" ]; then
		tlsargs=(-S --cafile "$work/pki/ca.crt")
	fi
	local extra=(--duration "$duration")
	if [ "${args[0]}" = conn ]; then
		extra=(--duration 3 -i 0)
	else
		extra+=(-i 0)
	fi
	echo "== $s on $b (run $rep)" >&2
	line=$("${pin_gen[@]}" "$cli" bench "${args[@]}" -h 127.0.0.1 -p "$port" --parallel 1 \
		"${tlsargs[@]}" "${extra[@]}" --broker-pid "$bpid" --json 2>"$work/gen.err") || true
	if [ -n "$spid" ]; then
		kill "$spid" 2>/dev/null || true
		wait "$spid" 2>/dev/null || true
	fi
	wb1=$(awk '/^write_bytes/ {print $2}' "/proc/$bpid/io" 2>/dev/null || echo 0)
	if [ -n "$hook" ]; then
		echo "   webhook counters: $(curl -s "http://127.0.0.1:$hport/api/v4/webhook")" >&2
	fi
	stop_broker
	if [ -n "$rpid" ]; then
		kill "$rpid" 2>/dev/null || true
		wait "$rpid" 2>/dev/null || true
		BENCH_WEBHOOK_URL=""
	fi
	if [ -z "$line" ]; then
		echo "bench.sh: $s on $b produced no report:" >&2
		tail -5 "$work/gen.err" >&2
		return 0
	fi
	printf '{"scenario":"%s","broker":"%s","run":%d,"write_bytes":%d,"report":%s}\n' \
		"$s" "$b" "$rep" "$((wb1 - wb0))" "$line" >>"$results"
}

echo "machine: $cpus CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" >&2
i=0
for s in "${scenarios[@]}"; do
	for rep in $(seq "$repeat"); do
		# Alternate which broker goes first.
		if [ $(((i + rep) % 2)) -eq 0 ]; then order=("${list[@]}"); else
			order=()
			for ((k = ${#list[@]} - 1; k >= 0; k--)); do order+=("${list[$k]}"); done
		fi
		for b in "${order[@]}"; do
			run_one "$s" "$b" "$rep"
		done
	done
	i=$((i + 1))
done
[ -z "$out" ] || cp "$results" "$out"

python3 - "$results" <<'EOF'
import json, statistics, sys

rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    r["report"]["_write_bytes"] = r.get("write_bytes", 0)
    rows.setdefault((r["scenario"], r["broker"]), []).append(r["report"])

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def msgs(r):
    """Messages the run counts: deliveries, or acked publishes (pub mode)."""
    return r["acked"] if r.get("mode") == "pub" else r["delivered_rate"] * r["publish_s"]

def metrics(reps):
    """Median of each metric over the repetitions, and the spread of msg/s."""
    m = {}
    get = {
        "rate": lambda r: msgs(r) / max(r["publish_s"], 1e-9),
        "cpu_m": lambda r: r.get("broker", {}).get("cpu_s", float("nan")) * 1e6 / max(msgs(r), 1)
            if r.get("mode") == "pub" else r.get("broker", {}).get("cpu_s_per_million", float("nan")),
        "p50": lambda r: r["latency_us"]["p50"] / 1e3,
        "p99": lambda r: r["latency_us"]["p99"] / 1e3,
        "hwm": lambda r: r.get("broker", {}).get("vmhwm_kb", float("nan")) / 1024,
        "lost": lambda r: r["lost"],
        "tail": lambda r: r.get("lost_tail", 0),
        "gen": lambda r: 100 * r["generator_cpu_s_publishing"] / max(r["publish_s"], 1e-9),
        "brk": lambda r: 100 * r.get("broker", {}).get("cpu_s_publishing", float("nan")) / max(r["publish_s"], 1e-9),
        "conn_s": lambda r: r["connect"]["per_second"],
        "bpc": lambda r: r.get("broker", {}).get("bytes_per_conn", float("nan")),
        "ok": lambda r: r["connect"]["ok"],
        "cms": lambda r: r.get("broker", {}).get("cpu_ms_per_connect", float("nan")),
        "full": lambda r: r.get("tls", {}).get("full", 0),
        "resumed": lambda r: r.get("tls", {}).get("resumed", 0),
    }
    for k, f in get.items():
        m[k] = med([f(r) for r in reps])
    rates = [msgs(r) / max(r["publish_s"], 1e-9) for r in reps]
    m["spread"] = (100 * (max(rates) - min(rates)) / med(rates)) if len(rates) > 1 and med(rates) else 0
    return m

def ratio(a, b):
    try:
        return "%.2f" % (a / b)
    except (ZeroDivisionError, TypeError):
        return "-"

scen = []
for s, b in rows:
    if s not in scen:
        scen.append(s)
print()
print("%-13s %-9s %11s %6s %9s %9s %9s %8s %9s %9s %5s %5s" % (
    "scenario", "broker", "deliv msg/s", "spread", "CPU s/M", "p50 ms", "p99 ms",
    "VmHWM MB", "lost", "tail", "gen%", "brk%"))
for s in scen:
    if s.startswith("bridge_"):
        got = {}
        for b in ("nanomq", "mosquitto"):
            if (s, b) in rows:
                reps = rows[(s, b)]
                got[b] = {k: med([r[k] for r in reps if r.get(k) is not None])
                          for k in ("msg_per_s", "seconds", "broker_cpu_s", "cpu_us_per_msg")}
                for k in ("reconnect_s", "link_s", "remote_cpu_s"):
                    xs = [r[k] for r in reps if r.get(k) is not None]
                    got[b][k] = med(xs) if xs else None
                # drain: seconds = the wait for the bridge's next connect
                # attempt (reconnect_s, a random backoff) + the drain on
                # the link (link_s)
                link = "" if got[b]["link_s"] is None else " (reconnect %.2f s + link %.2f s)" % (
                    got[b]["reconnect_s"], got[b]["link_s"])
                remote = "" if got[b]["remote_cpu_s"] is None else ", remote %s CPU %.2f s" % (
                    reps[0].get("remote", "mosquitto"), got[b]["remote_cpu_s"])
                print("%-13s %-9s %11.0f msg/s, %.2f s%s for %d messages, broker CPU %.2f s "
                      "(%.1f us/msg)%s, lost %d, duplicated %d, reordered %d" % (
                          s, b, got[b]["msg_per_s"], got[b]["seconds"], link, reps[0]["messages"],
                          got[b]["broker_cpu_s"], got[b]["cpu_us_per_msg"], remote,
                          max(r["lost"] or 0 for r in reps),
                          max(r["duplicated"] or 0 for r in reps),
                          max(r["reordered"] or 0 for r in reps)))
        if len(got) == 2:
            print("%-13s %-9s msg/s %s, seconds %s%s, CPU/msg %s" % (
                "", "ours/mosq", ratio(got["nanomq"]["msg_per_s"], got["mosquitto"]["msg_per_s"]),
                ratio(got["nanomq"]["seconds"], got["mosquitto"]["seconds"]),
                "" if got["nanomq"]["link_s"] is None or got["mosquitto"]["link_s"] is None
                else " (link %s)" % ratio(got["nanomq"]["link_s"], got["mosquitto"]["link_s"]),
                ratio(got["nanomq"]["cpu_us_per_msg"], got["mosquitto"]["cpu_us_per_msg"])))
        continue
    if s == "startup":
        rss = {}
        for b in ("nanomq", "mosquitto"):
            if (s, b) in rows:
                reps = rows[(s, b)]
                rss[b] = med([r["vmrss_kb"] for r in reps]) / 1024
                print("%-13s %-9s VmRSS %.2f MB (min %.2f, max %.2f), RssAnon %.2f MB, %d threads" % (
                    s, b, rss[b], min(r["vmrss_kb"] for r in reps) / 1024,
                    max(r["vmrss_kb"] for r in reps) / 1024,
                    med([r["rss_anon_kb"] for r in reps]) / 1024, reps[0]["threads"]))
        if len(rss) == 2:
            print("%-13s %-9s VmRSS %s" % ("", "ours/mosq", ratio(rss["nanomq"], rss["mosquitto"])))
        continue
    ms = {}
    for b in ("nanomq", "mosquitto"):
        if (s, b) not in rows:
            continue
        m = metrics(rows[(s, b)])
        ms[b] = m
        if s.startswith("idle") or s in ("tls_storm", "tls_storm_ec", "tls_resume"):
            print("%-13s %-9s %11s %6s %9s %9s %9s %8.1f %8s   (%d conns, %.0f conn/s, %.0f B/conn, %.3f ms CPU/conn%s)" % (
                s, b, "-", "-", "-", "-", "-", m["hwm"], "-", m["ok"], m["conn_s"], m["bpc"],
                m["cms"], ", %d full + %d resumed handshakes" % (m["full"], m["resumed"])
                if s.startswith("tls") else ""))
        else:
            print("%-13s %-9s %11.0f %5.0f%% %9.2f %9.2f %9.2f %8.1f %9d %9d %5.0f %5.0f" % (
                s, b, m["rate"], m["spread"], m["cpu_m"], m["p50"], m["p99"], m["hwm"],
                m["lost"], m["tail"], m["gen"], m["brk"]))
    if len(ms) == 2:
        o, q = ms["nanomq"], ms["mosquitto"]
        if s.startswith("idle") or s in ("tls_storm", "tls_storm_ec", "tls_resume"):
            print("%-13s %-9s conn/s %s, bytes/conn %s, VmHWM %s, CPU/conn %s" % (
                "", "ours/mosq", ratio(o["conn_s"], q["conn_s"]), ratio(o["bpc"], q["bpc"]),
                ratio(o["hwm"], q["hwm"]), ratio(o["cms"], q["cms"])))
        else:
            print("%-13s %-9s %11s %6s %9s %9s %9s %8s" % (
                "", "ours/mosq", ratio(o["rate"], q["rate"]), "", ratio(o["cpu_m"], q["cpu_m"]),
                ratio(o["p50"], q["p50"]), ratio(o["p99"], q["p99"]), ratio(o["hwm"], q["hwm"])))
wrote = [(s, b) for s, b in rows if s.startswith("store") or s.startswith("offline")]
if wrote:
    print()
    print("%-17s %-9s %12s %14s %11s %11s" % ("scenario", "broker", "msgs", "written B/msg",
                                            "ack p50 ms", "ack p99 ms"))
    for s, b in wrote:
        for r in rows[(s, b)]:
            n = msgs(r)
            ack = r.get("ack_latency_us") or {}
            print("%-17s %-9s %12.0f %14.0f %11.2f %11.2f" % (
                s, b, n, r["_write_bytes"] / max(n, 1), ack.get("p50", float("nan")) / 1e3,
                ack.get("p99", float("nan")) / 1e3))
# Our broker with the store against itself without it, in the same run.
pairs = [(s, s[len("store_"):]) for s in scen if s.startswith("store_")
         and (s, "nanomq") in rows and (s[len("store_"):], "nanomq") in rows]
if pairs:
    print()
    print("%-22s %-17s %11s %14s" % ("store on", "store off", "msg/s ratio", "CPU/msg ratio"))
    for a, b in pairs:
        ma, mb = metrics(rows[(a, "nanomq")]), metrics(rows[(b, "nanomq")])
        print("%-22s %-17s %11s %14s%s" % (a, b, ratio(ma["rate"], mb["rate"]),
                                        ratio(ma["cpu_m"], mb["cpu_m"]),
                                        "  (store off drops at its queue cap)"
                                        if b == "offline_q1" else ""))
print()
print("deliv msg/s: messages delivered to subscribers per second of the window (pub")
print("mode, e.g. *offline_q1: acknowledged publishes per second; CPU s/M per acked);")
print("lost: expected deliveries that did not arrive; tail: of those, the ones after the")
print("last message seen on their stream (still queued when the drain ended, or dropped);")
print("CPU s/M: broker CPU seconds per million delivered (whole window); gen%/brk%:")
print("generator and broker CPU while publishing, in % of one core (100% = saturated).")
print("ack p50/p99 ms (store and offline rows): time from a PUBLISH to its PUBACK/PUBCOMP at the")
print("publishers, over every acked publish of the run.")
EOF
