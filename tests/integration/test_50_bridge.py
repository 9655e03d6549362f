#!/usr/bin/python3
"""50: MQTT bridges (docs/bridge.md): forwards and subscriptions with topic
rewriting, v3.1.1 and v5 links to a real remote broker (Debian's mosquitto,
and our own broker), the loop guard of a bridge that forwards and
subscribes the same topics, health on $SYS/brokers/bridges/<name>, QoS 0
dropped and counted while the link is down, TLS (a wrong CA is refused,
the right one works), and reload (a bridge changed keeps its queue, one
removed stops, one added starts).

The link faults and restarts are in test_51_bridge_faults.py."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import nmq
import nmq_ops
from bridge_util import (FakeRemote, FaultProxy, MarkerRefusingProxy, Mosquitto, bridge_conf,
                         first_order, health)
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for

CERTS = None


def setUpModule():
    global CERTS
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()
    if shutil.which("mosquitto") is None:
        raise unittest.SkipTest("Debian's mosquitto is needed as the remote broker")
    CERTS = tempfile.mkdtemp(prefix="nmq-bridge-pki-")
    subprocess.run(["bash", os.path.join(nmq_ops.SRC, "scripts", "gen-certs.sh"), CERTS],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tearDownModule():
    if CERTS and not nmq.KEEP_TMP:
        shutil.rmtree(CERTS, ignore_errors=True)


class BridgeCase(OpsTestCase):

    def remote_mosquitto(self, inst):
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        return m

    def proxy(self, port):
        p = FaultProxy(port)
        self.addCleanup(p.close)
        return p

    def broker(self, inst, extra, name="nanomq.conf"):
        port = free_port()
        conf = inst.conf(port, extra=extra, name=name)
        proc = self.start_broker(inst, ["start", "--conf", conf], port=port)
        return port, proc, conf

    def linked(self, inst, count=1, timeout=10.0, proc=None):
        hits = inst.wait_output(r"event=link_up", timeout=timeout, count=count, proc=proc)
        self.assertGreaterEqual(len(hits), count, "link not up:\n" + inst.output(proc)[-3000:])


class TestBridgeBasics(BridgeCase):

    # Forwards rewrite the topic (remote_topic, prefix, suffix) and override
    # QoS; subscriptions publish locally under local_topic / prefix. A v3.1.1
    # link to mosquitto.
    def test_forward_and_subscription_v311(self):
        inst = self.instance()
        m = self.remote_mosquitto(inst)
        fwd = ('{ local_topic = "sensors/#", remote_topic = "", prefix = "site1/", qos = 1 },'
               '{ local_topic = "alarm", remote_topic = "alerts/all", suffix = "/x", qos = 2 }')
        sub = ('{ remote_topic = "cmd/#", qos = 1, prefix = "cloud/" },'
               '{ remote_topic = "cfg/one", local_topic = "config", qos = 2 }')
        port, _, _ = self.broker(inst, bridge_conf(
            "b1", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 10, fwd, sub))
        self.linked(inst)
        remote = self.client(m.port, "remote-sub")
        remote.connect()
        remote.subscribe("site1/#", 2)
        remote.subscribe("alerts/#", 2)
        remote.subscribe("other/#", 2)
        local = self.client(port, "local-sub")
        local.connect()
        local.subscribe("cloud/#", 2)
        local.subscribe("config", 2)
        pub = self.client(port, "local-pub")
        pub.connect()
        pub.publish("sensors/t1", b"21.5", qos=0)
        pub.publish("alarm", b"fire", qos=1)
        got = remote.wait_messages(2, timeout=5)
        by_topic = {x.topic: x for x in got}
        self.assertEqual(by_topic["site1/sensors/t1"].payload, b"21.5")
        self.assertEqual(by_topic["site1/sensors/t1"].qos, 1)  # overridden
        self.assertEqual(by_topic["alerts/all/x"].payload, b"fire")
        self.assertEqual(by_topic["alerts/all/x"].qos, 2)  # the forward's qos overrides
        rpub = self.client(m.port, "remote-pub")
        rpub.connect()
        rpub.publish("cmd/reboot", b"now", qos=1)
        rpub.publish("cfg/one", b"v2", qos=2)
        got = local.wait_messages(2, timeout=5)
        self.assertEqual(sorted((x.topic, x.payload) for x in got),
                         [("cloud/cmd/reboot", b"now"), ("config", b"v2")])
        # Not forwarded: no forward matches.
        pub.publish("other/topic", b"no", qos=1)
        remote.expect_no_message(0.5)

    # A bridge that forwards and subscribes the same topics does not echo:
    # v5 (No Local at the remote, origin marking here) with our own broker as
    # the remote; v3.1.1 with mosquitto and with our own broker (the bridge
    # marker on CONNECT: the remote sends nothing back); and v3.1.1 with a
    # remote that refuses the marker (our broker behind a proxy refusing
    # it: the digests of recent forwards catch the echo).
    def test_both_ways_no_echo(self):
        for ver, remote in ((5, "ours"), (4, "mosquitto"), (4, "ours"), (4, "refusing")):
            with self.subTest(proto_ver=ver, remote=remote):
                inst = self.instance()
                if remote in ("ours", "refusing"):
                    rport = free_port()
                    rinst = self.instance()
                    self.start_broker(rinst, ["start", "--conf", rinst.conf(rport)], port=rport)
                else:
                    rport = self.remote_mosquitto(inst).port
                bport = rport
                if remote == "refusing":
                    px = MarkerRefusingProxy(rport)
                    self.addCleanup(px.close)
                    bport = px.port
                both_f = '{ local_topic = "x/#", remote_topic = "", qos = 1 }'
                both_s = '{ remote_topic = "x/#", qos = 1 }'
                port, _, _ = self.broker(inst, bridge_conf(
                    "loop", "mqtt-tcp://127.0.0.1:%d" % bport, ver, 10, both_f, both_s))
                self.linked(inst)
                a = self.client(port, "a-sub", version=ver)
                a.connect()
                a.subscribe("x/#", 1)
                b = self.client(rport, "b-sub", version=ver)
                b.connect()
                b.subscribe("x/#", 1)
                time.sleep(0.3)  # the bridge's SUBSCRIBE is in place
                a.publish("x/from-a", b"1", qos=1)
                self.assertEqual(b.wait_message(5).topic, "x/from-a")
                self.assertEqual(a.wait_message(5).topic, "x/from-a")
                b.publish("x/from-b", b"2", qos=1)
                self.assertEqual(a.wait_message(5).topic, "x/from-b")
                self.assertEqual(b.wait_message(5).topic, "x/from-b")
                a.expect_no_message(1.0)
                b.expect_no_message(0.3)
                if ver == 4 and remote == "ours":
                    # Our broker takes the marker: nothing came back.
                    self.assertNotIn("event=bridge_marker_refused", inst.output())
                    mon = self.client(port, "mon")
                    mon.connect()
                    mon.subscribe("$SYS/brokers/bridges/#", 0)
                    h = health(mon, "loop", timeout=12)
                    self.assertEqual(h["loop_guarded"], 0, h)
                if remote == "refusing":
                    # The remote refused the bridge marker: the echo of the
                    # forward came back and was dropped by its digest.
                    self.assertIn("event=bridge_marker_refused", inst.output())
                    mon = self.client(port, "mon")
                    mon.connect()
                    mon.subscribe("$SYS/brokers/bridges/#", 0)
                    h = health(mon, "loop", timeout=12, pred=lambda h: h["loop_guarded"] >= 1)
                    self.assertGreaterEqual(h["loop_guarded"], 1, h)
                    # A burst of the same payload: each copy once, no echo.
                    for _ in range(5):
                        a.publish("x/burst", b"same", qos=1)
                    self.assertEqual(len(b.wait_messages(5, timeout=5)), 5)
                    self.assertEqual(len(a.wait_messages(5, timeout=5)), 5)
                    a.expect_no_message(1.0)

    # A 3.1.1 link sends the bridge marker (protocol level | 0x80); a remote
    # that refuses it (CONNACK 0x01) gets a plain CONNECT at once, and the
    # link works.
    def test_v311_marker_refused_falls_back(self):
        rinst = self.instance()
        rport = free_port()
        self.start_broker(rinst, ["start", "--conf", rinst.conf(rport)], port=rport)
        px = MarkerRefusingProxy(rport)
        self.addCleanup(px.close)
        inst = self.instance()
        port, _, _ = self.broker(inst, bridge_conf(
            "mk", "mqtt-tcp://127.0.0.1:%d" % px.port, 4, 10,
            '{ local_topic = "m/#", remote_topic = "" }'))
        self.linked(inst, timeout=5)
        self.assertEqual(inst.output().count("event=bridge_marker_refused"), 1, inst.output())
        remote = self.client(rport, "remote")
        remote.connect()
        remote.subscribe("m/#", 1)
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("m/1", b"plain", qos=1)
        self.assertEqual(remote.wait_message(5).payload, b"plain")

    # Our broker as the remote of a Mosquitto bridge (3.1.1, its default
    # try_private: the bridge marker on CONNECT), `topic x/# both`: the
    # CONNECT is taken at once, and what the bridge publishes is not sent
    # back to it (No Local, as Mosquitto does for such a bridge), so a
    # message crosses once each way. Refusing the marker, our broker sent
    # every message back: the gateway's subscribers got it twice.
    def test_mosquitto_bridge_into_ours_no_echo(self):
        rinst = self.instance()
        rport = free_port()
        self.start_broker(rinst, ["start", "--conf", rinst.conf(rport)], port=rport)
        inst = self.instance()
        m = Mosquitto(inst.tmp, extra="connection gw\naddress 127.0.0.1:%d\n"
                      "topic x/# both 1\nrestart_timeout 1\n" % rport)
        self.addCleanup(m.stop)
        self.assertTrue(wait_for(lambda: "client_id=" in rinst.output()
                                 and "proto=4" in rinst.output(), 5), rinst.output()[-2000:])
        gw = self.client(m.port, "gw-sub")
        gw.connect()
        gw.subscribe("x/#", 1)
        cloud = self.client(rport, "cloud-sub")
        cloud.connect()
        cloud.subscribe("x/#", 1)
        time.sleep(0.5)  # the bridge's SUBSCRIBE is in place
        gw.publish("x/from-gw", b"1", qos=1)
        self.assertEqual(cloud.wait_message(5).payload, b"1")
        self.assertEqual(gw.wait_message(5).payload, b"1")
        cloud.publish("x/from-cloud", b"2", qos=1)
        self.assertEqual(gw.wait_message(5).payload, b"2")
        self.assertEqual(cloud.wait_message(5).payload, b"2")
        gw.expect_no_message(1.0)
        cloud.expect_no_message(0.3)

    # Health on $SYS/brokers/bridges/<name>: state, counters; QoS 0 forwards
    # are dropped and counted while the link is down, QoS 1 ones kept.
    def test_health_and_qos0_while_down(self):
        inst = self.instance()
        m = self.remote_mosquitto(inst)
        px = self.proxy(m.port)
        port, _, _ = self.broker(inst, bridge_conf(
            "hb", "mqtt-tcp://127.0.0.1:%d" % px.port, 5, 2,
            '{ local_topic = "t/#", remote_topic = "" }'))
        self.linked(inst)
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        h = health(mon, "hb", pred=lambda h: h["state"] == "up")
        self.assertEqual(h["state"], "up", h)
        remote = self.client(m.port, "remote", version=5)
        remote.connect()
        remote.subscribe("t/#", 1)
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("t/1", b"a", qos=1)
        self.assertEqual(remote.wait_message(5).payload, b"a")
        px.cut()
        inst.wait_output(r"event=link_down", timeout=5)
        for i in range(5):
            pub.publish("t/q0", b"%d" % i, qos=0)
        pub5 = self.client(port, "pub5", version=5)
        pub5.connect()
        pub5.publish("t/exp", b"expires", qos=1, props={"MessageExpiryInterval": 1})
        pub.publish("t/q1", b"kept", qos=1)
        h = health(mon, "hb", timeout=8,
                   pred=lambda h: h["state"] != "up" and h["dropped_qos0"] >= 5)
        self.assertGreaterEqual(h["dropped_qos0"], 5, h)
        self.assertEqual(h["backlog"], 2, h)
        time.sleep(1.2)  # the first one's expiry passes while it waits
        self.assertNotEqual(h["last_error"], "", h)
        px.up()
        got = remote.wait_message(10)
        self.assertIsNotNone(got, "queued QoS 1 message not delivered after reconnect")
        self.assertEqual(got.payload, b"kept")
        remote.expect_no_message(0.5)  # the QoS 0 ones dropped, the expired one not sent
        h = health(mon, "hb", timeout=12,
                   pred=lambda h: h["state"] == "up" and h["backlog"] == 0)
        self.assertEqual((h["state"], h["backlog"], h["expired"]), ("up", 0, 1), h)
        self.assertGreaterEqual(h["forwarded"], 2, h)
        self.assertGreaterEqual(h["reconnects"], 1, h)

    # What comes from the remote is published as by a client: the ACL's
    # publish rules apply to the bridge's client id.
    def test_inbound_publish_checked_by_acl(self):
        inst = self.instance()
        m = self.remote_mosquitto(inst)
        acl = ('auth.acl.rules = [\n'
               '  {permit = deny, clientid = "acl-gw", action = publish, topics = ["cmd/secret"]}\n'
               '  {permit = allow}\n]\n')
        port, _, _ = self.broker(inst, acl + bridge_conf(
            "acl", "mqtt-tcp://127.0.0.1:%d" % m.port, 5, 10, "",
            '{ remote_topic = "cmd/#", qos = 1 }'))
        self.linked(inst)
        local = self.client(port, "local")
        local.connect()
        local.subscribe("cmd/#", 1)
        time.sleep(0.3)
        rpub = self.client(m.port, "rpub")
        rpub.connect()
        rpub.publish("cmd/secret", b"no", qos=1)
        rpub.publish("cmd/ok", b"yes", qos=1)
        got = local.wait_message(5)
        self.assertEqual((got.topic, got.payload), ("cmd/ok", b"yes"))
        local.expect_no_message(0.5)

    # Failover: the first server refuses; the bridge moves on to the
    # hybrid_servers in turn and forwards through the one that answers.
    def test_hybrid_servers_failover(self):
        inst = self.instance()
        m = self.remote_mosquitto(inst)
        dead = free_port()
        port, _, _ = self.broker(inst, bridge_conf(
            "hy", "mqtt-tcp://127.0.0.1:%d" % dead, 4, 10,
            '{ local_topic = "h/#", remote_topic = "" }',
            extra='hybrid_bridging = true\nhybrid_servers = ["mqtt-tcp://127.0.0.1:%d", '
                  '"mqtt-tcp://127.0.0.1:%d"]' % (free_port(), m.port)))
        self.linked(inst, timeout=15)
        self.assertIn("server=mqtt-tcp://127.0.0.1:%d event=link_up" % m.port, inst.output())
        remote = self.client(m.port, "remote")
        remote.connect()
        remote.subscribe("h/#", 1)
        pub = self.client(port, "pub")
        pub.connect()
        pub.publish("h/1", b"via-backup", qos=1)
        self.assertEqual(remote.wait_message(5).payload, b"via-backup")

    # TLS: the server certificate is verified by default; a wrong CA never
    # brings the link up, the right one does.
    def test_tls_wrong_ca_refused(self):
        rinst = self.instance()
        rport = free_port()
        sport = free_port()
        while sport == rport:  # free_port() may hand out the same port twice
            sport = free_port()
        rconf = rinst.conf(rport, extra=(
            "listeners.ssl {\n bind = \"127.0.0.1:%d\"\n keyfile = \"%s/server.key\"\n"
            " certfile = \"%s/server.crt\"\n}\n" % (sport, CERTS, CERTS)))
        self.start_broker(rinst, ["start", "--conf", rconf], port=rport)
        remote = self.client(rport, "tls-remote")
        remote.connect()
        remote.subscribe("s/#", 1)
        for ca, ok in (("other-ca.crt", False), ("ca.crt", True)):
            with self.subTest(ca=ca):
                inst = self.instance()
                port, _, _ = self.broker(inst, bridge_conf(
                    "tb", "tls+mqtt-tcp://localhost:%d" % sport, 4, 10,
                    '{ local_topic = "s/#", remote_topic = "", qos = 1 }',
                    extra='ssl { cacertfile = "%s/%s" }' % (CERTS, ca)))
                if ok:
                    self.linked(inst)
                    pub = self.client(port, "tls-pub")
                    pub.connect()
                    pub.publish("s/1", b"secure", qos=1)
                    self.assertEqual(remote.wait_message(5).payload, b"secure")
                else:
                    hits = inst.wait_output(r"event=connect_failed", timeout=10)
                    self.assertTrue(hits, inst.output()[-2000:])
                    time.sleep(1.5)
                    self.assertNotIn("event=link_up", inst.output())
                    pub = self.client(port, "tls-pub")
                    pub.connect()
                    pub.publish("s/1", b"must-not-pass", qos=1)
                    remote.expect_no_message(0.5)
                self.assert_stops(inst)


class TestBridgeV5Properties(BridgeCase):

    # What the remote receives on a v5 link: the CONNECT's user properties,
    # the will's properties (payload format, expiry, content type, response
    # topic, correlation data, delay, user properties), and the user
    # properties and identifier of the SUBSCRIBE.
    def test_connect_will_and_subscribe_properties(self):
        inst = self.instance()
        fake = FakeRemote()
        self.addCleanup(fake.close)
        extra = (
            "conn_properties { session_expiry_interval = 60, "
            "user_property { site = \"s17\", rack = \"4\" } }\n"
            "will { topic = \"gw/status\", payload = \"offline\", qos = 1, properties {"
            " payload_format_indicator = 1, message_expiry_interval = 300,"
            " content_type = \"text/plain\", response_topic = \"gw/reply\","
            " correlation_data = \"c1\", will_delay_interval = 5,"
            " user_property { why = \"link lost\" } } }\n"
            "sub_properties { identifier = 7, user_property { role = \"gw\" } }\n")
        port, _, _ = self.broker(inst, bridge_conf(
            "p5", "mqtt-tcp://127.0.0.1:%d" % fake.port, 5, 10, "",
            '{ remote_topic = "cmd/#", qos = 1 }', extra=extra))
        self.assertTrue(wait_for(lambda: fake.connects and fake.subscribes, 10),
                        inst.output()[-2000:])
        c = fake.connects[0]
        self.assertEqual(c["level"], 5)
        self.assertEqual(sorted(c["props"]["UserProperty"]), [("rack", "4"), ("site", "s17")])
        self.assertEqual(c["props"]["SessionExpiryInterval"], 60)
        w = c["will_props"]
        self.assertEqual((c["will_topic"], c["will_payload"]), ("gw/status", b"offline"))
        self.assertEqual(w["PayloadFormatIndicator"], 1)
        self.assertEqual(w["MessageExpiryInterval"], 300)
        self.assertEqual(w["ContentType"], "text/plain")
        self.assertEqual(w["ResponseTopic"], "gw/reply")
        self.assertEqual(w["CorrelationData"], b"c1")
        self.assertEqual(w["WillDelayInterval"], 5)
        self.assertEqual(w["UserProperty"], [("why", "link lost")])
        s = fake.subscribes[0]
        self.assertEqual(s["filters"][0][0], "cmd/#")
        self.assertEqual(s["props"]["UserProperty"], [("role", "gw")])
        self.assertEqual(s["props"]["SubscriptionIdentifier"], [7])
        self.assert_stops(inst)

    # A v3.1.1 link sends none of them (the codec would refuse them).
    def test_v311_sends_no_properties(self):
        inst = self.instance()
        m = self.remote_mosquitto(inst)
        extra = ("conn_properties { user_property { site = \"s17\" } }\n"
                 "will { topic = \"gw/status\", payload = \"offline\","
                 " properties { content_type = \"text/plain\" } }\n")
        self.broker(inst, bridge_conf("p4", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 10, "",
                                      '{ remote_topic = "cmd/#", qos = 1 }', extra=extra))
        self.linked(inst)
        self.assert_stops(inst)


class TestBridgeReload(BridgeCase):

    # A bridge changed by a reload keeps its queue (messages queued before
    # keep their rewritten topic); removed, it stops forwarding; added back,
    # it starts again.
    def test_reload_change_remove_add(self):
        inst = self.instance()
        m = self.remote_mosquitto(inst)
        px = self.proxy(m.port)
        remote = self.client(m.port, "remote", version=5)
        remote.connect()
        remote.subscribe("#", 1)
        one = bridge_conf("rb", "mqtt-tcp://127.0.0.1:%d" % px.port, 5, 2,
                          '{ local_topic = "r/#", remote_topic = "", prefix = "one/", qos = 1 }')
        port, proc, conf = self.broker(inst, one)
        self.linked(inst)
        pub = self.client(port, "pub")
        pub.connect()
        px.cut()
        inst.wait_output(r"event=link_down", timeout=5)
        for i in range(10):
            pub.publish("r/%d" % i, b"%d" % i, qos=1)
        inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url, extra=one.replace(
            "one/", "two/")))
        inst.kill(signal.SIGHUP)
        self.assertTrue(inst.wait_output(r"bridge=rb event=reconfigured", timeout=5))
        px.up()
        got = remote.wait_messages(10, timeout=10)
        self.assertEqual([x.topic for x in got], ["one/r/%d" % i for i in range(10)])
        self.linked(inst, count=2)
        pub.publish("r/new", b"n", qos=1)
        self.assertEqual(remote.wait_message(5).topic, "two/r/new")
        # Removed: no longer forwards.
        inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url))
        inst.kill(signal.SIGHUP)
        self.assertTrue(inst.wait_output(r"bridge=rb event=stopped", timeout=5))
        pub.publish("r/gone", b"g", qos=1)
        remote.expect_no_message(0.7)
        # Added back.
        inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url, extra=one))
        inst.kill(signal.SIGHUP)
        self.linked(inst, count=3)
        time.sleep(0.2)
        pub.publish("r/back", b"b", qos=1)
        self.assertEqual(remote.wait_message(5).topic, "one/r/back")
        self.assert_stops(inst)


class V311Remote:
    """A 3.1.1 remote on a raw socket that never acks on its own: accepts
    the bridge (CONNACK 0), answers PINGREQ, and records every PUBLISH
    (qos, packet id, topic) and PUBREL; the test acks by hand."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((nmq.HOST, 0))
        self.srv.listen(4)
        self.port = self.srv.getsockname()[1]
        self.pubs, self.rels = [], []
        self.c = None
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def close(self):
        for c in (self.srv, self.c):
            try:
                if c is not None:
                    c.close()
            except OSError:
                pass

    def send(self, ptype, pid):
        flags = 2 if ptype == nmq.PUBREL else 0
        self.c.sendall(nmq.packet(ptype, flags, nmq.u16(pid)))

    def serve(self):
        try:
            c, _ = self.srv.accept()
        except OSError:
            return
        self.c = c
        try:
            while True:
                first, body = FakeRemote.read_packet(c)
                if first is None:
                    return
                t = first >> 4
                r = nmq._Reader(body)
                if t == nmq.CONNECT:
                    c.sendall(nmq.packet(nmq.CONNACK, 0, b"\x00\x00"))
                elif t == nmq.PUBLISH:
                    qos = (first >> 1) & 3
                    topic = r.str()
                    with self.lock:
                        self.pubs.append((qos, r.u16() if qos else 0, topic))
                elif t == nmq.PUBREL:
                    with self.lock:
                        self.rels.append(r.u16())
                elif t == nmq.PINGREQ:
                    c.sendall(b"\xd0\x00")
        except (OSError, IndexError):
            pass

    def count(self):
        with self.lock:
            return len(self.pubs)


