#!/usr/bin/python3
"""The REST API's HTTP server under hostile input (docs/rest-api.md).

Checked, each time followed by a normal request that must still succeed
and, at the end, an MQTT client that is still served:
- slowloris: clients that send a head byte by byte slower than
  http_server.request_timeout are disconnected; while limit_conn of them
  hold every slot a further client waits, and is served once they are cut.
- a head over the size limit (431), a body over max_body (400, code 108,
  answered before the body is sent), a malformed request line (400), a bad
  %XX in the path or the query (400), invalid JSON (400, 109), an unknown
  path (404) and a wrong method (405).
- Basic authentication: no credentials (401, 104), a wrong password or user
  (401, 103), with WWW-Authenticate.
- JWT (auth_type = jwt, a key made with openssl here): a valid RS256 token
  passes; a forged signature, alg "none", an expired token (116) and a
  token signed by another key get 401.
- Keep-alive: several requests on one connection, pipelined ones too.
- config_update: an invalid text is refused with 117 and file:line and
  writes nothing; a valid one replaces the file and keeps a .bak; POST
  /configuration merges sections and keeps a "******" secret unchanged;
  GET /configuration has NanoMQ's sections (basic, tls, websocket, ...),
  and a script that changes a value and posts the whole document back
  works; a bridge node in NanoMQ's shape is written; unknown keys of those
  sections are refused (108) and wrong values (117).
- POST /ctrl/stop answers and the broker exits cleanly.
- slow clients at limit_conn (request_timeout 30 s): while many slowloris
  sockets (plain, and partial TLS handshakes with http_server.ssl) keep
  reconnecting, a curl request is served within seconds, since the
  connection stuck longest in its head (over 1 s) gives way to a waiting
  client; a kept-alive client making requests meanwhile keeps its
  connection; /metrics counts the closures.
"""
import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import nmq
import nmq_ops
from nmq import Broker, PahoClient

USER, PASSWORD = "admin", "pw-61"
AUTH = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq REST API")


