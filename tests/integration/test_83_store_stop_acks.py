#!/usr/bin/python3
"""Acks and the durable store at the edges of a connection's life.

- A clean stop (SIGTERM) under a QoS 1 flood into a persistent session:
  the broker stops handling what clients send, lets the store commit what
  it holds and sends the PUBACKs those commits released before its
  DISCONNECT 0x8B. After the restart, the messages delivered are exactly
  the ones acknowledged: none acknowledged is missing, and none was
  committed without its PUBACK (a publisher that resends only what was
  not acknowledged would duplicate it).
- A CONNACK that waits for the store (a clean start discarding a stored
  session, on a slow disk) longer than 1.5 times the client's keepalive:
  the client is not timed out by the broker that keeps it waiting; its
  keepalive counts from the CONNACK."""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402
from test_73_store_backpressure import shim_path  # noqa: E402


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class Publisher:
    """A v5 publisher flat out (QoS 1, unique payloads, at most WINDOW
    unacknowledged) until the broker closes it; records the payloads
    acknowledged with success, and whether a PUBACK came after the
    broker's DISCONNECT."""

    WINDOW = 64

    def __init__(self, port, idx, version=5):
        self.idx = idx
        self.version = version
        self.c = nmq.RawClient(port, version=version)
        ack = self.c.connect("st-pub%d" % idx, clean=True)
        if ack.rc != 0:
            raise AssertionError("publisher refused: %r" % ack)
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(self.WINDOW)
        self.free_pids = list(range(1, self.WINDOW + 1))
        self.inflight = {}  # pid -> payload
        self.acked = set()
        self.refused = 0
        self.disconnect_rc = None
        self.ack_after_disconnect = False
        self.closed = threading.Event()
        self.error = None
        self.sent = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.writer = threading.Thread(target=self._write, daemon=True)

    def start(self):
        self.reader.start()
        self.writer.start()

    def _write(self):
        n = 0
        try:
            while not self.closed.is_set():
                if not self.slots.acquire(timeout=0.1):
                    continue
                with self.lock:
                    pid = self.free_pids.pop()
                    payload = b"p%d-%d" % (self.idx, n)
                    self.inflight[pid] = payload
                n += 1
                self.c.send(nmq.publish_bytes("st/t", payload, qos=1, pid=pid,
                                              version=self.version))
                self.sent += 1
        except OSError:
            pass  # closed by the broker

    def _read(self):
        try:
            while True:
                try:
                    p = self.c.read(timeout=30)
                except nmq.RecvTimeout:
                    self.error = "publisher %d: no packet for 30 s" % self.idx
                    return
                if p.type == nmq.DISCONNECT:
                    self.disconnect_rc = p.rc
                elif p.type == nmq.PUBACK:
                    if self.disconnect_rc is not None:
                        self.ack_after_disconnect = True
                    with self.lock:
                        payload = self.inflight.pop(p.pid, None)
                        if payload is None:
                            self.error = "publisher %d: PUBACK for unknown id %d" % (
                                self.idx, p.pid)
                            return
                        self.free_pids.append(p.pid)
                    if p.rc < 0x80:
                        self.acked.add(payload)
                    else:
                        self.refused += 1
                    self.slots.release()
        except (nmq.ConnectionClosed, OSError):
            pass
        finally:
            self.closed.set()

    def join(self, timeout):
        self.reader.join(timeout)
        self.closed.set()
        self.writer.join(timeout)
        self.c.close()


