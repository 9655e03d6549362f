#!/usr/bin/python3
"""62: webhooks (docs/webhooks.md): broker events POSTed as JSON to a
receiver written here (http.server), with the documented bodies, topic
filters and payload encodings; a dead and a slow receiver never slow MQTT
traffic down."""

import base64
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

import nmq
from nmq import BrokerTestCase, skip_on_mosquitto


class Receiver:
    """An HTTP server on a free port that records every POST and counts
    the connections it accepts. HTTP/1.1 with keep-alive unless http10;
    close_every=N closes a connection after its N-th answer without saying
    so (as a server that drops idle connections does), close_header=N says
    "Connection: close" on every N-th answer."""

    def __init__(self, delay=0.0, status=200, tls=None, http10=False, close_every=0,
                 close_header=0, reply=b""):
        self.posts = []
        self.conns = 0
        self.lock = threading.Lock()
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0" if http10 else "HTTP/1.1"

            def setup(self):
                super().setup()
                self.served = 0
                with rec.lock:
                    rec.conns += 1

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                if delay:
                    time.sleep(delay)
                with rec.lock:
                    rec.posts.append((self.path, dict(self.headers), body))
                self.served += 1
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                if close_header and self.served % close_header == 0:
                    self.send_header("Connection", "close")
                self.end_headers()
                if reply:
                    self.wfile.write(reply)
                if close_every and self.served % close_every == 0:
                    self.close_connection = True

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.port = self.srv.server_address[1]
        self.t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.t.start()

    def bodies(self):
        with self.lock:
            return [json.loads(b) for _, _, b in self.posts]

    def wait(self, pred, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.bodies()):
                return self.bodies()
            time.sleep(0.05)
        return self.bodies()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


ALL_EVENTS = ["on_client_connect", "on_client_connack", "on_client_connected",
              "on_client_disconnected", "on_client_subscribe", "on_client_unsubscribe",
              "on_session_subscribed", "on_session_unsubscribed", "on_session_terminated",
              "on_message_publish", "on_message_delivered", "on_message_acked"]


def hook_conf(port, events, extra=""):
    ev = "\n".join('        { event = "%s"%s }' % (e, ', topic = "%s"' % t if t else "")
                   for e, t in events)
    return ('webhook {\n    url = "%s://127.0.0.1:%d/hook/path"\n'
            '    headers.x-test = "yes"\n%s\n    events = [\n%s\n    ]\n}\n'
            % ("https" if "ssl" in extra else "http", port, extra, ev))


class WebhookCase(BrokerTestCase):
    RECEIVER = {}
    HOOK_EXTRA = ""
    EVENTS = [(e, None) for e in ALL_EVENTS]
    AUTH = ""

    def setUp(self):
        self.rx = Receiver(**self.RECEIVER)
        self.addCleanup(self.rx.close)
        self.CONF = hook_conf(self.rx.port, self.EVENTS, self.HOOK_EXTRA) + self.AUTH
        super().setUp()


