#!/usr/bin/python3
"""HTTPS on the REST API (http_server.ssl, docs/rest-api.md).

Certificates from scripts/gen-certs.sh. Checked:
- curl --cacert and Python's ssl + http.client (kept-alive connection,
  several requests) get answers; curl with another CA, and Python with the
  default context, refuse the server's certificate.
- A plain HTTP request on the HTTPS port gets a readable 400 in clear text
  and the connection is closed; garbage that is neither is dropped.
- Stalled TLS clients (a TCP connection that never says hello, a partial
  ClientHello, a handshake that stops after ServerHello) do not keep other
  clients waiting, and are cut after request_timeout.
- verify_peer + fail_if_no_peer_cert: a client with a certificate from the
  CA is served, one without a certificate or with a certificate from
  another CA is refused during the handshake.
- An unreadable or mismatching key refuses the startup with the key named.
"""
import base64
import http.client
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
import warnings

import nmq
from nmq import Broker, BrokerError, PahoClient

SRC = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
USER, PASSWORD = "admin", "pw-64"
AUTH = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
PKI = None


def setUpModule():
    global PKI
    warnings.simplefilter("ignore", ResourceWarning)
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq REST API")
    if shutil.which("openssl") is None or shutil.which("curl") is None:
        raise unittest.SkipTest("openssl and curl are needed")
    PKI = tempfile.mkdtemp(prefix="nmq-t64-pki-")
    subprocess.run(["bash", os.path.join(SRC, "scripts", "gen-certs.sh"), PKI], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tearDownModule():
    if PKI and not nmq.KEEP_TMP:
        shutil.rmtree(PKI, ignore_errors=True)


def pki(name):
    return os.path.join(PKI, name)


def wait_port(port):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection((nmq.HOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def client_ctx(cert=None, cafile="ca.crt"):
    ctx = ssl.create_default_context(cafile=pki(cafile))
    ctx.check_hostname = False  # the test certificate names localhost
    if cert:
        ctx.load_cert_chain(pki(cert + ".crt"), pki(cert + ".key"))
    return ctx


class HttpsCase(unittest.TestCase):
    SSL = ""
    EXTRA = ""

    def setUp(self):
        self.http_port = nmq.free_port()
        conf = ("http_server { port = %d, username = %s, password = %s, limit_conn = 8, "
                "request_timeout = 1500ms, ssl { certfile = \"%s\", keyfile = \"%s\" %s } }\n"
                % (self.http_port, USER, PASSWORD, pki("server.crt"), pki("server.key"),
                   self.SSL))
        self.broker = Broker(conf + self.EXTRA)
        self.broker.start()
        self.addCleanup(self.stop)
        wait_port(self.http_port)

    def stop(self):
        problems = self.broker.stop()
        if problems:
            raise AssertionError("broker problem: " + "\n".join(problems))

    def https(self, ctx=None, timeout=5):
        return http.client.HTTPSConnection(nmq.HOST, self.http_port, timeout=timeout,
                                           context=ctx or client_ctx())

    def get(self, path, ctx=None, timeout=5):
        c = self.https(ctx, timeout)
        try:
            c.request("GET", path, headers={"Authorization": AUTH})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def curl(self, path, *args):
        out = subprocess.run(["curl", "-s", "-u", "%s:%s" % (USER, PASSWORD),
                              "-w", "\n%{http_code}"] + list(args)
                             + ["https://localhost:%d%s" % (self.http_port, path)],
                             capture_output=True, timeout=20)
        body, _, code = out.stdout.rpartition(b"\n")
        return out.returncode, int(code or b"0"), body


class TestHttps(HttpsCase):
    def test_curl_with_the_ca(self):
        rc, code, body = self.curl("/api/v4/brokers", "--cacert", pki("ca.crt"))
        self.assertEqual((rc, code), (0, 200), body)
        self.assertEqual(json.loads(body)["data"][0]["node_status"], "Running")
        # POST with a body, over TLS.
        rc, code, body = self.curl("/api/v4/mqtt/publish", "--cacert", pki("ca.crt"),
                                   "-X", "POST", "-d",
                                   json.dumps({"topic": "t64/a", "payload": "x"}))
        self.assertEqual((rc, code, json.loads(body)["code"]), (0, 200, 0), body)

    def test_curl_with_another_ca_refuses(self):
        rc, code, _ = self.curl("/api/v4/brokers", "--cacert", pki("other-ca.crt"))
        self.assertEqual(rc, 60)  # peer certificate cannot be authenticated
        self.assertEqual(code, 0)

    def test_python_keep_alive(self):
        c = self.https()
        try:
            for path in ("/api/v4/nodes", "/api/v4/clients", "/api/v4/metrics"):
                c.request("GET", path, headers={"Authorization": AUTH})
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                json.loads(r.read())
            # A large reply crosses several TLS records.
            c.request("GET", "/api/v4/prometheus", headers={"Authorization": AUTH})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertIn(b"nanomq_connections_count", r.read())
            # Wrong credentials are still refused inside TLS.
            c.request("GET", "/api/v4/nodes", headers={"Authorization": "Basic eDp5"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 401)
        finally:
            c.close()

    def test_python_default_context_refuses_the_test_ca(self):
        ctx = ssl.create_default_context()
        with self.assertRaises(ssl.SSLCertVerificationError):
            self.get("/api/v4/nodes", ctx=ctx)
        self.assertEqual(self.get("/api/v4/nodes")[0], 200)

    def test_plain_http_on_the_https_port(self):
        s = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
        s.sendall(b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: " + AUTH.encode()
                  + b"\r\n\r\n")
        out = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
        s.close()
        head, _, body = out.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 400 "), out)
        self.assertIn(b"Connection: close", head)
        self.assertIn("https", json.loads(body)["message"])
        # Garbage that is neither TLS nor HTTP is dropped without an answer.
        s = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
        s.sendall(b"\x00\x01\x02\x03" * 64)
        got = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        except ConnectionResetError:
            pass
        s.close()
        self.assertFalse(got.startswith(b"HTTP/"), got)
        self.assertEqual(self.get("/api/v4/nodes")[0], 200)

    def test_stalled_handshakes_do_not_stall_others(self):
        stalled = []
        # A connection that never sends anything.
        stalled.append(socket.create_connection((nmq.HOST, self.http_port), timeout=5))
        # Half a ClientHello (a record header that promises 512 bytes).
        s = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 20)
        stalled.append(s)
        # A real ClientHello, after which the client reads nothing.
        inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = client_ctx().wrap_bio(inc, outg, server_hostname="localhost")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        s = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
        s.sendall(outg.read())
        stalled.append(s)
        # Others are served at once, by curl and by Python, several times.
        t0 = time.monotonic()
        for _ in range(3):
            st, j = self.get("/api/v4/nodes", timeout=2)
            self.assertEqual((st, j["code"]), (200, 0))
            rc, code, _ = self.curl("/api/v4/nodes", "--cacert", pki("ca.crt"))
            self.assertEqual((rc, code), (0, 200))
        self.assertLess(time.monotonic() - t0, 5)
        # The stalled ones are cut within request_timeout (1.5 s) plus a tick.
        for s in stalled:
            s.settimeout(4)
            deadline = time.monotonic() + 4
            closed = False
            while time.monotonic() < deadline:
                try:
                    if s.recv(65536) == b"":
                        closed = True
                        break
                except ConnectionResetError:
                    closed = True
                    break
                except socket.timeout:
                    break
            s.close()
            self.assertTrue(closed, "a stalled TLS client was not disconnected")
        self.assertIn("tls_handshake_timeout", self.broker.log_text())

    def test_slowloris_inside_tls(self):
        # A finished handshake, then a request head one byte at a time.
        raw = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
        s = client_ctx().wrap_socket(raw, server_hostname="localhost")
        head = b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\n"
        cut = False
        t0 = time.monotonic()
        for i in range(len(head)):
            try:
                s.sendall(head[i:i + 1])
            except OSError:
                cut = True
                break
            # Meanwhile others are served.
            if i % 8 == 0:
                self.assertEqual(self.get("/api/v4/nodes", timeout=2)[0], 200)
            time.sleep(0.2)
        if not cut:
            s.settimeout(3)
            try:
                cut = s.recv(100) == b""
            except (OSError, ssl.SSLError):
                cut = True
        s.close()
        self.assertTrue(cut)
        self.assertLess(time.monotonic() - t0, 5)

    def test_mqtt_unaffected(self):
        c = PahoClient(self.broker.port, "t64-mqtt")
        c.connect()
        c.subscribe("t64/b", 0)
        st, j = self.get("/api/v4/nodes")
        self.assertEqual(st, 200)
        c.publish("t64/b", b"ok")
        self.assertEqual(c.wait_message().payload, b"ok")
        c.close()


class TestHttpsClientCertificates(HttpsCase):
    SSL = ", cacertfile = \"%s\", verify_peer = true, fail_if_no_peer_cert = true"

    def setUp(self):
        self.SSL = self.SSL % pki("ca.crt")
        super().setUp()

    def test_client_certificates(self):
        st, _ = self.get("/api/v4/nodes", ctx=client_ctx("client1"))
        self.assertEqual(st, 200)
        rc, code, _ = self.curl("/api/v4/nodes", "--cacert", pki("ca.crt"),
                                "--cert", pki("client1.crt"), "--key", pki("client1.key"))
        self.assertEqual((rc, code), (0, 200))
        for ctx in (client_ctx(), client_ctx("rogue")):
            with self.assertRaises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                self.get("/api/v4/nodes", ctx=ctx)
        self.assertEqual(self.get("/api/v4/nodes", ctx=client_ctx("client1"))[0], 200)


class TestHttpsOptionalClientCertificates(HttpsCase):
    SSL = ", cacertfile = \"%s\", verify_peer = true"

    def setUp(self):
        self.SSL = self.SSL % pki("ca.crt")
        super().setUp()

    def test_optional(self):
        self.assertEqual(self.get("/api/v4/nodes")[0], 200)  # no certificate
        self.assertEqual(self.get("/api/v4/nodes", ctx=client_ctx("client1"))[0], 200)
        with self.assertRaises((ssl.SSLError, ConnectionResetError, BrokenPipeError,
                                http.client.RemoteDisconnected)):
            self.get("/api/v4/nodes", ctx=client_ctx("rogue"))


class TestHttpsBadFiles(unittest.TestCase):
    def start(self, ssl_conf):
        b = Broker("http_server { port = %d, auth_type = no_auth, ssl { %s } }\n"
                   % (nmq.free_port(), ssl_conf))
        try:
            b.start(timeout=5)
        except BrokerError as e:
            return str(e)
        b.stop()
        self.fail("the broker started with %s" % ssl_conf)

    def test_refused(self):
        err = self.start('certfile = "%s", keyfile = "%s"' % (pki("server.crt"),
                                                             pki("client1.key")))
        self.assertIn("http_server.ssl", err)
        self.assertIn("does not match", err)
        err = self.start('certfile = "%s"' % pki("server.crt"))
        self.assertIn("http_server.ssl", err)
        self.assertIn("keyfile", err)
        err = self.start('certfile = "%s", keyfile = "%s"' % (pki("server.crt"),
                                                             os.path.join(PKI, "nope.key")))
        self.assertIn("nope.key", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
