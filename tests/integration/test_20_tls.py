#!/usr/bin/python3
"""20: MQTT over TLS (listeners.ssl): server-only TLS, mutual TLS with
verify_peer / fail_if_no_peer_cert, encrypted keys, startup errors that name
the file, hostile bytes on the TLS port, certificate reload.

Certificates come from scripts/gen-certs.sh, run once into a temporary
directory.  Clients: mosquitto_pub/mosquitto_sub (OpenSSL) and paho-mqtt
(Python ssl), MQTT 3.1.1 and 5.0."""

import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import warnings

import paho.mqtt.client as mqtt

import nmq
import nmq_ops
from nmq import HOST, Broker, BrokerError, BrokerTestCase, MosquittoSub, mosquitto_pub

SRC = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
PKI = None  # directory with the generated certificates
KEY_PASSWORD = "nanomq-test"


def setUpModule():
    global PKI
    # paho 1.6 uses ssl.PROTOCOL_TLS, and leaves its socket to the garbage
    # collector after a failed handshake.
    warnings.simplefilter("ignore", ResourceWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("TLS listener configuration is nanomq-specific")
    if shutil.which("openssl") is None or shutil.which("mosquitto_pub") is None:
        raise unittest.SkipTest("openssl and mosquitto-clients are needed")
    PKI = tempfile.mkdtemp(prefix="nmq-pki-")
    subprocess.run(["bash", os.path.join(SRC, "scripts", "gen-certs.sh"), PKI], check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, KEY_PASSWORD=KEY_PASSWORD))


def tearDownModule():
    if PKI and not nmq.KEEP_TMP:
        shutil.rmtree(PKI, ignore_errors=True)


def pki(name):
    return os.path.join(PKI, name)


def ssl_conf(port, verify=False, fail=False, key="server.key", password=None, certfile=None,
             name="ssl"):
    lines = ["listeners.%s {" % name, '  bind = "%s:%d"' % (HOST, port),
             '  certfile = "%s"' % (certfile or pki("server.crt")),
             '  keyfile = "%s"' % pki(key),
             '  cacertfile = "%s"' % pki("ca.crt"),
             "  verify_peer = %s" % ("true" if verify else "false"),
             "  fail_if_no_peer_cert = %s" % ("true" if fail else "false")]
    if password is not None:
        lines.append('  key_password = "%s"' % password)
    lines.append("}")
    return "\n".join(lines) + "\n"


CALLBACKS = ("on_connect", "on_disconnect", "on_message", "on_subscribe", "on_unsubscribe",
             "on_publish")


class TlsPaho(nmq.PahoClient):
    """nmq.PahoClient over TLS (or websockets): the harness client has no
    transport or TLS options, so the paho object is rebuilt with them."""

    def __init__(self, port, client_id, version=4, ca=None, cert=None, key=None,
                 transport="tcp", ws_path="/mqtt", ws_host=None):
        super().__init__(port, client_id, version=version)
        old = self.c
        if version == 5:
            c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5, transport=transport)
        else:
            c = mqtt.Client(client_id=client_id, clean_session=True, protocol=mqtt.MQTTv311,
                            transport=transport)
        for n in CALLBACKS:
            setattr(c, n, getattr(old, n))
        if transport == "websockets":
            c.ws_set_options(path=ws_path, headers={"Host": ws_host} if ws_host else None)
        if ca is not None:
            c.tls_set(ca_certs=ca, certfile=cert, keyfile=key)
        self.c = c


