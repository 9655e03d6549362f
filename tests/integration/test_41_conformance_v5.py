#!/usr/bin/python3
"""41: MQTT 5.0 "The Server MUST" statements not checked elsewhere.

Each test tags the normative statements it asserts ([MQTT5-x.y.z-n]); see
docs/conformance.md for the whole map."""

import threading
import time

import nmq
from nmq import (AUTH, CONNACK, DISCONNECT, PUBACK, PUBCOMP, PUBLISH, PUBREC, PUBREL, SUBACK,
                 UNSUBACK, BrokerTestCase, skip_on_mosquitto)

V = 5

# Reason codes each packet may carry (MQTT 5.0 sections 3.2.2.2 to 3.15.2.1).
CONNACK_CODES = {0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C,
                 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}
SUBACK_CODES = {0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}
UNSUBACK_CODES = {0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}
PUBREL_CODES = PUBCOMP_CODES = {0x00, 0x92}
DISCONNECT_CODES = {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90,
                    0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F,
                    0xA0, 0xA1, 0xA2}


class HeaderRawClient(nmq.RawClient):
    """A RawClient that keeps the Remaining Length bytes of every packet it
    reads (self.headers, in arrival order)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.headers = []

    def _read_packet(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            i = 1
            while i < len(self.buf) and i <= 4 and self.buf[i] & 0x80:
                i += 1
            if i < len(self.buf):
                length = 0
                for k, b in enumerate(self.buf[1:i + 1]):
                    length += (b & 0x7F) << (7 * k)
                if len(self.buf) >= i + 1 + length:
                    self.headers.append(bytes(self.buf[1:i + 1]))
                    return super()._read_packet(max(deadline - time.monotonic(), 0.001))
            self._recv_some(deadline)


def wire_size(p):
    """Size on the wire of a received packet."""
    return 1 + len(nmq.vbi(len(p.body))) + len(p.body)


class ConformanceV5(BrokerTestCase):

    # [MQTT5-2.2.1-6] [MQTT5-3.8.4-2] [MQTT5-3.10.4-5]: SUBACK and UNSUBACK
    # carry the Packet Identifier of the request they answer, whatever its
    # value, also when several requests are in flight.
    def test_suback_unsuback_carry_the_packet_id(self):
        r = self.raw(V, "pids")
        pids = (1, 0x00FF, 0x7FFF, 0x8000, 0xFFFF)
        r.send(b"".join(nmq.subscribe_bytes([("pid/%d" % p, 1)], p, version=V) for p in pids))
        self.assertEqual([r.expect(SUBACK).pid for _ in pids], list(pids))
        r.send(b"".join(nmq.unsubscribe_bytes(["pid/%d" % p], p, version=V) for p in reversed(pids)))
        self.assertEqual([r.expect(UNSUBACK).pid for _ in pids], list(reversed(pids)))

    # [MQTT5-3.1.2-6] [MQTT5-3.1.4-4]: Clean Start 0 without a session creates
    # one (Session Present 0, [MQTT5-3.2.2-3]); that session then holds the
    # subscription and the messages published while away ([MQTT5-3.1.2-5]).
    def test_clean_start_0_without_session_creates_one(self):
        r = self.raw(V)
        ack = r.connect("fresh", clean=False, props={"SessionExpiryInterval": 60})
        self.assertEqual(ack.rc, 0)
        self.assertFalse(ack.session_present)
        r.subscribe([("fresh/t", 1)])
        r.disconnect()
        r.expect_closed()
        p = self.raw(V, "freshpub")
        p.publish("fresh/t", b"kept", qos=1)
        r2 = self.raw(V)
        ack = r2.connect("fresh", clean=False, props={"SessionExpiryInterval": 60})
        self.assertTrue(ack.session_present)
        self.assertEqual(r2.expect(PUBLISH).payload, b"kept")

    # [MQTT5-4.12.0-1]: an Authentication Method the server does not support
    # gets CONNACK 0x8C (or 0x87), then the connection is closed
    # ([MQTT5-3.2.2-7] [MQTT5-4.12.0-4] [MQTT5-4.13.2-1]). [MQTT5-3.1.4-6]: nothing sent after the refused
    # CONNECT is processed (the retained PUBLISH and the SUBSCRIBE in the
    # same segment); [MQTT5-3.2.2-6]: Session Present is 0 although the client
    # id has a stored session; [MQTT5-3.14.0-1]: no DISCONNECT is sent, as no
    # CONNACK 0x00 was.
    def test_unsupported_auth_method_refused_and_nothing_processed(self):
        s = self.raw(V)
        self.assertEqual(s.connect("am", clean=False, props={"SessionExpiryInterval": 60}).rc, 0)
        s.disconnect()
        s.expect_closed()
        obs = self.paho("obs", V)
        obs.subscribe("am/#", 1)
        r = self.raw(V)
        r.send(nmq.connect_bytes("am", version=V, clean=False,
                                 props={"AuthenticationMethod": "SCRAM-SHA-512",
                                        "AuthenticationData": b"n,,n=user,r=abc"})
               + nmq.publish_bytes("am/t", b"after refusal", 1, retain=True, pid=1, version=V)
               + nmq.subscribe_bytes([("am/#", 1)], 2, version=V))
        pkts = r.expect_closed()
        self.assertEqual([p.type for p in pkts], [CONNACK], "expected only a CONNACK: %r" % pkts)
        self.assertIn(pkts[0].rc, (0x8C, 0x87))
        self.assertFalse(pkts[0].session_present)
        obs.expect_no_message(0.5)
        late = self.paho("late", V)
        late.subscribe("am/#", 1)
        late.expect_no_message(0.5)

    # [MQTT5-4.12.0-6]: without an Authentication Method in CONNECT the server
    # sends no AUTH and no Authentication Method or Data in CONNACK.
    def test_no_auth_without_auth_method(self):
        r = self.raw(V)
        ack = r.connect("noauth")
        self.assertEqual(ack.rc, 0)
        self.assertNotIn("AuthenticationMethod", ack.props)
        self.assertNotIn("AuthenticationData", ack.props)
        r.subscribe([("na/t", 1)])
        r.publish("na/t", b"x", qos=1)
        r.pingreq()
        r.expect(nmq.PINGRESP)
        self.assertNotIn(AUTH, [p.type for p in r.backlog])
        r.expect_nothing(0.3, types=(AUTH,))

    # [MQTT5-3.2.2-16] [MQTT5-3.1.3-6] [MQTT5-3.1.3-7]: each zero-length
    # client id gets an Assigned Client Identifier in CONNACK, a new one not
    # used by any other session, and the session works under that id.
    def test_assigned_client_ids_are_unique(self):
        named = self.raw(V, "named-client")
        ids = set()
        clients = []
        for _ in range(5):
            r = self.raw(V)
            ack = r.connect("", props={"SessionExpiryInterval": 30})
            self.assertEqual(ack.rc, 0)
            aid = ack.props.get("AssignedClientIdentifier")
            self.assertTrue(aid, "no Assigned Client Identifier: %r" % ack)
            self.assertNotIn(aid, ids)
            self.assertNotEqual(aid, "named-client")
            ids.add(aid)
            clients.append((r, aid))
        # the assigned id names the session: resuming it finds Session Present 1
        r, aid = clients[0]
        r.subscribe([("assigned/t", 1)])
        r.disconnect()
        r.expect_closed()
        again = self.raw(V)
        ack = again.connect(aid, clean=False, props={"SessionExpiryInterval": 30})
        self.assertTrue(ack.session_present, "session of %r not found: %r" % (aid, ack))
        self.assertTrue(named.is_open(0.1))

    # [MQTT5-3.14.2-2]: a DISCONNECT from the server never carries a Session
    # Expiry Interval; [MQTT5-3.14.2-1]: its reason code is a Disconnect
    # Reason Code; [MQTT5-3.14.4-1]/[MQTT5-3.14.4-2]: it is the last packet and
    # the server closes the connection. Cases: takeover (0x8E), a second
    # CONNECT (protocol error), a PUBLISH with Topic Alias 0.
    def test_server_disconnect(self):
        cases = {
            "takeover": ("dis-a", lambda r: self.raw(V).connect("dis-a")),
            "second CONNECT": ("dis-b", lambda r: r.send(nmq.connect_bytes("dis-b", version=V))),
            "topic alias 0": ("dis-c", lambda r: r.send(nmq.publish_bytes(
                "d/t", b"x", 0, version=V, props={"TopicAlias": 0}))),
        }
        for name, (cid, provoke) in cases.items():
            with self.subTest(case=name):
                r = self.raw(V)
                self.assertEqual(r.connect(cid, props={"SessionExpiryInterval": 60}).rc, 0)
                provoke(r)
                pkts = r.expect_closed()
                discs = [p for p in pkts if p.type == DISCONNECT]
                if not discs and nmq.USE_MOSQUITTO:
                    continue  # mosquitto 2.0.11 closes without DISCONNECT here (a MAY)
                self.assertEqual(len(discs), 1, "%s: %r" % (name, pkts))
                self.assertIs(pkts[-1], discs[0], "%s: packets after DISCONNECT: %r" % (name, pkts))
                self.assertIn(discs[0].rc, DISCONNECT_CODES, pkts)
                self.assertGreaterEqual(discs[0].rc, 0x80, pkts)
                self.assertNotIn("SessionExpiryInterval", discs[0].props, pkts)
                self.assertNotIn(CONNACK, [p.type for p in pkts],
                                 "%s: a second CONNACK ([MQTT5-3.2.0-2])" % name)

    # [MQTT5-3.14.4-1]: nothing follows the server's DISCONNECT, also while
    # publishers feed the connection's subscription (the session's pump,
    # on the publishers' workers, wrote PUBLISHes behind it).
    def test_nothing_after_server_disconnect_under_traffic(self):
        stop = threading.Event()

        def flood(n):
            c = nmq.RawClient(self.port, version=4)
            self._track(c)
            c.connect("flood-%d" % n)
            c.sock.setblocking(False)
            data = b"".join(nmq.publish_bytes("f/t", b"x" * 64) for _ in range(64))
            while not stop.is_set():
                try:
                    c.sock.send(data)
                except BlockingIOError:
                    time.sleep(0.001)
                except OSError:
                    return

        threads = [threading.Thread(target=flood, args=(n,), daemon=True) for n in range(3)]
        for t in threads:
            t.start()
        try:
            for i in range(10):
                r = self.raw(V)
                self.assertEqual(r.connect("dis-flood-%d" % i).rc, 0)
                r.subscribe([("f/#", 0)])
                r.expect(PUBLISH)
                r.send(nmq.publish_bytes("d/t", b"x", 0, version=V, props={"TopicAlias": 0}))
                pkts = r.expect_closed()
                types = [p.type for p in pkts]
                self.assertIn(DISCONNECT, types, "round %d" % i)
                after = types[types.index(DISCONNECT) + 1:]
                self.assertEqual(after, [], "round %d: %d packets after DISCONNECT" % (i, len(after)))
        finally:
            stop.set()
            for t in threads:
                t.join(5)

    # [MQTT5-3.14.0-1] [MQTT5-3.2.0-1]: a malformed CONNECT is never answered by
    # DISCONNECT (no CONNACK 0x00 was sent): CONNACK 0x80 or above, or a close.
    def test_no_disconnect_before_connack(self):
        cases = {
            "reserved flag": nmq.connect_bytes("m1", version=V, flags=0x03),
            "unknown property": nmq.packet(nmq.CONNECT, 0, nmq.mstr("MQTT") + bytes([5, 2])
                                           + nmq.u16(60) + b"\x02\x7f\x00" + nmq.mstr("m2")),
            "Will QoS 3": nmq.connect_bytes("m3", version=V, flags=0x1E),
        }
        for name, data in cases.items():
            with self.subTest(case=name):
                r = self.raw(V)
                r.send(data)
                pkts = r.expect_closed()
                self.assertNotIn(DISCONNECT, [p.type for p in pkts], "%s: %r" % (name, pkts))
                for p in pkts:
                    self.assertEqual(p.type, CONNACK, p)
                    self.assertGreaterEqual(p.rc, 0x80, p)
                    self.assertIn(p.rc, CONNACK_CODES, p)

    # [MQTT5-4.8.2-6]: a shared subscriber answering PUBACK 0x80 gets the
    # message discarded: it is neither sent to the other member nor re-sent.
    def test_shared_negative_puback_discards(self):
        a = self.raw(V, "sha")
        b = self.raw(V, "shb")
        for c in (a, b):
            self.assertEqual(c.subscribe([("$share/g/sh/t", 1)]).codes, [1])
        p = self.raw(V, "shpub")
        p.publish("sh/t", b"refused", qos=1)
        got, other = None, None
        for me, them in ((a, b), (b, a)):
            try:
                got = me.expect(PUBLISH, 1.0)
                other = them
                break
            except nmq.RecvTimeout:
                continue
        self.assertIsNotNone(got, "no member got the message")
        me = a if other is b else b
        me.send(nmq.ack_bytes(PUBACK, got.pid, rc=0x80, version=V))
        other.expect_nothing(1.0, types=(PUBLISH,))
        me.expect_nothing(0.3, types=(PUBLISH,))

    # [MQTT5-4.4.0-2]: a message the client answered with PUBACK 0x80 counts as
    # acknowledged: it is not sent again when the session resumes
    # ([MQTT5-4.3.2-3]: only unacknowledged ones are).
    def test_negative_puback_not_resent_on_resume(self):
        r = self.raw(V)
        r.connect("neg", clean=False, props={"SessionExpiryInterval": 60})
        r.subscribe([("neg/t", 1)])
        p = self.raw(V, "negpub")
        p.publish("neg/t", b"one", qos=1)
        p.publish("neg/t", b"two", qos=1)
        one, two = r.expect_publishes(2)
        r.send(nmq.ack_bytes(PUBACK, one.pid, rc=0x80, version=V))
        r.send(nmq.disconnect_bytes(0x00, None, V))  # "two" stays unacknowledged
        r.expect_closed()
        r2 = self.raw(V)
        ack = r2.connect("neg", clean=False, props={"SessionExpiryInterval": 60})
        self.assertTrue(ack.session_present)
        again = r2.expect(PUBLISH)
        self.assertEqual((again.payload, again.pid, again.dup), (b"two", two.pid, True))
        r2.ack(again)
        r2.expect_nothing(0.5, types=(PUBLISH,))

    # Outbound QoS 2: [MQTT5-4.3.3-2]/[MQTT5-4.3.3-3]: PUBLISH with QoS 2, DUP 0
    # and a packet id, held until PUBREC; [MQTT5-4.3.3-4]: PUBREL with the same
    # id; [MQTT5-3.6.2-1]: its reason code is a PUBREL one. Inbound:
    # [MQTT5-3.7.2-1]: the PUBCOMP for a PUBREL of an unknown id has a PUBCOMP
    # reason code (0x92 here; 0x00 is allowed too).
    def test_qos2_flow_reason_codes(self):
        s = self.raw(V, "q2sub")
        s.subscribe([("q2/t", 2)])
        p = self.raw(V, "q2pub")
        self.assertEqual(p.publish("q2/t", b"x", qos=2).rc, 0x00)
        got = s.expect(PUBLISH)
        self.assertEqual((got.qos, got.dup), (2, False))
        self.assertNotEqual(got.pid, 0)
        s.expect_nothing(0.3, types=(PUBREL,))
        s.send(nmq.ack_bytes(PUBREC, got.pid, version=V))
        rel = s.expect(PUBREL, pid=got.pid)
        self.assertIn(rel.rc, PUBREL_CODES)
        self.assertEqual(rel.rc, 0x00)
        s.send(nmq.ack_bytes(PUBCOMP, got.pid, version=V))
        p.send(nmq.ack_bytes(PUBREL, 4321, version=V))
        comp = p.expect(PUBCOMP, pid=4321)
        self.assertIn(comp.rc, PUBCOMP_CODES)

    # [MQTT5-1.5.5-1] [MQTT5-3.3.2-1]: the server writes every Remaining Length in the fewest
    # bytes (checked at the 1/2, 2/3 byte boundaries); [MQTT5-2.2.2-1]: no
    # properties is a Property Length byte 0, so a payload whose first bytes
    # look like properties arrives unchanged; [MQTT5-2.2.1-2]: a QoS 0 PUBLISH
    # has no packet identifier.
    def test_minimal_lengths_and_empty_properties(self):
        s = HeaderRawClient(self.port, version=V)
        self._track(s)
        self.assertEqual(s.connect("vbi").rc, 0)
        s.subscribe([("v/t", 0)])
        p = self.raw(V, "vbipub")
        topic_part = len(nmq.mstr("v/t")) + 1  # topic + property length 0
        sizes = [127 - topic_part, 128 - topic_part, 16383 - topic_part, 16384 - topic_part]
        for n in sizes:
            p.publish("v/t", b"\x02\x00\x00\x00\x05" + b"z" * (n - 5), qos=1)
        before = len(s.headers)
        for n in sizes:
            got = s.expect(PUBLISH)
            self.assertEqual(got.body, nmq.mstr("v/t") + b"\x00" + b"\x02\x00\x00\x00\x05"
                             + b"z" * (n - 5))
            self.assertEqual(got.props, {})
        heads = s.headers[before:]
        self.assertEqual(heads, [nmq.vbi(n + topic_part) for n in sizes])
        self.assertEqual([len(h) for h in heads], [1, 2, 2, 3])

    # [MQTT5-3.2.2-9] [MQTT5-3.2.2-10]: the server supports QoS 2, so its
    # CONNACK has no Maximum QoS below 2, and it accepts SUBSCRIBE at QoS 0, 1
    # and 2 and PUBLISH at QoS 2.
    def test_maximum_qos_matches_behaviour(self):
        r = self.raw(V)
        ack = r.connect("maxq")
        self.assertEqual(ack.props.get("MaximumQoS", 2), 2, ack)
        self.assertEqual(r.subscribe([("mq/0", 0), ("mq/1", 1), ("mq/2", 2)]).codes, [0, 1, 2])
        self.assertEqual(r.publish("mq/2", b"x", qos=2).rc, 0)
        self.assertEqual(r.expect(PUBLISH).qos, 2)


    # [MQTT5-3.3.4-1]: the server answers a QoS 0, 1 and 2 PUBLISH with nothing,
    # PUBACK and PUBREC. Forwarding: [MQTT5-4.3.1-1] QoS 0 with DUP 0;
    # [MQTT5-4.3.2-1]/[MQTT5-4.3.2-2] QoS 1 with DUP 0 and a new packet id each;
    # [MQTT5-4.3.3-1] QoS 2 with a packet id not in use ([MQTT5-2.2.1-4]).
    def test_forward_and_answers_per_qos(self):
        s = self.raw(V, "fsub")
        s.subscribe([("f/0", 0), ("f/1", 1), ("f/2", 2)])
        p = self.raw(V, "fpub")
        p.publish("f/0", b"zero", qos=0)
        p.expect_nothing(0.3)
        p.send(nmq.publish_bytes("f/1", b"one", 1, pid=10, version=V))
        self.assertEqual(p.expect(PUBACK).pid, 10)
        p.send(nmq.publish_bytes("f/1", b"one-b", 1, pid=11, version=V))
        self.assertEqual(p.expect(PUBACK).pid, 11)
        p.send(nmq.publish_bytes("f/2", b"two", 2, pid=12, version=V))
        self.assertEqual(p.expect(PUBREC).pid, 12)
        p.send(nmq.ack_bytes(PUBREL, 12, version=V))
        self.assertEqual(p.expect(PUBCOMP).pid, 12)
        got = s.expect_publishes(4)
        self.assertEqual([(g.topic, g.payload, g.qos, g.dup) for g in got],
                         [("f/0", b"zero", 0, False), ("f/1", b"one", 1, False),
                          ("f/1", b"one-b", 1, False), ("f/2", b"two", 2, False)])
        self.assertIsNone(got[0].pid)
        held = [g.pid for g in got[1:]]
        self.assertNotIn(0, held)
        self.assertEqual(len(set(held)), 3, "packet ids reused while unacknowledged: %r" % got)

    # [MQTT5-4.3.3-7]: once a QoS 2 PUBLISH was sent, message expiry no longer
    # applies to it: after its expiry passed it is still re-sent on resume.
    # [MQTT5-4.3.3-13]: as receiver, the server finishes the QoS 2 exchange of
    # a message that expired meanwhile: PUBREL gets PUBCOMP 0x00.
    @skip_on_mosquitto("mosquitto 2.0.11 drops the expired QoS 2 message it had already sent")
    def test_qos2_expiry_does_not_break_the_exchange(self):
        s = self.raw(V)
        s.connect("exsub", clean=False, props={"SessionExpiryInterval": 60})
        s.subscribe([("ex/t", 2)])
        p = self.raw(V, "expub")
        self.assertEqual(p.publish("ex/t", b"sent", qos=2, props={"MessageExpiryInterval": 1}).rc, 0)
        first = s.expect(PUBLISH)
        self.assertEqual(first.payload, b"sent")
        s.abort()  # no PUBREC
        p.send(nmq.publish_bytes("ex/held", b"held", 2, pid=77, version=V,
                                 props={"MessageExpiryInterval": 1}))
        self.assertEqual(p.expect(PUBREC, pid=77).rc, 0)
        time.sleep(1.6)
        p.send(nmq.ack_bytes(PUBREL, 77, version=V))
        self.assertEqual(p.expect(PUBCOMP, pid=77).rc, 0x00)
        s2 = self.raw(V)
        ack = s2.connect("exsub", clean=False, props={"SessionExpiryInterval": 60})
        self.assertTrue(ack.session_present)
        again = s2.expect(PUBLISH)
        self.assertEqual((again.payload, again.pid, again.dup), (b"sent", first.pid, True))
        s2.ack_full(again)

    def shared_pair(self, topic, expiry):
        members = []
        for name in ("ma", "mb"):
            r = self.raw(V)
            props = {"SessionExpiryInterval": expiry} if expiry else None
            self.assertEqual(r.connect("%s-%s" % (name, topic.replace("/", "")), clean=False,
                                       props=props).rc, 0)
            self.assertEqual(r.subscribe([("$share/g/" + topic, 2)]).codes, [2])
            members.append(r)
        return members

    def first_receiver(self, members):
        for i, m in enumerate(members):
            try:
                return i, m.expect(PUBLISH, 1.0)
            except nmq.RecvTimeout:
                continue
        self.fail("no member of the group got the message")

    # [MQTT5-4.8.2-4]: a QoS 2 delivery to a shared subscriber whose connection
    # breaks before it completes is completed to that same subscriber when it
    # reconnects, and not sent to the other member meanwhile.
    def test_shared_qos2_completed_to_the_same_member(self):
        members = self.shared_pair("s2/t", 60)
        p = self.raw(V, "s2pub")
        p.publish("s2/t", b"once", qos=2)
        i, got = self.first_receiver(members)
        other = members[1 - i]
        members[i].abort()
        other.expect_nothing(1.0, types=(PUBLISH,))
        r = self.raw(V)
        ack = r.connect("%s-s2t" % ("ma" if i == 0 else "mb"), clean=False,
                        props={"SessionExpiryInterval": 60})
        self.assertTrue(ack.session_present)
        again = r.expect(PUBLISH)
        self.assertEqual((again.payload, again.pid, again.dup), (b"once", got.pid, True))
        r.ack_full(again)
        other.expect_nothing(0.3, types=(PUBLISH,))

    # [MQTT5-4.8.2-5]: if that subscriber's session ends instead (Session
    # Expiry Interval 0), the message is not sent to another member.
    def test_shared_qos2_not_rerouted_when_the_session_ends(self):
        members = self.shared_pair("s3/t", 0)
        p = self.raw(V, "s3pub")
        p.publish("s3/t", b"once", qos=2)
        i, got = self.first_receiver(members)
        members[i].abort()
        members[1 - i].expect_nothing(1.0, types=(PUBLISH,))


    # [MQTT5-4.1.0-1]: the session is not discarded while its connection is
    # open, even when the connection outlives the Session Expiry Interval.
    def test_session_kept_while_connected(self):
        r = self.raw(V)
        self.assertEqual(r.connect("alive", props={"SessionExpiryInterval": 1}).rc, 0)
        r.subscribe([("alive/t", 1)])
        time.sleep(1.5)
        p = self.raw(V, "alivepub")
        p.publish("alive/t", b"still here", qos=1)
        self.assertEqual(r.expect(PUBLISH).payload, b"still here")

    # The server forwards the Response Topic, Content Type and User Properties
    # of a message unaltered, so it must refuse ones it may not send itself:
    # [MQTT5-3.3.2-14] a Response Topic with wildcards, [MQTT5-3.3.2-13]
    # [MQTT5-3.3.2-19] [MQTT5-1.5.7-1] ill-formed UTF-8 in a Response Topic,
    # Content Type or User Property. The PUBLISH is refused (DISCONNECT 0x81
    # or 0x82) and never reaches the subscriber.
    @skip_on_mosquitto("mosquitto 2.0.11 forwards a Response Topic with wildcards")
    def test_unforwardable_properties_refused(self):
        s = self.raw(V, "propsub")
        s.subscribe([("pp/#", 0)])
        cases = {
            "Response Topic a/#": {"ResponseTopic": "a/#"},
            "Response Topic a/+/b": {"ResponseTopic": "a/+/b"},
            "Response Topic bad UTF-8": {"ResponseTopic": b"a\xff"},
            "Content Type bad UTF-8": {"ContentType": b"\xc0\xaf"},
            "User Property name bad UTF-8": {"UserProperty": [(b"\xed\xa0\x80", "v")]},
            "User Property value bad UTF-8": {"UserProperty": [("k", b"\xff")]},
        }
        for n, (name, props) in enumerate(cases.items()):
            with self.subTest(case=name):
                r = self.raw(V, "propbad%d" % n)
                r.send(nmq.publish_bytes("pp/t", name.encode(), 1, pid=1, version=V, props=props))
                self.assert_closed(r, v5_codes=(0x81, 0x82), msg=name)
        s.expect_nothing(0.3, types=(PUBLISH,))

    # [MQTT5-3.4.2-2]/[MQTT5-3.4.2-3] [MQTT5-3.5.2-2]/[MQTT5-3.5.2-3]
    # [MQTT5-3.6.2-2]/[MQTT5-3.6.2-3] [MQTT5-3.7.2-2]/[MQTT5-3.7.2-3]
    # [MQTT5-3.1.2-24]: PUBACK, PUBREC, PUBREL and PUBCOMP from the server, with
    # success and failure codes, never exceed a small client Maximum Packet
    # Size because of a Reason String or User Property.
    def test_publish_acks_fit_a_small_maximum_packet_size(self):
        limit = 20
        r = self.raw(V)
        self.assertEqual(r.connect("tiny", props={"MaximumPacketSize": limit}).rc, 0)
        r.subscribe([("tiny/t", 2)])
        got = [r.publish("nobody/t", b"x", qos=1),  # maybe 0x10 No matching subscribers
               r.publish("tiny/t", b"y", qos=2, complete=False) or r.expect(PUBREC)]
        r.send(nmq.ack_bytes(PUBREL, got[1].pid, version=V))
        got.append(r.expect(PUBCOMP, pid=got[1].pid))
        r.send(nmq.ack_bytes(PUBREL, 31000, version=V))  # unknown: PUBCOMP 0x92
        got.append(r.expect(PUBCOMP, pid=31000))
        pub = r.expect(PUBLISH)  # its own message, back at QoS 2
        r.send(nmq.ack_bytes(PUBREC, pub.pid, version=V))
        got.append(r.expect(PUBREL, pid=pub.pid))
        r.send(nmq.ack_bytes(PUBCOMP, pub.pid, version=V))
        for a in got:
            self.assertLessEqual(wire_size(a), limit, a)
        self.assertTrue(r.is_open(0.2))

    # [MQTT5-3.2.2-19]/[MQTT5-3.2.2-20] [MQTT5-3.14.2-3]/[MQTT5-3.14.2-4]
    # [MQTT5-3.1.2-24]: a CONNACK (accepting or refusing) and a DISCONNECT
    # never exceed the client's Maximum Packet Size because of a Reason String
    # or User Property.
    def test_connack_and_disconnect_fit_a_small_maximum_packet_size(self):
        for limit in (8, 12, 20):
            with self.subTest(limit=limit):
                r = self.raw(V)
                r.send_connect("refuse%d" % limit,
                               props={"MaximumPacketSize": limit,
                                      "AuthenticationMethod": "SCRAM-SHA-1"})
                pkts = r.expect_closed()
                self.assertEqual([p.type for p in pkts], [CONNACK], pkts)
                self.assertGreaterEqual(pkts[0].rc, 0x80)
                self.assertLessEqual(wire_size(pkts[0]), limit, pkts)
        r = self.raw(V)
        ack = r.connect("fits", props={"MaximumPacketSize": 20})
        self.assertEqual(ack.rc, 0)
        self.assertLessEqual(wire_size(ack), 20, ack)
        self.assertNotIn("ReasonString", ack.props)
        self.assertNotIn("UserProperty", ack.props)
        r.send(nmq.publish_bytes("d/t", b"x", 0, version=V, props={"TopicAlias": 0}))
        pkts = self.assert_closed(r, v5_codes=[c for c in DISCONNECT_CODES if c >= 0x80],
                                  mosq_plain_close=True)
        for p in pkts:
            self.assertLessEqual(wire_size(p), 20, pkts)

class RefusedFilterV5(BrokerTestCase):
    """Failure reason codes from well-formed filters the broker refuses: a
    filter deeper than mqtt.max_topic_levels gets SUBACK 0x8F (a malformed
    filter closes the connection instead)."""

    CONF = "mqtt.max_topic_levels = 3"

    # [MQTT5-3.1.2-29]: with Request Problem Information 0 the server sends no
    # Reason String and no User Property on SUBACK, UNSUBACK, PUBACK, PUBREC,
    # PUBCOMP, even for failures (here a filter deeper than the limit).
    @skip_on_mosquitto("mosquitto has no topic level limit")
    def test_request_problem_information_0(self):
        r = self.raw(V)
        ack = r.connect("rpi0", props={"RequestProblemInformation": 0})
        self.assertEqual(ack.rc, 0)
        acks = [r.subscribe([("rpi/ok", 1), ("rpi/a/b/c", 1)]),
                r.unsubscribe(["rpi/none", "rpi/a/b/c"]),
                r.publish("rpi/t", b"x", qos=1),
                r.publish("rpi/t", b"x", qos=2)]
        r.send(nmq.ack_bytes(PUBREL, 999, version=V))  # an unknown id: PUBCOMP 0x92
        acks.append(r.expect(PUBCOMP, pid=999))
        r.send(nmq.publish_bytes("rpi/t", b"y", 2, pid=500, version=V))
        acks.append(r.expect(PUBREC, pid=500))
        for a in acks:
            self.assertNotIn("ReasonString", a.props, a)
            self.assertNotIn("UserProperty", a.props, a)

    # [MQTT5-3.9.3-2] [MQTT5-3.8.4-7]: every SUBACK code is a Subscribe Reason
    # Code: the granted QoS or a failure (here for a filter deeper than the
    # broker allows); [MQTT5-3.11.3-2] [MQTT5-3.11.3-1]: every UNSUBACK code
    # is an Unsubscribe Reason Code, in filter order;
    # [MQTT5-3.10.4-6]: one UNSUBSCRIBE with several filters is handled as that
    # many UNSUBSCRIBEs with one UNSUBACK, and only the named subscriptions end
    # ([MQTT5-3.10.4-1]/[MQTT5-3.10.4-2]).
    @skip_on_mosquitto("mosquitto has no topic level limit")
    def test_suback_unsuback_codes(self):
        r = self.raw(V, "codes")
        s = r.subscribe([("k/0", 0), ("k/1", 1), ("k/2", 2), ("k/a/b/c", 1), ("k/3", 1)])
        self.assertEqual(len(s.codes), 5)
        self.assertEqual(s.codes[:3] + s.codes[4:], [0, 1, 2, 1])
        self.assertGreaterEqual(s.codes[3], 0x80)
        for c in s.codes:
            self.assertIn(c, SUBACK_CODES, "SUBACK %r" % s)
        r.expect_nothing(0.3, types=(SUBACK,))
        u = r.unsubscribe(["k/0", "k/none", "k/2", "k/a/b/c"])
        self.assertEqual(len(u.codes), 4)
        self.assertEqual(u.codes[0], 0x00)
        self.assertEqual(u.codes[2], 0x00)
        self.assertIn(u.codes[1], (0x00, 0x11), "a filter with no subscription: %r" % u)
        for c in u.codes:
            self.assertIn(c, UNSUBACK_CODES, "UNSUBACK %r" % u)
        r.expect_nothing(0.3, types=(UNSUBACK,))
        p = self.raw(V, "kpub")
        for t in ("k/0", "k/1", "k/2", "k/3"):
            p.publish(t, t.encode(), qos=1)
        got = r.expect_publishes(2, ack=True)
        self.assertEqual(sorted(g.topic for g in got), ["k/1", "k/3"])
        r.expect_nothing(0.5, types=(PUBLISH,))

    # [MQTT5-3.9.2-1]/[MQTT5-3.9.2-2]/[MQTT5-3.11.2-1]/[MQTT5-3.11.2-2]: a
    # SUBACK (here refusing a filter deeper than allowed) or an UNSUBACK never
    # grows past the client's Maximum Packet Size with a Reason String or User
    # Property: it still arrives, without them ([MQTT5-3.1.2-24]).
    @skip_on_mosquitto("mosquitto has no topic level limit")
    def test_acks_fit_the_client_maximum_packet_size(self):
        r = self.raw(V)
        self.assertEqual(r.connect("small", props={"MaximumPacketSize": 20}).rc, 0)
        s = r.subscribe([("sm/a/b/c", 1)])
        self.assertLessEqual(wire_size(s), 20, s)
        self.assertGreaterEqual(s.codes[0], 0x80)
        u = r.unsubscribe(["sm/none"])
        self.assertLessEqual(wire_size(u), 20, u)
        s = r.subscribe([("sm/ok", 1)])
        self.assertEqual(s.codes, [1])


if __name__ == "__main__":
    nmq.main()
