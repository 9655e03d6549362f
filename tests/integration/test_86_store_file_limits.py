#!/usr/bin/python3
"""86: the durable store against the limits of the files it writes, as a
user sets them up.

* A file size limit (`ulimit -f`, RLIMIT_FSIZE): a write past it fails
  with EFBIG, and the kernel's SIGXFSZ, whose default action kills the
  process, must not end the broker (it did: "File size limit exceeded").
  The commit that could not be written fails like one on a full disk: its
  messages get no success ack, the broker goes on, and after a restart
  without the limit exactly the acknowledged messages are there.
* A database file the broker's user cannot write (left by a run as
  another user) in a directory it can: SQLite opened it read-only without
  a word and the first write failed, so the broker refused to start with
  "not an error". Like a directory that cannot be written, it starts
  without the store, logs at error naming the file and the key, and
  leaves the file as it is.
* A full disk at startup, after a kill -9 (the rows held back for
  connected subscribers, the sessions stored online) and after a clean
  stop (no WAL: SQLite cannot make its shared-memory file): the good file
  was taken for a damaged one and moved aside ("not a database",
  "damaged"), its sessions and queued messages lost to the next start.
  Now it is left unchanged and the broker refuses to start, saying the
  disk is full; once there is room it starts with everything.
* A relative `mounted_file_path` with the broker started as a daemon
  (`start -d`): the daemon ran in "/", and the store went there (a
  directory under "/"), not under the directory it was started from
  where a foreground run finds it. It is now the start directory's (the
  daemon keeps its working directory)."""

import os
import resource
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import Broker, BrokerError, RawClient  # noqa: E402
from test_70_store import StoreCase, store_conf as nmq_store_conf  # noqa: E402
from test_77_store_audit import TmpfsCase  # noqa: E402
import nmq_ops  # noqa: E402
from test_33_cli import kill_pid, pid_alive  # noqa: E402


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class TestFileSizeLimit(StoreCase):
    LIMIT = 1 << 20  # bytes, for every file the broker writes

    def start_limited(self):
        # The child inherits the limit (subprocess restores SIGXFSZ to its
        # default action before the exec, as a shell does).
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.LIMIT, hard))
        try:
            return self.start()
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    def test_no_success_ack_past_the_limit_and_no_crash(self):
        b = self.start_limited()
        sub = self.client(b, "offline")
        sub.connect()
        sub.subscribe("fsz/#", qos=1)
        sub.disconnect()
        pub = RawClient(b.port, 5)
        self.addCleanup(pub.close)
        self.assertEqual(pub.connect("filler").rc, 0)
        acked, refused = [], 0
        pad = b"x" * 4000
        for i in range(400):  # ~1.6 MB into a 1 MB limit
            a = pub.publish("fsz/1", b"%d|" % i + pad, qos=1, timeout=10)
            if a.rc == 0:
                acked.append(i)
            else:
                self.assertEqual(a.rc, 0x80, "reason of a refused PUBACK")
                refused += 1
                if refused >= 20:
                    break
        self.assertTrue(b.alive(), "the broker died past the file size limit:\n"
                        + b.log_tail(20))
        self.assertGreater(refused, 0, "the limit was never reached")
        self.assertIn("event=commit_failed", b.log_text())
        pub.close()
        self.assertEqual(b.stop(), [])

        b2 = self.start()
        c = self.client(b2, "offline")
        c.connect()
        got = c.wait_messages(len(acked), timeout=10)
        ids = [int(m.payload.split(b"|")[0]) for m in got]
        self.assertEqual(ids, acked)



class NobodyBroker(Broker):
    """The broker run as the user nobody (the tests run as root, to whom
    every file is writable)."""

    def command(self):
        os.chmod(self.tmp, 0o777)  # its pid file and command socket
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + super().command()


class TestUnwritableFile(StoreCase):
    def test_starts_without_the_store_and_leaves_the_file(self):
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            self.skipTest("needs root and setpriv to run the broker as another user")
        b = self.start()  # as root: the file is root's, 0644
        s = self.client(b, "kept")
        s.connect()
        s.subscribe("perm/#", qos=1)
        s.disconnect()
        self.assertEqual(b.stop(), [])
        os.chmod(self.db_dir, 0o777)  # the directory is writable by anyone
        db = os.path.join(self.db_dir, "nanomq.db")
        before = os.listdir(self.db_dir), os.path.getsize(db)

        b2 = NobodyBroker(nmq_store_conf(self.db_dir))
        self.brokers.append(b2)
        b2.start()
        self.assertTrue(b2.alive())
        self.assertRegex(b2.log_text(), r"error store: event=store_disabled reason=\"store: "
                         + db + r": the file cannot be written \(Permission denied\)\" "
                         r"key=sqlite.mounted_file_path")
        c = self.client(b2, "mem")
        c.connect()
        c.subscribe("perm/#", qos=1)
        p = self.client(b2, "pub", clean=True, expiry=0)
        p.connect()
        p.publish("perm/1", b"in memory", qos=1)
        m = c.wait_message(timeout=5)
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, b"in memory")
        self.assertEqual(b2.stop(), [])
        self.assertEqual((os.listdir(self.db_dir), os.path.getsize(db)), before)

        b3 = self.start()  # as root again: the session is there
        k = self.client(b3, "kept")
        k.connect()
        self.assertTrue(k.session_present)



