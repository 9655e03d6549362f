#!/usr/bin/python3
"""61: $SYS/broker statistics (docs/compatibility.md §9): the topics
Mosquitto users scrape, published retained every mqtt.sys_interval, with
values checked against traffic this test makes and counts itself."""

import time
import unittest

from nmq import BrokerTestCase, skip_on_mosquitto

LEAVES = [
    "version", "uptime", "clients/connected", "clients/active", "clients/disconnected",
    "clients/total", "clients/maximum", "messages/received", "messages/sent",
    "publish/messages/received", "publish/messages/sent", "publish/messages/dropped",
    "load/messages/received/1min", "load/messages/received/5min",
    "load/messages/received/15min", "load/messages/sent/1min", "load/messages/sent/5min",
    "load/messages/sent/15min", "bytes/received", "bytes/sent", "subscriptions/count",
    "retained messages/count", "heap/current",
]


@skip_on_mosquitto("mosquitto's counters include its own packets; the values differ")
class SysStatsTests(BrokerTestCase):
    CONF = "mqtt { sys_interval = 1s, max_mqueue_len = 2 }"

    def collect(self, watcher, seconds):
        """Every $SYS/broker message received for `seconds`: (latest value
        per leaf, number of messages)."""
        latest, n = {}, 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            m = watcher.wait_message(timeout=max(0.05, deadline - time.monotonic()))
            if m is None:
                continue
            self.assertTrue(m.topic.startswith("$SYS/broker/"), m.topic)
            latest[m.topic[len("$SYS/broker/"):]] = m.payload.decode()
            n += 1
        return latest, n

    def test_values_match_known_traffic(self):
        # A persistent session parked offline with a QoS 1 subscription
        # (queue bound 2), a live QoS 0 subscriber, a publisher: 5 QoS 1
        # messages of 100 bytes on t/x and 2 retained ones nobody reads.
        parked = self.raw(4)
        parked.connect("parked", clean=False)
        parked.subscribe([("t/#", 1)])
        parked.disconnect()
        parked.expect_closed()
        self.broker.wait_disconnected("parked")  # offline now
        live = self.paho("live")
        live.subscribe("t/#", 0)
        pub = self.paho("pub")
        for _ in range(5):
            pub.publish("t/x", b"p" * 100, qos=1)
        pub.publish("r/1", b"retained-1", qos=1, retain=True)
        pub.publish("r/2", b"retained-2", qos=1, retain=True)
        self.assertEqual(len(live.wait_messages(5)), 5)
        time.sleep(1.2)  # one round published (retained) since

        watcher = self.paho("watcher")
        watcher.subscribe("$SYS/broker/#", 0)
        first, _ = self.collect(watcher, 0.3)  # the retained copies
        self.assertEqual(sorted(first), sorted(LEAVES))
        latest, n_sys = self.collect(watcher, 2.5)  # two more rounds at least
        self.assertEqual(sorted(latest), sorted(LEAVES))

        self.assertTrue(latest["version"].startswith("nanomq version "), latest["version"])
        up = latest["uptime"].split()
        self.assertEqual(up[1], "seconds")
        self.assertGreaterEqual(int(up[0]), 2)
        self.assertGreater(int(up[0]), int(first["uptime"].split()[0]))

        # Clients: live, pub, watcher connected; parked offline.
        self.assertEqual(latest["clients/connected"], "3")
        self.assertEqual(latest["clients/disconnected"], "1")
        self.assertEqual(latest["clients/total"], "4")
        self.assertEqual(latest["clients/maximum"], "3")
        # PUBLISH packets from clients: 7; $SYS messages are not "received".
        self.assertEqual(latest["messages/received"], "7")
        self.assertEqual(latest["publish/messages/received"], "7")
        # parked's queue of 2 took t/x twice and dropped it three times.
        self.assertEqual(latest["publish/messages/dropped"], "3")
        # Sent: 5 to live, plus the $SYS messages the watcher had been sent
        # when the last round was sampled (at most all it received).
        sent = int(latest["messages/sent"])
        self.assertGreaterEqual(sent, 5 + len(LEAVES))
        self.assertLessEqual(sent, 5 + len(LEAVES) + n_sys)
        self.assertEqual(latest["publish/messages/sent"], latest["messages/sent"])
        # parked t/#, live t/#, watcher $SYS/broker/#.
        self.assertEqual(latest["subscriptions/count"], "3")
        # r/1, r/2 and every $SYS/broker statistic.
        self.assertEqual(latest["retained messages/count"], str(2 + len(LEAVES)))
        # Bytes on the wire: at least the payloads that went each way.
        self.assertGreaterEqual(int(latest["bytes/received"]), 5 * 100 + 2 * 10)
        self.assertGreaterEqual(int(latest["bytes/sent"]), 5 * 100)
        self.assertGreater(int(latest["heap/current"]), 0)
        # 7 messages within the first minute: a positive rate per minute.
        self.assertGreater(float(latest["load/messages/received/1min"]), 0.0)
        self.assertGreater(float(latest["load/messages/received/1min"]),
                           float(latest["load/messages/received/15min"]))
        self.assertGreater(float(latest["load/messages/sent/1min"]), 0.0)


@skip_on_mosquitto("sys_interval is nanomq's key")
class SysOffTests(BrokerTestCase):
    CONF = "mqtt.sys_interval = 0"

    def test_zero_interval_publishes_nothing(self):
        w = self.paho("w")
        w.subscribe("$SYS/broker/#", 0)
        self.assertIsNone(w.wait_message(timeout=1.5))


if __name__ == "__main__":
    unittest.main()
