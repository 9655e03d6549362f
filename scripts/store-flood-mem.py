#!/usr/bin/python3
"""RSS of the broker while a QoS 1 flood queues for offline persistent sessions.

Fills a store with SESSIONS offline persistent sessions gen-<i> (store_gen,
no queued rows), subscribed to gen/<i / FANOUT>/#, starts the broker on it
(sqlite { disk_cache_size = 4000000 }), then runs ROUNDS times

    nanomq_cli bench pub -p PORT -c PUBS -t 'gen/%i/x' -q 1 -L PER -I 0 -i 0 -s 64

and prints VmRSS before, 3 s after each round, and VmHWM. The broker
binary is --nanomq (default: the build's), so that two builds can be run
with the same store and load generator (docs/benchmarks.md, "Memory while
a million messages queue for absent clients").
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def vm(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) // 1024
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--nanomq", help="broker binary (default: the build's)")
    ap.add_argument("--sessions", type=int, default=100000)
    ap.add_argument("--fanout", type=int, default=1)
    ap.add_argument("--pubs", type=int, default=1000)
    ap.add_argument("--per", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--settle", type=float, default=3,
                    help="seconds after a round before VmRSS is read")
    ap.add_argument("--wrap", default="",
                    help="command the broker runs under (e.g. heaptrack -o FILE)")
    ap.add_argument("--env", action="append", default=[],
                    help="NAME=VALUE for the broker's environment")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    exe = a.nanomq or os.path.join(a.build, "src", "nanomq")
    gen = os.path.join(a.build, "tests", "tools", "store_gen")
    cli = os.path.join(a.build, "tools", "nanomq_cli", "nanomq_cli")
    for f in (exe, gen, cli):
        if not os.access(f, os.X_OK):
            raise SystemExit("missing %s" % f)
    tmp = tempfile.mkdtemp(prefix="nmq-floodmem-")
    db = os.path.join(tmp, "db")
    p = None
    try:
        subprocess.run([gen, db, str(a.sessions), "0", "64", str(a.fanout)],
                       check=True, stdout=subprocess.DEVNULL)
        port = free_port()
        conf = os.path.join(tmp, "nanomq.conf")
        with open(conf, "w") as f:
            f.write('listeners.tcp.bind = "127.0.0.1:%d"\n'
                    'system.cmd_ipc_url = "ipc://%s/cmd.ipc"\n'
                    "log { level = warn, to = [console] }\n"
                    'sqlite { mounted_file_path = "%s", disk_cache_size = 4000000 }\n'
                    % (port, tmp, db))
        env = dict(os.environ, NANOMQ_PID_FILE=os.path.join(tmp, "nanomq.pid"))
        for kv in a.env:
            k, _, v = kv.partition("=")
            env[k] = v
        log = open(os.path.join(tmp, "broker.log"), "w")
        pidfile = os.path.join(tmp, "nanomq.pid")
        p = subprocess.Popen(a.wrap.split() + [exe, "start", "--conf", conf], stdout=log,
                             stderr=subprocess.STDOUT, env=env, cwd=tmp)
        while True:
            if p.poll() is not None:
                log.flush()
                sys.stderr.write(open(os.path.join(tmp, "broker.log")).read()[-2000:])
                raise SystemExit("the broker exited (%s)" % p.returncode)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.01)
        time.sleep(2)
        with open(pidfile) as f:
            bpid = int(f.read().split()[0])
        before = vm(bpid)["VmRSS"]
        print("sessions=%d fanout=%d pubs=%d per=%d rss_before_mb=%d"
              % (a.sessions, a.fanout, a.pubs, a.per, before), flush=True)
        for r in range(a.rounds):
            t = time.monotonic()
            b = subprocess.run([cli, "bench", "pub", "-p", str(port), "-c", str(a.pubs),
                                "-t", "gen/%i/x", "-q", "1", "-L", str(a.per), "-I", "0",
                                "-i", "0", "-s", "64"], capture_output=True, text=True)
            secs = time.monotonic() - t
            last = [l.strip() for l in b.stdout.splitlines() if "msg/s" in l or "acked" in l][:1] or [""]
            time.sleep(a.settle)
            v = vm(bpid)
            print("round=%d bench_s=%.1f rss_mb=%d growth_mb=%d hwm_mb=%d | %s"
                  % (r + 1, secs, v["VmRSS"], v["VmRSS"] - before, v["VmHWM"], last[0]),
                  flush=True)
    finally:
        if p is not None and p.poll() is None:
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read().split()[0]), 15)
            except (OSError, ValueError):
                p.terminate()
            p.wait(30)
        if os.environ.get("KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