def wait_port(port):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection((nmq.HOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def raw_request(port, data, timeout=5, half_close=False):
    """Sends bytes, returns everything the server answers until it closes
    (or timeout)."""
    s = socket.create_connection((nmq.HOST, port), timeout=timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def status_and_json(resp):
    head, _, body = resp.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    try:
        return status, head, json.loads(body)
    except ValueError:
        return status, head, None


class ServerCase(unittest.TestCase):
    HTTP_CONF = ""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="nmq-t61-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.http_port = nmq.free_port()
        self.broker = Broker(self.HTTP_CONF % {"port": self.http_port, "dir": self.dir})
        self.broker.start()
        self.addCleanup(self.stop)
        wait_port(self.http_port)

    def stop(self):
        problems = self.broker.stop()
        if problems:
            raise AssertionError("broker problem: " + "\n".join(problems))

    def get(self, path, auth=AUTH):
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=5)
        try:
            c.request("GET", path, headers={"Authorization": auth} if auth else {})
            r = c.getresponse()
            body = r.read()
            return r.status, r.getheader("WWW-Authenticate"), json.loads(body)
        finally:
            c.close()

    def assert_healthy(self):
        st, _, j = self.get("/api/v4/nodes")
        self.assertEqual((st, j["code"]), (200, 0))
        c = PahoClient(self.broker.port, "t61-health")
        c.connect()
        c.subscribe("t61/h", 0)
        c.publish("t61/h", b"ok")
        self.assertEqual(c.wait_message().payload, b"ok")
        c.close()


class TestHostileBasic(ServerCase):
    HTTP_CONF = ("http_server { port = %(port)d, username = admin, password = pw-61, "
                 "max_body = 2KB, limit_conn = 4, request_timeout = 1s }\n")

    def test_idle_keep_alive_connections_do_not_hold_slots(self):
        # limit_conn (4) bounds requests in progress: four clients that
        # made a request and keep their connection open do not keep a
        # fifth waiting (the idle timeout is 60 s); the one idle longest
        # gives up its connection.
        kept = []
        for _ in range(4):
            c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=5)
            c.request("GET", "/api/v4/nodes", headers={"Authorization": AUTH})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            kept.append(c)
            time.sleep(0.05)
        t0 = time.monotonic()
        for _ in range(3):
            st, _, j = self.get("/api/v4/nodes")
            self.assertEqual(st, 200)
        # About a second (the grace an idle connection gets before it gives
        # way); held by the idle ones, it would be their 60 s idle timeout.
        self.assertLess(time.monotonic() - t0, 15)
        # The newest kept connection still works.
        kept[-1].request("GET", "/api/v4/nodes", headers={"Authorization": AUTH})
        r = kept[-1].getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        for c in kept:
            c.close()

    def test_slowloris(self):
        socks = []
        t_first = time.monotonic()  # the server's clocks start after this
        for _ in range(4):
            s = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
            s.sendall(b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        t0 = time.monotonic()
        # Dribble one byte every 0.3 s: each is cut within ~1 s of its start
        # (request_timeout); uncut, it would dribble on for 10 s.
        closed = [None] * len(socks)

        def dribble(i, s):
            try:
                while time.monotonic() - t0 < 10:
                    s.sendall(b"X")
                    time.sleep(0.3)
                    s.settimeout(0.01)
                    try:
                        if s.recv(4096) == b"":
                            break
                    except socket.timeout:
                        pass
                    except OSError:
                        break
            except OSError:
                pass
            closed[i] = time.monotonic() - t0

        ts = [threading.Thread(target=dribble, args=(i, s)) for i, s in enumerate(socks)]
        for t in ts:
            t.start()
        # Every slot is taken: a fifth client waits, then is served.
        st, _, j = self.get("/api/v4/nodes")
        # Served only once a slow client gave way: none does before a
        # second (the grace of a head in progress) after it connected.
        waited = time.monotonic() - t_first
        self.assertEqual(st, 200)
        for t in ts:
            t.join()
        for s in socks:
            s.close()
        for c in closed:
            self.assertLess(c, 7.0, "a slow client kept its slot for %.1f s" % c)
        self.assertGreater(waited, 0.9, "limit_conn did not hold the fifth client back")
        self.assert_healthy()

    def test_oversized_and_malformed(self):
        big_head = (b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: " + AUTH.encode()
                    + b"\r\nX-Pad: " + b"a" * 40000 + b"\r\n\r\n")
        st, _, _ = status_and_json(raw_request(self.http_port, big_head))
        self.assertEqual(st, 431)
        long_line = b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\n\r\n"
        st, _, _ = status_and_json(raw_request(self.http_port, long_line))
        self.assertEqual(st, 414)
        # A body over max_body is refused from its Content-Length alone.
        s = socket.create_connection((nmq.HOST, self.http_port), timeout=5)
        s.sendall(b"POST /api/v4/mqtt/publish HTTP/1.1\r\nHost: x\r\nAuthorization: "
                  + AUTH.encode() + b"\r\nContent-Length: 100000\r\n\r\n")
        st, _, j = status_and_json(s.recv(65536))
        s.close()
        self.assertEqual((st, j["code"]), (400, 108))
        # A script that sends the whole oversized body anyway (http.client
        # does not wait for 100 Continue) still reads the 400, not a reset.
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=10)
        c.request("POST", "/api/v4/mqtt/publish", body=b"x" * 8000000,
                  headers={"Authorization": AUTH, "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())["code"]), (400, 108))
        c.close()
        # Chunked beyond max_body as well.
        chunk = b"%x\r\n%s\r\n" % (3000, b"a" * 3000)
        st, _, j = status_and_json(raw_request(
            self.http_port, b"POST /api/v4/mqtt/publish HTTP/1.1\r\nHost: x\r\nAuthorization: "
            + AUTH.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + b"0\r\n\r\n"))
        self.assertEqual(st, 400)
        for bad in [b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
                    b"GET  /api/v4/nodes HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
                    b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"]:
            st, _, _ = status_and_json(raw_request(self.http_port, bad))
            self.assertEqual(st, 400, bad)
        for path in ["/api/v4/clients/a%zz", "/api/v4/clients/a%2", "/api/v4/clients?x=%G1",
                     "/api/v4/clients/a%00b"]:
            st, _, j = self.get(path)
            self.assertEqual((st, j["code"]), (400, 108), path)
        st, _, j = self.get("/api/v4/nothing-here")
        self.assertEqual(st, 404)
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=5)
        c.request("DELETE", "/api/v4/clients", headers={"Authorization": AUTH})
        self.assertEqual(c.getresponse().status, 405)
        c.close()
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=5)
        c.request("POST", "/api/v4/mqtt/publish", body="{\"topic\": ",
                  headers={"Authorization": AUTH})
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())["code"]), (400, 109))
        c.close()
        self.assert_healthy()

    def test_basic_auth(self):
        st, www, j = self.get("/api/v4/nodes", auth=None)
        self.assertEqual((st, j["code"]), (401, 104))
        self.assertIn("Basic", www)
        for user, pw in [(USER, "wrong"), ("root", PASSWORD), (USER, PASSWORD + "x"),
                         (USER, PASSWORD[:-1])]:
            a = "Basic " + base64.b64encode(("%s:%s" % (user, pw)).encode()).decode()
            st, _, j = self.get("/api/v4/nodes", auth=a)
            self.assertEqual((st, j["code"]), (401, 103), (user, pw))
        st, _, j = self.get("/api/v4/nodes", auth="Basic !!!notbase64")
        self.assertEqual(st, 401)
        st, _, j = self.get("/api/v4/nodes", auth="Bearer abc")
        self.assertEqual(st, 401)
        code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-u",
                               "admin:nope", "http://%s:%d/api/v4/nodes" % (nmq.HOST,
                                                                           self.http_port)],
                              capture_output=True, timeout=10).stdout
        self.assertEqual(code, b"401")
        self.assert_healthy()

    def test_keepalive_and_pipelining(self):
        req = (b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: " + AUTH.encode()
               + b"\r\n\r\n")
        last = req.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
        out = raw_request(self.http_port, req * 3 + last)
        self.assertEqual(out.count(b"HTTP/1.1 200 OK"), 4)
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=5)
        for _ in range(20):
            c.request("GET", "/api/v4/brokers", headers={"Authorization": AUTH})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        sock = c.sock
        c.request("GET", "/api/v4/brokers", headers={"Authorization": AUTH})
        c.getresponse().read()
        self.assertIs(c.sock, sock, "the connection was not kept alive")
        c.close()


