#!/usr/bin/python3
"""09: MQTT 5 Topic Aliases in both directions."""

import nmq
from nmq import BrokerTestCase

MAX_ALIAS = 5


class TopicAliasTests(BrokerTestCase):
    CONF = "mqtt.max_topic_alias = %d" % MAX_ALIAS
    MOSQ_CONF = "max_topic_alias %d" % MAX_ALIAS

    def setUp(self):
        super().setUp()
        self.sub = self.paho("alias-sub", 5)
        self.sub.subscribe("al/#", 1)

    def aliasing_client(self, cid="aliaser"):
        r = self.raw(5)
        ack = r.connect(cid)
        self.assertEqual(ack.rc, 0)
        self.assertEqual(ack.props.get("TopicAliasMaximum"), MAX_ALIAS)
        return r

    # 5.0 [MQTT5-3.3.2-12] and 3.3.2.3.4: the server accepts every alias from 1
    # to its Topic Alias Maximum: a PUBLISH with topic + alias sets the
    # mapping, an empty topic + alias uses it, a new topic + alias remaps it.
    def test_client_to_broker_aliases(self):
        r = self.aliasing_client()
        for a in range(1, MAX_ALIAS + 1):
            r.publish("al/t%d" % a, b"set-%d" % a, qos=1, props={"TopicAlias": a})
        for a in range(1, MAX_ALIAS + 1):
            r.publish("", b"use-%d" % a, qos=1, props={"TopicAlias": a})
        r.publish("al/remapped", b"remap", qos=0, props={"TopicAlias": 1})
        r.publish("", b"use-remapped", qos=1, props={"TopicAlias": 1})
        got = [(m.topic, m.payload) for m in self.sub.wait_messages(2 * MAX_ALIAS + 2)]
        want = [("al/t%d" % a, b"set-%d" % a) for a in range(1, MAX_ALIAS + 1)]
        want += [("al/t%d" % a, b"use-%d" % a) for a in range(1, MAX_ALIAS + 1)]
        want += [("al/remapped", b"remap"), ("al/remapped", b"use-remapped")]
        self.assertEqual(sorted(got), sorted(want))
        # Forwarded messages carry the real topic, never the publisher's alias.
        self.assertTrue(all(m.topic for m in self.sub.received))

    # 5.0 [MQTT5-3.2.2-17]/[MQTT5-3.3.2-9] and 3.3.2.3.4: an alias above the
    # server's Topic Alias Maximum is a Protocol Error answered with
    # DISCONNECT 0x94 (Topic Alias invalid); the broker stays healthy.
    def test_alias_above_maximum(self):
        by = self.bystander(5)
        r = self.aliasing_client()
        r.send(nmq.publish_bytes("al/x", b"x", 0, props={"TopicAlias": MAX_ALIAS + 1}, version=5))
        self.assert_closed(r, v5_codes=(0x94,), msg="alias above maximum")
        self.sub.expect_no_message(0.3)
        self.assert_broker_healthy(by)

    # 5.0 [MQTT5-3.3.2-8]: Topic Alias 0 is not allowed.  The spec names 0x94
    # only for aliases above the maximum, so 0x94, 0x82 (Protocol Error) and
    # 0x81 (Malformed, mosquitto's choice) are all accepted.
    def test_alias_zero(self):
        r = self.aliasing_client()
        r.send(nmq.publish_bytes("al/x", b"x", 1, pid=3, props={"TopicAlias": 0}, version=5))
        self.assert_closed(r, v5_codes=(0x94, 0x82, 0x81), msg="alias 0")

    # 5.0 3.3.2.3.4: an empty Topic Name with an alias that has no mapping is
    # a Protocol Error (DISCONNECT 0x82; 0x94 accepted as the more specific
    # code).
    def test_unknown_alias_with_empty_topic(self):
        r = self.aliasing_client()
        r.send(nmq.publish_bytes("", b"x", 1, pid=4, props={"TopicAlias": 2}, version=5))
        self.assert_closed(r, v5_codes=(0x82, 0x94), msg="unmapped alias")

    # 5.0 3.3.2.1: an empty Topic Name without a Topic Alias is a Protocol
    # Error.
    def test_empty_topic_without_alias(self):
        r = self.aliasing_client()
        r.send(nmq.publish_bytes("", b"x", 1, pid=4, version=5))
        self.assert_closed(r, v5_codes=(0x82, 0x81), msg="empty topic, no alias")

    # 5.0 [MQTT5-3.3.2-7]: alias mappings do not carry over to a new network
    # connection (same client id, session resumed).
    def test_alias_not_carried_to_next_connection(self):
        r = self.raw(5)
        r.connect("carry", clean=False, props={"SessionExpiryInterval": 60})
        r.publish("al/carry", b"one", qos=1, props={"TopicAlias": 3})
        self.assertEqual(self.sub.wait_messages(1)[0].topic, "al/carry")
        r.disconnect()
        r.expect_closed()
        r2 = self.raw(5)
        self.assertTrue(r2.connect("carry", clean=False, props={"SessionExpiryInterval": 60}).session_present)
        r2.send(nmq.publish_bytes("", b"two", 1, pid=5, props={"TopicAlias": 3}, version=5))
        self.assert_closed(r2, v5_codes=(0x82, 0x94), msg="alias from the previous connection")
        self.sub.expect_no_message(0.3)

    # 5.0 [MQTT5-3.1.2-26]/[MQTT5-3.3.2-11]: the server never uses an alias
    # above the client's Topic Alias Maximum; whatever aliases it uses must
    # resolve to the right topics (checked by the raw client's alias table).
    def test_broker_to_client_aliases_bounded(self):
        r = self.raw(5)
        r.connect("aliasrecv", props={"TopicAliasMaximum": 2})
        r.subscribe([("al/#", 1)])
        pub = self.paho("alpub", 5)
        topics = ["al/a/%d" % i for i in range(5)]
        for rnd in range(3):
            for t in topics:
                pub.publish(t, ("%s#%d" % (t, rnd)).encode(), qos=1)
        got = r.expect_publishes(15, ack=True)
        for p in got:
            a = p.props.get("TopicAlias")
            if a is not None:
                self.assertTrue(1 <= a <= 2, "alias %d above the client's maximum 2" % a)
            self.assertTrue(p.topic, "empty topic with an unknown alias: %r" % p)
            self.assertEqual(p.payload.decode().split("#")[0], p.topic)

    # 5.0 [MQTT5-3.1.2-27]: no Topic Alias Maximum from the client -> no
    # aliases at all from the server.
    def test_no_aliases_without_client_maximum(self):
        r = self.raw(5, "noalias")
        r.subscribe([("al/#", 1)])
        pub = self.paho("alpub2", 5)
        for i in range(6):
            pub.publish("al/same", b"%d" % i, qos=1)
        for p in r.expect_publishes(6, ack=True):
            self.assertNotIn("TopicAlias", p.props)
            self.assertEqual(p.topic, "al/same")


if __name__ == "__main__":
    nmq.main()