class TlsCase(BrokerTestCase):
    """A fresh broker per test with a TLS listener on self.tls_port.
    SSL = dict of ssl_conf() arguments."""

    SSL = {}
    CONF = ""  # more broker configuration

    def setUp(self):
        last = None
        for _ in range(3):
            self.tls_port = nmq.free_port()
            self.broker = Broker(ssl_conf(self.tls_port, **self.SSL) + self.CONF)
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
        self._clients = []
        self.assertTrue(nmq_ops.wait_port(self.tls_port, 5.0), "nothing listens on the tls port")

    def tls_paho(self, client_id, version=4, ca="ca.crt", cert=None, connect=True):
        c = self._track(TlsPaho(self.tls_port, client_id, version, ca=pki(ca),
                                cert=pki(cert + ".crt") if cert else None,
                                key=pki(cert + ".key") if cert else None))
        if connect:
            c.connect()
        return c

    def tls_args(self, ca="ca.crt", cert=None):
        a = ["--cafile", pki(ca)]
        if cert:
            a += ["--cert", pki(cert + ".crt"), "--key", pki(cert + ".key")]
        return a

    def pub_ok(self, cert=None, version=4, ca="ca.crt"):
        """mosquitto_pub over TLS; returns (returncode, stderr)."""
        r = mosquitto_pub(self.tls_port, "tls/probe", "x", version=version,
                          extra=self.tls_args(ca, cert), timeout=10)
        return r.returncode, r.stderr.decode("utf-8", "replace")

    def assert_paho_refused(self, cert=None, version=4, ca="ca.crt"):
        """The TLS handshake (or the connection right after it) must fail."""
        c = self.tls_paho("refused-%d" % time.monotonic_ns(), version, ca=ca, cert=cert,
                          connect=False)
        try:
            rc = c.connect(timeout=3, expect_rc=None)
        except (ssl.SSLError, OSError, AssertionError):
            return
        self.fail("client with cert=%s ca=%s was accepted (CONNACK %r)" % (cert, ca, rc))

    def roundtrip(self, version, cert=None):
        """Subscribe and publish over TLS with paho; one QoS 1 message."""
        sub = self.tls_paho("tls-sub-%d" % version, version, cert=cert)
        sub.subscribe("tls/t", 1)
        pub = self.tls_paho("tls-pub-%d" % version, version, cert=cert)
        pub.publish("tls/t", b"over-tls-%d" % version, qos=1)
        m = sub.wait_message()
        self.assertIsNotNone(m, "no message over TLS (v%d)" % version)
        self.assertEqual(m.payload, b"over-tls-%d" % version)


