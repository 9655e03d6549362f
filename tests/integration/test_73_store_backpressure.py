#!/usr/bin/python3
"""The durable store refusing writes never costs an acknowledged message
(docs/decisions/0021-store-back-pressure.md).

The store's write queue is made tiny (sqlite.max_pending_writes) and its
disk slow (tests/tools/slowsync.c delays every fsync), while QoS 1
publishers pipeline messages to offline persistent sessions (each message
is one write per session). Then:

- a message whose writes the store refused gets no success ack: an MQTT 5
  publisher gets PUBACK 0x97, an MQTT 3.1.1 publisher's connection is
  closed without the PUBACK;
- publishers are paused while the queue is over half full (logged), and
  resume;
- every message that got a success PUBACK is delivered to every session
  after a restart (clean stop, and kill -9).
"""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import PUBACK, ConnectionClosed, RawClient, RecvTimeout, publish_bytes  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

N_SUBS = 6


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


def shim_path():
    exe = os.path.realpath(nmq._find_nanomq())
    return os.path.join(os.path.dirname(os.path.dirname(exe)), "tests", "tools",
                        "libnmq_slowsync.so")


class SlowStoreCase(StoreCase):
    """A broker whose store's disk is slow (the shim) and whose write queue
    is small."""

    def setUp(self):
        super().setUp()
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        self.env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
                    "NMQ_SLOWSYNC_MS": "30",
                    "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}

    def start_slow(self):
        """The persistent subscribers are made on a normal disk, then the
        broker restarts on the slow one."""
        b = self.start()
        for i in range(N_SUBS):
            c = self.client(b, "bp-sub-%d" % i)
            c.connect()
            self.assertEqual(c.subscribe("bp/#", qos=1), [1])
            c.disconnect()
        self.assertEqual(b.stop(), [])
        return self.start(env=self.env)

    def pipeline(self, b, version, cid, n, tag, window=None):
        """Sends n QoS 1 PUBLISHes, keeping at most window (all when None)
        unacknowledged, and reads the acks. Returns (payloads acked with
        success, payloads refused with 0x97, connection closed)."""
        r = RawClient(b.port, version=version)
        self.assertEqual(r.connect(cid, clean=True).rc, 0)
        payloads = {i + 1: b"%s-%d" % (tag, i) for i in range(n)}
        window = window or n
        ok, refused, closed = [], [], False
        sent = 0

        def send_upto(k):
            nonlocal sent, closed
            data = b""
            while sent < min(k, n):
                sent += 1
                data += publish_bytes("bp/t", payloads[sent], qos=1, pid=sent,
                                      version=version)
            try:
                r.send(data)
            except OSError:
                closed = True  # a 3.1.1 publisher closed while still sending

        send_upto(window)
        for _ in range(n):
            try:
                a = r.expect(PUBACK, 20)
            except (ConnectionClosed, RecvTimeout):
                closed = True
                break
            self.assertIn(a.rc, (0, 0x97), "PUBACK reason")
            (ok if a.rc == 0 else refused).append(payloads[a.pid])
            if not closed:
                send_upto(len(ok) + len(refused) + window)
        r.sock.close()
        return ok, refused, closed

    def delivered(self, b, wants):
        """Every payload of each list in wants reaches every subscriber, in
        the list's order (one list per publisher)."""
        want_all = set(p for want in wants for p in want)
        for i in range(N_SUBS):
            c = self.client(b, "bp-sub-%d" % i)
            c.connect()
            self.assertTrue(c.session_present)
            # Read until every wanted payload came (the backlog is read
            # back from the store in chunks: a pause between two says
            # nothing), then for a short while for duplicates out of order.
            got, seen = [], set()
            deadline = time.monotonic() + 60
            while not want_all <= seen:
                m = c.wait_message(timeout=max(deadline - time.monotonic(), 0.01))
                if m is None:
                    break
                got.append(m.payload)
                seen.add(m.payload)
            while True:
                m = c.wait_message(timeout=0.5)
                if m is None:
                    break
                got.append(m.payload)
            for want in wants:
                missing = [p for p in want if p not in got]
                self.assertEqual(missing, [], "bp-sub-%d lost acknowledged messages" % i)
                ws = set(want)
                order = [p for p in got if p in ws]
                dedup = [p for j, p in enumerate(order) if p not in order[:j]]
                self.assertEqual(dedup, want, "bp-sub-%d: out of order" % i)
            c.disconnect()


class Refusals(SlowStoreCase):
    """A write queue (16) smaller than one message's writes for a few
    pipelined messages: refusals are certain."""

    EXTRA = "  max_pending_writes = 16\n"

    def test_v5_refused_gets_0x97(self):
        b = self.start_slow()
        ok, refused, closed = self.pipeline(b, 5, "bp-pub5", 60, b"v5")
        self.assertFalse(closed)
        self.assertEqual(len(ok) + len(refused), 60)
        self.assertGreater(len(refused), 0, "the tiny write queue never refused a write")
        self.assertIn("event=publish_not_acked reason=store_full action=ack_0x97",
                      b.log_text())
        self.assertEqual(b.stop(), [])
        b2 = self.start()
        self.delivered(b2, [ok])

    def test_v311_refused_is_closed(self):
        b = self.start_slow()
        ok, refused, closed = self.pipeline(b, 4, "bp-pub4", 60, b"v4")
        self.assertEqual(refused, [])
        self.assertTrue(closed, "no refusal: %d of 60 acked" % len(ok))
        self.assertLess(len(ok), 60)
        self.assertIn("action=disconnect", b.log_text())
        self.kill9(b)
        b2 = self.start()
        self.delivered(b2, [ok])


class Pauses(SlowStoreCase):
    """A queue large enough for pauses to act: publishers pause at half of
    it, and every acked message survives a kill -9."""

    EXTRA = "  max_pending_writes = 150\n  flush_mem_threshold = 50\n"

    def test_paused_no_acked_loss(self):
        b = self.start_slow()
        results = {}

        def run(k):
            results[k] = self.pipeline(b, 5, "bp-p%d" % k, 150, b"p%d" % k, window=8)

        ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)  # each ack is awaited 20 s at most: they end
        self.assertEqual(len(results), 4)
        self.assertIn("event=publisher_paused reason=store_backlog", b.log_text())
        acked = 0
        for k in range(4):
            ok, refused, closed = results[k]
            self.assertFalse(closed)
            self.assertEqual(len(ok) + len(refused), 150)
            acked += len(ok)
        print("acked %d of 600, refused %d" % (acked, 600 - acked))
        self.assertGreater(acked, 400)
        self.kill9(b)
        b2 = self.start()
        # Each publisher's acked messages, in its order (the threads
        # interleave, so order is checked per publisher).
        self.delivered(b2, [results[k][0] for k in range(4)])


if __name__ == "__main__":
    nmq.main()
