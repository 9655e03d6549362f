#!/usr/bin/python3
"""03: PUBLISH at QoS 0/1/2 in both directions: acknowledgements, counts,
ordering, duplicates, QoS downgrade, overlapping subscriptions, resend on
session resumption."""

import os
import time

import nmq
from nmq import PUBCOMP, PUBLISH, PUBREC, PUBREL, BrokerTestCase, skip_on_mosquitto


class QosCommon:
    V = 4

    def persistent_kw(self):
        """CONNECT arguments for a session that outlives the connection."""
        if self.V == 5:
            return {"clean": False, "props": {"SessionExpiryInterval": 60}}
        return {"clean": False}

    # 3.1.1 [MQTT-3.8.4-6] / 5.0 [MQTT5-3.8.4-8]: delivered QoS = min(published
    # QoS, granted QoS), for all nine combinations.
    def test_qos_downgrade_matrix(self):
        subs = {}
        for sq in (0, 1, 2):
            c = self.paho("sub-q%d" % sq, self.V)
            self.assertEqual(c.subscribe("mx/t", sq), [sq])
            subs[sq] = c
        pub = self.paho("mxpub", self.V)
        for pq in (0, 1, 2):
            pub.publish("mx/t", b"q%d" % pq, qos=pq)
        for sq, c in subs.items():
            got = c.wait_messages(3)
            self.assertEqual(sorted((m.payload, m.qos) for m in got),
                             sorted((b"q%d" % pq, min(pq, sq)) for pq in (0, 1, 2)),
                             "subscriber granted QoS %d" % sq)

    # 3.1.1 [MQTT-4.6.0-5]/[MQTT-4.6.0-6], 5.0 [MQTT5-4.6.0-5]/[MQTT5-4.6.0-6]:
    # messages on one topic at one QoS from one client arrive in order; QoS 1
    # and 2 arrive exactly once each (QoS 2) / at least once (QoS 1; over an
    # undisturbed connection the broker has no reason to duplicate).  QoS 0
    # over loopback with the queue far below its bound: no reason to drop
    # either (our contract counts every drop).
    def test_counts_and_order_per_qos(self):
        for qos in (0, 1, 2):
            n = 500 if qos == 0 else 150
            with self.subTest(qos=qos):
                topic = "order/q%d" % qos
                sub = self.paho("osub%d" % qos, self.V)
                sub.subscribe(topic, 2)
                pub = self.paho("opub%d" % qos, self.V)
                infos = [pub.publish(topic, b"%05d" % i, qos=qos, wait=False) for i in range(n)]
                for info in infos:
                    info.wait_for_publish(10)
                got = sub.wait_messages(n, timeout=20)
                self.assert_sequence([m.payload for m in got], [b"%05d" % i for i in range(n)],
                                     "QoS %d messages of one publisher" % qos)
                self.assertTrue(all(m.qos == qos for m in got))
                sub.expect_no_message(0.3)

    # 3.1.1 [MQTT-4.3.2-2] + [MQTT-2.3.1-6] / 5.0 [MQTT5-4.3.2-4] +
    # [MQTT5-2.2.1-5]: a QoS 1 PUBLISH gets a PUBACK with the same Packet
    # Identifier.
    def test_inbound_qos1_puback(self):
        r = self.raw(self.V, "q1pub")
        for pid in (1, 300, 65535):
            ack = r.publish("in/q1", b"x", qos=1, pid=pid)
            self.assertEqual(ack.pid, pid)
            if self.V == 5:
                self.assertIn(ack.rc, (0x00, 0x10))

    # 3.1.1 [MQTT-4.3.3-2] / 5.0 [MQTT5-4.3.3-8]/[MQTT5-4.3.3-11]: QoS 2
    # receiver answers PUBREC then PUBCOMP with the same identifier, and the
    # message reaches subscribers exactly once.
    def test_inbound_qos2_flow(self):
        sub = self.paho("q2sub", self.V)
        sub.subscribe("in/q2", 2)
        r = self.raw(self.V, "q2pub")
        r.send(nmq.publish_bytes("in/q2", b"exactly-once", 2, pid=77, version=self.V))
        rec = r.expect(PUBREC)
        self.assertEqual(rec.pid, 77)
        r.send(nmq.ack_bytes(PUBREL, 77, version=self.V))
        comp = r.expect(PUBCOMP)
        self.assertEqual(comp.pid, 77)
        self.assertEqual(sub.wait_messages(1)[0].payload, b"exactly-once")
        # A second message on the same topic/QoS proves no copy was pending.
        r.publish("in/q2", b"marker", qos=2)
        self.assertEqual(sub.wait_messages(1)[0].payload, b"marker")
        sub.expect_no_message(0.3)

    # 3.1.1 [MQTT-4.3.3-2] / 5.0 [MQTT5-4.3.3-10]: until PUBREL, a PUBLISH
    # with the same Packet Identifier (DUP=1) is answered with PUBREC and does
    # NOT cause a duplicate delivery.  5.0 [MQTT5-4.3.3-12] / 3.1.1
    # [MQTT-4.3.3-2]: after PUBCOMP the same identifier is a new message.
    def test_inbound_qos2_duplicate_before_pubrel(self):
        sub = self.paho("dupsub", self.V)
        sub.subscribe("in/dup", 2)
        r = self.raw(self.V, "duppub")
        r.send(nmq.publish_bytes("in/dup", b"first", 2, pid=9, version=self.V))
        self.assertEqual(r.expect(PUBREC).pid, 9)
        # mosquitto 2.0.11 answers a second duplicate with DISCONNECT 0x82 when
        # the topic has a subscriber, so it is only sent to our broker.
        for _ in range(1 if nmq.USE_MOSQUITTO else 2):
            r.send(nmq.publish_bytes("in/dup", b"first", 2, dup=True, pid=9, version=self.V))
            self.assertEqual(r.expect(PUBREC).pid, 9)
        r.send(nmq.ack_bytes(PUBREL, 9, version=self.V))
        self.assertEqual(r.expect(PUBCOMP).pid, 9)
        # Same identifier again after PUBCOMP: a new message.
        r.publish("in/dup", b"second", qos=2, pid=9)
        got = sub.wait_messages(2)
        self.assertEqual([m.payload for m in got], [b"first", b"second"])
        sub.expect_no_message(0.5)

    # 3.1.1 [MQTT-4.3.2-2] / 5.0 [MQTT5-4.3.2-5]: after PUBACK a PUBLISH with
    # the same identifier is a new message, whatever its DUP flag.
    def test_inbound_qos1_reused_pid_is_new_message(self):
        sub = self.paho("q1reuse-sub", self.V)
        sub.subscribe("in/reuse", 1)
        r = self.raw(self.V, "q1reuse")
        r.publish("in/reuse", b"a", qos=1, pid=5)
        r.publish("in/reuse", b"b", qos=1, pid=5, dup=True)
        got = sub.wait_messages(2)
        self.assertEqual([m.payload for m in got], [b"a", b"b"])

    # 3.1.1 [MQTT-3.3.1-3] / 5.0 [MQTT5-3.3.1-3]: the DUP flag is not
    # propagated: a first delivery has DUP 0 even if the publisher set DUP 1.
    # 3.1.1 [MQTT-3.3.1-2] / 5.0 [MQTT5-3.3.1-2]: DUP is 0 for QoS 0.
    def test_dup_flag_not_propagated(self):
        sub = self.raw(self.V, "dupflag-sub")
        sub.subscribe([("dupflag/#", 2)])
        r = self.raw(self.V, "dupflag-pub")
        r.publish("dupflag/1", b"one", qos=1, dup=True)
        r.publish("dupflag/2", b"two", qos=2, dup=True)
        r.publish("dupflag/0", b"zero", qos=0)
        got = {p.topic: p for p in sub.expect_publishes(3, ack=True)}
        for t in ("dupflag/0", "dupflag/1", "dupflag/2"):
            self.assertFalse(got[t].dup, "%s delivered with DUP=1" % t)

    # 3.1.1 [MQTT-4.3.3-1] / 5.0 [MQTT5-4.3.3-4]: outbound QoS 2: PUBLISH,
    # PUBREC from the client, then PUBREL (flags 0010, 3.1.1 [MQTT-3.6.1-1] /
    # 5.0 [MQTT5-3.6.1-1]) with the same identifier, then PUBCOMP.
    def test_outbound_qos2_flow(self):
        r = self.raw(self.V, "out2")
        r.subscribe([("out/q2", 2)])
        pub = self.paho("out2pub", self.V)
        pub.publish("out/q2", b"m", qos=2)
        p = r.expect(PUBLISH)
        self.assertEqual(p.qos, 2)
        self.assertNotEqual(p.pid, 0)
        self.assertFalse(p.dup)
        r.send(nmq.ack_bytes(PUBREC, p.pid, version=self.V))
        rel = r.expect(PUBREL)
        self.assertEqual(rel.pid, p.pid)
        self.assertEqual(rel.flags, 0x02)
        r.send(nmq.ack_bytes(PUBCOMP, p.pid, version=self.V))
        r.expect_nothing(0.3, types=(PUBLISH, PUBREL))

    # 3.1.1 [MQTT-2.3.1-1]/[MQTT-2.3.1-4] / 5.0 [MQTT5-2.2.1-4]: every QoS>0
    # PUBLISH from the server has a non-zero Packet Identifier that is not
    # in use by another unacknowledged message.
    def test_outbound_packet_ids_unique(self):
        r = self.raw(self.V, "pids")
        r.subscribe([("pid/t", 1)])
        pub = self.paho("pidpub", self.V)
        for i in range(12):
            pub.publish("pid/t", b"%d" % i, qos=1)
        got = r.expect_publishes(12)  # not acknowledged
        pids = [p.pid for p in got]
        self.assertNotIn(0, pids)
        self.assertEqual(len(set(pids)), 12, "packet ids reused while in flight: %r" % pids)
        self.assertEqual([p.payload for p in got], [b"%d" % i for i in range(12)])

    # 3.1.1 [MQTT-3.3.5-1] / 5.0 [MQTT5-3.3.4-2]: overlapping subscriptions of
    # one client: delivery respects the maximum QoS of the matching
    # subscriptions (one copy, or one copy per subscription, are both allowed).
    def test_overlapping_subscriptions_max_qos(self):
        c = self.paho("overlap", self.V)
        c.subscribe("ov/#", 0)
        c.subscribe("ov/+", 2)
        c.subscribe("ov/t", 1)
        pub = self.paho("ovpub", self.V)
        pub.publish("ov/t", b"o", qos=2)
        first = c.wait_messages(1)[0]
        time.sleep(nmq.T_QUIET)
        copies = list(c.received)
        self.assertTrue(1 <= len(copies) <= 3, copies)
        self.assertEqual(max(m.qos for m in copies), 2,
                         "no copy delivered at the maximum granted QoS: %r" % copies)
        self.assertEqual(first.payload, b"o")

    # The payload is forwarded unchanged: empty, every byte value, 256 KiB.
    # (3.1.1 3.3.3 / 5.0 3.3.3: the payload is opaque application data.)
    def test_payload_integrity(self):
        sub = self.paho("bin-sub", self.V)
        sub.subscribe("bin/#", 1)
        pub = self.paho("bin-pub", self.V)
        payloads = [b"", bytes(range(256)) * 4, os.urandom(256 * 1024)]
        for i, pl in enumerate(payloads):
            pub.publish("bin/%d" % i, pl, qos=1)
        got = {m.topic: m.payload for m in sub.wait_messages(3, timeout=10)}
        for i, pl in enumerate(payloads):
            self.assertEqual(got["bin/%d" % i], pl, "payload %d altered" % i)

    # 3.1.1 [MQTT-4.7.3-4] / 5.0 [MQTT5-4.7.3-4]: no normalisation of topic
    # names: multi-byte UTF-8 and U+FEFF (3.1.1 [MQTT-1.5.3-3] / 5.0
    # [MQTT5-1.5.4-3]) pass through unchanged.
    def test_utf8_topics_unchanged(self):
        topics = ["caf\u00e9/\u6e29\u5ea6", "\ufeffbom/x", "sp ace/\U0001F600"]
        sub = self.paho("utf-sub", self.V)
        for t in topics:
            sub.subscribe(t, 1)
        pub = self.paho("utf-pub", self.V)
        for t in topics:
            pub.publish(t, t.encode(), qos=1)
        got = sorted(m.topic for m in sub.wait_messages(3))
        self.assertEqual(got, sorted(topics))

    # 3.1.1 [MQTT-4.3.3-2] / 5.0 [MQTT5-4.3.3-11]: a PUBREL is answered with
    # PUBCOMP carrying the same identifier, also for an identifier the
    # broker does not know (5.0: reason 0x92 Packet Identifier not found, or
    # 0x00).
    def test_pubrel_unknown_pid_gets_pubcomp(self):
        r = self.raw(self.V, "relunknown")
        r.send(nmq.ack_bytes(PUBREL, 4321, version=self.V))
        comp = r.expect(PUBCOMP)
        self.assertEqual(comp.pid, 4321)
        if self.V == 5:
            self.assertIn(comp.rc, (0x00, 0x92))

    # 3.1.1 [MQTT-4.5.0-1]/[MQTT-4.6.0-6] / 5.0 [MQTT5-4.5.0-1]/[MQTT5-4.6.0-5]:
    # fan-out: 30 subscribers each get every one of 60 QoS 1 messages, once,
    # in order.
    def test_fan_out(self):
        subs = []
        for i in range(30):
            c = self.paho("fan%02d" % i, self.V)
            c.subscribe("fan/t", 1)
            subs.append(c)
        pub = self.paho("fanpub", self.V)
        infos = [pub.publish("fan/t", b"%02d" % i, qos=1, wait=False) for i in range(60)]
        for info in infos:
            info.wait_for_publish(10)
        want = [b"%02d" % i for i in range(60)]
        for i, c in enumerate(subs):
            got = [m.payload for m in c.wait_messages(60, timeout=15)]
            self.assert_sequence(got, want, "subscriber %d" % i)
        for c in subs:
            c.expect_no_message(0.05)

    # 3.1.1 [MQTT-4.6.0-6] / 5.0 [MQTT5-4.6.0-5]: order is kept per publishing
    # client when several clients publish to one topic at the same time.
    def test_concurrent_publishers_order(self):
        sub = self.paho("cp-sub", self.V)
        sub.subscribe("cp/t", 2)
        pubs = [self.paho("cp-pub%d" % i, self.V) for i in range(5)]
        infos = []
        for n in range(80):
            for i, p in enumerate(pubs):
                infos.append(p.publish("cp/t", b"%d:%03d" % (i, n), qos=1 + (n % 2), wait=False))
        for info in infos:
            info.wait_for_publish(15)
        got = [m.payload for m in sub.wait_messages(400, timeout=20)]
        for i in range(5):
            for q in (1, 2):
                mine = [g for g in got if g.startswith(b"%d:" % i) and int(g[2:]) % 2 == q - 1]
                self.assert_sequence(mine, [b"%d:%03d" % (i, n) for n in range(80) if n % 2 == q - 1],
                                     "publisher %d, QoS %d" % (i, q))
        sub.expect_no_message(0.3)

    # 3.1.1 [MQTT-4.7.3-3] / 5.0 [MQTT5-4.7.3-3]: topic names may be up to
    # 65,535 bytes: a 30,000-byte topic with 101 levels is routed by '#', by
    # a '+' filter and by its exact name.
    def test_long_deep_topic(self):
        topic = "a/" * 100 + "z" * 29799
        subs = {}
        for name, flt in (("hash", "#"), ("plus", "a/+/a/#"), ("exact", topic)):
            c = self.paho("deep-" + name, self.V)
            c.subscribe(flt, 1)
            subs[name] = c
        pub = self.paho("deeppub", self.V)
        pub.publish(topic, b"deep", qos=1)
        for name, c in subs.items():
            m = c.wait_messages(1)[0]
            self.assertEqual((m.topic, m.payload), (topic, b"deep"), name)

    # 3.1.1 [MQTT-4.4.0-1]/[MQTT-3.3.1-1]/[MQTT-4.6.0-6], 5.0
    # [MQTT5-4.4.0-1]/[MQTT5-3.3.1-1]/[MQTT5-4.6.0-5]: on resuming a session the
    # server resends the unacknowledged QoS 1 PUBLISH packets with their
    # original identifiers, DUP=1, in the original order.
    def test_resend_unacked_qos1_on_resume(self):
        r = self.raw(self.V, "resend1", **self.persistent_kw())
        r.subscribe([("rs1/t", 1)])
        pub = self.paho("rs1pub", self.V)
        for i in range(5):
            pub.publish("rs1/t", b"m%d" % i, qos=1)
        first = r.expect_publishes(5)
        r.abort()
        r2 = self.raw(self.V)
        ack = r2.connect("resend1", **self.persistent_kw())
        self.assertEqual(ack.rc, 0)
        self.assertTrue(ack.session_present)
        again = r2.expect_publishes(5)
        self.assertEqual([p.payload for p in again], [p.payload for p in first])
        self.assertEqual([p.pid for p in again], [p.pid for p in first])
        self.assertTrue(all(p.dup for p in again), "resent PUBLISH without DUP: %r" % again)
        for p in again:
            r2.ack(p)
        r2.expect_nothing(0.5, types=(PUBLISH,))

    # 3.1.1 [MQTT-4.4.0-1] / 5.0 [MQTT5-4.4.0-1]: on resumption the server
    # resends an unacknowledged PUBREL (for a QoS 2 message already PUBREC'd)
    # and the unacknowledged QoS 2 PUBLISH (DUP=1), with original identifiers;
    # 3.1.1 [MQTT-4.3.3-1] / 5.0 [MQTT5-4.3.3-6]: never the PUBLISH again once
    # PUBREL was sent; [MQTT5-4.3.3-5]: the PUBREL is resent until PUBCOMP.
    def test_resend_pubrel_and_qos2_on_resume(self):
        r = self.raw(self.V, "resend2", **self.persistent_kw())
        r.subscribe([("rs2/t", 2)])
        pub = self.paho("rs2pub", self.V)
        pub.publish("rs2/t", b"A", qos=2)
        pub.publish("rs2/t", b"B", qos=2)
        a, b = r.expect_publishes(2)
        self.assertEqual((a.payload, b.payload), (b"A", b"B"))
        r.send(nmq.ack_bytes(PUBREC, a.pid, version=self.V))
        self.assertEqual(r.expect(PUBREL).pid, a.pid)
        r.abort()
        r2 = self.raw(self.V)
        ack = r2.connect("resend2", **self.persistent_kw())
        self.assertTrue(ack.session_present)
        rel = r2.expect(PUBREL)
        self.assertEqual(rel.pid, a.pid)
        pb = r2.expect(PUBLISH)
        self.assertEqual((pb.payload, pb.pid, pb.dup), (b"B", b.pid, True))
        r2.send(nmq.ack_bytes(PUBCOMP, a.pid, version=self.V))
        r2.ack_full(pb)
        r2.expect_nothing(0.5, types=(PUBLISH, PUBREL))


