#!/usr/bin/python3
"""07: Keep Alive: enforcement at 1.5 x the interval, PINGREQ/PINGRESP and
other traffic keeping a connection alive, Keep Alive 0, the will of a
timed-out client, and our keepalive_multiplier setting.

Both protocol versions run side by side inside each test to keep the file
short in wall-clock time."""

import threading
import time

import nmq
from nmq import PINGRESP, BrokerTestCase, skip_on_mosquitto


def close_time(raw, timeout):
    """Seconds until the broker closes raw (None if it does not), and the
    packets received before the close."""
    t0 = time.monotonic()
    try:
        pkts = raw.expect_closed(timeout)
    except AssertionError:
        return None, []
    return time.monotonic() - t0, pkts


class KeepaliveTests(BrokerTestCase):
    # The retry interval must not stretch the keepalive check (docs/compatibility.md §2).
    CONF = "mqtt { keepalive_multiplier = 1.5, retry_interval = 30s }"

    def effective_keepalive(self, ack, asked):
        # 5.0 [MQTT5-3.2.2-21]/[MQTT5-3.2.2-22]: a Server Keep Alive in CONNACK
        # replaces the client's value.
        return ack.props.get("ServerKeepAlive", asked)

    # 3.1.1 [MQTT-3.1.2-24] / 5.0 [MQTT5-3.1.2-22]: with Keep Alive 2 s and no
    # traffic the broker closes the connection after 1.5 x 2 = 3 s (we accept
    # 2.9 .. 4.2 s), and the will is published (3.1.1 3.1.2.5 / 5.0
    # [MQTT5-3.1.2-8]).  A v5 DISCONNECT, if sent, carries 0x8D.
    def test_silent_client_disconnected_at_1_5x(self):
        obs = self.paho("ka-obs", 4)
        obs.subscribe("ka/will/#", 1)
        clients = {}
        for v in (4, 5):
            r = self.raw(v)
            ack = r.connect("silent%d" % v, keepalive=2,
                            will={"topic": "ka/will/%d" % v, "payload": b"timeout", "qos": 1})
            self.assertEqual(ack.rc, 0)
            clients[v] = (r, self.effective_keepalive(ack, 2))
        results = {}

        def watch(v):
            results[v] = close_time(clients[v][0], 8)

        threads = [threading.Thread(target=watch, args=(v,)) for v in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for v, (dt, pkts) in results.items():
            ka = clients[v][1]
            self.assertIsNotNone(dt, "v%d: a silent client with keepalive %d was not disconnected" % (v, ka))
            self.assertGreaterEqual(dt, 1.45 * ka, "v%d: disconnected after %.2f s, before 1.5 x %d s"
                                    % (v, dt, ka))
            # mosquitto 2.0.11 checks keep alive on a coarse timer and closes
            # after up to ~6 s here; it gets a wider bound.
            slack = 3.5 if nmq.USE_MOSQUITTO else 1.2
            self.assertLessEqual(dt, 1.5 * ka + slack, "v%d: disconnected only after %.2f s (1.5 x %d s)"
                                 % (v, dt, ka))
            for p in pkts:
                self.assertEqual(p.type, nmq.DISCONNECT, "v%d: unexpected %r" % (v, p))
                self.assertEqual(v, 5, "DISCONNECT sent to a v3.1.1 client")
                self.assertEqual(p.rc, 0x8D)
        wills = sorted(m.topic for m in obs.wait_messages(2, timeout=3))
        self.assertEqual(wills, ["ka/will/4", "ka/will/5"])

    # 3.1.1 [MQTT-3.12.4-1] / 5.0 [MQTT5-3.12.4-1] and the keep alive rules:
    # a client that sends PINGREQ every second (keepalive 2), or any other
    # packet every second, stays connected for 5 s; a client with Keep Alive
    # 0 (3.1.1 3.1.2.10 / 5.0 3.1.2.10: keep alive off) stays connected while
    # silent.
    def test_traffic_keeps_connection_alive(self):
        pingers, publishers, zeros = {}, {}, {}
        for v in (4, 5):
            pingers[v] = self.raw(v, "pinger%d" % v, keepalive=2)
            publishers[v] = self.raw(v, "talker%d" % v, keepalive=2)
            zeros[v] = self.raw(v, "zero%d" % v, keepalive=0)
        deadline = time.monotonic() + 5.0
        pongs = {4: 0, 5: 0}
        while time.monotonic() < deadline:
            for v in (4, 5):
                pingers[v].pingreq()
                publishers[v].publish("ka/talk", b"tick", qos=0)
            t_end = time.monotonic() + 1.0
            for v in (4, 5):
                pingers[v].expect(PINGRESP, max(0.05, t_end - time.monotonic()))
                pongs[v] += 1
            left = t_end - time.monotonic()
            if left > 0:
                time.sleep(left)  # pacing of the client's own traffic
        for v in (4, 5):
            self.assertGreaterEqual(pongs[v], 4)
            for name, c in (("PINGREQ sender", pingers[v]), ("publisher", publishers[v]),
                            ("keepalive 0", zeros[v])):
                self.assertTrue(c.is_open(0.05), "v%d %s was disconnected" % (v, name))

    # A paho client (which sends PINGREQ on its own) with keepalive 1 stays
    # connected and keeps receiving for 4 s.
    def test_paho_short_keepalive_stays(self):
        for v in (4, 5):
            c = self.paho("pahoka%d" % v, v, keepalive=1)
            c.subscribe("ka/paho", 1)
        pub = self.paho("kapub", 4)
        time.sleep(4)  # several keepalive periods must pass
        pub.publish("ka/paho", b"still-here", qos=1)
        for c in self._clients[:2]:
            self.assertEqual(c.wait_messages(1)[0].payload, b"still-here")


class KeepaliveMultiplierTests(BrokerTestCase):
    CONF = "mqtt.keepalive_multiplier = 2.0"

    # docs/compatibility.md §2 mqtt.keepalive_multiplier: a client is disconnected after
    # keepalive x multiplier without traffic (2 x 2 s here; 3.9 .. 5.2 s).
    @skip_on_mosquitto("mosquitto has a fixed 1.5 x keep alive")
    def test_multiplier_2(self):
        r = self.raw(4, "mult", keepalive=2)
        dt, _ = close_time(r, 8)
        self.assertIsNotNone(dt, "not disconnected")
        self.assertTrue(3.9 <= dt <= 5.2, "disconnected after %.2f s, expected ~4 s" % dt)

class ServerKeepAliveTests(BrokerTestCase):
    CONF = "mqtt { max_keepalive = 2, keepalive_multiplier = 1.5 }"

    # 5.0 [MQTT5-3.2.2-21]/[MQTT5-3.2.2-22]: with Server Keep Alive in
    # CONNACK the client must use the server's value; the broker enforces
    # it (mqtt.max_keepalive caps what a v5 client may ask for, 0 included).
    # 3.1.1 has no way to say so: those clients keep their own value.
    @skip_on_mosquitto("mosquitto 2.0.11 uses max_keepalive differently")
    def test_server_keep_alive_caps_v5_clients(self):
        for asked in (100, 0):
            with self.subTest(asked=asked):
                r = self.raw(5)
                ack = r.connect("ska%d" % asked, keepalive=asked)
                self.assertEqual(ack.rc, 0)
                self.assertEqual(ack.props.get("ServerKeepAlive"), 2)
                dt, pkts = close_time(r, 8)
                self.assertIsNotNone(dt, "a silent v5 client held to 2 s was not disconnected")
                self.assertGreaterEqual(dt, 2.9)
                self.assertLessEqual(dt, 3.0 + 1.2)
        r = self.raw(5)
        ack = r.connect("ska-small", keepalive=1)
        self.assertNotIn("ServerKeepAlive", ack.props)
        v3 = self.raw(4, "ska-v3", keepalive=100)
        v3.expect_nothing(4.0)


if __name__ == "__main__":
    nmq.main()
