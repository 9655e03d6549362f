#!/usr/bin/python3
"""CONNACK is the first packet the broker sends on a connection, also when
it waits for the store: a clean start over a stored session sends its
CONNACK only once the delete of the old session has committed
(docs/persistence.md). Meanwhile the client may already have subscribed
(a SUBSCRIBE right behind the CONNECT) and a publisher may be feeding the
new subscription: those messages wait in the session until the CONNACK
has gone. A clean start that ends no stored session does not wait for
the store at all."""

import os
import shutil
import sys
import tempfile
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


class Flood(threading.Thread):
    """A publisher flat out to one topic (QoS 0, one in 32 QoS 1; acks
    read and dropped) until stopped."""

    def __init__(self, port, topic, qos1_every=32):
        super().__init__(daemon=True)
        self.qos1_every = qos1_every
        self.c = nmq.RawClient(port, version=4)
        self.assertion = None
        ack = self.c.connect("cf-flood", clean=True)
        if ack.rc != 0:
            raise AssertionError("flood publisher refused: %r" % ack)
        self.topic = topic
        self.stop_ev = threading.Event()
        self.sent = 0

    def run(self):
        batch = bytearray()
        pid = 0
        self.c.sock.setblocking(False)
        try:
            while not self.stop_ev.is_set():
                batch.clear()
                for i in range(32):
                    # Mostly QoS 0 (not written to the store), with QoS
                    # 1 among them: the store keeps up, so that a
                    # CONNACK waits for a commit, not for a backlog.
                    qos = 1 if self.qos1_every and i % self.qos1_every == 0 else 0
                    if qos:
                        pid = pid % 65535 + 1
                    batch += nmq.publish_bytes(self.topic, b"m%d" % self.sent, qos=qos,
                                               pid=pid if qos else None)
                    self.sent += 1
                view = memoryview(bytes(batch))
                while view and not self.stop_ev.is_set():
                    try:
                        n = self.c.sock.send(view)
                        view = view[n:]
                    except BlockingIOError:
                        time.sleep(0.001)
                    self._drain()
                self._drain()
        except OSError as e:
            self.assertion = "flood publisher: %r" % e

    def _drain(self):
        try:
            while self.c.sock.recv(65536):
                pass
        except BlockingIOError:
            pass

    def stop(self):
        self.stop_ev.set()
        self.join(10)
        self.c.close()


class ConnackFirst(StoreCase):
    DURABILITY = "fsync"
    ROUNDS = 60
    BUDGET_S = 6.0

    def setUp(self):
        super().setUp()
        self.http_port = nmq.free_port()
        self.CONF = ("http_server { port = %d, username = admin, password = secret }\n"
                     % self.http_port)

    def acks_after_store(self):
        import base64
        import http.client
        deadline = time.monotonic() + 5
        while True:
            try:
                c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=5)
                tok = base64.b64encode(b"admin:secret").decode()
                c.request("GET", "/api/v4/prometheus",
                          headers={"Authorization": "Basic " + tok})
                r = c.getresponse()
                body = r.read().decode()
                c.close()
                self.assertEqual(r.status, 200, body)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for line in body.splitlines():
            if line.startswith("nanomq_acks_after_store"):
                return int(float(line.split()[-1]))
        self.fail("no nanomq_acks_after_store in the metrics")

    def first_packet(self, b, version, clean, props=None):
        """Connects the subscriber with a SUBSCRIBE and a PINGREQ right
        behind its CONNECT (one write); returns the client and the first
        packet."""
        c = nmq.RawClient(b.port, version=version)
        self.clients.append(c)
        c.send(nmq.connect_bytes("cf-sub", version=version, clean=clean, props=props)
               + nmq.subscribe_bytes([("cf/#", nmq.sub_opts(1))], pid=1, version=version)
               + nmq.packet(nmq.PINGREQ, 0, b""))
        return c, c.read(timeout=10)

    def rounds(self, b, version, clean_of_round, props_of_round):
        flood = Flood(b.port, "cf/t")
        flood.start()
        waited = 0
        try:
            t0 = time.monotonic()
            n = 0
            while n < self.ROUNDS and time.monotonic() - t0 < self.BUDGET_S:
                clean = clean_of_round(n)
                c, first = self.first_packet(b, version, clean, props_of_round(n))
                self.assertEqual(first.type, nmq.CONNACK,
                                 "round %d (v%d, clean=%s): first packet %r, not CONNACK"
                                 % (n, version, clean, first))
                self.assertEqual(first.rc, 0, first)
                # Some of the flood, left unacknowledged in the session
                # for the next round's CONNECT to take over.
                c.expect(nmq.SUBACK, pid=1)
                c.expect(nmq.PINGRESP)
                c.expect(nmq.PUBLISH)
                c.abort()
                self.clients.remove(c)
                n += 1
                waited += clean
        finally:
            flood.stop()
        self.assertIsNone(flood.assertion)
        self.assertGreater(flood.sent, 0)
        return n, waited

    def test_v5_clean_start_over_stored_session(self):
        # Every round: a clean start (discarding the stored session of
        # the round before) that makes a persistent session again.
        b = self.start()
        before = self.acks_after_store()
        n, _ = self.rounds(b, 5, lambda i: True,
                           lambda i: {"SessionExpiryInterval": 3600})
        self.assertGreaterEqual(n, 10)
        # The CONNACKs of the rounds after the first did wait (each for
        # the delete of a stored session), so the ordering was tested.
        self.assertGreaterEqual(self.acks_after_store() - before, n - 1)

    def test_v311_clean_session_over_stored_session(self):
        # Rounds alternate: a persistent session (clean 0), then a clean
        # session that discards it (its CONNACK waits for the store).
        b = self.start()
        n, waited = self.rounds(b, 4, lambda i: i % 2 == 1, lambda i: None)
        self.assertGreaterEqual(waited, 5)

    def test_no_wait_when_nothing_stored_ends(self):
        # A clean session replaced by a clean session (takeover), and a
        # clean start with no session before it: nothing stored ends, so
        # the CONNACK does not wait for the store.
        b = self.start()
        before = self.acks_after_store()
        for i in range(5):
            old = nmq.RawClient(b.port, version=4)
            self.clients.append(old)
            self.assertEqual(old.connect("cf-plain", clean=True).rc, 0)
            new = nmq.RawClient(b.port, version=4)
            self.clients.append(new)
            self.assertEqual(new.connect("cf-plain", clean=True).rc, 0)
            old.expect_closed()
            v5 = nmq.RawClient(b.port, version=5)
            self.clients.append(v5)
            self.assertEqual(v5.connect("cf-new-%d" % i, clean=True).rc, 0)
            new.disconnect()
            v5.disconnect()
        self.assertEqual(self.acks_after_store() - before, 0)


