"""Helpers for the tests of operating the broker (test_30..test_33).

nmq.Broker runs one broker with a fixed configuration header; these tests
need more control: the exact configuration text (or none), environment
variables, command-line options, several processes on one pid file, the
`stop`/`reload`/`start -d` commands, and sanitizer reports from daemons,
whose stderr is /dev/null.  So this module provides

* Instance: one temporary directory with its own pid file and command
  channel address, able to write files there, start `nanomq` in the
  background, run short `nanomq` commands, signal and stop the broker, read
  its output, and find sanitizer reports (ASan and UBSan write them to files
  in the directory, `log_path`, so daemons are covered too).
* OpsTestCase: a unittest.TestCase whose instance() factory registers a
  cleanup that kills anything left running and fails the test on a
  sanitizer report.
* Small waits: wait_port(), port_accepts(), wait_for(), hold_port().

Only the standard library and the harness nmq.py are used.
"""

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import nmq
from nmq import HOST

SRC = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))

# Variables of the inherited environment that would change what the broker
# reads (the test runner's NANOMQ_BIN included, which the broker ignores
# anyway) or make it talk to a real systemd.
_SCRUB_PREFIXES = ("NANOMQ_",)
_SCRUB_NAMES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID")


def nanomq_bin():
    b = nmq._find_nanomq()
    if not b or not os.access(b, os.X_OK):
        raise unittest.SkipTest("NANOMQ_BIN is not set or not executable (%r)" % b)
    return b


