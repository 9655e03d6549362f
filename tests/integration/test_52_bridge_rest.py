#!/usr/bin/python3
"""52: changing bridges at runtime through the REST API (docs/rest-api.md,
"Changing bridges"): PUT /api/v4/bridges/:name (change, or add, validated
by the configuration reader), DELETE, /bridges/switch (the link goes down
and up, the buffer is kept), /bridges/sub and /bridges/unsub (subscribed
on the remote at once). A real remote (Debian's mosquitto), curl and
http.client; errors carry the HTTP status and the numeric code; hostile
bodies never crash the broker."""

import base64
import http.client
import json
import shutil
import subprocess
import time
import unittest

import nmq
import nmq_ops
from bridge_util import FakeRemote, FaultProxy, Mosquitto, bridge_conf, need_mosquitto_remote
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for

USER, PASSWORD = "admin", "public"


def setUpModule():
    need_mosquitto_remote()
    if shutil.which("curl") is None:
        raise unittest.SkipTest("curl is needed")


class Api:
    def __init__(self, port):
        self.port = port
        self.auth = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection(nmq.HOST, self.port, timeout=10)
        h = {"Authorization": self.auth}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data


def curl(port, method, path, body):
    out = subprocess.run(["curl", "-s", "-u", "%s:%s" % (USER, PASSWORD), "-X", method,
                          "-H", "Content-Type: application/json", "-d", body,
                          "-w", "\n%{http_code}", "http://%s:%d%s" % (nmq.HOST, port, path)],
                         capture_output=True, timeout=20)
    data, _, code = out.stdout.rpartition(b"\n")
    return int(code), json.loads(data)


