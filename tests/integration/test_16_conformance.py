#!/usr/bin/python3
"""16: conformance corner cases found by external MQTT test suites: the
takeover of a session that ends with its connection, the protocol name, the
MQTT 3.1 CONNACK, a duplicate PUBREC, malformed topic filters, the client's
Maximum Packet Size on every packet the broker sends, and the will of a
session ended by a Clean Start reconnect.

Tags: [MQTT-x.y.z-n] names a normative statement of MQTT 3.1.1,
[MQTT5-x.y.z-n] one of MQTT 5.0."""

import time

import nmq
from nmq import (CONNACK, DISCONNECT, PUBLISH, PUBREL, PUBREC, SUBACK, BrokerTestCase,
                 RawClient)


def hx(s):
    return bytes.fromhex(s)


class TakeoverOfCleanSession(BrokerTestCase):
    """A session that lasts as long as its network connection ends when a
    new connection takes the client id over: it is never resumed."""

    def assert_not_resumed(self, new, topic):
        """new must not receive what the old session subscribed to."""
        pub = self.raw(4, "tk-pub")
        pub.publish(topic, b"old-sub", qos=1)
        new.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # [MQTT-3.1.2-6] [MQTT-3.2.2-3]: A (CleanSession 1) subscribes; B takes
    # the id over with CleanSession 0: Session Present 0, and A's
    # subscription is gone with A's session.  The exact bytes of the report.
    def test_v311_clean_session_taken_over_by_persistent(self):
        a = self.raw(4)
        a.send(hx("100e00044d5154540402003c0002746b"))
        self.assertEqual(a.expect(CONNACK).body, hx("0000"))
        a.send(hx("8206000100017401"))
        self.assertEqual(a.expect(SUBACK).codes, [1])
        b = self.raw(4)
        b.send(hx("100e00044d5154540400003c0002746b"))
        ack = b.expect(CONNACK)
        self.assertEqual(ack.body, hx("0000"), "CONNACK %r: a clean session was resumed" % ack)
        self.assert_closed(a, msg="A taken over")
        self.assert_not_resumed(b, "t")
        # B's own session is persistent: B reconnecting resumes it.
        b.close()
        c = self.raw(4)
        self.assertTrue(c.connect("tk", clean=False).session_present)

    # [MQTT5-3.2.2-3]: 5.0, A with Session Expiry 0 (absent),
    # Clean Start 0 or 1; B with Clean Start 0 and Session Expiry 60 gets
    # Session Present 0 and none of A's subscriptions.
    def test_v5_zero_expiry_session_taken_over(self):
        for a_clean in (True, False):
            with self.subTest(a_clean_start=a_clean):
                cid = "tk5-%d" % a_clean
                topic = "t5/%d" % a_clean
                a = self.raw(5, cid, clean=a_clean)
                a.subscribe([(topic, 1)])
                b = self.raw(5)
                ack = b.connect(cid, clean=False, props={"SessionExpiryInterval": 60})
                self.assertEqual(ack.rc, 0)
                self.assertFalse(ack.session_present, "session with expiry 0 resumed: %r" % ack)
                self.assert_closed(a, v5_codes=(0x8E,), msg="A taken over")
                self.assert_not_resumed(b, topic)

    # A persistent session is still resumed by a takeover (the other branch
    # of the same decision): [MQTT-3.2.2-2] / [MQTT5-3.2.2-3].
    def test_persistent_session_still_resumed(self):
        for v in (4, 5):
            with self.subTest(version=v):
                kw = {"clean": False}
                if v == 5:
                    kw["props"] = {"SessionExpiryInterval": 60}
                cid = "keep%d" % v
                a = self.raw(v, cid, **kw)
                a.subscribe([("keep/%d" % v, 1)])
                b = self.raw(v)
                ack = b.connect(cid, **kw)
                self.assertTrue(ack.session_present)
                pub = self.raw(4, "keep-pub%d" % v)
                pub.publish("keep/%d" % v, b"x", qos=1)
                self.assertEqual(b.expect(PUBLISH).payload, b"x")