@skip_on_mosquitto("webhooks are nanomq's")
class EventBodyTests(WebhookCase):
    AUTH = 'auth { allow_anonymous = true, password = { "u1" = "pw1" } }\n'

    def test_every_event_body(self):
        c = self.paho("c1", username="u1", password="pw1")
        c.subscribe("a/b", 1)
        c.publish("a/b", b"hello", qos=1)
        self.assertEqual(c.wait_message().payload, b"hello")
        c.unsubscribe("a/b")
        c.disconnect()
        bad = self.raw(4)
        bad.connect("c2", username="u1", password="wrong")
        bad.expect_closed()
        want = {"client_connect", "client_connack", "client_connected", "client_subscribe",
                "session_subscribed", "message_publish", "client_unsubscribe",
                "session_unsubscribed", "client_disconnected", "session_terminated",
                "message_delivered", "message_acked"}
        got = self.rx.wait(lambda b: want <= {x["action"] for x in b if x.get("clientid",
                           x.get("from_client_id")) == "c1"} and
                           any(x["action"] == "client_connack" and x["clientid"] == "c2"
                               for x in b))
        by = {}
        for b in got:
            if b.get("clientid", b.get("from_client_id")) == "c1":
                by.setdefault(b["action"], []).append(b)
        self.assertTrue(want <= set(by), sorted(by))
        for action, bodies in by.items():
            b = bodies[0]
            self.assertIsInstance(b["ts"], int)
            if action == "message_publish":
                self.assertEqual(b, {"action": "message_publish", "from_client_id": "c1",
                                     "from_username": "u1", "topic": "a/b", "qos": 1,
                                     "retain": False, "payload": "hello", "ts": b["ts"]})
                continue
            self.assertEqual((b["clientid"], b["username"]), ("c1", "u1"), b)
            if action in ("client_subscribe", "session_subscribed", "message_delivered",
                          "message_acked"):
                self.assertEqual((b["topic"], b["qos"]), ("a/b", 1), b)
            if action in ("client_unsubscribe", "session_unsubscribed"):
                self.assertEqual(b["topic"], "a/b", b)
            if action == "client_connack":
                self.assertEqual((b["conn_ack"], b["proto_ver"], b["keepalive"]),
                                 ("success", 4, 60), b)
            if action == "client_disconnected":
                self.assertEqual(b["reason"], "normal", b)
        fail = [b for b in got if b["action"] == "client_connack" and b["clientid"] == "c2"]
        self.assertEqual(fail[0]["conn_ack"], "fail")
        # Requests run in parallel, so arrival order says nothing; the
        # event times (ms) do.
        ts = {a: bs[0]["ts"] for a, bs in by.items()}
        self.assertLessEqual(ts["client_connect"], ts["client_connected"])
        self.assertLessEqual(ts["client_subscribe"], ts["message_publish"])
        self.assertLessEqual(ts["message_delivered"], ts["message_acked"])
        self.assertLessEqual(ts["client_disconnected"], ts["session_terminated"])
        # The request: POST to the configured path, headers, JSON type.
        path, headers, _ = self.rx.posts[0]
        self.assertEqual(path, "/hook/path")
        self.assertEqual(headers.get("x-test"), "yes")
        self.assertEqual(headers.get("Content-Type"), "application/json")

    def test_abnormal_disconnect(self):
        r = self.raw(4)
        r.connect("gone")
        r.sock.close()
        got = self.rx.wait(lambda b: any(x["action"] == "client_disconnected" for x in b))
        d = [x for x in got if x["action"] == "client_disconnected"]
        self.assertEqual((d[0]["clientid"], d[0]["username"], d[0]["reason"]),
                         ("gone", "undefined", "abnormal"))


@skip_on_mosquitto("webhooks are nanomq's")
class HttpAuthConnackTests(WebhookCase):
    """A CONNECT that waits for auth.http_auth.auth_req still reports
    client_connack (when the answer comes), and session_terminated names
    the user of a session that never subscribed."""
    EVENTS = [("on_client_connack", None), ("on_session_terminated", None)]
    AUTH_STATUS = 200

    def setUp(self):
        self.authrx = Receiver(status=self.AUTH_STATUS)
        self.addCleanup(self.authrx.close)
        self.AUTH = ('auth {\n  allow_anonymous = false\n  http_auth {\n'
                     '    auth_req { url = "http://127.0.0.1:%d/auth", method = post,'
                     ' params = { username = "%%u" } }\n    timeout = 2s\n  }\n}\n'
                     % self.authrx.port)
        super().setUp()

    def test_connack_after_http_auth(self):
        c = self.paho("ha1", username="remote-user", password="pw")
        c.disconnect()
        got = self.rx.wait(lambda b: {"client_connack", "session_terminated"}
                           <= {x["action"] for x in b})
        self.assertEqual(len(self.authrx.posts), 1)
        ack = [b for b in got if b["action"] == "client_connack"]
        self.assertEqual([(b["clientid"], b["username"], b["conn_ack"], b["proto_ver"],
                           b["keepalive"]) for b in ack],
                         [("ha1", "remote-user", "success", 4, 60)])
        end = [b for b in got if b["action"] == "session_terminated"]
        self.assertEqual((end[0]["clientid"], end[0]["username"]), ("ha1", "remote-user"))


@skip_on_mosquitto("webhooks are nanomq's")
class HttpAuthDeniedConnackTests(HttpAuthConnackTests):
    AUTH_STATUS = 403

    def test_connack_after_http_auth(self):
        r = self.raw(4)
        r.connect("ha2", username="nobody", password="pw")
        r.expect_closed()
        got = self.rx.wait(lambda b: any(x["action"] == "client_connack" for x in b))
        self.assertEqual(len(self.authrx.posts), 1)
        ack = [b for b in got if b["action"] == "client_connack"]
        self.assertEqual([(b["clientid"], b["username"], b["conn_ack"]) for b in ack],
                         [("ha2", "nobody", "fail")])


