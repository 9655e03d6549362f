#!/usr/bin/python3
"""65: HTTP authorization (docs/http-auth.md): auth.http_auth.acl_req asked
about PUBLISH topics and SUBSCRIBE filters that no auth.acl rule matches,
super_req asked after a successful auth_req, against a service written
here, over http and https. A 2xx answer allows, anything else (another
status, no service, no answer in time) denies: v5 PUBACK / PUBREC 0x87,
v3 and QoS 0 dropped and counted, SUBACK 0x87 / 0x80. A PUBLISH waiting
for the service parks its connection only: with one worker, other clients
are served meanwhile, and the waiting client's later packets keep their
order. Answers are cached (auth.cache.ttl)."""

import http.server
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

import nmq
from nmq import BrokerTestCase, skip_on_mosquitto, PUBACK, PUBREC, PUBLISH, SUBACK


def wait_for(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.02)
    return pred()


class Service:
    """The auth service. /auth: user good*, gated*, super* get 200, others
    403 (gated* once the test opens the gate).
    /super: user super* 200, others 403. /acl: topic allow/* 200, deny/* 403;
    a PUBLISH (access 2) to gate/* or a SUBSCRIBE (access 1) to sgate/* waits
    until the test opens the gate, then 200. With tls, it serves https with the given certificate."""

    def __init__(self, certfile=None, keyfile=None):
        self.reqs = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        svc = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n).decode()
                url = urllib.parse.urlsplit(self.path)
                p = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
                with svc.lock:
                    svc.reqs.append((url.path, p))
                user = p.get("user", "")
                topic = p.get("topic", "")
                if url.path == "/auth":
                    if user.startswith("gated"):
                        svc.gate.wait(30)
                    ok = user.startswith(("good", "gated", "super"))
                elif url.path == "/super":
                    ok = user.startswith("super")
                else:
                    if ((topic.startswith("gate/") and p.get("access") == "2")
                            or (topic.startswith("sgate/") and p.get("access") == "1")):
                        svc.gate.wait(30)
                    ok = topic.startswith(("allow/", "gate/", "sgate/"))
                self.send_response(200 if ok else 403)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        if certfile:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile, keyfile)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def requests(self, path=None):
        with self.lock:
            return [p for (pp, p) in self.reqs if path is None or pp == path]

    def close(self):
        self.gate.set()
        self.srv.shutdown()
        self.srv.server_close()


ACL_PARAMS = ('params = { access = "%A", user = "%u", cid = "%c", ip = "%a", '
              'proto = "%r", port = "%p", topic = "%t", mount = "%m" }')


class AclCase(BrokerTestCase):
    AUTH = False  # also auth_req and super_req
    AUTH_PARAMS = 'params = { user = "%u" }'
    PARAMS = ACL_PARAMS
    LISTENERS = ""  # more listeners
    SCHEME = "http"
    ACL_URL = None  # None: the service's /acl
    TIMEOUT = "20s"  # longer than any wait for the gate
    CACHE = "cache { enable = true, ttl = 30s }\n"
    DENY = ""
    SSL = ""
    CERTS = None

    def setUp(self):
        if self.CERTS:
            self.svc = Service(os.path.join(self.CERTS, "server.crt"),
                               os.path.join(self.CERTS, "server.key"))
        else:
            self.svc = Service()
        self.addCleanup(self.svc.close)
        base = "%s://127.0.0.1:%d" % (self.SCHEME, self.svc.port)
        acl_url = self.ACL_URL or base + "/acl"
        auth = ""
        if self.AUTH:
            auth = ('    auth_req { url = "%s/auth", %s }\n'
                    '    super_req { url = "%s/super", params = { user = "%%u" } }\n'
                    % (base, self.AUTH_PARAMS, base))
        self.api_port = nmq.free_port()
        self.CONF = (
            'system.num_taskq_thread = 1\nsystem.parallel = 1\n'
            'auth {\n  allow_anonymous = true\n  no_match = allow\n'
            '  password = { "admin" = "secret" }\n  %s%s'
            '  acl = { rules = [ { permit = deny, topics = ["secret/#"] },'
            ' { permit = allow, username = "admin" } ] }\n'
            '  http_auth {\n%s    acl_req {\n      url = "%s"\n      %s\n    }\n'
            '    timeout = %s\n    connect_timeout = 1s\n%s  }\n}\n'
            'http_server { port = %d, auth_type = no_auth }\n%s'
            % (self.CACHE, self.DENY, auth, acl_url, self.PARAMS, self.TIMEOUT, self.SSL,
               self.api_port, self.LISTENERS))
        super().setUp()

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.api_port, path),
                                    timeout=5) as r:
            return r.read().decode()

    def stats(self, kind="acl_req"):
        return json.loads(self.get("/api/v4/http_auth"))["data"][kind]

    def watcher(self, *filters):
        """A client allowed by the file ACL (user admin) subscribed to filters."""
        w = self.raw(5, client_id="watch-%d" % time.monotonic_ns(), username="admin",
                     password="secret")
        sa = w.subscribe([(f, 1) for f in filters])
        self.assertEqual(sa.codes, [1] * len(filters))
        return w


