#!/usr/bin/python3
"""05: Will messages: abnormal close, normal DISCONNECT, retain, QoS,
protocol errors, MQTT 5 DISCONNECT 0x04, Will Delay Interval, will
properties."""

import time

import nmq
from nmq import BrokerTestCase

WILL_QUIET = 1.0  # how long we wait to be sure that no will comes


class WillCommon:
    V = 4

    def observer(self, qos=2, cid="observer"):
        o = self.paho(cid, self.V)
        o.subscribe("will/#", qos)
        return o

    def will_client(self, cid, topic="will/t", payload=b"gone", qos=1, retain=False,
                    will_props=None, **kw):
        r = self.raw(self.V)
        will = {"topic": topic, "payload": payload, "qos": qos, "retain": retain,
                "props": will_props}
        ack = r.connect(cid, will=will, **kw)
        self.assertEqual(ack.rc, 0)
        return r

    # 3.1.1 [MQTT-3.1.2-8] / 5.0 [MQTT5-3.1.2-7]/[MQTT5-3.1.2-8]: the Will Message is published
    # when the network connection closes without DISCONNECT (here a TCP RST),
    # with its topic, payload and QoS; exactly once.
    def test_will_on_abnormal_close(self):
        obs = self.observer()
        r = self.will_client("dies", qos=1)
        r.abort()
        m = obs.wait_message(5)
        self.assertIsNotNone(m, "no will after an abnormal close")
        self.assertEqual((m.topic, m.payload, m.qos), ("will/t", b"gone", 1))
        self.assertFalse(m.retain)
        obs.expect_no_message(WILL_QUIET)

    # Same for an orderly TCP close (FIN) without DISCONNECT.
    # 3.1.1 [MQTT-3.1.2-8] / 5.0 [MQTT5-3.1.2-8].
    def test_will_on_close_without_disconnect(self):
        obs = self.observer()
        r = self.will_client("fin", payload=b"fin")
        r.close()
        m = obs.wait_message(5)
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, b"fin")

    # Same with a paho client whose connection is dropped.
    def test_will_paho(self):
        obs = self.observer()
        c = self.paho("pahowill", self.V, will={"topic": "will/paho", "payload": b"pw", "qos": 2})
        c.kill()
        m = obs.wait_message(5)
        self.assertIsNotNone(m)
        self.assertEqual((m.topic, m.payload, m.qos), ("will/paho", b"pw", 2))

    # 3.1.1 [MQTT-3.1.2-10]/[MQTT-3.14.4-3] / 5.0 [MQTT5-3.1.2-10]/[MQTT5-3.14.4-3]:
    # after a normal DISCONNECT the will is discarded, not published.
    def test_no_will_after_disconnect(self):
        obs = self.observer()
        r = self.will_client("polite")
        r.disconnect()
        r.expect_closed()
        obs.expect_no_message(WILL_QUIET)

    # 3.1.1 [MQTT-3.1.2-17] / 5.0 [MQTT5-3.1.2-15]: Will Retain 1 -> the will is
    # published as a retained message (a later subscriber gets it, RETAIN=1).
    def test_will_retain(self):
        r = self.will_client("retwill", topic="will/ret", payload=b"last", retain=True)
        r.abort()
        # Wait until it has been published, then subscribe afresh.
        obs = self.observer(cid="retobs-live")
        m = obs.wait_message(5)
        self.assertIsNotNone(m, "will not published")
        late = self.paho("late", self.V)
        late.subscribe("will/ret", 1)
        lm = late.wait_messages(1)[0]
        self.assertEqual(lm.payload, b"last")
        self.assertTrue(lm.retain)

    # 3.1.1 [MQTT-3.1.2-16] / 5.0 [MQTT5-3.1.2-14]: Will Retain 0 -> published
    # as a non-retained message (nothing retained afterwards).
    def test_will_not_retained(self):
        obs = self.observer()
        r = self.will_client("nretwill", topic="will/nret", payload=b"x", retain=False)
        r.abort()
        self.assertIsNotNone(obs.wait_message(5))
        late = self.paho("late2", self.V)
        late.subscribe("will/nret", 1)
        late.expect_no_message()

    # 3.1.1 [MQTT-3.1.2-9]/[MQTT-3.1.2-14] / 5.0 [MQTT5-3.1.2-12]: the Will QoS
    # is used when publishing the will (downgraded to the subscriber's grant,
    # 3.1.1 [MQTT-3.8.4-6] / 5.0 [MQTT5-3.8.4-8]).
    def test_will_qos(self):
        for wq in (0, 1, 2):
            with self.subTest(will_qos=wq):
                o2 = self.paho("o2-%d" % wq, self.V)
                o2.subscribe("will/q%d" % wq, 2)
                o1 = self.paho("o1-%d" % wq, self.V)
                o1.subscribe("will/q%d" % wq, 1)
                r = self.will_client("wq%d" % wq, topic="will/q%d" % wq, qos=wq)
                r.abort()
                self.assertEqual(o2.wait_messages(1)[0].qos, wq)
                self.assertEqual(o1.wait_messages(1)[0].qos, min(wq, 1))

    # 3.1.1 3.1.2.5 ("the Server closes the Network Connection because of a
    # protocol error") with [MQTT-3.1.2-8] / 5.0 [MQTT5-3.1.2-8]: a client
    # disconnected for a malformed packet has its will published.
    def test_will_on_protocol_error(self):
        obs = self.observer()
        r = self.will_client("badboy", payload=b"malformed")
        r.send(nmq.publish_bytes("x", b"y", flags=0x06, pid=1, version=self.V))  # QoS 3
        r.expect_closed()
        m = obs.wait_message(5)
        self.assertIsNotNone(m, "no will after the broker closed a malformed client")
        self.assertEqual(m.payload, b"malformed")

    # The will of one client does not leak to another: two clients with
    # wills, only the one that dies has its will published.
    # 3.1.1 [MQTT-3.1.2-8] / 5.0 [MQTT5-3.1.2-8]: only on the connection that closed.
    def test_only_dead_clients_will(self):
        obs = self.observer()
        a = self.will_client("alive", topic="will/alive", payload=b"A")
        b = self.will_client("dead", topic="will/dead", payload=b"B")
        b.abort()
        self.assertEqual(obs.wait_messages(1)[0].payload, b"B")
        obs.expect_no_message(WILL_QUIET)
        a.disconnect()


