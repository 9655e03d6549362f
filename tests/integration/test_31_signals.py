#!/usr/bin/python3
"""31: signals: SIGHUP reload, SIGTERM/SIGINT drain, SIGUSR1 log reopen.

docs/compatibility.md §1 and §5, docs/architecture.md "Shutdown":
- SIGHUP re-reads the file and its includes; connected clients stay
  connected and keep receiving; mqtt.* and auth.* (the password file too)
  take effect at once; a broken file leaves the running configuration
  untouched, the broker keeps serving, and the errors are logged with
  file:line; the log names each changed key and says which need a restart.
- SIGTERM and SIGINT: v5 clients get DISCONNECT 0x8B, every connection is
  closed, wills are published as for any server-side close, exit status 0
  within the drain bound, the pid file is removed.
- SIGUSR1 reopens the log file (after logrotate renamed it)."""

import os
import re
import signal
import socket
import threading
import time
import unittest

import nmq
import nmq_ops
from nmq import DISCONNECT, PUBLISH, free_port
from nmq_ops import (OpsTestCase, count_queued, drain_session, offline_subscriber, port_accepts,
                     publish_n, wait_for)


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq signal handling")
    nmq_ops.nanomq_bin()


class ReloadCase(OpsTestCase):
    """One broker per test, started from inst.conf(port, extra=...)."""

    EXTRA = ""

    def setUp(self):
        self.inst = self.instance()
        self.port = free_port()
        self.prepare()
        self.conf_path = self.inst.conf(self.port, extra=self.EXTRA)
        self.start_broker(self.inst, ["start", "--conf", self.conf_path], port=self.port)
        self.reloads = 0
        self.failed_reloads = 0

    def prepare(self):
        """Write files the configuration needs before the broker starts."""

    def rewrite(self, extra, port=None):
        self.inst.conf(port or self.port, extra=extra)

    def sighup(self, expect_ok=True, timeout=10.0):
        """Send SIGHUP and wait until the log says the reload ended."""
        if expect_ok:
            self.reloads += 1
            pat, n = r"event=reloaded", self.reloads
        else:
            self.failed_reloads += 1
            pat, n = r"event=reload_failed", self.failed_reloads
        self.inst.kill(signal.SIGHUP)
        found = self.inst.wait_output(pat, timeout, count=n)
        self.assertGreaterEqual(len(found), n, "no %r in the log after SIGHUP:\n%s"
                                % (pat, self.inst.output()[-3000:]))

    def assert_serving(self):
        self.assertIsNone(self.inst.proc.poll(), "broker exited:\n" + self.inst.output()[-3000:])
        c = self.client(self.port, "alive-%d" % time.monotonic_ns())
        self.assertEqual(c.connect(), 0)
        c.disconnect()

    def tearDown(self):
        if self.inst.proc.poll() is None:
            self.assert_stops(self.inst)


class TestReloadKeepsClients(ReloadCase):

    # Subscribers of both versions stay connected across reloads and receive
    # every QoS 1 message of a publisher that runs while five SIGHUPs arrive.
    def test_subscribers_keep_receiving_across_reloads(self):
        subs = []
        for v in (4, 5):
            s = self.client(self.port, "keeper-v%d" % v, version=v)
            s.connect()
            s.subscribe("r/#", 1)
            subs.append(s)
        pub = self.client(self.port, "reload-pub")
        pub.connect()
        n = 150
        errors = []

        def publish():
            try:
                for i in range(n):
                    pub.publish("r/t", b"%03d" % i, qos=1)
                    time.sleep(0.004)
            except Exception as e:  # reported below
                errors.append(e)
        t = threading.Thread(target=publish)
        t.start()
        for i in range(5):
            self.rewrite("mqtt.max_mqueue_len = %d" % (100 + i))
            self.sighup()
            time.sleep(0.05)
        t.join(30)
        self.assertEqual(errors, [])
        for s in subs:
            got = [m.payload for m in s.wait_messages(n, timeout=10)]
            self.assertEqual(got, [b"%03d" % i for i in range(n)])
            self.assertFalse(s.disconnected.is_set(), "a subscriber was disconnected by reload")


