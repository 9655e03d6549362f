#!/usr/bin/python3
"""56: a QoS 2 message from the remote is published locally exactly once
across a kill -9 of our broker (docs/bridge.md "Guarantees", "From the
remote").

Debian's mosquitto is the remote; the bridge (clean_start = false, a
`subscription` at QoS 2) reaches it through a proxy that passes the
remote's PUBLISH to us and drops our PUBREC, so the remote keeps the
message in its session. Our broker is killed -9 once the PUBREC went out
(it goes only after the local writes and the packet id are committed),
restarted, and the remote resends the PUBLISH with DUP and the same packet
id: the packet id read back from the store makes it a duplicate, and the
persistent local subscriber gets the message once. The id's row is gone
once the flow completed."""

import os
import shutil
import signal
import sqlite3
import time
import unittest

import nmq
import nmq_ops
from bridge_util import FaultProxy, Mosquitto, bridge_conf, need_mosquitto_remote
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for

PUBREC = 5


setUpModule = need_mosquitto_remote


class TestBridgeInboundQos2(OpsTestCase):

    def test_exactly_once_across_kill9(self):
        for ver in (4, 5):
            with self.subTest(proto_ver=ver):
                self.run_case(ver)

    def run_case(self, ver):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port, mqtt_up=True)
        self.addCleanup(px.close)
        port = free_port()
        db = inst.path("db")
        conf = inst.conf(port, extra=(
            "sqlite { mounted_file_path = \"%s\" }\n" % db) + bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, ver, 5,
            subs='{ remote_topic = "down/#", qos = 2 }', extra="clean_start = false"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        s = self.client(port, "offline-sub", clean=False)
        s.connect()
        s.subscribe("down/#", 2)
        s.disconnect()
        px.drop_up = {PUBREC}
        rp = self.client(m.port, "remote-pub", version=5)
        rp.connect()
        rp.publish("down/x", b"once", qos=2)
        # Our PUBREC goes out once the message is stored for the offline
        # subscriber and its packet id recorded; the proxy drops it.
        self.assertTrue(wait_for(lambda: px.dropped_up >= 1, 10), inst.output()[-2000:])
        inst.kill(signal.SIGKILL)
        inst.proc.wait(5)
        px.drop_up = set()
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up session_present=1", timeout=10),
                        inst.output()[-2000:])
        self.assertIn("event=qos2_ids_read ids=1", inst.output())
        s2 = self.client(port, "offline-sub", clean=False)
        s2.connect()
        # A message after it: once it is here, the resent one was handled.
        rp.publish("down/x", b"next", qos=2)
        wait_for(lambda: len(s2.received) >= 2, 10)
        time.sleep(1.0)  # a late duplicate, if any
        self.assertEqual([(x.topic, x.payload) for x in list(s2.received)],
                         [("down/x", b"once"), ("down/x", b"next")], inst.output()[-3000:])
        self.assert_stops(inst)
        # Both flows completed (PUBREL, PUBCOMP): no packet id row is left.
        con = sqlite3.connect(os.path.join(db, "nanomq.db"))
        try:
            n = con.execute("SELECT count(*) FROM rel WHERE cid = '$bridge/f'").fetchone()[0]
        finally:
            con.close()
        self.assertEqual(n, 0)

    # The remote loses the session while our broker holds the packet ids
    # of three QoS 2 messages whose PUBREC it dropped (the proxy): after
    # the reconnect (session_present=0) the ids are void, and every row
    # of them is deleted (in one store batch), none left behind.
    def test_ids_cleared_when_remote_loses_session(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        px = FaultProxy(m.port, mqtt_up=True)
        self.addCleanup(px.close)
        port = free_port()
        db = inst.path("db")
        conf = inst.conf(port, extra=(
            "sqlite { mounted_file_path = \"%s\" }\n" % db) + bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, 5, 5,
            subs='{ remote_topic = "down/#", qos = 2 }', extra="clean_start = false"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        px.drop_up = {PUBREC}
        rp = self.client(m.port, "remote-pub", version=5)
        rp.connect()
        for i in range(3):
            rp.publish("down/x", b"%d" % i, qos=2)
        self.assertTrue(wait_for(lambda: px.dropped_up >= 3, 10), inst.output()[-2000:])
        rp.close()

        def rel_rows():
            con = sqlite3.connect(os.path.join(db, "nanomq.db"), timeout=5)
            try:
                return con.execute(
                    "SELECT count(*) FROM rel WHERE cid = '$bridge/f'").fetchone()[0]
            finally:
                con.close()
        self.assertTrue(wait_for(lambda: rel_rows() == 3, 5), rel_rows())
        # The remote restarts without its sessions (persistence false).
        m.stop()
        m2 = Mosquitto(inst.tmp, port=m.port)
        self.addCleanup(m2.stop)
        px.drop_up = set()
        self.assertTrue(inst.wait_output(r"event=link_up session_present=0", timeout=10,
                                         count=2), inst.output()[-2000:])
        self.assertTrue(wait_for(lambda: rel_rows() == 0, 5), rel_rows())
        self.assert_stops(inst)
        self.assertEqual(rel_rows(), 0)

    # The store's write queue is tiny (max_pending_writes), so some of the
    # remote's messages cannot be stored for the offline persistent
    # subscriber: those must not be acked (the remote keeps and resends
    # them), and every one arrives in the end.
    def test_refused_write_not_acked(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        port = free_port()
        db = inst.path("db")
        conf = inst.conf(port, extra=(
            "sqlite { mounted_file_path = \"%s\"\n max_pending_writes = 16 }\n" % db)
            + bridge_conf("f", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 5,
                          subs='{ remote_topic = "down/#", qos = 1 }',
                          extra="clean_start = false"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        s = self.client(port, "offline-sub", clean=False)
        s.connect()
        s.subscribe("down/#", 1)
        s.disconnect()
        n = 400
        rp = self.client(m.port, "remote-pub")
        rp.connect()
        for i in range(n):
            rp.publish("down/x", b"%03d" % i, qos=1, wait=False)
        rp.publish("down/end", b"end", qos=1)
        self.assertTrue(inst.wait_output(r"event=store_write_failed op=queue_put", timeout=20),
                        "no write was refused: the test did not test anything\n"
                        + inst.output()[-2000:])
        s2 = self.client(port, "offline-sub", clean=False)
        s2.connect()
        want = {b"%03d" % i for i in range(n)}
        ok = wait_for(lambda: want <= {x.payload for x in list(s2.received)}, 60)
        got = {x.payload for x in list(s2.received)}
        self.assertTrue(ok, "lost %d of %d: %r" % (len(want - got), n, sorted(want - got)[:20]))
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
