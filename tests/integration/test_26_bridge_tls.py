#!/usr/bin/python3
"""26: a bridge's TLS link to Debian's mosquitto (docs/bridge.md "TLS",
docs/decisions/0042): the link dials TCP, runs the mbed TLS client
handshake on the bridge's thread and is then carried on our own event
loops like an accepted TLS connection.

* QoS 1 and QoS 2 streams over TLS arrive complete and in order (QoS 2
  exactly once), through a cut of the link by a proxy during which a
  backlog builds up and is drained over TLS once it is back.
* The server's certificate is verified by default: a wrong CA and a
  certificate for another host name are refused, with the reason in the
  bridge's health ($SYS/brokers/bridges/<name> "last_error").
* A remote that requires a client certificate (mosquitto
  `require_certificate true`) takes the bridge with its certificate (an
  encrypted key opened with key_password) and refuses it without one.
* A bridge stopped, or removed by a reload, while its handshake waits on a
  remote that never answers, stops at once (no leak under ASan)."""

import os
import re
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
from bridge_util import FaultProxy, Mosquitto, bridge_conf, first_order, health
from nmq import HOST, free_port
from nmq_ops import OpsTestCase, wait_for

CERTS = None
KEY_PASS = "bridge-key-pass"


def setUpModule():
    global CERTS
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()
    if shutil.which("mosquitto") is None:
        raise unittest.SkipTest("Debian's mosquitto is needed as the remote broker")
    CERTS = tempfile.mkdtemp(prefix="nmq-bridge-tls-pki-")
    run = lambda *a: subprocess.run(a, check=True, cwd=CERTS, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
    run("bash", os.path.join(nmq_ops.SRC, "scripts", "gen-certs.sh"), CERTS)
    # A server certificate from the right CA for another name only.
    with open(os.path.join(CERTS, "wrong.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:wrong.example\n")
    run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-out", "wrong.key")
    run("openssl", "req", "-new", "-key", "wrong.key", "-subj", "/CN=wrong.example",
        "-out", "wrong.csr")
    run("openssl", "x509", "-req", "-in", "wrong.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "30", "-extfile", "wrong.ext", "-out", "wrong.crt")
    # The client key, encrypted (traditional PEM: what mbed TLS 2.28 opens).
    run("openssl", "rsa", "-in", "client1.key", "-aes256", "-traditional",
        "-passout", "pass:" + KEY_PASS, "-out", "client1-enc.key")
    os.chmod(CERTS, 0o755)
    for f in os.listdir(CERTS):
        os.chmod(os.path.join(CERTS, f), 0o644)  # mosquitto drops root


def tearDownModule():
    if CERTS and not nmq.KEEP_TMP:
        shutil.rmtree(CERTS, ignore_errors=True)


def tls_listener(port, cert="server", require_cert=False):
    return ("listener %d %s\ncafile %s/ca.crt\ncertfile %s/%s.crt\nkeyfile %s/%s.key\n%s"
            % (port, HOST, CERTS, CERTS, cert, CERTS, cert,
               "require_certificate true\n" if require_cert else ""))


def ssl_conf(ca="ca.crt", cert=None, key=None, password=None):
    s = 'ssl {\n  cacertfile = "%s/%s"\n' % (CERTS, ca)
    if cert:
        s += '  certfile = "%s/%s"\n  keyfile = "%s/%s"\n' % (CERTS, cert, CERTS, key)
    if password:
        s += '  key_password = "%s"\n' % password
    return s + "}\n"


class TestBridgeTls(OpsTestCase):

    def remote(self, inst, **kw):
        """Mosquitto with a plain listener (for the collector) and a TLS one;
        returns it and the TLS port."""
        tport = free_port()
        m = Mosquitto(inst.tmp, extra=tls_listener(tport, **kw))
        self.addCleanup(m.stop)
        wait_for(lambda: nmq_ops.port_accepts(tport, 0.2), 10.0)
        return m, tport

    def broker(self, inst, extra):
        port = free_port()
        conf = inst.conf(port, extra=extra)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        return port, conf

    def monitor(self, port):
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        return mon

    # QoS 1 and 2 streams over TLS through a proxy; the proxy cuts the link,
    # a backlog builds up, and once the link is back it drains over TLS.
    def test_streams_and_backlog_over_tls(self):
        inst = self.instance()
        m, tport = self.remote(inst)
        px = FaultProxy(tport)
        self.addCleanup(px.close)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        col.subscribe("q2/#", 2)
        port, _ = self.broker(inst, bridge_conf(
            "tf", "tls+mqtt-tcp://localhost:%d" % px.port, 5, 2,
            '{ local_topic = "q1/#", remote_topic = "" },'
            '{ local_topic = "q2/#", remote_topic = "" }', extra=ssl_conf()))
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        mon = self.monitor(port)
        pub = self.client(port, "pub")
        pub.connect()
        n, cut_at = 200, 80
        for i in range(cut_at):
            pub.publish("q1/s", b"%d" % i, qos=1)
            pub.publish("q2/s", b"%d" % i, qos=2)
        px.cut()
        self.assertTrue(inst.wait_output(r"event=link_down", timeout=5), inst.output()[-2000:])
        for i in range(cut_at, n):
            pub.publish("q1/s", b"%d" % i, qos=1)
            pub.publish("q2/s", b"%d" % i, qos=2)
        h = health(mon, "tf", timeout=5, pred=lambda h: h["state"] != "up" and h["backlog"] > 0)
        self.assertGreater((h or {}).get("backlog", 0), 0, h)
        px.up()
        h = health(mon, "tf", timeout=15,
                   pred=lambda h: h["state"] == "up" and h["backlog"] == 0)
        self.assertEqual(((h or {}).get("state"), (h or {}).get("backlog")), ("up", 0), h)

        def complete():
            with col._lock:
                return (len({x.payload for x in col.received if x.topic == "q1/s"}) >= n
                        and len([x for x in col.received if x.topic == "q2/s"]) >= n)
        wait_for(complete, 10, step=0.1)
        time.sleep(0.3)  # late duplicates, if any
        with col._lock:
            got1 = [x.payload for x in col.received if x.topic == "q1/s"]
            got2 = [x.payload for x in col.received if x.topic == "q2/s"]
        want = [b"%d" % i for i in range(n)]
        self.assertEqual(first_order(got1), want, "QoS 1 stream")
        self.assertEqual(got2, want, "QoS 2 stream (exactly once, in order)")
        self.assertGreaterEqual(inst.output().count("event=link_up"), 2)
        self.assert_stops(inst)

    # Verification is on by default: a server certificate from another CA,
    # or from the right CA for another name, never brings the link up, and
    # the bridge's health says why.
    def test_wrong_ca_and_wrong_name_refused(self):
        inst0 = self.instance()
        _, good = self.remote(inst0)
        _, wrong_name = self.remote(inst0, cert="wrong")
        cases = (("wrong CA", good, "other-ca.crt", "not correctly signed"),
                 ("wrong name", wrong_name, "ca.crt", "Common Name (CN) does not match"))
        for what, tport, ca, reason in cases:
            with self.subTest(what):
                inst = self.instance()
                port, _ = self.broker(inst, bridge_conf(
                    "tv", "tls+mqtt-tcp://localhost:%d" % tport, 4, 5,
                    '{ local_topic = "s/#", remote_topic = "" }', extra=ssl_conf(ca)))
                mon = self.monitor(port)
                h = health(mon, "tv", timeout=8,
                           pred=lambda h: "certificate verify failed" in h["last_error"])
                self.assertIsNotNone(h)
                self.assertIn("certificate verify failed", h["last_error"], h)
                self.assertIn(reason, h["last_error"], h)
                self.assertNotEqual(h["state"], "up", h)
                self.assertTrue(inst.wait_output(
                    r"tls: server=localhost event=handshake_failed reason=\"certificate "
                    r"verify failed: .*%s" % re.escape(reason), timeout=5), inst.output()[-2000:])
                self.assertNotIn("event=link_up", inst.output())
                mon.close()
                self.assert_stops(inst)

    # A remote that requires a client certificate: with ours (its key
    # encrypted, opened with key_password) the link comes up and carries
    # messages; without one the remote refuses the handshake.
    def test_client_certificate_required(self):
        inst0 = self.instance()
        m, tport = self.remote(inst0, require_cert=True)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("c/#", 1)
        for with_cert in (True, False):
            with self.subTest(with_cert=with_cert):
                inst = self.instance()
                ssl = ssl_conf("ca.crt", "client1.crt", "client1-enc.key", KEY_PASS) \
                    if with_cert else ssl_conf("ca.crt")
                port, _ = self.broker(inst, bridge_conf(
                    "tc", "tls+mqtt-tcp://127.0.0.1:%d" % tport, 5, 5,
                    '{ local_topic = "c/#", remote_topic = "" }', extra=ssl))
                pub = self.client(port, "pub")
                pub.connect()
                if with_cert:
                    self.assertTrue(inst.wait_output(r"event=link_up", timeout=10),
                                    inst.output()[-2000:])
                    pub.publish("c/1", b"with-cert", qos=1)
                    got = col.wait_message(timeout=5)
                    self.assertIsNotNone(got)
                    self.assertEqual(got.payload, b"with-cert")
                else:
                    # The remote's alert, or, when its close (RST) overtakes
                    # the alert on our side, the socket's error: both name
                    # the handshake.
                    mon = self.monitor(port)
                    h = health(mon, "tc", timeout=8,
                               pred=lambda h: "handshake" in h["last_error"])
                    self.assertIsNotNone(h)
                    self.assertRegex(h["last_error"],
                                     r"the peer refused the handshake: alert|"
                                     r"TLS handshake with 127\.0\.0\.1:\d+: socket error", h)
                    self.assertNotIn("event=link_up", inst.output())
                    pub.publish("c/1", b"must-not-pass", qos=1)
                    col.expect_no_message(0.5)
                self.assert_stops(inst)

    # A remote that accepts TCP and never answers the ClientHello: the
    # handshake waits (up to the connect timeout); a reload that removes
    # the bridge, and a stop, end it at once.
    def test_stop_during_handshake(self):
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((HOST, 0))
        srv.listen(8)
        self.addCleanup(srv.close)
        held = []
        stop = threading.Event()

        def accept():
            srv.settimeout(0.1)
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                    held.append(c)
                except socket.timeout:
                    continue
                except OSError:
                    return
        t = threading.Thread(target=accept, daemon=True)
        t.start()
        self.addCleanup(lambda: [c.close() for c in held])
        self.addCleanup(stop.set)
        one = bridge_conf("ts", "tls+mqtt-tcp://127.0.0.1:%d" % srv.getsockname()[1], 5, 5,
                          '{ local_topic = "x/#", remote_topic = "" }', extra=ssl_conf())
        for how in ("reload", "stop"):
            with self.subTest(how):
                inst = self.instance()
                n = len(held)
                port, _ = self.broker(inst, one)
                self.assertTrue(wait_for(lambda: len(held) > n, 5), "no TCP connect")
                time.sleep(0.5)  # the ClientHello is out, the answer never comes
                if how == "reload":
                    inst.write("nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url))
                    t0 = time.monotonic()
                    inst.kill(signal.SIGHUP)
                    self.assertTrue(inst.wait_output(r"bridge=ts event=stopped", timeout=3),
                                    inst.output()[-2000:])
                    self.assertLess(time.monotonic() - t0, 3)
                self.assert_stops(inst, within=3)
                self.assertNotIn("event=link_up", inst.output())


if __name__ == "__main__":
    unittest.main()
