"""Harness for the integration tests: start and stop a broker, MQTT clients.

Every test file imports this module.  It provides

* Broker: the broker under test (our nanomq, or Debian's mosquitto when
  NMQ_TEST_BROKER=mosquitto) on a free loopback port, with its own
  configuration text, stdout/stderr captured to files, and a stop() that
  reports a crash (death by signal, non-zero exit, sanitizer report).
* BrokerTestCase: a unittest.TestCase that starts a fresh broker for every
  test (class attributes CONF / MOSQ_CONF add configuration) and fails the
  test if the broker crashed.
* PahoClient: a paho-mqtt 1.6 client for MQTT 3.1.1 or 5.0 with blocking
  waits (threading.Event based) for CONNACK, SUBACK, publish completion and
  messages.  It never reconnects on its own.
* RawClient: a raw-socket MQTT client with a hand-written encoder/decoder,
  able to send any bytes and to read and parse one packet with a timeout.
* mosquitto_pub() / MosquittoSub: wrappers for the mosquitto-clients tools.

Only the Python standard library and paho-mqtt are used.
"""

import os
import queue
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCodes
from paho.mqtt.subscribeoptions import SubscribeOptions

HOST = "127.0.0.1"
USE_MOSQUITTO = os.environ.get("NMQ_TEST_BROKER", "") == "mosquitto"
KEEP_TMP = os.environ.get("NMQ_KEEP_TMP", "") not in ("", "0")

# Timeouts (seconds) used by the helpers when the test does not give one.
T_CONNACK = 5.0
T_ACK = 5.0
T_MSG = 5.0
T_CLOSE = 5.0
T_QUIET = 0.7  # a window in which nothing may arrive (negative assertions)

SANITIZER_MARKERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "LeakSanitizer",
    "runtime error:",
    "ERROR: ThreadSanitizer",
    "WARNING: ThreadSanitizer",
)


def skip_on_mosquitto(reason):
    """Decorator: skip this test when the suite runs against mosquitto."""
    return unittest.skipIf(USE_MOSQUITTO, "mosquitto differs from our contract: " + reason)


_ports_given = set()
_port_rng = random.Random(os.getpid() ^ time.monotonic_ns())


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """Return a TCP port on the loopback interface that is free right now.

    The port is taken below the kernel's ephemeral range (where bind(0)
    and every outgoing connection take theirs): a port from that range may
    be taken by any client socket of any test running in parallel between
    this probe and the broker's bind, which then fails ("address in use").
    Below it, only another test's probe could pick the same port, one in
    thousands, and never this process twice."""
    lo, _hi = _ephemeral_range()
    if lo > 11000:
        for _ in range(200):
            port = _port_rng.randrange(10000, lo)
            if port in _ports_given:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            finally:
                s.close()
            _ports_given.add(port)
            return port
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _find_nanomq():
    """NANOMQ_BIN, or a build tree next to the source tree (manual runs)."""
    b = os.environ.get("NANOMQ_BIN", "")
    if b:
        return b
    src = os.environ.get("NMQ_SOURCE_DIR") or os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", ".."))
    for cand in sorted(os.listdir(os.path.dirname(src))):
        p = os.path.join(os.path.dirname(src), cand, "src", "nanomq")
        if cand.startswith("build") and os.access(p, os.X_OK):
            return p
    for cand in sorted(os.listdir(src)):
        p = os.path.join(src, cand, "src", "nanomq")
        if cand.startswith("build") and os.access(p, os.X_OK):
            return p
    return ""


# ---------------------------------------------------------------------------
# The broker process
# ---------------------------------------------------------------------------

class BrokerError(Exception):
    pass