class TestReloadApplies(ReloadCase):
    EXTRA = "mqtt.max_mqueue_len = 3"

    # mqtt.max_mqueue_len 3 -> 6 by SIGHUP: applies to a session created
    # after the reload and to one that was already offline before it.
    def test_max_mqueue_len_applied(self):
        self.assertEqual(len(count_queued(self.port, "before", "mq/a", 10)), 3)
        offline_subscriber(self.port, "existing", "mq/b")
        self.rewrite("mqtt.max_mqueue_len = 6")
        self.sighup()
        self.assertEqual(len(count_queued(self.port, "after", "mq/c", 10)), 6)
        publish_n(self.port, "mq/b", 10)
        self.assertEqual(len(drain_session(self.port, "existing")), 6,
                         "the reloaded bound does not apply to an existing session")
        self.assertRegex(self.inst.output(), r"mqtt\.max_mqueue_len.*applied")


class TestReloadAuth(ReloadCase):
    EXTRA = ("auth {\n  allow_anonymous = true\n"
             "  password = {include \"pwd.conf\"}\n}\n")

    def prepare(self):
        self.inst.write("pwd.conf", "alice: one\n")

    def connect_rc(self, cid, user=None, pw=None):
        c = self.client(self.port, cid, username=user, password=pw)
        rc = c.connect(expect_rc=None)
        if rc == 0:
            c.disconnect()
        return rc

    # allow_anonymous true -> false, then a new password in the included
    # file; each takes effect at the next SIGHUP, and the log names the key.
    def test_allow_anonymous_and_password_file(self):
        self.assertEqual(self.connect_rc("anon1"), 0)
        self.assertEqual(self.connect_rc("alice1", "alice", "one"), 0)
        self.assertEqual(self.connect_rc("alice2", "alice", "bad"), 4)

        self.rewrite(self.EXTRA.replace("allow_anonymous = true", "allow_anonymous = false"))
        self.sighup()
        self.assertEqual(self.connect_rc("anon2"), 5)
        self.assertEqual(self.connect_rc("alice3", "alice", "one"), 0)
        self.assertRegex(self.inst.output(), r"auth\.allow_anonymous.*applied")

        self.inst.write("pwd.conf", "alice: two\n")
        self.sighup()
        self.assertEqual(self.connect_rc("alice4", "alice", "one"), 4)
        self.assertEqual(self.connect_rc("alice5", "alice", "two"), 0)
        self.assertRegex(self.inst.output(), r"auth\.password.*applied")


class TestBrokenReload(ReloadCase):
    EXTRA = "mqtt.max_mqueue_len = 3"

    # Each broken file: SIGHUP logs the error with file:line, the broker
    # keeps serving and keeps its subscribers, and the running configuration
    # stays (max_mqueue_len 3, although the broken file says 8). Fixing the
    # file and reloading again applies it.
    def test_broken_files_leave_running_configuration(self):
        sub = self.client(self.port, "broken-keeper")
        sub.connect()
        sub.subscribe("b/#", 1)
        cases = [
            ("syntax", "mqtt {\n  max_mqueue_len = 8\n", 1, None),
            ("bad value", "mqtt.max_mqueue_len = 8\nlog.level = loud\n", 2, "log.level"),
            ("out of range", "mqtt.max_mqueue_len = 8\nmqtt.keepalive_multiplier = 99\n", 2,
             "mqtt.keepalive_multiplier"),
            ("missing include", "mqtt.max_mqueue_len = 8\nauth.password = {include \"x.conf\"}\n",
             2, "x.conf"),
        ]
        # base_conf() ends with the extra text: line 1 of extra follows the
        # header's lines.
        head = len(nmq_ops.base_conf(self.port, self.inst.ipc_url, extra="X").splitlines()) - 1
        for i, (name, extra, line, key) in enumerate(cases):
            with self.subTest(case=name):
                self.rewrite(extra)
                self.sighup(expect_ok=False)
                out = self.inst.output()
                rx = r"nanomq\.conf:%d[:\d]*: " % (head + line)
                if key:
                    rx += ".*" + key.replace(".", r"\.")
                self.assertRegex(out, rx)
                self.assert_serving()
                publish_n(self.port, "b/x", 1, cid="broken-pub-%d" % i)
                self.assertIsNotNone(sub.wait_message(5), "subscriber lost after " + name)
                self.assertFalse(sub.disconnected.is_set())
                self.assertEqual(len(count_queued(self.port, "broken-%d" % i, "bq/%d" % i, 10)),
                                 3, "running configuration changed by a failed reload")
        self.rewrite("mqtt.max_mqueue_len = 5")
        self.sighup()
        self.assertEqual(len(count_queued(self.port, "fixed", "bq/fixed", 10)), 5)


