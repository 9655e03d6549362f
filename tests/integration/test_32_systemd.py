#!/usr/bin/python3
"""32: systemd (Type=notify) and logging.

The test plays systemd: it binds an AF_UNIX datagram socket, passes it in
NOTIFY_SOCKET (a path, or "@name" in the abstract namespace) and reads what
the broker sends (docs/compatibility.md §5, src/daemon/sd_notify.h):
- READY=1 once, and only when the listener accepts connections;
- RELOADING=1 with MONOTONIC_USEC=<now>, then READY=1, around a SIGHUP
  reload (also a failed one);
- STOPPING=1 at SIGTERM, before the exit;
- WATCHDOG=1 every WATCHDOG_USEC/2 (none without WATCHDOG_USEC, none when
  WATCHDOG_PID names another process).

Logging (docs/compatibility.md §2 and §5): log.to = [file] with log.dir/log.file writes
"<time> <level> <module>: key=value" lines to that file only; rotation.size
and rotation.count keep N rotated files; log.level filters (client connect
lines are info); NANOMQ_LOG_LEVEL overrides the file and --log_level
overrides both; --log_file adds a file target."""

import glob
import os
import re
import signal
import socket
import threading
import time
import unittest

import nmq
import nmq_ops
from nmq import free_port
from nmq_ops import OpsTestCase, port_accepts, wait_for


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq systemd notification and logging")
    nmq_ops.nanomq_bin()


