#!/usr/bin/python3
"""58: the refill of a wide in-flight window after acks (docs/bridge.md
"Guarantees", src/bridge/bridge.c pump_after_ack_locked).

While most of the window is in flight, the PUBLISHes that acks made room
for wait for a batch of free slots, at most a couple of milliseconds: the
link thread sends them then. Debian's mosquitto is the remote, behind a
proxy that lets only the first ten PUBACKs through to our bridge and drops
the rest. A backlog of 300 is queued while the link is down; once it is
up, our 3.1.1 bridge (a window of 256) has sent exactly 266
forwards, the ten refilled although far fewer than a batch came back, and
not one beyond the window. Once the proxy passes everything again and the
link is cut and restored, every forward arrives, in order."""

import shutil
import time
import unittest

import nmq
import nmq_ops
from bridge_util import FaultProxy, Mosquitto, bridge_conf, first_order, need_mosquitto_remote
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for

PUBACK = 4


setUpModule = need_mosquitto_remote


class TestBridgeRefill(OpsTestCase):

    def test_refill_after_few_acks_and_window_kept(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port, mqtt_down=True)
        self.addCleanup(px.close)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, 4, 5,
            '{ local_topic = "q1/#", remote_topic = "" }', extra="max_send_queue_len = 1024"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        # The backlog is queued while the link is down, so that nothing
        # but the acks (and the refill's deadline) makes the bridge send.
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        n = 300
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(n):
            pub.publish("q1/s", b"%d" % i, qos=1, wait=False)
        pub.publish("other", b"sync", qos=1)  # every one above routed
        with px.lock:
            px.pass_down = {PUBACK: 10}
        px.up()

        def distinct():
            with col._lock:
                return {x.payload for x in col.received if x.topic == "q1/s"}
        wait_for(lambda: len(distinct()) >= 266, 10, step=0.1)
        time.sleep(1.0)  # anything beyond the window would be here by now
        got = distinct()
        self.assertEqual(got, {b"%d" % i for i in range(266)},
                         "%d distinct, %d PUBACKs dropped" % (len(got), px.dropped_down))
        self.assertGreater(px.dropped_down, 200)
        # Everything again: the unacked ones are resent on the next link.
        with px.lock:
            px.pass_down = {}
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5, count=2))
        px.up()
        wait_for(lambda: len(distinct()) >= n, 15, step=0.2)
        time.sleep(0.5)
        with col._lock:
            order = first_order([x.payload for x in col.received if x.topic == "q1/s"])
        self.assertEqual(order, [b"%d" % i for i in range(n)])
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
