#!/usr/bin/python3
"""13: session takeover: a second connection with the same client id."""

import threading

import nmq
from nmq import PUBLISH, BrokerTestCase


class TakeoverTests(BrokerTestCase):

    def expect_taken_over(self, old, msg):
        """old must be closed; a v5 connection first gets DISCONNECT 0x8E.
        (mosquitto 2.0.11 closes without the DISCONNECT; accepted only from
        mosquitto.)"""
        return self.assert_closed(old, v5_codes=(0x8E,), msg=msg, mosq_plain_close=True)

    # 3.1.1 [MQTT-3.1.4-2]: the existing client is disconnected; 5.0
    # [MQTT5-3.1.4-3]: it first gets DISCONNECT 0x8E (Session taken over).
    # The new connection is accepted (3.1.1 [MQTT-3.1.4-4] / 5.0
    # [MQTT5-3.1.4-5]).  All four version combinations.
    def test_takeover_closes_old_connection(self):
        for old_v in (4, 5):
            for new_v in (4, 5):
                with self.subTest(old=old_v, new=new_v):
                    cid = "same-%d%d" % (old_v, new_v)
                    a = self.raw(old_v, cid)
                    b = self.raw(new_v)
                    self.assertEqual(b.connect(cid).rc, 0)
                    self.expect_taken_over(a, "v%d taken over by v%d" % (old_v, new_v))
                    b.pingreq()
                    b.expect(nmq.PINGRESP)

    # The same with paho clients: the first one sees its connection end (5.0:
    # with reason 0x8E).
    def test_takeover_paho(self):
        for v in (4, 5):
            with self.subTest(version=v):
                a = self.paho("pahodup%d" % v, v)
                b = self.paho("pahodup%d" % v, v)
                self.assertTrue(a.wait_disconnected(5), "first paho client not disconnected")
                if v == 5 and not nmq.USE_MOSQUITTO:
                    self.assertEqual(a.disconnect_rc, 0x8E)
                self.assertFalse(b.disconnected.is_set())

    # 3.1.1 [MQTT-3.1.2-4]/[MQTT-3.2.2-2] / 5.0 [MQTT5-3.1.2-5]/[MQTT5-3.2.2-3]:
    # taking over a persistent session (Clean 0) resumes it: Session Present
    # 1 and the subscriptions keep delivering to the new connection.
    def test_takeover_resumes_session(self):
        for v in (4, 5):
            with self.subTest(version=v):
                kw = {"clean": False}
                if v == 5:
                    kw["props"] = {"SessionExpiryInterval": 60}
                cid = "resume%d" % v
                a = self.raw(v)
                a.connect(cid, **kw)
                a.subscribe([("to/%d" % v, 1)])
                b = self.raw(v)
                ack = b.connect(cid, **kw)
                self.assertTrue(ack.session_present)
                self.expect_taken_over(a, "resume v%d" % v)
                pub = self.paho("topub%d" % v, v)
                pub.publish("to/%d" % v, b"for-b", qos=1)
                self.assertEqual(b.expect(PUBLISH).payload, b"for-b")

    # 3.1.1 [MQTT-3.1.2-6] / 5.0 [MQTT5-3.1.2-4]: taking over with Clean 1
    # discards the old session (no subscriptions, Session Present 0).
    def test_takeover_with_clean_discards(self):
        for v in (4, 5):
            with self.subTest(version=v):
                cid = "cleanto%d" % v
                a = self.raw(v)
                kw = {"clean": False, "props": {"SessionExpiryInterval": 60}} if v == 5 else {"clean": False}
                a.connect(cid, **kw)
                a.subscribe([("tc/%d" % v, 1)])
                b = self.raw(v)
                ack = b.connect(cid, clean=True)
                self.assertFalse(ack.session_present)
                self.expect_taken_over(a, "clean takeover v%d" % v)
                pub = self.paho("tcpub%d" % v, v)
                pub.publish("tc/%d" % v, b"x", qos=1)
                b.expect_nothing(nmq.T_QUIET, types=(PUBLISH,))

    # 3.1.1 [MQTT-4.4.0-1] / 5.0 [MQTT5-4.4.0-1]: a QoS 1 message in flight to
    # the old connection is resent (DUP=1, same identifier) to the new one.
    def test_takeover_resends_inflight(self):
        for v in (4, 5):
            with self.subTest(version=v):
                kw = {"clean": False, "props": {"SessionExpiryInterval": 60}} if v == 5 else {"clean": False}
                cid = "inflight%d" % v
                a = self.raw(v)
                a.connect(cid, **kw)
                a.subscribe([("if/%d" % v, 1)])
                pub = self.paho("ifpub%d" % v, v)
                pub.publish("if/%d" % v, b"pending", qos=1)
                p = a.expect(PUBLISH)  # not acknowledged
                b = self.raw(v)
                self.assertTrue(b.connect(cid, **kw).session_present)
                again = b.expect(PUBLISH)
                self.assertEqual((again.payload, again.pid, again.dup), (b"pending", p.pid, True))
                b.ack(again)

    # 3.1.1 [MQTT-3.1.2-8] / 5.0 [MQTT5-3.1.2-8]: the old connection ends
    # without DISCONNECT, so its will is published (5.0: no Will Delay here).
    def test_takeover_publishes_old_will(self):
        obs = self.paho("toobs", 4)
        obs.subscribe("tw/#", 1)
        for v in (4, 5):
            with self.subTest(version=v):
                a = self.raw(v)
                a.connect("willto%d" % v, will={"topic": "tw/%d" % v, "payload": b"old-will", "qos": 1})
                b = self.raw(v)
                b.connect("willto%d" % v)
                self.expect_taken_over(a, "will takeover v%d" % v)
                m = obs.wait_message(5)
                self.assertIsNotNone(m, "v%d: the old connection's will was not published" % v)
                self.assertEqual((m.topic, m.payload), ("tw/%d" % v, b"old-will"))

    # 5.0 [MQTT5-3.1.3-9]: with a Will Delay Interval, a takeover that resumes
    # the session (Clean Start 0) is a new connection to the session before
    # the delay has passed: the will is not sent.
    def test_takeover_with_will_delay_suppresses_will(self):
        obs = self.paho("delayobs", 5)
        obs.subscribe("twd/#", 1)
        a = self.raw(5)
        a.connect("delayto", clean=False, props={"SessionExpiryInterval": 60},
                  will={"topic": "twd/x", "payload": b"no", "qos": 1, "props": {"WillDelayInterval": 2}})
        b = self.raw(5)
        self.assertTrue(b.connect("delayto", clean=False, props={"SessionExpiryInterval": 60}).session_present)
        self.expect_taken_over(a, "takeover with will delay")
        obs.expect_no_message(3.0)

    # Twenty takeovers in a row: every earlier connection is closed, the last
    # one works, the broker is healthy.
    def test_takeover_chain(self):
        by = self.bystander(4)
        conns = []
        for i in range(20):
            v = 4 + (i % 2)
            r = self.raw(v)
            self.assertEqual(r.connect("chain", clean=(i % 3 == 0)).rc, 0)
            conns.append(r)
        for i, r in enumerate(conns[:-1]):
            self.expect_taken_over(r, "chain #%d" % i)
        last = conns[-1]
        last.subscribe([("chain/t", 1)])
        pub = self.paho("chainpub", 4)
        pub.publish("chain/t", b"last", qos=1)
        self.assertEqual(last.expect(PUBLISH).payload, b"last")
        self.assert_broker_healthy(by)

    # Many connections with the same client id at the same time (threads):
    # afterwards exactly one of the accepted ones is still open.
    def test_concurrent_same_id(self):
        by = self.bystander(4)
        results = []
        lock = threading.Lock()

        def go(i):
            r = nmq.RawClient(self.port, 4 + (i % 2))
            try:
                ack = r.connect("racer", timeout=10)
                with lock:
                    results.append((r, ack.rc))
            except Exception:
                r.close()

        threads = [threading.Thread(target=go, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r, _ in results:
            self._track(r)
        accepted = [r for r, rc in results if rc == 0]
        self.assertTrue(accepted, "no connection accepted")
        open_ones = [r for r in accepted if r.is_open(1.0)]
        self.assertEqual(len(open_ones), 1, "%d connections with the same id stayed open" % len(open_ones))
        self.assert_broker_healthy(by)


if __name__ == "__main__":
    nmq.main()