class ProtocolNameAndVersion(BrokerTestCase):

    # [MQTT-3.1.2-1] [MQTT-3.1.4-1]: a wrong protocol name is not answered:
    # the connection is closed without a CONNACK.  The report's bytes, then
    # an unknown name with each protocol level.
    def test_wrong_protocol_name_closed_silently(self):
        r = self.raw(4)
        r.send(hx("100c00034d51540402000a000170"))
        self.assertEqual(r.expect_closed(msg="protocol name MQT"), [])
        for level in (3, 4, 5):
            with self.subTest(level=level):
                r = self.raw(4)
                r.send_connect("badname", proto_name="MQTX", proto_level=level, version=4)
                self.assertEqual(r.expect_closed(msg="protocol name MQTX"), [])

    # [MQTT5-3.1.2-1]: the same for a 5.0 CONNECT (with properties).
    def test_wrong_protocol_name_v5(self):
        r = self.raw(5)
        r.send_connect("badname5", proto_name="mqtt", version=5)
        self.assertEqual(r.expect_closed(msg="protocol name mqtt"), [])

    # MQTT 3.1 ("MQIsdp", level 3) keeps working.
    def test_mqtt31_still_accepted(self):
        r = self.raw(4)
        r.send(hx("100f00064d51497364700300003c000164"))
        self.assertEqual(r.expect(CONNACK).body, hx("0000"))
        r.pingreq()
        r.expect(nmq.PINGRESP)

    # MQTT 3.1 has no Session Present flag: the first CONNACK byte is
    # reserved and 0, also when a stored session is resumed (MQTT 3.1 has
    # no numbered statements).
    def test_mqtt31_connack_first_byte_zero(self):
        a = self.raw(4)
        a.send(hx("100f00064d51497364700300003c000164"))
        self.assertEqual(a.expect(CONNACK).body, hx("0000"))
        b = self.raw(4)  # takes over the live session
        b.send(hx("100f00064d51497364700300003c000164"))
        self.assertEqual(b.expect(CONNACK).body, hx("0000"))
        b.disconnect()
        b.expect_closed()
        c = self.raw(4)  # resumes the stored session
        c.send(hx("100f00064d51497364700300003c000164"))
        self.assertEqual(c.expect(CONNACK).body, hx("0000"))


def wire_size(p):
    """Bytes the packet p took on the wire (fixed header included)."""
    return 1 + len(nmq.vbi(len(p.body))) + len(p.body)


class DuplicatePubrec(BrokerTestCase):

    def qos2_flow(self, v, cid):
        """A subscriber that has received a QoS 2 PUBLISH; returns (sub, pid)."""
        sub = self.raw(v, cid)
        sub.subscribe([("q2/%s" % cid, 2)])
        pub = self.raw(v, cid + "-pub")
        pub.publish("q2/%s" % cid, b"once", qos=2)
        p = sub.expect(PUBLISH)
        self.assertEqual(p.qos, 2)
        return sub, p.pid

    # [MQTT5-4.3.3-4] [MQTT5-4.3.3-5]: a PUBREC repeated while the PUBREL is
    # unacknowledged is answered with the same PUBREL (reason 0), not 0x92.
    def test_v5_repeated_pubrec_gets_pubrel(self):
        sub, pid = self.qos2_flow(5, "dup5")
        for attempt in range(2):
            sub.send(nmq.ack_bytes(PUBREC, pid, version=5))
            rel = sub.expect(PUBREL, pid=pid)
            self.assertEqual(rel.rc, 0, "PUBREC #%d: PUBREL %r" % (attempt + 1, rel))
        self.assertEqual(rel.body, nmq.u16(pid))
        sub.send(nmq.ack_bytes(nmq.PUBCOMP, pid, version=5))
        # The flow is over: now the id is unknown (PUBREL 0x92).
        sub.send(nmq.ack_bytes(PUBREC, pid, version=5))
        self.assertEqual(sub.expect(PUBREL, pid=pid).rc, 0x92)

    # [MQTT-4.3.3-1]: the same flow on 3.1.1 (no reason codes).
    def test_v311_repeated_pubrec_gets_pubrel(self):
        sub, pid = self.qos2_flow(4, "dup4")
        for _ in range(2):
            sub.send(nmq.ack_bytes(PUBREC, pid))
            self.assertEqual(sub.expect(PUBREL, pid=pid).body, nmq.u16(pid))
        sub.send(nmq.ack_bytes(nmq.PUBCOMP, pid))
        sub.pingreq()
        sub.expect(nmq.PINGRESP)


