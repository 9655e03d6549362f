#!/usr/bin/python3
"""A SUBSCRIBE or UNSUBSCRIBE of a persistent session whose store write is
refused (the store's queue of pending writes is full, decisions/0021)
is answered with a failure and changes nothing: the client is never told
a subscription exists (or is gone) that a crash would undo.

The write queue is made tiny (sqlite.max_pending_writes = 16, as in
test_73) and one packet carries more filters than it holds: the writes
of one packet are queued together (one group), so the first filters are
admitted and the rest refused, deterministically. Checked: the SUBACK
codes (v5 0x97, 3.1.1 0x80), the UNSUBACK codes (v5 0x80; 3.1.1 has none:
the connection is closed without it), what is delivered, and what is
left after a kill -9."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import PUBLISH, SUBACK, UNSUBACK, ConnectionClosed, RawClient, RecvTimeout  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

N = 40


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class Refused(StoreCase):
    EXTRA = "  max_pending_writes = 16\n"

    def raw(self, b, cid, version=5):
        r = RawClient(b.port, version=version)
        self.clients.append(r.sock)
        props = {"SessionExpiryInterval": 3600} if version == 5 else None
        ack = r.connect(cid, clean=False, props=props)
        self.assertEqual(ack.rc, 0)
        return r, ack

    def delivered(self, b, sub, topics):
        """Publishes QoS 0 to each topic, then "end" to end/x (which sub
        holds): returns the topics sub got."""
        pub = RawClient(b.port, version=5)
        self.clients.append(pub.sock)
        self.assertEqual(pub.connect("pub", clean=True).rc, 0)
        for t in topics:
            pub.publish(t, b"m", qos=0)
        pub.publish("end/x", b"end", qos=0)
        got = []
        while True:
            p = sub.expect(PUBLISH, 5)
            if p.topic == "end/x":
                return got
            got.append(p.topic)

    def filters(self, lo, hi):
        return ["f/%d" % i for i in range(lo, hi)]

    def test_v5_suback_0x97_and_unsuback_0x80(self):
        b = self.start()
        sub, _ = self.raw(b, "sr-5")
        self.assertEqual(sub.subscribe([("end/x", 0)]).codes, [0])
        # One SUBSCRIBE of 40 filters: the first ones are granted, the
        # rest refused with 0x97, and those are not subscribed.
        codes = sub.subscribe([(f, 0) for f in self.filters(0, N)]).codes
        k = codes.index(0x97) if 0x97 in codes else N
        self.assertGreater(k, 0, codes)
        self.assertLess(k, N, "the tiny write queue never refused: %s" % codes)
        self.assertEqual(codes, [0] * k + [0x97] * (N - k))
        self.assertIn("event=subscribe_refused reason=store_full", b.log_text())
        granted = self.filters(0, k)
        self.assertEqual(self.delivered(b, sub, self.filters(0, N)), granted)
        # What the SUBACK granted, and only that, survives a kill -9.
        self.kill9(b)
        b2 = self.start()
        sub2, ack = self.raw(b2, "sr-5")
        self.assertTrue(ack.session_present)
        self.assertEqual(self.delivered(b2, sub2, self.filters(0, N)), granted)

        # Subscribed to all 40 in packets small enough to pass, then one
        # UNSUBSCRIBE of all: the first removals pass, the rest get 0x80
        # and stay subscribed, across a kill -9 too.
        for lo in range(k, N, 8):
            c = sub2.subscribe([(f, 0) for f in self.filters(lo, min(lo + 8, N))]).codes
            self.assertEqual(c, [0] * len(c))
        codes = sub2.unsubscribe(self.filters(0, N)).codes
        u = codes.index(0x80) if 0x80 in codes else N
        self.assertGreater(u, 0, codes)
        self.assertLess(u, N, "the tiny write queue never refused: %s" % codes)
        self.assertEqual(codes, [0] * u + [0x80] * (N - u))
        self.assertIn("event=unsubscribe_refused reason=store_full", b2.log_text())
        kept = self.filters(u, N)
        self.assertEqual(self.delivered(b2, sub2, self.filters(0, N)), kept)
        self.kill9(b2)
        b3 = self.start()
        sub3, ack = self.raw(b3, "sr-5")
        self.assertTrue(ack.session_present)
        self.assertEqual(self.delivered(b3, sub3, self.filters(0, N)), kept)

    def test_v311_suback_0x80_unsubscribe_closes(self):
        b = self.start()
        sub, _ = self.raw(b, "sr-4", version=4)
        self.assertEqual(sub.subscribe([("end/x", 0)]).codes, [0])
        codes = sub.subscribe([(f, 0) for f in self.filters(0, N)]).codes
        k = codes.index(0x80) if 0x80 in codes else N
        self.assertTrue(0 < k < N, codes)
        self.assertEqual(codes, [0] * k + [0x80] * (N - k))
        self.assertEqual(self.delivered(b, sub, self.filters(0, N)), self.filters(0, k))
        for lo in range(k, N, 8):
            c = sub.subscribe([(f, 0) for f in self.filters(lo, min(lo + 8, N))]).codes
            self.assertEqual(c, [0] * len(c))
        # 3.1.1's UNSUBACK cannot say a removal failed: no UNSUBACK, the
        # connection is closed.
        with self.assertRaises((ConnectionClosed, RecvTimeout)):
            sub.unsubscribe(self.filters(0, N), timeout=3)
        # After a restart the subscriptions whose removal was refused are
        # still there, the others gone.
        self.assertEqual(b.stop(), [])
        b2 = self.start()
        sub2, ack = self.raw(b2, "sr-4", version=4)
        self.assertTrue(ack.session_present)
        got = self.delivered(b2, sub2, self.filters(0, N))
        self.assertGreater(len(got), 0)
        self.assertLess(len(got), N)
        self.assertEqual(got, self.filters(N - len(got), N))


if __name__ == "__main__":
    unittest.main()