class ServerTls(TlsCase):
    """verify_peer = false: any client that trusts the CA may connect."""

    SSL = {}

    def test_mosquitto_pub_sub_both_versions(self):
        for v in (4, 5):
            with self.subTest(version=v):
                sub = MosquittoSub(self.tls_port, "tls/m%d" % v, version=v, qos=1, count=1,
                                   extra=self.tls_args())
                try:
                    sub.wait_subscribed()
                    r = mosquitto_pub(self.tls_port, "tls/m%d" % v, "hello-%d" % v, version=v,
                                      qos=1, extra=self.tls_args())
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(sub.get(1), ["tls/m%d|1|0|hello-%d" % (v, v)])
                finally:
                    sub.close()

    def test_paho_both_versions(self):
        self.roundtrip(4)
        self.roundtrip(5)

    def test_tls_and_plain_tcp_share_the_broker(self):
        plain = self.paho("plain-sub")
        plain.subscribe("mix/#", 1)
        r = mosquitto_pub(self.tls_port, "mix/a", "from-tls", qos=1, extra=self.tls_args())
        self.assertEqual(r.returncode, 0, r.stderr)
        m = plain.wait_message()
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, b"from-tls")

    def test_client_with_wrong_ca_fails(self):
        rc, err = self.pub_ok(ca="other-ca.crt")
        self.assertNotEqual(rc, 0, "mosquitto_pub trusted a server certificate from another CA")
        self.assert_paho_refused(ca="other-ca.crt")
        self.assert_broker_healthy()

    # Lingering close over TLS (nng/transport/conn_sock.c): a 5.0 client
    # whose packet makes the broker send DISCONNECT (a PUBLISH with QoS 3:
    # Malformed Packet, 0x81) while it is still sending must be able to go
    # on writing for a moment (the broker discards its input instead of
    # closing at once, which would reset the client's next write) and then
    # read the reason code.
    def test_disconnect_reason_reaches_a_client_still_sending(self):
        ctx = ssl.create_default_context(cafile=pki("ca.crt"))
        ctx.check_hostname = False
        with socket.create_connection((HOST, self.tls_port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                s.sendall(nmq.connect_bytes("tls-linger", version=5))
                head = s.recv(2)
                self.assertEqual(head[0] >> 4, nmq.CONNACK)
                body = b""
                while len(body) < head[1]:
                    body += s.recv(head[1] - len(body))
                bad = bytearray(nmq.publish_bytes("tls/l", b"x", 0, version=5))
                bad[0] |= 0x06  # QoS 3
                s.sendall(bytes(bad))
                for i in range(40):
                    try:
                        s.sendall(nmq.publish_bytes("tls/l", b"y" * 100, 0, version=5))
                    except (BrokenPipeError, ConnectionResetError, ssl.SSLError) as e:
                        self.fail("write %d after the bad packet failed: %r" % (i, e))
                    time.sleep(0.005)
                s.settimeout(5)
                data = b""
                try:
                    while len(data) < 2 or len(data) < 2 + data[1]:
                        d = s.recv(4096)
                        if not d:
                            break
                        data += d
                except (ConnectionResetError, ssl.SSLError) as e:
                    self.fail("reset before the DISCONNECT was read (%r, read %r)" % (e, data))
                self.assertGreaterEqual(len(data), 3, "closed without a DISCONNECT: %r" % data)
                self.assertEqual(data[0] >> 4, nmq.DISCONNECT, data)
                self.assertEqual(data[2], 0x81, data)
        self.assert_broker_healthy()

    def test_hostile_bytes_on_tls_port_do_not_disturb_others(self):
        watcher = self.tls_paho("watcher", 4)
        watcher.subscribe("health/#", 1)
        # A plain MQTT CONNECT, then random garbage, then a half-finished
        # TLS ClientHello, then an idle connection that never speaks.
        plain = nmq.RawClient(self.tls_port)
        plain.send(nmq.connect_bytes("plain-on-tls"))
        garbage = nmq.RawClient(self.tls_port)
        garbage.send(os.urandom(3000))
        partial = nmq.RawClient(self.tls_port)
        partial.send(bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]))
        idle = nmq.RawClient(self.tls_port)
        try:
            for name, raw in (("plain MQTT", plain), ("garbage", garbage)):
                with self.subTest(client=name):
                    try:
                        pkts = raw.expect_closed(timeout=5, msg=name)
                    except nmq.MalformedFromBroker:
                        pkts = None  # a TLS alert is not MQTT; fine
                    self.assertNotIn(nmq.CONNACK, [p.type for p in pkts or []])
            # Meanwhile a TLS client connects and is served at once.
            t0 = time.monotonic()
            p = self.tls_paho("during-garbage", 5)
            p.publish("health/x", b"still-alive", qos=1)
            self.assertLess(time.monotonic() - t0, 4.0, "TLS connect stalled by hostile clients")
            m = watcher.wait_message(match=lambda m: m.payload == b"still-alive")
            self.assertIsNotNone(m, "TLS subscriber stopped receiving")
            self.assert_broker_healthy()
        finally:
            for r in (plain, garbage, partial, idle):
                r.close()


class VerifyPeer(TlsCase):
    """verify_peer = true, fail_if_no_peer_cert = false: no certificate is
    fine, a certificate must verify against the CA."""

    SSL = {"verify": True, "fail": False}

    def test_client_without_cert_accepted(self):
        rc, err = self.pub_ok()
        self.assertEqual(rc, 0, err)
        self.roundtrip(4)

    def test_client_cert_from_ca_accepted(self):
        rc, err = self.pub_ok(cert="client1")
        self.assertEqual(rc, 0, err)
        self.roundtrip(5, cert="client1")

    def test_rogue_cert_refused(self):
        rc, err = self.pub_ok(cert="rogue")
        self.assertNotEqual(rc, 0, "a self-signed client certificate was accepted")
        for v in (4, 5):
            with self.subTest(version=v):
                self.assert_paho_refused(cert="rogue", version=v)
        self.assert_broker_healthy()