class FakeSystemd:
    """A bound AF_UNIX datagram socket that records each notification with
    its arrival time (time.monotonic()) and whether the broker's port
    accepted a connection right when it arrived (checked for READY=1)."""

    def __init__(self, path, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            self.name = "@nmq-test-%d-%d" % (os.getpid(), time.monotonic_ns())
            self.sock.bind("\0" + self.name[1:])
        else:
            self.name = path
            self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.port = None
        self.msgs = []  # (time, text, port_open_at_ready)
        self.cv = threading.Condition()
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            now = time.monotonic()
            text = data.decode("utf-8", "replace")
            port_open = None
            if "READY=1" in text.split("\n") and self.port is not None:
                port_open = port_accepts(self.port, 1.0)
            with self.cv:
                self.msgs.append((now, text, port_open))
                self.cv.notify_all()

    def wait(self, pred, timeout=10.0, start=0):
        """Wait until some message at index >= start satisfies pred(text);
        return its index, or None."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for i in range(start, len(self.msgs)):
                    if pred(self.msgs[i][1]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)

    def texts(self):
        with self.cv:
            return [m[1] for m in self.msgs]

    def close(self):
        self._stop = True
        self._t.join(2)
        self.sock.close()


def has(line):
    return lambda text: line in text.split("\n")


class SystemdCase(OpsTestCase):

    def launch(self, watchdog_usec=None, watchdog_pid=None, abstract=False, extra=""):
        self.inst = self.instance()
        self.port = free_port()
        self.sd = FakeSystemd(self.inst.path("notify.sock"), abstract)
        self.addCleanup(self.sd.close)
        self.sd.port = self.port
        env = {"NOTIFY_SOCKET": self.sd.name}
        if watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        if watchdog_pid is not None:
            env["WATCHDOG_PID"] = str(watchdog_pid)
        self.conf_path = self.inst.conf(self.port, extra=extra)
        # Not waiting for the port: READY=1 is what tells systemd.
        self.proc = self.inst.start(["start", "--conf", self.conf_path], env=env)
        i = self.sd.wait(has("READY=1"))
        self.assertIsNotNone(i, "no READY=1 within 10 s; got %r\n%s"
                             % (self.sd.texts(), self.inst.output()[-2000:]))
        return i


class TestNotify(SystemdCase):

    # READY=1 comes once, when the port already accepts connections; STOPPING=1
    # comes at SIGTERM, before the exit (status 0).
    def test_ready_then_stopping(self):
        i = self.launch()
        self.assertTrue(self.sd.msgs[i][2], "READY=1 sent before the port accepted connections")
        before = [m[1] for m in self.sd.msgs[:i]]
        self.assertFalse(any("STOPPING=1" in t or "RELOADING=1" in t for t in before), before)
        c = self.client(self.port, "sd-client")
        self.assertEqual(c.connect(), 0)
        c.disconnect()
        time.sleep(0.3)
        self.assertEqual(sum(1 for t in self.sd.texts() if has("READY=1")(t)), 1)
        n = len(self.sd.msgs)
        self.inst.kill(signal.SIGTERM)
        j = self.sd.wait(has("STOPPING=1"), start=n)
        self.assertIsNotNone(j, "no STOPPING=1 after SIGTERM: %r" % self.sd.texts())
        self.proc.wait(10)
        self.assertEqual(self.proc.returncode, 0)
        self.assertLessEqual(self.sd.msgs[j][0], time.monotonic())
        self.assertFalse(any("READY=1" in t for t in self.sd.texts()[n:]))

    # The abstract-namespace form "@name" works too.
    def test_abstract_socket(self):
        i = self.launch(abstract=True)
        self.assertTrue(self.sd.msgs[i][2])
        c = self.client(self.port, "sd-abstract")
        self.assertEqual(c.connect(), 0)
        c.disconnect()
        self.assert_stops(self.inst)
        self.assertIsNotNone(self.sd.wait(has("STOPPING=1"), 2.0))

    # SIGHUP: RELOADING=1 with MONOTONIC_USEC close to now (CLOCK_MONOTONIC,
    # which is time.monotonic() here), then READY=1; the same around a reload
    # that fails on a broken file (the broker keeps running).
    def test_reloading_then_ready(self):
        self.launch()
        for name, text in (("good", "mqtt.max_mqueue_len = 7"), ("broken", "mqtt {\n")):
            with self.subTest(reload=name):
                self.inst.conf(self.port, extra=text)
                n = len(self.sd.msgs)
                sent = time.monotonic()
                self.inst.kill(signal.SIGHUP)
                r = self.sd.wait(has("RELOADING=1"), start=n)
                self.assertIsNotNone(r, "no RELOADING=1 after SIGHUP: %r" % self.sd.texts()[n:])
                fields = dict(l.split("=", 1) for l in self.sd.msgs[r][1].split("\n") if "=" in l)
                self.assertIn("MONOTONIC_USEC", fields)
                usec = int(fields["MONOTONIC_USEC"])
                self.assertLess(abs(usec / 1e6 - sent), 5.0,
                                "MONOTONIC_USEC %d is not CLOCK_MONOTONIC now (%.3f s)"
                                % (usec, sent))
                rd = self.sd.wait(has("READY=1"), start=r + 1)
                self.assertIsNotNone(rd, "no READY=1 after the reload: %r" % self.sd.texts()[n:])
                self.assertTrue(port_accepts(self.port))
        self.assert_stops(self.inst)


class TestWatchdog(SystemdCase):

    def pings(self, start=0):
        with self.sd.cv:
            return [m[0] for m in self.sd.msgs[start:] if has("WATCHDOG=1")(m[1])]

    # WATCHDOG_USEC=2000000: pings about every second (half of it), never
    # 2 s apart (systemd would kill the service), also across a reload.
    # The bounds sit between that and the failures they detect, with room
    # for a loaded machine (ASan, other tests on the same cores) that
    # delays the broker's ping or this reader by most of a second: a gap
    # of 1.8 s (a broker pinging at WATCHDOG_USEC gives >= 2 s), 3 to 9
    # pings in 5 s (one a second gives 5 or 6 with the SIGHUP's; a flood
    # gives far more), at most 2 pings closer than 0.1 s (the one the main
    # loop sends at the SIGHUP, and one more for a reader held up long
    # enough to take two at once).
    def test_watchdog_rate(self):
        self.launch(watchdog_usec=2000000)
        n = len(self.sd.msgs)
        time.sleep(2.0)
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 9")
        self.inst.kill(signal.SIGHUP)
        time.sleep(3.0)
        ts = self.pings(n)
        self.assertGreaterEqual(len(ts), 3, "too few pings: %d in 5 s" % len(ts))
        self.assertLessEqual(len(ts), 9, "too many pings: %d in 5 s" % len(ts))
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        self.assertLess(max(gaps), 1.8, "a gap of %.3f s between pings: %r" % (max(gaps), gaps))
        self.assertLessEqual(len([g for g in gaps if g < 0.1]), 2, "pings in a burst: %r" % gaps)
        self.assert_stops(self.inst)

    # No WATCHDOG_USEC, or WATCHDOG_PID naming another process: no pings.
    def test_no_watchdog(self):
        for name, kw in (("unset", {}), ("other pid", {"watchdog_usec": 200000,
                                                        "watchdog_pid": 1})):
            with self.subTest(case=name):
                self.launch(**kw)
                n = len(self.sd.msgs)
                time.sleep(1.0)
                self.assertEqual(self.pings(n), [])
                self.assert_stops(self.inst)
                self.sd.close()


LINE_RX = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (trace|debug|info |warn |error|fatal)"
                     r" [\w.-]+: ")


class TestLogging(OpsTestCase):

    def start(self, log, args=(), env=None):
        inst = self.instance()
        port = free_port()
        conf = inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url).replace(
            "log { level = info, to = [console] }\n", log + "\n"))
        self.start_broker(inst, ["start", "--conf", conf] + list(args), env=env, port=port)
        return inst, port

    def connect(self, port, cid):
        c = self.client(port, cid)
        c.connect()
        c.disconnect()
        c.close()

    @staticmethod
    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""

    # log.to = [file]: key=value lines in dir/file, nothing on the console.
    def test_file_target(self):
        inst = self.instance()
        os.makedirs(inst.path("logs"))
        inst2, port = self.start('log { to = [file], level = info, dir = "%s", file = "b.log" }'
                                 % inst.path("logs"))
        self.connect(port, "file-client")
        path = inst.path("logs", "b.log")
        self.assertTrue(wait_for(lambda: "client_id=file-client" in self.read(path)),
                        "no connect line in %s" % path)
        lines = self.read(path).splitlines()
        self.assertTrue(lines)
        for l in lines:
            self.assertRegex(l, LINE_RX)
        conn = [l for l in lines if "client_id=file-client" in l and "event=connected" in l]
        self.assertEqual(len(conn), 1, lines)
        self.assertRegex(conn[0], r" info  \w+: .*peer=127\.0\.0\.1:\d+")
        self.assertTrue(any("event=started" in l for l in lines))
        self.assertNotIn("file-client", inst2.output(), "console got lines with to = [file]")
        self.assert_stops(inst2)
        self.assertIn("event=stopped", self.read(path))

    # rotation.size = 1KB, count = 2: the live file and .1 and .2, each at
    # most 1 KB; no .3. The newest lines are in the live file.
    def test_rotation(self):
        inst = self.instance()
        inst2, port = self.start(
            'log { to = [file], level = info, dir = "%s", file = "r.log"\n'
            '  rotation { size = 1KB, count = 2 } }' % inst.tmp)
        for i in range(40):
            self.connect(port, "rot-%02d" % i)
        live = inst.path("r.log")
        self.assertTrue(wait_for(lambda: "client_id=rot-39" in self.read(live)))
        files = sorted(glob.glob(inst.path("r.log*")))
        self.assertEqual(files, [live, live + ".1", live + ".2"], files)
        for f in files:
            self.assertLessEqual(os.path.getsize(f), 1024, f)
            for l in self.read(f).splitlines():
                self.assertRegex(l, LINE_RX)
        self.assertIn("client_id=rot-38", self.read(live) + self.read(live + ".1"))
        self.assertNotIn("client_id=rot-00 ", self.read(live) + " ")
        self.assert_stops(inst2)

    # log.level filtering: info shows connect lines and the lifecycle lines
    # (started, stopping, stopped); warn and error hide both (systemd
    # records start and stop itself, from READY=1 and STOPPING=1).
    def test_level_filtering(self):
        for level, connect_shown, start_shown in (("info", True, True), ("warn", False, False),
                                                  ("error", False, False)):
            with self.subTest(level=level):
                inst, port = self.start("log { to = [console], level = %s }" % level)
                self.connect(port, "lvl-" + level)
                self.connect(port, "lvl-marker-" + level)
                self.assert_stops(inst)
                out = inst.output()
                self.assertEqual("client_id=lvl-" + level + " " in out, connect_shown, out)
                self.assertEqual("event=started" in out, start_shown, out)
                self.assertEqual("event=stopping" in out, start_shown, out)
                self.assertEqual("event=stopped" in out, start_shown, out)

    # Precedence for log.level: file < NANOMQ_LOG_LEVEL < --log_level.
    def test_level_precedence(self):
        cases = [
            ("file warn, --log_level info", "warn", {}, ["--log_level", "info"], True),
            ("file info, --log_level warn", "info", {}, ["--log_level", "warn"], False),
            ("file warn, env info", "warn", {"NANOMQ_LOG_LEVEL": "info"}, [], True),
            ("file info, env warn, --log_level info", "info", {"NANOMQ_LOG_LEVEL": "warn"},
             ["--log_level=info"], True),
            ("file warn, env info, --log_level warn", "warn", {"NANOMQ_LOG_LEVEL": "info"},
             ["--log_level", "warn"], False),
        ]
        for name, file_level, env, args, shown in cases:
            with self.subTest(case=name):
                inst, port = self.start("log { to = [console], level = %s }" % file_level,
                                        args=args, env=env)
                self.connect(port, "prec-log")
                self.assert_stops(inst)
                self.assertEqual("client_id=prec-log " in inst.output(), shown, inst.output())

    # --log_file adds a file target next to the console; --log_level with an
    # unknown word is refused.
    def test_log_file_option(self):
        inst = self.instance()
        path = inst.path("cli.log")
        inst2, port = self.start("log { to = [console], level = info }",
                                 args=["--log_file", path])
        self.connect(port, "cli-file")
        self.assertTrue(wait_for(lambda: "client_id=cli-file" in self.read(path)))
        self.assertTrue(wait_for(lambda: "client_id=cli-file" in inst2.output()))
        self.assert_stops(inst2)
        r = inst2.run(["start", "--conf", inst2.path("nanomq.conf"), "--log_level", "loud"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("log_level", r.stderr)

    # A log directory that does not exist is an error at startup naming it;
    # the failed start leaves no pid file.
    def test_log_dir_missing(self):
        inst = self.instance()
        port = free_port()
        conf = inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url).replace(
            "to = [console]", 'to = [file], dir = "%s"' % inst.path("nope", "deeper")))
        out = self.assert_exits_1_without_port(inst, ["start", "--conf", conf], port)
        self.assertIn(inst.path("nope", "deeper"), out)
        self.assertFalse(os.path.exists(inst.pid_file), "pid file left behind")


if __name__ == "__main__":
    nmq.main()