@skip_on_mosquitto("auth.http_auth is nanomq's")
class AclReqTests(AclCase):
    def test_publish_allowed_and_denied_v5(self):
        w = self.watcher("allow/#", "deny/#")
        c = self.raw(5, client_id="p5", username="u5")
        self.assertEqual(c.publish("allow/a", b"yes", qos=1).rc, 0)
        self.assertEqual(w.expect(PUBLISH).payload, b"yes")
        self.assertEqual(c.publish("deny/a", b"no", qos=1).rc, 0x87)
        self.assertEqual(c.publish("deny/b", b"no", qos=2).rc, 0x87)  # PUBREC 0x87
        c.publish("deny/c", b"no", qos=0)
        w.expect_nothing(types=[PUBLISH])
        self.assertTrue(c.is_open())  # deny_action = ignore
        pubs = [r for r in self.svc.requests("/acl") if r["access"] == "2"]
        self.assertEqual(pubs[0], {"access": "2", "user": "u5", "cid": "p5", "ip": "127.0.0.1",
                                   "proto": "5", "port": str(self.port), "topic": "allow/a",
                                   "mount": ""})
        st = self.stats()
        self.assertEqual((st["allowed"] >= 1, st["denied"]), (True, 3), st)
        drops = json.loads(self.get("/api/v4/drops"))
        acl = [e for e in drops["data"] if e["reason"] == "acl_publish"]
        self.assertEqual(sorted(e["topic"] for e in acl), ["deny/a", "deny/b", "deny/c"])

    def test_publish_denied_v3_is_acked_and_dropped(self):
        w = self.watcher("deny/#")
        c = self.raw(4, client_id="p3")
        self.assertEqual(c.publish("deny/v3", b"no", qos=1).type, PUBACK)
        w.expect_nothing(types=[PUBLISH])
        self.assertIn('nanomq_messages_dropped_by_reason{reason="acl"} 1',
                      self.get("/api/v4/prometheus"))

    def test_subscribe_per_filter(self):
        c5 = self.raw(5, client_id="s5", username="u")
        sa = c5.subscribe([("allow/x", 1), ("deny/x", 1), ("allow/y", 0)])
        self.assertEqual(sa.codes, [1, 0x87, 0])
        c3 = self.raw(4, client_id="s3")
        self.assertEqual(c3.subscribe([("deny/z", 0), ("allow/z", 1)]).codes, [0x80, 1])
        subs = [r for r in self.svc.requests("/acl") if r["access"] == "1"]
        self.assertEqual([r["topic"] for r in subs],
                         ["allow/x", "deny/x", "allow/y", "deny/z", "allow/z"])
        # The granted filters deliver.
        self.raw(4, client_id="pub", username="admin", password="secret").publish(
            "allow/x", b"m", qos=1)
        self.assertEqual(c5.expect(PUBLISH).payload, b"m")

    def test_file_rules_first_and_cache(self):
        c = self.raw(5, client_id="fc")
        # A file rule decides secret/#: the service is not asked.
        self.assertEqual(c.publish("secret/a", b"x", qos=1).rc, 0x87)
        self.assertEqual(self.svc.requests("/acl"), [])
        for i in range(3):
            self.assertEqual(c.publish("allow/c", b"%d" % i, qos=1).rc, 0)
        self.assertEqual(len(self.svc.requests("/acl")), 1)
        st = self.stats()
        self.assertEqual((st["allowed"], st["cache_hits"]), (1, 2), st)

    def test_paho_and_mosquitto_clients(self):
        sub = nmq.MosquittoSub(self.port, ["allow/m"], qos=1, version=5)
        self.addCleanup(sub.close)
        sub.wait_subscribed()
        p = self.paho("paho-a", version=5)
        p.publish("allow/m", b"from-paho", qos=1)
        p.publish("deny/m", b"hidden", qos=1)
        r = nmq.mosquitto_pub(self.port, "allow/m", "from-mosq", qos=1, version=4)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = sub.get(2)
        self.assertEqual(sorted(l.split("|")[-1] for l in got), ["from-mosq", "from-paho"])
        sub.no_more()

    def test_slow_answer_blocks_no_other_client(self):
        w = self.watcher("gate/#", "allow/#")
        slow = self.raw(5, client_id="slow")
        slow.publish("gate/1", b"first", qos=1, complete=False)
        self.assertTrue(wait_for(lambda: any(r["topic"] == "gate/1"
                                             for r in self.svc.requests("/acl")), 5))
        # The only worker serves another client while slow's answer waits.
        other = self.paho("other", version=5)
        other.publish("allow/o", b"other-1", qos=1)
        self.assertEqual(w.expect(PUBLISH).payload, b"other-1")
        self.assertFalse(self.svc.gate.is_set())
        slow.expect_nothing(types=[PUBACK])
        self.svc.gate.set()
        self.assertEqual(slow.expect(PUBACK).rc, 0)
        self.assertEqual(w.expect(PUBLISH).payload, b"first")

    def test_order_kept_behind_a_waiting_publish(self):
        w = self.watcher("gate/#", "allow/#")
        c = self.raw(5, client_id="ordered")
        pids = []
        for i, t in enumerate(["gate/1", "allow/2", "allow/3", "gate/4", "allow/5"]):
            pid = c.next_pid()
            pids.append(pid)
            c.send(nmq.publish_bytes(t, b"m%d" % i, 1, pid=pid, version=5))
        c.send(nmq.subscribe_bytes([("allow/late", 1)], 999, version=5))
        self.assertTrue(wait_for(lambda: len(self.svc.requests("/acl")) >= 1, 5))
        # Nothing of c's overtakes the first, still waiting, PUBLISH.
        w.expect_nothing(types=[PUBLISH])
        c.expect_nothing()
        self.svc.gate.set()
        got = w.expect_publishes(5)
        self.assertEqual([p.payload for p in got], [b"m0", b"m1", b"m2", b"m3", b"m4"])
        acks = [c.read() for _ in range(6)]
        self.assertEqual([(a.type, a.pid) for a in acks],
                         [(PUBACK, p) for p in pids] + [(SUBACK, 999)])
        # Asked one at a time, in the client's order.
        self.assertEqual([r["topic"] for r in self.svc.requests("/acl")],
                         ["gate/1", "allow/2", "allow/3", "gate/4", "allow/5", "allow/late"])

    def test_pingreq_answered_while_waiting(self):
        """A client whose PUBLISH (then SUBSCRIBE) waits for a withheld
        answer keeps its keepalive (1 s) going: each PINGREQ gets its
        PINGRESP while the answer is still withheld, for longer than the
        broker's own keepalive deadline (1.5 s), and the connection stays
        up; the parked packet and those behind it are then handled in
        order."""
        for parked, access in ((nmq.publish_bytes("gate/p", b"m0", 1, pid=1, version=5), "2"),
                               (nmq.subscribe_bytes([("sgate/p", 1)], 1, version=5), "1")):
            with self.subTest(parked="PUBLISH" if access == "2" else "SUBSCRIBE"):
                self.svc.gate.clear()
                w = self.watcher("gate/#", "allow/#")
                c = self.raw(5, client_id="pinger-" + access, keepalive=1)
                c.send(parked + nmq.publish_bytes("allow/behind", b"m1", 1, pid=2, version=5))
                self.assertTrue(wait_for(lambda: any(
                    r["access"] == access and r["topic"].endswith("gate/p")
                    for r in self.svc.requests("/acl")), 5))
                for _ in range(5):  # 2.5 s: past 1.5 x keepalive
                    c.pingreq()
                    c.expect(nmq.PINGRESP, 5)
                    self.assertFalse(self.svc.gate.is_set())
                    time.sleep(0.5)
                # Only the PINGRESPs: nothing of the parked packet or the
                # one behind it yet.
                self.assertEqual(c.backlog, [])
                w.expect_nothing(types=[PUBLISH])
                self.svc.gate.set()
                first = c.read()
                if access == "2":
                    self.assertEqual((first.type, first.pid, first.rc), (PUBACK, 1, 0))
                else:
                    self.assertEqual((first.type, first.pid, first.codes), (SUBACK, 1, [1]))
                second = c.read()
                self.assertEqual((second.type, second.pid), (PUBACK, 2))
                got = w.expect_publishes(2 if access == "2" else 1)
                self.assertEqual([p.payload for p in got],
                                 [b"m0", b"m1"] if access == "2" else [b"m1"])
                c.pingreq()
                c.expect(nmq.PINGRESP, 5)
                c.disconnect()
                w.disconnect()

    def test_quick_client_published_after_the_answer(self):
        """mosquitto_pub -q 0 sends PUBLISH and DISCONNECT and closes at
        once: its PUBLISH, waiting for the service, is published when the
        answer comes (the connection is not read past the DISCONNECT
        meanwhile, so its end is not seen first)."""
        w = self.watcher("gate/#")
        for v in (4, 5):
            with self.subTest(version=v):
                self.svc.gate.clear()
                topic = "gate/quick-%d" % v
                r = nmq.mosquitto_pub(self.port, topic, "quick-%d" % v, qos=0, version=v)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(wait_for(lambda: any(
                    q["topic"] == topic for q in self.svc.requests("/acl")), 5))
                self.svc.gate.set()
                m = w.expect(PUBLISH)
                self.assertEqual((m.topic, m.payload), (topic, b"quick-%d" % v))

    def test_subscribe_waits_filter_by_filter(self):
        c = self.raw(5, client_id="sw")
        c.send(nmq.subscribe_bytes([("sgate/a", 1), ("deny/b", 1), ("sgate/c", 0)], 77,
                                   version=5)
               + nmq.publish_bytes("allow/after", b"x", 1, pid=5, version=5))
        self.assertTrue(wait_for(lambda: len(self.svc.requests("/acl")) >= 1, 5))
        c.expect_nothing()
        self.svc.gate.set()
        sa = c.read()
        self.assertEqual((sa.type, sa.pid, sa.codes), (SUBACK, 77, [1, 0x87, 0]))
        self.assertEqual(c.expect(PUBACK).pid, 5)
        self.assertEqual([(r["access"], r["topic"]) for r in self.svc.requests("/acl")],
                         [("1", "sgate/a"), ("1", "deny/b"), ("1", "sgate/c"),
                          ("2", "allow/after")])
        self.raw(4, client_id="pub", username="admin", password="secret").publish(
            "sgate/c", b"to-sw", qos=1)
        self.assertEqual(c.expect(PUBLISH).payload, b"to-sw")

    def test_client_gone_while_waiting(self):
        for i in range(3):
            c = nmq.RawClient(self.port, version=5)
            c.connect("gone-%d" % i)
            c.send(nmq.publish_bytes("gate/g%d" % i, b"x", 1, pid=1, version=5)
                   + nmq.publish_bytes("allow/after", b"y", 1, pid=2, version=5))
            time.sleep(0.05)
            c.sock.close()
        self.assertTrue(wait_for(lambda: len(self.svc.requests("/acl")) >= 3, 5))
        self.svc.gate.set()
        self.assertTrue(wait_for(lambda: self.stats()["allowed"] >= 3, 5), self.stats())
        self.assertTrue(self.broker.alive(), self.broker.log_tail())
        w = self.watcher("allow/#")
        self.raw(4, client_id="after").publish("allow/x", b"ok", qos=1)
        self.assertEqual(w.expect(PUBLISH).payload, b"ok")

    def test_stop_while_waiting(self):
        """SIGTERM while a PUBLISH and a SUBSCRIBE wait for a service that
        never answers: the broker stops at once and cleanly."""
        c = self.raw(5, client_id="w1")
        c.publish("gate/s", b"x", qos=1, complete=False)
        d = self.raw(5, client_id="w2")
        d.send(nmq.subscribe_bytes([("allow/a", 1), ("sgate/s", 1)], 3, version=5))
        self.assertTrue(wait_for(lambda: len(self.svc.requests("/acl")) >= 3, 5))
        t0 = time.monotonic()
        self.assertEqual(self.broker.stop(), [])
        # At once, not after the callouts' timeout (20 s).
        self.assertLess(time.monotonic() - t0, 10.0)

    def test_metrics(self):
        c = self.raw(5, client_id="m")
        c.publish("allow/m", b"", qos=1)
        c.publish("deny/m", b"", qos=1)
        fams = {f.name: f for f in text_string_to_metric_families(self.get("/api/v4/prometheus"))}
        f = fams["nanomq_http_auth_requests"]
        self.assertTrue(f.documentation)
        v = {(s.labels["req"], s.labels["result"]): s.value for s in f.samples}
        self.assertEqual((v[("acl_req", "allowed")], v[("acl_req", "denied")],
                          v[("acl_req", "timeout")], v[("auth_req", "allowed")]),
                         (1, 1, 0, 0))
        m = json.loads(self.get("/api/v4/metrics"))["metrics"][0]["http_auth"]
        self.assertEqual((m["acl_req_allowed"], m["acl_req_denied"]), (1, 1))


