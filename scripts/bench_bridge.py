#!/usr/bin/python3
"""Bridge benchmarks for scripts/bench.sh: our broker's bridge beside
Mosquitto's, each forwarding to the same kind of remote (a fresh Debian
mosquitto on another loopback port), measured with `nanomq_cli bench`.

  fwd    N QoS 1 messages published to the local broker as fast as its
         window allows, forwarded through a live link; the rate at which
         they reach a subscriber on the remote, and the local broker's CPU
         per forwarded message.
  fwd_tls  as fwd, the link over TLS: the remote's TLS listener has the
         RSA 2048 server certificate of scripts/gen-certs.sh, which both
         bridges verify (CA file, address 127.0.0.1 in its names).
  drain  N QoS 1 messages published while the link is down (a proxy in
         front of the remote refuses connections), then the link comes up:
         seconds until the last one reaches the remote subscriber, and the
         local broker's CPU over the drain. Ours keeps the backlog in its
         offline cache (bridges.mqtt.cache, SQLite), 1,024 of them in
         memory (max_send_queue_len) and the rest read back from disk as
         acks free room; Mosquitto in memory.
  drain_mem  as drain, with ours allowed as many messages in memory as
         Mosquitto (max_send_queue_len = 2 N, Mosquitto's
         max_queued_messages): the backlog is also written through to the
         cache, and the drain reads nothing back.
  drain_nocache  as drain_mem, ours without the cache (memory only, like
         Mosquitto's): what the cache costs.
  drain_fastremote, drain_mem_fastremote  as drain and drain_mem, the
         remote being our broker (NANOMQ_BIN, no bridge, no store) instead
         of Debian's mosquitto, for both bridges: Debian's mosquitto is
         CPU-bound during a drain, so that the time on the link measures
         the remote; ours as the remote takes less CPU per message, so
         that the bridge under test is more of what is measured.

Usage: bench_bridge.py fwd|fwd_tls|drain|drain_mem|drain_nocache|drain_fastremote|drain_mem_fastremote
         nanomq|mosquitto N CLI NANOMQ_BIN WORKDIR [PIN...]
Prints one JSON object. PIN is a prefix for the local broker (taskset -c 0).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from bridge_util import FaultProxy  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid):
    """CPU seconds per thread name of process pid (its threads now)."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def main():
    mode, broker, n, cli, ours, work = sys.argv[1:7]
    if mode not in ("fwd", "fwd_tls", "drain", "drain_mem", "drain_nocache", "drain_fastremote",
                    "drain_mem_fastremote"):
        sys.exit("bench_bridge.py: unknown mode " + mode)
    pin = sys.argv[7:]
    n = int(n)
    label = mode
    fastremote = mode.endswith("_fastremote")
    if fastremote:
        mode = mode[:-len("_fastremote")]
    memq = n * 2 if mode != "drain" else 1024  # ours: messages held in memory
    cache = mode in ("drain", "drain_mem")
    if mode in ("drain_mem", "drain_nocache"):
        mode = "drain"
    tls = mode == "fwd_tls"
    if tls:
        mode = "fwd"
        # Readable by mosquitto, which drops root (WORKDIR may be 0700).
        certs = tempfile.mkdtemp(prefix="nmq-bench-certs-")
        subprocess.run(["bash", os.path.join(HERE, "gen-certs.sh"), certs], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.chmod(certs, 0o755)
        for f in os.listdir(certs):
            os.chmod(os.path.join(certs, f), 0o644)  # mosquitto drops root
    procs = []

    def start(args, log, pre=()):
        p = subprocess.Popen(list(pre) + args, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        procs.append(p)
        return p

    try:
        rport = free_port()
        if fastremote:
            # Our broker as the remote: not pinned (as the remote mosquitto
            # is not), its own pid file, nothing persisted.
            rconf = os.path.join(work, "remote-nanomq.conf")
            with open(rconf, "w") as f:
                f.write("listeners.tcp.bind = \"127.0.0.1:%d\"\nlog.level = warn\n"
                        "system.enable_ipc_internal = false\nmqtt.max_mqueue_len = %d\n"
                        % (rport, n * 2))
            renv = dict(os.environ, NANOMQ_PID_FILE=os.path.join(work, "remote-nanomq.pid"))
            remote = subprocess.Popen([ours, "start", "--conf", rconf],
                                      stdout=open(os.path.join(work, "r.log"), "wb"),
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=renv)
            procs.append(remote)
        else:
            with open(os.path.join(work, "remote.conf"), "w") as f:
                f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "max_queued_messages %d\nlog_dest none\n" % (rport, n * 2))
                if tls:
                    tport = free_port()
                    f.write("listener %d 127.0.0.1\ncertfile %s/server.crt\nkeyfile %s/server.key\n"
                            % (tport, certs, certs))
            remote = start(["mosquitto", "-c", os.path.join(work, "remote.conf")],
                           os.path.join(work, "r.log"))
        wait_port(rport)
        if tls:
            wait_port(tport)
        # The drain's outage: a proxy in front of the remote, refusing until
        # the backlog is in. The live link goes straight to the remote.
        px = FaultProxy(rport)
        bport = tport if tls else rport
        if mode == "drain":
            px.cut()
            t_down = time.monotonic()
            bport = px.port
        lport = free_port()
        if broker == "mosquitto":
            conf = os.path.join(work, "local-mosq.conf")
            with open(conf, "w") as f:
                f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "max_queued_messages %d\nmax_inflight_messages 20\nlog_dest none\n"
                        "connection b1\naddress 127.0.0.1:%d\ntopic bench/# out 1\n"
                        "cleansession false\nclientid b1-bench\nrestart_timeout 1 2\n"
                        "bridge_protocol_version mqttv311\nkeepalive_interval 10\n"
                        % (lport, n * 2, bport))
                if tls:
                    f.write("bridge_cafile %s/ca.crt\n" % certs)
            local = start(["mosquitto", "-c", conf], os.path.join(work, "l.log"), pin)
        else:
            conf = os.path.join(work, "local-nanomq.conf")
            with open(conf, "w") as f:
                f.write("listeners.tcp.bind = \"127.0.0.1:%d\"\nlog.level = warn\n"
                        "system.enable_ipc_internal = false\n"
                        "mqtt.max_mqueue_len = %d\n"
                        "bridges.mqtt.b1 {\n server = \"%s://127.0.0.1:%d\"\n"
                        " proto_ver = 4\n clientid = \"b1-bench\"\n keepalive = 10s\n"
                        " backoff_max = 2s\n max_send_queue_len = %d\n"
                        " forwards = [{ local_topic = \"bench/#\", remote_topic = \"\", qos = 1 }]\n"
                        "%s}\n" % (lport, n * 2, "tls+mqtt-tcp" if tls else "mqtt-tcp", bport,
                                    memq, ' ssl { cacertfile = "%s/ca.crt" }\n' % certs if tls else ""))
                if cache:
                    f.write("bridges.mqtt.cache { disk_cache_size = %d\n mounted_file_path = \"%s\" }\n"
                            % (n * 2, work))
            env = dict(os.environ, NANOMQ_PID_FILE=os.path.join(work, "nanomq.pid"))
            local = subprocess.Popen(list(pin) + [ours, "start", "--conf", conf],
                                     stdout=open(os.path.join(work, "l.log"), "wb"),
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            procs.append(local)
        wait_port(lport)
        time.sleep(1.0 if mode == "fwd" else 0.3)  # the link comes up (fwd)
        sub_out = os.path.join(work, "sub.json")
        sub = subprocess.Popen([cli, "bench", "sub", "-h", "127.0.0.1", "-p", str(rport),
                                "-t", "bench/br", "-q", "1", "-c", "1", "-i", "0", "--expect-pubs", "1",
                                "--expect-msgs", str(n), "--duration", "120", "--json",
                                "--progress", "0"],
                               stdout=open(sub_out, "wb"), stderr=subprocess.DEVNULL)
        procs.append(sub)
        time.sleep(0.5)
        t0 = time.monotonic()
        c0 = cpu_s(local.pid)
        r0 = cpu_s(remote.pid)
        th0 = thread_cpu_s(local.pid)
        pub = subprocess.run([cli, "bench", "pub", "-h", "127.0.0.1", "-p", str(lport), "-t",
                              "bench/br", "-q", "1", "-c", "1", "-i", "0", "-I", "0", "-L", str(n), "--json",
                              "--progress", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=300)
        t_pub = time.monotonic() - t0
        if mode == "drain":
            time.sleep(1.0)  # the last group commit; the link is still down
            down_s = time.monotonic() - t_down
            attempts_down = px.accepted
            t0 = time.monotonic()
            c0 = cpu_s(local.pid)
            r0 = cpu_s(remote.pid)
            p0 = sum(os.times()[:2])  # this process: the proxy's threads
            th0 = thread_cpu_s(local.pid)
            px.passed_at = None
            px.answered_at = None
            px.up()
        try:
            sub.wait(180)
        except subprocess.TimeoutExpired:
            sub.kill()
        t1 = time.monotonic()
        c1 = cpu_s(local.pid)
        r1 = cpu_s(remote.pid)
        p1 = sum(os.times()[:2])
        th1 = thread_cpu_s(local.pid)
        try:
            rep = json.loads(open(sub_out).read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            rep = {}
        got = rep.get("received", 0)
        up_at = (px.answered_at or px.passed_at) if mode == "drain" else None
        out = {"mode": label, "broker": broker, "messages": n, "received": got,
               "lost": rep.get("lost"), "duplicated": rep.get("duplicated"),
               "reordered": rep.get("reordered"),
               "publish_s": round(t_pub, 3), "seconds": round(t1 - t0, 3),
               # drain: from the remote's return to the link up (the
               # bridge's next connect attempt, both back off up to 2 s,
               # until the remote's CONNACK passes the proxy), then the
               # drain on the link
               "reconnect_s": round(up_at - t0, 3) if up_at else None,
               # drain: the bridge's connection attempts during the outage
               # (the proxy accepts and closes each)
               "attempts_down": attempts_down if mode == "drain" else None,
               "down_s": round(down_s, 3) if mode == "drain" else None,
               "link_s": round(t1 - up_at, 3) if up_at else None,
               "msg_per_s": round(got / (t1 - t0), 1) if t1 > t0 else 0,
               "broker_cpu_s": round(c1 - c0, 3),
               "cpu_us_per_msg": round((c1 - c0) * 1e6 / got, 2) if got else None,
               # the remote's CPU over the same window, and (drain) the
               # proxy's (this script's threads), both on the link's path
               "remote": "nanomq" if fastremote else "mosquitto",
               "remote_cpu_s": round(r1 - r0, 3),
               "proxy_cpu_s": round(p1 - p0, 3) if mode == "drain" else None,
               # the same window by thread name (nmq:store, nmq:worker, ...)
               "cpu_s_by_thread": {k: round(v - th0.get(k, 0.0), 3) for k, v in sorted(th1.items())
                                   if v - th0.get(k, 0.0) > 0}}
        print(json.dumps(out))
        px.close()
    finally:
        if tls:
            shutil.rmtree(certs, ignore_errors=True)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
