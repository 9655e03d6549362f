#!/usr/bin/python3
"""57: what the bridges' offline cache holds that nobody will send, and the
reconnect after a long link (docs/bridge.md, decisions/0034).

Debian's mosquitto is the remote, behind a fault-injecting proxy
(bridge_util.FaultProxy) that keeps the link down while the cache fills.
  * Cached forwards whose message expiry passed while our broker was down
    are dropped when the store opens (logged by bridge, counted), not left
    to count toward disk_cache_size until a read reaches them; the others
    are delivered, in order.
  * At start, the cached forwards of a bridge no longer in the
    configuration are dropped and logged at error with their count; those
    of a bridge present but disabled are kept; a bridge added again later
    finds its cache empty. A removed bridge that left only inbound QoS 2
    ids and mirrored filters has those dropped too.
  * A full cache takes the rows of forwards already acked (their delete
    still batched) first, and counts none of them as evicted.
  * A link that was up for a while and drops is tried again within half a
    second; one that drops soon after it came up does not start the
    backoff over: a remote that takes the link and drops it at once is
    tried ever less often."""

import base64
import http.client
import json
import re
import shutil
import sqlite3
import time
import unittest

import nmq
import nmq_ops
from bridge_util import (FakeRemote, FaultProxy, Mosquitto, RawRemote, bridge_conf, first_order,
                         health, need_mosquitto_remote)
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for


setUpModule = need_mosquitto_remote


def cache_conf(inst, size=100000):
    return ("bridges.mqtt.cache {\n disk_cache_size = %d\n mounted_file_path = \"%s\"\n}\n"
            % (size, inst.tmp))


