#!/usr/bin/python3
"""25: TLS on the broker's own event loops (docs/decisions/0019): the
handshake thread and its timeout (`handshake_timeout`), a handshake storm
while a TLS subscriber keeps receiving, messages much larger than a TLS
record in both directions (also to a subscriber that stops reading for a
while, so that encrypted output waits for room), and a peer that sends
every TLS record byte by byte.

Clients: paho-mqtt over TLS, Python's ssl module (sockets and memory BIOs)
and raw sockets.  Certificates from scripts/gen-certs.sh (test_20_tls)."""

import os
import re
import socket
import ssl
import threading
import time
import urllib.request

import nmq
import test_20_tls as t20
from nmq import HOST
from test_20_tls import TlsCase, pki


def setUpModule():
    t20.setUpModule()


def tearDownModule():
    t20.tearDownModule()


def py_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki("ca.crt"))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_TICKET  # every handshake a full one
    return ctx


def read_packet(t):
    """Reads one MQTT packet from a TLS socket: (first byte, body)."""
    def exact(n):
        b = b""
        while len(b) < n:
            chunk = t.recv(n - len(b))
            if not chunk:
                raise ConnectionError("closed")
            b += chunk
        return b
    first = exact(1)[0]
    mult, size = 1, 0
    while True:
        d = exact(1)[0]
        size += (d & 0x7F) * mult
        mult *= 128
        if not d & 0x80:
            break
    return first, exact(size)


def thread_names(pid):
    names = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


class LoopCase(TlsCase):
    HS_TIMEOUT = None

    def setUp(self):
        if self.HS_TIMEOUT is not None:
            # ssl_conf's block, with the timeout inside it.
            orig = t20.ssl_conf

            def conf(port, **kw):
                text = orig(port, **kw)
                return text[:text.rindex("}")] + "  handshake_timeout = %s\n}\n" % self.HS_TIMEOUT
            t20.ssl_conf = conf
            try:
                super().setUp()
            finally:
                t20.ssl_conf = orig
        else:
            super().setUp()


class HandshakeThread(LoopCase):
    HS_TIMEOUT = "1s"
    HTTP_PORT = nmq.free_port()
    CONF = "http_server { port = %d, auth_type = no_auth }\n" % HTTP_PORT

    def metric(self, name):
        url = "http://%s:%d/api/v4/prometheus" % (HOST, self.HTTP_PORT)
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        m = re.search(r"^nanomq_%s (\S+)$" % name, text, re.M)
        self.assertIsNotNone(m, "metric %s missing" % name)
        return float(m.group(1))

    def test_tls_runs_without_nng_threads(self):
        """TLS connections are served by the broker's own threads: a
        handshake thread appears, and no NNG thread does."""
        c = self.tls_paho("loop-threads")
        c.subscribe("loop/t", 1)
        names = thread_names(self.broker.proc.pid)
        self.assertIn("nmq:tls-hs", names)
        self.assertEqual([n for n in names if n.startswith("nng:")], [], names)

    def test_silent_and_slowloris_handshakes_time_out(self):
        """A socket that sends nothing, and one that trickles its
        ClientHello a byte at a time, are both closed about 1 s after
        connecting, while a real client is served meanwhile."""
        silent = socket.create_connection((HOST, self.tls_port), timeout=10)
        slow = socket.create_connection((HOST, self.tls_port), timeout=10)
        slow.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.monotonic()
        # A real ClientHello, trickled: 5 bytes per 100 ms keeps the
        # socket busy without ever finishing.
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = py_ctx().wrap_bio(inc, out, server_hostname="localhost")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = out.read()
        closed_at = None
        slow.settimeout(0.1)
        i = 0
        while time.monotonic() - t0 < 6:
            try:
                if i < len(hello):
                    slow.send(hello[i:i + 5])
                    i += 5
                d = slow.recv(4096)
                if not d:
                    closed_at = time.monotonic() - t0
                    break
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.monotonic() - t0
                break
        self.assertIsNotNone(closed_at, "a trickled handshake was never timed out")
        self.assertGreater(closed_at, 0.7)
        self.assertLess(closed_at, 3.5)
        self.assertLess(i, len(hello), "the ClientHello was complete: test too slow")
        # The silent one is gone too.
        silent.settimeout(3)
        try:
            self.assertEqual(silent.recv(10), b"")
        except ConnectionResetError:
            pass
        self.assertLess(time.monotonic() - t0, 5)
        self.assertGreaterEqual(self.metric("tls_handshakes_timed_out"), 2)
        self.assertGreaterEqual(self.metric("tls_handshakes_failed"), 2)
        self.assertEqual(self.metric("tls_handshakes_refused"), 0)
        # A real client is not affected.
        c = self.tls_paho("after-timeouts")
        c.subscribe("loop/t", 1)
        self.assert_broker_healthy()

    def test_many_idle_handshakes_cost_only_a_slot(self):
        """300 sockets that never handshake do not stop a TLS client
        from connecting and exchanging messages, and are all closed at
        the timeout."""
        idle = [socket.create_connection((HOST, self.tls_port), timeout=10) for _ in range(300)]
        t0 = time.monotonic()
        sub = self.tls_paho("idle-sub")
        sub.subscribe("idle/t", 1)
        pub = self.tls_paho("idle-pub")
        pub.publish("idle/t", b"through", qos=1)
        m = sub.wait_message(timeout=5)
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, b"through")
        self.assertLess(time.monotonic() - t0, 3.0)
        for s in idle:
            s.settimeout(5)
            try:
                self.assertEqual(s.recv(10), b"")
            except ConnectionResetError:
                pass
            s.close()


