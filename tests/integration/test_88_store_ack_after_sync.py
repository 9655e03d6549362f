#!/usr/bin/python3
"""No PUBACK before the fsync that makes its message durable.

With durability = fsync a group's acks go only once the write-ahead log
holding its COMMIT is fsynced. On a slow disk (tests/tools/slowsync.c:
every fsync 40 ms longer, each one logged with when it began and
returned, on CLOCK_MONOTONIC as time.monotonic_ns()) QoS 1 publishers
pipeline messages into offline persistent sessions; for every PUBACK
there must be an fsync of the WAL that began after the PUBLISH was sent
and returned before the PUBACK was read. An ack released at the COMMIT
(with the fsync still to come, or left to a later one) fails this; so
does one covered only by an fsync that began before its message came.
(The order of events is checked, never a duration.) Then a clean stop:
every message acked is delivered after the restart.
"""

import bisect
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import PUBACK, ConnectionClosed, RawClient, RecvTimeout, publish_bytes  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

N_SUBS = 2
N_PUBS = 2
WINDOW = 20
SECONDS = 2.0


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


def shim_path():
    exe = os.path.realpath(nmq._find_nanomq())
    return os.path.join(os.path.dirname(os.path.dirname(exe)), "tests", "tools",
                        "libnmq_slowsync.so")


class TestAckAfterSync(StoreCase):

    def publisher(self, b, i, out):
        """Pipelines QoS 1 PUBLISHes for SECONDS; out gets (payload, sent
        ns, acked ns) of each one acked with success."""
        r = RawClient(b.port, version=5)
        self.assertEqual(r.connect("so-pub-%d" % i, clean=True).rc, 0)
        sent = {}  # pid -> (payload, ns)
        n = 0
        deadline = time.monotonic() + SECONDS

        def send_one():
            nonlocal n
            n += 1
            payload = b"p%d-%d" % (i, n)
            sent[n] = (payload, time.monotonic_ns())
            r.send(publish_bytes("so/t", payload, qos=1, pid=n, version=5))

        for _ in range(WINDOW):
            send_one()
        while sent:
            try:
                a = r.expect(PUBACK, 20)
            except (ConnectionClosed, RecvTimeout):
                break
            t = time.monotonic_ns()
            payload, t_sent = sent.pop(a.pid)
            if a.rc == 0:
                out.append((payload, t_sent, t))
            if time.monotonic() < deadline:
                send_one()
        r.close()

    def test_acks_after_their_fsync(self):
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        log = self.db_dir + "-syncs.log"
        env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
               "NMQ_SLOWSYNC_MS": "40", "NMQ_SLOWSYNC_LOG": log,
               "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        b = self.start(env=env)
        for i in range(N_SUBS):
            c = self.client(b, "so-sub-%d" % i)
            c.connect()
            self.assertEqual(c.subscribe("so/#", qos=1), [1])
            c.disconnect()
        acked = [[] for _ in range(N_PUBS)]
        ts = [threading.Thread(target=self.publisher, args=(b, i, acked[i]), daemon=True)
              for i in range(N_PUBS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        all_acked = [a for per in acked for a in per]
        self.assertGreater(len(all_acked), 4 * WINDOW, "too few acks to say anything")

        # The fsyncs of the write-ahead log, by start.
        syncs = []
        with open(log) as f:
            for line in f:
                start, end, path = line.split(" ", 2)
                if path.strip().endswith("-wal"):
                    syncs.append((int(start), int(end)))
        os.unlink(log)
        self.assertTrue(syncs, "no fsync of the WAL was logged")
        syncs.sort()
        starts = [s for s, _ in syncs]
        # min_end[k]: the earliest end of the syncs that began at starts[k]
        # or later.
        min_end = [0] * len(syncs)
        m = None
        for k in range(len(syncs) - 1, -1, -1):
            m = syncs[k][1] if m is None else min(m, syncs[k][1])
            min_end[k] = m
        early = []
        for payload, t_sent, t_ack in all_acked:
            k = bisect.bisect_left(starts, t_sent)
            if k == len(syncs) or min_end[k] > t_ack:
                early.append(payload)
        self.assertEqual(early, [], "PUBACKs read before any fsync of the WAL that began "
                         "after their PUBLISH was sent had returned (%d of %d)"
                         % (len(early), len(all_acked)))
        print("%d acks, each after an fsync that began after its PUBLISH; %d WAL fsyncs"
              % (len(all_acked), len(syncs)))

        # A clean stop, then every acked message is there.
        self.assertEqual(b.stop(), [])
        b2 = self.start()
        want = set(p for p, _, _ in all_acked)
        for i in range(N_SUBS):
            c = self.client(b2, "so-sub-%d" % i)
            c.connect()
            self.assertTrue(c.session_present)
            seen = set()
            deadline = time.monotonic() + 60
            while not want <= seen and time.monotonic() < deadline:
                msg = c.wait_message(timeout=max(deadline - time.monotonic(), 0.01))
                if msg is None:
                    break
                seen.add(msg.payload)
            self.assertEqual(sorted(want - seen), [], "acked but not delivered")
            c.disconnect()


if __name__ == "__main__":
    unittest.main()