@skip_on_mosquitto("webhooks are nanomq's")
class FilterEncodingTests(WebhookCase):
    EVENTS = [("on_message_publish", "s/#")]
    HOOK_EXTRA = "    body.encoding = base64"
    HTTP_PORT = nmq.free_port()
    AUTH = "http_server { port = %d, auth_type = no_auth }\n" % HTTP_PORT

    def test_topic_filter_and_base64(self):
        c = self.paho("pub")
        payload = bytes(range(256))
        c.publish("x/1", b"not sent", qos=1)
        c.publish("s/1", payload, qos=1)
        c.publish("s/2/3", b"", qos=1, retain=True)
        got = self.rx.wait(lambda b: len(b) >= 2)
        time.sleep(0.3)
        got = self.rx.bodies()
        self.assertEqual(sorted(b["topic"] for b in got), ["s/1", "s/2/3"])
        s1 = [b for b in got if b["topic"] == "s/1"][0]
        self.assertEqual(base64.b64decode(s1["payload"]), payload)
        s2 = [b for b in got if b["topic"] == "s/2/3"][0]
        self.assertEqual((s2["payload"], s2["retain"]), ("", True))
        # The counters through the REST API (curl).
        out = subprocess.run(["curl", "-s", "http://127.0.0.1:%d/api/v4/webhook"
                              % self.HTTP_PORT], capture_output=True, timeout=20)
        st = json.loads(out.stdout)["data"]
        self.assertEqual((st["enabled"], st["sent"], st["failed"], st["dropped"], st["queued"]),
                         (True, 2, 0, 0, 0))
        # And in the Prometheus text, read by Prometheus' own parser.
        from prometheus_client.parser import text_string_to_metric_families
        out = subprocess.run(["curl", "-s", "http://127.0.0.1:%d/api/v4/prometheus"
                              % self.HTTP_PORT], capture_output=True, timeout=20)
        fams = {f.name: f for f in text_string_to_metric_families(out.stdout.decode())}
        req = {s.labels["result"]: s.value for s in fams["nanomq_webhook_requests"].samples}
        self.assertEqual(req, {"sent": 2, "failed": 0, "dropped": 0, "retried": 0})
        self.assertEqual(fams["nanomq_webhook_requests"].type, "counter")
        self.assertEqual([s.value for s in fams["nanomq_webhook_queued"].samples], [0])


PKI = None


def pki(name):
    global PKI
    if PKI is None:
        PKI = tempfile.mkdtemp(prefix="nmq-pki-")
        src = os.environ.get("NMQ_SOURCE_DIR",
                             os.path.join(os.path.dirname(__file__), "..", ".."))
        subprocess.run(["bash", os.path.join(src, "scripts", "gen-certs.sh"), PKI], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, KEY_PASSWORD="nanomq-test"))
    return os.path.join(PKI, name)


def tearDownModule():
    if PKI:
        shutil.rmtree(PKI, ignore_errors=True)


@skip_on_mosquitto("webhooks are nanomq's")
class HttpsTests(WebhookCase):
    EVENTS = [("on_message_publish", None)]

    def setUp(self):
        self.RECEIVER = {"tls": (pki("server.crt"), pki("server.key"))}
        self.HOOK_EXTRA = ('    pool_size = 2\n    ssl { cacertfile = "%s", verify_peer = true }'
                           % pki(self.CA))
        super().setUp()

    CA = "ca.crt"

    def test_https_target(self):
        c = self.paho("tlspub")
        c.publish("t/s", b"secret", qos=1)
        got = self.rx.wait(lambda b: len(b) >= 1)
        self.assertEqual([(b["topic"], b["payload"]) for b in got], [("t/s", "secret")])
        # Further events reuse the TLS connection.
        for i in range(20):
            c.publish("t/s", b"m%d" % i, qos=1)
        got = self.rx.wait(lambda b: len(b) >= 21)
        self.assertEqual(len(got), 21)
        self.assertLessEqual(self.rx.conns, 2)


@skip_on_mosquitto("webhooks are nanomq's")
class HttpsWrongCaTests(HttpsTests):
    CA = "other-ca.crt"

    def test_https_target(self):
        # The target's certificate does not verify: nothing is sent, the
        # failure is logged and retried.
        c = self.paho("tlspub")
        c.publish("t/s", b"secret", qos=1)
        log = nmq_wait_log(self.broker, "step=tls_handshake")
        self.assertIn("event=tls_failed step=tls_handshake", log)
        self.assertEqual(self.rx.bodies(), [])


