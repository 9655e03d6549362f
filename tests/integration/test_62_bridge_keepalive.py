#!/usr/bin/python3
"""62: the bridge keeps its side of the keepalive (docs/bridge.md "Link
life"): a packet within every keepalive, whatever the remote sends.

A raw v5 remote counts the PINGREQs of the bridge (a remote such as
Debian's mosquitto closes a client that sent nothing for 1.5 times its
keepalive, "exceeded timeout"):

* A subscription-only link receiving a QoS 0 stream has nothing to
  answer: it must still send PINGREQs. Before the fix they went only when
  nothing had come *from* the remote, so such a link was dropped by the
  remote every keepalive or so, and the messages sent meanwhile lost.
* A v5 remote's Server Keep Alive (mosquitto's max_keepalive, when below
  the bridge's keepalive) replaces the configured keepalive. Before the
  fix it was ignored, and the remote dropped the idle link."""

import socket
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import _read_raw_packet, bridge_conf
from nmq import free_port, mstr, packet
from nmq_ops import OpsTestCase


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()


class PingCounter:
    """A v5 remote: CONNACK (with Server Keep Alive server_ka if given),
    SUBACK, PINGRESP; with stream, a QoS 0 PUBLISH on tele/x every 0.1 s.
    Records the time of every PINGREQ."""

    def __init__(self, server_ka=None, stream=False):
        self.server_ka, self.stream = server_ka, stream
        self.pings = []
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((nmq.HOST, 0))
        self.srv.listen(2)
        self.port = self.srv.getsockname()[1]
        self.c = None
        self.stop = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def close(self):
        self.stop.set()
        for s in (self.srv, self.c):
            try:
                if s is not None:
                    s.close()
            except OSError:
                pass

    def publish(self):
        n = 0
        while not self.stop.wait(0.1):
            try:
                self.c.sendall(packet(3, 0, mstr("tele/x") + b"\x00" + b"%d" % n))
            except OSError:
                return
            n += 1

    def serve(self):
        try:
            self.c, _ = self.srv.accept()
            while True:
                first, body = _read_raw_packet(self.c)
                if first is None:
                    return
                t = first >> 4
                if t == 1:
                    if self.server_ka is None:
                        self.c.sendall(bytes([0x20, 3, 0, 0, 0]))
                    else:
                        ka = self.server_ka
                        self.c.sendall(bytes([0x20, 6, 0, 0, 3, 0x13, ka >> 8, ka & 0xFF]))
                elif t == 8:
                    self.c.sendall(bytes([0x90, 4, body[0], body[1], 0, 0]))
                    if self.stream:
                        threading.Thread(target=self.publish, daemon=True).start()
                elif t == 12:
                    self.pings.append(time.monotonic())
                    self.c.sendall(b"\xd0\x00")
        except OSError:
            pass


class TestBridgeKeepalive(OpsTestCase):

    def link(self, remote, keepalive, subs):
        self.addCleanup(remote.close)
        inst = self.instance()
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "k", "mqtt-tcp://127.0.0.1:%d" % remote.port, 5, keepalive, "", subs))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        return inst, port

    def test_pingreq_while_receiving_qos0(self):
        r = PingCounter(stream=True)
        inst, port = self.link(r, 2, '{ remote_topic = "tele/#", qos = 0 }')
        local = self.client(port, "local")
        local.connect()
        local.subscribe("tele/#", 0)
        self.assertIsNotNone(local.wait_message(timeout=5))
        time.sleep(3.5)  # the stream goes on: a PINGREQ every second or so
        self.assertGreaterEqual(len(r.pings), 2, "PINGREQs in 3.5 s: %d" % len(r.pings))
        self.assertNotIn("event=link_down", inst.output())

    def test_server_keep_alive(self):
        r = PingCounter(server_ka=1)
        inst, _ = self.link(r, 30, "")
        time.sleep(3.0)  # idle; 30 s would send none
        self.assertGreaterEqual(len(r.pings), 2, "PINGREQs in 3 s: %d" % len(r.pings))
        self.assertNotIn("event=link_down", inst.output())


if __name__ == "__main__":
    unittest.main()