@skip_on_mosquitto("auth.http_auth is nanomq's")
class DenyDisconnectTests(AclCase):
    DENY = "deny_action = disconnect\n  "

    def test_v5_gets_0x87_then_disconnect(self):
        c = self.raw(5, client_id="dd")
        self.assertEqual(c.publish("allow/d", b"", qos=1).rc, 0)
        self.assertEqual(c.publish("deny/d", b"", qos=1).rc, 0x87)
        self.assertEqual(c.expect(nmq.DISCONNECT).rc, 0x87)
        c.expect_closed()

    def test_v3_closed(self):
        c = self.raw(4, client_id="d3")
        c.publish("deny/d", b"", qos=0)
        c.expect_closed()


@skip_on_mosquitto("auth.http_auth is nanomq's")
class CacheBoundTests(AclCase):
    CACHE = "cache { enable = true, max_size = 2, ttl = 30s }\n"

    def topics_asked(self):
        return [r["topic"] for r in self.svc.requests("/acl")]

    def test_per_client_bound_and_reload(self):
        c = self.raw(5, client_id="cb")
        for t in ["allow/1", "allow/2", "allow/3", "allow/3", "allow/1"]:
            self.assertEqual(c.publish(t, b"", qos=1).rc, 0)
        # Two answers per client: allow/1 was forgotten for allow/3.
        self.assertEqual(self.topics_asked(), ["allow/1", "allow/2", "allow/3", "allow/1"])
        # Another client has its own two.
        d = self.raw(5, client_id="cb2")
        self.assertEqual(d.publish("allow/x", b"", qos=1).rc, 0)
        self.assertEqual(c.publish("allow/1", b"", qos=1).rc, 0)
        self.assertEqual(len(self.topics_asked()), 5)
        # A reload forgets every answer.
        before = self.broker.log_text().count("event=reloaded")
        self.broker.proc.send_signal(signal.SIGHUP)
        self.assertTrue(wait_for(
            lambda: self.broker.log_text().count("event=reloaded") > before, 10))
        self.assertEqual(c.publish("allow/1", b"", qos=1).rc, 0)
        self.assertEqual(self.topics_asked()[-1], "allow/1")
        self.assertEqual(len(self.topics_asked()), 6)


