#!/usr/bin/python3
"""24: what a TLS handshake costs and negotiates: key exchange groups and
cipher suites by default and as configured (`groups`, `ciphers`), ECDSA
and RSA server certificates, session resumption (tickets and the session
cache), mutual TLS on a resumed session, a handshake storm while other
clients are served, and nanomq_cli over TLS.

Clients: `openssl s_client` (OpenSSL 3), Python's ssl module,
mosquitto_pub/sub, and nanomq_cli.  Certificates from scripts/gen-certs.sh
(shared with test_20_tls)."""

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time

import nmq
import nmq_ops
import test_20_tls as t20
from nmq import HOST, Broker, BrokerError, MosquittoSub, mosquitto_pub
from test_20_tls import TlsCase, pki


def setUpModule():
    t20.setUpModule()


def tearDownModule():
    t20.tearDownModule()


def cpu_has_aes():
    """True when this CPU has the instructions mbed TLS 2.28 uses for
    AES-GCM (x86: AES-NI and PCLMULQDQ; it has none for ARM)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return False
    m = re.search(r"^flags\s*:(.*)$", text, re.M)
    flags = m.group(1).split() if m else []
    return "aes" in flags and "pclmulqdq" in flags


# A CONNECT (3.1.1, clean session, keepalive 10) and a DISCONNECT: after the
# handshake, s_client forwards them, so the broker answers with a CONNACK.
CONNECT = nmq.connect_bytes("s-client", keepalive=10)
DISCONNECT = nmq.disconnect_bytes()


def s_client(port, *args, stdin=None, timeout=15):
    """Runs openssl s_client against the broker; returns its output (text).
    stdin is sent after the handshake (default: CONNECT and DISCONNECT, so
    that the broker closes the connection and s_client ends)."""
    if stdin is None:
        stdin = CONNECT + DISCONNECT
    cmd = ["openssl", "s_client", "-connect", "%s:%d" % (HOST, port), "-CAfile",
           pki("ca.crt"), "-tls1_2", "-ign_eof"] + list(args)
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    return r.stdout.decode("utf-8", "replace")


def negotiated(out):
    """(group, cipher, reused) as s_client reports them."""
    g = re.search(r"Server Temp Key: ([^\n]+?)(?:, 253 bits)?\n", out)
    c = re.search(r"(New|Reused), TLSv1\.2, Cipher is (\S+)", out)
    return (g.group(1) if g else None, c.group(2) if c else None,
            c.group(1) == "Reused" if c else None)


def py_ctx(cafile="ca.crt", cert=None, curve=None, ciphers=None, tickets=True):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki(cafile))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # mbed TLS 2.28 stops at 1.2
    if cert:
        ctx.load_cert_chain(pki(cert + ".crt"), pki(cert + ".key"))
    if curve:
        ctx.set_ecdh_curve(curve)
    if ciphers:
        ctx.set_ciphers(ciphers)
    if not tickets:
        ctx.options |= ssl.OP_NO_TICKET
    return ctx


def mqtt_over_tls(port, ctx, client_id, session=None):
    """Handshake, CONNECT, read the CONNACK, DISCONNECT. Returns (connack
    return code or None if the connection closed, ssl session, reused)."""
    s = socket.create_connection((HOST, port), timeout=10)
    t = ctx.wrap_socket(s, server_hostname="localhost", session=session)
    try:
        t.sendall(nmq.connect_bytes(client_id, keepalive=10))
        data = b""
        while len(data) < 4:
            chunk = t.recv(4 - len(data))
            if not chunk:
                return None, t.session, t.session_reused
            data += chunk
        rc = data[3] if data[0] == 0x20 else None
        t.sendall(DISCONNECT)
        return rc, t.session, t.session_reused
    finally:
        t.close()


class Defaults(TlsCase):
    """No `groups` or `ciphers`: X25519, then P-256, P-384; AES-GCM first
    on a CPU with AES instructions; resumption on."""

    SSL = {}

    def test_no_client_preference_gets_x25519_and_the_cpu_cipher(self):
        out = s_client(self.tls_port, stdin=CONNECT + DISCONNECT)
        group, cipher, reused = negotiated(out)
        self.assertEqual(group, "X25519", out)
        if cpu_has_aes():
            self.assertRegex(cipher or "", r"AES128-GCM|AES256-GCM", out)
        else:
            self.assertRegex(cipher or "", r"CHACHA20", out)
        self.assertFalse(reused)
        self.assertIn("Verify return code: 0 (ok)", out)

    def test_server_order_wins_over_the_client_order(self):
        if not cpu_has_aes():
            self.skipTest("the server order puts ChaCha20 first on this CPU")
        out = s_client(self.tls_port, "-cipher",
                       "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES256-GCM-SHA384")
        self.assertEqual(negotiated(out)[1], "ECDHE-RSA-AES256-GCM-SHA384", out)

    def test_client_may_pick_chacha(self):
        out = s_client(self.tls_port, "-cipher", "ECDHE-RSA-CHACHA20-POLY1305")
        self.assertEqual(negotiated(out)[1], "ECDHE-RSA-CHACHA20-POLY1305", out)

    def test_groups_follow_the_server_order_and_p521_is_off(self):
        out = s_client(self.tls_port, "-groups", "P-521:P-384:P-256")
        self.assertEqual(negotiated(out)[0], "ECDH, prime256v1, 256 bits", out)
        out = s_client(self.tls_port, "-groups", "P-521:P-384")
        self.assertEqual(negotiated(out)[0], "ECDH, secp384r1, 384 bits", out)
        out = s_client(self.tls_port, "-groups", "P-521")
        self.assertIsNone(negotiated(out)[1], "P-521 was negotiated by default:\n" + out)
        self.assert_broker_healthy()

    def test_resumption_with_a_ticket_and_with_the_session_cache(self):
        d = self.broker.tmp
        for label, extra in (("ticket", []), ("session id", ["-no_ticket"])):
            with self.subTest(label):
                sess = os.path.join(d, "s-%s.pem" % label.replace(" ", "-"))
                out = s_client(self.tls_port, "-sess_out", sess, *extra,
                               stdin=CONNECT + DISCONNECT)
                self.assertFalse(negotiated(out)[2], out)
                if label == "ticket":
                    self.assertIn("TLS session ticket lifetime hint: 3600", out)
                out = s_client(self.tls_port, "-sess_in", sess, *extra,
                               stdin=CONNECT + DISCONNECT)
                self.assertTrue(negotiated(out)[2], "not resumed (%s):\n%s" % (label, out))

    def test_python_session_reused_with_mqtt_on_top(self):
        for tickets in (True, False):
            with self.subTest(tickets=tickets):
                ctx = py_ctx(tickets=tickets)
                rc, sess, reused = mqtt_over_tls(self.tls_port, ctx, "py-full")
                self.assertEqual(rc, 0)
                self.assertFalse(reused)
                rc, _, reused = mqtt_over_tls(self.tls_port, ctx, "py-resumed", session=sess)
                self.assertEqual(rc, 0)
                self.assertTrue(reused, "the broker did not resume the session")

    def test_a_session_from_another_broker_is_not_resumed(self):
        ctx = py_ctx()
        _, sess, _ = mqtt_over_tls(self.tls_port, ctx, "first")
        # Another process has other ticket keys and an empty cache: a full
        # handshake, not a failure.
        port = None
        for _ in range(3):
            port = nmq.free_port()
            other = Broker(t20.ssl_conf(port))
            try:
                other.start()
                break
            except BrokerError as e:
                if "in use" not in str(e).lower():
                    raise
        try:
            self.assertTrue(nmq_ops.wait_port(port, 5.0))
            rc, _, reused = mqtt_over_tls(port, ctx, "elsewhere", session=sess)
            self.assertEqual(rc, 0)
            self.assertFalse(reused)
        finally:
            other.stop()

    def test_mosquitto_clients(self):
        sub = MosquittoSub(self.tls_port, "tls24/m", qos=1, count=1,
                           extra=["--cafile", pki("ca.crt")])
        try:
            sub.wait_subscribed()
            r = mosquitto_pub(self.tls_port, "tls24/m", "m", qos=1,
                              extra=["--cafile", pki("ca.crt")])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sub.get(1), ["tls24/m|1|0|m"])
        finally:
            sub.close()

    def test_handshake_storm_while_others_are_served(self):
        """60 clients x 5 full handshakes at once; a plain-TCP pair keeps
        exchanging QoS 1 messages, none is lost and none waits long."""
        sub = self.paho("storm-sub")
        sub.subscribe("storm/t", 1)
        pub = self.paho("storm-pub")
        errors = []

        def storm():
            ctx = py_ctx()
            try:
                for i in range(5):
                    rc, _, _ = mqtt_over_tls(self.tls_port, ctx,
                                             "storm-%d-%d" % (threading.get_ident(), i))
                    if rc != 0:
                        errors.append(rc)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=storm) for _ in range(60)]
        for t in threads:
            t.start()
        worst = 0.0
        n = 0
        while any(t.is_alive() for t in threads) or n < 5:
            t0 = time.monotonic()
            pub.publish("storm/t", b"%d" % n, qos=1)
            m = sub.wait_message(timeout=10)
            self.assertIsNotNone(m, "message %d lost during the storm" % n)
            self.assertEqual(m.payload, b"%d" % n)
            worst = max(worst, time.monotonic() - t0)
            n += 1
            time.sleep(0.05)
        for t in threads:
            t.join()
        self.assertEqual(errors, [], "handshakes failed during the storm")
        # Generous for sanitizer builds on a shared 2-core machine: the
        # bystander must not wait for the whole storm (seconds of CPU).
        self.assertLess(worst, 2.0, "a bystander waited %.2f s during the storm" % worst)
        self.assert_broker_healthy()


class Configured(TlsCase):
    """`groups` and `ciphers` set: the server order is the configured one,
    P-521 works once named."""

    def setUp(self):
        self._clients = []  # each test starts its own broker (start_with)

    def start_with(self, extra):
        last = None
        for _ in range(3):
            self.tls_port = nmq.free_port()
            conf = t20.ssl_conf(self.tls_port).rstrip().rstrip("}") + extra + "\n}\n"
            self.broker = Broker(conf)
            try:
                self.broker.start()
                break
            except BrokerError as e:
                last = e
                if "in use" not in str(e).lower():
                    raise
        else:
            raise last
        self.port = self.broker.port
        self.addCleanup(self._stop_broker)
        self.assertTrue(nmq_ops.wait_port(self.tls_port, 5.0), "nothing listens on the tls port")

    def test_configured_groups(self):
        self.start_with('  groups = "secp521r1:x25519"\n')
        out = s_client(self.tls_port, "-groups", "X25519:P-521")
        self.assertEqual(negotiated(out)[0], "ECDH, secp521r1, 521 bits", out)
        out = s_client(self.tls_port, "-groups", "P-256")
        self.assertIsNone(negotiated(out)[1], "a group left out was negotiated:\n" + out)
        self.assertIn("groups=secp521r1:x25519", self.broker.log_text())

    def test_configured_ciphers(self):
        self.start_with('  ciphers = "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:'
                        'TLS-ECDHE-RSA-WITH-AES-256-GCM-SHA384"\n')
        out = s_client(self.tls_port)
        self.assertEqual(negotiated(out)[1], "ECDHE-RSA-CHACHA20-POLY1305", out)
        out = s_client(self.tls_port, "-cipher", "ECDHE-RSA-AES128-GCM-SHA256")
        self.assertIsNone(negotiated(out)[1], "a suite left out was negotiated:\n" + out)

    def test_wss_inherits_from_ssl_and_may_override(self):
        wss_port = nmq.free_port()
        self.start_with('  groups = "secp384r1"\n}\n'
                        'listeners.wss {\n'
                        '  bind = "%s:%d/mqtt"\n'
                        '  ciphers = "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"\n'
                        % (HOST, wss_port))
        self.assertTrue(nmq_ops.wait_port(wss_port, 5.0), "nothing listens on the wss port")
        out = s_client(self.tls_port, "-groups", "X25519:P-384")
        group, cipher, _ = negotiated(out)
        self.assertEqual(group, "ECDH, secp384r1, 384 bits", out)
        self.assertNotIn("CHACHA", cipher or "", out)
        # The TLS handshake comes before the HTTP upgrade; a request
        # without the upgrade headers gets an error and the close.
        out = s_client(wss_port, "-groups", "X25519:P-384",
                       stdin=b"GET /mqtt HTTP/1.0\r\n\r\n")
        group, cipher, _ = negotiated(out)
        self.assertEqual(group, "ECDH, secp384r1, 384 bits", "wss did not inherit groups:\n" + out)
        self.assertEqual(cipher, "ECDHE-RSA-CHACHA20-POLY1305", out)

    def test_reload_applies_groups_and_drops_old_sessions(self):
        self.start_with('  groups = "secp384r1"\n')
        out = s_client(self.tls_port, "-groups", "P-256:P-384")
        self.assertEqual(negotiated(out)[0], "ECDH, secp384r1, 384 bits", out)
        ctx = py_ctx()
        rc, sess, _ = mqtt_over_tls(self.tls_port, ctx, "before-reload")
        self.assertEqual(rc, 0)
        self.broker.conf = self.broker.conf.replace('groups = "secp384r1"',
                                                    'groups = "secp256r1"')
        self.broker._write_conf()
        self.broker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        group = None
        while time.monotonic() < deadline:
            group = negotiated(s_client(self.tls_port, "-groups", "P-256:P-384"))[0]
            if group == "ECDH, prime256v1, 256 bits":
                break
            time.sleep(0.2)
        self.assertEqual(group, "ECDH, prime256v1, 256 bits", "reload did not apply groups")
        # The new configuration has new ticket keys and an empty cache: a
        # session of the old one gets a full handshake.
        rc, _, reused = mqtt_over_tls(self.tls_port, ctx, "after-reload", session=sess)
        self.assertEqual((rc, reused), (0, False))

    def test_unknown_names_stop_the_broker_with_file_line_and_key(self):
        for key, value, word in (("groups", "x25519:p-999", "p-999"),
                                 ("ciphers", "TLS_NOT_A_SUITE", "TLS-NOT-A-SUITE")):
            with self.subTest(key=key):
                conf = t20.ssl_conf(nmq.free_port()).rstrip().rstrip("}") \
                    + '  %s = "%s"\n}\n' % (key, value)
                b = Broker(conf)
                with self.assertRaises(BrokerError):
                    b.start(timeout=5)
                text = b.log_text()
                b.stop()
                self.assertIn("listeners.ssl.%s" % key, text)
                self.assertIn(word, text)
                self.assertRegex(text, r"nanomq\.conf:\d+")


class Ecdsa(TlsCase):
    """An ECDSA P-256 server certificate."""

    def setUp(self):
        self.SSL = {"certfile": pki("server-ec.crt"), "key": "server-ec.key"}
        super().setUp()

    def test_ecdsa_suite_and_clients(self):
        out = s_client(self.tls_port, stdin=CONNECT + DISCONNECT)
        group, cipher, _ = negotiated(out)
        self.assertEqual(group, "X25519", out)
        self.assertRegex(cipher or "", r"^ECDHE-ECDSA-", out)
        self.assertIn("Verify return code: 0 (ok)", out)
        r = mosquitto_pub(self.tls_port, "tls24/ec", "x", qos=1,
                          extra=["--cafile", pki("ca.crt")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.roundtrip(5)
        ctx = py_ctx()
        rc, sess, _ = mqtt_over_tls(self.tls_port, ctx, "ec-1")
        self.assertEqual(rc, 0)
        rc, _, reused = mqtt_over_tls(self.tls_port, ctx, "ec-2", session=sess)
        self.assertEqual((rc, reused), (0, True))


class MutualResumed(TlsCase):
    """verify_peer + fail_if_no_peer_cert: mutual TLS as before, with RSA
    and ECDSA client certificates, and a resumed session keeps the client's
    verified identity (a client without a certificate stays out)."""

    SSL = {"verify": True, "fail": True}

    def test_rsa_and_ecdsa_client_certificates(self):
        for cert in ("client1", "client1-ec"):
            with self.subTest(cert=cert):
                rc, err = self.pub_ok(cert=cert)
                self.assertEqual(rc, 0, err)
                ctx = py_ctx(cert=cert)
                rc, sess, reused = mqtt_over_tls(self.tls_port, ctx, cert + "-a")
                self.assertEqual((rc, reused), (0, False))
                rc, _, reused = mqtt_over_tls(self.tls_port, ctx, cert + "-b", session=sess)
                self.assertEqual((rc, reused), (0, True))

    def test_no_or_untrusted_certificate_still_refused(self):
        rc, _ = self.pub_ok()
        self.assertNotEqual(rc, 0)
        rc, _ = self.pub_ok(cert="rogue")
        self.assertNotEqual(rc, 0)
        self.assert_broker_healthy()


CLI = os.environ.get("NANOMQ_CLI_BIN", "")


def cli(args, timeout=30):
    return subprocess.run([CLI] + args, capture_output=True, text=True, timeout=timeout)


class CliCase(TlsCase):
    def setUp(self):
        if not CLI or not os.access(CLI, os.X_OK):
            self.skipTest("NANOMQ_CLI_BIN is not set to an executable")
        super().setUp()

    def target(self, host="localhost"):
        return ["-h", host, "-p", str(self.tls_port)]


class CliServerTls(CliCase):
    """nanomq_cli pub/sub/conn/bench over TLS, server authentication only."""

    def test_pub_and_sub(self):
        sub = subprocess.Popen([CLI, "sub", "-t", "cli24/#", "-L", "1", "-q", "1", "-s",
                                "--cafile", pki("ca.crt")] + self.target(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Retained, so the order of the two clients does not matter. IP
            # address as host: checked against the iPAddress SAN.
            r = cli(["pub", "-t", "cli24/a", "-m", "over-tls", "-q", "1", "-r", "--cafile",
                     pki("ca.crt")] + self.target("127.0.0.1"))
            self.assertEqual(r.returncode, 0, r.stderr)
            out, err = sub.communicate(timeout=15)
            self.assertEqual(sub.returncode, 0, err)
            self.assertIn("cli24/a: over-tls", out)
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.communicate()

    def test_verbose_names_the_negotiated_suite(self):
        r = cli(["conn", "-v", "--duration", "0.3", "--cafile", pki("ca.crt")] + self.target())
        self.assertEqual(r.returncode, 0, r.stderr)
        want = "AES-128-GCM" if cpu_has_aes() else "CHACHA20-POLY1305"
        self.assertRegex(r.stderr, r"connected \(MQTT 3\.1\.1, TLSv1\.2 TLS-ECDHE-RSA-WITH-%s"
                         % re.escape(want))

    def test_untrusted_server_is_refused(self):
        r = cli(["pub", "-t", "cli24/x", "-m", "x", "--cafile", pki("other-ca.crt")]
                + self.target())
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not trusted", r.stderr)
        # --insecure connects anyway (and says nothing about trust).
        r = cli(["pub", "-t", "cli24/x", "-m", "x", "--insecure"] + self.target())
        self.assertEqual(r.returncode, 0, r.stderr)
        # Plain MQTT against the TLS port does not get a CONNACK.
        r = cli(["conn", "--connect-timeout", "2000", "--duration", "1"] + self.target())
        self.assertNotEqual(r.returncode, 0)
        self.assert_broker_healthy()

    def test_bench_resumes_sessions(self):
        def run(extra):
            r = cli(["bench", "conn", "-c", "20", "-i", "0", "--duration", "0.2", "--json",
                     "-S", "--cafile", pki("ca.crt")] + extra + self.target(), timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            rep = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertEqual(rep["connect"]["ok"], 20, r.stdout)
            return rep["tls"]
        self.assertEqual(run([]), {"full": 20, "resumed": 0})
        self.assertEqual(run(["--resume"]), {"full": 0, "resumed": 20})


class CliMutualTls(CliCase):
    SSL = {"verify": True, "fail": True}

    def test_client_certificates(self):
        base = ["pub", "-t", "cli24/m", "-m", "x", "--cafile", pki("ca.crt")] + self.target()
        r = cli(base)
        self.assertNotEqual(r.returncode, 0, "connected without a client certificate")
        for cert in ("client1", "client1-ec"):
            r = cli(base + ["-E", pki(cert + ".crt"), "--key", pki(cert + ".key")])
            self.assertEqual(r.returncode, 0, "%s: %s" % (cert, r.stderr))
        r = cli(base + ["-E", pki("rogue.crt"), "--key", pki("rogue.key")])
        self.assertNotEqual(r.returncode, 0, "a self-signed client certificate was accepted")


class CliWebSocket(CliCase):
    """nanomq_cli over ws:// and wss:// (--ws)."""

    def setUp(self):
        if not CLI or not os.access(CLI, os.X_OK):
            self.skipTest("NANOMQ_CLI_BIN is not set to an executable")
        self._clients = []
        last = None
        for _ in range(3):
            self.tls_port, self.ws_port = nmq.free_port(), nmq.free_port()
            self.wss_port = nmq.free_port()
            conf = t20.ssl_conf(self.tls_port) + (
                'listeners.ws.bind = "%s:%d/mqtt"\n'
                'listeners.wss.bind = "%s:%d/mqtt"\n' % (HOST, self.ws_port, HOST, self.wss_port))
            self.broker = Broker(conf)
            try:
                self.broker.start()
                break
            except BrokerError as e:
                last = e
                if "in use" not in str(e).lower():
                    raise
        else:
            raise last
        self.port = self.broker.port
        self.addCleanup(self._stop_broker)
        for p in (self.ws_port, self.wss_port):
            self.assertTrue(nmq_ops.wait_port(p, 5.0), "nothing listens on %d" % p)

    def test_pub_sub_over_ws_and_wss(self):
        big = "x" * 70000  # frames with a 64-bit length
        for port, tls in ((self.ws_port, []), (self.wss_port, ["-s", "--cafile", pki("ca.crt")])):
            with self.subTest(tls=bool(tls)):
                topic = "cli24/ws/%d" % port
                r = cli(["pub", "-t", topic, "-m", big, "-q", "1", "-r", "--ws", "-h", "localhost",
                         "-p", str(port)] + tls)
                self.assertEqual(r.returncode, 0, r.stderr)
                r = cli(["sub", "-t", topic, "-L", "1", "--ws", "-h", "localhost", "-p",
                         str(port), "--duration", "10"] + tls)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.strip(), "%s: %s" % (topic, big))

    def test_bench_over_wss_loses_nothing_at_qos1(self):
        r = cli(["bench", "pubsub", "--pubs", "1", "--subs", "20", "-t", "cli24/wsb", "-q", "1",
                 "-I", "0", "-i", "0", "--duration", "1", "--json", "--ws", "-S", "--cafile",
                 pki("ca.crt"), "-h", "localhost", "-p", str(self.wss_port)], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(rep["connect"]["ok"], 21)
        self.assertGreater(rep["received"], 0)
        self.assertEqual(rep["lost"], 0, r.stdout)
        self.assertEqual(rep["duplicated"], 0, r.stdout)

    def test_wrong_path_is_refused(self):
        r = cli(["conn", "--ws-path", "/nope", "-h", "localhost", "-p", str(self.ws_port),
                 "--duration", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("upgrade refused", r.stderr)
        self.assert_broker_healthy()


if __name__ == "__main__":
    nmq.main()
