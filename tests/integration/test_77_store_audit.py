#!/usr/bin/python3
"""77: what the durable store promises at the moment of an ack, checked the
way a user would: kill -9 right after it, or a disk that fills up.

* A SUBACK (UNSUBACK) to a persistent session is sent once the
  subscription (its removal) is committed: a kill -9 right after it keeps
  what it granted, with its options. Likewise the CONNACK of a clean
  start that discarded a stored session: it does not come back. Made deterministic with a slow disk
  (tests/tools/slowsync.c), where the window between the ack and the
  commit is hundreds of milliseconds.
* A full disk (a small tmpfs; skipped where it cannot be mounted): a
  PUBACK with success is sent only for a message whose group committed.
  The barrier the ack waits for is in the same group as the message's
  rows, so a group that failed is never acked by a later one that
  committed; after a kill -9 every message acked with success is there.
* A commit that fails (fsync errors, the slowsync shim) under a
  SUBSCRIBE or UNSUBSCRIBE of a persistent session: the change already
  took effect in memory, so no SUBACK (UNSUBACK) is sent; the connection
  ends (v5: DISCONNECT 0x80 first) and the client subscribes again.
* A store on a read-only file system: the broker starts without it and
  logs at error that nothing is persisted."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import RawClient  # noqa: E402
from test_70_store import StoreCase  # noqa: E402
from test_73_store_backpressure import shim_path  # noqa: E402


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class TestAckedSubscriptions(StoreCase):
    """A slow disk: every fsync of the store takes 300 ms longer."""

    def setUp(self):
        super().setUp()
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        self.env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
                    "NMQ_SLOWSYNC_MS": "300",
                    "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}

    def test_kill9_right_after_suback_and_unsuback(self):
        b = self.start(self.env)
        s5 = self.client(b, "sub-v5")
        s5.connect()
        s5.subscribe("gone/#", qos=1)
        s5.subscribe("o/#", qos=2, rap=True, sub_id=42)
        s5.unsubscribe("gone/#")
        s4 = self.client(b, "sub-v4", version=4, clean=False)
        s4.connect()
        s4.subscribe("o/#", qos=1)
        self.kill9(b)  # at once: no time for a late commit

        b2 = self.start()
        self.assertRegex(b2.log_text(), r"event=restored sessions=2 subscriptions=2 ")
        p = self.client(b2, "pub", clean=True, expiry=0)
        p.connect()
        p.publish("o/r", b"kept", qos=1, retain=True)
        p.publish("gone/x", b"unsubscribed", qos=1)
        for cid, version in (("sub-v5", 5), ("sub-v4", 4)):
            c = self.client(b2, cid, version=version, clean=False)
            c.connect()
            self.assertTrue(c.session_present, cid)
            m = c.wait_message(timeout=5)
            self.assertIsNotNone(m, cid)
            self.assertEqual((m.topic, m.payload), ("o/r", b"kept"), cid)
            if version == 5:
                # Its options came back: Retain As Published, the identifier.
                self.assertTrue(m.retain)
                self.assertEqual(m.props.get("SubscriptionIdentifier"), [42])
            c.expect_no_message()

    def test_kill9_right_after_clean_start_connack(self):
        b = self.start(self.env)
        for cid, version in (("old-v5", 5), ("old-v4", 4)):
            c = self.client(b, cid, version=version, clean=False)
            c.connect()
            c.subscribe("old/#", qos=1)
            c.disconnect()
        # Clean start discards each stored session; the CONNACK comes once
        # that is committed.
        for cid, version in (("old-v5", 5), ("old-v4", 4)):
            c = self.client(b, cid, version=version, clean=True, expiry=0)
            c.connect()
            self.assertFalse(c.session_present)
        self.kill9(b)  # at once

        b2 = self.start()
        self.assertRegex(b2.log_text(), r"event=restored sessions=0 ")
        for cid, version in (("old-v5", 5), ("old-v4", 4)):
            c = self.client(b2, cid, version=version, clean=False)
            c.connect()
            self.assertFalse(c.session_present, cid)


class TmpfsCase(StoreCase):
    """The store's directory on a small tmpfs of its own."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or shutil.which("mount") is None:
            self.skipTest("mounting a small tmpfs needs root")
        self.mnt = tempfile.mkdtemp(prefix="nmq-full-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=640k", "tmpfs", self.mnt],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            os.rmdir(self.mnt)
            self.skipTest("cannot mount a tmpfs: %s" % r.stdout.decode(errors="replace"))
        self.addCleanup(self._unmount)
        shutil.rmtree(self.db_dir, ignore_errors=True)
        self.db_dir = os.path.join(self.mnt, "db")

    def _unmount(self):
        subprocess.run(["umount", "-l", self.mnt])
        os.rmdir(self.mnt)


