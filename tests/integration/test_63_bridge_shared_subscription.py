#!/usr/bin/python3
"""63: a bridge `subscription` on a shared filter (`$share/<group>/...`,
so that several gateways share the remote's messages), with our own
broker as the remote, on 3.1.1 and v5 links.

The messages are published locally with the entry's rewrite (`prefix`),
like those of a plain filter; before the fix the entry was not found for
them (their topic was matched against "$share/..."), and they came out
under the remote topic. On a v5 link the SUBSCRIBE carries No Local only
for plain filters: on a shared one it is a Protocol Error, and the remote
closed the link on it.

A `subscription` entry removed from the configuration stops: a reload
UNSUBSCRIBEs it on the next link (the remote session is persistent, with
`clean_start = false`), and what the remote still sends for a filter of
no entry (one removed while our broker was down) is not published
locally. Before the fix the remote kept sending it and it was published
under the remote topic, without the entry's rewrite."""

import signal
import time
import unittest

import nmq
import nmq_ops
from bridge_util import Mosquitto, bridge_conf, health
from nmq import free_port
from nmq_ops import OpsTestCase


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()


class TestBridgeSharedSubscription(OpsTestCase):

    def test_shared_subscription_rewritten(self):
        rinst = self.instance()
        rport = free_port()
        self.start_broker(rinst, ["start", "--conf", rinst.conf(rport)], port=rport)
        for ver in (4, 5):
            with self.subTest(proto_ver=ver):
                inst = self.instance()
                port = free_port()
                conf = inst.conf(port, extra=bridge_conf(
                    "sh%d" % ver, "mqtt-tcp://127.0.0.1:%d" % rport, ver, 5, "",
                    '{ remote_topic = "$share/gw/cmd/#", qos = 1, prefix = "cloud/" }'))
                self.start_broker(inst, ["start", "--conf", conf], port=port)
                self.assertTrue(inst.wait_output(r"event=link_up", timeout=10),
                                inst.output()[-2000:])
                local = self.client(port, "local", version=5)
                local.connect()
                local.subscribe("#", 1)
                time.sleep(0.3)  # the bridge's SUBSCRIBE is in place
                rpub = self.client(rport, "rpub%d" % ver)
                rpub.connect()
                rpub.publish("cmd/x", b"v%d" % ver, qos=1)
                got = local.wait_message(timeout=5)
                self.assertIsNotNone(got, inst.output()[-2000:])
                self.assertEqual((got.topic, got.payload), ("cloud/cmd/x", b"v%d" % ver))
                self.assertNotIn("event=link_down", inst.output())
                inst.stop()

    def test_removed_subscription_stops(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        port = free_port()

        def conf(flt):
            return inst.conf(port, extra=bridge_conf(
                "s", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 5, "",
                '{ remote_topic = "%s", qos = 1, prefix = "cloud/" }' % flt,
                extra="clean_start = false"))

        path = conf("cmd/#")
        self.start_broker(inst, ["start", "--conf", path], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        local = self.client(port, "local", version=5)
        local.connect()
        local.subscribe("#", 1)
        rpub = self.client(m.port, "rpub")
        rpub.connect()

        def check(gone, kept):
            time.sleep(0.3)  # the bridge's (UN)SUBSCRIBE is in place
            rpub.publish(gone + "/x", b"gone", qos=1)
            rpub.publish(kept + "/y", b"kept", qos=1)
            got = local.wait_message(timeout=5)
            self.assertEqual((got.topic, got.payload), ("cloud/%s/y" % kept, b"kept"))
            local.expect_no_message(0.5)

        conf("other/#")
        inst.kill(signal.SIGHUP)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=2))
        check("cmd", "other")
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        h = health(mon, "s", timeout=12, pred=lambda h: h["received"] >= 1)
        self.assertEqual((h["received"], h["dropped"]), (1, 0), h)  # not even sent
        # Removed while our broker was down: the remote session still has
        # it; what it sends is dropped here.
        self.assertEqual(inst.stop()[0], 0)
        conf("third/#")
        self.start_broker(inst, ["start", "--conf", path], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        local = self.client(port, "local2", version=5)
        local.connect()
        local.subscribe("#", 1)
        check("other", "third")


if __name__ == "__main__":
    unittest.main()