class MalformedTopicFilters(BrokerTestCase):
    """A filter that breaks the syntax is a protocol violation (close; 5.0
    DISCONNECT 0x82 first), not a refusal (SUBACK 0x8F / 0x80)."""

    BAD = ("", "#/a", "a/#/b", "a+", "$share/g/", "$share/g", "$share//t")

    def assert_violation(self, r, what):
        pkts = r.expect_closed(msg=what)
        if r.version == 5:
            self.assertEqual([(p.type, p.rc) for p in pkts], [(DISCONNECT, 0x82)],
                             "%s: %r" % (what, pkts))
        else:
            self.assertEqual(pkts, [], "%s: %r" % (what, pkts))

    # [MQTT-4.7.3-1] [MQTT-4.8.0-1]: the report's bytes, 3.1.1 SUBSCRIBE
    # with an empty filter: closed, no SUBACK 0x80.
    def test_v311_empty_filter_closes(self):
        r = self.raw(4, "emp4")
        r.send(hx("82051234000000"))
        self.assert_violation(r, "empty filter")

    # [MQTT5-4.7.3-1] [MQTT5-4.13.1-1]: the report's bytes for 5.0:
    # DISCONNECT 0x82 and close, not SUBACK 0x8F.
    def test_v5_empty_filter_disconnects(self):
        r = self.raw(5, "emp5")
        r.send(hx("8206123400000000"))
        self.assert_violation(r, "empty filter")

    # 3.1.1 [MQTT-4.7.1-2] [MQTT-4.7.1-3] [MQTT-4.7.3-1] [MQTT-4.8.0-1];
    # 5.0 [MQTT5-4.7.1-1] [MQTT5-4.7.1-2] [MQTT5-4.7.3-1] [MQTT5-4.8.2-1]
    # [MQTT5-4.8.2-2] [MQTT5-4.13.1-1]: every malformed form, in SUBSCRIBE
    # and in UNSUBSCRIBE.
    def test_malformed_filters_sub_and_unsub(self):
        for v in (4, 5):
            for flt in self.BAD:
                for kind in ("sub", "unsub"):
                    with self.subTest(version=v, filter=flt, packet=kind):
                        r = self.raw(v, "mf")
                        if kind == "sub":
                            r.send(nmq.subscribe_bytes([(flt, 1)], 7, version=v))
                        else:
                            r.send(nmq.unsubscribe_bytes([flt], 7, version=v))
                        self.assert_violation(r, "%s %r" % (kind, flt))

    # The whole packet is checked before any of it takes effect: the valid
    # filter before the malformed one is not subscribed (a persistent 5.0
    # session shows it after the reconnect).
    def test_nothing_subscribed_from_a_malformed_packet(self):
        kw = {"clean": False, "props": {"SessionExpiryInterval": 60}}
        r = self.raw(5, "mixbad", **kw)
        r.send(nmq.subscribe_bytes([("ok/t", 1), ("bad/#/x", 1)], 6, version=5))
        self.assert_violation(r, "mixed filters")
        again = self.raw(5)
        self.assertTrue(again.connect("mixbad", **kw).session_present)
        pub = self.raw(4, "mixbad-pub")
        pub.publish("ok/t", b"x", qos=1)
        again.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # Well-formed filters keep their SUBACK codes and the connection: a
    # shared subscription and a plain one in the same packet
    # [MQTT5-3.8.4-6].
    def test_well_formed_filters_still_granted(self):
        for v in (4, 5):
            with self.subTest(version=v):
                r = self.raw(v, "wf%d" % v)
                ack = r.subscribe([("$share/g/t", 1), ("a/+/b/#", 2)])
                self.assertEqual(ack.codes, [1, 2])
                self.assertTrue(r.is_open())