class TestJwt(ServerCase):
    HTTP_CONF = ("http_server { port = %(port)d, auth_type = jwt, "
                 "jwt.public.keyfile = \"%(dir)s/pub.pem\" }\n")

    def setUp(self):
        # The key must exist before the broker starts.
        self.keydir = tempfile.mkdtemp(prefix="nmq-t61k-")
        self.addCleanup(shutil.rmtree, self.keydir, True)
        for name in ("key", "other"):
            subprocess.run(["openssl", "genrsa", "-out", os.path.join(self.keydir, name + ".pem"),
                            "2048"], check=True, capture_output=True)
        orig = ServerCase.setUp

        def patched(this):
            this.dir = self.keydir
            this.http_port = nmq.free_port()
            subprocess.run(["openssl", "rsa", "-in", os.path.join(self.keydir, "key.pem"),
                            "-pubout", "-out", os.path.join(self.keydir, "pub.pem")],
                           check=True, capture_output=True)
            this.broker = Broker(this.HTTP_CONF % {"port": this.http_port, "dir": this.keydir})
            this.broker.start()
            this.addCleanup(this.stop)
            wait_port(this.http_port)
        del orig
        patched(self)

    def token(self, claims, key="key", alg="RS256", sign=True):
        def b64(b):
            return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
        head = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
        body = b64(json.dumps(claims).encode())
        msg = ("%s.%s" % (head, body)).encode()
        if not sign:
            return "%s.%s." % (head, body)
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign",
                              os.path.join(self.keydir, key + ".pem")], input=msg,
                             capture_output=True, check=True).stdout
        return "%s.%s.%s" % (head, body, b64(sig))

    def test_jwt(self):
        good = self.token({"sub": "ops", "exp": int(time.time()) + 600})
        st, _, j = self.get("/api/v4/nodes", auth="Bearer " + good)
        self.assertEqual((st, j["code"]), (200, 0))
        st, _, j = self.get("/api/v4/nodes", auth="Bearer " + self.token({"sub": "ops"}))
        self.assertEqual(st, 200)  # no exp: valid
        expired = self.token({"sub": "ops", "exp": int(time.time()) - 10})
        st, _, j = self.get("/api/v4/nodes", auth="Bearer " + expired)
        self.assertEqual((st, j["code"]), (401, 116))
        other = self.token({"sub": "ops"}, key="other")
        st, _, j = self.get("/api/v4/nodes", auth="Bearer " + other)
        self.assertEqual((st, j["code"]), (401, 103))
        # The payload changed after signing (an exp pushed into the future).
        h, b, s = expired.split(".")
        forged_body = base64.urlsafe_b64encode(json.dumps(
            {"sub": "ops", "exp": int(time.time()) + 9999}).encode()).rstrip(b"=").decode()
        st, _, j = self.get("/api/v4/nodes", auth="Bearer %s.%s.%s" % (h, forged_body, s))
        self.assertEqual((st, j["code"]), (401, 103))
        st, _, j = self.get("/api/v4/nodes", auth="Bearer " + self.token({}, alg="none",
                                                                        sign=False))
        self.assertEqual(st, 401)
        st, _, j = self.get("/api/v4/nodes", auth="Basic " + base64.b64encode(b"a:b").decode())
        self.assertEqual(st, 401)
        st, _, j = self.get("/api/v4/nodes", auth="Bearer a.b.c")
        self.assertEqual(st, 401)


