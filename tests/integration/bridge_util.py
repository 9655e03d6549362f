"""Helpers for the bridge tests (test_50_bridge*.py): a remote mosquitto, a
fault-injecting TCP proxy, and the checks on what arrived.

FaultProxy sits between our broker's bridge and the remote broker on the
loopback interface and can:
  * cut()       close every connection and close new ones at once (link down),
  * blackhole() keep the connections open but pass no byte either way (a
                stalled link: the bridge must notice it by its keepalive),
  * delay(s)    hold every chunk for s seconds before passing it on,
  * up()        pass bytes again (new connections; black-holed ones stay dead).
With mqtt_up=True it reads what goes to the remote (from our bridge) as
MQTT packets, and drops those whose packet type is in drop_up (counted in
dropped_up). With mqtt_down=True it reads what comes back (from the
remote) as MQTT packets: a packet type in pass_down passes that many more
times, then is dropped (counted in dropped_down).
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
import unittest

import nmq
from nmq import HOST, free_port
import nmq_ops
from nmq_ops import port_accepts, wait_for


def need_mosquitto_remote():
    """The setUpModule of a test of our bridges with Debian's mosquitto as
    the remote: skipped when the suite runs against mosquitto itself or
    when mosquitto is not installed."""
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()
    if shutil.which("mosquitto") is None:
        raise unittest.SkipTest("Debian's mosquitto is needed as the remote broker")


class FaultProxy:
    def __init__(self, target_port, mqtt_up=False, mqtt_down=False):
        self.target = target_port
        self.mqtt_up = mqtt_up
        self.drop_up = set()
        self.dropped_up = 0
        self.mqtt_down = mqtt_down
        self.pass_down = {}
        self.dropped_down = 0
        self.mode = "pass"
        self.delay_s = 0.0
        self.lock = threading.Lock()
        self.pairs = []
        self.accepted = 0
        self.passed_at = None
        self.answered_at = None  # the first bytes from the target (a CONNACK) since reset
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((HOST, 0))
        self.ls.listen(64)
        self.ls.settimeout(0.1)
        self.port = self.ls.getsockname()[1]
        self.stopped = False
        self.t = threading.Thread(target=self._accept_loop, daemon=True)
        self.t.start()

    def _accept_loop(self):
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            mode = self.mode
            if mode == "down":
                c.close()
                continue
            self.passed_at = time.monotonic()  # the last connection let through
            pair = {"c": c, "u": None, "dead": mode == "blackhole", "closed": False}
            if mode != "blackhole":
                try:
                    pair["u"] = socket.create_connection((HOST, self.target), timeout=2)
                except OSError:
                    c.close()
                    continue
            with self.lock:
                self.pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair, "c", "u"), daemon=True).start()
            if pair["u"] is not None:
                threading.Thread(target=self._pump, args=(pair, "u", "c"), daemon=True).start()

    def _close_pair(self, pair):
        if pair["closed"]:
            return
        pair["closed"] = True
        for k in ("c", "u"):
            s = pair[k]
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _pump(self, pair, src, dst):
        s = pair[src]
        while not pair["closed"] and not self.stopped:
            try:
                r, _, _ = select.select([s], [], [], 0.1)
            except (OSError, ValueError):
                break
            if not r:
                continue
            try:
                data = s.recv(65536)
            except OSError:
                break
            if not data:
                break
            if pair["dead"]:
                continue  # black hole: swallow everything
            if src == "u" and self.answered_at is None:
                self.answered_at = time.monotonic()
            if self.mqtt_up and src == "c":
                data = self._filter_up(pair, data)
                if not data:
                    continue
            if self.mqtt_down and src == "u":
                data = self._filter_down(pair, data)
                if not data:
                    continue
            if self.delay_s > 0:
                time.sleep(self.delay_s)
            try:
                pair[dst].sendall(data)
            except OSError:
                break
        if not pair["dead"] or self.stopped:
            self._close_pair(pair)

    def _filter_up(self, pair, data):
        """The whole packets of what was read so far, less those dropped."""
        return self._filter(pair, data, "upbuf", self._drop_up)

    def _drop_up(self, ptype):
        if ptype in self.drop_up:
            self.dropped_up += 1
            return True
        return False

    def _filter_down(self, pair, data):
        return self._filter(pair, data, "downbuf", self._drop_down)

    def _drop_down(self, ptype):
        with self.lock:
            left = self.pass_down.get(ptype)
            if left is None:
                return False
            if left > 0:
                self.pass_down[ptype] = left - 1
                return False
            self.dropped_down += 1
            return True

    def _filter(self, pair, data, key, drop):
        buf = pair.get(key, b"") + data
        out = b""
        while True:
            n, mult, i = 0, 1, 1
            while i < len(buf) and i <= 4:
                n += (buf[i] & 0x7F) * mult
                mult *= 128
                i += 1
                if not buf[i - 1] & 0x80:
                    break
            else:
                break  # the length is not all there yet
            if len(buf) < i + n:
                break
            pkt, buf = buf[:i + n], buf[i + n:]
            if not drop(pkt[0] >> 4):
                out += pkt
        pair[key] = buf
        return out

    def cut(self):
        self.mode = "down"
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for p in pairs:
            self._close_pair(p)

    def blackhole(self):
        self.mode = "blackhole"
        with self.lock:
            for p in self.pairs:
                p["dead"] = True

    def delay(self, seconds):
        self.delay_s = seconds

    def up(self):
        self.mode = "pass"
        self.delay_s = 0.0

    def close(self):
        self.stopped = True
        self.cut()
        self.ls.close()


class MarkerRefusingProxy(FaultProxy):
    """A FaultProxy in front of a broker that answers a CONNECT carrying
    the bridge marker (protocol level | 0x80) with CONNACK 0x01 (level
    unsupported) and closes, as a broker that does not know the marker
    does; plain CONNECTs pass."""

    def __init__(self, target_port):
        super().__init__(target_port, mqtt_up=True)
        self.refused = 0

    def _filter_up(self, pair, data):
        if not pair.get("checked"):
            buf = pair.get("first", b"") + data
            # fixed header (<= 5 bytes), name length, name, level
            i = 1
            while i < len(buf) and buf[i] & 0x80:
                i += 1
            i += 1
            if len(buf) < i + 2 or len(buf) < i + 2 + ((buf[i] << 8) | buf[i + 1]) + 1:
                pair["first"] = buf
                return b""
            pair["checked"] = True
            level = buf[i + 2 + ((buf[i] << 8) | buf[i + 1])]
            if buf[0] >> 4 == 1 and level & 0x80:
                self.refused += 1
                try:
                    pair["c"].sendall(bytes([0x20, 2, 0, 1]))
                except OSError:
                    pass
                self._close_pair(pair)
                return b""
            data = buf
        return FaultProxy._filter_up(self, pair, data)


class Mosquitto:
    """Debian's mosquitto on a loopback port, as the remote broker. Its
    in-flight window toward subscribers is unlimited: with a full window,
    mosquitto 2.0 can pass a newer QoS 1 message ahead of queued ones, which
    the ordering checks would blame on the bridge."""

    def __init__(self, tmp, extra="", port=None):
        self.port = port or free_port()
        self.conf = os.path.join(tmp, "mosquitto-%d.conf" % self.port)
        with open(self.conf, "w") as f:
            f.write("listener %d %s\nallow_anonymous true\npersistence false\n"
                    "max_queued_messages 100000\nmax_inflight_messages 0\n%s\n" % (self.port, HOST, extra))
        self.log = open(os.path.join(tmp, "mosquitto-%d.log" % self.port), "wb")
        self.p = subprocess.Popen(["mosquitto", "-c", self.conf], stdout=self.log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(lambda: port_accepts(self.port, 0.2), 10.0)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def bridge_conf(name, server, proto_ver=4, keepalive=2, forwards="", subs="", extra=""):
    return ("bridges.mqtt.%s {\n  server = \"%s\"\n  proto_ver = %d\n  clientid = \"%s-gw\"\n"
            "  keepalive = %ds\n  backoff_max = 2s\n  forwards = [%s]\n  subscription = [%s]\n"
            "%s\n}\n" % (name, server, proto_ver, name, keepalive, forwards, subs, extra))


def first_order(payloads):
    """The payloads with later repeats removed (QoS 1 may repeat)."""
    seen, out = set(), []
    for p in payloads:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def health(client, name, timeout=5.0, pred=None):
    """The latest $SYS/brokers/bridges/<name> document that satisfies pred
    (client is subscribed to it)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        m = client.wait_message(timeout=max(0.01, deadline - time.monotonic()),
                                match=lambda m: m.topic == "$SYS/brokers/bridges/" + name)
        if m is None:
            break
        last = json.loads(m.payload)
        if pred is None or pred(last):
            return last
    return last


