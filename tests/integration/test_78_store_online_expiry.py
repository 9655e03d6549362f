#!/usr/bin/python3
"""A persistent session whose client was connected when the broker died
(kill -9) went offline at the crash, not at the restart: the store records
an "alive at" time (docs/persistence.md), and at the next start such a
session's expiry counts from it. One whose expiry passed while the broker
was down is gone (Session Present 0, its subscriptions and queue with
it) and its will is published; one with a longer expiry is kept."""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class OnlineAtCrash(StoreCase):
    def test_expired_while_down_after_kill9(self):
        b = self.start()
        # A persistent subscriber of the wills, offline at the crash.
        w = self.client(b, "will-watch", expiry=3600)
        w.connect()
        self.assertEqual(w.subscribe("wills/#", qos=1), [1])
        w.disconnect()
        short = self.client(b, "short-on", expiry=2,
                            will={"topic": "wills/short-on", "payload": b"gone", "qos": 1})
        short.connect()
        self.assertEqual(short.subscribe("s/#", qos=1), [1])
        keep = self.client(b, "long-on", expiry=60)
        keep.connect()
        self.assertEqual(keep.subscribe("s/#", qos=1), [1])
        # Kept sessions with delayed wills: the delay counts from the
        # crash too (2 s: due at the restart; 60 s: not yet).
        for cid, delay in (("delay-on", 2), ("late-on", 60)):
            c = self.client(b, cid, expiry=120,
                            will={"topic": "wills/" + cid, "payload": b"w", "qos": 1,
                                  "props": {"WillDelayInterval": delay}})
            c.connect()
        pub = self.client(b, "pub", clean=True, expiry=0)
        pub.connect()
        # Both connected; a message each, received (so nothing is queued).
        pub.publish("s/1", b"one", qos=1)
        self.assertIsNotNone(short.wait_message(timeout=5))
        self.assertIsNotNone(keep.wait_message(timeout=5))
        self.kill9(b)
        time.sleep(3)

        b2 = self.start()
        log = b2.log_text()
        self.assertRegex(log, r"event=online_at_stop sessions=4 ")
        self.assertRegex(log, r"event=restored sessions=4 .*expired=1")
        # The ended session's will went out at the start, and so did the
        # will whose delay passed since the crash, to the persistent
        # subscriber's queue; the one whose delay runs on did not.
        w2 = self.client(b2, "will-watch", expiry=3600)
        w2.connect()
        self.assertTrue(w2.session_present)
        got = w2.wait_messages(2, timeout=5)
        self.assertEqual(sorted((m.topic, m.payload) for m in got),
                         [("wills/delay-on", b"w"), ("wills/short-on", b"gone")])
        w2.expect_no_message(1)
        # The session of the 2 s client is gone: no session, no
        # subscription, nothing queued for it.
        pub2 = self.client(b2, "pub2", clean=True, expiry=0)
        pub2.connect()
        pub2.publish("s/2", b"two", qos=1)
        s2 = self.client(b2, "short-on", expiry=2)
        s2.connect()
        self.assertFalse(s2.session_present)
        s2.expect_no_message(1)
        # The 60 s one is kept, with its subscription and what was queued.
        k2 = self.client(b2, "long-on", expiry=60)
        k2.connect()
        self.assertTrue(k2.session_present)
        # ("one" may come again: its PUBACK's write may not have
        # committed before the kill; QoS 1 is at least once.)
        got = []
        while b"two" not in got:
            m = k2.wait_message(timeout=5)
            self.assertIsNotNone(m, "long-on got %r" % got)
            got.append(m.payload)
        self.assertLessEqual(set(got), {b"one", b"two"})

    def test_clean_stop_unchanged(self):
        # A clean stop records the time each session went offline: a
        # client with a longer expiry than the downtime keeps its session.
        b = self.start()
        c = self.client(b, "stop-on", expiry=4)
        c.connect()
        self.assertEqual(c.subscribe("c/#", qos=1), [1])
        self.assertEqual(b.stop(), [])
        time.sleep(1)
        b2 = self.start()
        self.assertNotIn("event=online_at_stop", b2.log_text())
        c2 = self.client(b2, "stop-on", expiry=4)
        c2.connect()
        self.assertTrue(c2.session_present)


if __name__ == "__main__":
    unittest.main()
