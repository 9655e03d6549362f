#!/usr/bin/python3
"""51: store-and-forward through a link that drops, stalls and comes back
(docs/bridge.md "Guarantees").

A fault-injecting proxy (bridge_util.FaultProxy) sits between our broker's
bridge and the remote broker (Debian's mosquitto). Streams of QoS 1 and
QoS 2 forwards must arrive complete and in order (QoS 2 exactly once)
through cuts, a black hole (detected by the keepalive), delays and flapping;
and, with the offline cache, through a kill -9 and restart of our broker
during an outage, with the backlog replayed at once after the reconnect
(no new local traffic needed) and beyond max_send_queue_len (from disk)."""

import shutil
import signal
import sqlite3
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import (FaultProxy, Mosquitto, bridge_conf, first_order, health,
                         need_mosquitto_remote)
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for


setUpModule = need_mosquitto_remote


class TestBridgeFaults(OpsTestCase):

    def setup_link(self, ver, extra_conf="", keepalive=2, queue_len=1024, bridge_extra=""):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port)
        self.addCleanup(px.close)
        # The collector on the remote: a persistent QoS 2 subscriber that
        # stays connected throughout.
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        col.subscribe("q2/#", 2)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, ver, keepalive,
            '{ local_topic = "q1/#", remote_topic = "" },'
            '{ local_topic = "q2/#", remote_topic = "" }',
            extra="max_send_queue_len = %d\n%s" % (queue_len, bridge_extra)) + extra_conf)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        return inst, px, col, port, conf

    def check_streams(self, col, n1, n2, timeout, pad=b""):
        want1 = [b"%d" % i for i in range(n1)]
        want2 = [b"%d" % i for i in range(n2)]

        def done():
            with col._lock:
                got1 = {x.payload for x in col.received if x.topic == "q1/s"}
                got2 = [x.payload for x in col.received if x.topic == "q2/s"]
            return len(got1) >= n1 and len(got2) >= n2
        wait_for(done, timeout, step=0.2)
        time.sleep(0.5)  # late duplicates, if any
        with col._lock:
            got1 = [x.payload[:len(x.payload) - len(pad)] for x in col.received
                    if x.topic == "q1/s"]
            got2 = [x.payload for x in col.received if x.topic == "q2/s"]
        # QoS 1: all of them, in order of first arrival (repeats allowed).
        self.assertEqual(first_order(got1), want1,
                         "QoS 1 stream: %d of %d, first missing %r, as received: %s" % (
                             len(set(got1)), n1, sorted(set(want1) - set(got1))[:5],
                             " ".join(x.decode() for x in got1)))
        # QoS 2: exactly once, in order.
        self.assertEqual(got2, want2, "QoS 2 stream: %d received, %d distinct, want %d" % (
            len(got2), len(set(got2)), n2))

    # Both streams keep flowing while the link is cut, black-holed, delayed
    # and flapped; v3.1.1 and v5 links.
    def test_streams_through_faults(self):
        for ver in (5, 4):
            with self.subTest(proto_ver=ver):
                inst, px, col, port, _ = self.setup_link(ver)
                pub = self.client(port, "pub")
                pub.connect()
                n = 120
                done = threading.Event()
                errors = []

                def publish():
                    try:
                        for i in range(n):
                            pub.publish("q1/s", b"%d" % i, qos=1)
                            pub.publish("q2/s", b"%d" % i, qos=2)
                            time.sleep(0.04)
                    except AssertionError as e:
                        errors.append(e)
                    done.set()
                t = threading.Thread(target=publish, daemon=True)
                t.start()
                ups = lambda: inst.output().count("event=link_up")
                time.sleep(0.5)
                px.cut()                      # down ...
                time.sleep(1.0)
                n_up = ups()
                px.up()                       # ... and back
                self.assertTrue(wait_for(lambda: ups() > n_up, 8), inst.output()[-2000:])
                time.sleep(0.5)
                px.blackhole()                # a stall: only the keepalive sees it
                self.assertTrue(inst.wait_output(r"link stalled", timeout=8),
                                inst.output()[-2000:])
                n_up = ups()
                px.up()
                self.assertTrue(wait_for(lambda: ups() > n_up, 8), inst.output()[-2000:])
                px.delay(0.05)                # slow
                time.sleep(0.8)
                px.up()
                for _ in range(3):            # flapping
                    px.cut()
                    time.sleep(0.2)
                    px.up()
                    time.sleep(0.3)
                done.wait(30)
                t.join(5)
                self.assertEqual(errors, [])
                self.check_streams(col, n, n, timeout=25)
                out = inst.output()
                # Up and down are logged once per change.
                ups = out.count("event=link_up")
                downs = out.count("event=link_down")
                self.assertTrue(ups - downs in (0, 1), out[-3000:])
                self.assert_stops(inst)

    # A link cut again and again soon after each reconnect while acks are
    # flowing (a flapping uplink) is tried again at once each time, like a
    # link that was up for a while: it made progress, so it is not a remote
    # that takes the connection and closes it, whose attempts back off.
    # With the default backoff_max (60 s), backing off after such flaps
    # left a healthy link unused for up to a minute after it came back.
    def test_flapping_link_with_acks_reconnects_at_once(self):
        inst, px, col, port, _ = self.setup_link(4, keepalive=10, bridge_extra="backoff_max = 60s")
        pub = self.client(port, "pub")
        pub.connect()
        stop = threading.Event()

        def publish():
            i = 0
            while not stop.is_set():
                pub.publish("q1/s", b"%d" % i, qos=1)
                i += 1
                time.sleep(0.02)
            return i
        result = []
        t = threading.Thread(target=lambda: result.append(publish()), daemon=True)
        t.start()
        ups = lambda: inst.output().count("event=link_up")
        arrived = lambda: len(col.received)
        for flap in range(6):
            n_up, n_got = ups(), arrived()
            # acks flow on this link: what it sends reaches the remote
            self.assertTrue(wait_for(lambda: arrived() > n_got + 3, 5),
                            "flap %d: nothing forwarded\n%s" % (flap, inst.output()[-2000:]))
            px.cut()
            time.sleep(0.1)
            px.up()
            # back within a second (250-500 ms); backing off, the fourth
            # attempt would wait 4-8 s and the fifth 8-16 s
            self.assertTrue(wait_for(lambda: ups() > n_up, 4),
                            "flap %d: no reconnect within 4 s\n%s" % (flap, inst.output()[-2000:]))
        stop.set()
        t.join(5)
        self.check_streams(col, result[0], 0, timeout=15)
        self.assert_stops(inst)

    # The same for a bridge that only subscribes: a link on which the
    # remote sent a message made progress too. Backing off, a flapping
    # uplink left the remote's messages waiting up to backoff_max.
    def test_flapping_inbound_link_reconnects_at_once(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port)
        self.addCleanup(px.close)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "in", "mqtt-tcp://127.0.0.1:%d" % px.port, 4, 10,
            subs='{ remote_topic = "cmd/#", qos = 1 }',
            extra="backoff_max = 60s\nclean_start = false"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        local = self.client(port, "local")
        local.connect()
        local.subscribe("cmd/#", 1)
        cloud = self.client(m.port, "cloud")
        cloud.connect()
        stop = threading.Event()

        def publish():
            i = 0
            while not stop.is_set():
                cloud.publish("cmd/s", b"%d" % i, qos=1)
                i += 1
                time.sleep(0.02)
        t = threading.Thread(target=publish, daemon=True)
        t.start()
        self.addCleanup(stop.set)
        ups = lambda: inst.output().count("event=link_up")
        arrived = lambda: len(local.received)
        for flap in range(6):
            n_up, n_got = ups(), arrived()
            self.assertTrue(wait_for(lambda: arrived() > n_got + 3, 5),
                            "flap %d: nothing received\n%s" % (flap, inst.output()[-2000:]))
            px.cut()
            time.sleep(0.1)
            px.up()
            self.assertTrue(wait_for(lambda: ups() > n_up, 4),
                            "flap %d: no reconnect within 4 s\n%s" % (flap, inst.output()[-2000:]))
        stop.set()
        t.join(5)
        self.assert_stops(inst)

    # With the offline cache: an outage, a backlog beyond the memory queue
    # (so on disk), kill -9 of our broker, a restart still in the outage,
    # then the link comes back: the backlog arrives at once, complete and
    # in order, QoS 2 exactly once, without any new local publish.
    def test_kill9_during_outage_with_cache(self):
        inst = self.instance()
        cache = "bridges.mqtt.cache {\n disk_cache_size = 100000\n mounted_file_path = \"%s\"\n}\n" \
            % inst.tmp
        inst, px, col, port, conf = self.setup_link(4, cache, queue_len=40)
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(5):
            pub.publish("q1/s", b"%d" % i, qos=1)
            pub.publish("q2/s", b"%d" % i, qos=2)
        wait_for(lambda: len(col.received) >= 10, 5)
        # Arrival at the remote is not completion: a QoS 2 forward stays in
        # the backlog until its PUBCOMP. Cut only once all ten completed,
        # so that the backlog counted below is exactly what the outage
        # buffered.
        mon = self.client(port, "mon0")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        h = health(mon, "f", timeout=10, pred=lambda h: h["backlog"] == 0 and h["inflight"] == 0)
        self.assertEqual((h or {}).get("backlog"), 0, h)
        mon.close()
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        n1, n2 = 300, 150
        for i in range(5, n1):
            pub.publish("q1/s", b"%d" % i, qos=1)
            if i < n2:
                pub.publish("q2/s", b"%d" % i, qos=2)
        pub.close()
        time.sleep(0.5)  # the last group commit
        inst.kill(signal.SIGKILL)
        inst.proc.wait(5)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        # The restarted broker counts what its cache holds (health).
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        h = health(mon, "f", timeout=8, pred=lambda h: h["backlog_disk_counted"])
        self.assertEqual(h["backlog"], (n1 - 5) + (n2 - 5), h)
        self.assertNotEqual(h["state"], "up", h)
        # Between attempts the health says so (as REST does), not "down".
        h = health(mon, "f", timeout=8, pred=lambda h: h["state"] == "backing_off")
        self.assertEqual((h or {}).get("state"), "backing_off", h)
        px.up()
        self.check_streams(col, n1, n2, timeout=20)
        self.assert_stops(inst)

    # With the cache alone (no sqlite section), a forward's PUBACK waits
    # for its cache write to commit: a publisher pipelines QoS 1 publishes
    # during an outage, our broker is killed -9 the moment the last PUBACK
    # arrives, and after a restart every acked message reaches the remote.
    def test_kill9_right_after_acks_with_cache(self):
        inst = self.instance()
        cache = ("bridges.mqtt.cache {\n disk_cache_size = 100000\n"
                 " mounted_file_path = \"%s\"\n}\n" % inst.tmp)
        inst, px, col, port, conf = self.setup_link(5, cache, queue_len=64)
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        pub = nmq.RawClient(port, 4)
        self.addCleanup(pub.close)
        self.assertEqual(pub.connect("pipeliner").rc, 0)
        n = 1500
        pad = b" " * 16000  # large rows: commits that take a while
        burst = b"".join(nmq.publish_bytes("q1/s", b"%d" % i + pad, 1, pid=i + 1)
                         for i in range(n))
        pub.send(burst)
        for i in range(n):
            pub.expect(nmq.PUBACK, 10, pid=i + 1)
        inst.kill(signal.SIGKILL)  # at once: no time for a late commit
        inst.proc.wait(5)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        px.up()
        self.check_streams(col, n, 0, timeout=30, pad=pad)
        self.assert_stops(inst)

    # Mosquitto delivers a QoS 2 message on our PUBREL and then forgets its
    # packet id. Here the store is held (another process holds the
    # database's write lock, as a slow disk would) while a backlog of QoS 2
    # forwards drains, and our broker is killed -9 before the lock goes: a
    # PUBREL waits for the commit of its message's RELEASED state, so
    # nothing was delivered yet, and after the restart each message arrives
    # exactly once, in order. (The PUBRELs went at once: the remote
    # delivered, the rows still said QUEUED, and the restart sent every one
    # again as a new message.)
    def test_kill9_qos2_pubrel_waits_for_its_state(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port)
        self.addCleanup(px.close)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q2/#", 2)
        port = free_port()
        cache = ("bridges.mqtt.cache {\n disk_cache_size = 100000\n"
                 " mounted_file_path = \"%s\"\n}\n" % inst.tmp)
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % px.port, 4, 5,
            '{ local_topic = "q2/#", remote_topic = "", qos = 2 }',
            extra="clean_start = false") + cache)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        n = 200
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(n):
            pub.publish("q2/s", b"%d" % i, qos=1, wait=False)
        pub.publish("other", b"sync", qos=1)  # every one above committed
        lock = sqlite3.connect(inst.path("nanomq.db"), isolation_level=None, timeout=10)
        self.addCleanup(lock.close)
        lock.execute("BEGIN IMMEDIATE")
        px.up()
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=2))
        time.sleep(1.0)  # the window's PUBLISHes and PUBRECs have crossed
        inst.kill(signal.SIGKILL)
        inst.proc.wait(5)
        lock.execute("COMMIT")
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        wait_for(lambda: len({x.payload for x in col.received}) >= n, 20)
        time.sleep(0.5)
        got = [x.payload for x in col.received if x.topic == "q2/s"]
        self.assertEqual(got, [b"%d" % i for i in range(n)],
                         "%d received, %d distinct" % (len(got), len(set(got))))
        self.assert_stops(inst)

    # A stalled link never slows local publishers: with the link black-holed
    # (bytes accepted, nothing answered), local QoS 1 publishes are acked at
    # local speed; the backlog goes out once the link is reset and back.
    def test_stalled_link_does_not_slow_publishers(self):
        inst, px, col, port, _ = self.setup_link(5, keepalive=3, queue_len=5000)
        pub = self.client(port, "pub")
        pub.connect()
        n = 800
        t0 = time.monotonic()
        for i in range(n):  # the same publishes, not forwarded: the baseline
            pub.publish("other/s", b"%d" % i, qos=1)
        base = time.monotonic() - t0
        px.blackhole()
        time.sleep(0.2)
        t0 = time.monotonic()
        for i in range(n):
            pub.publish("q1/s", b"%d" % i, qos=1)
        took = time.monotonic() - t0
        local = self.client(port, "local-sub")  # the broker still serves others
        self.assertEqual(local.connect(), 0)
        self.assertLess(took, 2 * base + 1.0,
                        "%d local QoS 1 publishes took %.2f s with the link stalled, %.2f s "
                        "without forwarding" % (n, took, base))
        self.assertTrue(inst.wait_output(r"link stalled", timeout=10), inst.output()[-2000:])
        px.up()
        self.check_streams(col, n, 0, timeout=20)
        self.assert_stops(inst)

    # A full cache evicts its oldest messages, counts them, and forwards the
    # rest in order when the link comes back.
    def test_full_cache_evicts_oldest(self):
        inst = self.instance()
        cache = ("bridges.mqtt.cache {\n disk_cache_size = 50\n mounted_file_path = \"%s\"\n}\n"
                 % inst.tmp)
        inst, px, col, port, conf = self.setup_link(5, cache, queue_len=10)
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(100):
            pub.publish("q1/s", b"%d" % i, qos=1)
        time.sleep(0.5)
        px.up()
        want = [b"%d" % i for i in range(50, 100)]
        wait_for(lambda: len(col.received) >= 50, 10)
        time.sleep(0.5)
        got = first_order([x.payload for x in col.received if x.topic == "q1/s"])
        self.assertEqual(got, want, " ".join(x.decode() for x in got))
        h = health(mon, "f", timeout=12, pred=lambda h: h["evicted"] > 0)
        self.assertEqual(h["evicted"], 50, h)
        self.assertEqual(h["dropped"], 50, h)
        self.assert_stops(inst)

    # A clean stop (SIGTERM) during an outage keeps the backlog too.
    def test_restart_during_outage_with_cache(self):
        inst = self.instance()
        cache = ("bridges.mqtt.cache {\n mounted_file_path = \"%s\"\n}\n" % inst.tmp)
        inst, px, col, port, conf = self.setup_link(5, cache, queue_len=16)
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5))
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(60):
            pub.publish("q1/s", b"%d" % i, qos=1)
            pub.publish("q2/s", b"%d" % i, qos=2)
        pub.close()
        self.assert_stops(inst)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        px.up()
        self.check_streams(col, 60, 60, timeout=15)
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