@skip_on_mosquitto("auth.http_auth is nanomq's")
class NoCacheTests(AclCase):
    CACHE = "cache { enable = false }\n"

    def test_every_publish_asks(self):
        c = self.raw(5, client_id="nc")
        for i in range(3):
            self.assertEqual(c.publish("allow/n", b"", qos=1).rc, 0)
        self.assertEqual(len(self.svc.requests("/acl")), 3)


@skip_on_mosquitto("auth.http_auth is nanomq's")
class SuperuserTests(AclCase):
    AUTH = True

    def test_superuser_skips_both_acls(self):
        s = self.raw(5, client_id="su", username="super-1", password="p")
        # secret/# is denied by a file rule, deny/# by acl_req.
        self.assertEqual(s.subscribe([("deny/#", 1), ("secret/#", 1)]).codes, [1, 1])
        self.assertEqual(s.publish("secret/s", b"a", qos=1).rc, 0)
        self.assertEqual(s.publish("deny/s", b"b", qos=1).rc, 0)
        self.assertEqual(sorted(p.payload for p in s.expect_publishes(2)), [b"a", b"b"])
        self.assertEqual(self.svc.requests("/acl"), [])
        self.assertEqual(self.stats("super_req")["allowed"], 1)

    def test_connect_then_publishes_both_waiting(self):
        """A CONNECT waiting for auth_req, with PUBLISHes right behind it that
        wait for acl_req in turn: all in order once the gate opens."""
        w = self.watcher("gate/#", "allow/#")
        c = self.raw(5)
        c.send(nmq.connect_bytes("gated-c", version=5, username="gated-1", password="p")
               + nmq.publish_bytes("gate/1", b"a", 1, pid=1, version=5)
               + nmq.publish_bytes("allow/2", b"b", 1, pid=2, version=5)
               + nmq.publish_bytes("deny/3", b"c", 1, pid=3, version=5))
        self.assertTrue(wait_for(lambda: len(self.svc.requests("/auth")) == 1, 5))
        c.expect_nothing()
        self.svc.gate.set()
        got = [c.read() for _ in range(4)]
        self.assertEqual([(p.type, p.rc) for p in got],
                         [(nmq.CONNACK, 0), (PUBACK, 0), (PUBACK, 0), (PUBACK, 0x87)])
        self.assertEqual([p.pid for p in got[1:]], [1, 2, 3])
        self.assertEqual([p.payload for p in w.expect_publishes(2)], [b"a", b"b"])
        w.expect_nothing(types=[PUBLISH])

    def test_ordinary_user(self):
        c = self.raw(5, client_id="gu", username="good-1", password="p")
        self.assertEqual(c.publish("secret/s", b"", qos=1).rc, 0x87)
        self.assertEqual(c.publish("deny/s", b"", qos=1).rc, 0x87)
        self.assertEqual(c.publish("allow/s", b"", qos=1).rc, 0)
        st = self.stats("super_req")
        self.assertEqual((st["allowed"], st["denied"]), (0, 1), st)
        bad = self.raw(5)
        self.assertEqual(bad.connect("bu", username="bad-1", password="p").rc, 0x86)
        self.assertEqual(self.stats("super_req")["denied"], 1)  # not asked after a refusal


