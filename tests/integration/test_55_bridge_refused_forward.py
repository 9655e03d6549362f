#!/usr/bin/python3
"""55: a forward the remote closes the link on (docs/bridge.md "A forward
the remote closes the link on").

* Debian's mosquitto with max_packet_size 600 closes a 3.1.1 client's
  connection when it gets a larger PUBLISH. A 3.1.1 bridge forwarding QoS 1
  finds the message after a few closes (then sends one at a time), drops
  it, counts it (health `dropped`, `dropped_link_closed`), logs it at error
  with the bridge and the topic, and the messages queued behind it arrive,
  in order. With the cache, the dropped message is not sent again after a
  restart. With `remote_max_packet_size`, such a message is dropped
  before it is sent.
* Plain cuts of the link (a proxy) during a stream, right after each
  reconnect, drop nothing."""

import shutil
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import (FaultProxy, Mosquitto, bridge_conf, first_order, health,
                         need_mosquitto_remote)
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for


setUpModule = need_mosquitto_remote


class TestBridgeRefusedForward(OpsTestCase):

    def test_message_the_remote_closes_on_is_dropped(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp, extra="max_packet_size 600")
        self.addCleanup(m.stop)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 5,
            '{ local_topic = "q1/#", remote_topic = "", qos = 1 }')
            + "bridges.mqtt.cache { mounted_file_path = \"%s\" }\n" % inst.tmp)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("q1/big", b"B" * 1000, qos=1)
        n = 30
        for i in range(n):
            pub.publish("q1/s", b"%d" % i, qos=1)
        want = [b"%d" % i for i in range(n)]

        def small():
            with col._lock:
                return [x.payload for x in col.received if x.topic == "q1/s"]
        self.assertTrue(wait_for(lambda: len(set(small())) >= n, 30, step=0.2),
                        "%d of %d small messages arrived; log:\n%s"
                        % (len(set(small())), n, inst.output()[-3000:]))
        self.assertEqual(first_order(small()), want)
        with col._lock:
            self.assertEqual([x for x in col.received if x.topic == "q1/big"], [])
        out = inst.output()
        self.assertRegex(out, r"error bridge: bridge=f topic=q1/big qos=1 bytes=1000 closes=\d+ "
                              r"event=dropped reason=remote_closed_link")
        self.assertEqual(out.count("reason=remote_closed_link"), 1, out[-3000:])
        self.assertIn("event=suspect_forward action=window_1", out)
        h = health(mon, "f", timeout=12,
                   pred=lambda h: h["backlog"] == 0 and h["dropped_link_closed"] >= 1)
        self.assertEqual((h["dropped_link_closed"], h["dropped"], h["backlog"]), (1, 1, 0), h)
        # The link sends with its full window again: a burst arrives.
        for i in range(n, 3 * n):
            pub.publish("q1/s", b"%d" % i, qos=1)
        want = [b"%d" % i for i in range(3 * n)]
        self.assertTrue(wait_for(lambda: len(set(small())) >= 3 * n, 10, step=0.2))
        self.assertEqual(first_order(small()), want)
        mon.close()
        pub.close()
        self.assert_stops(inst)
        # The dropped message's cache row is gone: nothing is sent again.
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        mon = self.client(port, "mon2")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        h = health(mon, "f", timeout=12, pred=lambda h: h["backlog_disk_counted"]
                   and h["state"] == "up")
        self.assertEqual((h["backlog"], h["reconnects"]), (0, 0), h)
        time.sleep(1.0)
        self.assertEqual(inst.output().count("event=link_up"), 1, inst.output()[-2000:])
        self.assertNotIn("event=link_down", inst.output())
        self.assert_stops(inst)

    # With remote_max_packet_size, a larger forward is dropped before it is
    # sent (the link stays up); the ones behind it go at once.
    def test_remote_max_packet_size(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp, extra="max_packet_size 600")
        self.addCleanup(m.stop)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 5,
            '{ local_topic = "q1/#", remote_topic = "", qos = 1 }',
            extra="remote_max_packet_size = 600"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("q1/s", b"B" * 1000, qos=1)
        pub.publish("q1/s", b"S" * 500, qos=1)  # 500 + 4 + 2 + 2 + 2 bytes: fits
        for i in range(10):
            pub.publish("q1/s", b"%d" % i, qos=1)
        want = [b"S" * 500] + [b"%d" % i for i in range(10)]
        wait_for(lambda: len(col.received) >= len(want), 10)
        time.sleep(0.3)
        self.assertEqual(first_order([x.payload for x in list(col.received)]), want)
        h = health(mon, "f", timeout=12, pred=lambda h: h["dropped"] >= 1)
        self.assertEqual((h["dropped"], h["dropped_link_closed"], h["reconnects"]), (1, 0, 0), h)
        self.assertRegex(inst.output(), r"error bridge: bridge=f topic=q1/s event=dropped "
                                        r"reason=larger_than_remote_maximum")
        self.assert_stops(inst)

    # Cuts of the link right after each reconnect while a 3.1.1 stream
    # (window 256) flows: each closes the link with messages in flight,
    # none of which is to blame. Nothing is dropped, everything arrives.
    def test_cuts_during_stream_drop_nothing(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port)
        self.addCleanup(px.close)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, 4, 5,
            '{ local_topic = "q1/#", remote_topic = "", qos = 1 }'))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        pub = self.client(port, "pub")
        pub.connect()
        n = 800
        done = threading.Event()

        def publish():
            for i in range(n):
                pub.publish("q1/s", b"%d" % i, qos=1)
                if i % 4 == 0:
                    time.sleep(0.03)
            done.set()
        t = threading.Thread(target=publish, daemon=True)
        t.start()
        ups = lambda: inst.output().count("event=link_up")
        cuts = 0
        while not done.is_set() and cuts < 6:
            n_up = ups()
            time.sleep(0.05 + 0.05 * (cuts % 3))
            px.cut()
            px.up()
            cuts += 1
            if not wait_for(lambda: ups() > n_up, 8):
                break
        t.join(30)
        self.assertGreaterEqual(cuts, 3)
        want = [b"%d" % i for i in range(n)]

        def got():
            with col._lock:
                return [x.payload for x in col.received if x.topic == "q1/s"]
        wait_for(lambda: len(set(got())) >= n, 30, step=0.2)
        self.assertEqual(first_order(got()), want)
        h = health(mon, "f", timeout=12, pred=lambda h: h["backlog"] == 0)
        self.assertEqual((h["dropped"], h["dropped_link_closed"], h["backlog"]), (0, 0, 0), h)
        self.assertNotIn("reason=remote_closed_link", inst.output())
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