class Broker:
    """One broker process on a free loopback port.

    conf: extra HOCON text appended to our nanomq.conf.
    mosq_conf: extra lines appended to mosquitto.conf (NMQ_TEST_BROKER=mosquitto).
    """

    def __init__(self, conf="", mosq_conf="", log_level="info"):
        self.conf = conf
        self.mosq_conf = mosq_conf
        self.log_level = log_level
        self.port = None
        self.proc = None
        self.tmp = tempfile.mkdtemp(prefix="nmq-itest-")
        self.out_path = os.path.join(self.tmp, "stdout.log")
        self.err_path = os.path.join(self.tmp, "stderr.log")
        self.conf_path = None
        self.mosquitto = USE_MOSQUITTO
        self._stopped = False

    # -- configuration -----------------------------------------------------
    def _write_conf(self):
        if self.mosquitto:
            self.conf_path = os.path.join(self.tmp, "mosquitto.conf")
            text = (
                "per_listener_settings false\n"
                "listener %d %s\n"
                "allow_anonymous true\n"
                "persistence false\n"
                "log_dest stderr\n"
                "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
                "connection_messages true\n"
                "%s\n" % (self.port, HOST, self.mosq_conf))
        else:
            self.conf_path = os.path.join(self.tmp, "nanomq.conf")
            text = (
                "listeners.tcp.bind = \"%s:%d\"\n"
                "system.cmd_ipc_url = \"ipc://%s/cmd.ipc\"\n"
                "system.hook_ipc_url = \"ipc://%s/hook.ipc\"\n"
                "log { level = %s, to = [console] }\n"
                "%s\n" % (HOST, self.port, self.tmp, self.tmp, self.log_level, self.conf))
        with open(self.conf_path, "w") as f:
            f.write(text)

    def command(self):
        if self.mosquitto:
            exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
            return [exe, "-c", self.conf_path]
        exe = _find_nanomq()
        if not exe or not os.access(exe, os.X_OK):
            raise BrokerError("NANOMQ_BIN is not set or not executable (%r); set it, "
                              "or NMQ_TEST_BROKER=mosquitto" % exe)
        return [exe, "start", "--conf", self.conf_path]

    # -- start / stop ------------------------------------------------------
    def start(self, timeout=10.0):
        last = None
        for _attempt in range(3):  # a port can be taken between probe and bind
            self.port = free_port()
            self._write_conf()
            env = dict(os.environ)
            env["NANOMQ_PID_FILE"] = os.path.join(self.tmp, "nanomq.pid")
            env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
            self._out = open(self.out_path, "ab")
            self._err = open(self.err_path, "ab")
            self.proc = subprocess.Popen(self.command(), stdout=self._out, stderr=self._err,
                                         stdin=subprocess.DEVNULL, cwd=self.tmp, env=env)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    s = socket.create_connection((HOST, self.port), timeout=0.5)
                    s.close()
                    return self
                except OSError:
                    time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise BrokerError("broker did not accept connections on port %d within %.0f s\n%s"
                                  % (self.port, timeout, self.log_tail()))
            last = "broker exited with %s before accepting connections\n%s" % (
                self.proc.returncode, self.log_tail())
            if "in use" not in self.log_text().lower():
                break
        raise BrokerError(last)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        text = ""
        for p in (self.err_path, self.out_path):
            try:
                with open(p, "rb") as f:
                    text += f.read().decode("utf-8", "replace")
            except OSError:
                pass
        return text

    def disconnections(self, client_id):
        """How many times the log says a connection of client_id ended
        (its session detached). nanomq only."""
        return sum(1 for line in self.log_text().splitlines()
                   if "client_id=%s " % client_id in line and "event=disconnected" in line)

    def wait_disconnected(self, client_id, count=1, timeout=10.0):
        """Wait until client_id's connections ended count times in all (see
        disconnections): its session is then offline. nanomq only."""
        deadline = time.monotonic() + timeout
        while self.disconnections(client_id) < count:
            if time.monotonic() >= deadline:
                raise AssertionError("%s's disconnection was not logged within %.0f s"
                                     % (client_id, timeout))
            time.sleep(0.02)

    def log_tail(self, lines=60):
        out = []
        for name, p in (("stderr", self.err_path), ("stdout", self.out_path)):
            try:
                with open(p, "rb") as f:
                    data = f.read().decode("utf-8", "replace").splitlines()
            except OSError:
                continue
            if data:
                out.append("---- broker %s (last %d lines of %s) ----" % (name, lines, p))
                out.extend(data[-lines:])
        return "\n".join(out)

    def stop(self, timeout=20.0):
        """Stop with SIGTERM.  Returns a list of problems (empty if clean)."""
        if self._stopped or self.proc is None:
            return []
        self._stopped = True
        problems = []
        if self.proc.poll() is not None:
            problems.append("broker died during the test (exit status %s)" % self.proc.returncode)
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                problems.append("broker did not exit within %.0f s of SIGTERM" % timeout)
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        if rc is not None and rc < 0 and not problems:
            problems.append("broker was killed by signal %d" % -rc)
        elif rc not in (0, None) and not problems:
            problems.append("broker exited with status %d after SIGTERM" % rc)
        self._out.close()
        self._err.close()
        text = self.log_text()
        for m in SANITIZER_MARKERS:
            if m in text:
                problems.append("sanitizer report in broker output (%r)" % m)
                break
        if problems:
            problems.append(self.log_tail(120))
        elif not KEEP_TMP:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems


class BrokerTestCase(unittest.TestCase):
    """A TestCase with a fresh broker per test (self.broker, self.port)."""

    CONF = ""        # extra HOCON for our broker
    MOSQ_CONF = ""   # the equivalent mosquitto.conf lines

    def setUp(self):
        self.broker = Broker(self.CONF, self.MOSQ_CONF)
        self.broker.start()
        self.port = self.broker.port
        self.addCleanup(self._stop_broker)
        self._clients = []

    def _stop_broker(self):
        for c in reversed(self._clients):
            try:
                c.close()
            except Exception:
                pass
        problems = self.broker.stop()
        if problems:
            raise AssertionError("broker problem: " + "\n".join(problems))

    def _track(self, c):
        self._clients.append(c)
        return c

    # -- client factories --------------------------------------------------
    def paho(self, client_id="", version=4, connect=True, **kw):
        """A PahoClient (connected unless connect=False)."""
        c = self._track(PahoClient(self.port, client_id, version=version, **kw))
        if connect:
            c.connect()
        return c

    def raw(self, version=4, client_id=None, connect=True, **kw):
        """A RawClient; if client_id is given and connect is true, CONNECT it and
        assert CONNACK success."""
        c = self._track(RawClient(self.port, version=version))
        if client_id is not None and connect:
            ack = c.connect(client_id, **kw)
            self.assertEqual(ack.rc, 0, "CONNACK refused: %r" % ack)
        return c

    # -- assertions ----------------------------------------------------------
    def assert_closed(self, raw, timeout=T_CLOSE, v5_codes=None, allow_connack=False, msg="",
                      mosq_plain_close=False):
        """The broker must close raw's connection within timeout.

        v3.1.1: nothing but (if allow_connack) a CONNACK may arrive first.
        v5: if v5_codes is given, a DISCONNECT whose reason code is in
        v5_codes must arrive before the close.  Returns the packets seen.
        mosq_plain_close: mosquitto 2.0.11 is known to close without the
        DISCONNECT here (the spec says SHOULD send it, our contract says it
        is sent); when running against mosquitto a plain close is accepted.
        """
        pkts = raw.expect_closed(timeout, msg=msg)
        others = [p for p in pkts if p.type not in (DISCONNECT,) and not
                  (allow_connack and p.type == CONNACK)]
        self.assertEqual(others, [], "%s: unexpected packets before close: %r" % (msg, others))
        if raw.version == 5 and v5_codes is not None:
            discs = [p for p in pkts if p.type == DISCONNECT]
            if not discs and mosq_plain_close and USE_MOSQUITTO:
                return pkts
            self.assertTrue(discs, "%s: v5 connection closed without a DISCONNECT (expected reason "
                            "code in %s)" % (msg, [hex(c) for c in v5_codes]))
            self.assertIn(discs[0].rc, v5_codes, "%s: DISCONNECT reason 0x%02x, expected one of %s"
                          % (msg, discs[0].rc, [hex(c) for c in v5_codes]))
        elif raw.version == 4:
            discs = [p for p in pkts if p.type == DISCONNECT]
            self.assertEqual(discs, [], "%s: a server must not send DISCONNECT to a v3.1.1 client" % msg)
        return pkts

    def assert_sequence(self, got, want, what=""):
        """got must equal want; on failure say what is missing, duplicated or
        out of order (short, unlike assertEqual's list diff)."""
        if list(got) == list(want):
            return
        missing = [w for w in want if w not in got]
        extra = [g for g in got if g not in want]
        dups = sorted({g for g in got if list(got).count(g) > 1})
        first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        self.fail("%s: %d received, %d expected; missing %r; unexpected %r; duplicated %r; first "
                  "difference at index %d: got %r, expected %r" % (
                      what or "sequence", len(got), len(want), missing[:10], extra[:10], dups[:10],
                      first, list(got)[max(0, first - 2):first + 3], list(want)[max(0, first - 2):first + 3]))

    def assert_broker_healthy(self, bystander=None, topic="health/check"):
        """The broker still accepts a new connection, and (if given) the
        already-connected bystander (a PahoClient subscribed to health/#)
        still receives a message."""
        self.assertTrue(self.broker.alive(), "broker died\n" + self.broker.log_tail())
        p = PahoClient(self.port, "health-pub-%d" % time.monotonic_ns(), version=4)
        try:
            p.connect()
            payload = b"alive-%d" % time.monotonic_ns()
            p.publish(topic, payload, qos=1)
            if bystander is not None:
                m = bystander.wait_message(timeout=T_MSG, match=lambda m: m.payload == payload)
                self.assertIsNotNone(m, "bystander client stopped receiving messages")
            p.disconnect()
        finally:
            p.close()

    def bystander(self, version=4):
        """A connected paho client subscribed to health/# at QoS 1."""
        b = self.paho("bystander-%d" % time.monotonic_ns(), version=version)
        b.subscribe("health/#", 1)
        return b


