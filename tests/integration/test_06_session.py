#!/usr/bin/python3
"""06: sessions: clean session / clean start, persistent sessions keeping
subscriptions and queueing QoS 1/2 messages, Session Present, MQTT 5
Session Expiry Interval, the per-client queue bound."""

import time

import nmq
from nmq import PUBLISH, BrokerTestCase


class SessionCommon:
    V = 4

    def pkw(self, expiry=300):
        """CONNECT keyword arguments for a persistent session."""
        if self.V == 5:
            return {"clean": False, "props": {"SessionExpiryInterval": expiry}}
        return {"clean": False}

    def persistent_subscriber(self, cid, flt, qos=2):
        r = self.raw(self.V)
        ack = r.connect(cid, **self.pkw())
        self.assertEqual(ack.rc, 0)
        r.subscribe([(flt, qos)])
        r.disconnect()
        r.expect_closed()
        return r

    # 3.1.1 [MQTT-3.1.2-4]/[MQTT-3.1.2-5]/[MQTT-3.2.2-2], 5.0
    # [MQTT5-3.1.2-5]/[MQTT5-3.1.2-23]/[MQTT5-3.2.2-3]/[MQTT5-4.5.0-1]: a
    # persistent session keeps its subscriptions and stores QoS 1 and 2
    # messages while the client is away; on return Session Present is 1 and
    # the messages arrive, in order per QoS.
    def test_persistent_session_queues_qos1_qos2(self):
        self.persistent_subscriber("keeper", "ps/#", 2)
        pub = self.paho("pspub", self.V)
        for i in range(5):
            pub.publish("ps/q1", b"one-%d" % i, qos=1)
            pub.publish("ps/q2", b"two-%d" % i, qos=2)
        r = self.raw(self.V)
        ack = r.connect("keeper", **self.pkw())
        self.assertEqual(ack.rc, 0)
        self.assertTrue(ack.session_present, "Session Present 0 for a stored session")
        got = r.expect_publishes(10, ack=True)
        q1 = [p.payload for p in got if p.topic == "ps/q1"]
        q2 = [p.payload for p in got if p.topic == "ps/q2"]
        self.assertEqual(q1, [b"one-%d" % i for i in range(5)])
        self.assertEqual(q2, [b"two-%d" % i for i in range(5)])
        for p in got:
            self.assertEqual(p.qos, 1 if p.topic == "ps/q1" else 2)
        # The subscription itself is still there for live messages.
        pub.publish("ps/q1", b"live", qos=1)
        p = r.expect(PUBLISH)
        self.assertEqual(p.payload, b"live")

    # 3.1.1 [MQTT-4.6.0-6] / 5.0 [MQTT5-4.6.0-5]: messages queued while away
    # come before messages published after the return (same topic, QoS and
    # publisher).
    def test_queued_before_live(self):
        self.persistent_subscriber("ordered", "ql/t", 1)
        pub = self.paho("qlpub", self.V)
        for i in range(5):
            pub.publish("ql/t", b"%02d" % i, qos=1)
        r = self.raw(self.V)
        r.send_connect("ordered", **self.pkw())
        for i in range(5, 10):
            pub.publish("ql/t", b"%02d" % i, qos=1)
        self.assertTrue(r.expect(nmq.CONNACK).session_present)
        got = r.expect_publishes(10, ack=True)
        self.assertEqual([p.payload for p in got], [b"%02d" % i for i in range(10)])

    # 3.1.1 [MQTT-3.2.2-3] / 5.0 [MQTT5-3.2.2-3]: Clean Session/Start 0 with no
    # stored session -> Session Present 0.
    def test_new_persistent_session_present_0(self):
        r = self.raw(self.V)
        ack = r.connect("fresh-persistent", **self.pkw())
        self.assertEqual(ack.rc, 0)
        self.assertFalse(ack.session_present)

    # 3.1.1 [MQTT-3.1.2-6]/[MQTT-3.1.4-3] / 5.0 [MQTT5-3.1.2-4]: Clean Session/Start 1
    # discards the stored session: no queued messages, no subscriptions,
    # and the state is not reused afterwards.
    def test_clean_discards_session(self):
        self.persistent_subscriber("discard", "cd/t", 1)
        pub = self.paho("cdpub", self.V)
        pub.publish("cd/t", b"queued", qos=1)
        r = self.raw(self.V)
        ack = r.connect("discard", clean=True)
        self.assertFalse(ack.session_present)
        pub.publish("cd/t", b"after-clean", qos=1)
        r.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))
        r.disconnect()
        r.expect_closed()
        r2 = self.raw(self.V)
        ack2 = r2.connect("discard", **self.pkw())
        self.assertFalse(ack2.session_present, "a discarded session came back")
        r2.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # 3.1.1 [MQTT-3.1.2-6] / 5.0 3.1.2.11.2: a clean session lasts as long
    # as the connection: nothing is kept for a later Clean Session 0 connect.
    def test_clean_session_not_kept(self):
        r = self.raw(self.V)
        r.connect("ephemeral", clean=True)
        r.subscribe([("eph/t", 1)])
        r.disconnect()
        r.expect_closed()
        pub = self.paho("ephpub", self.V)
        pub.publish("eph/t", b"nobody", qos=1)
        r2 = self.raw(self.V)
        ack = r2.connect("ephemeral", **self.pkw())
        self.assertFalse(ack.session_present)
        r2.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # Our design: sessions are keyed by the full client id (3.1.1
    # [MQTT-3.1.3-2] / 5.0 [MQTT5-3.1.3-2]): long ids that differ only at the
    # end are different sessions, connected side by side.
    def test_long_client_ids_distinct(self):
        base = "x" * 180
        a = self.raw(self.V, base + "a")
        b = self.raw(self.V, base + "b")
        self.assertTrue(a.is_open(0.3))
        self.assertTrue(b.is_open(0.1))
        a.subscribe([("long/a", 1)])
        b.subscribe([("long/b", 1)])
        pub = self.paho("longpub", self.V)
        pub.publish("long/a", b"A", qos=1)
        pub.publish("long/b", b"B", qos=1)
        self.assertEqual(a.expect(PUBLISH).payload, b"A")
        self.assertEqual(b.expect(PUBLISH).payload, b"B")

    # 3.1.1 [MQTT-3.1.2-5] / 5.0 [MQTT5-4.5.0-1] with our bound
    # mqtt.max_mqueue_len = 10 (docs/compatibility.md §2: when the limit is reached the NEW
    # message is dropped for that client): an offline session receives the
    # first 10 of 25 QoS 1 messages, and normal delivery resumes afterwards.
    def test_offline_queue_bound(self):
        self.persistent_subscriber("bounded", "qb/t", 1)
        pub = self.paho("qbpub", self.V)
        for i in range(25):
            pub.publish("qb/t", b"%02d" % i, qos=1)
        r = self.raw(self.V)
        ack = r.connect("bounded", **self.pkw())
        self.assertTrue(ack.session_present)
        got = []
        try:
            while True:
                p = r.expect(PUBLISH, 1.5)
                got.append(p.payload)
                r.ack(p)
        except nmq.RecvTimeout:
            pass
        self.assertEqual(got, [b"%02d" % i for i in range(10)],
                         "expected exactly the first 10 queued messages")
        pub.publish("qb/t", b"after", qos=1)
        p = r.expect(PUBLISH)
        self.assertEqual(p.payload, b"after")


