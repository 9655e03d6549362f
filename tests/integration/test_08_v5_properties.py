#!/usr/bin/python3
"""08: MQTT 5 properties: forwarding of user properties, response topic,
correlation data, content type and payload format; message expiry;
subscription identifiers; CONNACK properties; mixed 3.1.1/5.0 delivery."""

import time

import nmq
from nmq import PUBLISH, BrokerTestCase


class V5PropertyTests(BrokerTestCase):
    CONF = "mqtt { max_topic_alias = 7, max_awaiting_rel = 33, max_packet_size = 64KB }"
    MOSQ_CONF = "max_topic_alias 7\nmax_inflight_messages 33\nmax_packet_size 65536"

    # 5.0 [MQTT5-3.3.2-17]/[MQTT5-3.3.2-18]: all User Properties are forwarded
    # unaltered and in order (repeated keys and non-ASCII text included).
    def test_user_properties_forwarded_in_order(self):
        sub = self.paho("upsub", 5)
        sub.subscribe("up/t", 1)
        ups = [("b", "1"), ("a", "2"), ("b", "3"), ("k\u00e9y", "v\u00e4l\u00fce"), ("empty", "")]
        pub = self.paho("uppub", 5)
        pub.publish("up/t", b"x", qos=1, props={"UserProperty": ups})
        m = sub.wait_messages(1)[0]
        self.assertEqual(m.props.get("UserProperty"), ups)

    # 5.0 [MQTT5-3.3.2-15]/[MQTT5-3.3.2-16]/[MQTT5-3.3.2-20]/[MQTT5-3.3.2-4]:
    # Response Topic, Correlation Data, Content Type and Payload Format
    # Indicator reach every subscriber unaltered (raw check of the wire).
    def test_publish_properties_forwarded(self):
        subs = [self.raw(5, "pf%d" % i) for i in range(2)]
        for s in subs:
            s.subscribe([("pf/t", 1)])
        props = {"ResponseTopic": "pf/reply/\u00fc", "CorrelationData": bytes(range(256)),
                 "ContentType": "application/octet-stream; x=1", "PayloadFormatIndicator": 0}
        pub = self.raw(5, "pfpub")
        pub.publish("pf/t", b"\xff\xfe", qos=1, props=props)
        for s in subs:
            p = s.expect(PUBLISH)
            for k, v in props.items():
                self.assertEqual(p.props.get(k), v, "%s altered" % k)
        pub.publish("pf/t", "utf8 text".encode(), qos=0, props={"PayloadFormatIndicator": 1})
        for s in subs:
            self.assertEqual(s.expect(PUBLISH).props.get("PayloadFormatIndicator"), 1)

    # 5.0 4.10 request / response: a responder uses the Response Topic and
    # Correlation Data it received to answer; the requester gets the answer
    # with its Correlation Data ([MQTT5-3.3.2-15]/[MQTT5-3.3.2-16]).
    def test_request_response_roundtrip(self):
        responder = self.paho("responder", 5)
        responder.subscribe("svc/req", 1)
        requester = self.paho("requester", 5)
        requester.subscribe("svc/resp/requester", 1)
        requester.publish("svc/req", b"ping", qos=1,
                          props={"ResponseTopic": "svc/resp/requester", "CorrelationData": b"id-42"})
        req = responder.wait_messages(1)[0]
        responder.publish(req.props["ResponseTopic"], b"pong", qos=1,
                          props={"CorrelationData": req.props["CorrelationData"]})
        resp = requester.wait_messages(1)[0]
        self.assertEqual((resp.payload, resp.props.get("CorrelationData")), (b"pong", b"id-42"))

    # 5.0 [MQTT5-3.3.2-6]: the Message Expiry Interval forwarded is the
    # received value minus the time waited in the server (online: ~0 s).
    def test_message_expiry_forwarded(self):
        sub = self.raw(5, "mesub")
        sub.subscribe([("me/t", 1)])
        pub = self.paho("mepub", 5)
        pub.publish("me/t", b"e", qos=1, props={"MessageExpiryInterval": 120})
        pub.publish("me/t", b"n", qos=1)
        p1, p2 = sub.expect_publishes(2, ack=True)
        self.assertTrue(118 <= p1.props.get("MessageExpiryInterval", -1) <= 120, p1)
        self.assertNotIn("MessageExpiryInterval", p2.props)

    # 5.0 [MQTT5-3.3.2-5]/[MQTT5-3.3.2-6]: messages queued for an offline
    # session that expire before delivery are deleted; the others are sent
    # with the remaining interval.
    def test_expired_messages_not_delivered_to_queued_session(self):
        r = self.raw(5)
        r.connect("expq", clean=False, props={"SessionExpiryInterval": 60})
        r.subscribe([("eq/t", 1)])
        r.disconnect()
        r.expect_closed()
        pub = self.paho("eqpub", 5)
        pub.publish("eq/t", b"short", qos=1, props={"MessageExpiryInterval": 1})
        pub.publish("eq/t", b"long", qos=1, props={"MessageExpiryInterval": 30})
        pub.publish("eq/t", b"forever", qos=1)
        time.sleep(2.5)  # let the 1 s message expire in the queue
        r2 = self.raw(5)
        ack = r2.connect("expq", clean=False, props={"SessionExpiryInterval": 60})
        self.assertTrue(ack.session_present)
        got = r2.expect_publishes(2, ack=True)
        self.assertEqual([p.payload for p in got], [b"long", b"forever"])
        left = got[0].props.get("MessageExpiryInterval")
        self.assertIsNotNone(left)
        self.assertTrue(25 <= left <= 28, "remaining expiry %s, expected 30 minus the ~2.5 s waited" % left)
        r2.expect_nothing(0.5, types=(PUBLISH,))

    # 5.0 3.3.2.3.3 and [MQTT5-3.3.2-5]: an expired retained message is not
    # sent to a new subscriber; a live one is sent with its remaining time.
    def test_expired_retained_not_delivered(self):
        pub = self.paho("erpub", 5)
        pub.publish("er/short", b"s", qos=1, retain=True, props={"MessageExpiryInterval": 1})
        pub.publish("er/long", b"l", qos=1, retain=True, props={"MessageExpiryInterval": 60})
        time.sleep(2.2)
        sub = self.paho("ersub", 5)
        sub.subscribe("er/#", 1)
        m = sub.wait_messages(1)[0]
        self.assertEqual(m.topic, "er/long")
        self.assertTrue(55 <= m.props.get("MessageExpiryInterval", -1) <= 58, m)
        sub.expect_no_message()

    # 5.0 [MQTT5-3.3.4-3]/[MQTT5-3.3.4-4]/[MQTT5-3.3.4-5]: the Subscription
    # Identifiers of all matching subscriptions are sent (in one copy, or
    # each in its own copy); a subscription without an identifier adds none.
    def test_subscription_identifiers(self):
        r = self.raw(5, "subid")
        r.subscribe([("si/+", 1)], props={"SubscriptionIdentifier": 7})
        r.subscribe([("si/t", 1)], props={"SubscriptionIdentifier": 268435455})
        r.subscribe([("si/#", 1)])
        pub = self.paho("sipub", 5)
        pub.publish("si/t", b"all", qos=1)
        pub.publish("si/x/y", b"hash-only", qos=1)
        copies = []
        try:
            while True:
                p = r.expect(PUBLISH, 1.0)
                copies.append(p)
                r.ack(p)
        except nmq.RecvTimeout:
            pass
        all_copies = [p for p in copies if p.payload == b"all"]
        hash_only = [p for p in copies if p.payload == b"hash-only"]
        self.assertTrue(1 <= len(all_copies) <= 3, copies)
        ids = sorted(i for p in all_copies for i in p.props.get("SubscriptionIdentifier", []))
        self.assertEqual(ids, [7, 268435455], "identifiers on si/t copies: %r" % all_copies)
        self.assertEqual(len(hash_only), 1)
        self.assertNotIn("SubscriptionIdentifier", hash_only[0].props)

    # 5.0 [MQTT5-3.3.4-3]/[MQTT5-3.3.4-4]: six overlapping subscriptions of
    # one session, with identifiers 1..6: the one copy sent carries all six
    # (more than a queued entry keeps inline), live and after the session
    # was offline (queued, then sent on reconnect).
    def test_six_subscription_identifiers(self):
        filters = ["six/a/b", "six/+/b", "six/a/+", "six/#", "six/a/#", "+/a/b"]
        r = self.raw(5, "six", clean=False, props={"SessionExpiryInterval": 60})
        for i, f in enumerate(filters, 1):
            r.subscribe([(f, 1)], props={"SubscriptionIdentifier": i})
        pub = self.paho("sixpub", 5)
        pub.publish("six/a/b", b"live", qos=1)
        p = r.expect(PUBLISH)
        r.ack(p)
        self.assertEqual(p.payload, b"live")
        self.assertEqual(sorted(p.props.get("SubscriptionIdentifier", [])), [1, 2, 3, 4, 5, 6])
        r.expect_nothing(0.5)
        r.close()
        pub.publish("six/a/b", b"queued", qos=1)
        time.sleep(0.3)
        r = self.raw(5, "six", clean=False, props={"SessionExpiryInterval": 60})
        p = r.expect(PUBLISH)
        r.ack(p)
        self.assertEqual(p.payload, b"queued")
        self.assertEqual(sorted(p.props.get("SubscriptionIdentifier", [])), [1, 2, 3, 4, 5, 6])

    # 5.0 [MQTT5-3.3.4-3] with [MQTT5-3.8.4-3]: retained messages sent on
    # subscribe carry the identifier; replacing the subscription replaces it.
    def test_subscription_identifier_retained_and_replaced(self):
        pub = self.paho("sirpub", 5)
        pub.publish("sir/t", b"kept", qos=1, retain=True)
        r = self.raw(5, "sir")
        r.subscribe([("sir/t", 1)], props={"SubscriptionIdentifier": 11})
        p = r.expect(PUBLISH)
        self.assertEqual(p.props.get("SubscriptionIdentifier"), [11])
        r.ack(p)
        r.subscribe([("sir/t", 1 | 0x20)], props={"SubscriptionIdentifier": 12})  # RH 2
        pub.publish("sir/t", b"live", qos=1)
        p = r.expect(PUBLISH)
        self.assertEqual((p.payload, p.props.get("SubscriptionIdentifier")), (b"live", [12]))

    # Mixed versions: a 5.0 message with properties reaches a 3.1.1
    # subscriber (payload and topic intact); a 3.1.1 message reaches a 5.0
    # subscriber without invented properties.
    def test_cross_version_delivery(self):
        s3 = self.raw(4, "v3sub")
        s3.subscribe([("xv/#", 1)])
        s5 = self.raw(5, "v5sub")
        s5.subscribe([("xv/#", 1)])
        p5 = self.paho("v5pub", 5)
        p5.publish("xv/from5", b"five", qos=1, props={"UserProperty": [("a", "b")],
                                                       "ContentType": "t"})
        p3 = self.paho("v3pub", 4)
        p3.publish("xv/from3", b"three", qos=1)
        got3 = {p.topic: p.payload for p in s3.expect_publishes(2, ack=True)}
        self.assertEqual(got3, {"xv/from5": b"five", "xv/from3": b"three"})
        got5 = {p.topic: p for p in s5.expect_publishes(2, ack=True)}
        self.assertEqual(got5["xv/from5"].props.get("UserProperty"), [("a", "b")])
        self.assertEqual(got5["xv/from3"].props, {})

    # 5.0 3.1.2.11.8 / 3.8.2.1.3: User Properties on CONNECT and SUBSCRIBE
    # are allowed and do not disturb the connection.
    def test_user_properties_on_connect_and_subscribe(self):
        r = self.raw(5)
        ack = r.connect("upconn", props={"UserProperty": [("client", "x"), ("client", "y")]})
        self.assertEqual(ack.rc, 0)
        sa = r.subscribe([("upc/t", 1)], props={"UserProperty": [("s", "1")]})
        self.assertEqual(sa.codes, [1])

    # Our contract (docs/compatibility.md §2, mqtt.*): the CONNACK advertises Topic Alias
    # Maximum = max_topic_alias, Receive Maximum = max_awaiting_rel and
    # Maximum Packet Size = max_packet_size (mosquitto has the same three
    # settings, configured alike here).
    def test_connack_properties_from_config(self):
        r = self.raw(5)
        ack = r.connect("caps")
        self.assertEqual(ack.props.get("TopicAliasMaximum"), 7)
        self.assertEqual(ack.props.get("ReceiveMaximum"), 33)
        self.assertEqual(ack.props.get("MaximumPacketSize"), 65536)
        # Absent Maximum QoS / Retain Available / Wildcard, Subscription
        # Identifier and Shared Subscription Available mean "supported";
        # if present they must say so (these features are all provided).
        for k in ("RetainAvailable", "WildcardSubscriptionAvailable",
                  "SubscriptionIdentifierAvailable", "SharedSubscriptionAvailable"):
            self.assertIn(ack.props.get(k, 1), (1,), "%s = %r" % (k, ack.props.get(k)))
        self.assertIn(ack.props.get("MaximumQoS", 2), (2,))


if __name__ == "__main__":
    nmq.main()