class TestReloadReport(ReloadCase):
    EXTRA = "mqtt.max_mqueue_len = 3\nsystem.num_taskq_thread = 2"

    def changed_lines(self, start):
        return [l for l in self.inst.output()[start:].splitlines() if "changed" in l]

    # The log names each changed key: mqtt.* applied; listeners.tcp (a new
    # bind) and system.* need a restart. The old port keeps serving and the
    # new one is not opened. Unchanged keys are not named.
    def test_changed_and_restart_keys(self):
        new_port = free_port()
        mark = len(self.inst.output())
        self.inst.conf(new_port, extra="mqtt.max_mqueue_len = 4\nsystem.num_taskq_thread = 3")
        self.sighup()
        lines = self.changed_lines(mark)
        text = "\n".join(lines)

        def one(key):
            rx = re.compile(r"(?<![\w.])%s(?![\w.])" % re.escape(key))
            m = [l for l in lines if rx.search(l)]
            self.assertEqual(len(m), 1, "expected one line about %s:\n%s" % (key, text))
            return m[0]
        self.assertIn("applied", one("mqtt.max_mqueue_len"))
        self.assertIn("restart", one("listeners.tcp"))
        self.assertIn("restart", one("system.num_taskq_thread"))
        self.assertNotIn("max_packet_size", text)
        self.assertNotIn("log.level", text)
        self.assertTrue(port_accepts(self.port), "the running listener was closed")
        self.assertFalse(port_accepts(new_port), "a new bind was applied without a restart")
        self.assertEqual(len(count_queued(self.port, "rep", "rep/t", 10)), 4)

    # A second reload of a file whose bind change is still pending reports
    # it again: the comparison is against what runs, not against the last
    # file read (main.c's reload() means to keep the restart-only values of
    # the running configuration).
    def test_pending_restart_change_reported_again(self):
        new_port = free_port()
        base = "mqtt.max_mqueue_len = 3\nsystem.num_taskq_thread = 2"
        self.inst.conf(new_port, extra=base)
        self.sighup()
        mark = len(self.inst.output())
        self.sighup()
        self.assertTrue(any("listeners.tcp" in l and "restart" in l
                            for l in self.changed_lines(mark)),
                        "a pending restart-only change is no longer reported:\n%s"
                        % self.inst.output()[mark:])

    # Putting the bind back to the one that runs is not a change that needs
    # a restart: the running listener already has it.
    def test_revert_to_running_bind_is_not_a_change(self):
        new_port = free_port()
        base = "mqtt.max_mqueue_len = 3\nsystem.num_taskq_thread = 2"
        self.inst.conf(new_port, extra=base)
        self.sighup()
        mark = len(self.inst.output())
        self.inst.conf(self.port, extra=base)
        self.sighup()
        self.assertFalse(any("listeners.tcp" in l for l in self.changed_lines(mark)),
                         "reverting to the running bind is reported as a change:\n%s"
                         % self.inst.output()[mark:])
        self.assertTrue(port_accepts(self.port))