class Storm(LoopCase):
    def test_storm_while_a_tls_subscriber_keeps_receiving(self):
        """40 clients x 3 full handshakes at once; a TLS publisher and a
        TLS subscriber keep exchanging QoS 1 messages: none is lost, none
        waits long (the handshakes run on their own thread)."""
        sub = self.tls_paho("storm-tls-sub")
        sub.subscribe("storm/tls", 1)
        pub = self.tls_paho("storm-tls-pub")
        errors = []

        def storm():
            ctx = py_ctx()
            try:
                for i in range(3):
                    s = socket.create_connection((HOST, self.tls_port), timeout=30)
                    t = ctx.wrap_socket(s, server_hostname="localhost")
                    t.sendall(nmq.connect_bytes("st-%d-%d" % (threading.get_ident(), i)))
                    first, body = read_packet(t)
                    if first != 0x20 or body[1] != 0:
                        errors.append((first, body))
                    t.sendall(nmq.disconnect_bytes())
                    t.close()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=storm) for _ in range(40)]
        for t in threads:
            t.start()
        worst, n = 0.0, 0
        while any(t.is_alive() for t in threads) or n < 5:
            t0 = time.monotonic()
            pub.publish("storm/tls", b"%d" % n, qos=1)
            m = sub.wait_message(timeout=10)
            self.assertIsNotNone(m, "message %d lost during the storm" % n)
            self.assertEqual(m.payload, b"%d" % n)
            worst = max(worst, time.monotonic() - t0)
            n += 1
            time.sleep(0.05)
        for t in threads:
            t.join()
        self.assertEqual(errors, [], "handshakes failed during the storm")
        self.assertLess(worst, 2.0, "the TLS subscriber waited %.2f s" % worst)
        self.assert_broker_healthy()


