#!/usr/bin/python3
"""16: lingering close. When the broker ends a connection with a last packet
(a DISCONNECT with a reason code, an error CONNACK) while the client is still
sending, it half-closes the socket after that packet and discards what the
client sends for a bounded time (2 s or 64 KiB, whichever comes first), so
the client reads the reason code and then an orderly end of stream instead
of a TCP reset; a client that keeps sending does not keep the socket past
the bound (nng/transport/conn_sock.c). The same over TLS on the broker's
own loops (close_notify, then the half-close; decisions/0019)."""

import os
import socket
import ssl
import time
import unittest

import nmq
from nmq import DISCONNECT, PUBREC, BrokerTestCase, skip_on_mosquitto

LINGER_S = 2.0  # the broker's bound on a lingering close


def read_until_end(sock, timeout):
    """Reads until the peer ends the stream. Returns (bytes, how) where how
    is "eof" for an orderly end, "reset" for ECONNRESET, "timeout"."""
    data = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(data), "timeout"
        sock.settimeout(left)
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return bytes(data), "timeout"
        except (ConnectionResetError, ssl.SSLError):
            # Over TLS, a FIN without close_notify is an SSLEOFError.
            return bytes(data), "reset"
        if not d:
            return bytes(data), "eof"
        data += d


def packets(data, version=5):
    """Parses the packets of a byte string from the broker."""
    out = []
    i = 0
    while i + 2 <= len(data):
        mult, length, j = 1, 0, i + 1
        while True:
            b = data[j]
            length += (b & 0x7F) * mult
            mult *= 128
            j += 1
            if not b & 0x80:
                break
        if j + length > len(data):
            break
        out.append(nmq.Packet(data[i], data[j:j + length], version))
        i = j + length
    return out


class LingeringCloseTests(BrokerTestCase):
    CONF = "mqtt.max_awaiting_rel = 3"

    def open_sock(self):
        s = socket.create_connection((nmq.HOST, self.port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def flood_connect(self, cid):
        s = self.open_sock()
        s.sendall(nmq.connect_bytes(cid, version=5))
        data, _ = b"", None
        s.settimeout(5)
        while len(data) < 2 or len(data) < 2 + data[1]:
            d = s.recv(4096)
            self.assertTrue(d, "closed before CONNACK")
            data += d
        ack = packets(data)[0]
        self.assertEqual((ack.type, ack.rc), (nmq.CONNACK, 0))
        self.assertEqual(ack.props.get("ReceiveMaximum"), 3)
        return s

    # [MQTT5-4.13.2-1] After a DISCONNECT with a reason code of 0x80 or more
    # the server closes the connection; 5.0 3.3.4 names 0x93 (Receive
    # Maximum exceeded) for a client with more unacknowledged QoS 2
    # PUBLISHes than the server's Receive Maximum. The client sends 40
    # QoS 2 PUBLISHes, one every 5 ms (well inside the 2 s bound even on a
    # loaded machine), without reading (as a client that
    # writes its queue before it reads): the broker answers the first 3 with
    # PUBREC and the 4th with DISCONNECT 0x93. The client's writes must not
    # fail meanwhile (a client library stops at a failed write, before it
    # reads what arrived), and it must then read the PUBRECs, the reason
    # code and an orderly end of stream.
    @skip_on_mosquitto("mosquitto 2.0.11 does not enforce its own Receive Maximum")
    def test_flood_over_receive_maximum_reads_disconnect_then_eof(self):
        s = self.flood_connect("flood")
        for pid in range(1, 41):
            try:
                s.sendall(nmq.publish_bytes("in/t", b"x" * 200, 2, pid=pid, version=5))
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError) as e:
                self.fail("write of PUBLISH %d failed: the broker reset the connection while "
                          "the client was still sending (%r)" % (pid, e))
            time.sleep(0.005)
        data, how = read_until_end(s, 5.0)
        s.close()
        pk = packets(data)
        self.assertEqual([p.type for p in pk[:3]], [PUBREC] * 3, pk)
        self.assertEqual([p.pid for p in pk[:3]], [1, 2, 3], pk)
        discs = [p for p in pk if p.type == DISCONNECT]
        self.assertTrue(discs, "no DISCONNECT before the close: %r (%s)" % (pk, how))
        self.assertEqual(discs[0].rc, 0x93)
        self.assertEqual(how, "eof", "the connection ended with a %s, not an orderly close" % how)
        self.assert_broker_healthy()

    # A client that keeps sending after the DISCONNECT (slowly, so that the
    # byte bound is not what stops it) cannot hold the socket: the broker
    # closes it once the linger's time bound has passed, and the client's
    # writes then fail.
    @skip_on_mosquitto("mosquitto 2.0.11 does not enforce its own Receive Maximum")
    def test_client_that_keeps_sending_is_cut_off_at_the_bound(self):
        s = self.flood_connect("dribble")
        for pid in (1, 2, 3, 4):
            s.sendall(nmq.publish_bytes("in/t", b"x", 2, pid=pid, version=5))
        # Wait for the DISCONNECT (the 4th flow is one too many).
        got = bytearray()
        s.settimeout(5)
        deadline = time.monotonic() + 5
        while DISCONNECT not in [p.type for p in packets(bytes(got))]:
            self.assertLess(time.monotonic(), deadline, "no DISCONNECT: %r" % packets(bytes(got)))
            d = s.recv(4096)
            self.assertTrue(d, "closed before the DISCONNECT: %r" % packets(bytes(got)))
            got += d
        t0 = time.monotonic()
        disc = [p for p in packets(bytes(got)) if p.type == DISCONNECT][0]
        self.assertEqual(disc.rc, 0x93)
        # Keep sending 200 bytes every 20 ms (10 KB/s: the 64 KiB bound
        # would take 6 s) until a write fails.
        pkt = nmq.publish_bytes("in/t", b"y" * 190, 0, version=5)
        cut = None
        while time.monotonic() - t0 < 4 * LINGER_S:
            try:
                s.sendall(pkt)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                cut = time.monotonic() - t0
                break
            time.sleep(0.02)
        s.close()
        self.assertIsNotNone(cut, "the broker still accepted data %.1f s after its DISCONNECT"
                             % (4 * LINGER_S))
        # It lingered (the client was not reset at once) but not past the
        # bound (plus scheduling slack on a loaded machine).
        self.assertGreater(cut, LINGER_S / 2, "reset %.2f s after the DISCONNECT" % cut)
        self.assertLess(cut, LINGER_S + 1.5, "socket held %.2f s after the DISCONNECT" % cut)
        self.assert_broker_healthy()


class TlsLingeringCloseTests(LingeringCloseTests):
    """The tests above over a tls+tcp listener: the DISCONNECT, then
    close_notify and an orderly end of the TLS stream."""

    @classmethod
    def setUpClass(cls):
        if nmq.USE_MOSQUITTO:
            raise unittest.SkipTest("TLS listener configuration is nanomq-specific")
        import test_20_tls
        cls.t20 = test_20_tls
        test_20_tls.setUpModule()

    @classmethod
    def tearDownClass(cls):
        cls.t20.tearDownModule()

    def setUp(self):
        self.tls_port = nmq.free_port()
        self.CONF = LingeringCloseTests.CONF + "\n" + self.t20.ssl_conf(self.tls_port)
        super().setUp()

    def open_sock(self):
        raw = socket.create_connection((nmq.HOST, self.tls_port), timeout=5)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = ssl.create_default_context(cafile=self.t20.pki("ca.crt"))
        ctx.check_hostname = False
        return ctx.wrap_socket(raw)


if __name__ == "__main__":
    unittest.main(verbosity=2)
