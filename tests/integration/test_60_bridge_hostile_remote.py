#!/usr/bin/python3
"""60: a remote broker that breaks the protocol (docs/bridge.md "Link
life"): the link is reset and tried again, the local broker goes on.

A raw socket plays the remote: it answers the bridge's CONNECT with a
CONNACK, then sends one hostile packet, and records what the bridge sends
back. Our CONNECT allows no topic alias (Topic Alias Maximum 0), so a
PUBLISH carrying one is a Protocol Error: the bridge sends DISCONNECT
0x94 and closes, without acking or publishing it (before the fix it was
acked, dropped and the link kept).

A remote whose v5 CONNACK limits what it takes (Debian's mosquitto with
max_qos 1 and retain_available false, like several cloud brokers) gets
no PUBLISH above its Maximum QoS and none retained: QoS 2 forwards go at
QoS 1, retained ones without the flag, all of them at once and in order.
Before the fix the remote closed the link on each such PUBLISH, and the
bridge dropped them one by one as forwards the remote closes the link on."""

import shutil
import socket
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import Mosquitto, _read_raw_packet, bridge_conf
from nmq import free_port, mstr, packet, u16
from nmq_ops import OpsTestCase, wait_for

CONNACK5 = bytes([0x20, 3, 0, 0, 0])


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()


class ScriptedRemote:
    """Answers each CONNECT with `connack`, then sends `after`; records
    the packet types the bridge sends on each connection and when the
    bridge closed it."""

    def __init__(self, connack, after):
        self.connack, self.after = connack, after
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((nmq.HOST, 0))
        self.srv.listen(4)
        self.port = self.srv.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []  # per connection: {"types": [...], "closed": bool}
        self.socks = []
        threading.Thread(target=self.serve, daemon=True).start()

    def close(self):
        for s in [self.srv] + self.socks:
            try:
                s.close()
            except OSError:
                pass

    def serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.socks.append(c)
            rec = {"types": [], "reasons": [], "closed": False}
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self.conn, args=(c, rec), daemon=True).start()

    def conn(self, c, rec):
        try:
            while True:
                first, body = _read_raw_packet(c)
                if first is None:
                    break
                t = first >> 4
                rec["types"].append(t)
                if t == 1:
                    c.sendall(self.connack)
                    time.sleep(0.1)
                    c.sendall(self.after)
                elif t == 8:  # SUBSCRIBE
                    c.sendall(bytes([0x90, 4, body[0], body[1], 0, 1]))
                elif t == 12:
                    c.sendall(b"\xd0\x00")
                elif t == 14 and body:
                    rec["reasons"].append(body[0])
        except (OSError, IndexError):
            pass
        rec["closed"] = True


class TestBridgeHostileRemote(OpsTestCase):

    def test_publish_with_topic_alias_resets_the_link(self):
        inst = self.instance()
        # A QoS 1 PUBLISH whose topic is only an alias the remote never
        # defined (and could not: none is allowed).
        pub = packet(3, 2, mstr("") + u16(7) + b"\x03\x23\x00\x05" + b"hostile")
        r = ScriptedRemote(CONNACK5, pub)
        self.addCleanup(r.close)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "h", "mqtt-tcp://127.0.0.1:%d" % r.port, 5, 30, "",
            '{ remote_topic = "c/#", qos = 1 }'))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        sub = self.client(port, "watch")
        sub.connect()
        sub.subscribe("#", 1)
        # Reset by the bridge well before the keepalive (30 s) would.
        self.assertTrue(wait_for(lambda: r.conns and r.conns[0]["closed"], 5.0),
                        "the link stayed up: %r" % r.conns)
        first = r.conns[0]
        self.assertNotIn(4, first["types"], "the PUBLISH was acked")
        self.assertEqual(first["reasons"], [0x94], first)
        self.assertTrue(inst.wait_output(r"event=link_down reason=\"PUBLISH with a topic alias",
                                         timeout=5), inst.output()[-2000:])
        # Tried again, and the local broker goes on.
        self.assertTrue(wait_for(lambda: len(r.conns) >= 2, 5.0))
        self.assertIsNone(sub.wait_message(timeout=0.5, match=lambda m: m.payload == b"hostile"))
        p = self.client(port, "p")
        p.connect()
        p.publish("local/x", b"still", qos=1)
        self.assertIsNotNone(sub.wait_message(timeout=5, match=lambda m: m.payload == b"still"))

    def test_remote_maximum_qos_and_retain_available(self):
        if shutil.which("mosquitto") is None:
            self.skipTest("Debian's mosquitto is needed as the remote broker")
        inst = self.instance()
        m = Mosquitto(inst.tmp, extra="max_qos 1\nretain_available false")
        self.addCleanup(m.stop)
        col = self.client(m.port, "col", version=5)
        col.connect()
        col.subscribe("q/#", 1)
        port = free_port()
        cache = 'bridges.mqtt.cache { mounted_file_path = "%s" }\n' % inst.tmp
        conf = inst.conf(port, extra=cache + bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % m.port, 5, 5, '{ local_topic = "q/#", remote_topic = "" }'))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        p = self.client(port, "p")
        p.connect()
        want = []
        for i in range(5):
            for topic, qos, retain in (("q/2", 2, False), ("q/r", 1, True), ("q/1", 1, False)):
                p.publish(topic, b"%s-%d" % (topic.encode(), i), qos=qos, retain=retain)
                want.append(b"%s-%d" % (topic.encode(), i))
        got = [x.payload for x in col.wait_messages(len(want), timeout=10)]
        self.assertEqual(got, want)
        self.assertIn("event=remote_limits maximum_qos=1 retain_available=0", inst.output())
        self.assertNotIn("event=link_down", inst.output())


if __name__ == "__main__":
    unittest.main()
