#!/usr/bin/python3
"""Offline segments (decisions/0053) audited as a user meets them on a
gateway: a persistent subscriber offline while data flows, the broker
killed, the file changed by hand, a restart. Each test is a defect that
was found that way."""

import os
import sqlite3
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import PUBACK, PUBLISH, RawClient  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

SUB = "audit-sub"


class SegCase(StoreCase):
    def offline_backlog(self, b, n, topic="a/t"):
        """SUB subscribed (QoS 1, MQTT 3.1.1 persistent) and offline, then
        n QoS 1 messages "<%04d>xxx" published pipelined (so that a group
        holds several); returns when all are acked."""
        s = RawClient(b.port, 4)
        self.assertEqual(s.connect(SUB, clean=False).rc, 0)
        s.subscribe([("a/#", 1)])
        s.close()
        b.wait_disconnected(SUB)
        p = RawClient(b.port, 4)
        self.assertEqual(p.connect("audit-pub").rc, 0)
        for i in range(n):
            p.publish(topic, b"%04d" % i + b"x" * 100, qos=1, pid=i + 1, complete=False)
        for i in range(n):
            p.expect(PUBACK, timeout=10)
        p.close()

    def drain(self, b, cid=SUB, version=4, key=lambda p: int(p[:4]), **kw):
        """Connects cid (clean start 0) and acks what comes until a second
        passes without a PUBLISH: the CONNACK and key(payload) of each."""
        s = RawClient(b.port, version)
        ca = s.connect(cid, clean=False, **kw)
        got = []
        while True:
            try:
                m = s.expect(PUBLISH, timeout=1.0)
            except AssertionError:
                break
            s.ack(m)
            got.append(key(m.payload))
        s.close()
        return ca, got

    def segments(self):
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(self.db_dir, "nanomq.db"),
                             uri=True)
        try:
            return db.execute("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM oseg").fetchone()
        finally:
            db.close()


class TestLossReported(SegCase):
    def test_moved_aside_file_counts_segment_messages(self):
        # A file moved aside (here: its oseg table made a view, changed by
        # hand) is logged with what it held: the messages of offline
        # segments were not counted (queued_messages=0 for 30 queued).
        b = self.start()
        self.offline_backlog(b, 30)
        self.assertEqual(self.segments()[1], 30)
        self.kill9(b)
        db = sqlite3.connect(os.path.join(self.db_dir, "nanomq.db"))
        for sql in ["alter table oseg rename to oseg_old",
                    "create view oseg as select * from oseg_old"]:
            db.execute(sql)
        db.commit()
        db.close()
        b = self.start()
        self.assertRegex(b.log_text(), r"event=recovered reason=\"tables of another shape\""
                         r".* lost=\"sessions=1 queued_messages=30 ")
        ca, got = self.drain(b)
        self.assertFalse(ca.session_present)


class TestEvictionOrderAfterRestart(SegCase):
    """disk_cache_size evicts the oldest queued message first. After a
    kill -9 the segments became queue rows client id by client id (and
    at a clean stop in the index's hash order): the queue rows' order,
    which eviction follows, was no longer the messages' age, and a
    session whose client id sorted first lost its newest messages
    before another session's older ones."""

    EXTRA = "  disk_cache_size = 24\n"
    CIDS = ["ev-f", "ev-e", "ev-d", "ev-c", "ev-b", "ev-a"]  # offline oldest first

    def run_case(self, stop):
        b = self.start()
        for cid in self.CIDS:
            s = RawClient(b.port, 4)
            self.assertEqual(s.connect(cid, clean=False).rc, 0)
            s.subscribe([("ev/%s" % cid, 1)])
            s.close()
            b.wait_disconnected(cid)
        p = RawClient(b.port, 4)
        p.connect("ev-pub")
        n = 0
        for cid in self.CIDS:
            for i in range(4):
                self.assertEqual(p.publish("ev/%s" % cid, b"%04d" % n, qos=1).rc, 0)
                n += 1
        p.close()
        self.assertEqual(self.segments()[1], 24)
        stop(b)
        b = self.start()
        p = RawClient(b.port, 4)
        p.connect("ev-pub")
        for i in range(4):
            self.assertEqual(p.publish("ev/ev-a", b"%04d" % n, qos=1).rc, 0)
            n += 1
        p.close()
        got = {cid: self.drain(b, cid)[1] for cid in self.CIDS}
        # The 4 oldest (ev-f's) went, nothing else.
        self.assertEqual(got["ev-f"], [], got)
        for k, cid in enumerate(self.CIDS[1:-1], 1):
            self.assertEqual(got[cid], list(range(4 * k, 4 * k + 4)), got)
        self.assertEqual(got["ev-a"], list(range(20, 28)), got)

    def test_after_kill9(self):
        self.run_case(self.kill9)

    def test_after_clean_stop(self):
        self.run_case(lambda b: self.assertEqual(b.stop(), []))


class TestExpiredBacklog(SegCase):
    """A backlog read back in chunks of 256 whose first chunk held only
    expired messages: the read found nothing to deliver, which the
    session takes for the end of its backlog, and the messages after
    them, acked to their publisher, stayed on disk undelivered."""

    def run_case(self, restart):
        b = self.start()
        s = RawClient(b.port, 5)
        self.assertEqual(s.connect(SUB, clean=False, props={"SessionExpiryInterval": 999}).rc, 0)
        s.subscribe([("x/#", 1)])
        s.close()
        b.wait_disconnected(SUB)
        p = RawClient(b.port, 5)
        self.assertEqual(p.connect("audit-pub").rc, 0)
        for i in range(300):
            p.publish("x/t", b"e%d" % i, qos=1, pid=i + 1, props={"MessageExpiryInterval": 1},
                      complete=False)
        for i in range(300):
            self.assertEqual(p.expect(PUBACK, timeout=10).rc, 0)
        for i in range(50):
            self.assertEqual(p.publish("x/t", b"k%d" % i, qos=1).rc, 0)
        p.close()
        if restart:
            self.kill9(b)
        time.sleep(2.2)
        if restart:
            b = self.start()
        ca, got = self.drain(b, SUB, version=5, key=bytes,
                             props={"SessionExpiryInterval": 999})
        self.assertTrue(ca.session_present)
        self.assertEqual(got, [b"k%d" % i for i in range(50)])

    def test_expired_first_chunk(self):
        self.run_case(False)

    def test_expired_first_chunk_after_kill9(self):
        self.run_case(True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