class TestBridgeRest(OpsTestCase):

    def setUp(self):
        super().setUp()
        self.inst = self.instance()
        self.m = Mosquitto(self.inst.tmp)
        self.addCleanup(self.m.stop)
        self.px = FaultProxy(self.m.port)
        self.addCleanup(self.px.close)
        self.hport = free_port()
        self.port = free_port()
        extra = ("http_server { port = %d, username = %s, password = %s }\n" %
                 (self.hport, USER, PASSWORD)) + bridge_conf(
            "b1", "mqtt-tcp://127.0.0.1:%d" % self.px.port, 4, 5,
            '{ local_topic = "f/#", remote_topic = "", qos = 1 }')
        conf = self.inst.conf(self.port, extra=extra)
        self.start_broker(self.inst, ["start", "--conf", conf], port=self.port)
        self.assertTrue(self.inst.wait_output(r"event=link_up", timeout=10),
                        self.inst.output()[-2000:])
        self.api = Api(self.hport)
        self.remote = self.client(self.m.port, "remote-sub", version=5)
        self.remote.connect()
        self.remote.subscribe("#", 1)

    def prom(self):
        """The bridge families of /api/v4/prometheus, read by Prometheus'
        own text parser: {(family, bridge): value}."""
        from prometheus_client.parser import text_string_to_metric_families
        c = http.client.HTTPConnection(nmq.HOST, self.hport, timeout=10)
        c.request("GET", "/api/v4/prometheus", headers={"Authorization": self.api.auth})
        text = c.getresponse().read().decode()
        c.close()
        out = {}
        for fam in text_string_to_metric_families(text):
            if fam.name.startswith("nanomq_bridge_"):
                self.assertIn("# HELP %s " % fam.name, text)
                for smp in fam.samples:
                    out[(fam.name, smp.labels["bridge"])] = smp.value
        return out

    def state(self, name):
        st, j = self.api.request("GET", "/api/v4/bridges/" + name)
        return j["data"]["bridge"]["nodes"][0]["state"] if st == 200 else None

    # Runtime subscriptions: added (brief form with curl, then NanoMQ's form
    # with http.client), they reach the remote at once; removed, messages
    # on them no longer come; both survive a reconnect.
    def test_sub_and_unsub(self):
        local = self.client(self.port, "local-sub")
        local.connect()
        local.subscribe("#", 1)
        st, j = curl(self.hport, "POST", "/api/v4/bridges/sub/b1",
                     '[{"topic": "cmd/#", "qos": 1}]')
        self.assertEqual((st, j["code"]), (200, 0), j)
        st, j = self.api.request("PUT", "/api/v4/bridges/sub/b1", {"data": {
            "subscription": [{"remote_topic": "cfg/+", "local_topic": "config", "qos": 1}],
            "sub_properties": {"user_properties": [{"key": "k", "value": "v"}]}}})
        self.assertEqual((st, j["code"]), (200, 0), j)
        rpub = self.client(self.m.port, "remote-pub")
        rpub.connect()

        def arrives(topic, payload, want_topic, timeout=5):
            rpub.publish(topic, payload, qos=1)
            m = local.wait_message(timeout, match=lambda m: m.payload == payload)
            return m is not None and m.topic == want_topic
        self.assertTrue(wait_for(lambda: arrives("cmd/a", b"1", "cmd/a", 1), 5))
        self.assertTrue(arrives("cfg/x", b"2", "config"))
        # Kept after a reconnect (resubscribed with the connect's SUBSCRIBE).
        n_up = self.inst.output().count("event=link_up")
        self.px.cut()
        time.sleep(0.5)
        self.px.up()
        self.assertTrue(wait_for(
            lambda: self.inst.output().count("event=link_up") > n_up, 10))
        self.assertTrue(wait_for(lambda: arrives("cmd/b", b"3", "cmd/b", 1), 5))
        st, j = self.api.request("PUT", "/api/v4/bridges/unsub/b1", {"data": {
            "unsubscription": [{"topic": "cmd/#"}]}})
        self.assertEqual((st, j["code"]), (200, 0), j)
        time.sleep(0.3)
        rpub.publish("cmd/c", b"4", qos=1)
        self.assertIsNone(local.wait_message(0.7, match=lambda m: m.payload == b"4"))
        self.assertTrue(arrives("cfg/y", b"5", "config"))
        self.assert_stops(self.inst)

    # Switched off, the link goes down and local QoS 1 forwards are kept;
    # switched on, they arrive in order.
    def test_switch_keeps_buffer(self):
        st, j = self.api.request("POST", "/api/v4/bridges/switch/b1",
                                 {"data": {"bridge_switch": False}})
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertTrue(wait_for(lambda: self.state("b1") == "switched_off", 5))
        self.assertTrue(self.inst.wait_output(r"bridge=b1 event=switched_off", timeout=5))
        pub = self.client(self.port, "pub")
        pub.connect()
        for i in range(20):
            pub.publish("f/s", b"%d" % i, qos=1)
        self.remote.expect_no_message(1.0)
        self.assertEqual(self.state("b1"), "switched_off")  # no reconnect meanwhile
        m = self.prom()
        self.assertEqual((m[("nanomq_bridge_up", "b1")], m[("nanomq_bridge_backlog", "b1")],
                          m[("nanomq_bridge_forwarded", "b1")]), (0, 20, 0), m)
        st, j = curl(self.hport, "POST", "/api/v4/bridges/b1/switch", '{"enable": true}')
        self.assertEqual((st, j["code"]), (200, 0), j)
        got = self.remote.wait_messages(20, timeout=10)
        self.assertEqual([x.payload for x in got], [b"%d" % i for i in range(20)])
        self.assertEqual(self.state("b1"), "up")
        self.assertTrue(wait_for(lambda: self.prom()[("nanomq_bridge_forwarded", "b1")] == 20,
                                 5), self.prom())
        m = self.prom()
        self.assertEqual((m[("nanomq_bridge_up", "b1")], m[("nanomq_bridge_backlog", "b1")],
                          m[("nanomq_bridge_dropped", "b1")]), (1, 0, 0), m)
        self.assert_stops(self.inst)

    # PUT changes a running bridge (its link reconnects with the new
    # forwards), adds a new one; DELETE removes it.
    def test_put_and_delete(self):
        pub = self.client(self.port, "pub")
        pub.connect()
        body = {"b1": {"server": "mqtt-tcp://127.0.0.1:%d" % self.px.port, "proto_ver": 5,
                       "keepalive": "5s",
                       "forwards": [{"local_topic": "g/#", "remote_topic": "", "prefix": "p/",
                                     "qos": 1}]}}
        st, j = self.api.request("PUT", "/api/v4/bridges/b1", body)
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertTrue(self.inst.wait_output(r"bridge=b1 event=reconfigured", timeout=5))
        self.assertTrue(wait_for(lambda: self.state("b1") == "up", 10))
        time.sleep(0.3)
        pub.publish("f/old", b"x", qos=1)
        pub.publish("g/new", b"y", qos=1)
        m = self.remote.wait_message(5)
        self.assertEqual((m.topic, m.payload), ("p/g/new", b"y"))
        self.remote.expect_no_message(0.5)
        # GET shows the settings PUT gave (NanoMQ's node shape).
        st, j = self.api.request("GET", "/api/v4/bridges/b1")
        node = j["data"]["bridge"]["nodes"][0]
        self.assertEqual((node["connector"]["proto_ver"], node["connector"]["keepalive"],
                          node["state"]), (5, 5, "up"))
        self.assertEqual([(f["local_topic"], f["prefix"]) for f in node["forwards"]],
                         [("g/#", "p/")])
        # A new bridge, then deleted.
        st, j = curl(self.hport, "PUT", "/api/v4/bridges/b2", json.dumps({"b2": {
            "server": "mqtt-tcp://127.0.0.1:%d" % self.m.port,
            "forwards": [{"local_topic": "h/#", "remote_topic": "", "qos": 1}]}}))
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertTrue(wait_for(lambda: self.state("b2") == "up", 10))
        pub.publish("h/1", b"z", qos=1)
        m = self.remote.wait_message(5)
        self.assertEqual((m.topic, m.payload), ("h/1", b"z"))
        mon = self.client(self.port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/b2", 0)
        self.assertIsNotNone(mon.wait_message(5))  # its retained health
        st, j = self.api.request("DELETE", "/api/v4/bridges/b2")
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertEqual(self.api.request("GET", "/api/v4/bridges/b2")[0], 404)
        # Its retained health is gone with it.
        mon2 = self.client(self.port, "mon2")
        mon2.connect()
        mon2.subscribe("$SYS/brokers/bridges/#", 0)
        m = mon2.wait_message(1.0, match=lambda m: m.topic.endswith("/b2"))
        self.assertIsNone(m, m and m.payload)
        pub.publish("h/2", b"w", qos=1)
        self.remote.expect_no_message(0.7)
        st, j = self.api.request("DELETE", "/api/v4/bridges/b2")
        self.assertEqual(st, 404)
        self.assertEqual(self.state("b1"), "up")
        self.assert_stops(self.inst)

    # Errors: the status and the numeric code, with a message.
    def test_errors(self):
        cases = [
            ("PUT", "/api/v4/bridges/b1", '{"b9": {"server": "mqtt-tcp://127.0.0.1:1"}}', 400, 108),
            ("PUT", "/api/v4/bridges/b1", '{"b1": {', 400, 109),
            ("PUT", "/api/v4/bridges/b1", '{"b1": {"server": "mqtt-tcp://127.0.0.1:1", '
             '"proto_ver": 9}}', 400, 108),
            ("PUT", "/api/v4/bridges/b1", '{"b1": {"proto_ver": 4}}', 400, 108),  # no server
            ("PUT", "/api/v4/bridges/cache", '{"cache": {"server": "mqtt-tcp://h:1"}}', 404, 108),
            ("DELETE", "/api/v4/bridges/nope", None, 404, 108),
            ("POST", "/api/v4/bridges/switch/b1", '{"data": {}}', 400, 107),
            ("POST", "/api/v4/bridges/switch/b1", '{"data": {"bridge_switch": "yes"}}', 400, 108),
            ("POST", "/api/v4/bridges/switch/nope", '{"enable": false}', 404, 108),
            ("PUT", "/api/v4/bridges/sub/b1", '{"data": {"subscription": []}}', 400, 107),
            ("PUT", "/api/v4/bridges/sub/b1", '[{"topic": "a/#/b", "qos": 1}]', 400, 108),
            ("PUT", "/api/v4/bridges/sub/b1", '[{"topic": "a/b", "qos": 7}]', 400, 108),
            ("PUT", "/api/v4/bridges/sub/nope", '[{"topic": "a/b", "qos": 1}]', 404, 108),
            ("PUT", "/api/v4/bridges/unsub/b1", '[{"topic": "a/#/b"}]', 400, 115),
        ]
        for method, path, body, status, code in cases:
            with self.subTest(method=method, path=path, body=body):
                st, j = self.api.request(method, path, body)
                self.assertEqual(st, status, j)
                self.assertEqual(j["code"], code, j)
                self.assertTrue(j.get("message"), j)
        msg = self.api.request("PUT", "/api/v4/bridges/b1",
                               '{"b1": {"server": "mqtt-tcp://127.0.0.1:1", "proto_ver": 9}}')[1]
        self.assertIn("proto_ver", msg["message"])
        self.assertEqual(self.state("b1"), "up")  # nothing changed
        self.assert_stops(self.inst)

    # Hostile bodies: odd JSON shapes and types, deep nesting, large
    # arrays, NUL bytes and bad UTF-8 never crash or stall the broker.
    def test_hostile_bodies(self):
        bodies = [b"", b"null", b"[]", b"{}", b"\"x\"", b"1e999", b"[" * 5000 + b"]" * 5000,
                  b'{"b1": []}', b'{"b1": null}', b'{"b1": {"forwards": 3}}',
                  b'{"b1": {"server": {"a": 1}}}', b'{"data": {"subscription": 5}}',
                  b'{"data": {"unsubscription": [1, null, {}]}}',
                  b'[' + b",".join(b'{"topic": "t/%d", "qos": 1}' % i for i in range(300)) + b']',
                  b'{"data": {"bridge_switch": null}}', b'{"b1": {"server": "\x00"}}',
                  b'{"b1": {"server": "\xff\xfe"}}', b'{"b1": {"include": "/etc/passwd"}}',
                  b'{"data": {"subscription": [{"topic": "a", "qos": 1}], '
                  b'"sub_properties": {"user_properties": [1, 2]}}}']
        paths = [("PUT", "/api/v4/bridges/b1"), ("POST", "/api/v4/bridges/switch/b1"),
                 ("PUT", "/api/v4/bridges/sub/b1"), ("PUT", "/api/v4/bridges/unsub/b1")]
        for method, path in paths:
            for body in bodies:
                st, _ = self.api.request(method, path, body)
                self.assertIn(st, (200, 400, 404), (method, path, body[:60]))
        c = self.client(self.port, "still-alive")
        self.assertEqual(c.connect(), 0)
        self.assertIsNotNone(self.state("b1"))
        self.assert_stops(self.inst)


class TestBridgeRestV5(OpsTestCase):

    # On a v5 link, runtime SUBSCRIBE and UNSUBSCRIBE carry the request's
    # user properties (seen by a raw-socket remote).
    def test_sub_unsub_user_properties(self):
        inst = self.instance()
        fake = FakeRemote()
        self.addCleanup(fake.close)
        hport, port = free_port(), free_port()
        extra = ("http_server { port = %d, username = %s, password = %s }\n" %
                 (hport, USER, PASSWORD)) + bridge_conf(
            "v5", "mqtt-tcp://127.0.0.1:%d" % fake.port, 5, 10)
        self.start_broker(inst, ["start", "--conf", inst.conf(port, extra=extra)], port=port)
        self.assertTrue(wait_for(lambda: fake.connects, 10), inst.output()[-2000:])
        api = Api(hport)
        self.assertTrue(wait_for(
            lambda: api.request("GET", "/api/v4/bridges/v5")[1]["data"]["bridge"]["nodes"][0]
            ["state"] == "up", 5))
        st, j = api.request("PUT", "/api/v4/bridges/sub/v5", {"data": {
            "subscription": [{"remote_topic": "a/#", "qos": 1}, {"remote_topic": "b", "qos": 2}],
            "sub_properties": {"user_properties": [{"key": "who", "value": "rest"}]}}})
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertTrue(wait_for(lambda: fake.subscribes, 5))
        s = fake.subscribes[0]
        self.assertEqual([f[0] for f in s["filters"]], ["a/#", "b"])
        self.assertEqual([f[1] & 3 for f in s["filters"]], [1, 2])
        self.assertEqual(s["props"]["UserProperty"], [("who", "rest")])
        st, j = api.request("PUT", "/api/v4/bridges/unsub/v5", {"data": {
            "unsubscription": [{"topic": "a/#"}],
            "unsub_properties": {"user_properties": [{"key": "why", "value": "done"}]}}})
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertTrue(wait_for(lambda: fake.unsubscribes, 5))
        u = fake.unsubscribes[0]
        self.assertEqual(u["filters"], ["a/#"])
        self.assertEqual(u["props"]["UserProperty"], [("why", "done")])
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