# ---------------------------------------------------------------------------
# Raw MQTT encoding and decoding
# ---------------------------------------------------------------------------

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = \
    8, 9, 10, 11, 12, 13, 14, 15
PACKET_NAMES = {0: "RESERVED", 1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK",
                5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP", 8: "SUBSCRIBE", 9: "SUBACK",
                10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
                14: "DISCONNECT", 15: "AUTH"}

# property name -> (identifier, type)
PROPS = {
    "PayloadFormatIndicator": (0x01, "byte"),
    "MessageExpiryInterval": (0x02, "u32"),
    "ContentType": (0x03, "str"),
    "ResponseTopic": (0x08, "str"),
    "CorrelationData": (0x09, "bin"),
    "SubscriptionIdentifier": (0x0B, "vbi"),
    "SessionExpiryInterval": (0x11, "u32"),
    "AssignedClientIdentifier": (0x12, "str"),
    "ServerKeepAlive": (0x13, "u16"),
    "AuthenticationMethod": (0x15, "str"),
    "AuthenticationData": (0x16, "bin"),
    "RequestProblemInformation": (0x17, "byte"),
    "WillDelayInterval": (0x18, "u32"),
    "RequestResponseInformation": (0x19, "byte"),
    "ResponseInformation": (0x1A, "str"),
    "ServerReference": (0x1C, "str"),
    "ReasonString": (0x1F, "str"),
    "ReceiveMaximum": (0x21, "u16"),
    "TopicAliasMaximum": (0x22, "u16"),
    "TopicAlias": (0x23, "u16"),
    "MaximumQoS": (0x24, "byte"),
    "RetainAvailable": (0x25, "byte"),
    "UserProperty": (0x26, "pair"),
    "MaximumPacketSize": (0x27, "u32"),
    "WildcardSubscriptionAvailable": (0x28, "byte"),
    "SubscriptionIdentifierAvailable": (0x29, "byte"),
    "SharedSubscriptionAvailable": (0x2A, "byte"),
}
PROP_BY_ID = {v[0]: (k, v[1]) for k, v in PROPS.items()}
MULTI_PROPS = ("UserProperty", "SubscriptionIdentifier")


class MalformedFromBroker(Exception):
    """The broker sent bytes that this decoder cannot parse."""


def vbi(n):
    """Encode a Variable Byte Integer."""
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        if n:
            b |= 0x80
        out.append(b)
        if not n:
            return bytes(out)


def u16(n):
    return struct.pack("!H", n)


def u32(n):
    return struct.pack("!I", n)


def mstr(s):
    """A length-prefixed UTF-8 string (str) or binary (bytes) field."""
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return u16(len(b)) + b


def props_bytes(props):
    """Encode a property list.  props: None, dict, or list of (name, value)
    pairs (the list form keeps order and allows repeats).  UserProperty may be
    a list of (key, value) pairs."""
    if props is None:
        return b"\x00"
    items = props.items() if isinstance(props, dict) else props
    body = bytearray()
    for name, value in items:
        pid, typ = PROPS[name]
        values = value if (name in MULTI_PROPS and isinstance(value, list)) else [value]
        for v in values:
            body += vbi(pid)
            if typ == "byte":
                body += bytes([v])
            elif typ == "u16":
                body += u16(v)
            elif typ == "u32":
                body += u32(v)
            elif typ == "vbi":
                body += vbi(v)
            elif typ in ("str", "bin"):
                body += mstr(v)
            elif typ == "pair":
                body += mstr(v[0]) + mstr(v[1])
    return vbi(len(body)) + bytes(body)