class TestBridgeWindow(BridgeCase):

    # A 3.1.1 link has no Receive Maximum: up to 256 QoS 1 forwards go
    # unacknowledged at once (one more per PUBACK), but at most 16 QoS 2
    # (what brokers keep for a 3.1.1 client; Mosquitto drops the excess
    # silently), and a QoS 1 forward queued behind a waiting QoS 2 one
    # waits too (order). A PUBREC does not free a QoS 2 slot; the PUBCOMP
    # does.
    def test_v311_window_qos1_and_qos2(self):
        inst = self.instance()
        rem = V311Remote()
        self.addCleanup(rem.close)
        fwd = ('{ local_topic = "w1/#", remote_topic = "", qos = 1 },'
               '{ local_topic = "w2/#", remote_topic = "", qos = 2 }')
        port, _, _ = self.broker(inst, bridge_conf(
            "b1", "mqtt-tcp://127.0.0.1:%d" % rem.port, 4, 30, fwd, "",
            "  max_send_queue_len = 4096"))
        self.linked(inst)
        pub = self.client(port, "local-pub")
        pub.connect()
        for i in range(300):
            pub.publish("w1/%d" % i, b"x", qos=1)
        self.assertTrue(wait_for(lambda: rem.count() >= 256, 10.0), rem.count())
        time.sleep(0.5)
        self.assertEqual(rem.count(), 256)  # the window, not one more
        with rem.lock:
            q1 = list(rem.pubs)
        self.assertEqual([p[2] for p in q1], ["w1/%d" % i for i in range(256)])
        rem.send(nmq.PUBACK, q1[0][1])
        self.assertTrue(wait_for(lambda: rem.count() >= 257, 5.0))
        self.assertEqual(rem.pubs[256][2], "w1/256")
        # Ack the rest of the QoS 1 window; the last 43 go out.
        for p in q1[1:]:
            rem.send(nmq.PUBACK, p[1])
        self.assertTrue(wait_for(lambda: rem.count() >= 300, 5.0), rem.count())
        with rem.lock:
            for p in rem.pubs[256:]:
                rem.send(nmq.PUBACK, p[1])
        # QoS 2: 20 of them, then one QoS 1 behind them.
        for i in range(20):
            pub.publish("w2/%d" % i, b"y", qos=1)
        pub.publish("w1/after", b"z", qos=1)
        self.assertTrue(wait_for(lambda: rem.count() >= 316, 10.0), rem.count())
        time.sleep(0.5)
        self.assertEqual(rem.count(), 316)  # 16 QoS 2 in flight, the rest wait
        with rem.lock:
            q2 = list(rem.pubs[300:])
        self.assertEqual([(p[0], p[2]) for p in q2], [(2, "w2/%d" % i) for i in range(16)])
        rem.send(nmq.PUBREC, q2[0][1])
        self.assertTrue(wait_for(lambda: q2[0][1] in rem.rels, 5.0))
        time.sleep(0.3)
        self.assertEqual(rem.count(), 316)  # released, still in flight
        rem.send(nmq.PUBCOMP, q2[0][1])
        self.assertTrue(wait_for(lambda: rem.count() >= 317, 5.0))
        self.assertEqual(rem.pubs[316][2], "w2/16")
        for p in q2[1:]:
            rem.send(nmq.PUBREC, p[1])
        self.assertTrue(wait_for(lambda: len(rem.rels) >= 16, 5.0))
        for p in q2[1:]:
            rem.send(nmq.PUBCOMP, p[1])
        self.assertTrue(wait_for(lambda: rem.count() >= 321, 5.0), rem.count())
        self.assertEqual([p[2] for p in rem.pubs[316:321]],
                         ["w2/16", "w2/17", "w2/18", "w2/19", "w1/after"])


if __name__ == "__main__":
    nmq.main()
