#!/usr/bin/python3
"""REST API v4 and Prometheus metrics (docs/rest-api.md, docs/metrics.md).

Every endpoint is called the way a user's script would: with curl and with
Python's standard http.client / urllib, with Basic authentication, over a
kept-alive connection. Checked:
- /api/v4 lists the endpoints; brokers and nodes have NanoMQ's shape.
- clients: a connected MQTT client and an offline persistent session are
  listed with their state, filters narrow the list, paging gives `meta`,
  /clients/:clientid and /clients/username/:username find them, a client id
  with '/' works percent-encoded.
- subscriptions (plain and $share/<g>/<f>) with the clientid, topic, qos
  and share filters; /subscriptions/:clientid; topic-tree.
- /mqtt/publish reaches an MQTT subscriber (plain and base64, v5 user
  properties), publish_batch answers per message, the ACL applies to the
  given client id (a denied publish is not delivered and is a drop).
- /mqtt/subscribe and unsubscribe change a session's subscriptions (the
  client then receives), 112 for an unknown client; batch forms.
- /metrics has NanoMQ's shape with counters filled; /prometheus is parsed
  by python3-prometheus-client's text parser, every metric has HELP and
  TYPE, and the counters follow the traffic.
- /reload GET and POST (applied at runtime), /configuration with secrets
  masked.
"""
import base64
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import nmq
from nmq import Broker, PahoClient

from prometheus_client.parser import text_string_to_metric_families

USER, PASSWORD = "admin", "s3cret"


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq REST API")


class Api:
    """A small REST client over one kept-alive http.client connection."""

    def __init__(self, port, user=USER, password=PASSWORD):
        self.port = port
        self.auth = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        self.conn = http.client.HTTPConnection(nmq.HOST, port, timeout=10)

    def request(self, method, path, body=None, headers=None):
        h = {"Authorization": self.auth}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, r.getheader("Content-Type"), data

    def json(self, method, path, body=None):
        st, ct, data = self.request(method, path, body)
        return st, json.loads(data)

    def close(self):
        self.conn.close()


def curl(port, path, *args, user=USER, password=PASSWORD):
    """curl -s; returns (status, body bytes)."""
    out = subprocess.run(["curl", "-s", "-u", "%s:%s" % (user, password), "-w", "\n%{http_code}"]
                         + list(args) + ["http://%s:%d%s" % (nmq.HOST, port, path)],
                         capture_output=True, timeout=20)
    body, _, code = out.stdout.rpartition(b"\n")
    return int(code), body


class HttpApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="nmq-t60-")
        with open(os.path.join(cls.dir, "acl.conf"), "w") as f:
            f.write('rules = [\n'
                    '{permit = deny, clientid = "rest-denied", action = publish, '
                    'topics = ["acl/#"]}\n'
                    '{permit = allow}\n]\n')
        cls.http_port = nmq.free_port()
        # A bridge to a port where nothing listens: it stays down.
        dead = nmq.free_port()
        conf = ("http_server { port = %d, username = %s, password = %s }\n"
                "auth { allow_anonymous = true, no_match = allow, "
                "acl = {include \"%s/acl.conf\"} }\n"
                "bridges.mqtt.cloud { server = \"mqtt-tcp://127.0.0.1:%d\", "
                "clientid = \"gw-1\", backoff_max = 2s, "
                "forwards = [{remote_topic = \"up/x\", local_topic = \"up/#\"}] }\n"
                % (cls.http_port, USER, PASSWORD, cls.dir, dead))
        cls.broker = Broker(conf)
        cls.broker.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                probe = http.client.HTTPConnection(nmq.HOST, cls.http_port, timeout=1)
                probe.connect()
                probe.close()
                break
            except OSError:
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        problems = cls.broker.stop()
        shutil.rmtree(cls.dir, True)
        if problems:
            raise AssertionError("broker problem: " + "\n".join(problems))

    def setUp(self):
        self.api = Api(self.http_port)
        self.addCleanup(self.api.close)
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()

    def paho(self, cid, **kw):
        c = PahoClient(self.broker.port, cid, **kw)
        self.clients.append(c)
        c.connect()
        return c

    def test_list_brokers_nodes(self):
        st, j = self.api.json("GET", "/api/v4")
        self.assertEqual(st, 200)
        self.assertEqual(j["code"], 0)
        paths = {(e["method"], e["path"]) for e in j["data"]}
        for want in [("GET", "/clients/"), ("GET", "/prometheus/"), ("POST", "/mqtt/publish"),
                     ("POST", "/config_update/")]:
            self.assertIn(want, paths)
        for e in j["data"]:
            self.assertEqual(set(e), {"path", "name", "method", "descr"})
        st, j = self.api.json("GET", "/api/v4/brokers")
        b = j["data"][0]
        self.assertEqual(b["node_status"], "Running")
        self.assertEqual(b["sysdescr"], "NanoMQ Broker")
        self.assertRegex(b["datetime"], r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
        self.assertRegex(b["uptime"], r"^\d+ Hours, \d+ minutes, \d+ seconds$")
        c = self.paho("t60-nodes")
        st, j = self.api.json("GET", "/api/v4/nodes/")  # trailing slash too
        self.assertEqual(st, 200)
        self.assertGreaterEqual(j["data"][0]["connections"], 1)
        self.assertEqual(set(j["data"][0]), {"connections", "node_status", "uptime", "version"})
        c.close()

    def test_clients_and_filters(self):
        # An offline persistent session: connect without clean start, leave.
        off = self.paho("t60-off/line", clean=False, username="bob")
        off.subscribe("x/y", 1)
        off.close()
        on = self.paho("t60-online", version=5, username="alice", keepalive=33)
        on.publish("t60/none", b"1")
        on.publish("t60/none", b"2")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st, j = self.api.json("GET", "/api/v4/clients?clientid=t60-online")
            if j["data"] and j["data"][0]["recv_msg"] == 2:
                break
            time.sleep(0.05)
        self.assertEqual(st, 200)
        self.assertEqual(j["meta"]["count"], 1)
        e = j["data"][0]
        self.assertEqual(e, {"client_id": "t60-online", "username": "alice", "keepalive": 33,
                             "conn_state": "connected", "clean_start": True,
                             "proto_name": "MQTT", "proto_ver": 5, "recv_msg": 2})
        # The offline one, found by its percent-encoded id and by user name.
        st, j = self.api.json("GET", "/api/v4/clients/t60-off%2Fline")
        self.assertEqual(st, 200)
        self.assertEqual(len(j["data"]), 1)
        self.assertEqual(j["data"][0]["conn_state"], "disconnected")
        self.assertEqual(j["data"][0]["clean_start"], False)
        st, j = self.api.json("GET", "/api/v4/clients/username/bob")
        self.assertEqual([c["client_id"] for c in j["data"]], ["t60-off/line"])
        st, j = self.api.json("GET", "/api/v4/clients/no-such-client")
        self.assertEqual((st, j["data"]), (200, []))
        st, j = self.api.json("GET", "/api/v4/clients?conn_state=disconnected")
        self.assertIn("t60-off/line", [c["client_id"] for c in j["data"]])
        self.assertNotIn("t60-online", [c["client_id"] for c in j["data"]])
        st, j = self.api.json("GET", "/api/v4/clients?proto_ver=5&clean_start=true")
        self.assertIn("t60-online", [c["client_id"] for c in j["data"]])
        self.assertNotIn("t60-off/line", [c["client_id"] for c in j["data"]])
        # Paging: one per page, and every client on exactly one page.
        st, j = self.api.json("GET", "/api/v4/clients?_limit=1&_page=1")
        total = j["meta"]["count"]
        self.assertGreaterEqual(total, 2)
        self.assertEqual(j["meta"]["limit"], 1)
        seen = []
        for p in range(1, total + 2):
            st, j = self.api.json("GET", "/api/v4/clients?_limit=1&_page=%d" % p)
            self.assertEqual(j["meta"]["page"], p)
            seen += [c["client_id"] for c in j["data"]]
        self.assertEqual(len(seen), total)
        self.assertEqual(len(set(seen)), total)
        st, j = self.api.json("GET", "/api/v4/clients?_page=0")
        self.assertEqual((st, j["code"]), (400, 108))
        # The same list through curl and urllib.
        code, body = curl(self.http_port, "/api/v4/clients?username=alice")
        self.assertEqual(code, 200)
        self.assertEqual([c["client_id"] for c in json.loads(body)["data"]], ["t60-online"])
        mgr = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        mgr.add_password(None, "http://%s:%d/" % (nmq.HOST, self.http_port), USER, PASSWORD)
        opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(mgr))
        with opener.open("http://%s:%d/api/v4/clients/t60-online" % (nmq.HOST, self.http_port),
                         timeout=10) as r:
            self.assertEqual(json.load(r)["data"][0]["username"], "alice")

    def test_subscriptions_and_topic_tree(self):
        c = self.paho("t60-subs", version=5)
        c.subscribe("t60/a/+", 1)
        c.subscribe("$share/grp/t60/b/#", 2)
        st, j = self.api.json("GET", "/api/v4/subscriptions/t60-subs")
        got = sorted((e["clientid"], e["topic"], e["qos"]) for e in j["data"])
        self.assertEqual(got, [("t60-subs", "$share/grp/t60/b/#", 2),
                               ("t60-subs", "t60/a/+", 1)])
        st, j = self.api.json("GET", "/api/v4/subscriptions?share=grp")
        self.assertEqual([e["topic"] for e in j["data"]], ["$share/grp/t60/b/#"])
        st, j = self.api.json("GET", "/api/v4/subscriptions?clientid=t60-subs&qos=1")
        self.assertEqual([e["topic"] for e in j["data"]], ["t60/a/+"])
        st, j = self.api.json("GET", "/api/v4/subscriptions?topic=t60%2Fa%2F%2B")
        self.assertEqual([e["clientid"] for e in j["data"]], ["t60-subs"])
        st, j = self.api.json("GET", "/api/v4/topic-tree")
        self.assertEqual(st, 200)
        levels = j["data"]
        self.assertEqual(levels[0][0]["topic"], "")
        self.assertGreaterEqual(levels[0][0]["cld_cnt"], 1)
        self.assertIn("t60", [n["topic"] for n in levels[1]])
        plus = [n for n in levels[3] if n["topic"] == "+"]
        self.assertTrue(any("t60-subs" in n.get("clientid", []) for n in plus), levels)
        # Paged by node: the pages together hold each node once.
        for i in range(30):
            c.subscribe("t60/pg/%d" % i, 0)
        st, j = self.api.json("GET", "/api/v4/topic-tree")
        total = j["meta"]["count"]
        self.assertEqual(total, sum(len(lv) for lv in j["data"]) - 1)  # root not counted
        self.assertGreaterEqual(total, 34)
        seen = []
        for page in range(1, total // 7 + 2):
            st, j = self.api.json("GET", "/api/v4/topic-tree?_page=%d&_limit=7" % page)
            self.assertEqual((st, j["meta"]["page"], j["meta"]["limit"]), (200, page, 7))
            self.assertEqual(j["meta"]["count"], total)
            self.assertEqual(j["data"][0][0]["topic"], "")  # the root, on every page
            nodes = [(d, n["topic"]) for d, lv in enumerate(j["data"]) for n in lv if d > 0]
            self.assertLessEqual(len(nodes), 7)
            seen += nodes
        self.assertEqual(len(seen), total)
        self.assertEqual(sorted(t for d, t in seen if d == 3 and t.isdigit()),
                         sorted(str(i) for i in range(30)))

    def test_publish_reaches_subscriber(self):
        sub = self.paho("t60-rx", version=5)
        sub.subscribe("t60/pub/#", 1)
        st, j = self.api.json("POST", "/api/v4/mqtt/publish",
                              {"topic": "t60/pub/1", "payload": "hello", "qos": 1,
                               "properties": {"user_properties": {"k": "v"},
                                              "content_type": "text/plain"}})
        self.assertEqual((st, j), (200, {"code": 0}))
        m = sub.wait_message()
        self.assertIsNotNone(m)
        self.assertEqual((m.topic, m.payload, m.qos), ("t60/pub/1", b"hello", 1))
        self.assertEqual(m.props.get("ContentType"), "text/plain")
        self.assertIn(("k", "v"), [tuple(x) for x in m.props.get("UserProperty", [])])
        # base64 and "topics" through curl.
        code, body = curl(self.http_port, "/api/v4/mqtt/publish", "-d", json.dumps(
            {"topics": "t60/pub/2,t60/pub/3", "payload": base64.b64encode(b"\x00\xff").decode(),
             "encoding": "base64"}))
        self.assertEqual((code, json.loads(body)["code"]), (200, 0))
        got = sorted((m.topic, m.payload) for m in sub.wait_messages(2))
        self.assertEqual(got, [("t60/pub/2", b"\x00\xff"), ("t60/pub/3", b"\x00\xff")])
        st, j = self.api.json("POST", "/api/v4/mqtt/publish_batch",
                              [{"topic": "t60/pub/4", "payload": "a"},
                               {"topic": "t60/+/bad", "payload": "b"}])
        self.assertEqual(st, 200)
        self.assertEqual([(e["topic"], e["code"]) for e in j["data"]],
                         [("t60/pub/4", 0), ("t60/+/bad", 115)])
        self.assertEqual(sub.wait_message().topic, "t60/pub/4")
        st, j = self.api.json("POST", "/api/v4/mqtt/publish", {"payload": "x"})
        self.assertEqual((st, j["code"]), (400, 107))

    def test_publish_acl_applies(self):
        sub = self.paho("t60-acl-rx")
        sub.subscribe("acl/#", 0)
        st, before = self.api.json("GET", "/api/v4/metrics")
        dropped0 = before["metrics"][0]["messages_dropped"]
        st, j = self.api.json("POST", "/api/v4/mqtt/publish",
                              {"topic": "acl/x", "payload": "no", "clientid": "rest-denied"})
        self.assertEqual(st, 400)
        self.assertNotEqual(j["code"], 0)
        self.assertIsNone(sub.wait_message(timeout=0.5))
        st, after = self.api.json("GET", "/api/v4/metrics")
        self.assertEqual(after["metrics"][0]["messages_dropped"], dropped0 + 1)
        self.assertGreaterEqual(after["metrics"][0]["messages_dropped_by_reason"]["acl"], 1)
        # Another client id may.
        st, j = self.api.json("POST", "/api/v4/mqtt/publish",
                              {"topic": "acl/x", "payload": "yes", "clientid": "other"})
        self.assertEqual(j["code"], 0)
        self.assertEqual(sub.wait_message().payload, b"yes")

    def test_rest_subscribe_unsubscribe(self):
        c = self.paho("t60-target", clean=False)
        st, j = self.api.json("POST", "/api/v4/mqtt/subscribe",
                              {"topic": "t60/rs", "qos": 1, "clientid": "t60-target"})
        self.assertEqual((st, j["code"]), (200, 0))
        self.api.json("POST", "/api/v4/mqtt/publish", {"topic": "t60/rs", "payload": "p1"})
        m = c.wait_message()
        self.assertEqual((m.topic, m.payload), ("t60/rs", b"p1"))
        st, j = self.api.json("POST", "/api/v4/mqtt/unsubscribe",
                              {"topic": "t60/rs", "clientid": "t60-target"})
        self.assertEqual(j["code"], 0)
        self.api.json("POST", "/api/v4/mqtt/publish", {"topic": "t60/rs", "payload": "p2"})
        self.assertIsNone(c.wait_message(timeout=0.5))
        st, j = self.api.json("POST", "/api/v4/mqtt/subscribe",
                              {"topic": "t60/rs", "clientid": "nobody-here"})
        self.assertEqual((st, j["code"]), (404, 112))
        st, j = self.api.json("POST", "/api/v4/mqtt/subscribe_batch",
                              [{"topic": "t60/b1", "clientid": "t60-target"},
                               {"topic": "t60/b2", "clientid": "nobody-here"}])
        self.assertEqual([e["code"] for e in j["data"]], [0, 112])
        st, j = self.api.json("GET", "/api/v4/subscriptions/t60-target")
        self.assertEqual([e["topic"] for e in j["data"]], ["t60/b1"])
        st, j = self.api.json("POST", "/api/v4/mqtt/unsubscribe_batch",
                              [{"topic": "t60/b1", "clientid": "t60-target"}])
        self.assertEqual([e["code"] for e in j["data"]], [0])
        st, j = self.api.json("GET", "/api/v4/subscriptions/t60-target")
        self.assertEqual(j["data"], [])

    def test_metrics_and_prometheus(self):
        st, ct, data = self.api.request("GET", "/api/v4/prometheus")
        self.assertEqual(st, 200)
        self.assertTrue(ct.startswith("text/plain; version=0.0.4"), ct)
        text = data.decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        for f in fams.values():
            self.assertTrue(f.documentation, "no HELP for %s" % f.name)
        # The parser names a counter's family without "_total"; the exposed
        # sample names must be exactly NanoMQ's.
        gauges = ["connections_count", "connections_max", "sessions_count", "sessions_max",
                  "topics_count", "topics_max", "subscribers_count", "subscribers_max",
                  "memory_usage", "memory_usage_max", "cpu_usage", "cpu_usage_max"]
        counters = ["messages_received", "messages_sent", "messages_dropped"]
        for n in gauges + counters:
            self.assertIn("nanomq_" + n, fams)
            self.assertEqual(fams["nanomq_" + n].type, "gauge" if n in gauges else "counter")
            self.assertRegex(text, r"(?m)^nanomq_%s [0-9.e+]+$" % n)
        self.assertEqual(
            sorted(s.labels["reason"] for s in fams["nanomq_messages_dropped_by_reason"].samples),
            ["acl", "expired", "memory", "queue_full", "too_large"])
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name = line.split("{")[0].split(" ")[0]
                self.assertIn("# HELP %s " % name, text)
                self.assertIn("# TYPE %s " % name, text)

        def sample(name):
            st, ct, d = self.api.request("GET", "/api/v4/prometheus")
            for f in text_string_to_metric_families(d.decode()):
                if f.name == name:
                    return f.samples[0].value
            self.fail("no metric %s" % name)

        rx0, tx0 = sample("nanomq_messages_received"), sample("nanomq_messages_sent")
        sub = self.paho("t60-prom")
        sub.subscribe("t60/prom", 0)
        pub = self.paho("t60-prom-pub")
        for i in range(5):
            pub.publish("t60/prom", b"x")
        sub.wait_messages(5)
        self.assertGreaterEqual(sample("nanomq_messages_received") - rx0, 5)
        self.assertGreaterEqual(sample("nanomq_messages_sent") - tx0, 5)
        self.assertGreaterEqual(sample("nanomq_connections_count"), 2)
        st, ct, d = self.api.request("GET", "/api/v4/prometheus")
        per = {s.labels["listener"]: s.value for f in text_string_to_metric_families(d.decode())
               if f.name == "nanomq_listener_connections" for s in f.samples}
        self.assertEqual(list(per), ["tcp"])
        self.assertGreaterEqual(per["tcp"], 2)
        self.assertGreater(sample("nanomq_memory_usage"), 100000)
        st, j = self.api.json("GET", "/api/v4/metrics")
        self.assertEqual(set(j), {"metrics", "cpuinfo", "memory", "connections"})
        self.assertRegex(j["cpuinfo"], r"^\d+\.\d\d%$")
        self.assertGreater(int(j["memory"]), 100000)
        self.assertGreaterEqual(j["metrics"][0]["messages_received"], 5)

    def test_every_endpoint_with_curl_and_http_client(self):
        c = self.paho("t60-every", clean=False)
        c.subscribe("t60/every", 1)
        gets = ["/api/v4", "/api/v4/brokers", "/api/v4/nodes", "/api/v4/clients",
                "/api/v4/clients/t60-every", "/api/v4/clients/username/nobody",
                "/api/v4/subscriptions", "/api/v4/subscriptions/t60-every",
                "/api/v4/topic-tree", "/api/v4/metrics", "/api/v4/reload",
                "/api/v4/configuration", "/api/v4/configuration/mqtt", "/api/v4/bridges",
                "/api/v4/bridges/cloud"]
        for path in gets:
            code, body = curl(self.http_port, path)
            st, j = self.api.json("GET", path)
            self.assertEqual((code, st), (200, 200), path)
            jc = json.loads(body)
            self.assertEqual(set(jc), set(j), path)
            if path != "/api/v4/metrics":
                self.assertEqual((jc["code"], j["code"]), (0, 0), path)
        code, body = curl(self.http_port, "/api/v4/prometheus")
        self.assertEqual(code, 200)
        self.assertIn(b"# TYPE nanomq_messages_sent counter", body)
        posts = [("/api/v4/mqtt/subscribe", {"topic": "t60/e2", "clientid": "t60-every"}),
                 ("/api/v4/mqtt/subscribe_batch", [{"topic": "t60/e3", "clientid": "t60-every"}]),
                 ("/api/v4/mqtt/publish", {"topic": "t60/e2", "payload": "via curl"}),
                 ("/api/v4/mqtt/publish_batch", [{"topic": "t60/e3", "payload": "batch"}]),
                 ("/api/v4/mqtt/unsubscribe", {"topic": "t60/e2", "clientid": "t60-every"}),
                 ("/api/v4/mqtt/unsubscribe_batch",
                  [{"topic": "t60/e3", "clientid": "t60-every"}]),
                 ("/api/v4/reload", {"data": {"allow_anonymous": True}})]
        for path, body in posts:
            code, out = curl(self.http_port, path, "-H", "Content-Type: application/json",
                             "-d", json.dumps(body))
            self.assertEqual((code, json.loads(out)["code"]), (200, 0), path)
        got = sorted((m.topic, m.payload) for m in c.wait_messages(2))
        self.assertEqual(got, [("t60/e2", b"via curl"), ("t60/e3", b"batch")])
        # urllib with a JSON body, as a script would post one.
        req = urllib.request.Request(
            "http://%s:%d/api/v4/mqtt/publish" % (nmq.HOST, self.http_port),
            data=json.dumps({"topic": "t60/every", "payload": "urllib"}).encode(),
            headers={"Content-Type": "application/json", "Authorization": self.api.auth})
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertEqual(json.load(r), {"code": 0})
        self.assertEqual(c.wait_message().payload, b"urllib")
        try:
            urllib.request.urlopen("http://%s:%d/api/v4/nodes" % (nmq.HOST, self.http_port),
                                   timeout=10)
            self.fail("no credentials accepted")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 401)
            self.assertEqual(json.load(e)["code"], 104)

    def test_bridges(self):
        # NanoMQ's shape (data.bridge.nodes, the settings with the
        # connector apart), with the bridge's health beside the settings.
        st, j = self.api.json("GET", "/api/v4/bridges")
        self.assertEqual((st, j["code"]), (200, 0))
        nodes = j["data"]["bridge"]["nodes"]
        self.assertEqual([b["name"] for b in nodes], ["cloud"])
        self.assertNotEqual(nodes[0]["state"], "up")
        st, j = self.api.json("GET", "/api/v4/bridges/cloud")
        node = j["data"]["bridge"]["nodes"][0]
        self.assertEqual((st, node["name"], node["enable"]), (200, "cloud", True))
        self.assertIn("backlog", node)
        self.assertTrue(node["connector"]["server"].startswith("mqtt-tcp://127.0.0.1:"))
        self.assertEqual((node["connector"]["clientid"], node["connector"]["proto_ver"],
                          node["connector"]["keepalive"]), ("gw-1", 4, 60))
        self.assertEqual([(f["local_topic"], f["remote_topic"]) for f in node["forwards"]],
                         [("up/#", "up/x")])
        for k in ("subscription", "sub_properties", "max_send_queue_len",
                  "max_recv_queue_len", "tls", "parallel"):
            self.assertIn(k, node)
        st, j = self.api.json("GET", "/api/v4/bridges/nope")
        self.assertEqual(st, 404)
        # Its settings are in the configuration.
        st, j = self.api.json("GET", "/api/v4/configuration/bridges")
        cloud = j["data"]["mqtt"]["cloud"]
        self.assertTrue(cloud["server"].startswith("mqtt-tcp://127.0.0.1:"))
        self.assertEqual(cloud["clientid"], "gw-1")
        self.assertEqual([(f["local_topic"], f["remote_topic"]) for f in cloud["forwards"]],
                         [("up/#", "up/x")])

    def test_reload_and_configuration(self):
        st, j = self.api.json("GET", "/api/v4/reload")
        d = j["data"]
        for k in ["property_size", "max_packet_size", "client_max_packet_size", "msq_len",
                  "qos_duration", "keepalive_backoff", "allow_anonymous",
                  "enable_mqtt_stream", "bridge_mode"]:
            self.assertIn(k, d)
        st, j = self.api.json("POST", "/api/v4/reload",
                              {"data": {"msq_len": 77, "keepalive_backoff": 1250,
                                        "max_packet_size": 64}})
        self.assertEqual((st, j["code"]), (200, 0))
        self.assertEqual(j["data"]["msq_len"], 77)
        self.assertEqual(j["data"]["keepalive_backoff"], 1.25)
        # Applied: a 100 KiB publish is now over max_packet_size (64 KB).
        c = self.paho("t60-big")
        self.addCleanup(self.api.json, "POST", "/api/v4/reload",
                        {"data": {"msq_len": d["msq_len"], "keepalive_backoff": 1.5,
                                  "max_packet_size": d["max_packet_size"]}})
        c.publish("t60/big", b"x" * 100000, qos=0)
        self.assertTrue(c.disconnected.wait(5),
                        "a packet over the new max_packet_size was accepted")
        st, j = self.api.json("POST", "/api/v4/reload", {"data": {"msq_len": -1}})
        self.assertEqual((st, j["code"]), (400, 108))
        st, j = self.api.json("GET", "/api/v4/configuration")
        self.assertEqual(st, 200)
        hs = j["data"]["http_server"]
        self.assertEqual(hs["password"], "******")
        self.assertEqual(hs["port"], self.http_port)
        st, j = self.api.json("GET", "/api/v4/configuration/http_server")
        self.assertEqual(j["data"]["username"], USER)
        self.assertNotIn(PASSWORD, json.dumps(j))
        st, j = self.api.json("GET", "/api/v4/configuration/nope")
        self.assertEqual(st, 404)