class ConnackCommitFails(StoreCase):
    """A disk whose fsync fails (the slowsync shim, while a flag file
    exists): the commit a CONNACK waits for fails."""

    def setUp(self):
        super().setUp()
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        self.flag = os.path.join(tempfile.mkdtemp(prefix="nmq-failsync-"), "fail")
        self.addCleanup(shutil.rmtree, os.path.dirname(self.flag), True)
        self.env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
                    "NMQ_SLOWSYNC_MS": "0", "NMQ_FAILSYNC_FILE": self.flag,
                    "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}

    def test_nothing_sent_when_the_connack_commit_fails(self):
        # The CONNACK is not sent (the client connects again): neither is
        # anything that waited behind it, the messages of a subscription
        # made behind the CONNECT, a PINGRESP or a DISCONNECT.
        b = self.start(self.env)
        for version in (5, 4):
            cid = "cf-fail%d" % version
            props = {"SessionExpiryInterval": 3600} if version == 5 else None
            first = nmq.RawClient(b.port, version=version)
            self.clients.append(first)
            self.assertEqual(first.connect(cid, clean=False, props=props).rc, 0)
            # The stored session must be on disk before the disk fails: a
            # new session's CONNACK does not wait for its row, a SUBACK
            # does (and for what was queued before it). Without this, a
            # busy machine let the row's commit come after the flag: it
            # failed, the clean start then had nothing to delete, wrote
            # nothing, and its CONNACK rightly went.
            first.subscribe([("cf/keep", nmq.sub_opts(1))])
            first.disconnect()
            b.wait_disconnected(cid)
            open(self.flag, "w").close()
            flood = Flood(b.port, "cf/t", qos1_every=0)  # QoS 0: nothing stored
            flood.start()
            try:
                c = nmq.RawClient(b.port, version=version)
                self.clients.append(c)
                c.send(nmq.connect_bytes(cid, version=version, clean=True, props=props)
                       + nmq.subscribe_bytes([("cf/#", nmq.sub_opts(0))], pid=1,
                                             version=version)
                       + nmq.packet(nmq.PINGREQ, 0, b""))
                got = c.expect_closed(timeout=25, msg="CONNACK whose commit failed")
            finally:
                flood.stop()
                os.unlink(self.flag)
            self.assertEqual(got[:3], [], "v%d: nothing before a CONNACK that never went"
                             % version)
            self.assertIsNone(flood.assertion)



class ConnackWithResponseInfo(StoreCase):
    """A v5 clean start that asks for Response Information (its CONNACK
    carries a string built on the stack) over a stored session: the
    CONNACK waits for the delete's commit like any other, so a kill -9
    right after it does not bring the discarded session back."""

    def test_discarded_session_stays_discarded(self):
        if not os.path.exists(shim_path()):
            self.skipTest("slowsync shim not built")
        env = {"LD_PRELOAD": shim_path(), "NMQ_SLOWSYNC_DIR": self.db_dir,
               "NMQ_SLOWSYNC_MS": "300",
               "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        b = self.start(env)
        old = nmq.RawClient(b.port, version=5)
        self.clients.append(old)
        self.assertEqual(old.connect("cf-rinfo", clean=False,
                                     props={"SessionExpiryInterval": 3600}).rc, 0)
        old.subscribe([("cf/old", nmq.sub_opts(1))])  # SUBACK: committed
        old.disconnect()
        b.wait_disconnected("cf-rinfo")
        # A write that keeps the store in a slow fsync while the clean
        # start's delete is queued behind it.
        pub = nmq.RawClient(b.port, version=5)
        self.clients.append(pub)
        self.assertEqual(pub.connect("cf-rinfo-pub", clean=True).rc, 0)
        pub.send(nmq.publish_bytes("cf/ret", b"r", retain=True, version=5))
        time.sleep(0.05)
        c = nmq.RawClient(b.port, version=5)
        self.clients.append(c)
        ack = c.connect("cf-rinfo", clean=True, timeout=10,
                        props={"SessionExpiryInterval": 0, "RequestResponseInformation": 1})
        self.assertEqual(ack.rc, 0)
        self.assertEqual(ack.props.get("ResponseInformation"), "reply/cf-rinfo")
        self.kill9(b)
        self.brokers.remove(b)
        b = self.start()
        again = nmq.RawClient(b.port, version=5)
        self.clients.append(again)
        ack = again.connect("cf-rinfo", clean=False, props={"SessionExpiryInterval": 3600})
        self.assertEqual(ack.rc, 0)
        self.assertFalse(ack.session_present,
                         "the session discarded by an acknowledged clean start came back")


if __name__ == "__main__":
    unittest.main(verbosity=2)
