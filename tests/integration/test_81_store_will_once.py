#!/usr/bin/python3
"""A will is published once, also across kill -9 of the broker: when the
will of a persistent session goes out (its delay ended, or it was due at
a restart), the session's stored record loses it in the same store group
as the will's own writes (docs/persistence.md). A persistent QoS 1
subscriber of the will topic, offline meanwhile, gets it exactly once
after any number of crashes."""

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


class WillOnce(StoreCase):
    def watcher(self, b):
        """The persistent subscriber of the wills (and of sync/#), left
        offline so that what is routed to it is in its stored queue."""
        w = self.client(b, "will-watch", expiry=3600)
        w.connect()
        self.assertEqual(w.subscribe("wills/#", qos=1), [1])
        self.assertEqual(w.subscribe("sync/#", qos=1), [1])
        w.disconnect()
        return w

    def committed(self, b, tag):
        """Returns once everything routed so far is committed: a QoS 1
        message to the offline persistent watcher is acked only after its
        group commits, and groups commit in order."""
        p = self.client(b, "sync-" + tag, clean=True, expiry=0)
        p.connect()
        p.publish("sync/" + tag, tag.encode(), qos=1)  # waits for the PUBACK
        p.disconnect()

    def drain(self, b, want):
        """The watcher's queue after the restarts: exactly want (a list of
        (topic, payload)), in any order, and nothing more."""
        w = self.client(b, "will-watch", expiry=3600)
        w.connect()
        self.assertTrue(w.session_present)
        got = w.wait_messages(len(want), timeout=10)
        w.expect_no_message(1.5)
        self.assertEqual(sorted((m.topic, m.payload) for m in got), sorted(want))

    def test_delayed_will_not_again_after_kill9(self):
        b = self.start()
        self.watcher(b)
        live = self.client(b, "live-obs", clean=True, expiry=0)
        live.connect()
        self.assertEqual(live.subscribe("wills/#", qos=1), [1])
        c = self.client(b, "dying", expiry=3600,
                        will={"topic": "wills/dying", "payload": b"bye", "qos": 1,
                              "props": {"WillDelayInterval": 1}})
        c.connect()
        c.kill()  # the socket closes without DISCONNECT
        # Published once its delay ends (a generous deadline: ASan, load).
        m = live.wait_message(timeout=15)
        self.assertIsNotNone(m, "will not published")
        self.assertEqual((m.topic, m.payload), ("wills/dying", b"bye"))
        self.committed(b, "1")
        self.kill9(b)

        b2 = self.start()
        self.assertNotIn("client_id=dying topic=wills/dying event=will_published",
                         b2.log_text())
        # The session itself is kept (expiry 3600), without its will.
        self.kill9(b2)
        b3 = self.start()
        self.drain(b3, [("wills/dying", b"bye"), ("sync/1", b"1")])
        d = self.client(b3, "dying", expiry=3600)
        d.connect()
        self.assertTrue(d.session_present)

    def test_will_due_at_restart_not_again_after_kill9(self):
        b = self.start()
        self.watcher(b)
        # Connected at the crash, will delay 1 s: due at the restart
        # (the broker is down longer than that).
        c = self.client(b, "crashed", expiry=3600,
                        will={"topic": "wills/crashed", "payload": b"w", "qos": 1,
                              "props": {"WillDelayInterval": 1}})
        c.connect()
        self.committed(b, "0")
        self.kill9(b)
        c.close()
        time.sleep(2)

        b2 = self.start()
        self.assertIn("client_id=crashed topic=wills/crashed event=will_published "
                      "reason=will_delay_passed_offline", b2.log_text())
        self.committed(b2, "1")
        self.kill9(b2)

        b3 = self.start()
        self.assertNotIn("event=will_published", b3.log_text())
        self.drain(b3, [("wills/crashed", b"w"), ("sync/0", b"0"), ("sync/1", b"1")])

    def test_expired_session_will_once(self):
        b = self.start()
        self.watcher(b)
        # Expires while the broker is down: its will goes out at the
        # restart with the delete of its record, once.
        c = self.client(b, "short", expiry=1,
                        will={"topic": "wills/short", "payload": b"s", "qos": 1,
                              "props": {"WillDelayInterval": 30}})
        c.connect()
        self.committed(b, "0")
        self.kill9(b)
        c.close()
        time.sleep(2)

        b2 = self.start()
        log = b2.log_text()
        self.assertIn("client_id=short topic=wills/short event=will_published "
                      "reason=session_expired_offline", log)
        self.assertRegex(log, r"event=restored sessions=1 .*expired=1")
        self.committed(b2, "1")
        self.kill9(b2)

        b3 = self.start()
        self.assertNotIn("event=will_published", b3.log_text())
        self.drain(b3, [("wills/short", b"s"), ("sync/0", b"0"), ("sync/1", b"1")])
        s = self.client(b3, "short", expiry=1)
        s.connect()
        self.assertFalse(s.session_present)


if __name__ == "__main__":
    unittest.main()
