#!/usr/bin/python3
"""02: SUBSCRIBE / SUBACK / UNSUBSCRIBE, topic filter matching, $ topics."""

import time

import nmq
from nmq import PUBLISH, SUBACK, UNSUBACK, BrokerTestCase

# topic -> which of these filters match it (MQTT 3.1.1 / 5.0 section 4.7).
TOPICS = ["a", "a/b", "a/b/c", "a/b/c/d", "a//c", "/a", "a/", "A/b", "b/x"]
MATCHES = {
    "a/b": {"a/b"},
    "a/+": {"a/b", "a/"},
    "a/+/c": {"a/b/c", "a//c"},
    "a/#": {"a", "a/b", "a/b/c", "a/b/c/d", "a//c", "a/"},
    "+": {"a"},
    "+/+": {"a/b", "/a", "a/", "A/b", "b/x"},
    "/+": {"/a"},
    "+/b/#": {"a/b", "a/b/c", "a/b/c/d", "A/b"},
    "#": set(TOPICS),
    "A/b": {"A/b"},
}


class SubscribeCommon:
    V = 4

    # 3.1.1 [MQTT-3.8.4-1]/[MQTT-3.8.4-2]/[MQTT-3.8.4-5]/[MQTT-3.9.3-1] and
    # 5.0 [MQTT5-3.8.4-1]/[MQTT5-3.8.4-2]/[MQTT5-3.8.4-6]/[MQTT5-3.9.3-1]: one
    # SUBACK with the same Packet Identifier and one code per filter, in order;
    # the broker supports QoS 2 so it grants what was asked.
    def test_suback_codes_in_order(self):
        r = self.raw(self.V, "subber")
        filters = [("q/2", 2), ("q/0", 0), ("q/1", 1), ("q/1b", 1), ("q/0b", 0)]
        ack = r.subscribe(filters, pid=4242)
        self.assertEqual(ack.pid, 4242)
        self.assertEqual(ack.codes, [2, 0, 1, 1, 0])

    # Same, with many filters in one SUBSCRIBE.
    # 3.1.1 [MQTT-3.8.4-4]/[MQTT-3.8.4-5] / 5.0 [MQTT5-3.8.4-5]/[MQTT5-3.8.4-6].
    def test_suback_many_filters(self):
        r = self.raw(self.V, "many")
        filters = [("m/%d" % i, i % 3) for i in range(60)]
        ack = r.subscribe(filters)
        self.assertEqual(ack.codes, [i % 3 for i in range(60)])

    # 3.1.1 / 5.0 section 4.7: wildcard matching ('#' also matches the parent
    # level: 3.1.1 [MQTT-4.7.1-2] / 5.0 [MQTT5-4.7.1-1]; '+' matches exactly
    # one level, possibly empty: 3.1.1 [MQTT-4.7.1-3] / 5.0 [MQTT5-4.7.1-2];
    # 3.1.1 [MQTT-3.3.2-3] / 5.0 [MQTT5-3.3.2-3]: only matching topics are
    # sent; topics are case sensitive and a leading '/' makes a distinct
    # level, 4.7.3 / [MQTT5-4.7.3-4]: no normalisation).
    def test_wildcard_matching(self):
        subs = {}
        for flt in MATCHES:
            c = self.paho("sub-" + flt.replace("/", "_").replace("+", "P").replace("#", "H"), self.V)
            self.assertEqual(c.subscribe(flt, 1), [1])
            subs[flt] = c
        pub = self.paho("wild-pub", self.V)
        for t in TOPICS:
            pub.publish(t, t.encode(), qos=1)
        for flt, c in subs.items():
            want = MATCHES[flt]
            got = [m.topic for m in c.wait_messages(len(want), timeout=5)]
            self.assertEqual(sorted(got), sorted(want), "filter %r" % flt)
        time.sleep(nmq.T_QUIET)  # extra deliveries would have arrived by now
        for flt, c in subs.items():
            self.assertEqual(len(c.received), len(MATCHES[flt]),
                             "filter %r got extra messages: %r" % (flt, c.received))
        for flt, c in subs.items():
            for m in c.received:
                self.assertEqual(m.payload, m.topic.encode())

    # 3.1.1 [MQTT-4.7.2-1] / 5.0 [MQTT5-4.7.2-1]: filters starting with a
    # wildcard do not match topic names starting with '$'.
    def test_dollar_topics_not_matched_by_leading_wildcards(self):
        hash_sub = self.paho("hash", self.V)
        hash_sub.subscribe("#", 1)
        plus_sub = self.paho("plus", self.V)
        plus_sub.subscribe("+/x", 1)
        dollar_sub = self.paho("dollar", self.V)
        dollar_sub.subscribe("$nmqtest/#", 1)
        dollar_plus = self.paho("dollarplus", self.V)
        dollar_plus.subscribe("$nmqtest/+", 1)
        pub = self.paho("dpub", self.V)
        pub.publish("$nmqtest/x", b"dollar", qos=1)
        pub.publish("plain/x", b"plain", qos=1)
        self.assertEqual(dollar_sub.wait_messages(1)[0].topic, "$nmqtest/x")
        self.assertEqual(dollar_plus.wait_messages(1)[0].topic, "$nmqtest/x")
        self.assertEqual(hash_sub.wait_messages(1)[0].topic, "plain/x")
        self.assertEqual(plus_sub.wait_messages(1)[0].topic, "plain/x")
        time.sleep(nmq.T_QUIET)
        self.assertEqual([m.topic for m in hash_sub.received], ["plain/x"])
        self.assertEqual([m.topic for m in plus_sub.received], ["plain/x"])

    # 3.1.1 [MQTT-3.8.4-3] / 5.0 [MQTT5-3.8.4-3]: a SUBSCRIBE with a filter
    # identical to an existing one replaces that subscription: one copy, at
    # the new QoS.
    def test_resubscribe_replaces(self):
        c = self.paho("resub", self.V)
        self.assertEqual(c.subscribe("rs/t", 0), [0])
        self.assertEqual(c.subscribe("rs/t", 2), [2])
        pub = self.paho("rspub", self.V)
        pub.publish("rs/t", b"one", qos=2)
        pub.publish("rs/t", b"two", qos=2)
        got = c.wait_messages(2)
        self.assertEqual([m.payload for m in got], [b"one", b"two"])
        self.assertEqual([m.qos for m in got], [2, 2])
        c.expect_no_message()

    # 3.1.1 [MQTT-3.10.4-1]/[MQTT-3.10.4-2]/[MQTT-3.10.4-4] and 5.0
    # [MQTT5-3.10.4-1]/[MQTT5-3.10.4-2]/[MQTT5-3.10.4-4]/[MQTT5-3.10.4-5]:
    # UNSUBSCRIBE deletes the exactly matching subscription, new messages
    # stop, UNSUBACK echoes the Packet Identifier.
    def test_unsubscribe_stops_delivery(self):
        r = self.raw(self.V, "unsub")
        r.subscribe([("u/t", 1)])
        pub = self.paho("upub", self.V)
        pub.publish("u/t", b"before", qos=1)
        p = r.expect(PUBLISH)
        self.assertEqual(p.payload, b"before")
        r.ack(p)
        ack = r.unsubscribe("u/t", pid=777)
        self.assertEqual(ack.pid, 777)
        if self.V == 5:
            self.assertEqual(ack.codes, [0x00])
        pub.publish("u/t", b"after", qos=1)
        r.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # 3.1.1 [MQTT-3.10.4-3] / 5.0 [MQTT5-3.10.4-3]: after UNSUBSCRIBE the
    # server completes the QoS 2 delivery it had started (PUBREL follows the
    # client's PUBREC).
    def test_unsubscribe_completes_inflight_qos2(self):
        r = self.raw(self.V, "unsub-inflight")
        r.subscribe([("ui/t", 2)])
        pub = self.paho("uipub", self.V)
        pub.publish("ui/t", b"started", qos=2)
        p = r.expect(PUBLISH)
        self.assertEqual(r.unsubscribe("ui/t").type, UNSUBACK)
        r.send(nmq.ack_bytes(nmq.PUBREC, p.pid, version=self.V))
        rel = r.expect(nmq.PUBREL)
        self.assertEqual(rel.pid, p.pid)
        r.send(nmq.ack_bytes(nmq.PUBCOMP, p.pid, version=self.V))

    # 3.1.1 [MQTT-3.10.4-1] / 5.0 [MQTT5-3.10.4-1]: filters are compared
    # character by character: unsubscribing "w/b" leaves "w/+" in place.
    def test_unsubscribe_is_literal(self):
        c = self.paho("lit", self.V)
        c.subscribe("w/+", 1)
        c.unsubscribe("w/b")
        pub = self.paho("litpub", self.V)
        pub.publish("w/b", b"still", qos=1)
        self.assertEqual(c.wait_messages(1)[0].payload, b"still")

    # 3.1.1 [MQTT-3.10.4-5] / 5.0 [MQTT5-3.10.4-5]/[MQTT5-3.11.3-1]: UNSUBACK
    # even when nothing was deleted (5.0: one code per filter, 0x00 or 0x11
    # No subscription existed).
    def test_unsubscribe_unknown_gets_unsuback(self):
        r = self.raw(self.V, "unknown")
        ack = r.unsubscribe(["never/subscribed", "nor/this"], pid=9)
        self.assertEqual(ack.pid, 9)
        if self.V == 5:
            self.assertEqual(len(ack.codes), 2)
            for code in ack.codes:
                self.assertIn(code, (0x00, 0x11))

    # 3.1.1 [MQTT-4.7.1-2]/[MQTT-4.7.1-3]/[MQTT-4.7.3-1] and 5.0
    # [MQTT5-4.7.1-1]/[MQTT5-4.7.1-2]/[MQTT5-4.7.3-1]: '#' must be last and alone
    # in its level, '+' alone in its level, a filter is at least one
    # character.  The broker must not grant such a filter: 3.1.1 SUBACK 0x80
    # or close; 5.0 SUBACK >= 0x80 (0x8F Topic Filter invalid) or DISCONNECT
    # (0x81/0x82/0x8F).  Either way the broker stays healthy.
    def test_invalid_filters_not_granted(self):
        by = self.bystander(self.V)
        for flt in ("a/#/b", "a#", "a/b+", "+a/b", ""):
            with self.subTest(filter=flt):
                r = self.raw(self.V, "inv")
                r.send(nmq.subscribe_bytes([(flt, 1)], 5, version=self.V))
                try:
                    p = r.read(nmq.T_ACK)
                except nmq.ConnectionClosed:
                    continue
                if p.type == SUBACK:
                    self.assertEqual(len(p.codes), 1)
                    self.assertGreaterEqual(p.codes[0], 0x80, "invalid filter %r was granted" % flt)
                else:
                    self.assertEqual(self.V, 5, "v3.1.1: unexpected %r" % p)
                    self.assertEqual(p.type, nmq.DISCONNECT, "unexpected %r" % p)
                    self.assertIn(p.rc, (0x81, 0x82, 0x8F))
                    r.expect_closed()
                r.close()
        self.assert_broker_healthy(by)

    # SUBSCRIBE with a mix of valid and invalid filters: 5.0 [MQTT5-3.8.4-6]:
    # one code per filter, and the valid filter keeps working.  A filter that
    # breaks [MQTT5-4.7.1-1] is not "correctly formed", so treating the packet
    # as malformed and closing (5.0: after DISCONNECT 0x81/0x82/0x8F) is
    # accepted too.
    def test_mixed_valid_invalid_filters(self):
        r = self.raw(self.V, "mixed")
        r.send(nmq.subscribe_bytes([("ok/t", 1), ("bad/#/x", 1)], 6, version=self.V))
        try:
            ack = r.expect(SUBACK, nmq.T_ACK)
        except nmq.ConnectionClosed:
            for p in r.backlog:
                self.assertEqual(p.type, nmq.DISCONNECT, "unexpected %r" % p)
                self.assertIn(p.rc, (0x81, 0x82, 0x8F))
            return
        self.assertEqual(ack.codes[0], 1)
        self.assertGreaterEqual(ack.codes[1], 0x80)
        pub = self.paho("mixpub", self.V)
        pub.publish("ok/t", b"fine", qos=1)
        self.assertEqual(r.expect(PUBLISH).payload, b"fine")

    # $SYS: 3.1.1 [MQTT-4.7.2-1] / 5.0 [MQTT5-4.7.2-1] and our contract 5.4:
    # the broker's own $SYS messages reach a "$SYS/#" subscriber but never a
    # "#" subscriber.
    def test_sys_topics_not_matched_by_hash(self):
        hash_sub = self.paho("hashsys", self.V)
        hash_sub.subscribe("#", 0)
        sys_sub = self.paho("syssub", self.V)
        sys_sub.subscribe("$SYS/#", 0)
        # Our broker publishes $SYS/brokers/client_status/<id> on connect;
        # mosquitto (sys_interval 1) publishes $SYS/broker/... every second.
        trigger = self.paho("sys-trigger", self.V)
        m = sys_sub.wait_message(timeout=5)
        self.assertIsNotNone(m, "no $SYS message within 5 s")
        self.assertTrue(m.topic.startswith("$SYS/"))
        trigger.disconnect()
        time.sleep(nmq.T_QUIET)
        leaked = [x.topic for x in hash_sub.received if x.topic.startswith("$")]
        self.assertEqual(leaked, [], "'#' matched $ topics")


class TestSubscribeV311(SubscribeCommon, BrokerTestCase):
    V = 4
    MOSQ_CONF = "sys_interval 1"


class TestSubscribeV5(SubscribeCommon, BrokerTestCase):
    V = 5
    MOSQ_CONF = "sys_interval 1"

    # 5.0 [MQTT5-3.8.4-6] / [MQTT5-3.9.3-1]: with 5.0 the SUBACK holds a reason
    # code per filter; the paho view of it matches the raw one.
    def test_paho_suback_reason_codes(self):
        c = self.paho("paho5", 5)
        self.assertEqual(c.subscribe([("p/0", 0), ("p/1", 1), ("p/2", 2)]), [0, 1, 2])


if __name__ == "__main__":
    nmq.main()