class TestDiskFull(TmpfsCase):
    def test_no_success_ack_for_what_did_not_commit(self):
        b = self.start()
        sub = self.client(b, "offline")
        sub.connect()
        sub.subscribe("full/#", qos=1)
        sub.disconnect()
        pub = RawClient(b.port, 5)
        self.addCleanup(pub.close)
        self.assertEqual(pub.connect("filler").rc, 0)
        acked, refused = [], 0
        pad = b"x" * 2000
        for i in range(500):  # ~1 MB into 640 KB
            a = pub.publish("full/1", b"%d|" % i + pad, qos=1, timeout=10)
            if a.rc == 0:
                acked.append(i)
            else:
                self.assertEqual(a.rc, 0x80, "reason of a refused PUBACK")
                refused += 1
        self.assertGreater(refused, 0, "the disk never filled up")
        self.assertIn("event=commit_failed", b.log_text())
        pub.close()
        self.kill9(b)

        # The messages queued for the offline session are in its segments
        # (decisions/0053), which become queue rows at the start: on the
        # disk the store filled, that start is refused, the file left as
        # it is (decisions/0048), until there is room.
        try:
            b2 = self.start()
        except nmq.BrokerError as e:
            self.assertRegex(str(e), r"(the disk is full or refused a write|database or disk "
                             r"is full).*left unchanged")
            self.assertEqual([f for f in os.listdir(self.db_dir) if "damaged" in f], [])
            subprocess.run(["mount", "-o", "remount,size=4m", self.mnt], check=True)
            b2 = self.start()
        c = self.client(b2, "offline")
        c.connect()
        got = c.wait_messages(len(acked), timeout=10)
        ids = [int(m.payload.split(b"|")[0]) for m in got]
        self.assertEqual(ids, acked)