class ClientMaximumPacketSize(BrokerTestCase):
    """5.0: nothing the broker sends exceeds the client's Maximum Packet
    Size (5.0 statement 3.1.2-24); optional properties go first."""

    # [MQTT5-3.1.2-24]: the report's CONNECT (Maximum Packet Size 20) got a
    # 24-byte CONNACK.  Now it fits,
    # and keeps what changes the client's behaviour (Receive Maximum,
    # Maximum Packet Size).
    def test_connack_fits(self):
        r = self.raw(5)
        r.send(hx("101300044d5154540502003c05270000001400016d"))
        ack = r.expect(CONNACK)
        self.assertEqual(ack.rc, 0)
        self.assertLessEqual(wire_size(ack), 20, "CONNACK %r" % ack)
        self.assertIn("ReceiveMaximum", ack.props)
        self.assertIn("MaximumPacketSize", ack.props)
        # Without the limit the same CONNACK is bigger (the test means
        # something): the capabilities are all there.
        big = self.raw(5)
        full = big.connect("m-big")
        self.assertGreater(wire_size(full), 20)
        self.assertIn("SharedSubscriptionAvailable", full.props)

    # [MQTT5-3.1.2-24]: with Maximum Packet Size 12 the CONNACK drops its
    # limits as a last resort (Receive Maximum, then Maximum Packet Size)
    # rather than refuse the client, and keeps working.
    def test_connack_drops_limits_last(self):
        r = self.raw(5)
        ack = r.connect("m-12", props={"MaximumPacketSize": 12})
        self.assertEqual(ack.rc, 0)
        self.assertLessEqual(wire_size(ack), 12, "CONNACK %r" % ack)
        self.assertEqual(r.subscribe([("m12/t", 1)]).codes, [1])

    # [MQTT5-3.1.2-24]: a CONNACK that cannot fit even without optional
    # properties is not sent: the connection is closed.
    def test_connack_that_cannot_fit_closes(self):
        r = self.raw(5)
        r.send_connect("tiny", props={"MaximumPacketSize": 4})
        self.assertEqual(r.expect_closed(msg="max packet 4"), [])

    # [MQTT5-3.14.2-3] [MQTT5-3.1.2-24]: a takeover DISCONNECT to a client
    # with Maximum Packet Size 20 (it was 25 bytes with its Reason String)
    # leaves the Reason String out; a client without a limit still gets it.
    def test_takeover_disconnect_fits(self):
        for limit in (20, None):
            with self.subTest(limit=limit):
                cid = "m-tk-%s" % limit
                props = {"MaximumPacketSize": limit} if limit else None
                a = self.raw(5, cid, props=props)
                self.raw(5, cid)
                pkts = a.expect_closed()
                discs = [p for p in pkts if p.type == DISCONNECT]
                self.assertEqual([d.rc for d in discs], [0x8E], pkts)
                if limit:
                    self.assertLessEqual(wire_size(discs[0]), limit)
                else:
                    self.assertIn("ReasonString", discs[0].props)

    # [MQTT5-3.1.2-24]: a SUBACK larger than the client's
    # maximum is not sent (it has no optional part to drop here): the
    # connection is closed.  A SUBACK that fits is sent.
    def test_suback_too_large_closes(self):
        r = self.raw(5, "m-sub", props={"MaximumPacketSize": 20})
        self.assertEqual(r.subscribe([("s/%d" % i, 0) for i in range(3)]).codes, [0, 0, 0])
        r.send(nmq.subscribe_bytes([("s/%d" % i, 0) for i in range(20)], 9, version=5))
        self.assertEqual(r.expect_closed(msg="25-byte SUBACK"), [])