def packet(ptype, flags, body):
    """A whole packet: fixed header (type, flags, remaining length) + body."""
    return bytes([(ptype << 4) | (flags & 0x0F)]) + vbi(len(body)) + bytes(body)


def connect_bytes(client_id="", version=4, clean=True, keepalive=60, will=None,
                  username=None, password=None, props=None, proto_name="MQTT",
                  proto_level=None, flags=None):
    """Encode CONNECT.  will: dict(topic, payload, qos=0, retain=False,
    props=None).  flags overrides the computed Connect Flags byte."""
    level = proto_level if proto_level is not None else (5 if version == 5 else 4)
    f = 0
    if clean:
        f |= 0x02
    if will is not None:
        f |= 0x04 | ((will.get("qos", 0) & 3) << 3) | (0x20 if will.get("retain") else 0)
    if username is not None:
        f |= 0x80
    if password is not None:
        f |= 0x40
    if flags is not None:
        f = flags
    vh = mstr(proto_name) + bytes([level, f]) + u16(keepalive)
    if version == 5:
        vh += props_bytes(props)
    pl = mstr(client_id)
    if will is not None:
        if version == 5:
            pl += props_bytes(will.get("props"))
        pl += mstr(will["topic"]) + mstr(will.get("payload", b""))
    if username is not None:
        pl += mstr(username)
    if password is not None:
        pl += mstr(password)
    return packet(CONNECT, 0, vh + pl)


def publish_bytes(topic, payload=b"", qos=0, retain=False, dup=False, pid=None,
                  props=None, version=4, flags=None):
    if isinstance(payload, str):
        payload = payload.encode()
    f = (0x08 if dup else 0) | ((qos & 3) << 1) | (1 if retain else 0)
    if flags is not None:
        f = flags
    body = mstr(topic)
    if qos > 0 or (flags is not None and (flags >> 1) & 3):
        body += u16(pid if pid is not None else 1)
    if version == 5:
        body += props_bytes(props)
    return packet(PUBLISH, f, body + payload)


def ack_bytes(ptype, pid, rc=None, props=None, version=4):
    """PUBACK / PUBREC / PUBREL / PUBCOMP."""
    flags = 0x02 if ptype == PUBREL else 0
    body = u16(pid)
    if version == 5 and (rc not in (None, 0) or props):
        body += bytes([rc or 0])
        if props:
            body += props_bytes(props)
    return packet(ptype, flags, body)


def subscribe_bytes(filters, pid=1, props=None, version=4):
    """filters: list of (filter, options_byte) or (filter, qos)."""
    body = u16(pid)
    if version == 5:
        body += props_bytes(props)
    for flt, opts in filters:
        body += mstr(flt) + bytes([opts])
    return packet(SUBSCRIBE, 0x02, body)


def unsubscribe_bytes(filters, pid=1, props=None, version=4):
    body = u16(pid)
    if version == 5:
        body += props_bytes(props)
    for flt in filters:
        body += mstr(flt)
    return packet(UNSUBSCRIBE, 0x02, body)


def disconnect_bytes(rc=0, props=None, version=4):
    if version == 5 and (rc or props):
        return packet(DISCONNECT, 0, bytes([rc]) + (props_bytes(props) if props else b""))
    return packet(DISCONNECT, 0, b"")


def sub_opts(qos=0, no_local=False, rap=False, rh=0):
    """v5 Subscription Options byte."""
    return (qos & 3) | (0x04 if no_local else 0) | (0x08 if rap else 0) | ((rh & 3) << 4)


