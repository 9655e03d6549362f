#!/usr/bin/python3
"""Held rows (decisions/0045) across a crash, with persistent subscribers
ONLINE under a QoS 1 fan-out: several subscribers ack everything at once,
one never acks, so the generations stay held for their 500 ms. The broker
is killed (kill -9, or a simulated power cut) while those generations are
in the file, shortly after the load stopped (the subscribers' acks
committed by then). After the restart:
  - every message acked to the publisher reaches every subscriber (before
    the kill or after), in order;
  - a message a subscriber acked before the kill does not come again (the
    done records written beside the held rows leave it out)."""

import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

FAST = 8


class Sub:
    """A persistent subscriber on a raw socket; acks what it gets (or not)."""

    def __init__(self, cid, version, acks):
        self.cid = cid
        self.version = version
        self.acks = acks
        self.got = []  # payloads in arrival order
        self.pkts = []  # the PUBLISH packets, in arrival order
        self.acked = set()  # payloads acked on the connection before the kill
        self.stop = threading.Event()
        self.thread = None
        self.raw = None

    def connect(self, port, subscribe):
        self.raw = nmq.RawClient(port, version=self.version)
        props = {"SessionExpiryInterval": 3600} if self.version == 5 else None
        ack = self.raw.connect(self.cid, clean=False, props=props)
        if subscribe:
            self.raw.subscribe([("held/#", 1)])
        return ack

    def run(self):
        r = self.raw
        while not self.stop.is_set():
            try:
                p = r.read(timeout=0.1)
            except nmq.RecvTimeout:
                continue
            except (nmq.ConnectionClosed, OSError):
                return
            if p.type == nmq.PUBLISH:
                self.got.append(p.payload)
                self.pkts.append(p)
                if self.acks:
                    try:
                        r.ack(p)
                    except OSError:
                        return
                    self.acked.add(p.payload)

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


class HeldCase(StoreCase):
    CONF = "mqtt.max_mqueue_len = 1000000\n"

    def run_round(self, env=None, restore=None, version=5):
        subs = [Sub("held-fast-%d" % i, version, True) for i in range(FAST)]
        slow = Sub("held-slow", version, False)
        b = self.start(env)
        for s in subs + [slow]:
            self.assertEqual(s.connect(b.port, subscribe=True).session_present, False)
            s.start()
        pub = self.client(b, "held-pub", version=5, clean=True, expiry=0)
        pub.c.max_inflight_messages_set(50)
        pub.connect()
        mids = []
        deadline = time.monotonic() + 1.0
        i = 0
        while time.monotonic() < deadline:
            info = pub.c.publish("held/%d" % (i % 3), b"%06d" % i, 1)
            if info.rc != 0:
                time.sleep(0.002)
                continue
            mids.append((info.mid, i))
            i += 1
            if len(mids) > 40:
                pub._ev(pub._acks, mids[-40][0])[0].wait(1)
        # The last PUBACKs, then the subscribers' acks of them committed:
        # well within the 500 ms the last generations stay held.
        for mid, _ in mids[-50:]:
            pub._ev(pub._acks, mid)[0].wait(2)
        time.sleep(0.25)
        acked = [n for mid, n in mids if pub._ev(pub._acks, mid)[0].is_set()]
        self.assertGreater(len(acked), 100, "too little load to say anything")
        self.kill9(b)
        for s in subs + [slow]:
            s.halt()
        before = {s.cid: list(s.got) for s in subs + [slow]}
        if restore:
            restore()
        b2 = self.start()
        self.assertIn("event=held_restored", b2.log_text(), "no held rows at the kill")
        for s in subs + [slow]:
            s.got = []
            s.acks = True
            self.assertTrue(s.connect(b2.port, subscribe=False).session_present)
            s.start()
        n = -1
        while n != sum(len(s.got) for s in subs + [slow]):
            n = sum(len(s.got) for s in subs + [slow])
            time.sleep(1.0)
        for s in subs + [slow]:
            s.halt()
        want = [b"%06d" % n for n in acked]
        dups = 0
        for s in subs + [slow]:
            all_got = before[s.cid] + s.got
            missing = sorted(set(want) - set(all_got))
            self.assertEqual(missing, [], "%s: %d of %d acked messages lost"
                             % (s.cid, len(missing), len(want)))
            first = list(dict.fromkeys(all_got))
            self.assertEqual(first, sorted(first), "%s: out of order" % s.cid)
            if s.cid != slow.cid:
                again = [p for p in s.got if p in s.acked]
                dups += len(again)
        print("%d messages acked to the publisher, %d fan-out deliveries acked before "
              "the kill came again" % (len(acked), dups))
        self.assertEqual(dups, 0, "messages acked by subscribers before the kill came again")
        self.kill9(b2)


class TestHeldKill9(HeldCase):
    def test_v5(self):
        self.run_round(version=5)

    def test_v311(self):
        self.run_round(version=4)


class TestHeldPowerCut(HeldCase):
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
        # A slow fsync inside the powercut shim's (see test_71): an ack
        # released before its group's fsync would be undone by the cut.
        slow = os.path.join(tools, "libnmq_slowsync.so")
        if os.path.exists(slow):
            env.update({"LD_PRELOAD": shim + ":" + slow, "NMQ_SLOWSYNC_DIR": self.db_dir,
                        "NMQ_SLOWSYNC_MS": "20"})

        def restore():
            r = subprocess.run([restore_bin, log], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            self.assertEqual(r.returncode, 0, r.stdout)
            os.unlink(log)

        self.run_round(env=env, restore=restore)


if __name__ == "__main__":
    unittest.main(verbosity=2)