class TestFileMode(StoreCase):
    """A new store is readable by the broker's user alone: the database,
    its WAL and its shared-memory file are 0600 whatever the umask (they
    were 0644, other users' messages readable by any local account when
    the directory was not the broker's 0700 one). An existing file keeps
    the mode its owner gave it."""

    def modes(self):
        out = {}
        for f in ("nanomq.db", "nanomq.db-wal", "nanomq.db-shm"):
            p = os.path.join(self.db_dir, f)
            if os.path.exists(p):
                out[f] = os.stat(p).st_mode & 0o777
        return out

    def test_new_files_are_the_owners_alone(self):
        old = os.umask(0o022)
        try:
            b = self.start()
        finally:
            os.umask(old)
        s = self.client(b, "mode")
        s.connect()
        s.subscribe("mode/#", qos=1)
        p = self.client(b, "pub", clean=True, expiry=0)
        p.connect()
        p.publish("mode/1", b"private", qos=1)
        self.assertIsNotNone(s.wait_message(timeout=5))
        m = self.modes()
        self.assertEqual(set(m), {"nanomq.db", "nanomq.db-wal", "nanomq.db-shm"})
        self.assertEqual(m, {f: 0o600 for f in m})
        self.assertEqual(b.stop(), [])
        os.chmod(os.path.join(self.db_dir, "nanomq.db"), 0o640)
        b2 = self.start()
        k = self.client(b2, "mode")
        k.connect()
        self.assertTrue(k.session_present)
        self.assertEqual(self.modes()["nanomq.db"], 0o640)
        self.assertEqual(b2.stop(), [])


class TestFullDiskAtStart(TmpfsCase):
    def setUp(self):
        super().setUp()
        subprocess.run(["mount", "-o", "remount,size=4m", self.mnt], check=True)

    def fill(self):
        path = os.path.join(self.mnt, "fill")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\1" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        return path

    def refused(self):
        b = Broker(nmq_store_conf(self.db_dir))
        with self.assertRaises(BrokerError) as cm:
            b.start(timeout=5)
        b._out.close()
        b._err.close()
        shutil.rmtree(b.tmp, ignore_errors=True)
        self.assertRegex(str(cm.exception), r"(the disk is full or refused a write|database "
                         r"or disk is full).*left unchanged")
        self.assertNotIn("damaged", str(cm.exception))
        # (SQLite may checkpoint its WAL into the file as it closes it.)
        left = os.listdir(self.db_dir)
        self.assertIn("nanomq.db", left)
        self.assertEqual([f for f in left if "damaged" in f], [], "the file was moved aside")

    def check_back(self, n, cid):
        b = self.start()
        c = self.client(b, cid)
        c.connect()
        self.assertTrue(c.session_present)
        got = c.wait_messages(n, timeout=10)
        self.assertEqual([m.payload for m in got], [b"m%d" % i for i in range(n)])
        return b

    def test_after_kill9_and_after_a_clean_stop(self):
        b = self.start()
        for cid in ("off", "off2"):
            off = self.client(b, cid)
            off.connect()
            off.subscribe("full/#", qos=1)
            off.disconnect()
        for i in range(5):  # connected: rows held back, sessions stored online
            c = self.client(b, "on%d" % i)
            c.connect()
            c.subscribe("full/#", qos=1)
        p = RawClient(b.port, 5)
        self.addCleanup(p.close)
        self.assertEqual(p.connect("pub").rc, 0)
        for i in range(20):
            self.assertEqual(p.publish("full/1", b"m%d" % i, qos=1).rc, 0)
        p.close()
        self.kill9(b)
        fill = self.fill()
        self.refused()
        os.unlink(fill)
        b = self.check_back(20, "off")
        for c in self.clients:
            c.close()
        self.assertEqual(b.stop(), [])
        fill = self.fill()
        self.refused()
        os.unlink(fill)
        self.check_back(20, "off2")



class TestDaemonRelativePath(nmq_ops.OpsTestCase):
    def test_relative_path_is_the_start_directory(self):
        inst = self.instance()
        port = nmq.free_port()
        # A name no other run uses, so that a store left under "/" by the
        # bug is this test's.
        rel = "db-%d-%d" % (os.getpid(), port)
        self.addCleanup(shutil.rmtree, os.path.join("/", rel), True)
        conf = inst.conf(port, extra='log { to = [file], level = info, dir = "%s" }\n'
                         'sqlite { mounted_file_path = "%s" }\n' % (inst.tmp, rel))
        r = inst.run(["start", "-d", "--conf", conf])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        pid = inst.read_pid_file()
        self.assertIsNotNone(pid)
        self.addCleanup(kill_pid, pid)
        nmq_ops.offline_subscriber(port, "keep", "rel/#")
        nmq_ops.publish_n(port, "rel/1", 3)
        self.assertEqual(inst.run(["stop"]).returncode, 0)
        self.assertTrue(nmq_ops.wait_for(lambda: not pid_alive(pid), 10.0))
        self.assertFalse(os.path.exists(os.path.join("/", rel)), "the store went under /")
        self.assertTrue(os.path.exists(inst.path(rel, "nanomq.db")))
        # In the foreground, from the same directory: the same store.
        p = self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertEqual(nmq_ops.drain_session(port, "keep"), [b"000", b"001", b"002"])
        self.assertEqual(inst.stop(p)[0], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
