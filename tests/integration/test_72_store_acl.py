#!/usr/bin/python3
"""An ACL reload drops what is queued for a persistent session that its
client may no longer read (test_23_acl_delivery.py): with the durable store
on, those messages are deleted from the store as well, so that they do not
come back after a restart. Covered: the backlog of an offline session
(on disk only), a clean restart and a kill -9 after the reload, and the
messages the client may still read are all delivered, in order."""

import os
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

DENY_BOB = '{permit = deny, username = "bob", action = subscribe, topics = ["a/secret"]}\n'
REST = """{permit = allow, action = subscribe, topics = ["a/#"]}
{permit = allow, action = publish}
"""
ACL_WITH_DENY = "rules = [\n" + DENY_BOB + REST + "]\n"
ACL_WITHOUT_DENY = "rules = [\n" + REST + "]\n"


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store and ACL configuration")


class TestAclReloadStore(StoreCase):
    def setUp(self):
        super().setUp()
        self.acl_dir = tempfile.mkdtemp(prefix="nmq-t72-")
        self.addCleanup(shutil.rmtree, self.acl_dir, True)
        self.CONF = """
auth {
  allow_anonymous = true
  no_match = allow
  deny_action = ignore
  password = { alice = "pa", bob = "pb" }
  acl = {include "%s/acl.conf"}
}
""" % self.acl_dir

    def write_acl(self, text):
        p = os.path.join(self.acl_dir, "acl.conf")
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.replace(p + ".tmp", p)

    def sighup(self, b, timeout=10.0):
        before = b.log_text().count("event=reloaded")
        b.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b.log_text().count("event=reloaded") > before:
                return
            time.sleep(0.05)
        self.fail("no reload within %.0f s of SIGHUP:\n%s" % (timeout, b.log_tail()))

    def user(self, b, cid, user, version):
        return self.client(b, cid, version=version, username=user,
                           password={"bob": "pb", "alice": "pa"}[user])

    def run_case(self, version, kill):
        self.write_acl(ACL_WITHOUT_DENY)
        b = self.start()
        ids = {"bob": "t72-bob-%d" % version, "alice": "t72-alice-%d" % version}
        for u in ("bob", "alice"):
            c = self.user(b, ids[u], u, version)
            c.connect()
            self.assertEqual(c.subscribe("a/#", qos=1), [1])
            c.disconnect()
        pub = self.client(b, "t72-pub", version=4, clean=True, expiry=0)
        pub.connect()
        want_bob, want_alice = [], []
        for i in range(40):
            topic = "a/secret" if i % 3 == 0 else "a/public"
            payload = b"%s-%d" % (topic.encode(), i)
            pub.publish(topic, payload, qos=1)  # waits for the PUBACK
            want_alice.append(payload)
            if topic != "a/secret":
                want_bob.append(payload)
        pub.disconnect()
        self.write_acl(ACL_WITH_DENY)
        self.sighup(b)
        self.assertRegex(b.log_text(), r"client_id=%s messages=14 event=queued_dropped"
                         % ids["bob"])
        if kill:
            self.kill9(b)
        else:
            self.assertEqual(b.stop(), [])
        b2 = self.start()
        self.assertIn("event=restored", b2.log_text())
        for u, want in (("bob", want_bob), ("alice", want_alice)):
            c = self.user(b2, ids[u], u, version)
            c.connect()
            self.assertTrue(c.session_present, u)
            got = c.wait_messages(len(want), timeout=10)
            self.assertEqual([m.payload for m in got], want, u)
            c.expect_no_message()
            c.disconnect()

    def test_reload_then_restart(self):
        for v in (4, 5):
            with self.subTest(version=v):
                self.run_case(v, kill=False)
                for b in self.brokers:
                    b.stop()
                shutil.rmtree(self.db_dir, ignore_errors=True)
                os.makedirs(self.db_dir)

    def test_reload_then_kill9(self):
        self.run_case(5, kill=True)


if __name__ == "__main__":
    nmq.main()
