#!/usr/bin/python3
"""04: retained messages (store, replace, clear, flags), MQTT 5 Retain
Handling, Retain As Published and No Local."""

import nmq
from nmq import PUBLISH, BrokerTestCase


class RetainCommon:
    V = 4

    def retain(self, topic, payload, qos=1, props=None, client=None):
        pub = client or self.paho("rpub-%s" % topic.replace("/", "_"), self.V)
        pub.publish(topic, payload, qos=qos, retain=True, props=props)
        return pub

    # 3.1.1 [MQTT-3.3.1-5]/[MQTT-3.3.1-6]/[MQTT-3.3.1-8], 5.0
    # [MQTT5-3.3.1-5]/[MQTT5-3.3.1-9] and 3.3.1.3: a retained message is
    # stored and sent, with RETAIN=1, to a later subscriber; at every QoS.
    def test_retained_delivered_on_subscribe(self):
        pub = self.paho("rp", self.V)
        for q in (0, 1, 2):
            pub.publish("ret/q%d" % q, b"retained-%d" % q, qos=q, retain=True)
        pub.disconnect()
        sub = self.paho("rs", self.V)
        sub.subscribe("ret/+", 2)
        got = sorted(sub.wait_messages(3), key=lambda m: m.topic)
        self.assertEqual([m.payload for m in got], [b"retained-0", b"retained-1", b"retained-2"])
        self.assertTrue(all(m.retain for m in got), "retained delivery without RETAIN=1: %r" % got)
        # 3.1.1 [MQTT-3.3.1-5] "and its QoS" / [MQTT-3.8.4-6], 5.0
        # [MQTT5-3.8.4-8]: delivered at min(stored QoS, granted QoS).
        self.assertEqual([m.qos for m in got], [0, 1, 2])

    # 3.1.1 [MQTT-3.3.1-5] + [MQTT-3.8.4-6] / 5.0 [MQTT5-3.8.4-8]: the stored
    # QoS is downgraded to the granted QoS.
    def test_retained_qos_downgraded(self):
        self.retain("retq/t", b"q2", qos=2)
        s0 = self.paho("s0", self.V)
        s0.subscribe("retq/t", 0)
        s1 = self.paho("s1", self.V)
        s1.subscribe("retq/t", 1)
        self.assertEqual(s0.wait_messages(1)[0].qos, 0)
        self.assertEqual(s1.wait_messages(1)[0].qos, 1)

    # 3.1.1 [MQTT-3.3.1-5] / 5.0 [MQTT5-3.3.1-5]: a new retained message
    # replaces the old one.
    def test_retained_replaced(self):
        pub = self.retain("rep/t", b"old")
        self.retain("rep/t", b"new", client=pub)
        sub = self.paho("repsub", self.V)
        sub.subscribe("rep/t", 1)
        self.assertEqual(sub.wait_messages(1)[0].payload, b"new")
        sub.expect_no_message()

    # 3.1.1 [MQTT-3.3.1-10]/[MQTT-3.3.1-11] / 5.0 [MQTT5-3.3.1-6]/[MQTT5-3.3.1-7]:
    # an empty retained PUBLISH is forwarded normally to current subscribers
    # and removes the retained message; it is not stored itself.
    def test_empty_retained_clears(self):
        pub = self.retain("clr/t", b"something")
        live = self.paho("clrlive", self.V)
        live.subscribe("clr/t", 1)
        self.assertEqual(live.wait_messages(1)[0].payload, b"something")
        pub.publish("clr/t", b"", qos=1, retain=True)
        m = live.wait_messages(1)[0]
        self.assertEqual(m.payload, b"")
        late = self.paho("clrlate", self.V)
        late.subscribe("clr/#", 1)
        late.expect_no_message()

    # 3.1.1 [MQTT-3.3.1-12] / 5.0 [MQTT5-3.3.1-8]: a PUBLISH with RETAIN=0
    # neither replaces nor removes the retained message.
    def test_non_retained_does_not_replace(self):
        pub = self.retain("nr/t", b"kept")
        pub.publish("nr/t", b"transient", qos=1, retain=False)
        pub.publish("nr/t", b"", qos=1, retain=False)
        sub = self.paho("nrsub", self.V)
        sub.subscribe("nr/t", 1)
        self.assertEqual(sub.wait_messages(1)[0].payload, b"kept")
        sub.expect_no_message()

    # 3.1.1 [MQTT-3.3.1-9] / 5.0 [MQTT5-3.3.1-12] (Retain As Published = 0,
    # the default): a retained PUBLISH forwarded to an established
    # subscription has RETAIN=0.
    def test_live_retained_forwarded_with_retain_0(self):
        sub = self.paho("livesub", self.V)
        sub.subscribe("live/t", 1)
        self.retain("live/t", b"now")
        m = sub.wait_messages(1)[0]
        self.assertEqual(m.payload, b"now")
        self.assertFalse(m.retain, "RETAIN=1 on delivery to an established subscription")

    # 3.1.1 [MQTT-3.3.1-6] / 5.0 [MQTT5-3.3.1-9]: "the last retained message
    # on each matching topic name" for a wildcard filter; none for topics
    # that do not match.
    def test_wildcard_gets_each_retained(self):
        pub = self.paho("wpub", self.V)
        for t in ("w/a", "w/b", "w/c/d", "x/a"):
            pub.publish(t, t.encode(), qos=1, retain=True)
        sub = self.paho("wsub", self.V)
        sub.subscribe("w/#", 1)
        got = sorted(m.topic for m in sub.wait_messages(3))
        self.assertEqual(got, ["w/a", "w/b", "w/c/d"])
        sub.expect_no_message()

    # 3.1.1 [MQTT-3.1.2-7]: retained messages are not session state and
    # survive the end of the publisher's session.
    def test_retained_outlives_publisher_session(self):
        pub = self.paho("shortlived", self.V, clean=True)
        pub.publish("life/t", b"persisting", qos=1, retain=True)
        pub.disconnect()
        sub = self.paho("lifesub", self.V)
        sub.subscribe("life/t", 1)
        self.assertEqual(sub.wait_messages(1)[0].payload, b"persisting")

    # 3.1.1 [MQTT-3.8.4-3] / 5.0 [MQTT5-3.8.4-4] (Retain Handling 0): on a
    # repeated SUBSCRIBE with an identical filter the retained messages are
    # sent again.
    def test_resubscribe_resends_retained(self):
        self.retain("again/t", b"r")
        sub = self.paho("againsub", self.V)
        sub.subscribe("again/t", 1)
        self.assertEqual(sub.wait_messages(1)[0].payload, b"r")
        sub.subscribe("again/t", 1)
        m = sub.wait_messages(1)[0]
        self.assertEqual(m.payload, b"r")
        self.assertTrue(m.retain)

    # Raw check of the RETAIN bit on the wire (3.1.1 [MQTT-3.3.1-8] / 5.0
    # 3.3.1.3) for a retained message of a topic with a multi-level name.
    def test_retain_bit_on_wire(self):
        self.retain("wire/a/b", b"bits", qos=1)
        r = self.raw(self.V, "wire")
        r.subscribe([("wire/#", 1)])
        p = r.expect(PUBLISH)
        self.assertTrue(p.retain)
        self.assertEqual((p.topic, p.payload, p.qos), ("wire/a/b", b"bits", 1))
        r.ack(p)


