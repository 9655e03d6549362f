#!/usr/bin/python3
"""33: the nanomq command line around a running broker (docs/compatibility.md §5).

- `nanomq stop`: SIGTERM through the pid file, exit 0 once the broker is
  gone; "not running" (exit 1) without a broker, and a stale pid file never
  gets a signal sent to whatever process has that pid now.
- `nanomq reload`: SIGHUP through the pid file when the command channel is
  off; over system.cmd_ipc_url otherwise, printing `reload succeed!` or
  `reload failed!` and the errors (file:line) with exit status 0 or 1.
- `nanomq restart`: stops the running broker and runs a new one.
- The pid file: a second broker on the same pid file refuses to start and
  names the running pid; a stale file (kill -9) does not block a start;
  brokers with different pid files run side by side.
- Side by side without settings: brokers started with different files get
  pid files and command channels derived from their file, and `nanomq
  reload|stop --conf F` reaches the broker started with F.
- `-d` (and system.daemon, NANOMQ_DAEMON): `start -d` returns 0 once the
  daemon serves (1 with the reason when it cannot), the pid file holds the
  daemon's pid, and `nanomq stop` stops it."""

import os
import re
import signal
import socket
import ssl
import subprocess
import time
import unittest

import nmq
import nmq_ops
from nmq import free_port
from nmq_ops import (OpsTestCase, count_queued, hold_port, port_accepts, publish_n, wait_for,
                     wait_port)


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq command line")
    nmq_ops.nanomq_bin()


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pid(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class CliCase(OpsTestCase):

    def setUp(self):
        self._brokers = []

    def tearDown(self):
        # Brokers still running at the end must stop cleanly.
        for inst, proc in self._brokers:
            if proc.poll() is None:
                self.assert_stops(inst, proc)

    def broker(self, extra="", enable_ipc=True, inst=None, level="info"):
        """A broker in the foreground; returns (inst, port, conf path)."""
        inst = inst or self.instance()
        port = free_port()
        conf = inst.conf(port, extra=extra, enable_ipc=enable_ipc, level=level)
        p = self.start_broker(inst, ["start", "--conf", conf], port=port)
        self._brokers.append((inst, p))
        return inst, port, conf

    def connect_rc(self, port, cid, user=None, pw=None):
        c = self.client(port, cid, username=user, password=pw)
        rc = c.connect(expect_rc=None)
        if rc == 0:
            c.disconnect()
        return rc

    def sleeper(self):
        """An unrelated live process (sleep 60), killed at cleanup."""
        p = subprocess.Popen(["sleep", "60"])
        self.addCleanup(lambda: (p.kill(), p.wait()))
        return p


class TestStop(CliCase):

    # `nanomq stop`: exit 0 with a message naming the pid, the broker exits
    # 0 within the bound, v5 clients get DISCONNECT 0x8B, the pid file goes.
    def test_stop(self):
        inst, port, conf = self.broker()
        pid = inst.proc.pid
        self.assertEqual(inst.read_pid_file(), pid)
        v5 = nmq.RawClient(port, 5)
        self.addCleanup(v5.close)
        self.assertEqual(v5.connect("stop-v5").rc, 0)
        t0 = time.monotonic()
        r = inst.run(["stop"])
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(str(pid), r.stdout + r.stderr)
        self.assertLess(took, 10.0)
        self.assertEqual(inst.proc.wait(5), 0)
        self.assertIn(0x8B, [p.rc for p in v5.expect_closed(2.0) if p.type == nmq.DISCONNECT])
        self.assertFalse(os.path.exists(inst.pid_file))
        self.assertFalse(port_accepts(port))

    # Without a broker: exit 1, "not running"; with a stale pid file naming
    # a live unrelated process: the same, and that process is left alone.
    def test_stop_not_running(self):
        inst = self.instance()
        r = inst.run(["stop"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("not running", r.stdout + r.stderr)
        other = self.sleeper()
        inst.write("nanomq.pid", "%d\n" % other.pid)
        r = inst.run(["stop"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("not running", r.stdout + r.stderr)
        time.sleep(0.2)
        self.assertIsNone(other.poll(), "nanomq stop signalled an unrelated process")


class TestReloadBySignal(CliCase):

    # enable_ipc_internal = false: `nanomq reload` sends SIGHUP through the
    # pid file (exit 0, "reload succeed!") and the new file takes effect.
    def test_reload_through_pid_file(self):
        inst, port, conf = self.broker("auth.allow_anonymous = true", enable_ipc=False)
        self.assertFalse(os.path.exists(inst.ipc_sock))
        self.assertEqual(self.connect_rc(port, "anon-1"), 0)
        inst.conf(port, extra="auth.allow_anonymous = false", enable_ipc=False)
        r = inst.run(["reload", "--conf", conf])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("reload succeed!", r.stdout)
        self.assertTrue(inst.wait_output(r"event=reloaded"), inst.output())
        self.assertEqual(self.connect_rc(port, "anon-2"), 5)
        self.assertEqual(inst.proc.poll(), None)

    # No broker: "reload failed!" and exit 1.
    def test_reload_not_running(self):
        inst = self.instance()
        conf = inst.conf(free_port(), enable_ipc=False)
        r = inst.run(["reload", "--conf", conf])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("reload failed!", r.stdout)
        self.assertIn("not running", r.stderr)


class TestRestart(CliCase):

    # `nanomq restart`: the running broker exits 0 and a new one (another
    # pid, the new file) serves; the pid file names the new one.
    def test_restart(self):
        inst, port, conf = self.broker("mqtt.max_mqueue_len = 3")
        old = inst.proc
        inst.conf(port, extra="mqtt.max_mqueue_len = 4")
        new = inst.start(["restart", "--conf", conf])
        self.assertEqual(old.wait(15), 0)
        self.assertTrue(wait_port(port), inst.output(new))
        self.assertTrue(wait_for(lambda: inst.read_pid_file() == new.pid))
        self.assertEqual(len(count_queued(port, "restarted", "rs/t", 10)), 4)
        self.assert_stops(inst, new)


class TestPidFile(CliCase):

    # A second broker on the same pid file (another port) refuses to start,
    # naming the running pid; its port never opens; the first keeps serving.
    def test_second_instance_refused(self):
        inst, port, conf = self.broker()
        first = inst.proc
        port2 = free_port()
        conf2 = inst.conf(port2, name="second.conf")
        out = self.assert_exits_1_without_port(inst, ["start", "--conf", conf2], port2)
        self.assertIn(str(first.pid), out)
        self.assertEqual(inst.read_pid_file(), first.pid)
        self.assertIsNone(first.poll())
        self.assertEqual(self.connect_rc(port, "still-first"), 0)
        self.assert_stops(inst, first)

    # kill -9 leaves the pid file behind; it does not block a new start,
    # which writes its own pid; `nanomq stop` then stops the new broker.
    def test_stale_pid_file_after_kill_9(self):
        inst, port, conf = self.broker()
        dead = inst.proc.pid
        inst.proc.kill()
        inst.proc.wait()
        self.assertEqual(inst.read_pid_file(), dead, "pid file should survive kill -9")
        p = self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertEqual(inst.read_pid_file(), p.pid)
        r = inst.run(["stop"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(p.wait(10), 0)

    # A pid file naming a live unrelated process, unlocked, is stale too:
    # the broker starts and the other process is left alone.
    def test_stale_pid_file_naming_live_process(self):
        inst = self.instance()
        other = self.sleeper()
        inst.write("nanomq.pid", "%d\n" % other.pid)
        inst2, port, conf = self.broker(inst=inst)
        self.assertEqual(inst.read_pid_file(), inst.proc.pid)
        self.assertIsNone(other.poll())
        self.assert_stops(inst)
        self.assertIsNone(other.poll())

    # Two brokers with their own pid files, ports and command channels run
    # side by side; messages do not cross; stopping one leaves the other.
    def test_side_by_side(self):
        a, pa, _ = self.broker()
        b, pb, _ = self.broker()
        self.assertNotEqual(a.read_pid_file(), b.read_pid_file())
        sa = self.client(pa, "side-a")
        sa.connect()
        sa.subscribe("side/#", 1)
        sb = self.client(pb, "side-b")
        sb.connect()
        sb.subscribe("side/#", 1)
        publish_n(pa, "side/x", 1, cid="side-pub-a")
        self.assertIsNotNone(sa.wait_message(5))
        sb.expect_no_message(0.5)
        r = a.run(["stop"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(a.proc.wait(10), 0)
        self.assertIsNone(b.proc.poll())
        publish_n(pb, "side/y", 1, cid="side-pub-b")
        self.assertIsNotNone(sb.wait_message(5))
        self.assert_stops(b)


class TestSideBySideDefaults(CliCase):
    """Two brokers started with different files, with neither
    NANOMQ_PID_FILE nor system.cmd_ipc_url: each gets a pid file and a
    command channel derived from its file (not NanoMQ's shared defaults),
    and `reload --conf F` / `stop --conf F` reach the broker of F only."""

    NOPID = {"NANOMQ_PID_FILE": None}

    def start_plain(self, inst, port, queue):
        conf = inst.write("site.conf", "listeners.tcp.bind = \"127.0.0.1:%d\"\n"
                          "log { level = info, to = [console] }\n"
                          "mqtt.max_mqueue_len = %d\n" % (port, queue))
        p = self.start_broker(inst, ["start", "--conf", conf], env=self.NOPID, port=port)
        self._brokers.append((inst, p))
        m = inst.wait_output(r"event=started .*pid_file=(\S+) cmd_ipc_url=(\S+)", 5.0)
        self.assertTrue(m, inst.output())
        return conf, m[0][0], m[0][1]

    def test_two_brokers_reload_and_stop_each(self):
        a, b = self.instance(), self.instance()
        pa, pb = free_port(), free_port()
        # The same file name in two directories: still two instances.
        conf_a, pid_a, ipc_a = self.start_plain(a, pa, 3)
        conf_b, pid_b, ipc_b = self.start_plain(b, pb, 3)
        self.assertNotEqual(pid_a, pid_b)
        self.assertNotEqual(ipc_a, ipc_b)
        for pid_file, ipc, proc in ((pid_a, ipc_a, a.proc), (pid_b, ipc_b, b.proc)):
            self.assertRegex(pid_file, r"^/tmp/nanomq/nanomq-site-[0-9a-f]{8}\.pid$")
            self.assertRegex(ipc, r"^ipc:///tmp/nanomq_cmd-site-[0-9a-f]{8}\.ipc$")
            self.assertEqual(a.read_pid_file(pid_file), proc.pid)

        # reload --conf A reloads A only.
        a.write("site.conf", "listeners.tcp.bind = \"127.0.0.1:%d\"\n"
                "log { level = info, to = [console] }\nmqtt.max_mqueue_len = 5\n" % pa)
        r = a.run(["reload", "--conf", conf_a], env=self.NOPID)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "reload succeed!")
        self.assertTrue(a.wait_output(r"event=reloaded", 5.0), a.output())
        self.assertEqual(b.wait_output(r"event=reloaded", 0.3), [], b.output())
        self.assertEqual(len(count_queued(pa, "side-qa", "side/qa", 10)), 5)
        self.assertEqual(len(count_queued(pb, "side-qb", "side/qb", 10)), 3)

        # reload --conf B reloads B only.
        b.write("site.conf", "listeners.tcp.bind = \"127.0.0.1:%d\"\n"
                "log { level = info, to = [console] }\nmqtt.max_mqueue_len = 4\n" % pb)
        r = b.run(["reload", "--conf", conf_b], env=self.NOPID)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(b.wait_output(r"event=reloaded", 5.0), b.output())
        self.assertEqual(len(a.wait_output(r"event=reloaded", 0.3)), 1)
        self.assertEqual(len(count_queued(pb, "side-qb2", "side/qb2", 10)), 4)

        # stop --conf A stops A only; then B.
        r = a.run(["stop", "--conf", conf_a], env=self.NOPID)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(a.proc.wait(10), 0)
        self.assertFalse(os.path.exists(pid_a))
        self.assertIsNone(b.proc.poll())
        self.assertTrue(port_accepts(pb))
        r = b.run(["stop", "--conf", conf_b], env=self.NOPID)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(b.proc.wait(10), 0)
        self.assertFalse(os.path.exists(pid_b))

    # The channel's address also comes from NANOMQ_CMD_IPC_URL or
    # --cmd_ipc_url, like any other key; reload finds it the same way.
    def test_cmd_ipc_url_env_and_option(self):
        inst = self.instance()
        port = free_port()
        conf = inst.write("nanomq.conf", nmq_ops.base_conf(port) + "mqtt.max_mqueue_len = 3\n")
        url = "ipc://" + inst.path("opt.ipc")
        p = self.start_broker(inst, ["start", "--conf", conf, "--cmd_ipc_url", url], port=port)
        self._brokers.append((inst, p))
        self.assertTrue(wait_for(lambda: os.path.exists(inst.path("opt.ipc")), 5.0))
        inst.write("nanomq.conf", nmq_ops.base_conf(port) + "mqtt.max_mqueue_len = 4\n")
        r = inst.run(["reload", "--conf", conf], env={"NANOMQ_CMD_IPC_URL": url})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "reload succeed!")
        self.assertNotIn("SIGHUP", r.stderr)
        self.assertEqual(len(count_queued(port, "ipc-env", "ipc/env", 10)), 4)


class TestDaemon(CliCase):

    def daemon_conf(self, inst, port, extra=""):
        return inst.conf(port, extra='log { to = [file], level = info, dir = "%s" }\n%s'
                         % (inst.tmp, extra))

    def started_daemon(self, inst, r):
        """Check a `start -d` result and return the daemon's pid."""
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        pid = inst.read_pid_file()
        self.assertIsNotNone(pid, "no pid file after start -d")
        self.addCleanup(kill_pid, pid)
        return pid

    # `start -d` returns 0 once the broker serves (the port accepts at
    # once), the pid file names the daemon (alive, in another session, not
    # our child), and `nanomq stop` stops it.
    def test_daemonize_and_stop(self):
        for how, args, env, extra in (
                ("-d", ["-d"], {}, ""),
                ("--daemon", ["--daemon"], {}, ""),
                ("system.daemon", [], {}, "system.daemon = true"),
                ("NANOMQ_DAEMON", [], {"NANOMQ_DAEMON": "true"}, "")):
            with self.subTest(how=how):
                inst = self.instance()
                port = free_port()
                conf = self.daemon_conf(inst, port, extra)
                p = subprocess.Popen([nmq_ops.nanomq_bin(), "start", "--conf", conf] + args,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, cwd=inst.tmp, env=inst.env(env))
                out, err = p.communicate(timeout=30)
                r = subprocess.CompletedProcess(p.args, p.returncode, out.decode(), err.decode())
                pid = self.started_daemon(inst, r)
                self.assertTrue(port_accepts(port), "start -d returned before the port was open")
                self.assertNotEqual(pid, p.pid)
                self.assertTrue(pid_alive(pid))
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    self.assertIn(b"nanomq", f.read())
                self.assertNotEqual(os.getsid(pid), os.getsid(0))
                c = self.client(port, "daemon-client")
                self.assertEqual(c.connect(), 0)
                c.disconnect()
                r = inst.run(["stop"])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertTrue(wait_for(lambda: not pid_alive(pid), 5.0))
                self.assertFalse(port_accepts(port))
                self.assertFalse(os.path.exists(inst.pid_file))
                with open(inst.path("nanomq.log")) as f:
                    log = f.read()
                self.assertIn("client_id=daemon-client", log)
                self.assertIn("event=stopped", log)

    # A daemon that cannot listen (the port is taken) makes `start -d` exit
    # 1 with the reason; a bad file fails before any fork.
    def test_daemon_start_failures(self):
        inst = self.instance()
        with hold_port() as held:
            conf = self.daemon_conf(inst, held.port)
            r = inst.run(["start", "--conf", conf, "-d"])
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertRegex(r.stderr, r"(?i)in use|%d" % held.port)
        self.assertTrue(wait_for(lambda: not os.path.exists(inst.pid_file), 3.0),
                        "pid file left behind by a daemon that failed to start")
        port = free_port()
        bad = inst.write("bad.conf", nmq_ops.base_conf(port, inst.ipc_url,
                                                       extra="mqtt.max_mqueue_len = -1"))
        r = inst.run(["start", "--conf", bad, "-d"])
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"bad\.conf:\d+: mqtt\.max_mqueue_len")
        self.assertFalse(port_accepts(port))

    # A relative --conf given at start is re-read by a later reload.
    def test_daemon_relative_conf_reload(self):
        inst = self.instance()
        port = free_port()
        self.daemon_conf(inst, port, "mqtt.max_mqueue_len = 3")
        r = inst.run(["start", "--conf", "nanomq.conf", "-d"], cwd=inst.tmp)
        pid = self.started_daemon(inst, r)
        self.assertEqual(len(count_queued(port, "rel-1", "rel/a", 10)), 3)
        self.daemon_conf(inst, port, "mqtt.max_mqueue_len = 5")
        os.kill(pid, signal.SIGHUP)
        def reloaded():
            with open(inst.path("nanomq.log")) as f:
                return "event=reloaded" in f.read()
        self.assertTrue(wait_for(reloaded))
        self.assertEqual(len(count_queued(port, "rel-2", "rel/b", 10)), 5)
        r = inst.run(["stop"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(wait_for(lambda: not pid_alive(pid), 5.0))


    # The daemon keeps the directory it was started in, so relative paths
    # in the file mean what they mean in the foreground: the log under
    # logs/, the TLS listener's certificate and key under pki/, at start
    # and at a reload. (It used to change to "/": the start failed with
    # "cannot open /logs/nanomq.log".)
    def test_daemon_relative_paths(self):
        inst = self.instance()
        port, sport = free_port(), free_port()
        os.mkdir(inst.path("logs"))
        subprocess.run(["bash", os.path.join(nmq_ops.SRC, "scripts", "gen-certs.sh"),
                        inst.path("pki")], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        extra = ('log { to = [file], level = info, dir = "logs" }\n'
                 'listeners.ssl { bind = "127.0.0.1:%d", certfile = "pki/server.crt",'
                 ' keyfile = "pki/server.key" }\n' % sport)
        inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url, extra=extra))
        r = inst.run(["start", "--conf", "nanomq.conf", "-d"], cwd=inst.tmp)
        pid = self.started_daemon(inst, r)
        with open("/proc/%d/cwd/nanomq.conf" % pid) as f:
            self.assertIn("listeners.ssl", f.read())

        def tls_ok():
            ctx = ssl.create_default_context(cafile=inst.path("pki", "ca.crt"))
            with socket.create_connection(("127.0.0.1", sport), 5) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as t:
                    return t.version() is not None
        self.assertTrue(tls_ok())
        os.kill(pid, signal.SIGHUP)

        def reloaded():
            with open(inst.path("logs", "nanomq.log")) as f:
                return "event=reloaded" in f.read()
        self.assertTrue(wait_for(reloaded))
        self.assertTrue(tls_ok())
        r = inst.run(["stop"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(wait_for(lambda: not pid_alive(pid), 5.0))


class TestCommandChannel(CliCase):
    """`nanomq reload` over system.cmd_ipc_url (docs/compatibility.md §1, §5). Skipped
    when the broker does not serve the channel (no socket file appears)."""

    def setUp(self):
        super().setUp()
        self.inst, self.port, self.conf = self.broker("mqtt.max_mqueue_len = 3")
        if not wait_for(lambda: os.path.exists(self.inst.ipc_sock), 1.0):
            self.skipTest("the broker does not serve system.cmd_ipc_url")

    def reload(self, *args, env=None):
        return self.inst.run(["reload"] + list(args), env=env)

    def head_lines(self):
        return len(nmq_ops.base_conf(self.port, self.inst.ipc_url, extra="X").splitlines()) - 1

    def thread_names(self):
        pid = self.inst.proc.pid
        names = []
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    names.append(f.read().strip())
            except OSError:
                pass  # a thread that just ended
        return sorted(names)

    # Serving the channel (and plain TCP) starts none of NNG's threads
    # (all named nng:...): the first use of NNG would start all of them (13
    # here). The broker runs main, one worker per core, the timer wheel and
    # the channel; a reload over the channel keeps it so.
    def test_no_nng_threads(self):
        names = self.thread_names()
        self.assertEqual([n for n in names if n.startswith("nng")], [], names)
        self.assertEqual(names.count("nmq:timer"), 1, names)
        workers = names.count("nmq:worker")
        self.assertGreaterEqual(workers, 1, names)
        # + main, timer, channel, the $SYS publisher (and ThreadSanitizer's
        # own thread in TSan builds)
        self.assertLessEqual(names.count("nmq:sys"), 1, names)
        self.assertLessEqual(len(names), workers + 5, names)
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 5")
        r = self.reload("--conf", self.conf)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.thread_names(), names)

    # The channel's socket file is private to the broker's user.
    def test_socket_mode(self):
        self.assertEqual(os.stat(self.inst.ipc_sock).st_mode & 0o777, 0o600)

    # A good file: "reload succeed!", exit 0, and the change is in force
    # when the command returns (no waiting for the log).
    def test_reload_succeed(self):
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 5")
        r = self.reload("--conf", self.conf)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "reload succeed!")
        self.assertEqual(len(count_queued(self.port, "ipc-ok", "ipc/ok", 10)), 5)

    # A relative --conf is taken relative to the command's own working
    # directory, not the broker's.
    def test_reload_relative_conf(self):
        os.makedirs(self.inst.path("sub"))
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 4", name="sub/rel.conf")
        r = self.inst.run(["reload", "--conf", "rel.conf"], cwd=self.inst.path("sub"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "reload succeed!")
        self.assertEqual(len(count_queued(self.port, "ipc-rel", "ipc/rel", 10)), 4)

    # A broken file named by --conf: validated here first, "reload failed!"
    # with file:line and key, exit 1; the broker is not touched.
    def test_reload_failed_local_validation(self):
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 8\nlog.level = loud")
        r = self.reload("--conf", self.conf)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("reload failed!", r.stdout)
        self.assertRegex(r.stderr, r"%s:%d: log\.level" % (re.escape(self.conf),
                                                           self.head_lines() + 2))
        self.assertNotIn("not starting", r.stderr)
        self.assertEqual(len(count_queued(self.port, "ipc-loc", "ipc/loc", 10)), 3)

    # The broker's own file is broken while the file this command reads
    # (NANOMQ_CONF_PATH, same channel) is fine: the broker's errors come
    # back over the channel: "reload failed!", the broker's file:line and
    # key, exit 1; the broker keeps its running configuration.
    def test_reload_failed_reported_by_broker(self):
        good = self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 3", name="client.conf")
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 8\nmqtt.max_packet_size = huge")
        r = self.reload(env={"NANOMQ_CONF_PATH": good})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("reload failed!", r.stdout)
        self.assertRegex(r.stderr, r"%s:%d: mqtt\.max_packet_size" % (re.escape(self.conf),
                                                                    self.head_lines() + 2))
        self.assertIsNone(self.inst.proc.poll())
        self.assertEqual(len(count_queued(self.port, "ipc-brk", "ipc/brk", 10)), 3)

    # --conf OTHER switches the broker to OTHER; a later SIGHUP re-reads
    # OTHER, not the file it started with.
    def test_reload_switches_file(self):
        other = self.inst.conf(self.port, extra="auth.allow_anonymous = false", name="other.conf")
        r = self.reload("--conf", other)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.connect_rc(self.port, "sw-1"), 5)
        self.inst.conf(self.port, extra="auth.allow_anonymous = true\nmqtt.max_mqueue_len = 6",
                       name="other.conf")
        n = len(self.inst.wait_output(r"event=reloaded", 0.1))
        self.inst.kill(signal.SIGHUP)
        self.assertTrue(self.inst.wait_output(r"event=reloaded", 5.0, count=n + 1))
        self.assertEqual(self.connect_rc(self.port, "sw-2"), 0)
        self.assertEqual(len(count_queued(self.port, "sw-q", "sw/q", 10)), 6)

    # A change that needs a restart is reported to the command line too.
    def test_restart_warning_reaches_client(self):
        self.inst.conf(free_port(), extra="mqtt.max_mqueue_len = 3")
        r = self.reload("--conf", self.conf)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("reload succeed!", r.stdout)
        self.assertRegex(r.stderr, r"listeners\.tcp.*restart")

    # Two brokers configured with the same channel address: the second
    # starts anyway (warning), the first keeps answering on it, and
    # `nanomq reload` for the second (its pid file) never reloads the
    # first: the channel's pid does not match, so SIGHUP goes to the second.
    def test_shared_channel_address(self):
        b = self.instance()
        port_b = free_port()
        conf_b = b.write("nanomq.conf", nmq_ops.base_conf(port_b, self.inst.ipc_url))
        self._brokers.append((b, self.start_broker(b, ["start", "--conf", conf_b], port=port_b)))
        a_reloads = len(self.inst.wait_output(r"event=reloaded", 0.1))
        r = b.run(["reload", "--conf", conf_b])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(b.wait_output(r"event=reloaded", 5.0), b.output())
        time.sleep(0.3)
        self.assertEqual(len(self.inst.wait_output(r"event=reloaded", 0.1)), a_reloads,
                         "the other broker was reloaded")
        self.inst.conf(self.port, extra="mqtt.max_mqueue_len = 4")
        r = self.reload("--conf", self.conf)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "reload succeed!")
        self.assertEqual(len(count_queued(self.port, "sh-q", "sh/q", 10)), 4)


if __name__ == "__main__":
    nmq.main()
