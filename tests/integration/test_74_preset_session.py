#!/usr/bin/python3
"""preset.session (docs/config.md, docs/persistence.md): sessions the broker
creates at startup, subscribed as configured, so that QoS 1/2 messages
queue for a client before its first connect.

Without a store: both spellings (named objects and the array) work; a
client connecting with clean start 0 takes the session over and gets the
queue in order (paho 3.1.1 and 5.0, and mosquitto_sub); clean start 1
discards it; the queue is bounded by mqtt.max_mqueue_len; the options
(QoS, retain as published) apply.

With the sqlite section: the session and what queued for it survive a
clean restart and a kill -9; the preset session restored from the store is
not created twice (one session, no duplicate messages), and a session the
client changed keeps the client's subscriptions.

Bad entries stop the broker with file, line and key: test_30_config.py.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import BrokerTestCase, MosquittoSub, PahoClient  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

NAMED = """
preset.session.1 {
  clientid = "dev-a"
  topic = [
    { remote_topic = "p/a/#", qos = 1 },
    { remote_topic = "p/r", qos = 1, retain_as_published = 1 }
  ]
}
preset.session.2 {
  clientid = "dev-b"
  topic = [{ remote_topic = "p/b", qos = 2 }]
}
preset.session.3 {
  clientid = "dev-m"
  topic = [{ remote_topic = "p/m", qos = 1 }]
}
"""

ARRAY = """
mqtt.max_mqueue_len = 4
preset.session = [
  { clientid = "arr-1", topic = [{ remote_topic = "q/1", qos = 1 }] },
  { clientid = "arr-2", topic = [{ remote_topic = "q/+", qos = 1 }] }
]
"""


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq preset.session configuration")


def publish(port, topic, payloads, qos=1, retain=False):
    p = PahoClient(port, client_id="pub-%d" % time.monotonic_ns(), version=4)
    p.connect()
    for x in payloads:
        p.publish(topic, x, qos=qos, retain=retain)  # waits for the ack
    p.disconnect()
    p.close()


def drain(c, quiet=1.0, timeout=15):
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.wait_message(timeout=quiet)
        if m is None:
            break
        got.append(m)
    return got


class TestPresetNamed(BrokerTestCase):
    CONF = NAMED

    def test_queues_before_first_connect(self):
        self.assertIn("event=preset_sessions created=3", self.broker.log_text())
        publish(self.broker.port, "p/a/x", [b"a%d" % i for i in range(5)])
        publish(self.broker.port, "p/b", [b"b%d" % i for i in range(3)], qos=2)
        publish(self.broker.port, "p/other", [b"not-subscribed"])
        # 3.1.1, clean session 0: takes the session over with its queue.
        a = self.paho("dev-a", version=4, clean=False)
        self.assertTrue(a.session_present)
        got = drain(a)
        self.assertEqual([(m.topic, m.payload, m.qos) for m in got],
                         [("p/a/x", b"a%d" % i, 1) for i in range(5)])
        # The subscription stays: a new message arrives while connected.
        publish(self.broker.port, "p/a/y", [b"live"])
        m = a.wait_message(timeout=5)
        self.assertEqual((m.topic, m.payload), ("p/a/y", b"live"))
        # 5.0, clean start 0, QoS 2 subscription.
        b = self.paho("dev-b", version=5, clean=False,
                      conn_props={"SessionExpiryInterval": 60})
        self.assertTrue(b.session_present)
        self.assertEqual([(m.payload, m.qos) for m in drain(b)],
                         [(b"b%d" % i, 2) for i in range(3)])

    def test_clean_start_discards(self):
        publish(self.broker.port, "p/a/x", [b"gone"])
        a = self.paho("dev-a", version=5, clean=True)
        self.assertFalse(a.session_present)
        a.expect_no_message()
        # Its subscriptions went with it.
        publish(self.broker.port, "p/a/x", [b"after"])
        a.expect_no_message()

    def test_retain_as_published(self):
        publish(self.broker.port, "p/r", [b"kept"], retain=True)
        a = self.paho("dev-a", version=5, clean=False,
                      conn_props={"SessionExpiryInterval": 60})
        got = drain(a)
        self.assertEqual([(m.payload, m.retain) for m in got], [(b"kept", True)])

    def test_mosquitto_sub_takes_over(self):
        publish(self.broker.port, "p/m", [b"m%d" % i for i in range(4)])
        s = MosquittoSub(self.broker.port, "p/m", qos=1, count=4, client_id="dev-m",
                         clean=False, fmt="%t|%p")
        try:
            self.assertEqual(s.get(4), ["p/m|m%d" % i for i in range(4)])
        finally:
            s.proc.kill()
            s.proc.wait()


class TestPresetArray(BrokerTestCase):
    CONF = ARRAY

    def test_array_form_and_queue_bound(self):
        self.assertIn("event=preset_sessions created=2", self.broker.log_text())
        publish(self.broker.port, "q/1", [b"x%d" % i for i in range(6)])
        c1 = self.paho("arr-1", version=4, clean=False)
        self.assertTrue(c1.session_present)
        # max_mqueue_len = 4: the first four were kept, the rest dropped.
        self.assertEqual([m.payload for m in drain(c1)], [b"x%d" % i for i in range(4)])
        c2 = self.paho("arr-2", version=4, clean=False)
        self.assertEqual([m.payload for m in drain(c2)], [b"x%d" % i for i in range(4)])


class TestPresetStore(StoreCase):
    CONF = NAMED

    def test_survives_restart_and_kill9(self):
        b = self.start()
        publish(b.port, "p/a/x", [b"s%d" % i for i in range(10)])
        self.assertEqual(b.stop(), [])
        b2 = self.start()
        log = b2.log_text()
        self.assertIn("sessions=3", log)  # restored, not created again
        self.assertIn("created=0 restored=3", log)
        publish(b2.port, "p/a/x", [b"t%d" % i for i in range(5)])
        self.kill9(b2)
        b3 = self.start()
        self.assertIn("created=0 restored=3", b3.log_text())
        a = self.client(b3, "dev-a", version=5)
        a.connect()
        self.assertTrue(a.session_present)
        got = drain(a)
        self.assertEqual([m.payload for m in got],
                         [b"s%d" % i for i in range(10)] + [b"t%d" % i for i in range(5)])
        a.expect_no_message()

    def test_client_changes_kept(self):
        b = self.start()
        a = self.client(b, "dev-a", version=5)
        a.connect()
        self.assertTrue(a.session_present)
        a.unsubscribe("p/a/#")
        a.subscribe("p/z", qos=1)
        a.disconnect()
        self.assertEqual(b.stop(), [])
        b2 = self.start()
        publish(b2.port, "p/a/x", [b"old-filter"])
        publish(b2.port, "p/z", [b"new-filter"])
        a2 = self.client(b2, "dev-a", version=5)
        a2.connect()
        self.assertTrue(a2.session_present)
        self.assertEqual([m.payload for m in drain(a2)], [b"new-filter"])

    # A preset removed from the configuration: its session, if no client
    # took it over, ends at the next start (it stayed, never expiring,
    # queueing for nobody until disk_cache_size evicted other sessions'
    # messages for it); one a client took over is the client's and stays.
    def test_removed_preset_ends(self):
        b = self.start()
        a = self.client(b, "dev-a", version=5)  # taken over: the client's now
        a.connect()
        self.assertTrue(a.session_present)
        a.disconnect()
        publish(b.port, "p/a/x", [b"for-a"])
        publish(b.port, "p/b", [b"for-b"])
        self.assertEqual(b.stop(), [])
        self.CONF = NAMED.split("preset.session.3")[0].split("preset.session.2")[0] + (
            "preset.session.3" + NAMED.split("preset.session.3")[1])  # dev-a, dev-m
        b2 = self.start()
        self.assertRegex(b2.log_text(), r"client_id=dev-b event=preset_session_ended")
        self.assertIn("created=0 restored=2 subscriptions=0 refused=0 removed=1",
                      b2.log_text())
        publish(b2.port, "p/b", [b"nobody"])
        self.kill9(b2)
        b3 = self.start()
        gone = self.client(b3, "dev-b", version=5, expiry=0)
        gone.connect()
        self.assertFalse(gone.session_present)
        a2 = self.client(b3, "dev-a", version=5)
        a2.connect()
        self.assertTrue(a2.session_present)
        self.assertEqual([m.payload for m in drain(a2)], [b"for-a"])
        self.assertEqual(b3.stop(), [])
        self.CONF = ""
        b4 = self.start()
        self.assertRegex(b4.log_text(), r"client_id=dev-m event=preset_session_ended")
        self.assertNotRegex(b4.log_text(), r"client_id=dev-a event=preset_session_ended")


if __name__ == "__main__":
    nmq.main()