class TestSessionV311(SessionCommon, BrokerTestCase):
    V = 4
    CONF = "mqtt { max_mqueue_len = 10 }"
    MOSQ_CONF = "max_queued_messages 10"


class TestSessionV5(SessionCommon, BrokerTestCase):
    V = 5
    CONF = "mqtt { max_mqueue_len = 10 }"
    MOSQ_CONF = "max_queued_messages 10"

    # 5.0 [MQTT5-3.1.2-23]/[MQTT5-4.1.0-2]/[MQTT5-3.2.2-3]: a session with Session
    # Expiry Interval 2 s is kept while the interval runs (Session Present 1,
    # queued messages delivered) and is gone after it (Session Present 0,
    # nothing delivered).
    def test_session_expiry(self):
        pub = self.paho("sepub", 5)
        for cid, wait, present in (("within", 0.3, True), ("expired", 3.5, False)):
            with self.subTest(case=cid):
                r = self.raw(5)
                r.connect(cid, clean=False, props={"SessionExpiryInterval": 2})
                r.subscribe([("se/%s" % cid, 1)])
                r.disconnect()
                r.expect_closed()
                pub.publish("se/%s" % cid, b"stored", qos=1)
                time.sleep(wait)  # the expiry timer is what is under test
                r2 = self.raw(5)
                ack = r2.connect(cid, clean=False, props={"SessionExpiryInterval": 2})
                self.assertEqual(ack.session_present, present)
                if present:
                    self.assertEqual(r2.expect(PUBLISH).payload, b"stored")
                else:
                    r2.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # 5.0 3.1.2.11.2: Session Expiry Interval absent = 0: the session ends
    # with the connection, even with Clean Start 0.
    # [MQTT5-4.1.0-2]/[MQTT5-3.2.2-3].
    def test_session_expiry_absent_means_zero(self):
        r = self.raw(5)
        r.connect("noexpiry", clean=False)
        r.subscribe([("ne/t", 1)])
        r.disconnect()
        r.expect_closed()
        r2 = self.raw(5)
        ack = r2.connect("noexpiry", clean=False)
        self.assertFalse(ack.session_present)

    # 5.0 3.14.2.2.2: the Session Expiry Interval sent on DISCONNECT replaces
    # the one from CONNECT; 0 ends the session at the disconnect.
    # [MQTT5-4.1.0-2].
    def test_disconnect_sets_session_expiry_zero(self):
        r = self.raw(5)
        r.connect("shorten", clean=False, props={"SessionExpiryInterval": 300})
        r.subscribe([("sh/t", 1)])
        r.disconnect(rc=0, props={"SessionExpiryInterval": 0})
        r.expect_closed()
        r2 = self.raw(5)
        ack = r2.connect("shorten", clean=False, props={"SessionExpiryInterval": 300})
        self.assertFalse(ack.session_present)

    # 5.0 3.14.2.2.2: a non-zero Session Expiry Interval on DISCONNECT after
    # a CONNECT with 0 is a Protocol Error: the broker answers DISCONNECT
    # 0x82 (or closes) and the session does not survive.
    # [MQTT5-4.13.1-1].
    def test_disconnect_cannot_raise_zero_expiry(self):
        r = self.raw(5)
        r.connect("raise", clean=False)
        r.disconnect(rc=0, props={"SessionExpiryInterval": 60})
        pkts = r.expect_closed()
        for p in pkts:
            self.assertEqual(p.type, nmq.DISCONNECT)
            self.assertEqual(p.rc, 0x82)
        r2 = self.raw(5)
        ack = r2.connect("raise", clean=False)
        self.assertFalse(ack.session_present)

    # 5.0 [MQTT5-3.1.2-4]: Clean Start 1 discards a stored session even when
    # it had a long expiry.
    def test_clean_start_discards_long_session(self):
        r = self.raw(5)
        r.connect("long", clean=False, props={"SessionExpiryInterval": 3600})
        r.subscribe([("lg/t", 1)])
        r.disconnect()
        r.expect_closed()
        r2 = self.raw(5)
        ack = r2.connect("long", clean=True, props={"SessionExpiryInterval": 3600})
        self.assertFalse(ack.session_present)
        pub = self.paho("lgpub", 5)
        pub.publish("lg/t", b"x", qos=1)
        r2.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))


if __name__ == "__main__":
    nmq.main()