class Records(LoopCase):
    CONF = "mqtt { max_packet_size = 4MB }\n"

    def test_large_messages_over_many_records(self):
        """1 MiB and 3 MiB payloads (64 and 192 records) arrive intact
        over TLS, QoS 0 and 1, followed by a small one."""
        sub = self.tls_paho("big-sub")
        sub.subscribe("big/#", 1)
        pub = self.tls_paho("big-pub")
        big1 = os.urandom(1 << 20)
        big3 = os.urandom(3 << 20)
        pub.publish("big/a", big1, qos=1)
        pub.publish("big/b", big3, qos=0)
        pub.publish("big/c", b"small", qos=1)
        got = sub.wait_messages(3, timeout=30)
        self.assertEqual([m.topic for m in got], ["big/a", "big/b", "big/c"])
        self.assertEqual(got[0].payload, big1)
        self.assertEqual(got[1].payload, big3)
        self.assertEqual(got[2].payload, b"small")

    def test_subscriber_that_stops_reading(self):
        """A TLS subscriber that does not read while 6 MiB are published
        to it gets every byte once it reads again: encrypted records wait
        in the broker for room in the socket."""
        s = socket.create_connection((HOST, self.tls_port), timeout=20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        t = py_ctx().wrap_socket(s, server_hostname="localhost")
        t.sendall(nmq.connect_bytes("slow-reader", keepalive=60))
        self.assertEqual(read_packet(t)[0], 0x20)
        t.sendall(nmq.subscribe_bytes([("slow/t", 0)]))
        self.assertEqual(read_packet(t)[0], 0x90)
        pub = self.tls_paho("slow-pub")
        payloads = [os.urandom(1 << 20) for _ in range(6)]
        for p in payloads:
            pub.publish("slow/t", p, qos=1)
        time.sleep(1.0)  # not reading: the broker's socket fills up
        # The broker still serves others meanwhile.
        self.assert_broker_healthy()
        for i, p in enumerate(payloads):
            first, body = read_packet(t)
            self.assertEqual(first & 0xF0, 0x30)
            tlen = body[0] << 8 | body[1]
            self.assertEqual(body[2:2 + tlen], b"slow/t")
            self.assertEqual(body[2 + tlen:], p, "payload %d damaged" % i)
        t.close()

    def test_records_sent_byte_by_byte(self):
        """A client whose every TLS byte (handshake, CONNECT, SUBSCRIBE,
        PUBLISH) arrives in a TCP segment of its own is served normally."""
        s = socket.create_connection((HOST, self.tls_port), timeout=20)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = py_ctx().wrap_bio(inc, out, server_hostname="localhost")

        def flush():
            for b in out.read():
                s.send(bytes([b]))
                time.sleep(0.0005)

        def pump():
            d = s.recv(65536)
            if not d:
                raise ConnectionError("closed by the broker")
            inc.write(d)

        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                pump()
        flush()

        def send(data):
            obj.write(data)
            flush()

        buf = b""

        def packet():
            nonlocal buf
            while True:
                if len(buf) >= 2:
                    size, mult, i = 0, 1, 1
                    while i < len(buf):
                        size += (buf[i] & 0x7F) * mult
                        mult *= 128
                        if not buf[i] & 0x80:
                            break
                        i += 1
                    if i < len(buf) and len(buf) >= i + 1 + size:
                        p, buf = buf[:i + 1 + size], buf[i + 1 + size:]
                        return p
                try:
                    buf += obj.read(65536)
                except ssl.SSLWantReadError:
                    pump()

        send(nmq.connect_bytes("byte-by-byte"))
        self.assertEqual(packet()[:4], b"\x20\x02\x00\x00")
        send(nmq.subscribe_bytes([("bbb/t", 1)], pid=7))
        self.assertEqual(packet()[0], 0x90)
        other = self.tls_paho("bbb-other")
        other.subscribe("bbb/t", 1)
        payload = os.urandom(3000)
        send(nmq.publish_bytes("bbb/t", payload, qos=1, pid=9))
        m = other.wait_message(timeout=10)
        self.assertIsNotNone(m)
        self.assertEqual(m.payload, payload)
        kinds = set()
        for _ in range(2):  # our PUBACK and our own copy, in either order
            kinds.add(packet()[0] & 0xF0)
        self.assertEqual(kinds, {0x40, 0x30})
        s.close()


if __name__ == "__main__":
    nmq.main()