class TestRetainV311(RetainCommon, BrokerTestCase):
    V = 4


class TestRetainV5(RetainCommon, BrokerTestCase):
    V = 5

    # 5.0 [MQTT5-3.3.1-9]: Retain Handling 0 sends retained messages on every
    # subscribe, including a repeated one.
    def test_retain_handling_0(self):
        self.retain("rh0/t", b"r0")
        c = self.paho("rh0", 5)
        c.subscribe("rh0/t", 1, rh=0)
        self.assertEqual(c.wait_messages(1)[0].payload, b"r0")
        c.subscribe("rh0/t", 1, rh=0)
        self.assertEqual(c.wait_messages(1)[0].payload, b"r0")

    # 5.0 [MQTT5-3.3.1-10]: Retain Handling 1 sends retained messages only if
    # the subscription did not exist.
    def test_retain_handling_1(self):
        self.retain("rh1/t", b"r1")
        c = self.paho("rh1", 5)
        c.subscribe("rh1/t", 1, rh=1)
        self.assertEqual(c.wait_messages(1)[0].payload, b"r1")
        c.subscribe("rh1/t", 1, rh=1)
        c.expect_no_message()

    # 5.0 [MQTT5-3.3.1-11]: Retain Handling 2 never sends retained messages,
    # but live messages still flow.
    def test_retain_handling_2(self):
        pub = self.retain("rh2/t", b"r2")
        c = self.paho("rh2", 5)
        c.subscribe("rh2/t", 1, rh=2)
        c.expect_no_message()
        pub.publish("rh2/t", b"live", qos=1)
        m = c.wait_messages(1)[0]
        self.assertEqual(m.payload, b"live")

    # 5.0 [MQTT5-3.3.1-12]/[MQTT5-3.3.1-13]: Retain As Published 1 keeps the
    # publisher's RETAIN flag on forwarding; 0 clears it.
    def test_retain_as_published(self):
        rap1 = self.paho("rap1", 5)
        rap1.subscribe("rap/t", 1, rap=True)
        rap0 = self.paho("rap0", 5)
        rap0.subscribe("rap/t", 1, rap=False)
        pub = self.paho("rappub", 5)
        pub.publish("rap/t", b"retained", qos=1, retain=True)
        pub.publish("rap/t", b"plain", qos=1, retain=False)
        got1 = rap1.wait_messages(2)
        got0 = rap0.wait_messages(2)
        self.assertEqual([(m.payload, m.retain) for m in got1], [(b"retained", True), (b"plain", False)])
        self.assertEqual([(m.payload, m.retain) for m in got0], [(b"retained", False), (b"plain", False)])

    # 5.0 3.3.1.3: retained messages sent because of a new subscription have
    # RETAIN=1 whatever Retain As Published says.
    def test_retained_on_subscribe_with_rap0(self):
        self.retain("rap0/t", b"stored")
        c = self.paho("rap0sub", 5)
        c.subscribe("rap0/t", 1, rap=False)
        self.assertTrue(c.wait_messages(1)[0].retain)

    # 5.0 [MQTT5-3.8.3-3]: No Local: messages are not forwarded to the
    # connection (client id) that published them; other subscribers get them.
    def test_no_local(self):
        nl = self.paho("nolocal", 5)
        nl.subscribe("nl/t", 1, no_local=True)
        nl.subscribe("nl/other", 1)
        obs = self.paho("nlobs", 5)
        obs.subscribe("nl/t", 1)
        nl.publish("nl/t", b"mine-1", qos=1)
        nl.publish("nl/t", b"mine-2", qos=2)
        self.assertEqual([m.payload for m in obs.wait_messages(2)], [b"mine-1", b"mine-2"])
        other = self.paho("nlother", 5)
        other.publish("nl/t", b"theirs", qos=1)
        m = nl.wait_messages(1)[0]
        self.assertEqual(m.payload, b"theirs", "No Local subscriber got its own message")
        # Without No Local, an own message comes back.
        nl.publish("nl/other", b"echo", qos=1)
        self.assertEqual(nl.wait_messages(1)[0].payload, b"echo")
        nl.expect_no_message(0.3)

    # 5.0 [MQTT5-3.3.2-17]/[MQTT5-3.3.2-18]/[MQTT5-3.3.2-20]: properties of a
    # retained message are kept and sent when it is delivered on subscribe.
    def test_retained_properties_kept(self):
        ups = [("k1", "v1"), ("k2", "v2"), ("k1", "v3")]
        self.retain("rprop/t", b"p", props={"UserProperty": ups, "ContentType": "text/x-test",
                                            "PayloadFormatIndicator": 1})
        c = self.paho("rpropsub", 5)
        c.subscribe("rprop/t", 1)
        m = c.wait_messages(1)[0]
        self.assertEqual(m.props.get("UserProperty"), ups)
        self.assertEqual(m.props.get("ContentType"), "text/x-test")
        self.assertEqual(m.props.get("PayloadFormatIndicator"), 1)


if __name__ == "__main__":
    nmq.main()