class RequirePeer(TlsCase):
    """verify_peer + fail_if_no_peer_cert, and an encrypted server key."""

    SSL = {"verify": True, "fail": True, "key": "server-enc.key", "password": KEY_PASSWORD}

    def test_client_without_cert_refused(self):
        rc, err = self.pub_ok()
        self.assertNotEqual(rc, 0, "a client without certificate was accepted")
        self.assert_paho_refused()

    def test_rogue_cert_refused(self):
        rc, err = self.pub_ok(cert="rogue")
        self.assertNotEqual(rc, 0, "a self-signed client certificate was accepted")
        self.assert_paho_refused(cert="rogue", version=5)

    def test_mutual_tls_both_versions_and_tools(self):
        for v in (4, 5):
            with self.subTest(version=v):
                rc, err = self.pub_ok(cert="client1", version=v)
                self.assertEqual(rc, 0, err)
        sub = MosquittoSub(self.tls_port, "mtls/#", version=5, qos=1, count=1,
                           extra=self.tls_args(cert="client1"))
        try:
            sub.wait_subscribed()
            pub = self.tls_paho("mtls-pub", 4, cert="client1")
            pub.publish("mtls/a", b"mutual", qos=1)
            self.assertEqual(sub.get(1), ["mtls/a|1|0|mutual"])
        finally:
            sub.close()
        self.roundtrip(4, cert="client1")


