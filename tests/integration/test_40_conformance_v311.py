#!/usr/bin/python3
"""40: MQTT 3.1.1 "The Server MUST" statements not checked elsewhere.

Each test tags the normative statements it asserts ([MQTT-x.y.z-n]); see
docs/conformance.md for the whole map."""

import nmq
from nmq import (CONNACK, PUBACK, PUBLISH, PUBREC, SUBACK, UNSUBACK, BrokerTestCase, mstr,
                 packet, skip_on_mosquitto, u16)

V = 4


class ConformanceV311(BrokerTestCase):

    # [MQTT-2.3.1-7] [MQTT-3.8.4-2] [MQTT-3.10.4-4]: SUBACK and UNSUBACK carry
    # the Packet Identifier of the request they answer, whatever its value,
    # also when several requests are in flight.
    def test_suback_unsuback_carry_the_packet_id(self):
        r = self.raw(V, "pids")
        pids = (1, 0x00FF, 0x7FFF, 0x8000, 0xFFFF)
        r.send(b"".join(nmq.subscribe_bytes([("pid/%d" % p, 1)], p) for p in pids))
        got = [r.expect(SUBACK) for _ in pids]
        self.assertEqual([a.pid for a in got], list(pids))
        r.send(b"".join(nmq.unsubscribe_bytes(["pid/%d" % p], p) for p in reversed(pids)))
        got = [r.expect(UNSUBACK) for _ in pids]
        self.assertEqual([a.pid for a in got], list(reversed(pids)))
        for a in got:
            self.assertEqual(a.body, u16(a.pid), "a 3.1.1 UNSUBACK is only the packet id: %r" % a)

    # [MQTT-3.1.2-12]: a connection without the Will Flag has no will, even
    # when an earlier connection of the same client id had one (which its
    # DISCONNECT removed, [MQTT-3.1.2-10]).
    def test_no_will_without_will_flag(self):
        obs = self.paho("obs", V)
        obs.subscribe("nowill/#", 1)
        r = self.raw(V)
        ack = r.connect("nowill", clean=False, will={"topic": "nowill/w", "payload": b"old"})
        self.assertEqual(ack.rc, 0)
        r.disconnect()
        r.expect_closed()
        r2 = self.raw(V)
        self.assertEqual(r2.connect("nowill", clean=False).rc, 0)
        r2.abort()
        r3 = self.raw(V, "nowill-plain")
        r3.abort()
        obs.expect_no_message(1.0)

    # [MQTT-3.1.4-5]: after refusing a CONNECT (here: protocol level 6, CONNACK
    # 0x01, [MQTT-3.1.2-2]) the server processes nothing that followed it:
    # the PUBLISH and SUBSCRIBE sent in the same segment have no effect.
    # [MQTT-3.2.2-4]: the refusal has Session Present 0, even for a client id
    # with a stored session; [MQTT-3.2.2-5]: the connection is then closed.
    def test_refused_connect_processes_nothing_after_it(self):
        s = self.raw(V)
        self.assertEqual(s.connect("refused", clean=False).rc, 0)
        s.subscribe([("other/#", 1)])
        s.disconnect()
        s.expect_closed()
        obs = self.paho("obs", V)
        obs.subscribe("rej/#", 1)
        r = self.raw(V)
        r.send(nmq.connect_bytes("refused", clean=False, proto_level=6)
               + nmq.publish_bytes("rej/t", b"after refusal", 1, retain=True, pid=1)
               + nmq.subscribe_bytes([("rej/#", 1)], 2))
        pkts = r.expect_closed()
        self.assertEqual([p.type for p in pkts], [CONNACK], "expected only CONNACK 0x01: %r" % pkts)
        self.assertEqual(pkts[0].rc, 0x01)
        self.assertFalse(pkts[0].session_present)
        obs.expect_no_message(0.5)
        late = self.paho("late", V)
        late.subscribe("rej/#", 1)
        late.expect_no_message(0.5)

    # [MQTT-3.3.1-7]: a retained QoS 0 message replaces the topic's retained
    # message (here a QoS 1 one); the new subscriber gets only the new one,
    # at QoS 0 with RETAIN set ([MQTT-3.3.1-8]).
    def test_retained_qos0_replaces_the_retained_message(self):
        p = self.raw(V, "rpub")
        p.publish("rq/t", b"old", qos=1, retain=True)
        p.publish("rq/t", b"new", qos=0, retain=True)
        p.publish("rq/fence", b"f", qos=1)  # the QoS 0 one is processed before this ack
        s = self.raw(V, "rsub")
        s.subscribe([("rq/t", 1)])
        got = s.expect(PUBLISH)
        self.assertEqual((got.payload, got.qos, got.retain), (b"new", 0, True))
        s.expect_nothing(0.5, types=(PUBLISH,))

    # [MQTT-3.8.3-4]: a SUBSCRIBE whose requested QoS is 3, or whose reserved
    # option bits are not 0, is malformed: the server closes the connection
    # without a SUBACK ([MQTT-4.8.0-1]).
    def test_subscribe_bad_qos_byte_closes(self):
        for opts in (0x03, 0x04, 0x80, 0x41):
            with self.subTest(options=hex(opts)):
                r = self.raw(V, "badqos%d" % opts)
                r.send(packet(nmq.SUBSCRIBE, 2, u16(5) + mstr("bq/t") + bytes([opts])))
                pkts = r.expect_closed()
                self.assertEqual(pkts, [], "options 0x%02x: the broker answered %r" % (opts, pkts))

    # [MQTT-3.9.3-2]: every SUBACK return code is 0x00, 0x01, 0x02 or 0x80;
    # [MQTT-3.8.4-4]/[MQTT-3.8.4-5]: one SUBSCRIBE with several filters gets
    # one SUBACK with one code per filter, in order, and every granted
    # filter works.
    def test_suback_codes_are_defined_ones(self):
        r = self.raw(V, "codes")
        ack = r.subscribe([("c/0", 0), ("c/1", 1), ("c/2", 2), ("e/#", 2)])
        self.assertEqual(ack.codes, [0, 1, 2, 2])
        r.expect_nothing(0.3, types=(SUBACK,))
        p = self.raw(V, "cpub")
        for t in ("c/0", "c/1", "c/2", "e/x"):
            p.publish(t, t.encode(), qos=2)
        got = r.expect_publishes(4, ack=True)
        self.assertEqual(sorted((g.topic, g.qos) for g in got),
                         [("c/0", 0), ("c/1", 1), ("c/2", 2), ("e/x", 2)])

    # [MQTT-3.10.4-6]: one UNSUBSCRIBE with several filters is handled as that
    # many UNSUBSCRIBEs with one UNSUBACK ([MQTT-3.10.4-5]: also when a filter
    # matched nothing); only the named subscriptions end ([MQTT-3.10.4-2]).
    def test_unsubscribe_several_filters(self):
        r = self.raw(V, "unsub")
        r.subscribe([("u/a", 1), ("u/b", 1), ("u/c", 1)])
        ack = r.unsubscribe(["u/a", "u/none", "u/c"], pid=77)
        self.assertEqual(ack.pid, 77)
        r.expect_nothing(0.3, types=(UNSUBACK,))
        p = self.raw(V, "upub")
        for t in ("u/a", "u/b", "u/c"):
            p.publish(t, t.encode(), qos=1)
        got = r.expect_publishes(1, ack=True)
        self.assertEqual(got[0].topic, "u/b")
        r.expect_nothing(0.5, types=(PUBLISH,))

    # [MQTT-2.3.1-5] [MQTT-4.3.1-1] [MQTT-3.3.1-2] [MQTT-3.3.2-1]: a QoS 0 message is
    # forwarded as QoS 0 with DUP 0 and no packet identifier: the body is
    # exactly topic + payload.
    def test_qos0_forward_has_no_packet_id(self):
        s = self.raw(V, "q0sub")
        s.subscribe([("q0/t", 0)])
        p = self.raw(V, "q0pub")
        p.publish("q0/t", b"\x00\x07payload", qos=1)
        got = s.expect(PUBLISH)
        self.assertEqual((got.qos, got.dup), (0, False))
        self.assertEqual(got.body, mstr("q0/t") + b"\x00\x07payload")

    # [MQTT-4.3.2-1] [MQTT-2.3.1-1]: each new QoS 1 message to a subscriber
    # gets a non-zero packet identifier not in use (here: three unacknowledged
    # at once) and DUP 0; [MQTT-3.3.4-1]: the server answers a QoS 0, 1 and 2
    # PUBLISH with nothing, PUBACK and PUBREC respectively.
    def test_qos1_forward_and_answers_per_qos(self):
        s = self.raw(V, "q1sub")
        s.subscribe([("q1/t", 1)])
        p = self.raw(V, "q1pub")
        p.publish("q1/t", b"zero", qos=0)
        p.expect_nothing(0.3)
        p.send(nmq.publish_bytes("q1/t", b"one", 1, pid=10))
        self.assertEqual(p.expect(PUBACK).pid, 10)
        p.send(nmq.publish_bytes("q1/t", b"two", 2, pid=11))
        self.assertEqual(p.expect(PUBREC).pid, 11)
        p.send(nmq.ack_bytes(nmq.PUBREL, 11))
        self.assertEqual(p.expect(nmq.PUBCOMP).pid, 11)
        p.send(nmq.publish_bytes("q1/t", b"three", 1, pid=12))
        self.assertEqual(p.expect(PUBACK).pid, 12)
        got = s.expect_publishes(4)
        self.assertEqual([g.payload for g in got], [b"zero", b"one", b"two", b"three"])
        self.assertEqual(got[0].qos, 0)
        held = got[1:]
        for g in held:
            self.assertEqual((g.qos, g.dup), (1, False), g)
            self.assertNotEqual(g.pid, 0)
        self.assertEqual(len({g.pid for g in held}), 3,
                         "packet ids reused while unacknowledged: %r" % held)



class RefusedFilterV311(BrokerTestCase):
    CONF = "mqtt.max_topic_levels = 3"

    # [MQTT-3.9.3-2] [MQTT-3.8.4-5]: a well-formed filter the server refuses
    # (deeper than mqtt.max_topic_levels) gets return code 0x80, the others
    # their granted QoS, in order; no other return code appears.
    @skip_on_mosquitto("mosquitto has no topic level limit")
    def test_refused_filter_gets_0x80(self):
        r = self.raw(V, "refused")
        ack = r.subscribe([("r/a", 2), ("r/a/b/c", 1), ("r/b", 0)])
        self.assertEqual(ack.codes, [2, 0x80, 0])
        for code in ack.codes:
            self.assertIn(code, (0x00, 0x01, 0x02, 0x80))


if __name__ == "__main__":
    nmq.main()
