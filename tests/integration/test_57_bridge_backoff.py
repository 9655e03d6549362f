#!/usr/bin/python3
"""57: how often a bridge that cannot connect tries again (docs/bridge.md
"Link life", decisions/0046).

A failed attempt that cost the remote no more than a TCP handshake (the
connection refused, or a plain TCP connection the remote closed before
sending anything, as a proxy or load balancer with nothing behind it
does) backs off up to a quarter of backoff_max (at least 500 ms); any
other failure (here a CONNACK refusing the bridge) up to backoff_max.
Every bridge below has backoff_max = 2s: cheap failures are retried
within 250-500 ms, the others within 1-2 s once the delay has doubled.
Attempts are counted, not timed: the bounds hold on a loaded machine
(a late wake-up only makes fewer attempts).

While a bridge waits to try again (up to backoff_max, 60 s by default)
its health on $SYS/brokers/bridges/<name> is published every 10 s, as
while the link is up: a subscriber sees the backlog grow between two
attempts."""

import socket
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import FaultProxy, bridge_conf, health
from nmq import HOST, free_port
from nmq_ops import OpsTestCase, wait_for

WINDOW_S = 8.0
RX_FAILED = r"bridge=%s server=\S+ event=connect_failed reason=\"([^\"]*)\" retry_in_ms=(\d+)"


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()


class ConnackRefuser:
    """A remote that reads the CONNECT and answers CONNACK 0x05 (not
    authorized) and closes: an attempt the remote did work for."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((HOST, 0))
        self.srv.listen(16)
        self.srv.settimeout(0.1)
        self.port = self.srv.getsockname()[1]
        self.accepted = 0
        self.stopped = False
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        while not self.stopped:
            try:
                c, _ = self.srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                c.settimeout(2)
                c.recv(1024)  # the CONNECT (small, one segment on loopback)
                c.sendall(b"\x20\x02\x00\x05")
            except OSError:
                pass
            c.close()

    def close(self):
        self.stopped = True
        self.srv.close()


class TestBridgeBackoff(OpsTestCase):

    def start_bridge(self, inst, server_port, extra=""):
        """Starts inst with bridge "b" to server_port; returns the MQTT
        port. extra: more keys of the bridge (a later key wins)."""
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "b", "mqtt-tcp://127.0.0.1:%d" % server_port, 4, 2,
            '{ local_topic = "q1/#", remote_topic = "" }', extra=extra))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        return port

    def attempts_in_window(self, counter):
        """Attempts counted over WINDOW_S seconds from the first one."""
        self.assertTrue(wait_for(lambda: counter() >= 1, 10), "no attempt")
        n0 = counter()
        time.sleep(WINDOW_S)
        return counter() - n0

    # Refused: the first delay (1 s, capped at a quarter of 2 s) is 250-
    # 500 ms, where any other failure waits 500-1,000 ms.
    def test_refused_is_retried_within_a_quarter(self):
        inst = self.instance()
        self.start_bridge(inst, free_port())  # nothing listens there
        m = inst.wait_output(RX_FAILED % "b", timeout=10)
        self.assertEqual(len(m), 1, inst.output()[-2000:])
        reason, delay = m[0][0], int(m[0][1])
        self.assertIn("refused", reason)
        self.assertTrue(250 <= delay < 500, delay)
        self.assert_stops(inst)

    # Closed before anything came (a proxy with nothing behind it): in
    # WINDOW_S seconds, 250-500 ms apart (plus the time each takes), about
    # 20 attempts; backing off to 1-2 s, never more than 8.
    def test_closed_before_anything_is_retried_often(self):
        inst = self.instance()
        px = FaultProxy(free_port())
        self.addCleanup(px.close)
        px.cut()  # accepts and closes at once
        self.start_bridge(inst, px.port)
        n = self.attempts_in_window(lambda: px.accepted)
        self.assertGreaterEqual(n, 11, inst.output()[-2000:])
        self.assertNotIn("event=link_up", inst.output())
        self.assert_stops(inst)

    # A CONNACK refusing the bridge cost the remote an authentication:
    # backed off to backoff_max as before, at most 8 attempts in WINDOW_S
    # seconds (1-2 s apart once the delay doubled; 9 allowed for the
    # counting), where a cheap failure makes about 20.
    def test_connack_refused_backs_off_to_backoff_max(self):
        inst = self.instance()
        rf = ConnackRefuser()
        self.addCleanup(rf.close)
        self.start_bridge(inst, rf.port)
        n = self.attempts_in_window(lambda: rf.accepted)
        self.assertLessEqual(n, 9, inst.output()[-2000:])
        self.assertGreaterEqual(n, 3, inst.output()[-2000:])
        m = inst.wait_output(RX_FAILED % "b", timeout=1)
        self.assertTrue(m and "CONNACK refused" in m[0][0], m)
        self.assertTrue(500 <= int(m[0][1]) < 1000, m)
        self.assert_stops(inst)

    # backoff_max 60 s against a remote that refuses the bridge in its
    # CONNACK: after the 6th attempt the wait is 16-32 s. A message
    # published locally right after that attempt goes to the backlog; a
    # health document within 13 s shows it, before any new attempt (only
    # the periodic publication can have sent it). Before the change the
    # health came only at attempts, so up to 60 s old.
    def test_health_published_while_waiting(self):
        inst = self.instance()
        rf = ConnackRefuser()
        self.addCleanup(rf.close)
        port = self.start_bridge(inst, rf.port, extra="backoff_max = 60s")
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/b", 0)
        pub = self.client(port, "pub")
        pub.connect()
        # Attempts 1-6 are 0.5-1, 1-2, 2-4, 4-8 and 8-16 s apart.
        self.assertTrue(wait_for(lambda: rf.accepted >= 6, 45), rf.accepted)
        time.sleep(1.0)  # the 6th attempt fails and its wait begins
        # Every document so far (the last one is the wait's).
        h = health(mon, "b", timeout=2, pred=lambda h: False)
        self.assertIsNotNone(h, inst.output()[-2000:])
        self.assertEqual(h["state"], "backing_off", h)
        self.assertEqual(h["backlog"], 0, h)
        pub.publish("q1/a", b"while down", qos=1)
        t0 = time.monotonic()
        h = health(mon, "b", timeout=13, pred=lambda h: h["backlog"] >= 1)
        self.assertIsNotNone(h, "no health within 13 s of the publish")
        self.assertGreaterEqual(h["backlog"], 1, h)
        self.assertEqual(h["state"], "backing_off", h)
        self.assertLess(time.monotonic() - t0, 13.5)
        self.assertEqual(rf.accepted, 6, "an attempt, not the period, published it")
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