@skip_on_mosquitto("webhooks are nanomq's")
class KeepAliveTests(WebhookCase):
    """Connections are kept between requests: many events, few connections."""
    EVENTS = [("on_message_publish", None)]
    HOOK_EXTRA = "    pool_size = 4"
    RECEIVER = {"reply": b'{"result":"ok"}'}

    def send(self, n, prefix):
        c = self.paho(prefix)
        for i in range(n):
            c.publish("ka/%s/%d" % (prefix, i), b"m%d" % i, qos=1)
        want = {"m%d" % i for i in range(n)}
        got = self.rx.wait(lambda b: want <= {x["payload"] for x in b
                                             if x["topic"].startswith("ka/%s/" % prefix)},
                           timeout=15)
        mine = [x["payload"] for x in got if x["topic"].startswith("ka/%s/" % prefix)]
        self.assertEqual(sorted(mine), sorted(want))  # each once, none lost
        c.close()

    def test_many_events_few_connections(self):
        self.send(200, "a")
        self.assertLessEqual(self.rx.conns, 4)
        self.assertNotIn("action=retry", self.broker.log_text())


@skip_on_mosquitto("webhooks are nanomq's")
class KeepAliveServerClosesTests(KeepAliveTests):
    """The receiver closes each connection after 3 answers without saying
    so, or says Connection: close: nothing is lost, nothing counted failed."""
    RECEIVER = {"close_every": 3}

    def test_many_events_few_connections(self):
        self.send(60, "b")
        # About one connection per 3 requests, never one per request.
        self.assertGreaterEqual(self.rx.conns, 60 // 3)
        self.assertLess(self.rx.conns, 60)
        self.assertNotIn("reason=", "".join(l for l in self.broker.log_text().splitlines()
                                            if "action=retry" in l))


@skip_on_mosquitto("webhooks are nanomq's")
class KeepAliveCloseHeaderTests(KeepAliveTests):
    RECEIVER = {"close_header": 2}

    def test_many_events_few_connections(self):
        self.send(40, "c")
        self.assertGreaterEqual(self.rx.conns, 40 // 2)
        self.assertLess(self.rx.conns, 40)


@skip_on_mosquitto("webhooks are nanomq's")
class Http10ReceiverTests(KeepAliveTests):
    """An HTTP/1.0 receiver: one connection per request, as before."""
    RECEIVER = {"http10": True}

    def test_many_events_few_connections(self):
        self.send(20, "d")
        self.assertEqual(self.rx.conns, 20)


def publish_burst(case, n):
    """n QoS 1 messages through the broker to a subscriber; returns the
    seconds it took."""
    sub = case.paho("sub")
    sub.subscribe("load/#", 1)
    pub = case.paho("loader")
    t0 = time.monotonic()
    for i in range(n):
        pub.publish("load/%d" % i, b"x" * 64, qos=1, wait=False)
    got = sub.wait_messages(n, timeout=10)
    case.assertEqual(len(got), n)
    return time.monotonic() - t0


@skip_on_mosquitto("webhooks are nanomq's")
class DeadReceiverTests(WebhookCase):
    EVENTS = [("on_message_publish", None)]
    HOOK_EXTRA = "    pool_size = 4\n    cancel_timeout = 500"

    def setUp(self):
        super().setUp()
        self.rx.close()  # nothing listens on the port any more

    def test_dead_target_does_not_slow_mqtt(self):
        took = publish_burst(self, 300)
        self.assertLess(took, 5.0)
        log = nmq_wait_log(self.broker, "action=retry")
        self.assertIn("reason=connect", log)
        self.assert_broker_healthy()


@skip_on_mosquitto("webhooks are nanomq's")
class SlowReceiverTests(WebhookCase):
    RECEIVER = {"delay": 2.0}
    EVENTS = [("on_message_publish", None)]
    HOOK_EXTRA = "    pool_size = 2\n    cancel_timeout = 300\n    queue_size = 20"

    def test_slow_target_does_not_slow_mqtt(self):
        took = publish_burst(self, 300)
        self.assertLess(took, 5.0)
        # The queue of 20 overflowed: events were dropped and counted, and
        # requests timed out and were retried.
        log = nmq_wait_log(self.broker, "reason=queue_full")
        self.assertIn("action=dropped reason=queue_full", log)
        log = nmq_wait_log(self.broker, "reason=timeout")
        self.assertIn("reason=timeout", log)
        self.assert_broker_healthy()


def nmq_wait_log(broker, text, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = broker.log_text()
        if text in log:
            return log
        time.sleep(0.05)
    return broker.log_text()


if __name__ == "__main__":
    unittest.main()
