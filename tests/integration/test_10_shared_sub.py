#!/usr/bin/python3
"""10: shared subscriptions ($share/<group>/<filter>), MQTT 5.0 section 4.8.2;
also offered to 3.1.1 clients (an extension that NanoMQ and mosquitto
both provide)."""

import time

import nmq
from nmq import SUBACK, BrokerTestCase, skip_on_mosquitto


class SharedCommon:
    V = 4

    def members(self, n, flt="$share/g/sh/t", qos=1, prefix="m"):
        out = []
        for i in range(n):
            c = self.paho("%s%d" % (prefix, i), self.V)
            self.assertEqual(c.subscribe(flt, qos), [qos])
            out.append(c)
        return out

    def drain(self, clients, total, timeout=8):
        """Wait until `total` messages arrived across clients; then a quiet
        window for extra (duplicate) deliveries."""
        deadline = time.monotonic() + timeout
        while sum(len(c.received) for c in clients) < total and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(nmq.T_QUIET)
        return [[m.payload for m in c.received] for c in clients]

    # 5.0 4.8.2: each message matching a shared subscription is sent to only
    # one session of the share group; none is lost; the load is spread
    # (each of 2 members gets at least a quarter of 40 messages).
    def test_each_message_to_one_member(self):
        ms = self.members(2)
        pub = self.paho("shpub", self.V)
        n = 40
        for i in range(n):
            pub.publish("sh/t", b"%02d" % i, qos=1)
        got = self.drain(ms, n)
        allp = sorted(got[0] + got[1])
        self.assertEqual(allp, sorted(b"%02d" % i for i in range(n)),
                         "lost or duplicated messages: %r" % got)
        for i, g in enumerate(got):
            self.assertGreaterEqual(len(g), n // 4, "member %d got only %d of %d" % (i, len(g), n))

    # Same with three members (mixed protocol versions are in their own test).
    def test_three_members_fair(self):
        ms = self.members(3)
        pub = self.paho("shpub3", self.V)
        n = 60
        for i in range(n):
            pub.publish("sh/t", b"%02d" % i, qos=1)
        got = self.drain(ms, n)
        self.assertEqual(sorted(sum(got, [])), sorted(b"%02d" % i for i in range(n)))
        for i, g in enumerate(got):
            self.assertGreaterEqual(len(g), n // 6, "member %d got %d of %d" % (i, len(g), n))

    # 5.0 4.8.2: a member that left (disconnected, clean session) no longer
    # receives; every message goes to the remaining member.
    def test_disconnected_member_skipped(self):
        a, b = self.members(2)
        b.disconnect()
        pub = self.paho("shpub-skip", self.V)
        for i in range(10):
            pub.publish("sh/t", b"%d" % i, qos=1)
        got = a.wait_messages(10)
        self.assertEqual([m.payload for m in got], [b"%d" % i for i in range(10)])
        a.expect_no_message(0.3)

    # A member whose connection drops without DISCONNECT is skipped as well.
    def test_killed_member_skipped(self):
        a, b = self.members(2)
        b.kill()
        # The broker must have seen the reset: it logs the end of m1's
        # connection (mosquitto's log differs: a pause there).
        if nmq.USE_MOSQUITTO:
            time.sleep(0.5)
        else:
            self.broker.wait_disconnected("m1")
        pub = self.paho("shpub-kill", self.V)
        for i in range(10):
            pub.publish("sh/t", b"%d" % i, qos=1)
        self.assertEqual(len(a.wait_messages(10)), 10)

    # 5.0 4.8.2: different share groups, and non-shared subscriptions, each
    # receive every message once.
    def test_groups_and_plain_subscribers_each_get_all(self):
        g1 = self.members(2, "$share/g1/sh/#", prefix="g1-")
        g2 = self.members(2, "$share/g2/sh/#", prefix="g2-")
        plain = self.paho("plain", self.V)
        plain.subscribe("sh/#", 1)
        pub = self.paho("shpub-groups", self.V)
        n = 20
        for i in range(n):
            pub.publish("sh/x/%d" % i, b"%d" % i, qos=1)
        want = sorted(b"%d" % i for i in range(n))
        self.assertEqual(sorted(sum(self.drain(g1, n), [])), want)
        self.assertEqual(sorted(sum(self.drain(g2, n), [])), want)
        self.assertEqual(sorted(m.payload for m in plain.wait_messages(n)), want)

    # 5.0 [MQTT5-4.8.2-3]: the granted QoS of the member that gets a message
    # is respected.
    def test_member_qos_respected(self):
        m0 = self.members(1, qos=0, prefix="q0-")[0]
        m2 = self.members(1, qos=2, prefix="q2-")[0]
        pub = self.paho("shpub-qos", self.V)
        for i in range(20):
            pub.publish("sh/t", b"%d" % i, qos=2)
        self.drain([m0, m2], 20)
        self.assertEqual(len(m0.received) + len(m2.received), 20)
        self.assertTrue(all(m.qos == 0 for m in m0.received))
        self.assertTrue(all(m.qos == 2 for m in m2.received))

    # [MQTT5-4.8.2-1]/[MQTT5-4.8.2-2] (5.0): "$share/" needs a non-empty share
    # name without '/', '+', '#', followed by '/' and a filter.  Invalid
    # forms are not granted (SUBACK >= 0x80) or the connection is closed.
    def test_invalid_share_names(self):
        bad = ["$share/g+/t", "$share/#/t"]
        if not nmq.USE_MOSQUITTO:
            # mosquitto 2.0.11 grants these three as ordinary filters.
            bad += ["$share/g", "$share//t", "$share/g/"]
        for flt in bad:
            with self.subTest(filter=flt):
                r = self.raw(self.V, "badshare")
                r.send(nmq.subscribe_bytes([(flt, 1)], 3, version=self.V))
                try:
                    p = r.read(nmq.T_ACK)
                except nmq.ConnectionClosed:
                    continue
                if p.type == SUBACK:
                    self.assertGreaterEqual(p.codes[0], 0x80, "%r was granted" % flt)
                else:
                    self.assertEqual(p.type, nmq.DISCONNECT, p)
                r.close()

    # 5.0 [MQTT5-3.10.4-1]: unsubscribing "$share/g/sh/t" ends that membership.
    def test_unsubscribe_shared(self):
        a, b = self.members(2)
        b.unsubscribe("$share/g/sh/t")
        pub = self.paho("shpub-unsub", self.V)
        for i in range(8):
            pub.publish("sh/t", b"%d" % i, qos=1)
        self.assertEqual(len(a.wait_messages(8)), 8)
        b.expect_no_message(0.3)


class TestSharedV311(SharedCommon, BrokerTestCase):
    V = 4


class TestSharedV5(SharedCommon, BrokerTestCase):
    V = 5

    # 5.0 [MQTT5-3.8.3-4]: No Local on a shared subscription is a Protocol
    # Error (DISCONNECT 0x82).
    @skip_on_mosquitto("mosquitto 2.0.11 grants No Local on a shared subscription")
    def test_no_local_on_shared_is_protocol_error(self):
        r = self.raw(5, "nlshare")
        r.send(nmq.subscribe_bytes([("$share/g/sh/t", nmq.sub_opts(1, no_local=True))], 2, version=5))
        self.assert_closed(r, v5_codes=(0x82,), msg="No Local on $share")

    # 5.0 3.3.1.3: "When a new Non-shared Subscription is made, the last
    # retained message ... is sent": retained messages are sent for new
    # non-shared subscriptions only, so a shared subscription gets none.
    @skip_on_mosquitto("mosquitto 2.0.11 sends retained messages to a new shared subscription")
    def test_no_retained_on_shared_subscribe(self):
        pub = self.paho("retpub", 5)
        pub.publish("sh/t", b"retained", qos=1, retain=True)
        m = self.members(1)[0]
        m.expect_no_message()

    # Mixed protocol versions in one share group still get one copy each.
    def test_mixed_version_group(self):
        a = self.paho("mix5", 5)
        a.subscribe("$share/mix/sh/t", 1)
        b = self.paho("mix3", 4)
        b.subscribe("$share/mix/sh/t", 1)
        pub = self.paho("mixpub", 5)
        for i in range(20):
            pub.publish("sh/t", b"%02d" % i, qos=1)
        got = self.drain([a, b], 20)
        self.assertEqual(sorted(got[0] + got[1]), sorted(b"%02d" % i for i in range(20)))
        self.assertTrue(got[0] and got[1], "one member got nothing: %r" % got)


if __name__ == "__main__":
    nmq.main()
