#!/usr/bin/env python3
"""nanomq_cli pub/sub and the bench load generator against a real broker.

Starts the broker ($NANOMQ_BIN start --conf <tmp file>, or Debian's
mosquitto when NMQ_TEST_BROKER=mosquitto), then checks that:
- a message published with `nanomq_cli pub` reaches `nanomq_cli sub`, for
  MQTT 3.1.1 and 5.0;
- short `bench pubsub` runs count exactly at QoS 1 and 2 (sent == received,
  nothing lost, duplicated or reordered) and lose nothing at paced QoS 0;
- `bench sub` and `bench pub` as two processes agree;
- the accounting detects loss, duplication and reordering: the built-in
  --selftest, and faults injected by the publisher (--fault-skip/-dup/-swap)
  that travel through the broker and must be counted exactly.
Runs in well under 30 s.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CLI = os.environ.get("NANOMQ_CLI_BIN", "")
BROKER = os.environ.get("NANOMQ_BIN", "")
WHICH = os.environ.get("NMQ_TEST_BROKER", "nanomq")
FAILURES = []


def check(cond, what):
    """Records a failed check; returns cond."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nmq import free_port  # noqa: E402  (below the ephemeral port range)


def wait_port(port, proc, timeout=10.0):
    """Returns True once something accepts on port (False if proc died)."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def start_broker(tmp, port):
    """Starts the broker under test; returns the Popen."""
    log = open(os.path.join(tmp, "broker.log"), "w")
    if WHICH == "mosquitto":
        conf = os.path.join(tmp, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
        cmd = [shutil.which("mosquitto") or "mosquitto", "-c", conf]
    else:
        conf = os.path.join(tmp, "nanomq.conf")
        with open(conf, "w") as f:
            f.write('listeners.tcp.bind = "127.0.0.1:%d"\n' % port)
        cmd = [BROKER, "start", "--conf", conf]
    env = dict(os.environ, NANOMQ_PID_FILE=os.path.join(tmp, "nanomq.pid"))
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def cli(args, timeout=20):
    """Runs nanomq_cli; returns the CompletedProcess."""
    return subprocess.run([CLI] + args, capture_output=True, text=True, timeout=timeout)


def bench_json(port, args, timeout=20):
    """Runs a bench command with --json; returns the parsed report or None."""
    p = cli(["bench"] + args + ["-h", "127.0.0.1", "-p", str(port), "--json"], timeout)
    if p.returncode != 0:
        print("bench %s: rc=%d stderr=%s" % (args, p.returncode, p.stderr.strip()))
        return None
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print("bench %s: not JSON: %r" % (args, p.stdout))
        return None


def test_pub_sub(port, version):
    """A message published with `pub` is printed by `sub`."""
    topic = "test90/cli/v%d" % version
    sub = subprocess.Popen(
        [CLI, "sub", "-h", "127.0.0.1", "-p", str(port), "-V", str(version), "-t", topic,
         "-q", "1", "-L", "1", "-v"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # -v reports the SUBACK on stderr; publish only after it.
    ready = False
    end = time.time() + 5
    while time.time() < end and not ready:
        line = sub.stderr.readline()
        ready = "subscribed" in line
        if not line:
            break
    check(ready, "v%d: sub reports its subscription" % version)
    pub = cli(["pub", "-h", "127.0.0.1", "-p", str(port), "-V", str(version), "-t", topic,
               "-m", "hello-%d" % version, "-q", "1"])
    check(pub.returncode == 0, "v%d: pub exits 0 (%s)" % (version, pub.stderr.strip()))
    try:
        out, _ = sub.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        sub.kill()
        out, _ = sub.communicate()
    check(sub.returncode == 0, "v%d: sub exits 0 after -L 1" % version)
    check("%s: hello-%d" % (topic, version) in out, "v%d: sub printed the message (%r)"
          % (version, out.strip()))


def exact(r, what, n_expected):
    """Checks an exact QoS 1/2 run."""
    if not check(r is not None, what + ": report"):
        return
    check(r["sent"] == r["issued"], what + ": sent == issued (%d)" % r["sent"])
    check(r["acked"] == r["sent"], what + ": every publish acked (%d)" % r["acked"])
    check(r["expected"] == n_expected, what + ": expected %d (%d)" % (n_expected, r["expected"]))
    check(r["received"] == r["expected"], what + ": received == expected (%d)" % r["received"])
    check(r["lost"] == 0 and r["duplicated"] == 0 and r["reordered"] == 0,
          what + ": lost %d, duplicated %d, reordered %d"
          % (r["lost"], r["duplicated"], r["reordered"]))
    check(r["latency_us"]["count"] == r["received"] and r["latency_us"]["p50"] > 0,
          what + ": latency measured")
    ack = r["ack_latency_us"]
    check(ack["count"] == r["acked"] and 0 < ack["p50"] <= ack["p99"] <= ack["max"],
          what + ": ack latency measured for every acked publish (%r)" % ack)


def simulate_faults(limit, skip, dup, swap):
    """Returns (sent, lost, duplicated, reordered) of one publisher stream
    under the publisher's fault rules, as the receiver must count them."""
    order, held, seq = [], None, 0
    while True:
        if held is not None and (seq != held + 1 or seq >= limit):
            order.append(held)
            held = None
        if seq >= limit and held is None:
            break
        if swap and seq % swap == swap - 2:
            held = seq
        elif not (skip and seq % skip == skip - 1):
            order.append(seq)
            if dup and seq % dup == dup - 1:
                order.append(seq)
        seq += 1
    seen, high, dups, reord = set(), -1, 0, 0
    for s in order:
        if s in seen:
            dups += 1
            continue
        if s < high:
            reord += 1
        seen.add(s)
        high = max(high, s)
    return len(order), limit - len(seen), dups, reord