class WillOnReconnect(BrokerTestCase):
    """A delayed will and a new connection for the same client id within
    the delay (docs/decisions/0011-will-on-clean-start-reconnect.md):
    Clean Start 0 resumes the session and deletes the will; Clean Start 1
    ends the old session, whose will is then published at once."""

    DELAY = 3
    # The delay of a will that must go out before it: the will's delay
    # cannot end before LONG_DELAY after the will's connection was made,
    # so a will received earlier than that was published by the event
    # under test, however slow the machine (no tighter time is asserted).
    LONG_DELAY = 20

    def will_conn(self, cid, topic, expiry=30, delay=None):
        r = self.raw(5)
        ack = r.connect(cid, clean=True, props={"SessionExpiryInterval": expiry},
                        will={"topic": topic, "payload": b"will-" + cid.encode(), "qos": 1,
                              "props": {"WillDelayInterval": delay or self.DELAY}})
        self.assertEqual(ack.rc, 0)
        return r

    def wait_will_before_delay(self, obs, t_conn, msg):
        """The will, received before LONG_DELAY from t_conn (taken before
        its connection was made) could have ended."""
        m = obs.wait_message(max(0.1, t_conn + self.LONG_DELAY - 0.5 - time.monotonic()))
        self.assertIsNotNone(m, msg)
        self.assertLess(time.monotonic() - t_conn, self.LONG_DELAY,
                        "the will came at the end of its delay, not before: " + msg)
        return m

    def observer(self, topic):
        o = self.paho("obs-" + topic.replace("/", "-"), 5)
        o.subscribe(topic, 1)
        return o

    # [MQTT5-3.1.2-8] [MQTT5-3.1.2-4]: the report's case.  Session Expiry
    # 30, Will Delay 3, the connection breaks, the client is back after 1 s
    # with Clean Start 1: the old session ends then, and its will is
    # published at the reconnect (before its delay, here LONG_DELAY).
    def test_clean_start_reconnect_publishes_will(self):
        obs = self.observer("will/cs")
        t_conn = time.monotonic()
        r = self.will_conn("wcs", "will/cs", delay=self.LONG_DELAY)
        r.abort()
        time.sleep(1)
        obs.expect_no_message(0.1)  # the delay runs
        b = self.raw(5)
        ack = b.connect("wcs", clean=True)
        self.assertFalse(ack.session_present)
        m = self.wait_will_before_delay(obs, t_conn, "the ended session's will at the reconnect")
        self.assertEqual(m.payload, b"will-wcs")
        obs.expect_no_message(1.0)  # once only

    # [MQTT5-3.1.2-8] [MQTT5-3.1.3-9]: the same with Clean Start 0: the
    # session goes on and the will is never sent.
    def test_resuming_reconnect_deletes_will(self):
        obs = self.observer("will/resume")
        r = self.will_conn("wres", "will/resume")
        r.abort()
        time.sleep(1)
        b = self.raw(5)
        ack = b.connect("wres", clean=False, props={"SessionExpiryInterval": 30})
        self.assertTrue(ack.session_present)
        obs.expect_no_message(self.DELAY + 1.5)

    # [MQTT5-3.1.4-3] [MQTT5-3.1.2-8]: a takeover of a live connection:
    # with Clean Start 1 the original session ends and the old connection's
    # will is sent despite its delay; with Clean Start 0 it is not
    # [MQTT5-3.1.3-9].
    def test_takeover_clean_start_publishes_will(self):
        for clean in (True, False):
            with self.subTest(clean_start=clean):
                topic = "will/tk%d" % clean
                obs = self.observer(topic)
                t_conn = time.monotonic()
                a = self.will_conn("wtk%d" % clean, topic,
                                   delay=self.LONG_DELAY if clean else None)
                b = self.raw(5)
                b.connect("wtk%d" % clean, clean=clean, props={"SessionExpiryInterval": 30})
                self.assert_closed(a, v5_codes=(0x8E,), msg="taken over")
                if clean:
                    self.wait_will_before_delay(obs, t_conn,
                                                "will of the ended session at the takeover")
                else:
                    obs.expect_no_message(self.DELAY + 1.5)

    # [MQTT5-3.1.2-8]: a session with Session Expiry 0 ends with its
    # connection, also when a Clean Start 0 connection takes it over: the
    # will goes out although its delay has not elapsed.
    def test_takeover_of_zero_expiry_session_publishes_will(self):
        obs = self.observer("will/zero")
        t_conn = time.monotonic()
        a = self.will_conn("wzero", "will/zero", expiry=0, delay=self.LONG_DELAY)
        b = self.raw(5)
        ack = b.connect("wzero", clean=False, props={"SessionExpiryInterval": 30})
        self.assertFalse(ack.session_present)
        self.assert_closed(a, v5_codes=(0x8E,), msg="taken over")
        self.wait_will_before_delay(obs, t_conn, "will of the ended session at the takeover")


if __name__ == "__main__":
    nmq.main()