@skip_on_mosquitto("auth.http_auth is nanomq's")
class ServiceDownTests(AclCase):
    def setUp(self):
        self.ACL_URL = "http://127.0.0.1:%d/acl" % nmq.free_port()
        super().setUp()

    def test_denied_and_counted(self):
        c = self.raw(5, client_id="d")
        self.assertEqual(c.publish("allow/d", b"", qos=1).rc, 0x87)
        self.assertEqual(c.subscribe("allow/d").codes, [0x87])
        st = self.stats()
        self.assertEqual((st["errors"], st["allowed"]), (2, 0), st)
        # Failures are not cached.
        self.assertEqual(c.publish("allow/d", b"", qos=1).rc, 0x87)
        self.assertEqual(self.stats()["errors"], 3)


@skip_on_mosquitto("auth.http_auth is nanomq's")
class ServiceSilentTests(AclCase):
    TIMEOUT = "1s"

    def setUp(self):
        self.hole = socket.socket()
        self.hole.bind(("127.0.0.1", 0))
        self.hole.listen(16)
        self.addCleanup(self.hole.close)
        self.ACL_URL = "http://127.0.0.1:%d/acl" % self.hole.getsockname()[1]
        super().setUp()

    def test_timeout_denies(self):
        c = self.raw(5, client_id="t")
        self.assertEqual(c.publish("allow/t", b"", qos=1, timeout=5).rc, 0x87)
        self.assertEqual(self.stats()["timeouts"], 1)