class CleanStopAcks(StoreCase):
    PUBLISHERS = 4
    FLOOD_S = 1.5

    def test_committed_messages_are_acked_before_the_disconnect(self):
        self.flood_and_stop(5)

    def test_v311_committed_messages_are_acked_before_the_close(self):
        self.flood_and_stop(4)

    def flood_and_stop(self, version):
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        # Commits of some tens of ms (an SD card): at the SIGTERM, a group
        # is being committed with acks of every publisher waiting for it.
        env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
               "NMQ_SLOWSYNC_MS": "30",
               "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        b = self.start(env)
        sink = nmq.RawClient(b.port, version=5)
        self.clients.append(sink)
        self.assertEqual(sink.connect("st-sink", clean=False,
                                      props={"SessionExpiryInterval": 3600}).rc, 0)
        sink.subscribe([("st/#", nmq.sub_opts(1))])
        sink.disconnect()
        b.wait_disconnected("st-sink")

        pubs = [Publisher(b.port, i, version) for i in range(self.PUBLISHERS)]
        for p in pubs:
            self.clients.append(p.c)
            p.start()
        time.sleep(self.FLOOD_S)
        self.assertTrue(all(p.acked for p in pubs), "every publisher got acks before the stop")
        problems = b.stop()
        self.brokers.remove(b)
        self.assertEqual(problems, [], "\n".join(str(x) for x in problems))
        for p in pubs:
            p.join(30)
            self.assertIsNone(p.error)
            self.assertTrue(p.closed.is_set(), "publisher %d not closed" % p.idx)
            self.assertFalse(p.ack_after_disconnect,
                             "publisher %d: PUBACK after DISCONNECT" % p.idx)
            if version == 5:
                self.assertEqual(p.disconnect_rc, 0x8B,
                                 "publisher %d: DISCONNECT 0x8B" % p.idx)
        acked = set().union(*(p.acked for p in pubs))
        sent = sum(p.sent for p in pubs)

        b = self.start()
        sink = nmq.RawClient(b.port, version=5)
        self.clients.append(sink)
        ack = sink.connect("st-sink", clean=False, props={"SessionExpiryInterval": 3600})
        self.assertEqual(ack.rc, 0)
        self.assertTrue(ack.session_present)
        delivered = {}
        while True:
            try:
                m = sink.read(timeout=3)
            except nmq.RecvTimeout:
                break
            if m.type != nmq.PUBLISH:
                continue
            delivered[m.payload] = delivered.get(m.payload, 0) + 1
            sink.ack(m)
        lost = acked - set(delivered)
        unacked = set(delivered) - acked
        self.assertEqual(len(lost), 0, "acknowledged but not delivered after the restart: %d "
                         "of %d acked (%d sent), e.g. %r"
                         % (len(lost), len(acked), sent, sorted(lost)[:5]))
        self.assertEqual(len(unacked), 0,
                         "stored (delivered after the restart) but never acknowledged "
                         "before the broker closed the connection: %d of %d delivered, e.g. %r"
                         % (len(unacked), len(delivered), sorted(unacked)[:5]))
        dups = [k for k, v in delivered.items() if v > 1]
        self.assertEqual(dups, [], "delivered twice")


class KeepaliveWhileConnackWaits(StoreCase):
    def test_connack_later_than_the_keepalive(self):
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        # Once started, every commit takes 2 s: the CONNACK of a clean
        # start over a stored session waits longer than 1.5 x a keepalive
        # of 1 s.
        slow = os.path.join(self.db_dir, "slow_ms")
        env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
               "NMQ_SLOWSYNC_MS": "0", "NMQ_SLOWSYNC_MS_FILE": slow,
               "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        b = self.start(env)
        with open(slow, "w") as f:
            f.write("2000")
        for version in (5, 4):
            cid = "st-ka%d" % version
            props = {"SessionExpiryInterval": 3600} if version == 5 else None
            old = nmq.RawClient(b.port, version=version)
            self.clients.append(old)
            self.assertEqual(old.connect(cid, clean=False, props=props).rc, 0)
            old.subscribe([("st/ka", nmq.sub_opts(1))], timeout=20)  # committed
            old.disconnect()
            b.wait_disconnected(cid)
            c = nmq.RawClient(b.port, version=version)
            self.clients.append(c)
            try:
                ack = c.connect(cid, clean=True, keepalive=1, timeout=20)
            except nmq.ConnectionClosed:
                self.fail("v%d: closed while its CONNACK waited for the store" % version)
            self.assertEqual(ack.rc, 0)
            self.assertFalse(ack.session_present)
            # Alive, and kept alive from the CONNACK on.
            for _ in range(3):
                c.pingreq()
                c.expect(nmq.PINGRESP, timeout=5)
                time.sleep(0.5)
            c.disconnect()
        os.unlink(slow)  # a quick stop
        self.assertNotIn("reason=keepalive_timeout", b.log_text())


if __name__ == "__main__":
    unittest.main(verbosity=2)