def port_accepts(port, timeout=0.5):
    """True when something accepts a TCP connection on 127.0.0.1:port."""
    try:
        socket.create_connection((HOST, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def wait_for(pred, timeout=5.0, step=0.05):
    """Poll pred() until it returns a true value; return that value, or the
    last (false) value after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def wait_port(port, timeout=10.0):
    return wait_for(lambda: port_accepts(port), timeout)


class hold_port:
    """Context manager: listen on 127.0.0.1:port (a free one by default) so
    that nobody else can bind it; .port is the number."""

    def __init__(self, port=0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, port))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


def base_conf(port, ipc_url=None, level="info", extra="", enable_ipc=True):
    """The usual configuration header: one TCP listener, a private command
    channel, console logging at level; then extra."""
    text = "listeners.tcp.bind = \"%s:%d\"\n" % (HOST, port)
    if ipc_url:
        text += "system.cmd_ipc_url = \"%s\"\n" % ipc_url
        text += "system.hook_ipc_url = \"%s.hook\"\n" % ipc_url
    if not enable_ipc:
        text += "system.enable_ipc_internal = false\n"
    text += "log { level = %s, to = [console] }\n" % level
    return text + extra + "\n"


class Instance:
    """A temporary directory for one broker (or one pid file shared by a few
    processes): pid file, command channel, files, processes, output."""

    def __init__(self, tmp=None, prefix="nmq-ops-"):
        self.tmp = tmp or tempfile.mkdtemp(prefix=prefix)
        self.pid_file = os.path.join(self.tmp, "nanomq.pid")
        self.ipc_sock = os.path.join(self.tmp, "cmd.ipc")
        self.ipc_url = "ipc://" + self.ipc_sock
        self.procs = []
        self.proc = None
        self._n = 0
        self.out_path = None
        self.err_path = None

    # -- files -------------------------------------------------------------
    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def write(self, name, text):
        p = self.path(name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        return p

    def conf(self, port, level="info", extra="", name="nanomq.conf", enable_ipc=True):
        """Write base_conf(port, ...) to name; return its path."""
        return self.write(name, base_conf(port, self.ipc_url, level, extra, enable_ipc))

    # -- environment -------------------------------------------------------
    def env(self, extra=None, pid_file=None):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(_SCRUB_PREFIXES) and k not in _SCRUB_NAMES}
        e["NANOMQ_PID_FILE"] = pid_file or self.pid_file
        asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        ubsan = os.environ.get("UBSAN_OPTIONS", "print_stacktrace=1")
        e["ASAN_OPTIONS"] = asan + ":log_path=" + self.path("asan")
        e["UBSAN_OPTIONS"] = ubsan + ":log_path=" + self.path("ubsan")
        if extra:
            e.update(extra)
        # A value of None removes the variable (e.g. NANOMQ_PID_FILE, to
        # test the broker's own default).
        return {k: v for k, v in e.items() if v is not None}

    # -- processes ---------------------------------------------------------
    def start(self, args, env=None, port=None, timeout=15.0, cwd=None):
        """Run `nanomq ARGS` in the background with stdout and stderr to
        files.  With port, wait until the port accepts connections or the
        process exits.  Returns the Popen (also self.proc)."""
        self._n += 1
        self.out_path = self.path("stdout.%d.log" % self._n)
        self.err_path = self.path("stderr.%d.log" % self._n)
        out = open(self.out_path, "wb")
        err = open(self.err_path, "wb")
        p = subprocess.Popen([nanomq_bin()] + list(args), stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, cwd=cwd or self.tmp,
                             env=self.env(env))
        out.close()
        err.close()
        p.out_path, p.err_path = self.out_path, self.err_path
        self.procs.append(p)
        self.proc = p
        if port is not None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and p.poll() is None:
                if port_accepts(port, 0.2):
                    break
                time.sleep(0.03)
        return p

    def run(self, args, env=None, timeout=45.0, cwd=None):
        """Run `nanomq ARGS` to completion; return the CompletedProcess
        (text stdout and stderr)."""
        return subprocess.run([nanomq_bin()] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              cwd=cwd or self.tmp, env=self.env(env), timeout=timeout,
                              universal_newlines=True)

    def kill(self, sig, proc=None):
        (proc or self.proc).send_signal(sig)

    def stop(self, proc=None, sig=signal.SIGTERM, timeout=15.0):
        """Signal the broker and wait for it.  Returns (exit status, seconds
        it took); the status is None when it did not exit (it is then
        killed)."""
        p = proc or self.proc
        if p.poll() is not None:
            return p.returncode, 0.0
        t0 = time.monotonic()
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return None, time.monotonic() - t0
        return p.returncode, time.monotonic() - t0

    def output(self, proc=None):
        """stdout + stderr of a process started with start() so far."""
        p = proc or self.proc
        text = ""
        for path in (p.err_path, p.out_path):
            try:
                with open(path, "rb") as f:
                    text += f.read().decode("utf-8", "replace")
            except OSError:
                pass
        return text

    def wait_output(self, pattern, timeout=5.0, proc=None, count=1):
        """Wait until the output holds count matches of the regex pattern;
        return the list of matches (shorter than count on timeout)."""
        rx = re.compile(pattern, re.M)

        def found():
            m = rx.findall(self.output(proc))
            return m if len(m) >= count else None
        return wait_for(found, timeout) or rx.findall(self.output(proc))

    def read_pid_file(self, path=None):
        try:
            with open(path or self.pid_file) as f:
                return int(f.read().strip() or "0")
        except (OSError, ValueError):
            return None

    # -- checks ------------------------------------------------------------
    def sanitizer_reports(self):
        """Texts of every sanitizer report: the log_path files, and markers in
        the captured outputs."""
        reports = []
        for p in sorted(glob.glob(self.path("asan.*")) + glob.glob(self.path("ubsan.*"))):
            with open(p, "rb") as f:
                reports.append("%s:\n%s" % (p, f.read().decode("utf-8", "replace")[:4000]))
        for p in self.procs:
            text = self.output(p)
            for m in nmq.SANITIZER_MARKERS:
                if m in text:
                    reports.append("%s:\n%s" % (p.err_path, text[-4000:]))
                    break
        return reports

    def cleanup(self):
        """Kill what still runs; return the sanitizer reports."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        return self.sanitizer_reports()

    def remove(self):
        if not nmq.KEEP_TMP:
            shutil.rmtree(self.tmp, ignore_errors=True)


class OpsTestCase(unittest.TestCase):
    """A TestCase with Instance factories that clean up after the test and
    fail it when a sanitizer reported anything."""

    def instance(self, **kw):
        inst = Instance(**kw)

        def done():
            reports = inst.cleanup()
            if reports:
                raise AssertionError("sanitizer report:\n" + "\n".join(reports))
            inst.remove()
        self.addCleanup(done)
        return inst

    def client(self, port, client_id, version=4, **kw):
        c = nmq.PahoClient(port, client_id, version=version, **kw)
        self.addCleanup(c.close)
        return c

    def start_broker(self, inst, args, env=None, port=None, timeout=15.0):
        """inst.start(); with port, fail the test unless the port accepts
        connections and an MQTT client gets its CONNACK."""
        p = inst.start(args, env=env, port=port, timeout=timeout)
        if port is not None:
            if not port_accepts(port):
                self.fail("broker did not accept connections on port %d (exit status %s)\n%s"
                          % (port, p.poll(), inst.output(p)[-3000:]))
            # One MQTT round trip: the listener has then handed over the
            # probe connections above and waits for the next one.
            r = nmq.RawClient(port, 4)
            try:
                self.assertEqual(r.connect("ops-probe-%d" % time.monotonic_ns()).rc, 0)
                r.disconnect()
                r.expect_closed()
            finally:
                r.close()
        return p

    def assert_stops(self, inst, proc=None, sig=signal.SIGTERM, within=10.0):
        """Signal the broker and assert a clean exit (status 0) within
        `within` seconds."""
        rc, took = inst.stop(proc, sig, timeout=within + 5)
        self.assertIsNotNone(rc, "broker did not exit within %.0f s of signal %d\n%s"
                             % (within + 5, sig, inst.output(proc)[-3000:]))
        self.assertEqual(rc, 0, "broker exited with %s after signal %d\n%s"
                         % (rc, sig, inst.output(proc)[-3000:]))
        self.assertLess(took, within, "broker took %.1f s to exit" % took)

    def assert_exits_1_without_port(self, inst, args, port, env=None, timeout=15.0):
        """Run `nanomq ARGS` expecting a refusal: exit status 1, and port
        never accepted a connection while it ran.  Returns its output."""
        p = inst.start(args, env=env)
        seen_open = False
        deadline = time.monotonic() + timeout
        while p.poll() is None and time.monotonic() < deadline:
            if port is not None and port_accepts(port, 0.1):
                seen_open = True
            time.sleep(0.02)
        if p.poll() is None:
            p.kill()
            p.wait()
            self.fail("nanomq %s kept running\n%s" % (" ".join(args), inst.output(p)[-2000:]))
        out = inst.output(p)
        self.assertEqual(p.returncode, 1, "exit status %s, expected 1\n%s" % (p.returncode, out))
        self.assertFalse(seen_open, "port %s accepted a connection before the refusal" % port)
        return out


def offline_subscriber(port, cid, topic, version=4):
    """Make cid a persistent QoS 1 subscriber of topic and take it offline
    (DISCONNECT; v5 with a 300 s Session Expiry Interval)."""
    r = nmq.RawClient(port, version)
    try:
        ack = r.connect(cid, **_session_kw(version))
        assert ack.rc == 0, "CONNACK refused: %r" % ack
        r.subscribe([(topic, 1)])
        r.disconnect()
        r.expect_closed()
    finally:
        r.close()


def publish_n(port, topic, n, cid="ops-pub", qos=1):
    """Publish n messages b"000", b"001", ... and wait for their acks."""
    pub = nmq.PahoClient(port, cid)
    pub.connect()
    try:
        for i in range(n):
            pub.publish(topic, b"%03d" % i, qos=qos)
        pub.disconnect()
    finally:
        pub.close()


def drain_session(port, cid, version=4, quiet=1.0):
    """Reconnect cid (clean start 0), acknowledge and return the payloads
    that arrive until nothing comes for `quiet` seconds."""
    r = nmq.RawClient(port, version)
    try:
        ack = r.connect(cid, **_session_kw(version))
        assert ack.rc == 0 and ack.session_present, "session not resumed: %r" % ack
        got = []
        while True:
            try:
                p = r.expect(nmq.PUBLISH, quiet)
            except nmq.RecvTimeout:
                break
            got.append(p.payload)
            r.ack(p)
        r.disconnect()
        return got
    finally:
        r.close()


def _session_kw(version):
    kw = {"clean": False}
    if version == 5:
        kw["props"] = {"SessionExpiryInterval": 300}
    return kw


def count_queued(port, cid, topic, n, version=4):
    """Offline persistent subscriber cid, n QoS 1 messages published on
    topic, then the payloads it gets when it comes back (in order)."""
    offline_subscriber(port, cid, topic, version)
    publish_n(port, topic, n, cid + "-pub")
    return drain_session(port, cid, version)