class TestWillV311(WillCommon, BrokerTestCase):
    V = 4


class TestWillV5(WillCommon, BrokerTestCase):
    V = 5

    # 5.0 [MQTT5-3.1.2-8]/[MQTT5-3.1.2-10] and 3.14.2.1: DISCONNECT with reason
    # 0x04 (Disconnect with Will Message) publishes the will.
    def test_disconnect_0x04_sends_will(self):
        obs = self.observer()
        r = self.will_client("with-will", payload=b"requested")
        r.disconnect(rc=0x04)
        r.expect_closed()
        m = obs.wait_message(5)
        self.assertIsNotNone(m, "DISCONNECT 0x04 did not publish the will")
        self.assertEqual(m.payload, b"requested")

    # 5.0 [MQTT5-3.1.2-10]: DISCONNECT 0x00 (here explicit) discards the will.
    def test_disconnect_0x00_explicit_no_will(self):
        obs = self.observer()
        r = self.will_client("normal0")
        r.send(nmq.packet(nmq.DISCONNECT, 0, b"\x00\x00"))
        r.expect_closed()
        obs.expect_no_message(WILL_QUIET)

    # 5.0 [MQTT5-3.1.2-8] and 3.1.3.2.2: with a Will Delay Interval the will is
    # published after the delay (not before), the session outliving it.
    def test_will_delay(self):
        obs = self.observer()
        r = self.will_client("delayed", payload=b"late", will_props={"WillDelayInterval": 2},
                             clean=True, props={"SessionExpiryInterval": 30})
        t0 = time.monotonic()
        r.abort()
        m = obs.wait_message(6)
        dt = time.monotonic() - t0
        self.assertIsNotNone(m, "delayed will never published")
        self.assertGreaterEqual(dt, 1.8, "will published after %.2f s, before the 2 s delay" % dt)
        self.assertLess(dt, 4.5, "will published %.2f s after the close, delay was 2 s" % dt)

    # 5.0 [MQTT5-3.1.3-9]: if the client reconnects to its session before the
    # Will Delay Interval has passed, the will is not sent.
    def test_will_delay_cancelled_by_reconnect(self):
        obs = self.observer()
        r = self.will_client("comeback", payload=b"never", will_props={"WillDelayInterval": 2},
                             clean=True, props={"SessionExpiryInterval": 30})
        r.abort()
        self.raw(5, "comeback", clean=False, props={"SessionExpiryInterval": 30})
        obs.expect_no_message(3.5)

    # 5.0 [MQTT5-3.1.2-8]: "either the Will Delay Interval has elapsed or the
    # Session ends": with Session Expiry 0 the session ends at the close and
    # the will goes out at once despite a 30 s delay; with Session Expiry 1
    # it goes out after about 1 s.
    def test_will_sent_when_session_ends_first(self):
        for expiry, lo, hi in ((0, 0.0, 1.5), (1, 0.7, 3.5)):
            with self.subTest(session_expiry=expiry):
                if expiry == 0 and nmq.USE_MOSQUITTO:
                    # mosquitto 2.0.11 waits for the Will Delay Interval even
                    # though a session with expiry 0 has already ended.
                    continue
                obs = self.paho("obs-exp%d" % expiry, 5)
                obs.subscribe("will/exp%d" % expiry, 1)
                r = self.will_client("exp%d" % expiry, topic="will/exp%d" % expiry,
                                     will_props={"WillDelayInterval": 30},
                                     props={"SessionExpiryInterval": expiry})
                t0 = time.monotonic()
                r.abort()
                m = obs.wait_message(6)
                dt = time.monotonic() - t0
                self.assertIsNotNone(m, "will not sent when the session ended")
                self.assertTrue(lo <= dt <= hi, "will sent after %.2f s, expected %.1f..%.1f s"
                                % (dt, lo, hi))

    # 5.0 [MQTT5-3.1.3-10] and 3.1.3.2: will properties (User Property in
    # order, Content Type, Response Topic, Correlation Data, Payload Format
    # Indicator) are sent with the will.
    def test_will_properties(self):
        obs = self.observer()
        ups = [("z", "1"), ("a", "2"), ("z", "3")]
        r = self.will_client("propwill", payload=b"{}", will_props={
            "UserProperty": ups, "ContentType": "application/json",
            "ResponseTopic": "will/resp", "CorrelationData": b"\x00\x01corr",
            "PayloadFormatIndicator": 1})
        r.abort()
        m = obs.wait_message(5)
        self.assertIsNotNone(m)
        self.assertEqual(m.props.get("UserProperty"), ups)
        self.assertEqual(m.props.get("ContentType"), "application/json")
        self.assertEqual(m.props.get("ResponseTopic"), "will/resp")
        self.assertEqual(m.props.get("CorrelationData"), b"\x00\x01corr")
        self.assertEqual(m.props.get("PayloadFormatIndicator"), 1)

    # 5.0 3.1.3.2.4: the will's Message Expiry Interval is sent as the
    # publication's expiry (minus the time waited, [MQTT5-3.3.2-6]).
    def test_will_message_expiry_forwarded(self):
        obs = self.observer()
        r = self.will_client("expwill", will_props={"MessageExpiryInterval": 100})
        r.abort()
        m = obs.wait_message(5)
        self.assertIsNotNone(m)
        exp = m.props.get("MessageExpiryInterval")
        self.assertIsNotNone(exp, "will delivered without its Message Expiry Interval")
        self.assertTrue(95 <= exp <= 100, exp)


if __name__ == "__main__":
    nmq.main()