class TlsCase(AclCase):
    SCHEME = "https"
    AUTH = True

    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("openssl is needed")
        cls.CERTS = tempfile.mkdtemp(prefix="nmq-pki-")
        src = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
            os.path.join(os.path.dirname(__file__), "..", ".."))
        subprocess.run(["bash", os.path.join(src, "scripts", "gen-certs.sh"), cls.CERTS],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, KEY_PASSWORD="nanomq-test"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.CERTS, ignore_errors=True)


class TlsRaw(nmq.RawClient):
    """A RawClient over TLS (ctx: an ssl.SSLContext)."""

    def __init__(self, port, version, ctx):
        self.version = version
        raw = socket.create_connection((nmq.HOST, port), timeout=5)
        self.sock = ctx.wrap_socket(raw)
        self.buf = bytearray()
        self.backlog = []
        self.closed = False
        self.aliases = {}


@skip_on_mosquitto("auth.http_auth is nanomq's")
class TlsClientPlaceholderTests(TlsCase):
    """A TLS listener with verify_peer: %C (common name) and %d (subject)
    of the client's verified certificate, and %p (the port of the listener
    the client connected to), in auth_req and in acl_req; empty for a
    client without a certificate and on the plain TCP listener."""
    SCHEME = "http"
    AUTH_PARAMS = 'params = { user = "%u", cn = "%C", subj = "%d", port = "%p" }'
    PARAMS = ('params = { access = "%A", user = "%u", topic = "%t", cn = "%C", subj = "%d", '
              'port = "%p", mount = "%m" }')

    def setUp(self):
        self.tls_port = nmq.free_port()
        c = self.CERTS
        self.LISTENERS = (
            'listeners.ssl {\n  bind = "127.0.0.1:%d"\n  certfile = "%s"\n  keyfile = "%s"\n'
            '  cacertfile = "%s"\n  verify_peer = true\n  fail_if_no_peer_cert = false\n}\n'
            % (self.tls_port, os.path.join(c, "server.crt"), os.path.join(c, "server.key"),
               os.path.join(c, "ca.crt")))
        # The service itself is plain http: the certificates are the MQTT
        # listener's (AclCase serves https when CERTS is set).
        certs, self.CERTS = self.CERTS, None
        try:
            super().setUp()
        finally:
            self.CERTS = certs

    def tls_client(self, cid, cert=True):
        ctx = ssl.create_default_context(cafile=os.path.join(self.CERTS, "ca.crt"))
        ctx.check_hostname = False
        if cert:
            ctx.load_cert_chain(os.path.join(self.CERTS, "client1.crt"),
                                os.path.join(self.CERTS, "client1.key"))
        c = self._track(TlsRaw(self.tls_port, 5, ctx))
        self.assertEqual(c.connect(cid, username="good-" + cid, password="p").rc, 0)
        return c

    def test_certificate_placeholders(self):
        subj = "O=nanomq test, CN=client1"
        c = self.tls_client("tc1")
        self.assertEqual(c.publish("allow/tls", b"x", qos=1).rc, 0)
        self.assertEqual(c.subscribe([("allow/tls-sub", 1)]).codes, [1])
        anon = self.tls_client("tc0", cert=False)
        self.assertEqual(anon.publish("allow/tls0", b"x", qos=1).rc, 0)
        plain = self.raw(5, client_id="pc", username="good-pc", password="p")
        self.assertEqual(plain.publish("allow/plain", b"x", qos=1).rc, 0)

        auth = {r["user"]: r for r in self.svc.requests("/auth")}
        self.assertEqual(auth["good-tc1"], {"user": "good-tc1", "cn": "client1", "subj": subj,
                                            "port": str(self.tls_port)})
        self.assertEqual(auth["good-tc0"], {"user": "good-tc0", "cn": "", "subj": "",
                                            "port": str(self.tls_port)})
        self.assertEqual(auth["good-pc"], {"user": "good-pc", "cn": "", "subj": "",
                                           "port": str(self.port)})
        acl = {r["topic"]: r for r in self.svc.requests("/acl")}
        self.assertEqual(acl["allow/tls"], {"access": "2", "user": "good-tc1", "topic": "allow/tls",
                                            "cn": "client1", "subj": subj,
                                            "port": str(self.tls_port), "mount": ""})
        self.assertEqual(acl["allow/tls-sub"], dict(acl["allow/tls"], access="1",
                                                    topic="allow/tls-sub"))
        self.assertEqual((acl["allow/tls0"]["cn"], acl["allow/tls0"]["subj"],
                          acl["allow/tls0"]["port"]), ("", "", str(self.tls_port)))
        self.assertEqual((acl["allow/plain"]["cn"], acl["allow/plain"]["subj"],
                          acl["allow/plain"]["port"]), ("", "", str(self.port)))