class QueueDepthTest(unittest.TestCase):
    """The queue-depth gauges (docs/metrics.md) follow known traffic on a
    broker of their own (nothing else queues there): an offline persistent
    session's backlog, a non-acking subscriber's in-flight window, and
    their return to 0 when the client acks, when a clean start discards
    the session, when it expires, and on a takeover."""

    GAUGES = ("nanomq_queued_messages_qos0", "nanomq_queued_messages_qos12",
              "nanomq_inflight_messages")

    @classmethod
    def setUpClass(cls):
        cls.http_port = nmq.free_port()
        cls.broker = Broker("http_server { port = %d, username = %s, password = %s }\n"
                            % (cls.http_port, USER, PASSWORD))
        cls.broker.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket_ok = http.client.HTTPConnection(nmq.HOST, cls.http_port, timeout=1)
                socket_ok.connect()
                socket_ok.close()
                break
            except OSError:
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        problems = cls.broker.stop()
        if problems:
            raise AssertionError("broker problem: " + "\n".join(problems))

    def setUp(self):
        self.api = Api(self.http_port)
        self.addCleanup(self.api.close)

    def depth(self):
        """(qos0 queued, qos1/2 queued, in flight) through the Prometheus parser."""
        st, ct, d = self.api.request("GET", "/api/v4/prometheus")
        self.assertEqual(st, 200)
        fams = {f.name: f for f in text_string_to_metric_families(d.decode())}
        for n in self.GAUGES:
            self.assertEqual(fams[n].type, "gauge", n)
            self.assertTrue(fams[n].documentation, n)
        return tuple(int(fams[n].samples[0].value) for n in self.GAUGES)

    def wait_depth(self, want, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            got = self.depth()
            if got == want or time.monotonic() > deadline:
                self.assertEqual(got, want)
                return
            time.sleep(0.05)

    def json_depth(self):
        st, j = self.api.json("GET", "/api/v4/metrics")
        m = j["metrics"][0]
        return (m["queued_messages_qos0"], m["queued_messages_qos12"], m["inflight_messages"])

    def offline_session(self, cid, topic, n, version=4, props=None):
        """A persistent session subscribed to topic at QoS 1, offline, with n
        QoS 1 messages queued."""
        c = nmq.RawClient(self.broker.port, version=version)
        c.connect(cid, clean=False, props=props)
        c.subscribe([(topic, nmq.sub_opts(1) if version == 5 else 1)])
        c.disconnect()
        c.close()
        pub = PahoClient(self.broker.port, cid + "-pub")
        pub.connect()
        try:
            for i in range(n):
                pub.publish(topic, b"m%d" % i, qos=1)
        finally:
            pub.close()

    def test_backlog_inflight_and_ack(self):
        self.wait_depth((0, 0, 0))
        self.offline_session("qd-a", "qd/a", 7)
        self.wait_depth((0, 7, 0))
        self.assertEqual(self.json_depth(), (0, 7, 0))
        # Back with Receive Maximum 2 and no acks: 2 in flight, 5 waiting.
        c = nmq.RawClient(self.broker.port, version=5)
        c.connect("qd-a", clean=False, props={"ReceiveMaximum": 2,
                                               "SessionExpiryInterval": 3600})
        first = c.expect_publishes(2)
        self.wait_depth((0, 5, 2))
        c.expect_nothing(0.3, types=(nmq.PUBLISH,))
        self.assertEqual(self.depth(), (0, 5, 2))
        # A takeover keeps the session: the window is resent, same counts.
        c.abort()
        c = nmq.RawClient(self.broker.port, version=5)
        c.connect("qd-a", clean=False, props={"ReceiveMaximum": 2,
                                               "SessionExpiryInterval": 3600})
        again = c.expect_publishes(2)
        self.assertEqual([p.payload for p in again], [p.payload for p in first])
        self.wait_depth((0, 5, 2))
        # Acking everything empties both.
        for p in again:
            c.ack(p)
        c.expect_publishes(5, ack=True)
        self.wait_depth((0, 0, 0))
        c.disconnect()
        c.close()
        # The session is offline and empty; a clean start ends it.
        c = nmq.RawClient(self.broker.port)
        c.connect("qd-a", clean=True)
        c.close()
        self.wait_depth((0, 0, 0))

    def test_clean_start_discards_backlog_and_window(self):
        self.offline_session("qd-b", "qd/b", 4)
        self.wait_depth((0, 4, 0))
        c = nmq.RawClient(self.broker.port, version=5)
        c.connect("qd-b", clean=False, props={"ReceiveMaximum": 1,
                                               "SessionExpiryInterval": 3600})
        c.expect_publishes(1)
        self.wait_depth((0, 3, 1))
        # A clean start while the old connection holds the window: both gone.
        d = nmq.RawClient(self.broker.port)
        d.connect("qd-b", clean=True)
        self.wait_depth((0, 0, 0))
        d.disconnect()
        d.close()
        c.close()
        # A 3.1.1 clean start on an offline backlog discards it too.
        self.offline_session("qd-b2", "qd/b2", 3)
        self.wait_depth((0, 3, 0))
        d = nmq.RawClient(self.broker.port)
        d.connect("qd-b2", clean=True)
        self.wait_depth((0, 0, 0))
        d.close()

    def test_expiry_empties_backlog(self):
        self.offline_session("qd-c", "qd/c", 5, version=5,
                             props={"SessionExpiryInterval": 1})
        self.wait_depth((0, 5, 0))
        self.wait_depth((0, 0, 0), timeout=10.0)


class QueueDepthStoreTest(QueueDepthTest):
    """With the durable store an offline session's QoS 1/2 backlog is on
    disk only (not in the gauges); read back in chunks as the client takes
    it, it enters the queued gauge and leaves it as it is acknowledged."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="nmq-t60qd-")
        cls.http_port = nmq.free_port()
        cls.broker = Broker("http_server { port = %d, username = %s, password = %s }\n"
                            "sqlite {\n  enable = true\n  mounted_file_path = \"%s\"\n}\n"
                            % (cls.http_port, USER, PASSWORD, cls.dir))
        cls.broker.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                probe = http.client.HTTPConnection(nmq.HOST, cls.http_port, timeout=1)
                probe.connect()
                probe.close()
                break
            except OSError:
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.dir, True)

    def test_backlog_inflight_and_ack(self):
        n = 300  # more than one read-back chunk
        self.offline_session("qd-s", "qd/s", n)
        time.sleep(0.3)
        self.assertEqual(self.depth(), (0, 0, 0))
        c = nmq.RawClient(self.broker.port, version=5)
        c.connect("qd-s", clean=False, props={"ReceiveMaximum": 2,
                                               "SessionExpiryInterval": 3600})
        first = c.expect_publishes(2)
        deadline = time.monotonic() + 5
        while self.depth()[2] != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        q0, q12, infl = self.depth()
        self.assertEqual((q0, infl), (0, 2))
        self.assertTrue(0 < q12 <= n - 2, q12)
        for p in first:
            c.ack(p)
        c.expect_publishes(n - 2, ack=True)
        self.wait_depth((0, 0, 0))
        c.disconnect()
        c.close()

    # The other scenarios of the base class run here too: the backlog they
    # expect in memory is on disk with the store.
    test_clean_start_discards_backlog_and_window = None
    test_expiry_empties_backlog = None


if __name__ == "__main__":
    unittest.main(verbosity=2)
