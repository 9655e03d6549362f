#!/usr/bin/python3
"""59: a bridge's QoS 2 forward sends its PUBLISH only once its SENT state
(its packet id) has committed to the cache (docs/bridge.md "Guarantees",
decisions/0041).

The remote is a raw-socket MQTT 3.1.1 server that delivers a QoS 2 message
when its PUBLISH comes (the spec's "method A": a PUBLISH whose packet id
awaits PUBREL is not delivered again), answers PUBREC and PUBCOMP, keeps
the session across connections, and counts every delivery by payload. A
backlog is queued while the link is down; the store is then held by another
process's write lock (nothing commits), the link comes up, and our broker
is killed -9 a second later. Before the fix, the PUBLISHes of the QoS 2
window went out at once and the restart, finding the rows still QUEUED,
sent them again under other packet ids: the remote delivered them twice
(or, where an old id was reused, took a new message for a duplicate and
lost it). Now nothing goes before its state commits, and every message is
delivered exactly once."""

import signal
import sqlite3
import time
import unittest

import nmq
import nmq_ops
from bridge_util import FaultProxy, RawRemote, bridge_conf
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()


class TestBridgeQos2Publish(OpsTestCase):

    def bridged(self):
        """Our broker with a cache and a QoS 2 bridge (3.1.1, clean_start
        false) of q2/# through a fault proxy to a RawRemote, link up."""
        inst = self.instance()
        r = RawRemote()
        self.addCleanup(r.close)
        px = FaultProxy(r.port)
        self.addCleanup(px.close)
        port = free_port()
        cache = ("bridges.mqtt.cache {\n disk_cache_size = 100000\n"
                 " mounted_file_path = \"%s\"\n}\n" % inst.tmp)
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, 4, 5,
            '{ local_topic = "q2/#", remote_topic = "", qos = 2 }',
            extra="clean_start = false") + cache)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        return inst, r, px, port, conf

    def test_kill9_qos2_publish_waits_for_its_state(self):
        inst, r, px, port, conf = self.bridged()
        pub = self.client(port, "pub")
        pub.connect()
        # Some forwards completed first, so that the packet ids of the
        # window below are not those a restarted bridge starts with.
        warm = 37
        for i in range(warm):
            pub.publish("q2/w", b"w%d" % i, qos=1)
        wait_for(lambda: r.completed >= warm, 10)
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        with r.lock:
            warm_publishes = r.publishes
        n = 100
        for i in range(n):
            pub.publish("q2/s", b"%d" % i, qos=1, wait=False)
        pub.publish("other", b"sync", qos=1)  # every one above committed
        pub.close()
        lock = sqlite3.connect(inst.path("nanomq.db"), isolation_level=None, timeout=10)
        self.addCleanup(lock.close)
        lock.execute("BEGIN IMMEDIATE")
        px.up()
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=2))
        time.sleep(1.0)  # what the window sends has reached the remote
        with r.lock:
            before = r.publishes - warm_publishes
        inst.kill(signal.SIGKILL)
        inst.proc.wait(5)
        lock.execute("COMMIT")
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        want = [b"w%d" % i for i in range(warm)] + [b"%d" % i for i in range(n)]

        def all_in():
            with r.lock:
                return len(set(r.delivered)) >= len(want) and r.completed >= warm + n
        wait_for(all_in, 20, step=0.1)
        time.sleep(0.5)  # late duplicates, if any
        with r.lock:
            got = list(r.delivered)
            total = r.publishes
        self.assertEqual(got, want, "%d deliveries, %d distinct, %d of %d wanted; %d PUBLISHes "
                         "(%d before the kill -9)" % (len(got), len(set(got)),
                                                      len(set(got) & set(want)), len(want),
                                                      total, before))
        self.assertEqual(before, 0, "PUBLISHes sent before their state committed")
        self.assert_stops(inst)

    def test_held_publish_never_sent_has_no_dup(self):
        # A QoS 2 forward held for its state's commit when its link drops
        # was never on the wire: on the next link its PUBLISH goes without
        # DUP ([MQTT-3.3.1-1]: DUP marks a redelivery). One that was sent
        # before the drop goes again with DUP.
        inst, r, px, port, conf = self.bridged()
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("q2/sent", b"sent", qos=1)
        wait_for(lambda: r.completed >= 1, 10)
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        n = 20
        for i in range(n):
            pub.publish("q2/s", b"h%d" % i, qos=1, wait=False)
        pub.publish("other", b"sync", qos=1)  # every one above committed
        pub.close()
        lock = sqlite3.connect(inst.path("nanomq.db"), isolation_level=None, timeout=10)
        self.addCleanup(lock.close)
        lock.execute("BEGIN IMMEDIATE")
        px.up()
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=2))
        time.sleep(1.0)
        with r.lock:
            self.assertEqual(r.publishes, 1, "a PUBLISH went before its state committed")
        px.cut()  # while they are held
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5, count=2))
        lock.execute("COMMIT")
        time.sleep(0.5)
        px.up()
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=3))
        want = [b"h%d" % i for i in range(n)]
        wait_for(lambda: r.completed >= 1 + n, 20, step=0.1)
        with r.lock:
            flags = list(r.dup_flags)
            got = list(r.delivered)
        self.assertEqual(got, [b"sent"] + want)
        self.assertEqual([(p, d) for p, d in flags if p != b"sent"], [(p, False) for p in want])
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