def main():
    if not CLI or not os.access(CLI, os.X_OK):
        print("NANOMQ_CLI_BIN is not set to an executable")
        return 1
    if WHICH != "mosquitto" and (not BROKER or not os.access(BROKER, os.X_OK)):
        print("NANOMQ_BIN is not set to an executable")
        return 1
    t_start = time.time()

    # Works without a broker.
    p = cli(["bench", "--selftest", "--json"])
    if "not built in" in p.stderr:
        print("nanomq_cli was built without bench: configure with -DBUILD_BENCH=ON")
        return 1
    st = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
    check(p.returncode == 0 and st.get("selftest") == "pass", "selftest passes")
    check((st.get("lost"), st.get("duplicated"), st.get("reordered")) == (110, 3, 2),
          "selftest reports crafted loss/dup/reorder (%s)" % st)

    tmp = tempfile.mkdtemp(prefix="nmq-t90-")
    port = free_port()
    broker = start_broker(tmp, port)
    try:
        if not check(wait_port(port, broker), "%s listens on %d" % (WHICH, port)):
            with open(os.path.join(tmp, "broker.log")) as f:
                print(f.read())
            return 1

        test_pub_sub(port, 4)
        test_pub_sub(port, 5)

        # QoS 1 flat out, 3.1.1: 2 publishers x 500 to 2 subscribers.
        r = bench_json(port, ["pubsub", "--pubs", "2", "--subs", "2", "-t", "t90/a", "-q", "1",
                              "-I", "0", "-L", "500", "--parallel", "2"])
        exact(r, "pubsub qos1 v4", 2000)

        # QoS 2, MQTT 5, pairs with %i topics.
        r = bench_json(port, ["pubsub", "--pubs", "3", "--subs", "3", "-t", "t90/p/%i",
                              "-q", "2", "-V", "5", "-I", "0", "-L", "200"])
        exact(r, "pubsub qos2 v5 pairs", 600)

        # QoS 0 paced for one second: nothing lost on a lightly loaded broker.
        r = bench_json(port, ["pubsub", "--pubs", "2", "--subs", "2", "-t", "t90/z", "-q", "0",
                              "-I", "10", "--duration", "1"])
        if check(r is not None, "pubsub qos0 paced: report"):
            check(r["sent"] > 100, "qos0: sent %d" % r["sent"])
            check(r["received"] == r["expected"] == 2 * r["sent"],
                  "qos0: received %d == expected %d" % (r["received"], r["expected"]))
            check(r["duplicated"] == 0 and r["reordered"] == 0, "qos0: no dup/reorder")

        # Two processes: bench sub expects 2 publishers x 300 messages.
        sub = subprocess.Popen(
            [CLI, "bench", "sub", "-h", "127.0.0.1", "-p", str(port), "-c", "2", "-i", "0",
             "-t", "t90/two/+", "-q", "1", "--expect-pubs", "2", "--expect-msgs", "300",
             "--duration", "15", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        time.sleep(0.5)
        rp = bench_json(port, ["pub", "-c", "2", "-i", "0", "-t", "t90/two/%i", "-q", "1",
                               "-I", "0", "-L", "300"])
        out, _ = sub.communicate(timeout=20)
        rs = json.loads(out.strip().splitlines()[-1]) if sub.returncode == 0 else None
        if check(rp is not None and rs is not None, "two processes: both report"):
            check(rp["sent"] == 600 and rp["acked"] == 600, "bench pub sent/acked 600")
            check(rp["ack_latency_us"]["count"] == 600 and rp["ack_latency_us"]["p99"] > 0,
                  "bench pub: ack latency of the 600 (%r)" % rp["ack_latency_us"])
            check(rs["received"] == 1200 and rs["lost"] == 0 and rs["duplicated"] == 0,
                  "bench sub received 1200 of %s, lost %d" % (rs["expected"], rs["lost"]))

        # Faults injected by the publisher must be counted exactly.
        limit, skip, dup, swap = 400, 17, 13, 11
        r = bench_json(port, ["pubsub", "--pubs", "2", "--subs", "2", "-t", "t90/f", "-q", "1",
                              "-I", "0", "-L", str(limit), "--fault-skip", str(skip),
                              "--fault-dup", str(dup), "--fault-swap", str(swap)])
        sent, lost, dups, reord = simulate_faults(limit, skip, dup, swap)
        if check(r is not None, "faults: report"):
            check(r["sent"] == 2 * sent, "faults: sent %d == %d" % (r["sent"], 2 * sent))
            check(r["lost"] == 4 * lost, "faults: lost %d == %d" % (r["lost"], 4 * lost))
            check(r["duplicated"] == 4 * dups,
                  "faults: duplicated %d == %d" % (r["duplicated"], 4 * dups))
            check(r["reordered"] == 4 * reord,
                  "faults: reordered %d == %d" % (r["reordered"], 4 * reord))

        # Idle connections.
        r = bench_json(port, ["conn", "-c", "200", "-i", "0", "--duration", "0.3"])
        if check(r is not None, "conn: report"):
            check(r["connect"]["ok"] == 200 and r["connect"]["failed"] == 0,
                  "conn: 200 connected (%s)" % r["connect"])
    finally:
        broker.terminate()
        try:
            broker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            broker.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    print("%d failure(s) in %.1f s" % (len(FAILURES), time.time() - t_start))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
