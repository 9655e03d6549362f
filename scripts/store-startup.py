#!/usr/bin/python3
"""Startup of the broker on a large durable store (docs/benchmarks.md,
"Durable store", "Startup with a large store").

Fills a store with SESSIONS persistent sessions and PER queued QoS 1
messages each, written through the broker's own store code
(tests/tools/store_gen.c, so the rows follow whatever the schema is), then
starts nanomq on it and measures:

- the time from exec until the listener accepts a TCP connection;
- the broker's restore time (its `event=restored ... ms=` log line);
- VmRSS / VmHWM when it accepts, and a few seconds later;

then connects a sample of the sessions (clean start 0) and checks that each
gets its whole queue, in order. Prints one summary line.

With --expired sessions (or messages), every session (or every queued
message) is made expired in the file before the start, as after a long
outage: the startup drops them all (the sample is not checked then).

    scripts/store-startup.py [--build build/rel] [--sessions 100000]
                             [--per 10] [--sample 20] [--keep]
                             [--expired sessions|messages]

The build directory needs the targets nanomq and store_gen
(cmake -DBUILD_TESTS=ON; a Release build for figures).
"""

import argparse
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import nmq  # noqa: E402
from nmq import PUBLISH, RawClient, RecvTimeout  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def vm(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) // 1024
    return out


def check_session(port, cid, per):
    """Connects cid with clean start 0; returns the payloads it gets."""
    r = RawClient(port, version=5)
    ack = r.connect(cid, clean=False, props={"SessionExpiryInterval": 3600})
    if ack.rc != 0 or not ack.session_present:
        raise SystemExit("%s: CONNACK rc %d, session present %s" % (cid, ack.rc,
                                                                  ack.session_present))
    got = []
    while True:
        try:
            p = r.expect(PUBLISH, 3 if len(got) < per else 0.5)
        except RecvTimeout:
            break
        r.ack(p)
        got.append(p.payload.split(b".")[0])
    r.disconnect()
    r.sock.close()
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "rel"))
    ap.add_argument("--sessions", type=int, default=100000)
    ap.add_argument("--per", type=int, default=10)
    ap.add_argument("--fanout", type=int, default=10)
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the store directory")
    ap.add_argument("--expired", choices=("sessions", "messages"),
                    help="make every session (message) expired before the start")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    exe = os.path.join(a.build, "src", "nanomq")
    gen = os.path.join(a.build, "tests", "tools", "store_gen")
    for f in (exe, gen):
        if not os.access(f, os.X_OK):
            raise SystemExit("missing %s: cmake --build %s --target nanomq store_gen"
                             % (f, a.build))
    tmp = tempfile.mkdtemp(prefix="nmq-startup-")
    db = os.path.join(tmp, "db")
    try:
        t = time.monotonic()
        subprocess.run([gen, db, str(a.sessions), str(a.per), "64", str(a.fanout)],
                       check=True)
        gen_s = time.monotonic() - t
        size_mb = os.path.getsize(os.path.join(db, "nanomq.db")) / 1e6
        if a.expired:
            c = sqlite3.connect(os.path.join(db, "nanomq.db"))
            if a.expired == "sessions":  # offline for a year, expiry 1 s
                c.execute("UPDATE sessions SET expiry_s = 1")
            else:
                c.execute("UPDATE msgs SET expiry_interval = 10, expiry_wall_ms = 1000")
            c.commit()
            c.close()
        port = free_port()
        conf = os.path.join(tmp, "nanomq.conf")
        with open(conf, "w") as f:
            f.write('listeners.tcp.bind = "127.0.0.1:%d"\n'
                    'system.cmd_ipc_url = "ipc://%s/cmd.ipc"\n'
                    "log { level = info, to = [console] }\n"
                    'sqlite { mounted_file_path = "%s", disk_cache_size = %d }\n'
                    % (port, tmp, db, a.sessions * a.per * 2))
        env = dict(os.environ, NANOMQ_PID_FILE=os.path.join(tmp, "nanomq.pid"))
        log = open(os.path.join(tmp, "broker.log"), "w")
        t0 = time.monotonic()
        p = subprocess.Popen([exe, "start", "--conf", conf], stdout=log,
                             stderr=subprocess.STDOUT, env=env, cwd=tmp)
        while True:
            if p.poll() is not None:
                raise SystemExit("the broker exited (%s); see %s/broker.log"
                                 % (p.returncode, tmp))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.005)
        accept_s = time.monotonic() - t0
        at_accept = vm(p.pid)
        time.sleep(3)
        later = vm(p.pid)
        with open(os.path.join(tmp, "broker.log")) as f:
            text = f.read()
        m = re.search(r"event=restored sessions=(\d+) subscriptions=(\d+).* failed=(\d+) "
                      r"ms=(\d+)", text)
        ex = re.search(r"event=restored .*expired=(\d+)", text)
        if m is None:
            raise SystemExit("no restore line in the log:\n" + text[-2000:])
        sessions, subs, failed, restore_ms = (int(x) for x in m.groups())
        rnd = random.Random(1)
        sample = sorted(rnd.sample(range(a.sessions), min(a.sample, a.sessions)))
        if a.expired:
            sample = []
        bad = []
        for i in sample:
            got = check_session(port, "gen-%d" % i, a.per)
            want = [b"g%d-m%d" % (i // a.fanout, j) for j in range(a.per)]
            if got != want:
                bad.append((i, len(got)))
        p.terminate()
        p.wait(30)
        print("sessions=%d queued=%d db_mb=%.0f generate_s=%.1f | restored sessions=%d "
              "subscriptions=%d expired=%s failed=%d restore_ms=%d accept_s=%.2f rss_mb=%d "
              "hwm_mb=%d rss_3s_mb=%d | sample=%d complete=%d"
              % (a.sessions, a.sessions * a.per, size_mb, gen_s, sessions, subs,
                 ex.group(1) if ex else "?", failed,
                 restore_ms, accept_s, at_accept["VmRSS"], at_accept["VmHWM"],
                 later["VmRSS"], len(sample), len(sample) - len(bad)))
        want = 0 if a.expired == "sessions" else a.sessions
        if bad or sessions != want or subs != want or failed:
            print("FAILED: incomplete sessions %r" % bad[:10])
            return 1
        return 0
    finally:
        if a.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
