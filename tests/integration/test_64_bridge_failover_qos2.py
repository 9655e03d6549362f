#!/usr/bin/python3
"""64: QoS 2 forwards across a failover (`hybrid_servers`, docs/bridge.md
"failover"), with two Debian mosquittos as the remotes.

Mosquitto delivers an incoming QoS 2 message when its PUBREL comes. A
proxy in front of the first server drops the bridge's PUBRELs, so the
forwards stay there, acknowledged by PUBREC and undelivered; the first
server then goes away for good and the bridge fails over to the second,
which has no session for it. The messages are sent again there and
delivered, in order. Before the fix the bridge counted them as
forwarded when the second server said "no session" (as for a remote
that lost its session): they reached nobody.

The same with the offline cache and a kill -9 of our broker after the
PUBRECs: the server of each PUBREC is kept in the cache row with the
RELEASED state, so that the restarted broker, which finds the first
server down, sends them again to the second. Before, a row read back
had no server ("unknown") and was counted as received there.

And with a reload that swaps the servers while the messages wait for
their PUBREL: the server of a PUBREC is known by its URL, not by its
place in the list, so the second server, now first, is not taken for
the one that sent the PUBRECs."""

import shutil
import signal
import time
import unittest

import nmq
import nmq_ops
from bridge_util import FaultProxy, Mosquitto, bridge_conf, need_mosquitto_remote
from nmq import free_port
from nmq_ops import OpsTestCase

PUBREL = 6


setUpModule = need_mosquitto_remote


class TestBridgeFailoverQos2(OpsTestCase):

    def test_released_forwards_sent_again_after_failover(self):
        inst = self.instance()
        m1 = Mosquitto(inst.tmp)
        self.addCleanup(m1.stop)
        m2 = Mosquitto(inst.tmp)
        self.addCleanup(m2.stop)
        px1 = FaultProxy(m1.port, mqtt_up=True)
        self.addCleanup(px1.close)
        px1.drop_up = {PUBREL}
        c1 = self.client(m1.port, "c1", version=5)
        c1.connect()
        c1.subscribe("s/#", 2)
        c2 = self.client(m2.port, "c2", version=5)
        c2.connect()
        c2.subscribe("s/#", 2)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "hy", "mqtt-tcp://127.0.0.1:%d" % px1.port, 4, 3,
            '{ local_topic = "s/#", remote_topic = "", qos = 2 }',
            extra='clean_start = false\nhybrid_servers = ["mqtt-tcp://127.0.0.1:%d"]' % m2.port))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        p = self.client(port, "p")
        p.connect()
        n = 5
        for i in range(n):
            p.publish("s/y", b"%d" % i, qos=2)
        deadline = time.monotonic() + 5
        while px1.dropped_up < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(px1.dropped_up, n)  # all PUBREC'd, none released there
        px1.cut()  # the first server is gone: failover to the second
        self.assertTrue(inst.wait_output(r"127.0.0.1:%d event=link_up" % m2.port, timeout=15),
                        inst.output()[-2000:])
        got = c2.wait_messages(n, timeout=10)
        self.assertEqual([x.payload for x in got], [b"%d" % i for i in range(n)])
        c2.expect_no_message(0.5)
        self.assertIsNone(c1.wait_message(timeout=0.2))

    def test_released_forwards_sent_again_after_kill9_and_failover(self):
        inst = self.instance()
        m1 = Mosquitto(inst.tmp)
        self.addCleanup(m1.stop)
        m2 = Mosquitto(inst.tmp)
        self.addCleanup(m2.stop)
        px1 = FaultProxy(m1.port, mqtt_up=True)
        self.addCleanup(px1.close)
        px1.drop_up = {PUBREL}
        c1 = self.client(m1.port, "c1", version=5)
        c1.connect()
        c1.subscribe("s/#", 2)
        c2 = self.client(m2.port, "c2", version=5)
        c2.connect()
        c2.subscribe("s/#", 2)
        port = free_port()
        cache = ("bridges.mqtt.cache {\n disk_cache_size = 1000\n mounted_file_path = \"%s\"\n}\n"
                 % inst.tmp)
        conf = inst.conf(port, extra=bridge_conf(
            "hy", "mqtt-tcp://127.0.0.1:%d" % px1.port, 4, 3,
            '{ local_topic = "s/#", remote_topic = "", qos = 2 }',
            extra='clean_start = false\nhybrid_servers = ["mqtt-tcp://127.0.0.1:%d"]'
            % m2.port) + cache)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        p = self.client(port, "p")
        p.connect()
        n = 5
        for i in range(n):
            p.publish("s/y", b"%d" % i, qos=2)
        deadline = time.monotonic() + 5
        while px1.dropped_up < n and time.monotonic() < deadline:
            time.sleep(0.05)
        # All PUBREC'd by the first server, none released there: each
        # PUBREL leaves once its RELEASED state has committed.
        self.assertEqual(px1.dropped_up, n)
        p.close()
        inst.kill(signal.SIGKILL)
        inst.proc.wait()
        px1.close()  # the first server is gone for good
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"127.0.0.1:%d event=link_up" % m2.port, timeout=15),
                        inst.output()[-2000:])
        got = c2.wait_messages(n, timeout=10)
        self.assertEqual([x.payload for x in got], [b"%d" % i for i in range(n)],
                         inst.output()[-2000:])
        c2.expect_no_message(1.0)
        self.assertIsNone(c1.wait_message(timeout=0.2))

    def test_released_forwards_sent_again_after_reload_swapping_servers(self):
        inst = self.instance()
        m1 = Mosquitto(inst.tmp)
        self.addCleanup(m1.stop)
        m2 = Mosquitto(inst.tmp)
        self.addCleanup(m2.stop)
        px1 = FaultProxy(m1.port, mqtt_up=True)
        self.addCleanup(px1.close)
        px1.drop_up = {PUBREL}
        c1 = self.client(m1.port, "c1", version=5)
        c1.connect()
        c1.subscribe("s/#", 2)
        c2 = self.client(m2.port, "c2", version=5)
        c2.connect()
        c2.subscribe("s/#", 2)
        port = free_port()
        u1 = "mqtt-tcp://127.0.0.1:%d" % px1.port
        u2 = "mqtt-tcp://127.0.0.1:%d" % m2.port

        def conf(first, second):
            return inst.conf(port, extra=bridge_conf(
                "hy", first, 4, 3, '{ local_topic = "s/#", remote_topic = "", qos = 2 }',
                extra='clean_start = false\nhybrid_servers = ["%s"]' % second))
        path = conf(u1, u2)
        self.start_broker(inst, ["start", "--conf", path], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        p = self.client(port, "p")
        p.connect()
        n = 5
        for i in range(n):
            p.publish("s/y", b"%d" % i, qos=2)
        deadline = time.monotonic() + 5
        while px1.dropped_up < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(px1.dropped_up, n)
        conf(u2, u1)  # the second server first now
        inst.kill(signal.SIGHUP)
        self.assertTrue(inst.wait_output(r"127.0.0.1:%d event=link_up" % m2.port, timeout=15),
                        inst.output()[-2000:])
        got = c2.wait_messages(n, timeout=10)
        self.assertEqual([x.payload for x in got], [b"%d" % i for i in range(n)],
                         inst.output()[-2000:])
        c2.expect_no_message(0.5)
        self.assertIsNone(c1.wait_message(timeout=0.2))


if __name__ == "__main__":
    unittest.main()
