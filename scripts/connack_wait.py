#!/usr/bin/python3
"""How long a clean-start CONNACK waits for the store under a QoS 1 flood.

Starts the broker with the store on (defaults of the sqlite section unless
told), makes SESSIONS offline persistent sessions (one topic each) and
one persistent probe session, then floods QoS 1 into those sessions with
`nanomq_cli bench pub` (PUBS publishers, flat out). Every second the
probe reconnects: clean session 0 (its session is stored again), then
clean session 1, which ends the stored session: that CONNACK waits for
the delete's commit (decisions/0036). Prints, per probe, the store's
write queue (nanomq_store_pending_writes, read just before) and the wait.

    NANOMQ_BIN=build/release/src/nanomq \\
    NANOMQ_CLI_BIN=build/release/tools/nanomq_cli/nanomq_cli \\
      /usr/bin/python3 scripts/connack_wait.py [--fsync-ms N] [--duration S]

--fsync-ms loads tests/tools' slowsync shim (from the binary's build tree,
or $NMQ_SLOWSYNC_SHIM) so that every fsync of the store takes N ms longer
(a slow SD card).
Never asserts anything: a measurement, not a test.
"""

import argparse
import base64
import http.client
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import nmq  # noqa: E402


def pending(http_port):
    c = http.client.HTTPConnection(nmq.HOST, http_port, timeout=10)
    tok = base64.b64encode(b"admin:secret").decode()
    c.request("GET", "/api/v4/prometheus", headers={"Authorization": "Basic " + tok})
    body = c.getresponse().read().decode()
    c.close()
    for line in body.splitlines():
        if line.startswith("nanomq_store_pending_writes"):
            return int(float(line.split()[-1]))
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--pubs", type=int, default=1000)
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--inflight", type=int, default=32, help="QoS 1 window per publisher")
    ap.add_argument("--fsync-ms", type=int, default=0)
    ap.add_argument("--sqlite", default="", help="more keys of the sqlite section")
    a = ap.parse_args()
    db = tempfile.mkdtemp(prefix="nmq-connack-wait-")
    http_port = nmq.free_port()
    conf = ("sqlite {\n  enable = true\n  mounted_file_path = \"%s\"\n%s\n}\n"
            "http_server { port = %d, username = admin, password = secret }\n"
            % (db, a.sqlite, http_port))
    if a.fsync_ms:
        exe = os.path.realpath(nmq._find_nanomq())
        shim = os.environ.get("NMQ_SLOWSYNC_SHIM") or os.path.join(
            os.path.dirname(os.path.dirname(exe)), "tests", "tools", "libnmq_slowsync.so")
        os.environ.update({"LD_PRELOAD": shim, "NMQ_SLOWSYNC_DIR": db,
                           "NMQ_SLOWSYNC_MS": str(a.fsync_ms)})
    b = nmq.Broker(conf, log_level="warn")
    b.start(timeout=60)
    os.environ.pop("LD_PRELOAD", None)
    cli = os.environ.get("NANOMQ_CLI_BIN")
    try:
        subprocess.run([cli, "bench", "sub", "-p", str(b.port), "-c", str(a.sessions),
                        "-t", "cw/%i", "-q", "1", "-C", "false", "-i", "0",
                        "--duration", "2"], check=True, capture_output=True)
        probe = nmq.RawClient(b.port, version=4)
        probe.connect("cw-probe", clean=False)
        probe.disconnect()
        probe.close()
        time.sleep(1)
        flood = subprocess.Popen([cli, "bench", "pub", "-p", str(b.port), "-c", str(a.pubs),
                                  "-t", "cw/%i", "-q", "1", "-I", "0", "-i", "0", "-s", "64",
                                  "--inflight", str(a.inflight),
                                  "--duration", str(a.duration)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        print("t_s  pending_before  connack_wait_s")
        t_start = time.monotonic()
        worst = 0.0
        while flood.poll() is None:
            time.sleep(1)
            c = nmq.RawClient(b.port, version=4)
            c.connect("cw-probe", clean=False, timeout=120)  # stored again
            c.disconnect()
            c.close()
            depth = pending(http_port)
            c = nmq.RawClient(b.port, version=4)
            t0 = time.monotonic()
            c.connect("cw-probe", clean=True, timeout=120)
            w = time.monotonic() - t0
            c.disconnect()
            c.close()
            worst = max(worst, w)
            print("%4.0f  %14d  %14.3f" % (time.monotonic() - t_start, depth, w), flush=True)
        print("worst connack wait: %.3f s" % worst)
        out = flood.stdout.read().strip().splitlines()
        for line in out[-6:]:
            print("bench pub: " + line)
        print("publish_not_acked (log lines, rate limited): %d"
              % b.log_text().count("event=publish_not_acked"))
    finally:
        b.stop(timeout=120)


if __name__ == "__main__":
    main()