class TestBridgeCacheLeftovers(OpsTestCase):

    def remote(self, inst):
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port)
        self.addCleanup(px.close)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("#", 1)
        return px, col

    def fwd(self, name, px, extra="", ver=5):
        return bridge_conf(name, "mqtt-tcp://127.0.0.1:%d" % px.port, ver, 2,
                           '{ local_topic = "q1/#", remote_topic = "", prefix = "%s/" }' % name,
                           extra="max_send_queue_len = 2\n" + extra)

    def test_expired_dropped_at_open(self):
        inst = self.instance()
        px, col = self.remote(inst)
        px.cut()  # down from the start: everything goes to the cache
        port = free_port()
        conf = inst.conf(port, extra=self.fwd("f", px) + cache_conf(inst))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        pub = self.client(port, "pub", version=5)
        pub.connect()
        for i in range(20):
            pub.publish("q1/s", b"e%d" % i, qos=1, props={"MessageExpiryInterval": 3})
            if i % 4 == 0:
                pub.publish("q1/s", b"k%d" % i, qos=1)
        pub.close()
        self.assert_stops(inst)  # before they expire (a running broker drops them)
        time.sleep(3.0)  # every e<i> expires while the broker is down
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        out = inst.output()
        self.assertRegex(out, r"client_id=\$bridge/f event=cache_expired_at_open rows=20\b",
                         out[-3000:])
        # What the cache holds now counts without them.
        self.assertRegex(out, r"event=opened durability=os queued_messages=5\b", out[-3000:])
        px.up()
        want = [b"k%d" % i for i in range(0, 20, 4)]
        wait_for(lambda: len(col.received) >= len(want), 10)
        time.sleep(0.5)
        got = first_order([x.payload for x in col.received if x.topic == "f/q1/s"])
        self.assertEqual(got, want, got)
        self.assert_stops(inst)

    # Cached forwards whose Message Expiry Interval passes while the broker
    # runs, with the link down, leave the backlog within seconds (the
    # store's sweep, once a second), memory and disk alike, counted in the
    # bridge's expired and dropped, without a reconnect (they stayed until
    # a read or an eviction reached them); the others are delivered, in
    # order, once the link is up.
    def test_expired_dropped_while_running(self):
        inst = self.instance()
        px, col = self.remote(inst)
        px.cut()
        port = free_port()
        conf = inst.conf(port, extra=self.fwd("f", px) + cache_conf(inst))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        pub = self.client(port, "pub", version=5)
        pub.connect()
        for i in range(20):
            pub.publish("q1/s", b"e%d" % i, qos=1, props={"MessageExpiryInterval": 1})
            if i % 4 == 0:
                pub.publish("q1/s", b"k%d" % i, qos=1)
        pub.close()
        h = health(mon, "f", timeout=10,
                   pred=lambda h: h["expired"] >= 20 and h["backlog_disk_counted"])
        self.assertEqual((h["expired"], h["dropped"], h["backlog"], h["reconnects"]),
                         (20, 20, 5, 0), h)
        self.assertRegex(inst.output(), r"event=cache_expired rows=\d+")
        self.assertNotIn("event=link_up", inst.output())
        px.up()
        want = [b"k%d" % i for i in range(0, 20, 4)]
        wait_for(lambda: len(col.received) >= len(want), 10)
        time.sleep(0.5)
        got = first_order([x.payload for x in col.received if x.topic == "f/q1/s"])
        self.assertEqual(got, want, got)
        self.assert_stops(inst)

    def test_removed_bridge_rows_dropped_at_start(self):
        inst = self.instance()
        px, col = self.remote(inst)
        px.cut()
        port = free_port()
        cache = cache_conf(inst)
        both = inst.conf(port, extra=self.fwd("f", px) + self.fwd("g", px) + cache,
                         name="both.conf")
        g_off = inst.conf(port, extra=self.fwd("f", px) + self.fwd("g", px, "enable = false")
                          + cache, name="g_off.conf")
        f_only = inst.conf(port, extra=self.fwd("f", px) + cache, name="f_only.conf")
        self.start_broker(inst, ["start", "--conf", both], port=port)
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(10):
            pub.publish("q1/s", b"%d" % i, qos=1)
        pub.close()
        self.assert_stops(inst)

        # Disabled, still configured: kept.
        self.start_broker(inst, ["start", "--conf", g_off], port=port)
        time.sleep(1.0)  # the listing at start has run
        self.assertNotIn("event=cache_dropped", inst.output())
        self.assert_stops(inst)

        # Removed: dropped, logged with the count; f's are untouched.
        self.start_broker(inst, ["start", "--conf", f_only], port=port)
        m = inst.wait_output(r"^.*bridge=g event=cache_dropped reason=not_configured rows=(\d+).*$",
                             timeout=5)
        self.assertEqual(m, ["10"], inst.output()[-3000:])
        self.assertRegex(inst.output(), r"(?m)^.*error.*bridge=g event=cache_dropped")
        self.assertNotRegex(inst.output(), r"bridge=f event=cache_dropped")
        self.assert_stops(inst)

        # g added back: nothing of it is left; f still has its ten.
        self.start_broker(inst, ["start", "--conf", both], port=port)
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        hg = health(mon, "g", timeout=8, pred=lambda h: h["backlog_disk_counted"])
        self.assertEqual(hg["backlog"], 0, hg)
        hf = health(mon, "f", timeout=8, pred=lambda h: h["backlog_disk_counted"])
        self.assertEqual(hf["backlog"], 10, hf)
        self.assertNotIn("event=cache_dropped", inst.output())
        px.up()
        want = [b"%d" % i for i in range(10)]
        wait_for(lambda: len([x for x in col.received if x.topic == "f/q1/s"]) >= 10, 10)
        time.sleep(0.5)
        self.assertEqual(first_order([x.payload for x in col.received if x.topic == "f/q1/s"]),
                         want)
        self.assertEqual([x.payload for x in col.received if x.topic == "g/q1/s"], [])
        self.assert_stops(inst)

    # A removed bridge that left no cached forward, only the packet id of
    # an inbound QoS 2 message (its PUBREC never reached the remote: the
    # proxy dropped it) and a filter it mirrored (transparent), has those
    # rows dropped at start too, logged with their counts (they stayed).
    def test_removed_bridge_ids_and_filters_dropped_at_start(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        px = FaultProxy(m.port, mqtt_up=True)
        self.addCleanup(px.close)
        port = free_port()
        cache = cache_conf(inst)
        g = bridge_conf("g", "mqtt-tcp://127.0.0.1:%d" % px.port, 5, 2,
                        subs='{ remote_topic = "down/#", qos = 2 }',
                        extra="clean_start = false\ntransparent = true")
        both = inst.conf(port, extra=self.fwd("f", px) + g + cache, name="both.conf")
        f_only = inst.conf(port, extra=self.fwd("f", px) + cache, name="f_only.conf")
        self.start_broker(inst, ["start", "--conf", both], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=2),
                        inst.output()[-2000:])

        def rows(table):
            con = sqlite3.connect(inst.path("nanomq.db"), timeout=5)
            try:
                return con.execute("SELECT count(*) FROM %s WHERE cid = '$bridge/g'"
                                   % table).fetchone()[0]
            finally:
                con.close()
        loc = self.client(port, "loc")
        loc.connect()
        loc.subscribe("mirrored/#", 1)
        px.drop_up = {5}  # PUBREC
        rp = self.client(m.port, "remote-pub", version=5)
        rp.connect()
        rp.publish("down/x", b"x", qos=2)
        self.assertTrue(wait_for(lambda: rows("rel") == 1 and rows("subs") == 1, 10),
                        (rows("rel"), rows("subs"), inst.output()[-2000:]))
        self.assert_stops(inst)

        self.start_broker(inst, ["start", "--conf", f_only], port=port)
        got = inst.wait_output(r"^.*bridge=g event=cache_dropped reason=not_configured rows=(\d+)"
                               r" qos2_ids=(\d+) filters=(\d+).*$", timeout=5)
        self.assertEqual(got, [("0", "1", "1")], inst.output()[-3000:])
        self.assertNotRegex(inst.output(), r"bridge=f event=cache_dropped")
        self.assert_stops(inst)
        self.assertEqual((rows("rel"), rows("subs")), (0, 0))

    # A full cache evicts rows the remote has acked but whose delete is
    # still batched in the bridge (up to a second) before the forwards it
    # would send, and counts none of them as evicted. The remote (a raw
    # socket, Receive Maximum 20) holds its PUBACKs: 25 forwards are cached
    # (disk_cache_size 30), 20 sent; it acks 10 (the bridge sends the 5
    # others, so the acks were taken), and 15 more come at once: the cache
    # must lose 10 rows, and those are the 10 acked ones (they were evicted
    # and counted, 10 "evicted" forwards that all arrived).
    def test_acked_rows_not_counted_as_evicted(self):
        inst = self.instance()
        r = RawRemote(receive_max=20, hold_puback=True)
        self.addCleanup(r.close)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % r.port, 5, 5,
            '{ local_topic = "q1/#", remote_topic = "" }') + cache_conf(inst, size=30))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(25):
            pub.publish("q1/s", b"%d" % i, qos=1, wait=False)
        pub.publish("other", b"sync", qos=1)  # every one above committed
        self.assertTrue(wait_for(lambda: r.publishes >= 20, 5), r.publishes)
        r.release(10)
        self.assertTrue(wait_for(lambda: r.publishes >= 25, 5), r.publishes)
        for i in range(25, 40):
            pub.publish("q1/s", b"%d" % i, qos=1, wait=False)
        pub.publish("other", b"sync", qos=1)
        r.release()  # everything from now on
        want = [b"%d" % i for i in range(40)]
        wait_for(lambda: len(set(r.delivered)) >= 40, 10)
        h = health(mon, "f", timeout=12, pred=lambda h: h["forwarded"] >= 40)
        self.assertEqual(first_order(list(r.delivered)), want)
        self.assertEqual((h["forwarded"], h["evicted"], h["dropped"]), (40, 0, 0), h)
        self.assertNotIn("event=evicted", inst.output())
        self.assert_stops(inst)

    # The listing at start runs on the store thread after what was queued
    # before it. Here another process holds the database's write lock (as
    # a slow disk would hold the store thread) while a bridge removed from
    # the file is started again by the REST API and forwards five more
    # messages, acked to their publisher once the lock is released: the
    # bridge is configured when the listing comes, so none of its rows is
    # dropped, the old ones nor the new ones (they all were, new ones
    # included: acknowledged, then lost).
    def test_bridge_started_before_the_listing_keeps_its_rows(self):
        inst = self.instance()
        px, col = self.remote(inst)
        px.cut()
        port, hport = free_port(), free_port()
        cache = cache_conf(inst)
        both = inst.conf(port, extra=self.fwd("f", px) + self.fwd("g", px) + cache,
                         name="both.conf")
        f_only = inst.conf(port, extra=self.fwd("f", px) + cache + (
            "http_server { port = %d, username = admin, password = public }\n" % hport),
            name="f_only.conf")
        self.start_broker(inst, ["start", "--conf", both], port=port)
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(5):
            pub.publish("q1/s", b"old%d" % i, qos=1)
        pub.close()
        self.assert_stops(inst)

        lock = sqlite3.connect(inst.path("nanomq.db"), isolation_level=None, timeout=10)
        self.addCleanup(lock.close)
        lock.execute("BEGIN IMMEDIATE")
        self.start_broker(inst, ["start", "--conf", f_only], port=port)
        body = json.dumps({"g": {
            "server": "mqtt-tcp://127.0.0.1:%d" % px.port, "proto_ver": 5, "clientid": "g-gw",
            "keepalive": "2s", "backoff_max": "2s", "max_send_queue_len": 2,
            "forwards": [{"local_topic": "q1/#", "remote_topic": "", "prefix": "g/"}]}})
        c = http.client.HTTPConnection("127.0.0.1", hport, timeout=10)
        c.request("PUT", "/api/v4/bridges/g", body=body, headers={
            "Authorization": "Basic " + base64.b64encode(b"admin:public").decode()})
        r = c.getresponse()
        self.assertEqual(r.status, 200, r.read())
        c.close()
        self.assertTrue(inst.wait_output(r"bridge=g .*event=started", timeout=5))
        sub = self.client(port, "local-sub")
        sub.connect()
        sub.subscribe("q1/#", 0)
        pub = self.client(port, "pub2")
        pub.connect()
        for i in range(5):
            pub.publish("q1/s", b"new%d" % i, qos=1, wait=False)
        self.assertTrue(wait_for(lambda: len(sub.received) >= 5, 5))
        time.sleep(0.2)  # routed: the forwards' rows are queued to the store
        lock.execute("COMMIT")
        px.up()
        want = [b"old%d" % i for i in range(5)] + [b"new%d" % i for i in range(5)]
        wait_for(lambda: len([x for x in col.received if x.topic == "g/q1/s"]) >= 10, 10)
        time.sleep(0.5)
        self.assertEqual(first_order([x.payload for x in col.received if x.topic == "g/q1/s"]),
                         want, inst.output()[-3000:])
        self.assertNotIn("event=cache_dropped", inst.output())
        self.assert_stops(inst)

    # A bridge whose name is empty (`bridges.mqtt { "" { ... } }`, which the
    # file allows) keeps its cache under "$bridge/": the listing of the
    # bridges at start is not a read of it. Its backlog survives a restart
    # and is delivered in order (it read the listing back as rows, without
    # a message, and crashed).
    def test_empty_bridge_name_keeps_its_cache(self):
        inst = self.instance()
        px, col = self.remote(inst)
        px.cut()
        port = free_port()
        body = self.fwd("X", px).split("{", 1)[1].replace("X/", "e/")
        conf = inst.conf(port, extra="bridges.mqtt {\n\"\" {" + body + "}\n" + cache_conf(inst))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        pub = self.client(port, "pub")
        pub.connect()
        for i in range(6):
            pub.publish("q1/s", b"%d" % i, qos=1)
        pub.close()
        self.assert_stops(inst)

        self.start_broker(inst, ["start", "--conf", conf], port=port)
        px.up()
        want = [b"%d" % i for i in range(6)]
        wait_for(lambda: len([x for x in col.received if x.topic == "e/q1/s"]) >= 6, 10)
        time.sleep(0.5)
        self.assertEqual(first_order([x.payload for x in col.received if x.topic == "e/q1/s"]),
                         want, inst.output()[-3000:])
        self.assertNotIn("event=cache_dropped", inst.output())
        self.assert_stops(inst)

    # A remote that answers CONNACK and closes the connection at once: each
    # link is up, briefly, and the delay goes on doubling (1 s, 2 s, 4 s,
    # each 50-100 %) instead of starting over at 1 s every time (a
    # reconnect about every 0.75 s, forever).
    def test_remote_closing_at_once_is_backed_off(self):
        inst = self.instance()
        fr = FakeRemote(close_after_connack=True)
        self.addCleanup(fr.close)
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "f", "mqtt-tcp://127.0.0.1:%d" % fr.port, 5, 2,
            '{ local_topic = "q1/#", remote_topic = "" }', extra="backoff_max = 8s"))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        # The delay is on the link_down line of each drop, the one line
        # logged for it: no attempt failed, so no connect_failed.
        rx = r"bridge=f server=\S+ event=link_down reason=.* retry_in_ms=(\d+)"
        m = inst.wait_output(rx, timeout=12, count=3)
        self.assertEqual(len(m), 3, inst.output()[-2000:])
        self.assertGreaterEqual(len(fr.connects), 3)
        d = [int(x) for x in m]
        self.assertTrue(500 <= d[0] <= 1000 and 1000 <= d[1] <= 2000 and 2000 <= d[2] <= 4000,
                        d)
        self.assertNotIn("event=connect_failed", inst.output())
        self.assert_stops(inst)

    def test_fast_first_retry_after_long_link(self):
        inst = self.instance()
        px, col = self.remote(inst)
        port = free_port()
        conf = inst.conf(port, extra=self.fwd("f", px, ver=4))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10))
        rx = r"bridge=f server=\S+ event=link_down reason=.* retry_in_ms=(\d+)"
        # Dropped right after it came up: backs off from 1 s (50-100 %).
        px.cut()
        m = inst.wait_output(rx, timeout=5)
        self.assertEqual(len(m), 1, inst.output()[-2000:])
        self.assertTrue(500 <= int(m[0]) <= 1000, m)
        px.up()
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=2))
        time.sleep(5.5)  # up for a while
        px.cut()
        m = inst.wait_output(rx, timeout=5, count=2)
        self.assertEqual(len(m), 2, inst.output()[-2000:])
        self.assertTrue(250 <= int(m[1]) <= 500, m)
        px.up()
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10, count=3))
        # Still forwarding.
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("q1/s", b"after", qos=1)
        wait_for(lambda: any(x.payload == b"after" for x in col.received), 10)
        self.assertTrue(any(x.topic == "f/q1/s" and x.payload == b"after"
                            for x in col.received))
        self.assert_stops(inst)

    # One line per change of the link: its drop is logged once, at info
    # with the delay before the next attempt (link_down), and the first
    # attempt that then fails at warn with that attempt's own reason
    # (connect_failed: refused, the remote being gone), the retries not.
    # Before, the drop also logged connect_failed with the drop's reason.
    def test_one_line_per_link_change(self):
        inst = self.instance()
        px, col = self.remote(inst)
        port = free_port()
        conf = inst.conf(port, extra=self.fwd("f", px, ver=4))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10))
        px.close()  # gone: its port refuses connections from now on
        down = inst.wait_output(r"bridge=f server=\S+ event=link_down reason=\"[^\"]*\" "
                                r"retry_in_ms=\d+", timeout=5)
        self.assertEqual(len(down), 1, inst.output()[-2000:])
        rx = r"bridge=f server=\S+ event=connect_failed reason=\"([^\"]*)\" retry_in_ms=\d+"
        failed = inst.wait_output(rx, timeout=5)
        self.assertEqual(len(failed), 1, inst.output()[-2000:])
        self.assertIn("refused", failed[0], inst.output()[-2000:])
        time.sleep(2.0)  # more attempts (0.5-1 s apart), none logged
        self.assertEqual(len(re.findall(rx, inst.output())), 1, inst.output()[-2000:])
        self.assertEqual(inst.output().count("event=link_down"), 1)
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