class TestStopSignals(OpsTestCase):

    def start(self, extra=""):
        inst = self.instance()
        port = free_port()
        self.start_broker(inst, ["start", "--conf", inst.conf(port, extra=extra)], port=port)
        return inst, port

    # SIGTERM and SIGINT: v5 clients get DISCONNECT 0x8B before the close,
    # v3.1.1 clients are closed, exit status 0 within the drain bound, the
    # pid file is removed and the port is closed; the log names the signal.
    def test_sigterm_and_sigint_drain(self):
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
            with self.subTest(signal=name):
                inst, port = self.start()
                self.assertTrue(os.path.exists(inst.pid_file))
                v5 = nmq.RawClient(port, 5)
                self.addCleanup(v5.close)
                self.assertEqual(v5.connect("drain-v5").rc, 0)
                v3 = nmq.RawClient(port, 4)
                self.addCleanup(v3.close)
                self.assertEqual(v3.connect("drain-v3").rc, 0)
                others = [nmq.RawClient(port, 4) for _ in range(30)]
                for i, c in enumerate(others):
                    self.addCleanup(c.close)
                    self.assertEqual(c.connect("drain-%d" % i).rc, 0)
                self.assert_stops(inst, sig=sig, within=8.0)
                pkts = v5.expect_closed(2.0)
                discs = [p for p in pkts if p.type == DISCONNECT]
                self.assertTrue(discs, "v5 client closed without DISCONNECT: %r" % pkts)
                self.assertEqual(discs[0].rc, 0x8B)
                self.assertEqual([p for p in v3.expect_closed(2.0) if p.type == DISCONNECT], [])
                self.assertFalse(os.path.exists(inst.pid_file), "pid file left behind")
                self.assertFalse(port_accepts(port))
                self.assertIn("signal=" + name, inst.output())

    # SIGTERM right after a client connected and left without a CONNECT:
    # a clean exit, status 0, nothing leaked (the sanitizers check that at
    # cleanup). Several rounds, because the window is narrow.
    def test_sigterm_right_after_a_connection(self):
        for i in range(40):
            with self.subTest(round=i):
                inst = self.instance()
                port = free_port()
                p = inst.start(["start", "--conf", inst.conf(port)], port=port)
                self.assertIsNone(p.poll(), inst.output(p))
                socket.create_connection((nmq.HOST, port)).close()
                self.assert_stops(inst, within=8.0)

    # docs/architecture.md "Shutdown": wills are published as for any
    # server-side close. A subscriber connected at the time therefore gets
    # the will of a client that is cut off by the shutdown (before its own
    # DISCONNECT 0x8B), and not the will of a client that had left
    # normally.
    def test_will_published_at_shutdown(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=int(sig)):
                inst, port = self.start()
                sub = nmq.RawClient(port, 5)
                self.addCleanup(sub.close)
                self.assertEqual(sub.connect("will-watcher").rc, 0)
                sub.subscribe([("will/#", 1)])
                gone = nmq.RawClient(port, 4)
                self.addCleanup(gone.close)
                gone.connect("will-polite", will={"topic": "will/polite", "payload": b"no",
                                                  "qos": 1})
                gone.disconnect()
                gone.expect_closed()
                w = nmq.RawClient(port, 4)
                self.addCleanup(w.close)
                self.assertEqual(w.connect("will-client", will={
                    "topic": "will/cut", "payload": b"cut off", "qos": 1}).rc, 0)
                self.assert_stops(inst, sig=sig, within=8.0)
                pkts = sub.expect_closed(2.0)
                kinds = [(p.type, getattr(p, "topic", None)) for p in pkts]
                pubs = [p for p in pkts if p.type == PUBLISH]
                self.assertEqual([p.topic for p in pubs], ["will/cut"],
                                 "packets before the close: %r" % kinds)
                self.assertEqual(pubs[0].payload, b"cut off")
                disc = [i for i, p in enumerate(pkts) if p.type == DISCONNECT]
                self.assertTrue(disc and disc[0] > pkts.index(pubs[0]),
                                "the will must come before DISCONNECT 0x8B: %r" % kinds)


class TestSigusr1(OpsTestCase):

    # SIGUSR1 after the log file was renamed: later lines go to a new file
    # at the configured path, none to the renamed one.
    def test_reopen_after_rename(self):
        inst = self.instance()
        port = free_port()
        conf = inst.conf(port, extra="log { to = [file], dir = \"%s\", file = \"broker.log\" }"
                         % inst.path("logs"))
        os.makedirs(inst.path("logs"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        live = inst.path("logs", "broker.log")
        rotated = inst.path("logs", "broker.log.0")

        def connect(cid):
            c = self.client(port, cid)
            c.connect()
            c.disconnect()
            c.close()

        def holds(path, needle):
            try:
                with open(path) as f:
                    return needle in f.read()
            except OSError:
                return False
        connect("usr1-before")
        self.assertTrue(wait_for(lambda: holds(live, "client_id=usr1-before")),
                        "connect line not in the log file")
        os.rename(live, rotated)
        inst.kill(signal.SIGUSR1)
        # The reopen happens on the main thread; connect until a line shows
        # up in the new file.
        n = [0]

        def attempt():
            n[0] += 1
            connect("usr1-after-%d" % n[0])
            return wait_for(lambda: holds(live, "client_id=usr1-after-%d" % n[0]), 0.5)
        self.assertTrue(wait_for(attempt, 8.0, 0.0), "no new log file after SIGUSR1")
        connect("usr1-final")
        self.assertTrue(wait_for(lambda: holds(live, "client_id=usr1-final")))
        self.assertFalse(holds(rotated, "client_id=usr1-final"), "line written to the old file")
        self.assertTrue(holds(rotated, "client_id=usr1-before"))
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
