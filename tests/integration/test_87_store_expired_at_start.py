#!/usr/bin/python3
"""87: what expired while the broker was down, dropped at startup all at
once.

A gateway down for a day may find at its restart every session of its
absent clients expired, or every queued message: the startup drops them
with a few statements over the whole set (it did it row by row: 100,000
expired sessions with 1,000,000 queue rows took 24 s, docs/benchmarks.md).
Checked here as a user would see it, and in the file: sessions expired
while down (some sharing their messages with a session that lives, one
whose will is published at startup), messages whose expiry passed, a
retained message that expired; after the restart the living session gets
exactly what did not expire, in order, the will once, and every message
row's reference count is what the queue, retained and will rows hold.

The wall clock set back between two runs (a gateway without a
battery-backed clock, started before NTP): the times stored are then in
the future. A stored message lived on for as long as the clock had gone
back, and was sent with a Message Expiry Interval that large; it now
lives at most its own interval from the restart (and a session at most
its expiry, as before)."""

import os
import re
import sqlite3
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import RawClient  # noqa: E402
from test_70_store import StoreCase  # noqa: E402


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class TestExpiredAtStart(StoreCase):
    def check_refs(self):
        db = sqlite3.connect(os.path.join(self.db_dir, "nanomq.db"))
        try:
            bad = db.execute(
                "SELECT m.id, m.refs,"
                " (SELECT COUNT(*) FROM queue q WHERE q.msg_id = m.id)"
                " + (SELECT COUNT(*) FROM retained r WHERE r.msg_id = m.id)"
                " + (SELECT COUNT(*) FROM sessions s WHERE s.will_msg = m.id) AS held"
                " FROM msgs m WHERE m.refs != held").fetchall()
            orphans = db.execute(
                "SELECT COUNT(*) FROM queue q WHERE NOT EXISTS"
                " (SELECT 1 FROM msgs m WHERE m.id = q.msg_id)"
                " OR NOT EXISTS (SELECT 1 FROM sessions s WHERE s.cid = q.cid)").fetchone()[0]
            subs = db.execute("SELECT DISTINCT cid FROM subs ORDER BY cid").fetchall()
            sessions = db.execute("SELECT cid FROM sessions ORDER BY cid").fetchall()
        finally:
            db.close()
        self.assertEqual(bad, [], "message rows whose reference count is wrong")
        self.assertEqual(orphans, 0, "queue rows without their message or session")
        return [c for (c,) in sessions], [c for (c,) in subs]

    def test_sessions_messages_and_retained(self):
        b = self.start()
        t0 = time.monotonic()
        for i in range(30):
            g = self.client(b, "gone-%d" % i, expiry=5)
            g.connect()
            g.subscribe("m/#", qos=1)
            g.disconnect()
        keep = self.client(b, "keep", expiry=3600)
        keep.connect()
        keep.subscribe("m/#", qos=1)
        keep.subscribe("w/#", qos=1)
        keep.disconnect()
        # Connected at the kill -9: expired since then, its will published
        # at startup (its record is kept until then).
        w = RawClient(b.port, 5)
        self.addCleanup(w.close)
        self.assertEqual(w.connect("willer", clean=False, props={"SessionExpiryInterval": 1},
                                   will={"topic": "w/x", "payload": b"bye", "qos": 1,
                                         "props": {"WillDelayInterval": 3600}}).rc, 0)
        w.subscribe([("m/#", nmq.sub_opts(1))])
        p = RawClient(b.port, 5)
        self.addCleanup(p.close)
        self.assertEqual(p.connect("pub").rc, 0)
        want = []
        for i in range(20):
            props = {"MessageExpiryInterval": 1} if i % 4 == 1 else None
            self.assertEqual(p.publish("m/1", b"m%d" % i, qos=1, props=props).rc, 0)
            if props is None:
                want.append(b"m%d" % i)
        self.assertEqual(p.publish("m/r1", b"short", qos=1, retain=True,
                                   props={"MessageExpiryInterval": 1}).rc, 0)
        self.assertEqual(p.publish("m/r2", b"kept", qos=1, retain=True).rc, 0)
        want.append(b"kept")  # the retained copy is queued for keep too
        p.close()
        self.kill9(b)
        # (The sessions gone-* must still be there when the broker dies.)
        if time.monotonic() - t0 > 4.5:
            self.skipTest("the machine was too slow: the sessions expired before the kill")
        time.sleep(5.2)  # the 5 s of the sessions gone-*, the 1 s of the rest

        b2 = self.start()
        self.assertRegex(b2.log_text(), r"event=restored sessions=1 .*expired=(\d+)")
        n = int(re.search(r"event=restored .*expired=(\d+)", b2.log_text()).group(1))
        # 31 sessions, the queue rows of keep's expired messages (5, and
        # the retained one's copy), the retained one.
        self.assertEqual(n, 31 + 6 + 1, b2.log_text())
        k = self.client(b2, "keep", expiry=3600)
        k.connect()
        self.assertTrue(k.session_present)
        got = k.wait_messages(len(want) + 1, timeout=10)
        k.expect_no_message()
        self.assertEqual([m.payload for m in got if m.topic != "w/x"], want)
        self.assertEqual([m.payload for m in got if m.topic == "w/x"], [b"bye"])
        r = self.client(b2, "reader", clean=True, expiry=0)
        r.connect()
        r.subscribe("m/#", qos=1)
        self.assertEqual([m.payload for m in r.wait_messages(1, timeout=5)], [b"kept"])
        r.expect_no_message()
        for i in (0, 29):
            g = self.client(b2, "gone-%d" % i, expiry=0)  # not stored again
            g.connect()
            self.assertFalse(g.session_present)
        for c in self.clients:
            c.close()
        self.assertEqual(b2.stop(), [])
        sessions, subs = self.check_refs()
        self.assertEqual(sessions, ["keep"])
        self.assertEqual(subs, ["keep"])


    def test_wall_clock_set_back(self):
        b = self.start()
        sub = self.client(b, "sub", expiry=3600)
        sub.connect()
        sub.subscribe("c/#", qos=1)
        sub.disconnect()
        short = self.client(b, "short", expiry=2)
        short.connect()
        short.disconnect()
        p = RawClient(b.port, 5)
        self.addCleanup(p.close)
        self.assertEqual(p.connect("pub").rc, 0)
        self.assertEqual(p.publish("c/1", b"q", qos=1, props={"MessageExpiryInterval": 30}).rc, 0)
        self.assertEqual(p.publish("c/r", b"r", qos=1, retain=True,
                                   props={"MessageExpiryInterval": 30}).rc, 0)
        p.close()
        self.kill9(b)
        # The clock goes back a day: every time in the file is a day ahead.
        day = 86400 * 1000
        db = sqlite3.connect(os.path.join(self.db_dir, "nanomq.db"))
        db.execute("UPDATE msgs SET expiry_wall_ms = expiry_wall_ms + ? WHERE expiry_wall_ms != 0",
                   (day,))
        db.execute("UPDATE sessions SET offline_wall_ms = offline_wall_ms + ?"
                   " WHERE offline_wall_ms != 0", (day,))
        db.commit()
        db.close()

        b2 = self.start()
        c = self.client(b2, "sub", expiry=3600)
        c.connect()
        self.assertTrue(c.session_present)
        got = c.wait_messages(2, timeout=5)
        self.assertEqual(sorted(m.payload for m in got), [b"q", b"r"])
        for m in got:
            self.assertLessEqual(m.props.get("MessageExpiryInterval"), 30, m.payload)
        r = self.client(b2, "reader", clean=True, expiry=0)
        r.connect()
        r.subscribe("c/r", qos=1)
        m = r.wait_message(timeout=5)
        self.assertLessEqual(m.props.get("MessageExpiryInterval"), 30)
        time.sleep(2.5)  # the session "short" expires 2 s after the restart
        s2 = self.client(b2, "short", expiry=0)
        s2.connect()
        self.assertFalse(s2.session_present)


if __name__ == "__main__":
    unittest.main(verbosity=2)