class TestConfigWrites(ServerCase):
    HTTP_CONF = ("http_server { port = %(port)d, username = admin, password = pw-61 }\n")

    def post(self, path, body, ctype="application/json"):
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=10)
        try:
            c.request("POST", path, body=body, headers={"Authorization": AUTH,
                                                        "Content-Type": ctype})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def test_config_update_and_configuration(self):
        path = self.broker.conf_path
        with open(path) as f:
            original = f.read()
        bad = original + "\nmqtt {\n  max_packet_size = lots\n}\n"
        st, j = self.post("/api/v4/config_update", bad, "text/plain")
        self.assertEqual((st, j["code"]), (400, 117))
        self.assertIn("%s:" % path, j["message"])
        self.assertIn("max_packet_size", j["message"])
        with open(path) as f:
            self.assertEqual(f.read(), original, "an invalid text was written")
        st, j = self.post("/api/v4/config_update", "listeners.tcp { bind = ", "text/plain")
        self.assertEqual((st, j["code"]), (400, 117))
        good = original + "\nmqtt.max_mqueue_len = 123\n"
        st, j = self.post("/api/v4/config_update", good, "text/plain")
        self.assertEqual((st, j["code"]), (200, 0), j)
        with open(path) as f:
            self.assertEqual(f.read(), good)
        with open(path + ".bak") as f:
            self.assertEqual(f.read(), original)
        self.assertFalse(os.path.exists(path + ".tmp"))
        # POST /configuration: a section merged in; "******" keeps the secret.
        st, j = self.post("/api/v4/configuration", json.dumps(
            {"data": {"mqtt": {"max_inflight_window": 7},
                      "http_server": {"password": "******"}}}))
        self.assertEqual((st, j["code"]), (200, 0))
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=10)
        c.request("GET", "/api/v4/configuration/mqtt", headers={"Authorization": AUTH})
        mq = json.loads(c.getresponse().read())["data"]
        c.close()
        self.assertEqual(mq["max_inflight_window"], 7)
        self.assertEqual(mq["max_mqueue_len"], 123)
        st, j = self.post("/api/v4/configuration", json.dumps(
            {"data": {"mqtt": {"max_inflight_window": "many"}}}))
        self.assertEqual((st, j["code"]), (400, 117))
        # The whole configuration as GET shows it can be written back.
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=10)
        c.request("GET", "/api/v4/configuration", headers={"Authorization": AUTH})
        whole = json.loads(c.getresponse().read())["data"]
        c.close()
        self.assertEqual(whole["webhook"], {"enable": False})  # absent, so off
        st, j = self.post("/api/v4/configuration", json.dumps({"data": whole}))
        self.assertEqual((st, j["code"]), (200, 0), j)
        r = subprocess.run([nmq._find_nanomq(), "start", "--conf", path, "--test"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assert_healthy()

    def conf_get(self, path="/api/v4/configuration"):
        c = http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=10)
        try:
            c.request("GET", path, headers={"Authorization": AUTH})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def test_nanomq_sections(self):
        """A NanoMQ user's script: read the sections, change a value, write
        the whole document back."""
        st, j = self.conf_get()
        self.assertEqual((st, j["code"]), (200, 0))
        d = j["data"]
        for sec in ("basic", "tls", "http_server", "websocket", "webhook", "auth",
                    "auth_http", "sqlite", "bridge", "aws_bridge"):
            self.assertIn(sec, d)
        b = d["basic"]
        self.assertEqual(b["url"], "nmq-tcp://%s:%d" % (nmq.HOST, self.broker.port))
        for k in ("num_taskq_thread", "max_taskq_thread", "parallel", "property_size",
                  "max_packet_size", "client_max_packet_size", "msq_len", "qos_duration",
                  "keepalive_backoff", "allow_anonymous"):
            self.assertIn(k, b)
        self.assertIs(d["tls"]["enable"], False)
        self.assertIs(d["websocket"]["enable"], False)
        self.assertEqual(d["http_server"]["password"], "******")
        self.assertEqual(d["http_server"]["username"], USER)
        self.assertEqual(d["auth_http"], {"enable": False})
        self.assertEqual(d["bridge"]["nodes"], [])
        self.assertEqual(d["aws_bridge"], {"nodes": []})
        self.assertNotIn(PASSWORD, json.dumps(j))
        st, j = self.conf_get("/api/v4/configuration/basic")
        self.assertEqual(j["data"], b)
        # Change one value and post everything back, as a script does.
        d["basic"]["msq_len"] = 555
        d["basic"]["qos_duration"] = 7
        st, j = self.post("/api/v4/configuration", json.dumps({"data": d}))
        self.assertEqual((st, j["code"]), (200, 0), j)
        st, j = self.conf_get()
        self.assertEqual((j["data"]["basic"]["msq_len"], j["data"]["basic"]["qos_duration"]),
                         (555, 7))
        self.assertEqual(j["data"]["http_server"]["password"], "******")  # kept
        self.assertEqual(self.conf_get("/api/v4/configuration/mqtt")[1]["data"]
                         ["max_mqueue_len"], 555)
        with open(self.broker.conf_path) as f:
            text = f.read()
        self.assertIn(PASSWORD, text)  # the secret was not replaced by stars
        self.assertNotIn("******", text)
        r = subprocess.run([nmq._find_nanomq(), "start", "--conf", self.broker.conf_path,
                            "--test"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # A bridge node in NanoMQ's shape, and the older tls key names.
        st, j = self.post("/api/v4/configuration", json.dumps({"data": {
            "bridge": {"nodes": [{"name": "edge", "server": "mqtt-tcp://127.0.0.1:1",
                                  "clientid": "gw-9", "password": "brpw",
                                  "forwards": [{"remote_topic": "up/x",
                                                "local_topic": "up/#"}]}]},
            "websocket": {"enable": True, "url": "nmq-ws://127.0.0.1:%d/mqtt"
                          % nmq.free_port()},
            "listeners": {"ws": {"max_connections": 7}}}}))
        self.assertEqual((st, j["code"]), (200, 0), j)
        st, j = self.conf_get("/api/v4/configuration/bridge")
        node = j["data"]["nodes"][0]
        self.assertEqual((node["name"], node["clientid"], node["password"]),
                         ("edge", "gw-9", "******"))
        self.assertEqual(node["forwards"][0]["local_topic"], "up/#")
        st, j = self.conf_get("/api/v4/configuration/websocket")
        self.assertIs(j["data"]["enable"], True)
        self.assertTrue(j["data"]["url"].startswith("nmq-ws://127.0.0.1:"))
        # Both spellings of the same listener were merged, not replaced.
        st, j = self.conf_get("/api/v4/configuration/listeners")
        self.assertEqual(j["data"]["ws"]["max_connections"], 7)
        self.assertTrue(j["data"]["ws"]["bind"].startswith("127.0.0.1:"))
        # Refused: an unknown key of a NanoMQ section, a node without a
        # name, a login list, AWS bridges; the file is left alone.
        with open(self.broker.conf_path) as f:
            before = f.read()
        for bad in ({"basic": {"msq_lenn": 1}}, {"bridge": {"nodes": [{"server": "x"}]}},
                    {"auth": [{"login": "a", "password": "b"}]},
                    {"aws_bridge": {"nodes": [{"name": "a"}]}}):
            st, j = self.post("/api/v4/configuration", json.dumps({"data": bad}))
            self.assertEqual((st, j["code"]), (400, 108), bad)
        st, j = self.post("/api/v4/configuration",
                          json.dumps({"data": {"basic": {"msq_len": "lots"}}}))
        self.assertEqual((st, j["code"]), (400, 117))
        with open(self.broker.conf_path) as f:
            self.assertEqual(f.read(), before)

    def test_ctrl_stop(self):
        st, j = self.post("/api/v4/ctrl/stop", "")
        self.assertEqual((st, j["code"]), (200, 0))
        self.broker.proc.wait(15)
        self.assertEqual(self.broker.proc.returncode, 0)
        # Stopped by the test: the harness only checks the log.
        self.broker._stopped = True
        self.broker._out.close()
        self.broker._err.close()
        text = self.broker.log_text()
        for m in nmq.SANITIZER_MARKERS:
            self.assertNotIn(m, text)
        self.assertIn("event=stopped", text)

    def test_ctrl_restart(self):
        # A session that only lives in memory tells a restart from no restart.
        c = PahoClient(self.broker.port, "t61-before", clean=False)
        c.connect()
        c.close()
        st, _, j = self.get("/api/v4/clients/t61-before")
        self.assertEqual(len(j["data"]), 1)
        st, j = self.post("/api/v4/ctrl/restart", "")
        self.assertEqual((st, j["code"]), (200, 0))
        deadline = time.monotonic() + 15
        data = None
        while time.monotonic() < deadline:
            try:
                st, _, j = self.get("/api/v4/clients/t61-before")
                data = j["data"]
                if data == []:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        self.assertEqual(data, [], "the broker did not restart")
        self.assertIsNone(self.broker.proc.poll(), "the process exited instead")
        self.assert_healthy()

    def test_ctrl_bad_action(self):
        st, j = self.post("/api/v4/ctrl/pause", "")
        self.assertEqual((st, j["code"]), (400, 108))


class TestConfigCalloutSections(ServerCase):
    """auth.http_auth and the webhook's headers and events are shown by GET
    /configuration (auth_http, webhook) in the file's keys, and the
    document written back loads."""
    HTTP_CONF = ("http_server { port = %(port)d, username = admin, password = pw-61 }\n"
                 "auth.http_auth {\n  auth_req { url = \"http://127.0.0.1:9/auth\", method = get,"
                 " headers.x-gw = \"g1\", params = { u = \"%%u\", c = \"%%c\" } }\n"
                 "  timeout = 1500ms\n  cache_ttl = 30s\n}\n"
                 "webhook {\n  url = \"http://127.0.0.1:9/hook\"\n  headers.x-site = \"s1\"\n"
                 "  events = [{ event = \"on_message_publish\", topic = \"a/#\" },"
                 " { event = \"on_client_connected\" }]\n}\n")

    def test_shown_and_written_back(self):
        st, j = self.conf_get()
        self.assertEqual((st, j["code"]), (200, 0))
        ah = j["data"]["auth_http"]
        self.assertEqual((ah["enable"], ah["timeout"], ah["cache_ttl"]),
                         (True, "1500ms", "30000ms"))
        self.assertEqual(ah["auth_req"], {"url": "http://127.0.0.1:9/auth", "method": "get",
                                          "headers": {"x-gw": "g1"},
                                          "params": {"u": "%u", "c": "%c"}})
        wh = j["data"]["webhook"]
        self.assertEqual(wh["headers"], {"x-site": "s1"})
        self.assertEqual(wh["events"], [{"event": "on_message_publish", "topic": "a/#"},
                                        {"event": "on_client_connected"}])
        st, j2 = self.post("/api/v4/configuration", json.dumps({"data": j["data"]}))
        self.assertEqual((st, j2["code"]), (200, 0), j2)
        r = subprocess.run([nmq._find_nanomq(), "start", "--conf", self.broker.conf_path,
                            "--test"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.conf_get()[1]["data"]["auth_http"], ah)

    post = TestConfigWrites.post
    conf_get = TestConfigWrites.conf_get



class TestConfigurationKeepsDefaultListener(nmq_ops.OpsTestCase):
    """POST /configuration with only a tls or a websocket section, to a file
    without a listeners section (the broker then runs the default TCP
    listener, 0.0.0.0:1883): the file written keeps that listener, so that
    after a restart mosquitto_pub still reaches it, beside the new one."""

    def setUp(self):
        probe = socket.socket()
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker
        try:
            probe.bind(("0.0.0.0", 1883))
        except OSError:
            self.skipTest("port 1883 (the default listener's) is in use on this machine")
        finally:
            probe.close()

    def post_conf(self, http_port, data):
        c = http.client.HTTPConnection(nmq.HOST, http_port, timeout=10)
        try:
            c.request("POST", "/api/v4/configuration", body=json.dumps({"data": data}),
                      headers={"Authorization": AUTH, "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def start_on_1883(self, inst, conf):
        """Starts the broker; returns its process once it has started with
        its TCP listener on 1883 (skips the test if another process holds
        that port: a broker of another test run on this machine)."""
        p = inst.start(["start", "--conf", conf])
        nmq_ops.wait_for(lambda: p.poll() is not None or "event=started" in inst.output(p), 20)
        out = inst.output(p)
        if p.poll() is not None and "in use" in out:
            self.skipTest("port 1883 is held by another process")
        self.assertIsNone(p.poll(), out[-2000:])
        self.assertIn("listener=tcp url=tcp://0.0.0.0:1883 event=listening", out,
                      "no TCP listener on 1883")
        return p

    def check(self, section, new_port, tls):
        inst = self.instance(prefix="nmq-t61-dl-")
        http_port = nmq.free_port()
        conf = inst.write("nanomq.conf", (
            'system.cmd_ipc_url = "%s"\nlog { level = info, to = [console] }\n'
            "http_server { port = %d, username = admin, password = pw-61 }\n"
            % (inst.ipc_url, http_port)))
        first = self.start_on_1883(inst, conf)
        self.assertTrue(nmq_ops.wait_port(http_port), inst.output(first)[-2000:])
        st, j = self.post_conf(http_port, {section: tls})
        self.assertEqual((st, j["code"]), (200, 0), j)
        self.assertIn("event=conf_default_listener_kept", inst.output(first))
        self.assert_stops(inst)
        with open(conf) as f:
            self.assertIn("listeners", f.read())
        self.start_on_1883(inst, conf)
        self.assertTrue(nmq_ops.wait_port(new_port), "the %s listener is missing" % section)
        r = nmq.mosquitto_pub(1883, "t61/default", "still-here", qos=1)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_stops(inst)

    def test_tls_only(self):
        if shutil.which("openssl") is None:
            self.skipTest("openssl is needed")
        pki = tempfile.mkdtemp(prefix="nmq-t61-dl-pki-")
        self.addCleanup(shutil.rmtree, pki, True)
        cert, key = os.path.join(pki, "s.crt"), os.path.join(pki, "s.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-subj", "/CN=localhost", "-days", "2"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = nmq.free_port()
        self.check("tls", port, {"enable": True, "url": "tls+nmq-tcp://127.0.0.1:%d" % port,
                                 "certfile": cert, "keyfile": key})

    def test_websocket_only(self):
        port = nmq.free_port()
        self.check("websocket", port, {"enable": True, "url": "nmq-ws://127.0.0.1:%d/mqtt" % port})


class Slowloris:
    """n sockets that each send the start of a request (plain: a request
    line and a header; tls: a TLS record header and one byte) and then one
    byte every 0.4 s; a socket the server closes is opened again, as an
    attacker would."""

    def __init__(self, port, n, tls):
        self.port, self.n, self.tls = port, n, tls
        self.stop = threading.Event()
        self.reconnects = 0
        self.thread = threading.Thread(target=self.run)

    def open(self):
        s = socket.socket()
        s.settimeout(2)
        s.connect((nmq.HOST, self.port))  # completes in the backlog too
        s.setblocking(False)
        if self.tls:
            s.send(b"\x16\x03\x01\x02\x00\x01")  # a 512-byte ClientHello, begun
        else:
            s.send(b"GET /api/v4/nodes HTTP/1.1\r\nHost: x\r\n")
        return s

    def run(self):
        socks = [self.open() for _ in range(self.n)]
        while not self.stop.wait(0.4):
            for i, s in enumerate(socks):
                try:
                    if s.recv(4096) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    self.reconnects += 1
                    try:
                        socks[i] = self.open()
                    except OSError:
                        pass
                    continue
                try:
                    s.send(b"\x00" if self.tls else b"X")
                except OSError:
                    pass
        for s in socks:
            s.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


class TestSlowClients(ServerCase):
    # request_timeout is long, so only the eviction at limit_conn can get a
    # waiting client served within seconds.
    HTTP_CONF = ("http_server { port = %(port)d, username = admin, password = pw-61, "
                 "limit_conn = 4, request_timeout = 30s %(ssl)s }\n")
    TLS = False
    SSL = ""

    def setUp(self):
        self.HTTP_CONF = self.HTTP_CONF.replace("%(ssl)s", self.SSL)
        super().setUp()
        self.scheme = "https" if self.TLS else "http"

    def connection(self):
        if self.TLS:
            import ssl
            ctx = ssl.create_default_context(cafile=self.CERT)
            ctx.check_hostname = False
            return http.client.HTTPSConnection(nmq.HOST, self.http_port, timeout=20,
                                               context=ctx)
        return http.client.HTTPConnection(nmq.HOST, self.http_port, timeout=20)

    def curl(self, path):
        args = ["curl", "-s", "-m", "25", "-u", "%s:%s" % (USER, PASSWORD), "-o", "/dev/null",
                "-w", "%{http_code}"]
        if self.TLS:
            args += ["--cacert", self.CERT]
        host = "localhost" if self.TLS else nmq.HOST
        t0 = time.monotonic()
        r = subprocess.run(args + ["%s://%s:%d%s" % (self.scheme, host, self.http_port, path)],
                           capture_output=True, text=True, timeout=30)
        return r.stdout, time.monotonic() - t0

    def test_quick_request_served_during_slowloris(self):
        # A kept-alive client, connected before the attack.
        kept = self.connection()
        kept.request("GET", "/api/v4/nodes", headers={"Authorization": AUTH})
        r = kept.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        kept_sock = kept.sock
        with Slowloris(self.http_port, 12, self.TLS) as attack:
            time.sleep(0.5)  # every other slot is taken, the rest wait in the backlog
            # The kept-alive client keeps making requests on its connection
            # (a pause of 0.2 s is no reason to close it) while curl runs.
            errors = []

            def active():
                try:
                    t_end = time.monotonic() + 5
                    while time.monotonic() < t_end:
                        kept.request("GET", "/api/v4/nodes", headers={"Authorization": AUTH})
                        r = kept.getresponse()
                        r.read()
                        if r.status != 200 or kept.sock is not kept_sock:
                            errors.append("status %d" % r.status)
                        time.sleep(0.2)
                except (OSError, http.client.HTTPException) as e:
                    errors.append(repr(e))

            t = threading.Thread(target=active)
            t.start()
            code, took = self.curl("/api/v4/nodes")
            t.join()
            self.assertEqual(code, "200")
            # About a second per limit_conn slow clients ahead of it in the
            # backlog (3 here); without the eviction, request_timeout (30 s,
            # beyond curl's -m 25).
            self.assertLess(took, 20, "a quick request waited %.1f s" % took)
            self.assertEqual(errors, [], "the active kept-alive client lost its connection")
            self.assertGreater(attack.reconnects, 0)
            code, took = self.curl("/api/v4/nodes")
            self.assertEqual(code, "200")
            self.assertLess(took, 20)
        kept.close()
        st, _, j = self.get("/api/v4/metrics") if not self.TLS else self.metrics_tls()
        self.assertEqual(st, 200)
        self.assertGreater(j["metrics"][0]["http_slow_requests_closed"], 0)
        if not self.TLS:
            self.assert_healthy()

    def metrics_tls(self):
        c = self.connection()
        c.request("GET", "/api/v4/metrics", headers={"Authorization": AUTH})
        r = c.getresponse()
        out = r.status, None, json.loads(r.read())
        c.close()
        return out


class TestSlowClientsTls(TestSlowClients):
    TLS = True

    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("openssl is needed")
        cls.pki = tempfile.mkdtemp(prefix="nmq-t61-pki-")
        cls.CERT = os.path.join(cls.pki, "server.crt")
        key = os.path.join(cls.pki, "server.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
                        cls.CERT, "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1", "-days", "2"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.SSL = ', ssl { certfile = "%s", keyfile = "%s" }' % (cls.CERT, key)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.pki, True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