class FakeRemote:
    """A v5 remote broker on a raw socket: accepts the bridge, records the
    CONNECT and the SUBSCRIBEs it sends (parsed), answers CONNACK and
    SUBACK. With close_after_connack it closes each connection right after
    its CONNACK (a remote that takes the link and drops it at once)."""

    def __init__(self, close_after_connack=False):
        self.close_after_connack = close_after_connack
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((nmq.HOST, 0))
        self.srv.listen(4)
        self.port = self.srv.getsockname()[1]
        self.connects, self.subscribes, self.unsubscribes = [], [], []
        self.conns = []
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def close(self):
        for c in [self.srv] + self.conns:
            try:
                c.close()
            except OSError:
                pass

    @staticmethod
    def read_packet(c):
        first = c.recv(1)
        if not first:
            return None, None
        n, mult = 0, 1
        while True:
            b = c.recv(1)[0]
            n += (b & 0x7F) * mult
            mult *= 128
            if not b & 0x80:
                break
        body = b""
        while len(body) < n:
            chunk = c.recv(n - len(body))
            if not chunk:
                return None, None
            body += chunk
        return first[0], body

    def serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            try:
                while True:
                    first, body = self.read_packet(c)
                    if first is None:
                        break
                    t = first >> 4
                    r = nmq._Reader(body)
                    if t == nmq.CONNECT:
                        d = {"proto": r.str(), "level": r.byte()}
                        flags = r.byte()
                        d["keepalive"] = r.u16()
                        d["props"] = r.props()
                        d["client_id"] = r.str()
                        if flags & 0x04:
                            d["will_props"] = r.props()
                            d["will_topic"] = r.str()
                            d["will_payload"] = r.bin()
                        self.connects.append(d)
                        c.sendall(nmq.packet(nmq.CONNACK, 0, b"\x00\x00\x00"))
                        if self.close_after_connack:
                            break
                    elif t == 8:  # SUBSCRIBE
                        pid = r.u16()
                        props = r.props()
                        filters = []
                        while r.left():
                            filters.append((r.str(), r.byte()))
                        self.subscribes.append({"props": props, "filters": filters})
                        c.sendall(nmq.packet(9, 0, nmq.u16(pid) + b"\x00"
                                             + bytes([f[1] & 3 for f in filters])))
                    elif t == 10:  # UNSUBSCRIBE
                        pid = r.u16()
                        props = r.props()
                        filters = []
                        while r.left():
                            filters.append(r.str())
                        self.unsubscribes.append({"props": props, "filters": filters})
                        c.sendall(nmq.packet(11, 0, nmq.u16(pid) + b"\x00"
                                             + b"\x00" * len(filters)))
                    elif t == 12:  # PINGREQ
                        c.sendall(b"\xd0\x00")
            except (OSError, IndexError, nmq.MalformedFromBroker):
                pass
            if self.close_after_connack:
                c.close()