class _Reader:
    def __init__(self, data):
        self.d = bytes(data)
        self.i = 0

    def left(self):
        return len(self.d) - self.i

    def take(self, n):
        if self.i + n > len(self.d):
            raise MalformedFromBroker("truncated field")
        b = self.d[self.i:self.i + n]
        self.i += n
        return b

    def byte(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack("!H", self.take(2))[0]

    def u32(self):
        return struct.unpack("!I", self.take(4))[0]

    def vbi(self):
        mult, val = 1, 0
        for _ in range(4):
            b = self.byte()
            val += (b & 0x7F) * mult
            if not b & 0x80:
                return val
            mult *= 128
        raise MalformedFromBroker("VBI longer than 4 bytes")

    def bin(self):
        return self.take(self.u16())

    def str(self):
        try:
            return self.bin().decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedFromBroker("invalid UTF-8 from broker: %s" % e)

    def props(self):
        n = self.vbi()
        end = self.i + n
        if end > len(self.d):
            raise MalformedFromBroker("property length beyond packet")
        out = {}
        order = []
        while self.i < end:
            pid = self.vbi()
            if pid not in PROP_BY_ID:
                raise MalformedFromBroker("unknown property id 0x%02x from broker" % pid)
            name, typ = PROP_BY_ID[pid]
            v = {"byte": self.byte, "u16": self.u16, "u32": self.u32, "vbi": self.vbi,
                 "str": self.str, "bin": self.bin,
                 "pair": lambda: (self.str(), self.str())}[typ]()
            order.append((name, v))
            if name in MULTI_PROPS:
                out.setdefault(name, []).append(v)
            else:
                if name in out:
                    raise MalformedFromBroker("property %s repeated by broker" % name)
                out[name] = v
        if self.i != end:
            raise MalformedFromBroker("property overran its length")
        return out


class Packet:
    """A parsed packet received from the broker.

    Attributes by type: CONNACK session_present, rc, props; PUBLISH dup, qos,
    retain, topic, pid, props, payload; PUBACK..PUBCOMP pid, rc, props;
    SUBACK/UNSUBACK pid, props, codes; DISCONNECT rc, props."""

    def __init__(self, first, body, version):
        self.type = first >> 4
        self.flags = first & 0x0F
        self.body = bytes(body)
        self.version = version
        self.props = {}
        self.rc = None
        self.pid = None
        r = _Reader(body)
        t = self.type
        if t == CONNACK:
            ackf = r.byte()
            self.session_present = bool(ackf & 1)
            self.ack_flags = ackf
            self.rc = r.byte()
            if version == 5 and r.left():
                self.props = r.props()
        elif t == PUBLISH:
            self.dup = bool(self.flags & 0x08)
            self.qos = (self.flags >> 1) & 3
            self.retain = bool(self.flags & 1)
            self.topic = r.str()
            if self.qos:
                self.pid = r.u16()
            if version == 5:
                self.props = r.props()
            self.payload = r.take(r.left())
        elif t in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            self.pid = r.u16()
            self.rc = 0
            if version == 5 and r.left():
                self.rc = r.byte()
                if r.left():
                    self.props = r.props()
        elif t in (SUBACK, UNSUBACK):
            self.pid = r.u16()
            if version == 5:
                self.props = r.props()
            self.codes = list(r.take(r.left()))
        elif t == DISCONNECT:
            self.rc = 0
            if r.left():
                self.rc = r.byte()
                if r.left():
                    self.props = r.props()
        elif t == AUTH:
            self.rc = 0
            if r.left():
                self.rc = r.byte()
                if r.left():
                    self.props = r.props()

    def __repr__(self):
        name = PACKET_NAMES.get(self.type, str(self.type))
        extra = []
        if self.type == PUBLISH:
            extra.append("topic=%r qos=%d dup=%d retain=%d pid=%s payload=%r" % (
                self.topic, self.qos, self.dup, self.retain, self.pid, self.payload[:40]))
        if self.pid is not None and self.type != PUBLISH:
            extra.append("pid=%d" % self.pid)
        if self.rc is not None:
            extra.append("rc=0x%02x" % self.rc)
        if self.type in (SUBACK, UNSUBACK):
            extra.append("codes=%s" % [hex(c) for c in self.codes])
        if self.props:
            extra.append("props=%r" % self.props)
        return "<%s %s>" % (name, " ".join(extra))


class ConnectionClosed(Exception):
    pass


class RecvTimeout(AssertionError):
    pass


class RawClient:
    """A raw-socket MQTT client.  version: 4 (3.1.1) or 5."""

    def __init__(self, port, version=4, host=HOST):
        self.version = version
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.backlog = []
        self.closed = False
        self.aliases = {}  # broker -> client topic aliases

    # -- sending ------------------------------------------------------------
    def send(self, data):
        self.sock.sendall(bytes(data))

    def send_connect(self, client_id="", **kw):
        kw.setdefault("version", self.version)
        self.send(connect_bytes(client_id, **kw))

    def connect(self, client_id="", timeout=T_CONNACK, **kw):
        """Send CONNECT and return the CONNACK packet."""
        self.send_connect(client_id, **kw)
        return self.expect(CONNACK, timeout)

    def publish(self, topic, payload=b"", qos=0, retain=False, dup=False, pid=None,
                props=None, complete=True, timeout=T_ACK):
        """Send PUBLISH.  With complete=True, finish the QoS 1/2 flow and
        return the PUBACK (QoS 1) or PUBCOMP (QoS 2)."""
        if qos and pid is None:
            pid = self.next_pid()
        self.send(publish_bytes(topic, payload, qos, retain, dup, pid, props, self.version))
        if not complete or qos == 0:
            return None
        if qos == 1:
            return self.expect(PUBACK, timeout, pid=pid)
        rec = self.expect(PUBREC, timeout, pid=pid)
        if rec.rc >= 0x80:
            return rec
        self.send(ack_bytes(PUBREL, pid, version=self.version))
        return self.expect(PUBCOMP, timeout, pid=pid)

    _pid = 0

    def next_pid(self):
        self._pid = self._pid % 65535 + 1
        return self._pid

    def subscribe(self, filters, pid=None, props=None, timeout=T_ACK):
        """filters: a filter string, or list of (filter, options) pairs; returns SUBACK."""
        if isinstance(filters, str):
            filters = [(filters, 0)]
        pid = pid or self.next_pid()
        self.send(subscribe_bytes(filters, pid, props, self.version))
        return self.expect(SUBACK, timeout, pid=pid)

    def unsubscribe(self, filters, pid=None, props=None, timeout=T_ACK):
        if isinstance(filters, str):
            filters = [filters]
        pid = pid or self.next_pid()
        self.send(unsubscribe_bytes(filters, pid, props, self.version))
        return self.expect(UNSUBACK, timeout, pid=pid)

    def ack(self, pub):
        """Acknowledge a received PUBLISH (PUBACK, or PUBREC for QoS 2)."""
        if pub.qos == 1:
            self.send(ack_bytes(PUBACK, pub.pid, version=self.version))
        elif pub.qos == 2:
            self.send(ack_bytes(PUBREC, pub.pid, version=self.version))

    def ack_full(self, pub, timeout=T_ACK):
        """Acknowledge completely (QoS 2: PUBREC, wait PUBREL, PUBCOMP)."""
        self.ack(pub)
        if pub.qos == 2:
            rel = self.expect(PUBREL, timeout, pid=pub.pid)
            self.send(ack_bytes(PUBCOMP, rel.pid, version=self.version))

    def pingreq(self):
        self.send(packet(PINGREQ, 0, b""))

    def disconnect(self, rc=0, props=None):
        self.send(disconnect_bytes(rc, props, self.version))

    # -- receiving ------------------------------------------------------------
    def _recv_some(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RecvTimeout("timed out")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise RecvTimeout("timed out")
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
            data = b""
        if not data:
            self.closed = True
            raise ConnectionClosed("connection closed by broker")
        self.buf += data

    def _read_packet(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 2:
                mult, length, i = 1, 0, 1
                complete = False
                while i < len(self.buf) and i <= 4:
                    b = self.buf[i]
                    length += (b & 0x7F) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        complete = True
                        break
                if not complete and i > 4:
                    raise MalformedFromBroker("broker sent a VBI longer than 4 bytes")
                if complete and len(self.buf) >= i + length:
                    first = self.buf[0]
                    body = bytes(self.buf[i:i + length])
                    del self.buf[:i + length]
                    p = Packet(first, body, self.version)
                    self._resolve_alias(p)
                    return p
            self._recv_some(deadline)

    def _resolve_alias(self, p):
        if p.type == PUBLISH and "TopicAlias" in p.props:
            a = p.props["TopicAlias"]
            p.alias = a
            if p.topic:
                self.aliases[a] = p.topic
            elif a in self.aliases:
                p.topic = self.aliases[a]

    def read(self, timeout=T_MSG):
        """Return the next packet (the backlog first).  Raises RecvTimeout or
        ConnectionClosed."""
        if self.backlog:
            return self.backlog.pop(0)
        return self._read_packet(timeout)

    def expect(self, ptype, timeout=T_ACK, **match):
        """Return the first packet of type ptype (whose attributes equal the
        keyword arguments), keeping other packets in the backlog."""
        for i, p in enumerate(self.backlog):
            if p.type == ptype and all(getattr(p, k, None) == v for k, v in match.items()):
                return self.backlog.pop(i)
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            left = deadline - time.monotonic()
            try:
                p = self._read_packet(max(left, 0.001))
            except RecvTimeout:
                raise RecvTimeout("no %s%s within %.1f s (other packets seen: %r)" % (
                    PACKET_NAMES[ptype], (" " + repr(match)) if match else "", timeout, seen))
            except ConnectionClosed:
                raise ConnectionClosed("connection closed while waiting for %s (packets seen: %r)"
                                       % (PACKET_NAMES[ptype], seen))
            if p.type == ptype and all(getattr(p, k, None) == v for k, v in match.items()):
                return p
            seen.append(p)
            self.backlog.append(p)

    def expect_publishes(self, n, timeout=T_MSG, ack=False):
        """Return n PUBLISH packets (acknowledging each if ack=True)."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            try:
                p = self.expect(PUBLISH, max(left, 0.001))
            except RecvTimeout:
                raise RecvTimeout("got %d of %d PUBLISH within %.1f s: %r" % (len(out), n, timeout, out))
            out.append(p)
            if ack:
                self.ack_full(p) if p.qos == 2 else self.ack(p)
        return out

    def expect_nothing(self, timeout=T_QUIET, types=None):
        """Assert that no packet (of the given types) arrives within timeout.
        A close is reported as an error too."""
        for p in self.backlog:
            if types is None or p.type in types:
                raise AssertionError("unexpected packet %r" % p)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                p = self._read_packet(left)
            except RecvTimeout:
                return
            if types is None or p.type in types:
                raise AssertionError("unexpected packet %r" % p)
            self.backlog.append(p)

    def expect_closed(self, timeout=T_CLOSE, msg=""):
        """Wait until the broker closes the connection; return the packets
        received before the close (the backlog included)."""
        pkts = list(self.backlog)
        self.backlog = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                pkts.append(self._read_packet(max(left, 0.001)))
            except ConnectionClosed:
                return pkts
            except RecvTimeout:
                raise AssertionError("%s: the broker did not close the connection within %.1f s "
                                     "(packets received: %r)" % (msg or "expect_closed", timeout, pkts))
            except MalformedFromBroker:
                raise

    def is_open(self, timeout=0.2):
        """True if the connection is still open (nothing closes it within timeout)."""
        try:
            self.expect_nothing(timeout, types=())
            return True
        except ConnectionClosed:
            return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def abort(self):
        """Close abruptly with a TCP RST (an abnormal network close)."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()


# ---------------------------------------------------------------------------
# paho-mqtt client
# ---------------------------------------------------------------------------

class Msg:
    """A received message (copied out of paho's MQTTMessage)."""

    def __init__(self, m):
        self.topic = m.topic
        self.payload = bytes(m.payload)
        self.qos = m.qos
        self.retain = bool(m.retain)
        self.dup = bool(m.dup)
        self.mid = m.mid
        self.props = props_to_dict(getattr(m, "properties", None))
        self.t = time.monotonic()

    def __repr__(self):
        return "<Msg %s qos=%d retain=%d dup=%d %r %s>" % (
            self.topic, self.qos, self.retain, self.dup, self.payload[:40], self.props or "")


def props_to_dict(p):
    if p is None:
        return {}
    out = {}
    for name in p.names.keys():
        attr = name.replace(" ", "")
        if hasattr(p, attr):
            out[attr] = getattr(p, attr)
    return out


def make_props(ptype, **kw):
    """paho Properties for packet type ptype (PacketTypes.X) from keyword
    arguments named as in PROPS (UserProperty: list of pairs)."""
    p = Properties(ptype)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


class PahoClient:
    """paho-mqtt client driven by our own loop thread (no auto-reconnect).

    version 4 = MQTT 3.1.1, 5 = MQTT 5.0.  will = dict(topic, payload, qos,
    retain, props).  conn_props: dict of CONNECT properties (v5)."""

    def __init__(self, port, client_id="", version=4, clean=True, keepalive=60,
                 will=None, conn_props=None, username=None, password=None):
        self.port = port
        self.version = version
        self.clean = clean
        self.keepalive = keepalive
        self.conn_props = conn_props
        if version == 5:
            self.c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5)
        else:
            self.c = mqtt.Client(client_id=client_id, clean_session=clean, protocol=mqtt.MQTTv311)
        if username is not None:
            self.c.username_pw_set(username, password)
        if will is not None:
            wp = None
            if will.get("props"):
                wp = make_props(PacketTypes.WILLMESSAGE, **will["props"])
            self.c.will_set(will["topic"], will.get("payload", b""), will.get("qos", 0),
                            will.get("retain", False), properties=wp)
        self.messages = queue.Queue()
        self.received = []
        self.connack = threading.Event()
        self.connack_rc = None
        self.connack_flags = None
        self.connack_props = {}
        self.disconnected = threading.Event()
        self.disconnect_rc = None
        self.disconnect_props = {}
        self._acks = {}
        self._suback = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        c = self.c
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe
        c.on_unsubscribe = self._on_unsubscribe
        c.on_publish = self._on_publish

    # -- paho callbacks ---------------------------------------------------------
    def _on_connect(self, client, userdata, flags, rc, properties=None):
        self.connack_flags = flags
        self.connack_rc = rc.value if hasattr(rc, "value") else rc
        self.connack_props = props_to_dict(properties)
        self.connack.set()

    def _on_disconnect(self, client, userdata, rc, properties=None):
        self.disconnect_rc = rc.value if hasattr(rc, "value") else rc
        self.disconnect_props = props_to_dict(properties)
        self.disconnected.set()

    def _on_message(self, client, userdata, m):
        msg = Msg(m)
        with self._lock:
            self.received.append(msg)
        self.messages.put(msg)

    def _ev(self, table, mid):
        with self._lock:
            if mid not in table:
                table[mid] = [threading.Event(), None]
            return table[mid]

    def _on_subscribe(self, client, userdata, mid, granted, properties=None):
        e = self._ev(self._suback, mid)
        e[1] = [g.value if hasattr(g, "value") else g for g in granted]
        e[0].set()

    def _on_unsubscribe(self, client, userdata, mid, properties=None, reasoncodes=None):
        e = self._ev(self._suback, mid)
        e[1] = reasoncodes
        e[0].set()

    def _on_publish(self, client, userdata, mid):
        e = self._ev(self._acks, mid)
        e[0].set()

    # -- operations -----------------------------------------------------------
    def _loop(self):
        while not self._stop.is_set():
            rc = self.c.loop(timeout=0.05)
            if rc not in (mqtt.MQTT_ERR_SUCCESS,):
                break
        self.disconnected.set()

    def connect(self, timeout=T_CONNACK, expect_rc=0):
        """Connect and wait for CONNACK; returns the reason/return code."""
        kw = {}
        if self.version == 5:
            kw["clean_start"] = self.clean
            if self.conn_props:
                kw["properties"] = make_props(PacketTypes.CONNECT, **self.conn_props)
        self.c.connect(HOST, self.port, keepalive=self.keepalive, **kw)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        # Tell paho that a network thread exists: otherwise publish() from
        # the test thread writes to the socket itself, concurrently with
        # loop() in ours, and paho 1.6 can then put packets on the wire out
        # of order. (loop_start() would do this too, but it reconnects.)
        self.c._thread = self._thread
        self._thread.start()
        if not self.connack.wait(timeout):
            raise AssertionError("no CONNACK within %.1f s" % timeout)
        if expect_rc is not None and self.connack_rc != expect_rc:
            raise AssertionError("CONNACK code %s, expected %s" % (self.connack_rc, expect_rc))
        return self.connack_rc

    @property
    def session_present(self):
        return bool(self.connack_flags and self.connack_flags.get("session present"))

    def subscribe(self, topic, qos=0, no_local=False, rap=False, rh=0, sub_id=None,
                  user_props=None, timeout=T_ACK):
        """Subscribe to one filter (or a list of (filter, qos)); return the list
        of granted QoS / reason codes from the SUBACK."""
        props = None
        if self.version == 5 and (sub_id is not None or user_props):
            props = Properties(PacketTypes.SUBSCRIBE)
            if sub_id is not None:
                props.SubscriptionIdentifier = sub_id
            if user_props:
                props.UserProperty = user_props
        if isinstance(topic, list):
            if self.version == 5:
                topic = [(t, SubscribeOptions(q)) for t, q in topic]
            rc, mid = self.c.subscribe(topic, properties=props)
        elif self.version == 5:
            opts = SubscribeOptions(qos=qos, noLocal=no_local, retainAsPublished=rap,
                                    retainHandling=rh)
            rc, mid = self.c.subscribe(topic, options=opts, properties=props)
        else:
            rc, mid = self.c.subscribe(topic, qos)
        if rc != mqtt.MQTT_ERR_SUCCESS:
            raise AssertionError("subscribe failed locally: %s" % rc)
        e = self._ev(self._suback, mid)
        if not e[0].wait(timeout):
            raise AssertionError("no SUBACK within %.1f s" % timeout)
        return e[1]

    def unsubscribe(self, topic, timeout=T_ACK):
        rc, mid = self.c.unsubscribe(topic)
        e = self._ev(self._suback, mid)
        if not e[0].wait(timeout):
            raise AssertionError("no UNSUBACK within %.1f s" % timeout)
        return e[1]

    def publish(self, topic, payload=b"", qos=0, retain=False, props=None, wait=True,
                timeout=T_ACK):
        """Publish; for QoS>0 with wait=True block until PUBACK/PUBCOMP.
        props: dict of PUBLISH properties (v5)."""
        p = make_props(PacketTypes.PUBLISH, **props) if props else None
        info = self.c.publish(topic, payload, qos, retain, properties=p)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise AssertionError("publish failed locally: %s" % info.rc)
        if wait:
            if qos == 0:
                # QoS 0 completes when paho has written the packet.
                e = self._ev(self._acks, info.mid)
                e[0].wait(timeout)
            else:
                e = self._ev(self._acks, info.mid)
                if not e[0].wait(timeout):
                    raise AssertionError("QoS %d publish to %s not acknowledged within %.1f s"
                                         % (qos, topic, timeout))
        return info

    def wait_message(self, timeout=T_MSG, match=None):
        """Return the next received message (matching match(msg) if given),
        or None on timeout.  Messages that do not match are dropped from the
        queue (they stay in self.received)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                m = self.messages.get(timeout=left)
            except queue.Empty:
                return None
            if match is None or match(m):
                return m

    def wait_messages(self, n, timeout=T_MSG):
        """Return exactly n messages, or raise AssertionError listing what came."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            try:
                out.append(self.messages.get(timeout=max(left, 0.001)))
            except queue.Empty:
                raise AssertionError("received %d of %d messages within %.1f s: %r"
                                     % (len(out), n, timeout, out))
        return out

    def expect_no_message(self, timeout=T_QUIET):
        try:
            m = self.messages.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError("unexpected message %r" % m)

    def wait_disconnected(self, timeout=T_CLOSE):
        return self.disconnected.wait(timeout)

    def disconnect(self, rc=None, props=None, timeout=T_CLOSE):
        """Send DISCONNECT (v5: with reason code rc and properties dict) and
        wait until the loop has stopped."""
        kw = {}
        if self.version == 5:
            if rc is not None:
                kw["reasoncode"] = ReasonCodes(PacketTypes.DISCONNECT, identifier=rc)
            if props:
                kw["properties"] = make_props(PacketTypes.DISCONNECT, **props)
        self.c.disconnect(**kw)
        self.disconnected.wait(timeout)
        self._join()

    def kill(self):
        """Drop the connection without DISCONNECT (TCP RST)."""
        self._stop.set()
        self._join()
        s = self.c.socket()
        if s is not None:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def _join(self):
        if self._thread is not None and self._thread is not threading.current_thread():
            self._stop.set()
            self._thread.join(5)

    def close(self):
        if self._thread is not None and self._thread.is_alive():
            try:
                self.c.disconnect()
            except Exception:
                pass
            self.disconnected.wait(1)
        self._stop.set()
        self._join()
        s = self.c.socket()
        if s is not None:
            try:
                s.close()
            except OSError:
                pass


# ---------------------------------------------------------------------------
# mosquitto_pub / mosquitto_sub
# ---------------------------------------------------------------------------

def _vflag(version):
    return ["-V", "mqttv5" if version == 5 else "mqttv311"]


def mosquitto_pub(port, topic, message=None, version=4, qos=0, retain=False, extra=(),
                  timeout=15, input_bytes=None, client_id=None):
    """Run mosquitto_pub; return the CompletedProcess (check .returncode)."""
    cmd = ["mosquitto_pub", "-h", HOST, "-p", str(port), "-t", topic, "-q", str(qos)] + _vflag(version)
    if client_id:
        cmd += ["-i", client_id]
    if retain:
        cmd.append("-r")
    if message is not None:
        cmd += ["-m", message]
    cmd += list(extra)
    return subprocess.run(cmd, input=input_bytes, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout)


class MosquittoSub:
    """mosquitto_sub in the background.  Each message is printed as one line
    MARK + format; debug (-d) lines are used to know when SUBACK arrived.
    stdout is line buffered (stdbuf) so that lines arrive as they happen."""

    MARK = "<<<"

    def __init__(self, port, topics, version=4, qos=0, count=None, fmt="%t|%q|%r|%p",
                 extra=(), client_id=None, clean=True, timeout=30):
        if isinstance(topics, str):
            topics = [topics]
        cmd = ["stdbuf", "-oL", "mosquitto_sub", "-h", HOST, "-p", str(port), "-q", str(qos), "-d",
               "-F", self.MARK + fmt, "-W", str(int(timeout))] + _vflag(version)
        for t in topics:
            cmd += ["-t", t]
        if count:
            cmd += ["-C", str(count)]
        if client_id:
            cmd += ["-i", client_id]
        if not clean:
            cmd.append("-c")
        cmd += list(extra)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = queue.Queue()
        self.debug = []
        self.suback = threading.Event()
        self.connack = threading.Event()
        self._t = threading.Thread(target=self._reader, daemon=True)
        self._t.start()
        self._stderr = b""

    def _reader(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(self.MARK):
                self.lines.put(line[len(self.MARK):])
            else:
                self.debug.append(line)
                if "received CONNACK" in line:
                    self.connack.set()
                if "received SUBACK" in line:
                    self.suback.set()

    def wait_subscribed(self, timeout=T_ACK):
        if not self.suback.wait(timeout):
            raise AssertionError("mosquitto_sub: no SUBACK within %.1f s; debug: %r stderr: %r"
                                 % (timeout, self.debug, self.stderr()))
        return self

    def get(self, n, timeout=T_MSG):
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            try:
                out.append(self.lines.get(timeout=max(left, 0.001)))
            except queue.Empty:
                raise AssertionError("mosquitto_sub printed %d of %d messages: %r; debug: %r"
                                     % (len(out), n, out, self.debug[-10:]))
        return out

    def no_more(self, timeout=T_QUIET):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError("unexpected message from mosquitto_sub: %r" % line)

    def wait_exit(self, timeout=T_MSG):
        """Wait for the process to exit, and for the reader to have taken
        every line it printed (debug included); return the exit status."""
        deadline = time.monotonic() + timeout
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("mosquitto_sub did not exit within %.1f s" % timeout)
        self._t.join(max(deadline - time.monotonic(), 1.0))
        return rc

    def stderr(self):
        if self.proc.poll() is not None and self.proc.stderr:
            try:
                self._stderr += self.proc.stderr.read() or b""
            except Exception:
                pass
        return self._stderr.decode("utf-8", "replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass


def main():
    """unittest.main() with verbose output; exit status non-zero on failure."""
    unittest.main(verbosity=2)