# mosquitto needs allow_duplicate_messages for [MQTT-3.3.5-1] with 3.1.1
# clients (otherwise it delivers one copy at the QoS of one subscription).
MOSQ = "allow_duplicate_messages true"


class TestQosV311(QosCommon, BrokerTestCase):
    V = 4
    CONF = "mqtt.retry_interval = 2s"
    MOSQ_CONF = MOSQ

    # Our contract (docs/compatibility.md §2, mqtt.retry_interval): unacknowledged QoS 1
    # messages to a v3.1.1 client are resent on the live connection every
    # retry_interval, with DUP=1 (3.1.1 [MQTT-3.3.1-1]).
    @skip_on_mosquitto("mosquitto 2.0 never retries on a live connection")
    def test_v311_retry_on_live_connection(self):
        r = self.raw(4, "retry311")
        r.subscribe([("retry/t", 1)])
        pub = self.paho("retrypub", 4)
        pub.publish("retry/t", b"r", qos=1)
        p = r.expect(PUBLISH)
        self.assertFalse(p.dup)
        again = r.expect(PUBLISH, timeout=6)
        self.assertEqual((again.pid, again.payload, again.dup), (p.pid, b"r", True))


class TestQosV5(QosCommon, BrokerTestCase):
    V = 5
    CONF = "mqtt.retry_interval = 2s"
    MOSQ_CONF = MOSQ

    # 5.0 [MQTT5-4.4.0-1]: resending is required only on session resumption;
    # "Clients and Servers MUST NOT resend messages at any other time".  An
    # unacknowledged message is not resent on the live connection (we wait
    # 2.5 x retry_interval).
    def test_v5_no_resend_on_live_connection(self):
        r = self.raw(5, "noretry5")
        r.subscribe([("noretry/t", 1)])
        pub = self.paho("noretrypub", 5)
        pub.publish("noretry/t", b"n", qos=1)
        r.expect(PUBLISH)
        r.expect_nothing(5.0, types=(PUBLISH,))


if __name__ == "__main__":
    nmq.main()
