#!/usr/bin/python3
"""61: reloads while a stream flows through a bridge (docs/bridge.md,
reload): nothing the local publisher had acked is lost, order is kept.

A QoS 1 stream is published (with the cache) as fast as its acks come while the bridge's
configuration is reloaded (SIGHUP) ten times: changes that keep the
forwards' filters (keepalive, topic prefix) and changes of the filter
itself (`s/#` and `s/+`, both matching the stream). Every message reaches
Debian's mosquitto, the remote, in order. Before the fix, a reload took
the forwards out of the topic tree before putting the new ones in, and a
message published in between was acked locally and never forwarded.

A reload that changes a bridge reconnects it at once, whatever the
backoff: the link had been up a moment (no ack, nothing received), which
the backoff takes for a remote refusing us, so before the fix the new
link waited up to the current backoff delay (minutes after a long
outage)."""

import shutil
import signal
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import Mosquitto, bridge_conf, first_order, need_mosquitto_remote
from nmq import free_port
from nmq_ops import OpsTestCase


setUpModule = need_mosquitto_remote


class TestBridgeReloadStream(OpsTestCase):

    def test_reloads_during_a_stream_lose_nothing(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        remote = self.client(m.port, "remote", version=5)
        remote.connect()
        remote.subscribe("s/#", 1)
        port = free_port()
        # With the cache, a backlog longer than the memory queue is kept too.
        cache = 'bridges.mqtt.cache { mounted_file_path = "%s" }\n' % inst.tmp

        def conf(flt, ka):
            return inst.conf(port, extra=cache + bridge_conf(
                "g", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, ka,
                '{ local_topic = "%s", remote_topic = "", qos = 1 }' % flt))

        path = conf("s/#", 3)
        self.start_broker(inst, ["start", "--conf", path], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        stop = threading.Event()
        sent = []

        def publish():
            p = nmq.PahoClient(port, "streamer")
            p.connect()
            while not stop.is_set():
                p.publish("s/y", b"%06d" % len(sent), qos=1)  # waits for the PUBACK
                sent.append(1)
            p.close()

        t = threading.Thread(target=publish)
        t.start()
        steps = [("s/#", 4), ("s/+", 4), ("s/+", 3), ("s/#", 3), ("s/#", 4),
                 ("s/+", 3), ("s/#", 3), ("s/#", 4), ("s/+", 4), ("s/#", 3)]
        for flt, ka in steps:
            time.sleep(0.15)
            conf(flt, ka)
            inst.kill(signal.SIGHUP)
        time.sleep(0.15)
        stop.set()
        t.join()
        n = len(sent)
        self.assertGreater(n, 100)
        self.assertGreaterEqual(len(inst.wait_output(r"event=reconfigured", timeout=5,
                                                     count=len(steps))), len(steps))
        want = [b"%06d" % i for i in range(n)]
        got = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not set(want) <= set(got):
            x = remote.wait_message(timeout=1)
            if x is not None:
                got.append(x.payload)
        missing = sorted(set(want) - set(got))
        self.assertEqual(missing, [], "%d of %d lost, first %r last %r\n%s" % (len(missing), n, missing[:1], missing[-1:], inst.output()[-3000:]))
        self.assertEqual(first_order(got), want)

    def test_reload_reconnects_at_once(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        port = free_port()

        def conf(ka):
            return inst.conf(port, extra=bridge_conf(
                "g", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, ka,
                '{ local_topic = "s/#", remote_topic = "" }', extra="backoff_max = 60s"))

        path = conf(3)
        self.start_broker(inst, ["start", "--conf", path], port=port)
        for i, ka in enumerate((4, 3, 4)):
            self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=i + 1),
                            inst.output()[-2000:])
            conf(ka)
            inst.kill(signal.SIGHUP)
            hits = inst.wait_output(r'reason="configuration changed" retry_in_ms=\d+',
                                    timeout=5, count=i + 1)
            self.assertEqual(len(hits), i + 1, inst.output()[-2000:])
        self.assertEqual(inst.output().count('reason="configuration changed" retry_in_ms=0'), 3,
                         inst.output()[-3000:])
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=4))


if __name__ == "__main__":
    unittest.main()