@skip_on_mosquitto("auth.http_auth is nanomq's")
class HttpsTests(TlsCase):
    def setUp(self):
        self.SSL = '    ssl { cacertfile = "%s" }\n' % os.path.join(self.CERTS, "ca.crt")
        super().setUp()

    def test_all_three_over_https(self):
        w = self.watcher("allow/#", "deny/#")
        s = self.raw(5, client_id="ts", username="super-t", password="p")
        self.assertEqual(s.publish("deny/t", b"su", qos=1).rc, 0)
        c = self.raw(5, client_id="tc", username="good-t", password="p")
        self.assertEqual(c.publish("allow/t", b"ok", qos=1).rc, 0)
        self.assertEqual(c.publish("deny/t", b"no", qos=1).rc, 0x87)
        self.assertEqual([p.payload for p in w.expect_publishes(2)], [b"su", b"ok"])
        self.assertEqual(self.stats("auth_req")["allowed"], 2)
        self.assertEqual(self.stats("super_req")["allowed"], 1)
        self.assertEqual((self.stats()["allowed"], self.stats()["denied"]), (1, 1))


@skip_on_mosquitto("auth.http_auth is nanomq's")
class HttpsUnverifiedTests(TlsCase):
    """The service's certificate is not signed by the CA given: every callout
    fails (and denies) unless verify_peer = false."""

    def setUp(self):
        self.other = tempfile.mkdtemp(prefix="nmq-pki-other-")
        self.addCleanup(shutil.rmtree, self.other, True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=other-ca",
                        "-keyout", os.path.join(self.other, "k.pem"),
                        "-out", os.path.join(self.other, "ca.pem"), "-days", "2"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        verify = "false" if "noverify" in self._testMethodName else "true"
        self.SSL = ('    ssl { cacertfile = "%s", verify_peer = %s }\n'
                    % (os.path.join(self.other, "ca.pem"), verify))
        super().setUp()

    def test_wrong_ca_denies(self):
        c = self.raw(5)
        self.assertEqual(c.connect("wc", username="good-w", password="p").rc, 0x86)
        self.assertEqual(self.stats("auth_req")["errors"], 1)
        a = self.raw(5, client_id="anon")
        self.assertEqual(a.publish("allow/w", b"", qos=1).rc, 0x87)
        self.assertEqual(self.svc.requests(), [])

    def test_noverify_accepts(self):
        c = self.raw(5, client_id="nv", username="good-n", password="p")
        self.assertEqual(c.publish("allow/n", b"", qos=1).rc, 0)


if __name__ == "__main__":
    unittest.main()
