#!/usr/bin/python3
"""QoS 2 exactly once to a connected persistent subscriber across kill -9
(the durable store). A persistent QoS 2 publisher sends a steady numbered
stream while a persistent QoS 2 subscriber is online and completing every
flow; the broker is killed with SIGKILL at a random moment and restarted,
several rounds. Both clients keep their MQTT state across the restart as a
real client would: the publisher resends its unfinished PUBLISHes (DUP) and
PUBRELs, the subscriber keeps the packet ids it received and has not seen
a PUBREL for, and does not deliver a PUBLISH with such an id again
[MQTT-4.3.3]. Checks: every message the publisher got PUBCOMP for is
delivered exactly once, and nothing is delivered twice or out of order.

Without the broker holding a QoS 2 PUBLISH (and the PUBREL after its
PUBREC) until the store has committed its state, a kill in that window
delivers a message twice, or gives a new message a packet id the subscriber
still holds (which it then drops as a duplicate)."""

import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402

TOPIC = "q2online/data"
WINDOW = 10  # the publisher's QoS 2 flows in flight


class Sub:
    """A persistent 3.1.1 subscriber at QoS 2 on a raw socket. `held` (the
    ids received and not yet released) and `got` (what was delivered to the
    application, in order) outlive its connections."""

    def __init__(self):
        self.got = []
        self.held = set()
        self.last_rx = time.monotonic()
        self.raw = None
        self.thread = None
        self.stop = threading.Event()

    def connect(self, port, subscribe):
        self.raw = nmq.RawClient(port, version=4)
        ack = self.raw.connect("q2-sub", clean=False, keepalive=60)
        if subscribe:
            suback = self.raw.subscribe([(TOPIC, 2)])
            assert suback.codes == [2], suback
        self.stop.clear()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return ack

    def run(self):
        r = self.raw
        while not self.stop.is_set():
            try:
                p = r.read(timeout=0.2)
            except nmq.RecvTimeout:
                continue
            except (nmq.ConnectionClosed, OSError):
                return
            self.last_rx = time.monotonic()
            try:
                if p.type == nmq.PUBLISH and p.qos == 2:
                    if p.pid not in self.held:
                        self.got.append(int(p.payload))
                        self.held.add(p.pid)
                    r.send(nmq.ack_bytes(nmq.PUBREC, p.pid))
                elif p.type == nmq.PUBREL:
                    self.held.discard(p.pid)
                    r.send(nmq.ack_bytes(nmq.PUBCOMP, p.pid))
            except OSError:
                return

    def halt(self):
        self.stop.set()
        self.thread.join(10)
        self.raw.sock.close()


class Pub:
    """A persistent 3.1.1 QoS 2 publisher on a raw socket with up to WINDOW
    flows in flight. `flows` (pid -> [seq, PUBREC received]) and `completed`
    (seqs it got PUBCOMP for) outlive its connections."""

    def __init__(self):
        self.flows = {}
        self.completed = []
        self.seq = 0
        self.pid = 0
        self.new = True  # start new flows (else only finish the old ones)
        self.raw = None
        self.thread = None
        self.stop = threading.Event()

    def next_pid(self):
        # Ids are reused soon, as most clients do (the broker must have
        # forgotten an id before its PUBCOMP).
        while True:
            self.pid = self.pid % (2 * WINDOW) + 1
            if self.pid not in self.flows:
                return self.pid

    def connect(self, port):
        self.raw = nmq.RawClient(port, version=4)
        ack = self.raw.connect("q2-pub", clean=False, keepalive=60)
        self.stop.clear()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return ack

    def run(self):
        r = self.raw
        try:
            # Resume: the unfinished flows again, in order [MQTT-4.4.0-1].
            for pid, (seq, rec) in list(self.flows.items()):
                if rec:
                    r.send(nmq.ack_bytes(nmq.PUBREL, pid))
                else:
                    r.send(nmq.publish_bytes(TOPIC, str(seq), 2, dup=True, pid=pid))
            while not self.stop.is_set():
                while self.new and len(self.flows) < WINDOW:
                    pid = self.next_pid()
                    self.flows[pid] = [self.seq, False]
                    self.seq += 1  # this flow is resent if the send fails
                    r.send(nmq.publish_bytes(TOPIC, str(self.seq - 1), 2, pid=pid))
                try:
                    p = r.read(timeout=0.2)
                except nmq.RecvTimeout:
                    continue
                if p.type == nmq.PUBREC and p.pid in self.flows:
                    self.flows[p.pid][1] = True
                    r.send(nmq.ack_bytes(nmq.PUBREL, p.pid))
                elif p.type == nmq.PUBCOMP and p.pid in self.flows:
                    self.completed.append(self.flows.pop(p.pid)[0])
        except (nmq.ConnectionClosed, OSError):
            return

    def halt(self):
        self.stop.set()
        self.thread.join(10)
        self.raw.sock.close()


class TestQos2OnlineKill(StoreCase):
    ROUNDS = 6
    CONF = "mqtt.max_mqueue_len = 100000\n"

    def test_exactly_once_across_kill9(self):
        sub, pub = Sub(), Pub()
        rng = random.Random(int(os.environ.get("NMQ_TEST_SEED", time.time())))
        for rnd in range(self.ROUNDS + 1):
            last = rnd == self.ROUNDS
            b = self.start()
            ack = sub.connect(b.port, subscribe=rnd == 0)
            self.assertEqual(ack.session_present, rnd > 0)
            pub.new = not last
            ack = pub.connect(b.port)
            self.assertEqual(ack.session_present, rnd > 0)
            if not last:
                time.sleep(rng.uniform(0.3, 1.0))
                self.kill9(b)
                pub.halt()
                sub.halt()
                continue
            # The last round: no kill; every flow finishes.
            deadline = time.monotonic() + 30
            while (pub.flows or time.monotonic() - sub.last_rx < 1.0) \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            pub.halt()
            sub.halt()
        self.assertEqual(pub.flows, {}, "the publisher's flows did not finish")
        self.assertGreater(len(pub.completed), 100, "too little load to say anything")
        dups = sorted(s for s in set(sub.got) if sub.got.count(s) > 1)
        self.assertEqual(dups, [], "%d messages delivered more than once (of %d)"
                         % (len(dups), len(sub.got)))
        missing = sorted(set(pub.completed) - set(sub.got))
        self.assertEqual(missing, [], "completed to the publisher but never delivered "
                         "(of %d completed)" % len(pub.completed))
        self.assertEqual(sub.got, sorted(sub.got), "delivered out of order")
        print("%d messages completed over %d kill -9 rounds, each delivered once, in order"
              % (len(pub.completed), self.ROUNDS))


if __name__ == "__main__":
    unittest.main(verbosity=2)
