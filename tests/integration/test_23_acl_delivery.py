#!/usr/bin/python3
"""23: ACL read access at delivery (docs/compatibility.md §2, docs/architecture.md).

A message is delivered to a subscriber only if the ACL lets that client
subscribe to the message's exact topic name, whatever filter matched it.
With the rules below, bob may subscribe to a/# but must not read a/secret.

- Plain subscriptions, MQTT 3.1.1 and 5.0, messages at QoS 0 and 1: bob
  gets a/public but not a/secret; alice gets both; the QoS 1 publisher gets
  its normal PUBACK (the publish itself is allowed); the refusal is logged;
  deny_action = disconnect does not disconnect a subscriber refused a
  delivery.
- Retained messages: a retained a/secret is not sent to bob's new a/#
  subscription; a/public is, and alice gets both.
- Shared subscriptions: a message the pick may not read goes to another
  member of the group that may (bob never gets a/secret, alice gets every
  one of them, a/public is still shared between both, nothing is lost or
  duplicated); a group in which no member may read it does not get it.
- Reload (SIGHUP): removing the deny rule lets bob receive a/secret on his
  existing subscription; adding it back stops that, without resubscribing,
  and also drops the a/secret already queued for his offline session (and
  nothing else).
- A session is resumed only by its user: bob can resume alice's session
  neither live nor offline (CONNACK 0x85 / 0x02), and alice gets what was
  queued for her; a clean start by bob discards her session and gives him
  an empty one.
- no_match = deny: the same results; and a subscription granted only by an
  "@" literal rule ("@lit/#") receives nothing, because a SUBSCRIBE to the
  exact topic (lit/x) would be denied.
"""

import os
import shutil
import signal
import tempfile
import time
import unittest

import nmq
from nmq import PINGRESP, PUBACK, PUBLISH, BrokerTestCase, RecvTimeout

VERSIONS = (4, 5)

DENY_BOB = '{permit = deny, username = "bob", action = subscribe, topics = ["a/secret"]}\n'
REST = """{permit = allow, action = subscribe, topics = ["a/#", "@lit/#"]}
{permit = allow, action = publish}
"""
ACL_WITH_DENY = "rules = [\n" + DENY_BOB + REST + "]\n"
ACL_WITHOUT_DENY = "rules = [\n" + REST + "]\n"

CONF_T = """
auth {
  allow_anonymous = true
  no_match = %s
  deny_action = %s
  password = { alice = "pa", bob = "pb" }
  acl = {include "%s/acl.conf"}
}
"""


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq ACL configuration (HOCON ACL file)")