def _read_raw_packet(c):
    first = c.recv(1)
    if not first:
        return None, None
    n, mult = 0, 1
    while True:
        b = c.recv(1)
        if not b:
            return None, None
        n += (b[0] & 0x7F) * mult
        mult *= 128
        if not b[0] & 0x80:
            break
    body = b""
    while len(body) < n:
        chunk = c.recv(n - len(body))
        if not chunk:
            return None, None
        body += chunk
    return first[0], body


class RawRemote:
    """A remote broker on a raw socket (3.1.1 or 5, as the bridge connects)
    that keeps the session across connections (CONNACK session present
    after the first) and records every PUBLISH it gets. It delivers a QoS 2
    message when its PUBLISH comes (the spec's "method A": a PUBLISH whose
    packet id awaits PUBREL is not delivered again) and answers PUBREC and
    PUBCOMP. With receive_max its v5 CONNACK carries that Receive Maximum.
    With hold_puback it keeps its PUBACKs until release(n) sends the n
    oldest (release() all of them, and stops holding)."""

    def __init__(self, receive_max=0, hold_puback=False):
        self.receive_max = receive_max
        self.hold_puback = hold_puback
        self.held = []  # (connection, packet id) of PUBACKs not sent yet
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((HOST, 0))
        self.srv.listen(4)
        self.port = self.srv.getsockname()[1]
        self.lock = threading.Lock()
        self.delivered = []  # payloads, in delivery order
        self.publishes = 0  # every PUBLISH received
        self.dup_flags = []  # (payload, DUP) of every PUBLISH, in order
        self.completed = 0  # PUBRELs answered
        self.awaiting = set()  # packet ids awaiting PUBREL (the session's)
        self.sessions = 0
        self.conns = []
        threading.Thread(target=self.serve, daemon=True).start()

    def close(self):
        for c in [self.srv] + self.conns:
            try:
                c.close()
            except OSError:
                pass

    def release(self, n=None):
        with self.lock:
            if n is None:
                self.hold_puback = False
                n = len(self.held)
            out, self.held = self.held[:n], self.held[n:]
        for c, pid in out:
            try:
                c.sendall(bytes([0x40, 2, pid >> 8, pid & 0xFF]))
            except OSError:
                pass

    def serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.conn, args=(c,), daemon=True).start()

    def conn(self, c):
        v5 = False
        try:
            while True:
                first, body = _read_raw_packet(c)
                if first is None:
                    break
                t = first >> 4
                if t == 1:  # CONNECT
                    nl = (body[0] << 8) | body[1]
                    v5 = body[2 + nl] & 0x7F == 5
                    sp = 1 if self.sessions > 0 else 0
                    self.sessions += 1
                    if not v5:
                        c.sendall(bytes([0x20, 2, sp, 0]))
                    elif self.receive_max:
                        rm = self.receive_max
                        c.sendall(bytes([0x20, 6, sp, 0, 3, 0x21, rm >> 8, rm & 0xFF]))
                    else:
                        c.sendall(bytes([0x20, 3, sp, 0, 0]))
                elif t == 3:  # PUBLISH
                    qos = (first >> 1) & 3
                    tl = (body[0] << 8) | body[1]
                    i = 2 + tl
                    pid = 0
                    if qos > 0:
                        pid = (body[i] << 8) | body[i + 1]
                        i += 2
                    if v5:
                        n, mult = 0, 1
                        while True:
                            b = body[i]
                            i += 1
                            n += (b & 0x7F) * mult
                            mult *= 128
                            if not b & 0x80:
                                break
                        i += n
                    payload = body[i:]
                    hold = False
                    with self.lock:
                        self.publishes += 1
                        self.dup_flags.append((payload, bool(first & 0x08)))
                        if qos < 2 or pid not in self.awaiting:
                            self.delivered.append(payload)
                        if qos == 2:
                            self.awaiting.add(pid)
                        if qos == 1 and self.hold_puback:
                            self.held.append((c, pid))
                            hold = True
                    if qos == 1 and not hold:
                        c.sendall(bytes([0x40, 2, pid >> 8, pid & 0xFF]))
                    elif qos == 2:
                        c.sendall(bytes([0x50, 2, pid >> 8, pid & 0xFF]))
                elif t == 6:  # PUBREL
                    pid = (body[0] << 8) | body[1]
                    with self.lock:
                        self.awaiting.discard(pid)
                        self.completed += 1
                    c.sendall(bytes([0x70, 2, pid >> 8, pid & 0xFF]))
                elif t == 8:  # SUBSCRIBE: granted as asked (v3: QoS 0)
                    c.sendall(bytes([0x90, 3, body[0], body[1], 0]))
                elif t == 12:  # PINGREQ
                    c.sendall(b"\xd0\x00")
                elif t == 14:  # DISCONNECT
                    break
        except (OSError, IndexError):
            pass
        try:
            c.close()
        except OSError:
            pass
