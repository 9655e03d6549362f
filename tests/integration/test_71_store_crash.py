#!/usr/bin/python3
"""The durable store under load, killed: a steady QoS 1 and QoS 2 load into
a persistent session that is offline, the broker killed with SIGKILL at a
random moment, restarted; several rounds. Every message whose publisher got
its PUBACK / PUBCOMP is delivered after the restart (QoS 1 at least once,
QoS 2 exactly once), in order per publisher and topic. Then the same with a
simulated power cut (the powercut shim undoes every write that was not
fsynced) and durability = fsync. Then the same with the persistent
subscriber online and acking during the load, so that most of its queue
rows cancel out inside their group commit (decisions/0020): what was acked
to a publisher but not yet to the subscriber must still come after the
restart (at QoS 1: a message in flight to a connected subscriber at the
kill may come twice)."""

import os
import random
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

SUB = "crash-sub"
PUBLISHERS = 2


class Loader:
    """Publishers sending numbered QoS 1 and QoS 2 messages as fast as their
    window allows, recording which ones were acknowledged."""

    def __init__(self, case, b, rnd):
        self.case = case
        self.stop = threading.Event()
        self.acked = {}  # (pub, qos) -> [seq acked]
        self.threads = []
        self.clients = []
        for i in range(PUBLISHERS):
            c = case.client(b, "crash-pub-%d" % i, version=5, clean=True, expiry=0)
            c.c.max_inflight_messages_set(40)
            c.connect()
            self.clients.append(c)
            t = threading.Thread(target=self.run, args=(i, c, rnd), daemon=True)
            self.threads.append(t)

    def start(self):
        for t in self.threads:
            t.start()

    def run(self, i, c, rnd):
        mids = {}
        seq = {1: 0, 2: 0}
        pending = []
        while not self.stop.is_set() and not c.disconnected.is_set():
            q = 1 if seq[1] <= seq[2] else 2
            payload = ("%d:%d:%d:%d" % (rnd, i, q, seq[q])).encode()
            try:
                info = c.c.publish("crash/%d/%d" % (i, q), payload, q)
            except Exception:
                break
            if info.rc != 0:
                time.sleep(0.005)
                continue
            mids[info.mid] = (q, seq[q])
            pending.append(info.mid)
            seq[q] += 1
            if len(pending) > 60:
                # Let the window drain a little.
                c._ev(c._acks, pending[0])[0].wait(0.5)
            pending = [m for m in pending if not c._ev(c._acks, m)[0].is_set()]
        time.sleep(0.2)
        for mid, (q, s) in mids.items():
            if c._ev(c._acks, mid)[0].is_set():
                self.acked.setdefault((i, q), []).append(s)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)


def parse(msgs, rnd):
    got = {}
    for m in msgs:
        r, i, q, s = (int(x) for x in m.payload.decode().split(":"))
        if r == rnd:
            got.setdefault((i, q), []).append(s)
    return got


