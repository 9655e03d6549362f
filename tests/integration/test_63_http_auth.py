#!/usr/bin/python3
"""63: HTTP authentication (docs/http-auth.md): auth.http_auth.auth_req
asked about user names that are not in the password list, against an auth
service written here (http.server). A 2xx answer accepts, anything else
(another status, no service, no answer in time) refuses; the request
carries the configured method, headers and parameters with their
placeholders filled in; answers are cached for cache_ttl; a CONNECT that
waits for a slow answer blocks no worker (one worker here) and keeps its
pipelined packets for after the CONNACK."""

import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import nmq
from nmq import BrokerTestCase, skip_on_mosquitto, CONNACK, SUBACK, PUBLISH



def wait_for(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.02)
    return pred()


class AuthService:
    """Answers by user name: good* 200, bad* 403, slow* 200 once the test
    opens the gate (a slow service whose answer the test controls)."""

    def __init__(self):
        self.reqs = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        svc = self

        class H(http.server.BaseHTTPRequestHandler):
            def handle_req(self, method):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n).decode()
                url = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(body if method == "POST" else url.query,
                                                     keep_blank_values=True))
                with svc.lock:
                    svc.reqs.append({"method": method, "path": url.path,
                                     "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "params": params})
                user = params.get("user", "")
                if user.startswith("slow"):
                    svc.gate.wait(30)
                status = 200 if user.startswith(("good", "slow")) else 403
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                self.handle_req("POST")

            def do_GET(self):
                self.handle_req("GET")

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def requests(self):
        with self.lock:
            return list(self.reqs)

    def close(self):
        self.gate.set()
        self.srv.shutdown()
        self.srv.server_close()


def auth_conf(url, method="post", extra="", timeout="20s"):
    return ('system.num_taskq_thread = 1\n'
            'system.parallel = 1\n'
            'auth {\n  allow_anonymous = false\n  password = { "admin" = "secret" }\n'
            '  http_auth {\n    auth_req {\n      url = "%s"\n      method = %s\n'
            '      headers.x-api-key = "k123"\n'
            '      params = { user = "%%u", pass = "%%P", cid = "%%c", ip = "%%a", '
            'proto = "%%r", port = "%%p", cn = "%%C", subject = "%%d" }\n    }\n'
            '    timeout = %s\n    connect_timeout = 1s\n%s  }\n}\n'
            % (url, method, timeout, extra))


class HttpAuthCase(BrokerTestCase):
    METHOD = "post"
    EXTRA = ""
    URL = None  # None: the service's /mqtt/auth
    TIMEOUT = "20s"  # longer than any wait for the gate
    TLS_CONF = ""

    def setUp(self):
        self.svc = AuthService()
        self.addCleanup(self.svc.close)
        url = self.URL or "http://127.0.0.1:%d/mqtt/auth" % self.svc.port
        self.api_port = nmq.free_port()
        self.CONF = auth_conf(url, self.METHOD, self.EXTRA, self.TIMEOUT) + (
            "http_server { port = %d, auth_type = no_auth }\n" % self.api_port) + self.TLS_CONF
        super().setUp()

    def assert_alive(self):
        self.assertTrue(self.broker.alive(), "broker died\n" + self.broker.log_tail())
        c = self.raw(4, client_id="health-%d" % time.monotonic_ns(), username="admin",
                     password="secret")
        c.subscribe("h/t")
        c.publish("h/t", b"alive", qos=1)
        self.assertEqual(c.expect(PUBLISH).payload, b"alive")

    def stats(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/api/v4/http_auth" % self.api_port,
                                    timeout=5) as r:
            return json.loads(r.read())["data"]


@skip_on_mosquitto("auth.http_auth is nanomq's")
class AuthReqTests(HttpAuthCase):
    def test_allowed_and_request_contents(self):
        c = self.raw(4)
        ack = c.connect("cid-1", username="good-u", password="p&w=1 2")
        self.assertEqual(ack.rc, 0)
        # The connection works after the deferred CONNACK.
        self.assertEqual(c.subscribe("t/1").type, SUBACK)
        reqs = self.svc.requests()
        self.assertEqual(len(reqs), 1, reqs)
        r = reqs[0]
        self.assertEqual(r["method"], "POST")
        self.assertEqual(r["path"], "/mqtt/auth")
        self.assertEqual(r["headers"].get("x-api-key"), "k123")
        self.assertEqual(r["headers"].get("content-type"), "application/x-www-form-urlencoded")
        self.assertEqual(r["params"], {"user": "good-u", "pass": "p&w=1 2", "cid": "cid-1",
                                       "ip": "127.0.0.1", "proto": "4",
                                       "port": str(self.port), "cn": "", "subject": ""})
        self.assertEqual(self.stats()["allowed"], 1)

    def test_denied_v3_and_v5(self):
        c = self.raw(4)
        self.assertEqual(c.connect("d3", username="bad-u", password="x").rc, 4)
        c.expect_closed()
        c5 = self.raw(5)
        self.assertEqual(c5.connect("d5", username="bad-u", password="x").rc, 0x86)
        c5.expect_closed()
        st = self.stats()
        self.assertEqual((st["denied"], st["allowed"]), (2, 0), st)
        self.assertEqual(self.svc.requests()[1]["params"]["proto"], "5")

    def test_denied_client_pipelined_publish_is_dropped(self):
        sub = self.raw(4, client_id="watch", username="admin", password="secret")
        sub.subscribe("leak/t")
        bad = self.raw(4)
        bad.send(nmq.connect_bytes("bad-pipe", username="bad-u", password="x")
                 + nmq.publish_bytes("leak/t", b"secret", 0))
        self.assertEqual(bad.expect(CONNACK).rc, 4)
        bad.expect_closed()
        sub.expect_nothing(types=[PUBLISH])

    def test_listed_user_and_anonymous_not_asked(self):
        c = self.raw(4)
        self.assertEqual(c.connect("a1", username="admin", password="secret").rc, 0)
        c2 = self.raw(4)
        self.assertEqual(c2.connect("a2", username="admin", password="wrong").rc, 4)
        c3 = self.raw(4)
        self.assertEqual(c3.connect("a3").rc, 5)  # allow_anonymous = false
        self.assertEqual(self.svc.requests(), [])

    def test_slow_answer_blocks_no_worker(self):
        slow = self.raw(4)
        # CONNECT and a pipelined SUBSCRIBE: the SUBSCRIBE is held until the
        # CONNACK and then handled.
        slow.send_connect("slow-c", username="slow-u", password="p")
        slow.send(nmq.subscribe_bytes([("s/t", 1)], 7))
        self.assertTrue(wait_for(lambda: len(self.svc.requests()) == 1, 10.0))
        # Meanwhile (the answer withheld) another client is served by the
        # only worker.
        other = self.raw(4, client_id="other", username="admin", password="secret")
        other.subscribe("o/t")
        other.publish("o/t", b"hi", qos=1)
        got = other.expect(PUBLISH)
        self.assertEqual(got.payload, b"hi")
        slow.expect_nothing(0.2)  # no CONNACK (nor SUBACK) before the answer
        self.svc.gate.set()
        ack = slow.expect(CONNACK)
        self.assertEqual(ack.rc, 0)
        self.assertEqual(slow.expect(SUBACK, pid=7).pid, 7)
        other.publish("s/t", b"to-slow", qos=1)
        self.assertEqual(slow.expect(PUBLISH).payload, b"to-slow")

    def test_client_gone_while_waiting(self):
        for i in range(5):
            c = nmq.RawClient(self.port)
            c.send_connect("gone-%d" % i, username="slow-u%d" % i, password="p")
            time.sleep(0.05)
            c.sock.close()
        self.assertTrue(wait_for(lambda: len(self.svc.requests()) == 5, 10.0))
        self.svc.gate.set()  # the answers arrive for closed connections
        self.assertTrue(wait_for(lambda: self.stats()["allowed"] == 5, 10.0), self.stats())
        self.assert_alive()


@skip_on_mosquitto("auth.http_auth is nanomq's")
class GetAndCacheTests(HttpAuthCase):
    METHOD = "get"
    EXTRA = "    cache_ttl = 30s\n"

    def test_get_with_query_and_cache(self):
        for i in range(2):
            c = self.raw(5)
            self.assertEqual(c.connect("g1", username="good-g", password="pw").rc, 0)
            c.disconnect()
            c.expect_closed()
        c = self.raw(5)
        self.assertEqual(c.connect("g1", username="good-g", password="other").rc, 0)
        reqs = self.svc.requests()
        # The second CONNECT with the same parameters came from the cache.
        self.assertEqual(len(reqs), 2, reqs)
        self.assertEqual(reqs[0]["method"], "GET")
        self.assertEqual(reqs[0]["path"], "/mqtt/auth")
        self.assertEqual(reqs[0]["params"]["user"], "good-g")
        self.assertEqual(reqs[1]["params"]["pass"], "other")
        st = self.stats()
        self.assertEqual((st["allowed"], st["cache_hits"]), (2, 1), st)


@skip_on_mosquitto("auth.http_auth is nanomq's")
class ServiceDownTests(HttpAuthCase):
    def setUp(self):
        # A port where nothing listens.
        self.URL = "http://127.0.0.1:%d/auth" % nmq.free_port()
        super().setUp()

    def test_refused_at_once(self):
        t0 = time.monotonic()
        c = self.raw(4)
        self.assertEqual(c.connect("x1", username="good-u", password="p").rc, 4)
        # At once (the connection is refused), not after timeout (20 s).
        self.assertLess(time.monotonic() - t0, 10.0)
        self.assertEqual(self.stats()["failed"], 1)
        self.assert_alive()


@skip_on_mosquitto("auth.http_auth is nanomq's")
class ServiceSilentTests(HttpAuthCase):
    TIMEOUT = "1s"
    def setUp(self):
        # Accepts connections (the kernel's backlog) but never answers.
        self.hole = socket.socket()
        self.hole.bind(("127.0.0.1", 0))
        self.hole.listen(16)
        self.addCleanup(self.hole.close)
        self.URL = "http://127.0.0.1:%d/auth" % self.hole.getsockname()[1]
        super().setUp()

    def test_refused_after_timeout(self):
        t0 = time.monotonic()
        c = self.raw(5)
        self.assertEqual(c.connect("x2", username="good-u", password="p", timeout=15).rc, 0x86)
        dt = time.monotonic() - t0
        self.assertGreaterEqual(dt, 0.9)  # timeout = 1s
        self.assertLess(dt, 10.0)  # and not much later
        self.assertEqual(self.stats()["failed"], 1)


@skip_on_mosquitto("auth.http_auth is nanomq's")
class TlsTests(HttpAuthCase):
    """Over TLS (NNG streams: the receive path runs as jobs on any worker),
    with a verified client certificate for %C and %d."""

    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("openssl is needed")
        cls.pki = tempfile.mkdtemp(prefix="nmq-pki-")
        src = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
            os.path.join(os.path.dirname(__file__), "..", ".."))
        subprocess.run(["bash", os.path.join(src, "scripts", "gen-certs.sh"), cls.pki],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, KEY_PASSWORD="nanomq-test"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.pki, ignore_errors=True)

    def setUp(self):
        self.tls_port = nmq.free_port()
        p = lambda n: os.path.join(self.pki, n)
        self.EXTRA = ""
        self.METHOD = "post"
        type(self).TLS_CONF = (
            'listeners.ssl {\n  bind = "127.0.0.1:%d"\n  certfile = "%s"\n  keyfile = "%s"\n'
            '  cacertfile = "%s"\n  verify_peer = true\n  fail_if_no_peer_cert = true\n}\n'
            % (self.tls_port, p("server.crt"), p("server.key"), p("ca.crt")))
        super().setUp()

    def tls_conn(self):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        ctx.load_cert_chain(os.path.join(self.pki, "client1.crt"),
                            os.path.join(self.pki, "client1.key"))
        raw = socket.create_connection(("127.0.0.1", self.tls_port), timeout=8)
        return ctx.wrap_socket(raw, server_hostname="localhost")

    @staticmethod
    def read_packet(s):
        first = s.recv(1)
        if not first:
            return None
        n, mul = 0, 1
        while True:
            b = s.recv(1)[0]
            n += (b & 127) * mul
            mul *= 128
            if b < 128:
                break
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                break
            body += chunk
        return first[0], body

    def test_tls_deferred_connect_with_cert_placeholders(self):
        s = self.tls_conn()
        self.addCleanup(s.close)
        # CONNECT and a pipelined SUBSCRIBE in one write.
        s.sendall(nmq.connect_bytes("tls-1", username="slow-t", password="p")
                  + nmq.subscribe_bytes([("tls/t", 1)], 9))
        self.assertTrue(wait_for(lambda: len(self.svc.requests()) == 1, 10.0))
        # Another client is served while the answer is withheld.
        other = self.raw(4, client_id="plain", username="admin", password="secret")
        other.subscribe("x/y")
        s.settimeout(0.2)
        with self.assertRaises(socket.timeout):  # nothing before the answer
            s.recv(1)
        s.settimeout(8)
        self.svc.gate.set()
        self.assertEqual(self.read_packet(s), (0x20, b"\x00\x00"))  # CONNACK accepted
        self.assertEqual(self.read_packet(s), (0x90, b"\x00\x09\x01"))  # SUBACK QoS 1
        r = self.svc.requests()[0]["params"]
        self.assertEqual((r["cn"], r["subject"]), ("client1", "O=nanomq test, CN=client1"), r)
        self.assertEqual(r["port"], str(self.tls_port))


if __name__ == "__main__":
    unittest.main()