class TestFailedSubscriptionCommit(StoreCase):
    """A disk whose fsync fails (the slowsync shim, while a flag file
    exists): the store's commits fail."""

    def setUp(self):
        super().setUp()
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        self.flag = os.path.join(tempfile.mkdtemp(prefix="nmq-failsync-"), "fail")
        self.addCleanup(shutil.rmtree, os.path.dirname(self.flag), True)
        self.env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
                    "NMQ_SLOWSYNC_MS": "0", "NMQ_FAILSYNC_FILE": self.flag,
                    "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}

    def raw(self, b, cid, version):
        r = RawClient(b.port, version)
        self.addCleanup(r.close)
        props = {"SessionExpiryInterval": 3600} if version == 5 else None
        self.assertEqual(r.connect(cid, clean=False, props=props).rc, 0)
        return r

    def test_no_suback_after_a_failed_commit(self):
        # A SUBSCRIBE (UNSUBSCRIBE) of a persistent session takes effect in
        # memory before its commit: when that commit fails no SUBACK code
        # would be true (the subscription is active, the filter gone), so
        # none is sent. A v5 client gets DISCONNECT 0x80 and the connection
        # ends; a 3.1.1 client's connection ends. After reconnecting, the
        # client subscribes again.
        b = self.start(self.env)
        keep = self.raw(b, "keep5", 5)
        self.assertEqual(keep.subscribe([("kept/#", 1)]).codes, [1])
        open(self.flag, "w").close()

        v5 = self.raw(b, "late5", 5)
        v5.send(nmq.subscribe_bytes([("late/#", 1)], 7, None, 5))
        got = v5.expect_closed(timeout=10, msg="v5 SUBSCRIBE whose commit failed")
        self.assertEqual([(p.type, p.rc) for p in got], [(nmq.DISCONNECT, 0x80)], got)

        v3 = self.raw(b, "late3", 4)
        v3.send(nmq.subscribe_bytes([("late/#", 1)], 8, None, 4))
        got = v3.expect_closed(timeout=10, msg="3.1.1 SUBSCRIBE whose commit failed")
        self.assertEqual(got, [], "no SUBACK")

        keep.send(nmq.unsubscribe_bytes(["kept/#"], 9, None, 5))
        got = keep.expect_closed(timeout=10, msg="v5 UNSUBSCRIBE whose commit failed")
        self.assertEqual([(p.type, p.rc) for p in got], [(nmq.DISCONNECT, 0x80)], got)
        self.assertIn("event=commit_failed", b.log_text())

        # The disk works again: the clients subscribe again and are served.
        os.unlink(self.flag)
        v5 = self.raw(b, "late5", 5)
        self.assertEqual(v5.subscribe([("late/#", 1)]).codes, [1])
        v3 = self.raw(b, "late3", 4)
        self.assertEqual(v3.subscribe([("late/#", 1)]).codes, [1])
        pub = self.raw(b, "pub", 5)
        self.assertEqual(pub.publish("late/x", b"after", qos=1).rc, 0)
        self.assertEqual(v5.expect_publishes(1)[0].payload, b"after")
        self.assertEqual(v3.expect_publishes(1)[0].payload, b"after")

    def test_nothing_after_the_disconnect(self):
        # Several acks of one v5 connection fail in one commit (a
        # SUBSCRIBE's, PUBLISHes'): the first one that ends the connection
        # sends DISCONNECT 0x80, and nothing follows it [MQTT-3.14.4-1]
        # (a PUBACK 0x80 and a second DISCONNECT did).
        env = dict(self.env, NMQ_SLOWSYNC_MS="200")
        b = self.start(env)
        c = self.raw(b, "many5", 5)
        # A commit in its (slow) fsync while the next ones are queued, so
        # that they fail together in the next group.
        busy = self.raw(b, "busy", 5)
        busy.send(nmq.publish_bytes("ret/busy", b"r", retain=True, version=5))
        time.sleep(0.05)
        open(self.flag, "w").close()
        c.send(nmq.subscribe_bytes([("b/#", 1)], 7, None, 5)
               + nmq.publish_bytes("ret/y", b"y", qos=1, retain=True, pid=8, version=5)
               + nmq.subscribe_bytes([("c/#", 1)], 9, None, 5)
               + nmq.publish_bytes("ret/z", b"z", qos=1, retain=True, pid=10, version=5))
        got = c.expect_closed(timeout=10, msg="v5 acks whose commit failed")
        self.assertEqual([(p.type, p.rc) for p in got], [(nmq.DISCONNECT, 0x80)], got)


class TestReadOnly(TmpfsCase):
    # A store on a file system remounted read-only: the broker used to
    # refuse to start, calling the database "not a database" it could not
    # move aside. It starts without the store and says so at error.
    def test_read_only_file_system(self):
        b = self.start()
        s = self.client(b, "kept-on-disk")
        s.connect()
        s.subscribe("ro/#", qos=1)
        s.disconnect()
        self.assertEqual(b.stop(), [])
        subprocess.run(["mount", "-o", "remount,ro", self.mnt], check=True)
        b2 = self.start()
        self.assertRegex(b2.log_text(), r"error store: event=store_disabled reason=.*"
                                        r"directory cannot be written")
        self.assertNotIn("not a database", b2.log_text())
        c = self.client(b2, "kept-on-disk")
        c.connect()
        c.subscribe("ro/#", qos=1)
        p = self.client(b2, "pub", clean=True, expiry=0)
        p.connect()
        p.publish("ro/1", b"in memory", qos=1)
        m = c.wait_message(timeout=5)
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, b"in memory")
        self.assertEqual(os.listdir(self.db_dir), ["nanomq.db"])  # untouched


if __name__ == "__main__":
    unittest.main(verbosity=2)
