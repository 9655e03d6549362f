#!/usr/bin/python3
"""Startup on a store with many sessions and queued messages (a smaller
version of scripts/store-startup.py; docs/benchmarks.md has the timings,
this test asserts behaviour only).

5,000 persistent sessions with 10 queued QoS 1 messages each (50,000
rows) are written through the broker's own store code
(tests/tools/store_gen.c). The broker starts on that file: every session
and subscription is restored (none failed), the queued messages stay on
disk until their client comes back (none is loaded at startup), and the
sessions checked (a sample of 150, spread over the range, plus the first
and last) get their whole queue in order and nothing else; a message
published after the restart reaches a session behind its backlog. A
second restart after some sessions were drained brings back exactly the
rest. The indexes that spare the startup a scan of every queued row
(queue_inflight, msgs_expiry) are added to a file that lacks them.
"""

import os
import random
import re
import sqlite3
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import PINGRESP, PUBLISH, RawClient, RecvTimeout  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

SESSIONS = 5000
PER = 10
FANOUT = 10


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store")


def gen_path():
    exe = os.path.realpath(nmq._find_nanomq())
    return os.path.join(os.path.dirname(os.path.dirname(exe)), "tests", "tools", "store_gen")


def want(i, per=PER):
    return [b"g%d-m%d" % (i // FANOUT, j) for j in range(per)]


class TestLargeStore(StoreCase):
    EXTRA = "  disk_cache_size = 1000000\n"

    def drain_session(self, b, i, n):
        """Connects gen-i (clean start 0), takes n messages, then checks
        that nothing more comes: the backlog is read in chunks of 256, so
        the rest of a session's ten would come with them; a PINGREQ fence
        (or, when none is expected, a short wait) stands for "nothing
        else"."""
        r = RawClient(b.port, version=5)
        ack = r.connect("gen-%d" % i, clean=False, props={"SessionExpiryInterval": 3600})
        self.assertEqual((ack.rc, ack.session_present), (0, True), "gen-%d" % i)
        got = []
        while len(got) < n:
            try:
                p = r.expect(PUBLISH, 10)
            except RecvTimeout:
                break
            r.ack(p)
            got.append(p.payload.split(b".")[0])
        if n == 0:
            r.expect_nothing(0.5, types=(PUBLISH,))
        r.pingreq()
        while True:
            p = r.read(5)
            if p.type == PINGRESP:
                break
            if p.type == PUBLISH:
                got.append(p.payload.split(b".")[0])
        r.disconnect()
        r.sock.close()
        return got

    def restored(self, b):
        m = re.search(r"event=restored sessions=(\d+) subscriptions=(\d+) inflight=(\d+) "
                      r".* failed=(\d+)", b.log_text())
        self.assertIsNotNone(m, b.log_tail())
        return tuple(int(x) for x in m.groups())

    def test_all_back_queues_complete(self):
        gen = gen_path()
        if not os.access(gen, os.X_OK):
            self.skipTest("store_gen not built")
        r = subprocess.run([gen, self.db_dir, str(SESSIONS), str(PER), "64", str(FANOUT)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout)
        # A file of the same schema without the load indexes (as written
        # by an earlier build) gets them at open.
        db = sqlite3.connect(os.path.join(self.db_dir, "nanomq.db"))
        db.execute("DROP INDEX queue_inflight")
        db.execute("DROP INDEX msgs_expiry")
        db.commit()
        db.close()
        b = self.start()
        self.assertEqual(self.restored(b), (SESSIONS, SESSIONS, 0, 0))
        self.assertIn("queued_messages=%d" % (SESSIONS * PER), b.log_text())
        rnd = random.Random(75)
        sample = sorted(set([0, SESSIONS - 1] + rnd.sample(range(SESSIONS), 150)))
        # A message published now goes behind the backlog of its group.
        pub = RawClient(b.port, version=4)
        self.assertEqual(pub.connect("t75-pub", clean=True).rc, 0)
        self.assertEqual(pub.publish("gen/0/new", b"fresh", qos=1).rc, 0)
        pub.disconnect()
        pub.sock.close()
        for i in sample:
            extra = [b"fresh"] if i < FANOUT else []
            w = want(i) + extra
            self.assertEqual(self.drain_session(b, i, len(w)), w, "gen-%d" % i)
        self.assertEqual(b.stop(), [])
        db = sqlite3.connect(os.path.join(self.db_dir, "nanomq.db"))
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        db.close()
        self.assertTrue({"queue_inflight", "msgs_expiry"} <= names, names)
        # The drained sessions come back empty, the others complete.
        b2 = self.start()
        self.assertEqual(self.restored(b2), (SESSIONS, SESSIONS, 0, 0))
        self.assertIn("queued_messages=%d" % ((SESSIONS - len(sample)) * PER
                                              + (FANOUT - len([i for i in sample
                                                               if i < FANOUT]))),
                      b2.log_text())
        others = [i for i in range(SESSIONS) if i not in set(sample)]
        for i in rnd.sample(others, 20):
            w = want(i) + ([b"fresh"] if i < FANOUT else [])
            self.assertEqual(self.drain_session(b2, i, len(w)), w, "gen-%d" % i)
        for i in sample[:10]:
            self.assertEqual(self.drain_session(b2, i, 0), [], "gen-%d" % i)


if __name__ == "__main__":
    nmq.main()