class TlsLingerBound(TlsCase):
    CONF = "mqtt.max_awaiting_rel = 3\n"

    # A lingering close over TLS ends within its time bound (the linger's
    # timer in the owner worker's epoll set, nng/transport/conn_sock.c; it
    # once had to make up for NNG 1.5.2's TLS receives, which a cancel or
    # a timeout did not always end). 5.0 clients flood QoS 2 past the Receive Maximum (the
    # broker answers DISCONNECT 0x93 and lingers) and close or reset at
    # once, without reading. Once the bound has passed, the broker must
    # stop with every connection gone: a linger that never ends holds its
    # connection, and the stop then logs drain_timeout.
    def test_lingering_closes_end_when_clients_vanish(self):
        ctx = ssl.create_default_context(cafile=pki("ca.crt"))
        ctx.check_hostname = False

        def clients(k):
            for i in range(15):
                try:
                    raw = socket.create_connection((HOST, self.tls_port), timeout=5)
                    s = ctx.wrap_socket(raw)
                    s.sendall(nmq.connect_bytes("vanish-%d-%d" % (k, i), version=5))
                    for pid in range(1, 8):
                        s.sendall(nmq.publish_bytes("in/t", b"x" * 100, 2, pid=pid, version=5))
                    if i % 2:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
                    s.close()
                except (OSError, ssl.SSLError):
                    pass  # the broker may have closed first

        threads = [threading.Thread(target=clients, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(3.0)  # past every linger's 2 s bound
        self.assert_broker_healthy()
        keep, nmq.KEEP_TMP = nmq.KEEP_TMP, True  # read the log after the stop
        try:
            problems = self.broker.stop()
            log = self.broker.log_text()
        finally:
            nmq.KEEP_TMP = keep
            if not keep and not problems:
                shutil.rmtree(self.broker.tmp, ignore_errors=True)
        self.assertEqual(problems, [])
        self.assertFalse("drain_timeout" in log, "connections were still open at the stop:\n"
                         + "\n".join(log.splitlines()[-5:]))


class StartupErrors(unittest.TestCase):
    """A TLS listener whose files cannot be used stops the broker at start,
    and the message names the file."""

    def start_fails(self, conf):
        """Runs the broker on conf; it must exit non-zero by itself.
        Returns its output."""
        b = Broker(conf)
        try:
            b.port = nmq.free_port()
            b._write_conf()
            env = dict(os.environ, NANOMQ_PID_FILE=os.path.join(b.tmp, "pid"))
            # The failed start is what is tested here, not its cleanup.
            env["ASAN_OPTIONS"] = "detect_leaks=0"
            r = subprocess.run(b.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=b.tmp, env=env, timeout=20)
            out = r.stdout.decode("utf-8", "replace")
            self.assertNotEqual(r.returncode, 0, "broker started with a broken TLS listener\n"
                                + out)
            self.assertGreater(r.returncode, 0, "broker crashed\n" + out)
            return out
        finally:
            shutil.rmtree(b.tmp, ignore_errors=True)

    def test_missing_certfile_named(self):
        missing = os.path.join(PKI, "no-such-cert.pem")
        log = self.start_fails(ssl_conf(nmq.free_port(), certfile=missing))
        self.assertIn(missing, log)

    def test_wrong_key_password_named(self):
        log = self.start_fails(ssl_conf(nmq.free_port(), key="server-enc.key",
                                        password="not-the-password"))
        self.assertIn(pki("server-enc.key"), log)
        self.assertIn("key_password", log)

    def test_encrypted_key_without_password_named(self):
        log = self.start_fails(ssl_conf(nmq.free_port(), key="server-enc.key"))
        self.assertIn(pki("server-enc.key"), log)

    def test_key_not_matching_cert_named(self):
        log = self.start_fails(ssl_conf(nmq.free_port(), key="client1.key"))
        self.assertIn(pki("client1.key"), log)


def _reload_wired():
    try:
        with open(os.path.join(SRC, "src", "main.c")) as f:
            return "listener_reload_tls" in f.read()
    except OSError:
        return False


@unittest.skipUnless(_reload_wired(), "src/main.c does not call listener_reload_tls yet")
class Reload(TlsCase):
    """SIGHUP re-reads the certificate files (same paths, new content) for
    new connections; connections already open stay up."""

    def setUp(self):
        # Private copies of the files, so that the test can overwrite them.
        self.dir = tempfile.mkdtemp(prefix="nmq-reload-")
        for f in ("server.crt", "server.key"):
            shutil.copy(pki(f), os.path.join(self.dir, f))
        self.SSL = {"certfile": os.path.join(self.dir, "server.crt")}
        self.addCleanup(shutil.rmtree, self.dir, True)
        super().setUp()

    def server_cert_issuer(self):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection((HOST, self.tls_port), timeout=5) as s:
            with ctx.wrap_socket(s) as ss:
                der = ss.getpeercert(binary_form=True)
        pem = ssl.DER_cert_to_PEM_cert(der)
        out = subprocess.run(["openssl", "x509", "-noout", "-issuer"], input=pem.encode(),
                             stdout=subprocess.PIPE, check=True).stdout.decode()
        return out

    def test_sighup_reloads_certificate_for_new_connections(self):
        # keyfile in SSL points at the shared PKI; make it the copied one.
        old = self.tls_paho("before-reload", 4)
        old.subscribe("reload/#", 1)
        self.assertIn("nanomq test CA", self.server_cert_issuer())
        other = tempfile.mkdtemp(prefix="nmq-pki2-")
        self.addCleanup(shutil.rmtree, other, True)
        subprocess.run(["bash", os.path.join(SRC, "scripts", "gen-certs.sh"), other], check=True,
                       stdout=subprocess.DEVNULL)
        # The server key is in the shared PKI (ssl_conf default), so sign
        # the new certificate for that same key with the new CA.
        subprocess.run(["openssl", "req", "-new", "-key", pki("server.key"), "-subj",
                        "/CN=localhost", "-out", os.path.join(other, "s.csr")], check=True)
        subprocess.run(["openssl", "x509", "-req", "-in", os.path.join(other, "s.csr"), "-CA",
                        os.path.join(other, "other-ca.crt"), "-CAkey",
                        os.path.join(other, "other-ca.key"), "-CAcreateserial", "-days", "2",
                        "-out", os.path.join(self.dir, "server.crt")], check=True,
                       stderr=subprocess.DEVNULL)
        self.broker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        issuer = ""
        while time.monotonic() < deadline:
            issuer = self.server_cert_issuer()
            if "unrelated test CA" in issuer:
                break
            time.sleep(0.2)
        self.assertIn("unrelated test CA", issuer, "new connections still get the old certificate")
        p = self.paho("plain-pub")
        p.publish("reload/a", b"after", qos=1)
        m = old.wait_message()
        self.assertIsNotNone(m, "a TLS connection opened before the reload stopped working")


if __name__ == "__main__":
    nmq.main()
