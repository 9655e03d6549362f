#!/usr/bin/python3
"""21: MQTT over WebSocket (listeners.ws, listeners.wss).

paho-mqtt over ws:// and wss:// (MQTT 3.1.1 and 5.0, 300 KB publishes), and
a hand-written WebSocket client for what paho never does: any Host header
(also on a listener bound to one address), the mqttv3.1 subprotocol, a
comma-separated offer, no offer, MQTT packets split across frames and
several packets in one frame, fragmented messages, pings and close frames,
text frames, oversized packets, a client that never finishes its HTTP
request (closed at the CONNECT deadline) and raw bytes split at every
offset. docs/decisions/0002-websocket.md has the design."""

import base64
import hashlib
import os
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest
import warnings

import paho.mqtt.client as mqtt

import nmq
import nmq_ops
from nmq import (CONNACK, PINGREQ, PINGRESP, PUBLISH, SUBACK, HOST, Broker, BrokerError,
                 BrokerTestCase)

SRC = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
PKI = None
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_PACKET = 512 * 1024
BIG = 300 * 1000


def setUpModule():
    global PKI
    warnings.simplefilter("ignore", ResourceWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("WebSocket listener configuration is nanomq-specific")
    if shutil.which("openssl") is None:
        raise unittest.SkipTest("openssl is needed for the wss certificates")
    PKI = tempfile.mkdtemp(prefix="nmq-pki-")
    subprocess.run(["bash", os.path.join(SRC, "scripts", "gen-certs.sh"), PKI], check=True,
                   stdout=subprocess.DEVNULL)


def tearDownModule():
    if PKI and not nmq.KEEP_TMP:
        shutil.rmtree(PKI, ignore_errors=True)


def pki(name):
    return os.path.join(PKI, name)


class WsClosed(Exception):
    pass


class WsClient:
    """A minimal RFC 6455 client: one HTTP upgrade, then frames built by
    hand (always masked, as a client must)."""

    def __init__(self, port, path="/mqtt", host=None, protocol="mqtt", ca=None, timeout=5.0,
                 version=4):
        self.version = version
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ca is not None:
            ctx = ssl.create_default_context(cafile=ca)
            self.sock = ctx.wrap_socket(self.sock, server_hostname="localhost")
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: %s" % (host or "%s:%d" % (HOST, port)),
                 "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: " + key,
                 "Sec-WebSocket-Version: 13"]
        if protocol is not None:
            lines.append("Sec-WebSocket-Protocol: " + protocol)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            head += chunk
        text, _, self.buf = head.partition(b"\r\n\r\n")
        self.buf = bytearray(self.buf)
        status_line, *hdrs = text.decode("latin-1").split("\r\n")
        parts = status_line.split(" ")
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        self.headers = {}
        for h in hdrs:
            if ":" in h:
                k, v = h.split(":", 1)
                self.headers[k.strip().lower()] = v.strip()
        if self.status == 101:
            want = base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()
            if self.headers.get("sec-websocket-accept") != want:
                raise AssertionError("bad Sec-WebSocket-Accept %r" % self.headers)
        self.mqtt = bytearray()
        self.opcodes = []

    # -- frames -------------------------------------------------------------
    def frame(self, payload, opcode=2, fin=True, length=None):
        """Bytes of one masked frame (length overrides the header only)."""
        n = len(payload) if length is None else length
        b0 = (0x80 if fin else 0) | opcode
        if n < 126:
            hdr = struct.pack("!BB", b0, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, 0x80 | 127, n)
        mask = os.urandom(4)
        body = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        return hdr + mask + body

    def send_frame(self, payload, opcode=2, fin=True):
        self.sock.sendall(self.frame(payload, opcode, fin))

    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise nmq.RecvTimeout("timed out")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise nmq.RecvTimeout("timed out")
            except (ConnectionResetError, ssl.SSLError):
                chunk = b""
            if not chunk:
                raise WsClosed()
            self.buf += chunk

    def recv_frame(self, timeout=nmq.T_MSG):
        """Returns (fin, opcode, payload) of the next frame."""
        deadline = time.monotonic() + timeout
        self._fill(2, deadline)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise AssertionError("server sent a masked frame")
        n, off = b1 & 0x7F, 2
        if n == 126:
            self._fill(4, deadline)
            n, off = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._fill(10, deadline)
            n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
        self._fill(off + n, deadline)
        payload = bytes(self.buf[off:off + n])
        del self.buf[:off + n]
        self.opcodes.append(b0 & 0x0F)
        return bool(b0 & 0x80), b0 & 0x0F, payload

    # -- MQTT over the frames --------------------------------------------------
    def read_packet(self, timeout=nmq.T_MSG):
        deadline = time.monotonic() + timeout
        while True:
            if len(self.mqtt) >= 2:
                mult, length, i, done = 1, 0, 1, False
                while i < len(self.mqtt) and i <= 4:
                    b = self.mqtt[i]
                    length += (b & 0x7F) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        done = True
                        break
                if done and len(self.mqtt) >= i + length:
                    first, body = self.mqtt[0], bytes(self.mqtt[i:i + length])
                    del self.mqtt[:i + length]
                    return nmq.Packet(first, body, self.version)
            _fin, op, payload = self.recv_frame(max(deadline - time.monotonic(), 0.001))
            if op == 8:
                raise WsClosed(payload)
            if op in (0, 2):
                self.mqtt += payload

    def expect(self, ptype, timeout=nmq.T_ACK):
        p = self.read_packet(timeout)
        if p.type != ptype:
            raise AssertionError("expected %s, got %r" % (nmq.PACKET_NAMES[ptype], p))
        return p

    def expect_closed(self, timeout=nmq.T_CLOSE):
        """The server must end the WebSocket: a close frame or EOF.
        Returns the close code, or None."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                _fin, op, payload = self.recv_frame(max(deadline - time.monotonic(), 0.001))
            except WsClosed:
                return None
            if op == 8:
                return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


CALLBACKS = ("on_connect", "on_disconnect", "on_message", "on_subscribe", "on_unsubscribe",
             "on_publish")


class WsPaho(nmq.PahoClient):
    """nmq.PahoClient over websockets (the harness client has no transport
    option, so the paho object is rebuilt with one)."""

    def __init__(self, port, client_id, version=4, ca=None, host_header=None):
        super().__init__(port, client_id, version=version)
        old = self.c
        if version == 5:
            c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5, transport="websockets")
        else:
            c = mqtt.Client(client_id=client_id, clean_session=True, protocol=mqtt.MQTTv311,
                            transport="websockets")
        for n in CALLBACKS:
            setattr(c, n, getattr(old, n))
        c.ws_set_options(path="/mqtt", headers={"Host": host_header} if host_header else None)
        if ca is not None:
            c.tls_set(ca_certs=ca)
        self.c = c


class WsCase(BrokerTestCase):
    """A fresh broker per test with ws on self.ws_port and wss on
    self.wss_port, bound to BIND."""

    BIND = "0.0.0.0"

    def conf(self):
        return ("mqtt.max_packet_size = %d\n"
                'listeners.ws.bind = "%s:%d/mqtt"\n'
                "listeners.wss {\n"
                '  bind = "%s:%d/mqtt"\n'
                '  certfile = "%s"\n  keyfile = "%s"\n  cacertfile = "%s"\n'
                "}\n" % (MAX_PACKET, self.BIND, self.ws_port, self.BIND, self.wss_port,
                         pki("server.crt"), pki("server.key"), pki("ca.crt")))

    def setUp(self):
        last = None
        for _ in range(3):
            self.ws_port, self.wss_port = nmq.free_port(), nmq.free_port()
            self.broker = Broker(self.conf())
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
        self.assertTrue(nmq_ops.wait_port(self.ws_port, 5.0), "nothing listens on the ws port")
        self.assertTrue(nmq_ops.wait_port(self.wss_port, 5.0), "nothing listens on the wss port")

    def ws(self, **kw):
        c = WsClient(kw.pop("port", self.ws_port), **kw)
        self._clients.append(c)
        return c

    def ws_connected(self, client_id, **kw):
        c = self.ws(**kw)
        self.assertEqual(c.status, 101, "upgrade refused: %d %r" % (c.status, c.headers))
        c.send_frame(nmq.connect_bytes(client_id, version=c.version))
        ack = c.expect(CONNACK)
        self.assertEqual(ack.rc, 0)
        return c

    def ws_paho(self, client_id, version, secure=False, host_header=None):
        port = self.wss_port if secure else self.ws_port
        c = self._track(WsPaho(port, client_id, version, ca=pki("ca.crt") if secure else None,
                               host_header=host_header or "localhost:%d" % port))
        c.connect()
        return c

    def big_roundtrip(self, version, secure):
        tag = "%s-v%d" % ("wss" if secure else "ws", version)
        sub = self.ws_paho("sub-" + tag, version, secure)
        sub.subscribe("big/" + tag, 1)
        pub = self.ws_paho("pub-" + tag, version, secure)
        payload = os.urandom(BIG)
        pub.publish("big/" + tag, payload, qos=1, timeout=15)
        m = sub.wait_message(timeout=15)
        self.assertIsNotNone(m, "no 300 KB message over " + tag)
        self.assertEqual(len(m.payload), BIG)
        self.assertTrue(m.payload == payload, "300 KB payload corrupted over " + tag)


class WebSocket(WsCase):

    def test_paho_ws_both_versions_300k(self):
        for v in (4, 5):
            with self.subTest(version=v):
                self.big_roundtrip(v, secure=False)

    def test_paho_wss_both_versions_300k(self):
        for v in (4, 5):
            with self.subTest(version=v):
                self.big_roundtrip(v, secure=True)

    def test_ws_and_tcp_share_the_broker(self):
        plain = self.paho("tcp-sub")
        plain.subscribe("mix/#", 1)
        w = self.ws_paho("ws-pub", 5)
        w.publish("mix/a", b"from-ws", qos=1)
        m = plain.wait_message()
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, b"from-ws")

    def test_any_host_header(self):
        for host in ("localhost", "localhost:%d" % self.ws_port, "example.com",
                     "127.0.0.1:%d" % self.ws_port):
            with self.subTest(host=host):
                c = self.ws_connected("host-" + host.replace(":", "-"), host=host)
                c.close()
        c = self.ws_connected("wss-example", port=self.wss_port, host="example.com",
                              ca=pki("ca.crt"))
        c.close()

    def test_subprotocol_mqttv31(self):
        c = self.ws(protocol="mqttv3.1")
        self.assertEqual(c.status, 101)
        self.assertEqual(c.headers.get("sec-websocket-protocol"), "mqttv3.1")
        c.send_frame(nmq.connect_bytes("v31-offer"))
        self.assertEqual(c.expect(CONNACK).rc, 0)

    # 3.1.1 [MQTT-6.0.0-4] / 5.0 [MQTT5-6.0.0-4]: the server selects "mqtt".
    def test_subprotocol_mqtt_echoed(self):
        c = self.ws(protocol="mqtt")
        self.assertEqual(c.status, 101)
        self.assertEqual(c.headers.get("sec-websocket-protocol"), "mqtt")

    # 3.1.1 [MQTT-6.0.0-2] / 5.0 [MQTT5-6.0.0-2]: packets need not align with frames.
    def test_connect_split_across_three_frames(self):
        for v in (4, 5):
            with self.subTest(version=v):
                c = self.ws(version=v)
                data = nmq.connect_bytes("split-%d" % v, version=v)
                for part in (data[:1], data[1:7], data[7:]):
                    c.send_frame(part)
                    time.sleep(0.05)
                self.assertEqual(c.expect(CONNACK).rc, 0)

    def test_connect_as_fragmented_message(self):
        c = self.ws()
        data = nmq.connect_bytes("fragmented")
        c.send_frame(data[:3], opcode=2, fin=False)
        c.send_frame(data[3:9], opcode=0, fin=False)
        c.send_frame(data[9:], opcode=0, fin=True)
        self.assertEqual(c.expect(CONNACK).rc, 0)

    # [MQTT-6.0.0-2]: several packets in one frame.
    def test_three_pingreq_in_one_frame(self):
        c = self.ws_connected("pings")
        c.send_frame(nmq.packet(PINGREQ, 0, b"") * 3)
        for i in range(3):
            c.expect(PINGRESP)

    # [MQTT-6.0.0-2]: packets straddling frame boundaries.
    def test_packets_straddling_frames(self):
        sub = self.ws_connected("straddle-sub")
        sub.send_frame(nmq.subscribe_bytes([("st/#", 0)], 1))
        sub.expect(SUBACK)
        pub = self.ws_connected("straddle-pub")
        a = nmq.publish_bytes("st/a", b"A" * 1000)
        b = nmq.publish_bytes("st/b", b"B" * 200)
        c = nmq.publish_bytes("st/c", b"C" * 10)
        stream = a + b + c
        # Frame 1: part of A; frame 2: rest of A + start of B; frame 3:
        # rest of B + all of C.
        cut1, cut2 = 500, len(a) + 100
        for part in (stream[:cut1], stream[cut1:cut2], stream[cut2:]):
            pub.send_frame(part)
        got = [sub.expect(PUBLISH) for _ in range(3)]
        self.assertEqual([(p.topic, p.payload) for p in got],
                         [("st/a", b"A" * 1000), ("st/b", b"B" * 200), ("st/c", b"C" * 10)])

    def test_empty_frames_are_harmless(self):
        c = self.ws()
        for _ in range(5):
            c.send_frame(b"")
        c.send_frame(nmq.connect_bytes("after-empty"))
        self.assertEqual(c.expect(CONNACK).rc, 0)
        c.send_frame(b"")
        c.send_frame(nmq.packet(PINGREQ, 0, b""))
        c.expect(PINGRESP)

    # 3.1.1 [MQTT-6.0.0-1] / 5.0 [MQTT5-6.0.0-1]: the server sends packets in
    # binary frames.
    def test_server_frames_are_binary(self):
        for v in (4, 5):
            with self.subTest(version=v):
                c = self.ws_connected("binary%d" % v, version=v)
                c.send_frame(nmq.packet(PINGREQ, 0, b""))
                c.expect(PINGRESP)
                self.assertTrue(c.opcodes and all(op == 2 for op in c.opcodes),
                                "server frame opcodes %r, expected only binary (2)" % c.opcodes)

    # [MQTT-6.0.0-1]: a text frame makes the server close the connection.
    def test_text_frame_closes_only_that_connection(self):
        watcher = self.bystander()
        c = self.ws_connected("texter")
        c.send_frame(nmq.packet(PINGREQ, 0, b""), opcode=1)
        code = c.expect_closed()
        self.assertIn(code, (None, 1003), "close code %r" % code)
        self.assert_broker_healthy(watcher)

    def test_oversized_packet_is_refused_before_buffering(self):
        watcher = self.bystander()
        c = self.ws_connected("oversize", version=5)
        # A frame announcing 2 x max_packet_size whose first bytes are a
        # PUBLISH fixed header of that size: the broker must refuse once
        # it sees the MQTT header, without waiting for (or allocating) the
        # body. Frames are a stream, so the frame length alone says
        # nothing about packet sizes.
        big = 2 * MAX_PACKET
        rl = bytearray()
        n = big
        while True:
            b = n % 128
            n //= 128
            rl.append(b | (0x80 if n else 0))
            if not n:
                break
        head = bytes([0x30]) + bytes(rl)
        mask = os.urandom(4)
        c.sock.sendall(struct.pack("!BBQ", 0x82, 0x80 | 127, big) + mask
                       + bytes(x ^ mask[i % 4] for i, x in enumerate(head)))
        p = None
        try:
            p = c.read_packet(timeout=nmq.T_CLOSE)
        except (WsClosed, nmq.RecvTimeout):
            pass
        if p is not None:
            self.assertEqual(p.type, nmq.DISCONNECT, "expected DISCONNECT, got %r" % p)
            self.assertEqual(p.rc, 0x95)
        code = c.expect_closed()
        self.assertIn(code, (None, 1000, 1009), "close code %r" % code)
        self.assert_broker_healthy(watcher)

    def test_ping_gets_pong_and_close_is_echoed(self):
        c = self.ws_connected("pinger")
        c.send_frame(b"hello", opcode=9)
        fin, op, payload = c.recv_frame()
        self.assertEqual((fin, op, payload), (True, 10, b"hello"))
        # A ping between the fragments of a message is answered too.
        pkt = nmq.packet(PINGREQ, 0, b"")
        c.send_frame(pkt[:1], fin=False)
        c.send_frame(b"mid", opcode=9)
        c.send_frame(pkt[1:], opcode=0)
        fin, op, payload = c.recv_frame()
        self.assertEqual((op, payload), (10, b"mid"))
        c.expect(PINGRESP)
        c.send_frame(struct.pack("!H", 1000) + b"bye", opcode=8)
        fin, op, payload = c.recv_frame()
        self.assertEqual(op, 8)
        self.assertEqual(struct.unpack("!H", payload[:2])[0], 1000)
        with self.assertRaises(WsClosed):
            c.recv_frame(timeout=nmq.T_CLOSE)

    def test_server_side_close_ends_with_a_close_frame(self):
        # A second CONNECT is a protocol error: v5 DISCONNECT 0x82, then
        # the WebSocket is closed properly (close frame 1000), then EOF.
        c = self.ws_connected("closer", version=5)
        c.send_frame(nmq.connect_bytes("closer", version=5))
        p = c.read_packet(timeout=nmq.T_CLOSE)
        self.assertEqual((p.type, p.rc), (nmq.DISCONNECT, 0x82))
        self.assertEqual(c.expect_closed(), 1000)
        with self.assertRaises(WsClosed):
            c.recv_frame(timeout=nmq.T_CLOSE)

    def test_client_still_sending_reads_the_reason_and_close_frame(self):
        # Lingering close (nng/transport/conn_sock.c, for ws and wss): after DISCONNECT 0x82 and the close frame the broker
        # discards what the client keeps sending for a moment instead of
        # closing at once, so the client's writes do not fail and it then
        # reads the reason code and the close frame.
        for secure in (False, True):
            with self.subTest(secure=secure):
                kw = {"port": self.wss_port, "ca": pki("ca.crt")} if secure else {}
                c = self.ws_connected("linger-%d" % secure, version=5, **kw)
                c.send_frame(nmq.connect_bytes("again", version=5))
                for i in range(40):
                    try:
                        c.send_frame(nmq.packet(PINGREQ, 0, b""))
                    except (BrokenPipeError, ConnectionResetError, ssl.SSLError) as e:
                        self.fail("write %d after the protocol error failed: %r" % (i, e))
                    time.sleep(0.005)
                p = c.read_packet(timeout=nmq.T_CLOSE)
                self.assertEqual((p.type, p.rc), (nmq.DISCONNECT, 0x82))
                self.assertEqual(c.expect_closed(), 1000)
                c.close()

    def test_unmasked_frame_is_a_protocol_error(self):
        c = self.ws_connected("unmasked")
        pkt = nmq.packet(PINGREQ, 0, b"")
        c.sock.sendall(struct.pack("!BB", 0x82, len(pkt)) + pkt)
        self.assertIn(c.expect_closed(), (None, 1002))

    def test_every_split_of_a_session(self):
        """One byte string (upgrade, CONNECT, SUBSCRIBE and PUBLISH in
        frames of odd sizes) delivered in two writes split at every offset
        gives the same result."""
        key = base64.b64encode(b"0123456789abcdef")
        req = (b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key
               + b"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n")
        helper = WsClient.__new__(WsClient)
        mqtt_bytes = (nmq.connect_bytes("splitter")
                      + nmq.subscribe_bytes([("sp/in", 0)])
                      + nmq.publish_bytes("sp/in", b"payload-1", 0))
        frames = b""
        pos, sizes, i = 0, (1, 7, 3, 40, 2), 0
        while pos < len(mqtt_bytes):
            n = sizes[i % len(sizes)]
            frames += helper.frame(mqtt_bytes[pos:pos + n])
            pos += n
            i += 1
        blob = req + frames
        for cut in range(1, len(blob)):
            s = socket.create_connection((HOST, self.ws_port), timeout=5)
            try:
                s.sendall(blob[:cut])
                s.sendall(blob[cut:])
                c = WsClient.__new__(WsClient)
                c.sock, c.version, c.mqtt, c.opcodes = s, 4, bytearray(), []
                c.buf = bytearray()
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = s.recv(4096)
                    self.assertTrue(chunk, "closed during upgrade at cut %d" % cut)
                    head += chunk
                self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
                c.buf = bytearray(head.partition(b"\r\n\r\n")[2])
                self.assertEqual(c.expect(CONNACK).rc, 0, "cut %d" % cut)
                c.expect(SUBACK)
                m = c.expect(PUBLISH)
                self.assertEqual(m.payload, b"payload-1", "cut %d" % cut)
            finally:
                s.close()

    def test_unfinished_upgrade_is_closed_at_the_connect_deadline(self):
        watcher = self.bystander()
        partial = socket.create_connection((HOST, self.ws_port), timeout=15)
        partial.sendall(b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgr")
        t0 = time.monotonic()
        try:
            data = partial.recv(100)
        except (ConnectionResetError, socket.timeout):
            data = None
        took = time.monotonic() - t0
        self.assertEqual(data, b"", "the stalled upgrade got %r" % (data,))
        self.assertGreater(took, 5.0)
        self.assertLess(took, 14.0)
        partial.close()
        self.assert_broker_healthy(watcher)

    def test_stalled_and_garbage_http_clients_do_not_block_others(self):
        watcher = self.bystander()
        idle = socket.create_connection((HOST, self.ws_port), timeout=5)
        partial = socket.create_connection((HOST, self.ws_port), timeout=5)
        partial.sendall(b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgr")
        garbage = socket.create_connection((HOST, self.ws_port), timeout=5)
        garbage.sendall(os.urandom(2000) + b"\r\n\r\n")
        plain = socket.create_connection((HOST, self.ws_port), timeout=5)
        plain.sendall(nmq.connect_bytes("plain-mqtt-on-ws"))
        try:
            t0 = time.monotonic()
            c = self.ws_connected("while-stalled")
            c.send_frame(nmq.publish_bytes("health/ws", b"ws-alive", 1, pid=1))
            c.expect(nmq.PUBACK)
            self.assertLess(time.monotonic() - t0, 4.0, "ws clients stalled by idle ones")
            m = watcher.wait_message(match=lambda m: m.payload == b"ws-alive")
            self.assertIsNotNone(m)
            w = self.ws_paho("paho-while-stalled", 4)
            w.publish("health/x", b"x", qos=1)
            self.assert_broker_healthy(watcher)
        finally:
            for s in (idle, partial, garbage, plain):
                s.close()

    # [MQTT-6.0.0-4]: "mqtt" is the subprotocol selected from a list.
    def test_comma_separated_offer_picks_the_first_mqtt(self):
        c = self.ws(protocol="mqtt, mqttv3.1")
        self.assertEqual(c.status, 101)
        self.assertEqual(c.headers.get("sec-websocket-protocol"), "mqtt")
        c = self.ws(protocol="chat, mqttv3.1")
        self.assertEqual(c.status, 101)
        self.assertEqual(c.headers.get("sec-websocket-protocol"), "mqttv3.1")

    def test_no_subprotocol_is_accepted(self):
        c = self.ws(protocol=None)
        self.assertEqual(c.status, 101)
        self.assertNotIn("sec-websocket-protocol", c.headers)
        c.send_frame(nmq.connect_bytes("no-offer"))
        self.assertEqual(c.expect(CONNACK).rc, 0)

    def test_other_subprotocol_only_gets_400(self):
        c = self.ws(protocol="chat")
        self.assertEqual(c.status, 400)

    def test_wrong_path_gets_404(self):
        c = self.ws(path="/other")
        self.assertEqual(c.status, 404)
        c = self.ws(path="/mqtt?token=1")
        self.assertEqual(c.status, 101)

    def test_wss_raw_frames_and_any_host(self):
        c = self.ws(port=self.wss_port, ca=pki("ca.crt"), host="whatever.example")
        self.assertEqual(c.status, 101)
        pkt = nmq.connect_bytes("wss-raw")
        c.send_frame(pkt[:3], fin=False)
        c.send_frame(pkt[3:], opcode=0)
        self.assertEqual(c.expect(CONNACK).rc, 0)
        c.send_frame(b"p", opcode=9)
        self.assertEqual(c.recv_frame()[1:], (10, b"p"))


class WebSocketSpecificAddress(WsCase):
    """Bound to 127.0.0.1: the address is where the listener binds, and the
    Host header may name anything."""

    BIND = "127.0.0.1"

    def test_host_naming_the_address_works(self):
        c = self.ws_connected("by-address", host="127.0.0.1:%d" % self.ws_port)
        c.close()
        w = self.ws_paho("paho-by-address", 5, host_header="127.0.0.1:%d" % self.ws_port)
        w.disconnect()

    def test_other_host_works(self):
        c = self.ws_connected("by-name", host="localhost:%d" % self.ws_port)
        c.close()
        w = self.ws_paho("paho-by-name", 4, host_header="broker.example:1")
        w.disconnect()
        c = self.ws(port=self.wss_port, ca=pki("ca.crt"), host="localhost")
        self.assertEqual(c.status, 101)


if __name__ == "__main__":
    nmq.main()