class DeliveryCase(BrokerTestCase):
    """A broker whose ACL comes from acl.conf in a directory of the test."""

    NO_MATCH = "allow"
    DENY_ACTION = "ignore"
    ACL = ACL_WITH_DENY

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="nmq-t23-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.write_acl(self.ACL)
        self.CONF = CONF_T % (self.NO_MATCH, self.DENY_ACTION, self.dir)
        self.seq = 0
        super().setUp()

    def write_acl(self, text):
        p = os.path.join(self.dir, "acl.conf")
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.replace(p + ".tmp", p)

    def sighup(self, timeout=10.0):
        """SIGHUP the broker and wait until its log says the reload ended."""
        before = self.broker.log_text().count("event=reloaded")
        self.broker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.broker.log_text().count("event=reloaded") > before:
                return
            time.sleep(0.05)
        self.fail("no reload within %.0f s of SIGHUP:\n%s" % (timeout, self.broker.log_tail()))

    # -- clients -------------------------------------------------------------
    def client(self, version, cid, user=None, pw=None, **kw):
        r = self.raw(version=version)
        ack = r.connect(cid, username=user, password=pw, **kw)
        self.assertEqual(ack.rc, 0, "CONNACK for %s: %r" % (cid, ack))
        return r

    def subscriber(self, version, user, flt="a/#", qos=1, cid=None):
        pw = {"bob": "pb", "alice": "pa"}[user]
        r = self.client(version, cid or "%s-%d-%d" % (user, version, time.monotonic_ns()),
                        user, pw)
        self.assertEqual(r.subscribe([(flt, qos)]).codes, [qos], "%s subscribing to %s"
                         % (user, flt))
        return r

    def publish(self, pub, topic, payload, qos, retain=False):
        """Publish from the raw client pub; a QoS 1 publish must be acked
        with success (the publish is allowed, whoever may read it)."""
        ack = pub.publish(topic, payload, qos=qos, retain=retain)
        if qos == 1:
            self.assertEqual(ack.type, PUBACK)
            self.assertEqual(ack.rc, 0, "PUBACK for %s: %r" % (topic, ack))

    def fence(self, pub, topic="a/public"):
        """Publish a QoS 1 fence message that every subscriber of topic gets
        after everything pub published before it; returns its payload."""
        self.seq += 1
        payload = b"fence-%d" % self.seq
        self.publish(pub, topic, payload, 1)
        return payload

    def upto(self, r, fence, timeout=5.0):
        """The (topic, payload, qos) of every PUBLISH r gets before the fence
        message (acked), then checks that nothing more comes."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                p = r.expect(PUBLISH, max(left, 0.001))
            except RecvTimeout:
                self.fail("the fence %r did not arrive; before it: %r" % (fence, got))
            r.ack(p)
            if p.payload == fence:
                break
            got.append((p.topic, p.payload, p.qos))
        r.expect_nothing(0.3, types=(PUBLISH,))
        return got

    def assert_open(self, r, what):
        r.pingreq()
        try:
            r.expect(PINGRESP, 3)
        except (nmq.ConnectionClosed, RecvTimeout) as e:
            self.fail("%s: connection no longer usable: %s" % (what, e))


class Plain:
    """Plain (non-shared) subscriptions, mixed into the no_match variants."""

    def test_wildcard_subscription(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                bob = self.subscriber(v, "bob")
                alice = self.subscriber(v, "alice")
                pub = self.client(v, "pub-%d" % v)
                for q in (0, 1):
                    self.publish(pub, "a/public", b"pub%d" % q, q)
                    self.publish(pub, "a/secret", b"sec%d" % q, q)
                f = self.fence(pub)
                self.assertEqual(self.upto(bob, f), [("a/public", b"pub0", 0),
                                                     ("a/public", b"pub1", 1)])
                self.assertEqual(self.upto(alice, f), [
                    ("a/public", b"pub0", 0), ("a/secret", b"sec0", 0),
                    ("a/public", b"pub1", 1), ("a/secret", b"sec1", 1)])
                self.assert_open(bob, "bob after refused deliveries")
                for c in (bob, alice, pub):
                    c.disconnect()
                    c.close()
        log = self.broker.log_text()
        self.assertRegex(log, r"client_id=bob-\S+ action=deliver topic=a/secret event=denied")
        self.assertNotRegex(log, r"client_id=alice-\S+ action=deliver")

    # Overlapping subscriptions of one client: the decision is the client's,
    # whichever of its filters matched.
    def test_overlapping_subscriptions(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                bob = self.subscriber(v, "bob")
                self.assertEqual(bob.subscribe([("a/+", 1)]).codes, [1])
                pub = self.client(v, "pub-o-%d" % v)
                self.publish(pub, "a/secret", b"s", 1)
                self.publish(pub, "a/public", b"p", 1)
                f = self.fence(pub)
                # one copy of a/public (the overlapping subscriptions merge)
                self.assertEqual(self.upto(bob, f), [("a/public", b"p", 1)])

    def test_retained(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                pub = self.client(v, "pub-r-%d" % v)
                self.publish(pub, "a/secret", b"rs", 1, retain=True)
                self.publish(pub, "a/public", b"rp", 1, retain=True)
                for user, want in (("bob", [("a/public", b"rp", 1)]),
                                   ("alice", [("a/public", b"rp", 1), ("a/secret", b"rs", 1)])):
                    r = self.subscriber(v, user)
                    f = self.fence(pub, "a/fence")
                    self.assertEqual(sorted(self.upto(r, f)), want, user)
                    r.disconnect()
                    r.close()
                # clear the retained messages for the next version
                self.publish(pub, "a/secret", b"", 1, retain=True)
                self.publish(pub, "a/public", b"", 1, retain=True)

    def test_deny_action_does_not_apply(self):
        # (deny_action is "disconnect" in TestDenyDisconnect, which runs this
        # too; a refused delivery never ends the subscriber's connection.)
        for v in VERSIONS:
            with self.subTest(version=v):
                bob = self.subscriber(v, "bob")
                pub = self.client(v, "pub-d-%d" % v)
                self.publish(pub, "a/secret", b"s", 1)
                f = self.fence(pub)
                self.assertEqual(self.upto(bob, f), [])
                self.assert_open(bob, "bob after a refused delivery")

    # With an ACL in force a session is resumed only by the user whose
    # CONNECT created it: another user can neither resume it offline (and
    # read what was queued for its owner) nor take it over live without
    # clean start. A clean start by another user discards it, as MQTT
    # says, and gives that user an empty session of its own.
    def test_session_resumed_only_by_its_user(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                cid = "roam-%d" % v
                kw = {"clean": False}
                if v == 5:
                    kw["props"] = {"SessionExpiryInterval": 300}
                refused = 0x85 if v == 5 else 0x02
                alice = self.client(v, cid, "alice", "pa", **kw)
                self.assertEqual(alice.subscribe([("a/#", 1)]).codes, [1])
                # Live, without clean start: refused (0x02 / 0x85, then the
                # connection is closed: 3.1.1 [MQTT-3.1.3-9] / 5.0
                # [MQTT5-3.1.3-8]); alice stays.
                bob = self.raw(version=v)
                self.assertEqual(bob.connect(cid, username="bob", password="pb", **kw).rc,
                                 refused)
                bob.expect_closed()
                bob.close()
                self.assert_open(alice, "alice after bob's attempt")
                n = self.broker.disconnections(cid)
                alice.disconnect()
                alice.close()
                self.broker.wait_disconnected(cid, n + 1)
                # Offline: a/secret is queued for alice; bob cannot resume.
                pub = self.client(v, "pub-s-%d" % v)
                self.publish(pub, "a/secret", b"s1", 1)
                bob = self.raw(version=v)
                self.assertEqual(bob.connect(cid, username="bob", password="pb", **kw).rc,
                                 refused)
                bob.close()
                alice = self.raw(version=v)
                ack = alice.connect(cid, username="alice", password="pa", **kw)
                self.assertEqual((ack.rc, ack.session_present), (0, True))
                self.publish(pub, "a/secret", b"s2", 1)
                f = self.fence(pub)
                self.assertEqual(self.upto(alice, f),
                                 [("a/secret", b"s1", 1), ("a/secret", b"s2", 1)])
                n = self.broker.disconnections(cid)
                alice.disconnect()
                alice.close()
                self.broker.wait_disconnected(cid, n + 1)
                self.publish(pub, "a/secret", b"s3", 1)
                # A clean start by bob discards alice's session (and s3
                # with it): bob gets an empty session and nothing of hers.
                bob = self.raw(version=v)
                ack = bob.connect(cid, username="bob", password="pb", clean=True)
                self.assertEqual((ack.rc, ack.session_present), (0, False))
                bob.expect_nothing(0.5, types=(PUBLISH,))
                bob.disconnect()
                bob.close()


class TestNoMatchAllow(Plain, DeliveryCase):
    NO_MATCH = "allow"

    # $SYS client status names the user of the connection (the identity
    # the delivery checks use comes from the same call).
    def test_client_status_names_the_user(self):
        import json
        watcher = self.client(5, "status-watch", "alice", "pa")
        watcher.subscribe([("$SYS/brokers/client_status/#", 0)])
        bob = self.client(4, "status-bob", "bob", "pb")
        bob.disconnect()
        bob.close()
        got = {}
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            p = watcher.expect(PUBLISH, max(deadline - time.monotonic(), 0.01))
            if p.topic == "$SYS/brokers/client_status/status-bob":
                d = json.loads(p.payload)
                got[d["status"]] = d
        self.assertEqual(sorted(got), ["offline", "online"])
        for d in got.values():
            self.assertEqual(d["username"], "bob")
            self.assertEqual(d["client_id"], "status-bob")


class TestNoMatchDeny(Plain, DeliveryCase):
    NO_MATCH = "deny"

    # "@lit/#" grants the SUBSCRIBE to the filter lit/# itself; a message on
    # lit/x is delivered only if a SUBSCRIBE to lit/x would be allowed, and
    # with no_match = deny it would not.
    def test_literal_rule_grants_no_reads(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                r = self.subscriber(v, "alice", "lit/#")
                no = 0x87 if v == 5 else 0x80
                self.assertEqual(r.subscribe([("lit/x", 1)]).codes, [no])
                pub = self.client(v, "pub-l-%d" % v)
                self.publish(pub, "lit/x", b"l", 1)
                self.fence(pub, "lit/x")
                r.expect_nothing(0.5, types=(PUBLISH,))


class TestDenyDisconnect(DeliveryCase):
    DENY_ACTION = "disconnect"
    test_deny_action_does_not_apply = Plain.test_deny_action_does_not_apply


class TestShared(DeliveryCase):

    def drain(self, clients, total, timeout=8.0):
        """Reads PUBLISH packets (acked) from every client until total have
        arrived, then for a quiet window; returns one list per client."""
        got = [[] for _ in clients]
        deadline = time.monotonic() + timeout
        quiet_until = None
        while True:
            now = time.monotonic()
            if quiet_until is None and (sum(map(len, got)) >= total or now >= deadline):
                quiet_until = now + nmq.T_QUIET
            if quiet_until is not None and now >= quiet_until:
                return got
            for i, c in enumerate(clients):
                try:
                    p = c.expect(PUBLISH, 0.02)
                except RecvTimeout:
                    continue
                c.ack(p)
                got[i].append((p.topic, p.payload))

    def test_group_member_refused(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                flt = "$share/g%d/a/#" % v
                bob = self.subscriber(v, "bob", flt)
                alice = self.subscriber(v, "alice", flt)
                pub = self.client(v, "pub-g-%d" % v)
                n = 10
                # (not interleaved: with two members, the round robin would
                # then pick the same member for every a/secret)
                for i in range(n):
                    self.publish(pub, "a/secret", b"s%02d" % i, 1)
                for i in range(n):
                    self.publish(pub, "a/public", b"p%02d" % i, 1)
                gb, ga = self.drain([bob, alice], 2 * n)
                self.assertEqual([m for m in gb if m[0] == "a/secret"], [],
                                 "bob got a/secret through the group")
                self.assertEqual(sorted(p for t, p in ga if t == "a/secret"),
                                 [b"s%02d" % i for i in range(n)],
                                 "a/secret must go to the member allowed to read it")
                self.assertEqual(sorted(p for t, p in gb + ga if t == "a/public"),
                                 [b"p%02d" % i for i in range(n)], "a/public lost or doubled")
                self.assertGreaterEqual(len(gb), 2, "bob no longer gets his share: %r" % gb)
                for c in (bob, alice, pub):
                    c.disconnect()
                    c.close()

    def test_group_nobody_may_read(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                bob = self.subscriber(v, "bob", "$share/h%d/a/#" % v)
                pub = self.client(v, "pub-h-%d" % v)
                self.publish(pub, "a/secret", b"s", 0)
                self.publish(pub, "a/secret", b"s", 1)
                f = self.fence(pub)
                self.assertEqual(self.upto(bob, f), [])


class TestReload(DeliveryCase):

    def test_reload_removes_deny(self):
        subs = {v: self.subscriber(v, "bob") for v in VERSIONS}
        pub = self.client(5, "pub-rr")
        self.publish(pub, "a/secret", b"before", 1)
        f = self.fence(pub)
        for v, bob in subs.items():
            self.assertEqual(self.upto(bob, f), [], "v%d before the reload" % v)
        self.write_acl(ACL_WITHOUT_DENY)
        self.sighup()
        self.publish(pub, "a/secret", b"after", 1)
        f = self.fence(pub)
        for v, bob in subs.items():
            self.assertEqual(self.upto(bob, f), [("a/secret", b"after", 1)],
                             "v%d: existing subscription after the reload" % v)
        # and back: the deny applies again to the same subscriptions
        self.write_acl(ACL_WITH_DENY)
        self.sighup()
        self.publish(pub, "a/secret", b"again", 1)
        self.publish(pub, "a/public", b"still", 1)
        f = self.fence(pub)
        for v, bob in subs.items():
            self.assertEqual(self.upto(bob, f), [("a/public", b"still", 1)], "v%d" % v)


class TestReloadAddsDeny(DeliveryCase):
    ACL = ACL_WITHOUT_DENY

    def test_reload_adds_deny(self):
        bobs = {v: self.subscriber(v, "bob") for v in VERSIONS}
        shared = self.subscriber(5, "bob", "$share/r/a/#")
        alice = self.subscriber(4, "alice")
        pub = self.client(4, "pub-ra")
        self.publish(pub, "a/secret", b"before", 1)
        f = self.fence(pub)
        for v, bob in bobs.items():
            self.assertEqual(self.upto(bob, f), [("a/secret", b"before", 1)], "v%d" % v)
        self.assertEqual(self.upto(shared, f), [("a/secret", b"before", 1)])
        self.assertEqual(self.upto(alice, f), [("a/secret", b"before", 1)])
        self.write_acl(ACL_WITH_DENY)
        self.sighup()
        self.publish(pub, "a/secret", b"after", 1)
        self.publish(pub, "a/public", b"open", 1)
        f = self.fence(pub)
        for v, bob in bobs.items():
            self.assertEqual(self.upto(bob, f), [("a/public", b"open", 1)],
                             "v%d: a/secret after the deny was added" % v)
        self.assertEqual(self.upto(shared, f), [("a/public", b"open", 1)])
        self.assertEqual(self.upto(alice, f), [("a/secret", b"after", 1),
                                               ("a/public", b"open", 1)])


    # Messages queued for an offline session before the reload are checked
    # against the new ACL too: bob does not get the a/secret that waited
    # for him, but does get the a/public queued with it; alice, whom the
    # new rule does not concern, gets both.
    def test_reload_drops_queued_messages(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                self.write_acl(ACL_WITHOUT_DENY)
                self.sighup()
                kw = {"clean": False}
                if v == 5:
                    kw["props"] = {"SessionExpiryInterval": 300}
                ids = {"bob": "q-bob-%d" % v, "alice": "q-alice-%d" % v}
                pws = {"bob": "pb", "alice": "pa"}
                for user in ("bob", "alice"):
                    c = self.client(v, ids[user], user, pws[user], **kw)
                    self.assertEqual(c.subscribe([("a/#", 1)]).codes, [1])
                    c.disconnect()
                    c.close()
                for user in ("bob", "alice"):  # both offline
                    self.broker.wait_disconnected(ids[user])
                pub = self.client(v, "pub-q-%d" % v)
                self.publish(pub, "a/secret", b"queued", 1)
                self.publish(pub, "a/public", b"kept", 1)
                self.write_acl(ACL_WITH_DENY)
                self.sighup()
                f = self.fence(pub)
                want = {"bob": [("a/public", b"kept", 1)],
                        "alice": [("a/secret", b"queued", 1), ("a/public", b"kept", 1)]}
                for user in ("bob", "alice"):
                    c = self.raw(version=v)
                    ack = c.connect(ids[user], username=user, password=pws[user], **kw)
                    self.assertEqual((ack.rc, ack.session_present), (0, True))
                    self.assertEqual(self.upto(c, f), want[user], user)
                    c.disconnect()
                    c.close()
                pub.disconnect()
                pub.close()


if __name__ == "__main__":
    nmq.main()