class TestKill(StoreCase):
    ROUNDS = 3
    # The offline session's queue holds the whole load.
    CONF = "mqtt.max_mqueue_len = 1000000\n"

    def drain(self, b):
        sub = self.client(b, SUB, version=5)
        sub.connect()
        msgs = []
        while True:
            m = sub.wait_message(timeout=1.5)
            if m is None:
                break
            msgs.append(m)
        return sub, msgs

    def check(self, rnd, acked, msgs):
        got = parse(msgs, rnd)
        n_acked = 0
        for (i, q), seqs in acked.items():
            have = got.get((i, q), [])
            missing = sorted(set(seqs) - set(have))
            self.assertEqual(missing, [], "round %d publisher %d QoS %d: %d acked messages "
                             "lost (of %d acked)" % (rnd, i, q, len(missing), len(seqs)))
            n_acked += len(seqs)
        for (i, q), have in got.items():
            if q == 2:
                self.assertEqual(len(have), len(set(have)),
                                 "round %d publisher %d: QoS 2 duplicates" % (rnd, i))
            first = []
            for s in have:
                if s not in first:
                    first.append(s)
            self.assertEqual(first, sorted(first),
                             "round %d publisher %d QoS %d out of order" % (rnd, i, q))
        return n_acked

    def one_round(self, rnd, env=None, restore=None):
        b = self.start(env)
        sub, _ = self.drain(b)
        self.assertTrue(sub.session_present or rnd == 0)
        if rnd == 0:
            self.assertEqual(sub.subscribe("crash/#", qos=2), [2])
        sub.disconnect()
        loader = Loader(self, b, rnd)
        loader.start()
        time.sleep(random.uniform(0.4, 1.2))
        self.kill9(b)
        loader.finish()
        if restore:
            restore()
        b2 = self.start()
        sub2, msgs = self.drain(b2)
        self.assertTrue(sub2.session_present)
        n = self.check(rnd, loader.acked, msgs)
        self.assertGreater(n, 20, "too little load to say anything")
        sub2.disconnect()
        self.kill9(b2)
        return n

    def test_kill9_rounds(self):
        total = 0
        for rnd in range(self.ROUNDS):
            total += self.one_round(rnd)
        print("acked and checked: %d messages over %d rounds" % (total, self.ROUNDS))

    def test_power_cut(self):
        exe = os.path.realpath(nmq._find_nanomq())
        tools = os.path.join(os.path.dirname(os.path.dirname(exe)), "tests", "tools")
        shim = os.path.join(tools, "libnmq_powercut.so")
        restore_bin = os.path.join(tools, "powercut_restore")
        if not (os.path.exists(shim) and os.path.exists(restore_bin)):
            self.skipTest("powercut shim not built")
        log = os.path.join(self.db_dir + "-undo.log")
        env = {"LD_PRELOAD": shim, "NMQ_POWERCUT_DIR": self.db_dir, "NMQ_POWERCUT_LOG": log,
               "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        # Every fsync 20 ms slower, inside the powercut shim's sync (it
        # comes first: it takes its lock, then the slowsync shim delays,
        # then the real sync and its mark): writes made meanwhile are
        # not covered, so an ack released before the fsync of its group
        # is one the cut can undo (a build that sent the acks at the
        # COMMIT, before its fsync, fails this test).
        slow = os.path.join(tools, "libnmq_slowsync.so")
        if os.path.exists(slow):
            env.update({"LD_PRELOAD": shim + ":" + slow, "NMQ_SLOWSYNC_DIR": self.db_dir,
                        "NMQ_SLOWSYNC_MS": "20"})

        def restore():
            r = subprocess.run([restore_bin, log], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            self.assertEqual(r.returncode, 0, r.stdout)
            os.unlink(log)

        # Round 0 subscribes under the shim as well, so that the session
        # itself has to survive the cut.
        n = self.one_round(0, env=env, restore=restore)
        n += self.one_round(1, env=env, restore=restore)
        print("acked and checked across power cuts: %d messages" % n)


class OnlineSub:
    """A persistent v5 subscriber on a raw socket (subscribed with QoS 1)
    that acks everything it gets, reconnecting with its session."""

    def __init__(self):
        self.got = []  # payloads, in arrival order
        self.stop = threading.Event()
        self.thread = None
        self.raw = None

    def connect(self, port, subscribe):
        self.raw = nmq.RawClient(port, version=5)
        ack = self.raw.connect(SUB + "-online", clean=False,
                               props={"SessionExpiryInterval": 3600})
        if subscribe:
            self.raw.subscribe([("crash/#", 1)])
        return ack

    def run(self):
        r = self.raw
        while not self.stop.is_set():
            try:
                p = r.read(timeout=0.2)
                if p.type == nmq.PUBLISH:
                    self.got.append(p.payload)
                    r.ack(p)
            except nmq.RecvTimeout:
                continue
            except (nmq.ConnectionClosed, OSError):
                return

    def start(self):
        self.stop.clear()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def halt(self):
        self.stop.set()
        self.thread.join(10)
        try:
            self.raw.sock.close()
        except OSError:
            pass


class TestKillOnline(StoreCase):
    """Rounds of kill -9 while the persistent subscriber is connected and
    acking (at QoS 1), so that most of its rows cancel out within their
    group: every message acked to its publisher reaches the subscriber, before
    the kill or after the restart, and the first copies come in order."""

    ROUNDS = 3
    CONF = "mqtt.max_mqueue_len = 1000000\n"

    def test_kill9_rounds(self):
        sub = OnlineSub()
        total = 0
        for rnd in range(self.ROUNDS):
            b = self.start()
            ack = sub.connect(b.port, subscribe=rnd == 0)
            self.assertEqual(ack.session_present, rnd > 0)
            sub.start()
            loader = Loader(self, b, rnd)
            loader.start()
            time.sleep(random.uniform(0.4, 1.2))
            self.kill9(b)
            loader.finish()
            sub.halt()
            b2 = self.start()
            ack = sub.connect(b2.port, subscribe=False)
            self.assertTrue(ack.session_present)
            sub.start()
            n = -1
            while n != len(sub.got):  # until nothing came for a while
                n = len(sub.got)
                time.sleep(1.5)
            sub.halt()
            got = {}
            for payload in sub.got:
                r, i, q, s = (int(x) for x in payload.decode().split(":"))
                if r == rnd:
                    got.setdefault((i, q), []).append(s)
            for (i, q), seqs in loader.acked.items():
                have = got.get((i, q), [])
                missing = sorted(set(seqs) - set(have))
                self.assertEqual(missing, [], "round %d publisher %d QoS %d: %d acked "
                                 "messages lost (of %d acked)" % (rnd, i, q, len(missing),
                                                                  len(seqs)))
                total += len(seqs)
            for (i, q), have in got.items():
                first = list(dict.fromkeys(have))
                self.assertEqual(first, sorted(first),
                                 "round %d publisher %d QoS %d out of order" % (rnd, i, q))
            sub.got = []
            self.kill9(b2)
        self.assertGreater(total, 60, "too little load to say anything")
        print("acked and checked with the subscriber online: %d messages over %d rounds"
              % (total, self.ROUNDS))


if __name__ == "__main__":
    unittest.main(verbosity=2)
