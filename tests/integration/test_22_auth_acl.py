#!/usr/bin/python3
"""22: authentication and access control (docs/compatibility.md §2).

- CONNECT: allow_anonymous true/false x (no credentials, listed user with
  the right / wrong / no password, unlisted user), for plaintext entries, a
  $7$ entry written by Debian's mosquitto_passwd, one written by
  `nanomq passwd`, and a Mosquitto 1.x $6$ entry, each password file
  pulled in with {include "file"}. Refusals: 0x87 (v5) / 0x05 (v3) when
  credentials are required and missing, 0x86 (v5) / 0x04 (v3) for a bad
  user name or password; the connection is closed after a refusal. Checked
  with raw packets, paho and mosquitto_pub on MQTT 3.1.1 and 5.0.
- ACL: publish allowed / denied (v5 QoS 1 PUBACK 0x87, QoS 2 PUBREC 0x87;
  v3 QoS 1/2 get their normal ack; QoS 0 dropped; a denied message is never
  delivered), subscribe allowed / denied (SUBACK 0x87 on v5, 0x80 on v3,
  the other filters of the same SUBSCRIBE granted and working), filter
  covering, ${clientid} / ${username}, "@" literal filters, ipaddr (exact
  and CIDR, seen from 127.0.0.1 and 127.0.0.2), and / or groups, first
  match wins, no_match deny and allow, deny_action ignore and disconnect.
- Reload (SIGHUP): the password files (plaintext, mosquitto_passwd,
  nanomq passwd) and the ACL file are re-read; new connections and new
  operations of already connected clients follow the new contents, and
  connected clients stay connected; a broken ACL file leaves the running
  rules in place.
"""

import base64
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import nmq
from nmq import (DISCONNECT, PINGRESP, PUBACK, PUBCOMP, PUBLISH, PUBREC, PUBREL, SUBACK,
                 BrokerTestCase, MosquittoSub, RawClient, ack_bytes, mosquitto_pub)

VERSIONS = (4, 5)

# v5 reason code -> v3.1.1 CONNACK return code
V3_CONNACK = {0x00: 0x00, 0x86: 0x04, 0x87: 0x05}
OK, BAD, NOT_AUTH = 0x00, 0x86, 0x87


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq auth configuration (HOCON password and ACL files)")


def nanomq_bin():
    b = nmq._find_nanomq()
    if not b or not os.access(b, os.X_OK):
        raise AssertionError("NANOMQ_BIN is not set or not executable (%r)" % b)
    return b


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, **kw)
    if r.returncode != 0:
        raise AssertionError("%r failed (%d): %s %s" % (cmd, r.returncode, r.stdout, r.stderr))
    return r


def mosquitto_passwd(path, user, password, create=False):
    exe = shutil.which("mosquitto_passwd")
    if exe is None:
        raise AssertionError("mosquitto_passwd is missing (Debian package mosquitto)")
    run([exe, "-b"] + (["-c"] if create else []) + [path, user, password])


def nanomq_passwd(path, user, password, create=False):
    run([nanomq_bin(), "passwd"] + (["-c"] if create else []) + ["-b", path, user, password])


def sha512_v6(password, salt):
    """A Mosquitto 1.x password file value: $6$base64(salt)$base64(sha512(password+salt))."""
    digest = hashlib.sha512(password.encode() + salt).digest()
    return "$6$%s$%s" % (base64.b64encode(salt).decode(), base64.b64encode(digest).decode())


def code_for(version, v5_code):
    return v5_code if version == 5 else V3_CONNACK[v5_code]


class RawFrom(RawClient):
    """A RawClient whose connection comes from a chosen local address
    (127.0.0.2 and the like: Linux routes all of 127.0.0.0/8 to lo)."""

    def __init__(self, port, version, src):
        self.version = version
        self.sock = socket.create_connection((nmq.HOST, port), timeout=5, source_address=(src, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.backlog = []
        self.closed = False
        self.aliases = {}


class AuthCase(BrokerTestCase):
    """A broker whose configuration (CONF_T) may refer to files written
    before it starts: @DIR@ in CONF_T is the directory of those files."""

    CONF_T = ""

    def make_files(self, d):
        """Write the files the configuration includes."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="nmq-t22-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.make_files(self.dir)
        self.CONF = self.CONF_T.replace("@DIR@", self.dir)
        super().setUp()

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        p = self.path(name)
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.replace(p + ".tmp", p)
        return p

    # -- connecting --------------------------------------------------------
    def raw_client(self, version, cid, user=None, pw=None, src=None):
        """A RawClient that sent CONNECT; returns (client, CONNACK code)."""
        if src is None:
            r = self.raw(version=version)
        else:
            r = self._track(RawFrom(self.port, version, src))
        ack = r.connect(cid, username=user, password=pw)
        return r, ack.rc

    def raw_ok(self, version, cid, user=None, pw=None, src=None):
        r, rc = self.raw_client(version, cid, user, pw, src)
        self.assertEqual(rc, 0, "CONNACK 0x%02x for %s (user %r)" % (rc, cid, user))
        return r

    def paho_ok(self, version, cid, user=None, pw=None):
        c = self.paho(cid, version=version, connect=False, username=user, password=pw)
        self.assertEqual(c.connect(expect_rc=None), 0, "paho %s (user %r) refused" % (cid, user))
        return c

    def monitor(self, version=5, topics="#"):
        """A paho client of user mon (may subscribe to anything)."""
        m = self.paho_ok(version, "mon-%d" % time.monotonic_ns(), "mon", "pm")
        granted = m.subscribe(topics, 2)
        self.assertEqual(granted, [2], "monitor subscription refused")
        return m

    def fence(self, mon, tag):
        """Publish an allowed QoS 1 message from another client and wait until
        mon has it (plus a short grace period): a denied message that the
        broker processed earlier would have arrived by then.
        Returns the messages mon got before the fence (minus other fences)."""
        p = self.paho_ok(4, "fence-%d" % time.monotonic_ns(), "mon", "pm")
        payload = ("fence-" + tag).encode()
        p.publish("fence/x", payload, qos=1)
        got = mon.wait_message(timeout=5, match=lambda m: m.payload == payload)
        self.assertIsNotNone(got, "the fence message did not arrive")
        p.disconnect()
        time.sleep(0.15)
        return [m for m in mon.received if not m.payload.startswith(b"fence-")]

    def mosq_auth(self, user, pw):
        out = []
        if user is not None:
            out += ["-u", user]
        if pw is not None:
            out += ["-P", pw]
        return out

    def mosq_connack(self, version, cid, user=None, pw=None):
        """CONNACK code seen by mosquitto_pub -d (None if none came)."""
        res = mosquitto_pub(self.port, "t22/conn", "x", version=version, client_id=cid,
                            extra=self.mosq_auth(user, pw) + ["-d"])
        out = res.stdout.decode("utf-8", "replace")
        m = re.search(r"received CONNACK \((\d+)\)", out)
        if m is None:
            return None, res
        return int(m.group(1)), res

    # -- reload --------------------------------------------------------------
    def sighup(self, ok=True, timeout=10.0):
        """SIGHUP the broker and wait until its log says the reload ended."""
        pat = "event=reloaded" if ok else "event=reload_failed"
        before = self.broker.log_text().count(pat)
        self.broker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.broker.log_text().count(pat) > before:
                return
            time.sleep(0.05)
        self.fail("no %r in the log within %.0f s of SIGHUP:\n%s" % (pat, timeout,
                                                                   self.broker.log_tail()))

    # -- assertions ------------------------------------------------------------
    def assert_open(self, r, what):
        """r (a RawClient) is still connected: PINGREQ gets PINGRESP."""
        r.pingreq()
        try:
            r.expect(PINGRESP, 3)
        except (nmq.ConnectionClosed, nmq.RecvTimeout) as e:
            self.fail("%s: connection no longer usable: %s" % (what, e))

    def pub_rc(self, r, topic, qos, payload=b"x"):
        """Publish QoS 1 or 2 from r; return the PUBACK / PUBREC reason code
        (completing an accepted QoS 2 flow)."""
        ack = r.publish(topic, payload, qos=qos)
        return ack.rc


# ---------------------------------------------------------------------------
# CONNECT: the matrix
# ---------------------------------------------------------------------------

PW_CONF = """
auth {
  allow_anonymous = %s
  password = {
    include "@DIR@/mosq_pwd"
    include "@DIR@/nmq_pwd.conf"
    include "@DIR@/v6_pwd.conf"
    alice = "secret"
    "dot.user" = "with space"
  }
}
"""


class ConnectMatrix:
    """The matrix, mixed into a test case with ANON and CONF_T."""
    ANON = None

    def make_files(self, d):
        mosquitto_passwd(os.path.join(d, "mosq_pwd"), "mosq", "mosq pw", create=True)
        nanomq_passwd(os.path.join(d, "nmq_pwd.conf"), "nmq", "nmq:pw#1", create=True)
        with open(os.path.join(d, "v6_pwd.conf"), "w") as f:
            f.write('old6: "%s"\n' % sha512_v6("six pw", b"0123456789abcdef"))
        with open(os.path.join(d, "mosq_pwd")) as f:
            self.mosq_line = f.read()

    def cases(self):
        """(label, user, password, expected v5 code)."""
        anon = self.ANON
        mosq_hash = self.mosq_line.strip().split(":", 1)[1]
        return [
            ("no credentials", None, None, OK if anon else NOT_AUTH),
            ("plaintext right", "alice", "secret", OK),
            ("plaintext wrong", "alice", "secreT", BAD),
            ("plaintext prefix", "alice", "secre", BAD),
            ("plaintext, no password", "alice", None, BAD),
            ("quoted user right", "dot.user", "with space", OK),
            ("quoted user wrong", "dot.user", "with", BAD),
            ("unlisted user", "zed", "secret", OK if anon else BAD),
            ("unlisted user, no password", "zed", None, OK if anon else BAD),
            ("mosquitto_passwd $7$ right", "mosq", "mosq pw", OK),
            ("mosquitto_passwd $7$ wrong", "mosq", "mosq pW", BAD),
            ("$7$ hash given as the password", "mosq", mosq_hash, BAD),
            ("nanomq passwd $7$ right", "nmq", "nmq:pw#1", OK),
            ("nanomq passwd $7$ wrong", "nmq", "nmq:pw#2", BAD),
            ("$6$ right", "old6", "six pw", OK),
            ("$6$ wrong", "old6", "six pw ", BAD),
            ("user name case matters", "Alice", "secret", OK if anon else BAD),
        ]

    # 3.1.1 [MQTT-3.1.4-4]/[MQTT-3.2.2-5] / 5.0 [MQTT5-3.1.4-2]/[MQTT5-3.1.4-5]/[MQTT5-4.12.0-4]/
    # [MQTT5-3.2.2-7]/[MQTT5-3.2.2-8]: accepted CONNECTs get code 0; failed
    # authentication gets its refusal code (0x04/0x05, 0x86/0x87) and a close.
    def test_raw(self):
        n = 0
        for v in VERSIONS:
            for label, user, pw, want in self.cases():
                with self.subTest(version=v, case=label):
                    n += 1
                    r, rc = self.raw_client(v, "raw-%d-%d" % (v, n), user, pw)
                    self.assertEqual(rc, code_for(v, want), "CONNACK code (%s)" % label)
                    if rc != 0:
                        self.assert_closed(r, msg="after CONNACK 0x%02x" % rc, v5_codes=None)
                    else:
                        self.assert_open(r, label)
                        r.disconnect()
                        r.close()

    def test_raw_v5_password_without_user_name(self):
        # v5 allows a password without a user name; it is not a user.
        r, rc = self.raw_client(5, "pw-only", None, "secret")
        self.assertEqual(rc, OK if self.ANON else NOT_AUTH)

    def test_paho(self):
        n = 0
        for v in VERSIONS:
            for label, user, pw, want in self.cases():
                with self.subTest(version=v, case=label):
                    n += 1
                    c = self.paho("paho-%d-%d" % (v, n), version=v, connect=False,
                                  username=user, password=pw)
                    rc = c.connect(expect_rc=None)
                    self.assertEqual(rc, code_for(v, want), "paho CONNACK (%s)" % label)
                    if rc == 0:
                        c.publish("t22/ok", b"x", qos=1)
                        c.disconnect()
                    else:
                        self.assertTrue(c.wait_disconnected(5), "not closed after refusal")
                    c.close()

    def test_mosquitto_pub(self):
        n = 0
        for v in VERSIONS:
            for label, user, pw, want in self.cases():
                if user is None and pw is not None:
                    continue
                with self.subTest(version=v, case=label):
                    n += 1
                    rc, res = self.mosq_connack(v, "mp-%d-%d" % (v, n), user, pw)
                    self.assertEqual(rc, code_for(v, want), "mosquitto_pub CONNACK (%s): %r"
                                     % (label, res.stdout + res.stderr))
                    if want == OK:
                        self.assertEqual(res.returncode, 0, res.stderr)
                    else:
                        self.assertNotEqual(res.returncode, 0)


class TestConnectAnonymousDenied(ConnectMatrix, AuthCase):
    ANON = False
    CONF_T = PW_CONF % "false"

    # mosquitto_sub is refused too, and exits non-zero without a message.
    def test_mosquitto_sub_refused(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                s = MosquittoSub(self.port, "t22/#", version=v, extra=["-u", "alice", "-P", "x"])
                self.addCleanup(s.close)
                self.assertNotEqual(s.wait_exit(10), 0)
                self.assertTrue(any("CONNACK (%d)" % code_for(v, BAD) in line for line in s.debug),
                                "debug lines: %r" % s.debug)
                s2 = MosquittoSub(self.port, "t22/#", version=v,
                                  extra=["-u", "nmq", "-P", "nmq:pw#1"], count=1)
                self.addCleanup(s2.close)
                s2.wait_subscribed()
                self.assertEqual(mosquitto_pub(self.port, "t22/m", "hello", version=v, qos=1,
                                               extra=["-u", "mosq", "-P", "mosq pw"]).returncode, 0)
                self.assertEqual(s2.get(1)[0].split("|")[-1], "hello")


class TestConnectAnonymousAllowed(ConnectMatrix, AuthCase):
    ANON = True
    CONF_T = PW_CONF % "true"


class TestConnectDefaults(AuthCase):
    """No auth section: anonymous and any credentials are accepted."""

    def test_anything_goes(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                self.raw_ok(v, "def-a-%d" % v)
                self.raw_ok(v, "def-b-%d" % v, "who", "ever")
                self.assertEqual(self.mosq_connack(v, "def-c-%d" % v, "x", "y")[0], 0)


# ---------------------------------------------------------------------------
# ACL
# ---------------------------------------------------------------------------

ACL_RULES = """
  {permit = allow, username = "mon", action = subscribe}
  {permit = allow, username = "mon", action = publish, topics = ["fence/#", "health/#"]}
  {permit = deny, username = "alice", action = publish, topics = ["a/secret"]}
  {permit = allow, username = "alice", topics = ["a/#"]}
  {permit = allow, username = "alice", action = publish, topics = ["b/open"]}
  {permit = deny, username = "alice", topics = ["b/#"]}
  {permit = allow, username = "#", action = publish, topics = ["b/#"]}
  {"permit": "allow", "topics": ["own/${clientid}/#", "user/${username}/#"]}
  {permit = allow, action = subscribe, topics = ["@lit/#"]}
  {permit = allow, action = publish, topics = ["@lit2/+"]}
  {permit = allow, ipaddr = "127.0.0.1", action = publish, topics = ["ip/exact/#"]}
  {permit = allow, ipaddrs = ["127.0.0.0/8"], action = publish, topics = ["ip/cidr/#"]}
  {permit = allow, ipaddrs = ["10.0.0.0/8", "192.168.0.0/16"], action = publish, topics = ["ip/other/#"]}
  {permit = allow, ipaddr = "127.0.0.2", action = publish, topics = ["ip/two/#"]}
  {permit = allow, and = [{username = "bob"}, {clientid = "bob-1"}], action = publish, topics = ["and/#"]}
  {permit = allow, or = [{username = "carol"}, {clientid = "dave-1"}], action = publish, topics = ["or/#"]}
  {permit = allow, topics = ["sub/ok/#"]}
  {permit = deny, action = subscribe, topics = ["sub/no/#"]}
  {permit = allow, action = publish, topics = ["sub/no/#"]}
  {permit = allow, action = publish, topics = ["pub/ok/#"]}
  {permit = deny, action = publish, topics = ["pub/no/#"]}
  {permit = allow, username = "carol", action = subscribe, topics = ["#"]}
  {permit = allow, clientid = "solo", action = pubsub, topics = ["cid/#"]}
"""

ACL_CONF = """
auth {
  allow_anonymous = true
  no_match = %s
  deny_action = %s
  password = { alice = "pa", bob = "pb", carol = "pc", eve = "pe", mon = "pm" }
  acl = { rules = [ %s ] }
}
"""


class TestAclPublish(AuthCase):
    CONF_T = ACL_CONF % ("deny", "ignore", ACL_RULES)

    # v5: denied QoS 1 -> PUBACK 0x87, QoS 2 -> PUBREC 0x87, QoS 0 dropped;
    # nothing denied reaches a subscriber; the client stays connected.
    # [MQTT5-3.4.2-1]/[MQTT5-3.5.2-1]: the denial is a PUBACK / PUBREC reason code (0x87).
    def test_v5_raw_codes(self):
        mon = self.monitor()
        r = self.raw_ok(5, "p5")
        self.assertEqual(self.pub_rc(r, "pub/ok/1", 1, b"ok1"), 0)
        self.assertEqual(self.pub_rc(r, "pub/ok/2", 2, b"ok2"), 0)  # PUBCOMP after PUBREL
        r.publish("pub/ok/0", b"ok0", qos=0)
        for t in ("pub/no/1", "zzz/unmatched"):
            self.assertEqual(self.pub_rc(r, t, 1, b"bad1"), 0x87, t)
            rec = r.publish(t, b"bad2", qos=2)
            self.assertEqual((rec.type, rec.rc), (PUBREC, 0x87), t)
            r.publish(t, b"bad0", qos=0)
        self.assert_open(r, "after denials (deny_action = ignore)")
        self.assertEqual(self.pub_rc(r, "pub/ok/3", 1, b"ok3"), 0)
        got = self.fence(mon, "v5raw")
        self.assertEqual(sorted(m.payload for m in got), [b"ok0", b"ok1", b"ok2", b"ok3"],
                         "only the allowed messages may be delivered: %r" % got)

    # [MQTT5-4.3.3-9]: a denied QoS 2 publish must not leave a packet id in use: after PUBREC
    # 0x87 the same id is free for an allowed QoS 2 message, which is then
    # delivered once.
    def test_v5_qos2_denied_frees_packet_id(self):
        mon = self.monitor()
        r = self.raw_ok(5, "p5b")
        rec = r.publish("pub/no/x", b"bad", qos=2, pid=7)
        self.assertEqual(rec.rc, 0x87)
        r.send(ack_bytes(PUBREL, 7, version=5))  # a client may still release it
        comp = r.expect(PUBCOMP, 3, pid=7)
        self.assertIn(comp.rc, (0x00, 0x92), "PUBCOMP for a released denied id: %r" % comp)
        self.assertEqual(r.publish("pub/ok/x", b"good", qos=2, pid=7).rc, 0)
        got = self.fence(mon, "pid")
        self.assertEqual([m.payload for m in got], [b"good"])

    # v3: QoS 1 / 2 get their normal ack flow; the message is dropped.
    # [MQTT-3.3.5-2]: an unauthorised PUBLISH is acknowledged normally.
    def test_v3_raw_normal_acks_but_dropped(self):
        mon = self.monitor(version=4)
        r = self.raw_ok(4, "p3")
        ack = r.publish("pub/no/1", b"bad1", qos=1)
        self.assertEqual(ack.type, PUBACK)
        self.assertEqual(len(ack.body), 2, "v3 PUBACK is exactly the packet id: %r" % ack.body)
        comp = r.publish("pub/no/2", b"bad2", qos=2)  # PUBREC, PUBREL, PUBCOMP
        self.assertEqual(comp.type, PUBCOMP)
        r.publish("pub/no/0", b"bad0", qos=0)
        r.publish("zzz/3", b"bad3", qos=1)
        self.assert_open(r, "after v3 denials")
        r.publish("pub/ok/1", b"ok1", qos=1)
        r.publish("pub/ok/2", b"ok2", qos=2)
        got = self.fence(mon, "v3raw")
        self.assertEqual(sorted(m.payload for m in got), [b"ok1", b"ok2"], got)

    def test_paho(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                mon = self.monitor(version=v)
                p = self.paho_ok(v, "pp-%d" % v)
                for q in (0, 1, 2):
                    # paho 1.6 goes on with PUBREL after a failed PUBREC, so
                    # QoS 2 completion is not waited for on v5.
                    p.publish("pub/no/%d" % q, b"bad%d" % q, qos=q, wait=not (v == 5 and q == 2))
                    p.publish("pub/ok/%d" % q, b"ok%d" % q, qos=q)
                got = self.fence(mon, "paho%d" % v)
                self.assertEqual(sorted(m.payload for m in got), [b"ok0", b"ok1", b"ok2"], got)
                self.assertFalse(p.disconnected.is_set(), "paho publisher was disconnected")
                p.disconnect()
                mon.disconnect()

    def test_mosquitto_pub(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                mon = self.monitor(version=v)
                for q in (0, 1, 2):
                    res = mosquitto_pub(self.port, "pub/no/%d" % q, "bad%d" % q, version=v, qos=q,
                                        extra=["-d"])
                    out = res.stdout.decode("utf-8", "replace")
                    if v == 5 and q == 1:
                        self.assertRegex(out, r"received PUBACK \(Mid: \d+, RC:135\)")
                    if v == 5 and q == 2:
                        # libmosquitto does not log the PUBREC reason code, but
                        # goes on with PUBREL only after a success code.
                        self.assertIn("received PUBREC", out)
                        self.assertNotIn("sending PUBREL", out)
                    if v == 4 and q == 1:
                        self.assertIn("received PUBACK", out)
                        self.assertEqual(res.returncode, 0, out)
                    if v == 4 and q == 2:
                        self.assertIn("received PUBCOMP", out)
                        self.assertEqual(res.returncode, 0, out)
                    res = mosquitto_pub(self.port, "pub/ok/%d" % q, "ok%d" % q, version=v, qos=q,
                                        extra=["-d"])
                    self.assertEqual(res.returncode, 0, res.stderr)
                    if q == 2:
                        self.assertIn("sending PUBREL", res.stdout.decode())
                got = self.fence(mon, "mp%d" % v)
                self.assertEqual(sorted(m.payload for m in got), [b"ok0", b"ok1", b"ok2"], got)
                mon.disconnect()

    # First match wins: a deny before an allow and an allow before a deny.
    def test_first_match_wins(self):
        for v in (5,):
            a = self.raw_ok(v, "alice-1", "alice", "pa")
            self.assertEqual(self.pub_rc(a, "a/secret", 1), 0x87, "deny before allow a/#")
            self.assertEqual(self.pub_rc(a, "a/other", 1), 0)
            self.assertEqual(self.pub_rc(a, "b/open", 1), 0, "allow before deny b/#")
            self.assertEqual(self.pub_rc(a, "b/closed", 1), 0x87, "alice's deny b/#")
            # The deny rule for alice comes before the catch-all allow for b/#.
            b = self.raw_ok(v, "bob-x", "bob", "pb")
            self.assertEqual(self.pub_rc(b, "b/closed", 1), 0)
            self.assertEqual(self.pub_rc(b, "a/other", 1), 0x87, "a/# is alice's only")
            # username "#" also matches a client that sent no user name
            anon = self.raw_ok(v, "anon-b")
            self.assertEqual(self.pub_rc(anon, "b/closed", 1), 0)
            # a/secret is denied for publish only: alice may subscribe to it.
            self.assertEqual(a.subscribe([("a/secret", 1)]).codes, [1])

    def test_placeholders(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                mon = self.monitor(version=v)
                c = self.raw_ok(v, "cid-%d" % v, "bob", "pb")
                sa = c.subscribe([("own/cid-%d/#" % v, 1), ("own/cid-9/#", 1),
                                  ("user/bob/+", 1), ("user/carol/#", 1), ("own/+/x", 1)])
                no = 0x87 if v == 5 else 0x80
                self.assertEqual(sa.codes, [1, no, 1, no, no])
                c.publish("own/cid-%d/a" % v, b"own-ok", qos=1)
                c.publish("own/cid-9/a", b"own-bad", qos=1)
                c.publish("user/bob/a", b"user-ok", qos=1)
                c.publish("user/carol/a", b"user-bad", qos=1)
                if v == 5:
                    # the codes tell which were denied
                    self.assertEqual(self.pub_rc(c, "own/cid-9/b", 1), 0x87)
                    self.assertEqual(self.pub_rc(c, "user/carol/b", 1), 0x87)
                    self.assertEqual(self.pub_rc(c, "user/bob/b", 1), 0)
                # A client without a user name never matches ${username}.
                anon = self.raw_ok(v, "anon-%d" % v)
                anon.publish("user/anon-%d/a" % v, b"anon-bad", qos=1)
                anon.publish("own/anon-%d/a" % v, b"anon-own-ok", qos=1)
                sb = anon.subscribe([("user/anon-%d/#" % v, 0), ("own/anon-%d/#" % v, 0)])
                self.assertEqual(sb.codes, [no, 0])
                got = self.fence(mon, "ph%d" % v)
                want = [b"anon-own-ok", b"own-ok", b"user-ok"] + ([b"x"] if v == 5 else [])
                self.assertEqual(sorted(m.payload for m in got), sorted(want), got)
                # the subscriber got its own-topic messages, not the denied ones
                pubs = [p.payload for p in c.expect_publishes(2 if v == 4 else 3, ack=True)]
                self.assertEqual(sorted(pubs), sorted([b"own-ok", b"user-ok"] +
                                                      ([b"x"] if v == 5 else [])))
                mon.disconnect()

    # A client id made of a wildcard cannot widen a ${clientid} rule.
    def test_wildcard_client_id(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                r, rc = self.raw_client(v, "+")
                if rc != 0:
                    self.assertEqual(rc, 0x85 if v == 5 else 0x02, "refusing id '+'")
                    continue
                no = 0x87 if v == 5 else 0x80
                self.assertEqual(r.subscribe([("own/+/#", 0), ("own/#", 0)]).codes, [no, no])

    def test_literal_filter(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                r = self.raw_ok(v, "lit-%d" % v)
                s = r.subscribe([("lit/#", 1), ("lit/a", 1), ("lit/+", 1), ("lit/a/#", 1),
                                 ("#", 1)])
                self.assertEqual(s.codes, [1, no, no, no, no])
                if v == 5:
                    # "@lit2/+" is the filter itself, not a pattern for topics.
                    self.assertEqual(self.pub_rc(r, "lit2/x", 1), 0x87)
                    self.assertEqual(self.pub_rc(r, "lit/x", 1), 0x87)

    def test_ipaddr(self):
        for v in (5,):
            lo = self.raw_ok(v, "ip-1")
            self.assertEqual(self.pub_rc(lo, "ip/exact/a", 1), 0)
            self.assertEqual(self.pub_rc(lo, "ip/cidr/a", 1), 0)
            self.assertEqual(self.pub_rc(lo, "ip/other/a", 1), 0x87)
            self.assertEqual(self.pub_rc(lo, "ip/two/a", 1), 0x87)
            try:
                two = self.raw_ok(v, "ip-2", src="127.0.0.2")
            except OSError as e:
                self.skipTest("cannot bind 127.0.0.2: %s" % e)
            self.assertEqual(self.pub_rc(two, "ip/exact/a", 1), 0x87, "127.0.0.1 rule")
            self.assertEqual(self.pub_rc(two, "ip/cidr/a", 1), 0, "127.0.0.0/8 rule")
            self.assertEqual(self.pub_rc(two, "ip/two/a", 1), 0, "127.0.0.2 rule")
            self.assertEqual(self.pub_rc(two, "ip/other/a", 1), 0x87)

    def test_and_or(self):
        v = 5
        cases = [
            ("bob", "pb", "bob-1", "and/x", 0),
            ("bob", "pb", "bob-2", "and/x", 0x87),
            ("alice", "pa", "bob-1", "and/x", 0x87),
            (None, None, "bob-1", "and/x", 0x87),
            ("carol", "pc", "c-9", "or/x", 0),
            ("eve", "pe", "dave-1", "or/x", 0),
            (None, None, "dave-1", "or/x", 0),
            ("eve", "pe", "eve-1", "or/x", 0x87),
            ("bob", "pb", "bob-1", "or/x", 0x87),
            (None, None, "solo", "cid/x", 0),
            ("eve", "pe", "solo", "cid/x", 0),
            ("eve", "pe", "solo2", "cid/x", 0x87),
        ]
        for user, pw, cid, topic, want in cases:
            with self.subTest(user=user, cid=cid, topic=topic):
                r = self.raw_ok(v, cid, user, pw)
                self.assertEqual(self.pub_rc(r, topic, 1), want)
                r.disconnect()
                r.close()


    # ${username} holding '/' never matches, so it cannot reach other levels.
    def test_username_with_slash(self):
        r = self.raw_ok(5, "slash-1", "x/y", "whatever")
        self.assertEqual(self.pub_rc(r, "user/x/y/z", 1), 0x87)
        self.assertEqual(r.subscribe([("user/x/y/#", 0), ("user/x/#", 0)]).codes, [0x87, 0x87])
        self.assertEqual(self.pub_rc(r, "own/slash-1/z", 1), 0)

    # A denied retained publish is not stored: a later subscriber gets
    # only the allowed retained message.
    def test_denied_retained_not_stored(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                r = self.raw_ok(v, "ret-%d" % v)
                r.publish("pub/no/ret%d" % v, b"bad", qos=1, retain=True)
                r.publish("pub/no/ret%d" % v, b"bad0", qos=0, retain=True)
                r.publish("pub/ok/ret%d" % v, b"good", qos=1, retain=True)
                m = self.paho_ok(v, "mret-%d" % v, "mon", "pm")
                self.assertEqual(m.subscribe([("pub/no/#", 1), ("pub/ok/#", 1)]), [1, 1])
                got = m.wait_message(3)
                self.assertIsNotNone(got, "the allowed retained message is missing")
                self.assertEqual((got.topic, got.payload, got.retain),
                                 ("pub/ok/ret%d" % v, b"good", True))
                m.expect_no_message(0.4)
                # clean up the retained message for the next round
                r.publish("pub/ok/ret%d" % v, b"", qos=1, retain=True)

    # v5 topic aliases: the ACL sees the topic the alias stands for.
    def test_topic_alias(self):
        mon = self.monitor()
        r = self.raw_ok(5, "alias")
        ack = r.publish("pub/ok/a", b"ok-set", qos=1, props={"TopicAlias": 1})
        self.assertEqual(ack.rc, 0)
        ack = r.publish("", b"ok-alias", qos=1, props={"TopicAlias": 1})
        self.assertEqual(ack.rc, 0)
        ack = r.publish("pub/no/a", b"bad-set", qos=1, props={"TopicAlias": 2})
        self.assertEqual(ack.rc, 0x87, "denied topic with a new alias")
        ack = r.publish("", b"bad-alias", qos=1, props={"TopicAlias": 2})
        self.assertEqual(ack.rc, 0x87, "empty topic + alias of a denied topic")
        # re-pointing an allowed alias at a denied topic
        ack = r.publish("pub/no/b", b"bad-repoint", qos=1, props={"TopicAlias": 1})
        self.assertEqual(ack.rc, 0x87)
        ack = r.publish("", b"bad-after-repoint", qos=1, props={"TopicAlias": 1})
        self.assertEqual(ack.rc, 0x87, "alias 1 re-pointed at a denied topic")
        got = self.fence(mon, "alias")
        self.assertEqual(sorted(m.payload for m in got), [b"ok-alias", b"ok-set"], got)

    # $share: the group prefix is removed before the subscribe check.
    def test_shared_subscriptions(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                r = self.raw_ok(v, "sh-%d" % v)
                s = r.subscribe([("$share/g/sub/ok/a", 1), ("$share/g/sub/no/a", 1),
                                 ("$share/g/#", 1)])
                self.assertEqual(s.codes, [1, no, no])
                p = self.raw_ok(v, "shp-%d" % v)
                p.publish("sub/no/a", b"no", qos=1)
                p.publish("sub/ok/a", b"ok", qos=1)
                got = r.expect_publishes(1, ack=True)
                self.assertEqual((got[0].topic, got[0].payload), ("sub/ok/a", b"ok"))
                r.expect_nothing(0.3, types=(PUBLISH,))

    # A rule filter starting with a wildcard does not cover $ topics.
    def test_dollar_topics(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                r = self.raw_ok(v, "dollar-%d" % v, "carol", "pc")
                s = r.subscribe([("#", 0), ("x/+", 0), ("$SYS/#", 0), ("$SYS/broker/+", 0)])
                self.assertEqual(s.codes, [0, 0, no, no])


class TestAclSubscribe(AuthCase):
    CONF_T = ACL_CONF % ("deny", "ignore", ACL_RULES)

    # One SUBSCRIBE with allowed and denied filters: each filter gets its own
    # code, the granted ones work, the denied one receives nothing.
    # 3.1.1 [MQTT-3.8.4-5]/[MQTT-3.9.3-1] / 5.0 [MQTT5-3.8.4-6]/[MQTT5-3.8.4-7]/
    # [MQTT5-3.9.3-1]: one code per filter, in order: granted QoS or failure.
    def test_raw_mixed(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                r = self.raw_ok(v, "s-%d" % v)
                s = r.subscribe([("sub/ok/a", 1), ("sub/no/a", 1), ("sub/ok/+/b", 2),
                                 ("sub/#", 0), ("#", 0), ("sub/no/#", 2)])
                self.assertEqual(s.codes, [1, no, 2, no, no, no])
                self.assert_open(r, "after a denied filter")
                p = self.raw_ok(v, "sp-%d" % v)
                p.publish("sub/no/a", b"no", qos=1)
                p.publish("sub/ok/a", b"a", qos=1)
                p.publish("sub/ok/x/b", b"b", qos=1)
                got = r.expect_publishes(2, ack=True)
                self.assertEqual(sorted((g.topic, g.payload) for g in got),
                                 [("sub/ok/a", b"a"), ("sub/ok/x/b", b"b")])
                r.expect_nothing(0.4, types=(PUBLISH,))

    def test_paho(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                c = self.paho_ok(v, "ps-%d" % v)
                codes = c.subscribe([("sub/ok/a", 1), ("sub/no/a", 2), ("sub/ok/b", 2)])
                self.assertEqual(codes, [1, no, 2])
                self.assertEqual(c.subscribe("zzz/#", 1), [no], "no_match = deny")
                p = self.paho_ok(v, "pp-%d" % v)
                p.publish("sub/no/a", b"no", qos=1)
                p.publish("sub/ok/b", b"b", qos=1)
                m = c.wait_message(5)
                self.assertIsNotNone(m)
                self.assertEqual((m.topic, m.payload), ("sub/ok/b", b"b"))
                c.expect_no_message(0.4)
                self.assertFalse(c.disconnected.is_set())
                c.disconnect()
                p.disconnect()

    def test_mosquitto_sub(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                s = MosquittoSub(self.port, ["sub/ok/a", "sub/no/a", "sub/ok/b"], version=v, qos=1)
                self.addCleanup(s.close)
                s.wait_subscribed()
                deadline = time.monotonic() + 10
                line = None
                while time.monotonic() < deadline and line is None:
                    line = next((d for d in s.debug if d.startswith("Subscribed (mid")), None)
                    time.sleep(0.02)
                self.assertIsNotNone(line, "no 'Subscribed' line: %r" % s.debug)
                codes = [int(x) for x in re.match(r"Subscribed \(mid: \d+\): (.*)$",
                                                  line).group(1).split(",")]
                self.assertEqual(codes, [1, no, 1], line)
                for t in ("sub/no/a", "sub/ok/a"):
                    self.assertEqual(mosquitto_pub(self.port, t, t, version=v, qos=1).returncode, 0)
                self.assertEqual(s.get(1)[0], "sub/ok/a|1|0|sub/ok/a")
                s.no_more(0.4)
                s.close()
                # every filter denied: mosquitto_sub gives up
                s2 = MosquittoSub(self.port, ["sub/no/a"], version=v, qos=1)
                self.addCleanup(s2.close)
                s2.wait_exit(10)
                self.assertTrue(any("Subscribed (mid" in d and str(no) in d for d in s2.debug)
                                or "denied" in s2.stderr(), "%r %r" % (s2.debug, s2.stderr()))


class TestNoMatchAllow(AuthCase):
    """no_match = allow (the default): unmatched requests pass, rules still deny."""
    CONF_T = """
auth {
  acl = { rules = [
    {permit = deny, action = publish, topics = ["pub/no/#"]}
    {permit = deny, action = subscribe, topics = ["sub/no/#"]}
  ] }
}
"""

    def test_unmatched_allowed(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                no = 0x87 if v == 5 else 0x80
                r = self.raw_ok(v, "nm-%d" % v)
                self.assertEqual(r.subscribe([("zzz/#", 1), ("sub/no/x", 1), ("#", 0)]).codes,
                                 [1, no, 0])
                r.publish("zzz/a", b"z", qos=1)
                r.publish("pub/no/a", b"n", qos=1)
                got = r.expect_publishes(1, ack=True)
                self.assertEqual((got[0].topic, got[0].payload), ("zzz/a", b"z"))
                r.expect_nothing(0.4, types=(PUBLISH,))
                if v == 5:
                    self.assertEqual(self.pub_rc(r, "pub/no/b", 1), 0x87)


class TestAclDisabled(AuthCase):
    """acl.enable = false: every request allowed, no_match = deny notwithstanding."""
    CONF_T = """
auth {
  no_match = deny
  acl = { enable = false, rules = [ {permit = deny} ] }
}
"""

    def test_everything_allowed(self):
        r = self.raw_ok(5, "dis")
        self.assertEqual(r.subscribe([("x/#", 1)]).codes, [1])
        self.assertEqual(self.pub_rc(r, "x/y", 1), 0)


# ---------------------------------------------------------------------------
# deny_action = disconnect
# ---------------------------------------------------------------------------

class TestDenyDisconnect(AuthCase):
    CONF_T = ACL_CONF % ("deny", "disconnect", ACL_RULES)

    def closed_after(self, r, allowed_before):
        """The broker closes r; for v5 a DISCONNECT 0x87 comes first. Packets
        of the types in allowed_before (a denial ack carrying 0x87/0x80 on
        v5, the normal ack on v3) may precede it."""
        pkts = r.expect_closed(5, msg="deny_action = disconnect")
        discs = [p for p in pkts if p.type == DISCONNECT]
        others = [p for p in pkts if p.type != DISCONNECT]
        for p in others:
            self.assertIn(p.type, allowed_before, "unexpected packet before the close: %r" % p)
            if r.version == 5 and p.type in (PUBACK, PUBREC):
                self.assertEqual(p.rc, 0x87, "a denied publish acked with %r" % p)
            if p.type == SUBACK:
                self.assertEqual(p.codes, [0x87 if r.version == 5 else 0x80], p)
        if r.version == 5:
            self.assertEqual(len(discs), 1, "v5: expected DISCONNECT 0x87 before the close, got %r"
                             % pkts)
            self.assertEqual(discs[0].rc, 0x87, pkts)
        else:
            self.assertEqual(discs, [], "v3 got a DISCONNECT")
        return pkts

    # [MQTT-3.3.5-2]: or the connection is closed (deny_action = disconnect).
    def test_publish_denied_disconnects(self):
        mon = self.monitor()
        for v in VERSIONS:
            for q in (0, 1, 2):
                with self.subTest(version=v, qos=q):
                    r = self.raw_ok(v, "dd-%d-%d" % (v, q))
                    ack = r.publish("pub/ok/%d%d" % (v, q), b"ok", qos=q)
                    if q:
                        self.assertEqual(ack.rc, 0, "allowed publish: %r" % ack)
                    self.assert_open(r, "after an allowed publish")
                    r.publish("pub/no/%d" % q, b"bad", qos=q, complete=False)
                    self.closed_after(r, (PUBACK, PUBREC))
        got = self.fence(mon, "dd")
        self.assertEqual([m.payload for m in got], [b"ok"] * 6, got)

    def test_subscribe_denied_disconnects(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                r = self.raw_ok(v, "ds-%d" % v)
                self.assertEqual(r.subscribe([("sub/ok/a", 1)]).codes, [1])
                r.send(nmq.subscribe_bytes([("sub/no/a", 1)], 9, None, v))
                self.closed_after(r, (SUBACK,))

    def test_paho_v5_sees_0x87(self):
        c = self.paho_ok(5, "pd5")
        c.publish("pub/no/x", b"bad", qos=1, wait=False)
        self.assertTrue(c.wait_disconnected(5), "paho v5 client not disconnected")
        self.assertEqual(c.disconnect_rc, 0x87)
        c3 = self.paho_ok(4, "pd3")
        c3.publish("pub/no/x", b"bad", qos=0, wait=False)
        self.assertTrue(c3.wait_disconnected(5), "paho v3 client not disconnected")

    def test_mosquitto_pub(self):
        mon = self.monitor()
        for v in VERSIONS:
            for q in (1, 2):
                with self.subTest(version=v, qos=q):
                    res = mosquitto_pub(self.port, "pub/no/%d%d" % (v, q), "bad", version=v, qos=q,
                                        extra=["-d"], timeout=10)
                    out = res.stdout.decode("utf-8", "replace")
                    self.assertNotRegex(out, r"received PUBACK \(Mid: \d+, RC:0\)")
                    self.assertNotIn("sending PUBREL", out)
                    if v == 5:
                        # mosquitto_pub reports the failed ack; it may send
                        # its own DISCONNECT and exit before it reads the
                        # broker's (the raw test above checks that one).
                        err = res.stderr.decode("utf-8", "replace")
                        self.assertIn("Publish 1 failed: Not authorized", err, out)
                        m = re.search(r"Received DISCONNECT \((\d+)\)", out)
                        if m:
                            self.assertEqual(m.group(1), "135", out)
                    else:
                        self.assertNotIn("Received DISCONNECT", out)
        got = self.fence(mon, "mpd")
        self.assertEqual(got, [], "denied messages delivered")

    # An allowed operation never disconnects.
    def test_allowed_keeps_connection(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                r = self.raw_ok(v, "dk-%d" % v)
                self.assertEqual(r.subscribe([("sub/ok/#", 2)]).codes, [2])
                r.publish("sub/ok/x", b"m", qos=2)
                r.expect_publishes(1, ack=True)
                self.assert_open(r, "allowed operations")


# ---------------------------------------------------------------------------
# Reload
# ---------------------------------------------------------------------------

ACL_BEFORE = """rules = [
  {permit = allow, action = subscribe, topics = ["r/#", "q/#"]}
  {permit = allow, action = publish, topics = ["r/#"]}
]
"""

ACL_AFTER = """rules = [
  {permit = deny, topics = ["r/#"]}
  {permit = allow, topics = ["s/#", "q/#"]}
]
"""


class TestReload(AuthCase):
    CONF_T = """
auth {
  allow_anonymous = false
  no_match = deny
  password = {
    include "@DIR@/plain.conf"
    include "@DIR@/mosq_pwd"
    include "@DIR@/nmq_pwd.conf"
  }
  acl = {include "@DIR@/acl.conf"}
}
"""

    def make_files(self, d):
        with open(os.path.join(d, "plain.conf"), "w") as f:
            f.write("alice: old\ngone: bye\n")
        mosquitto_passwd(os.path.join(d, "mosq_pwd"), "mosq", "m-old", create=True)
        nanomq_passwd(os.path.join(d, "nmq_pwd.conf"), "nmq", "n-old", create=True)
        with open(os.path.join(d, "acl.conf"), "w") as f:
            f.write(ACL_BEFORE)

    def check_logins(self, table):
        for user, pw, want in table:
            for v in VERSIONS:
                with self.subTest(user=user, pw=pw, version=v):
                    r, rc = self.raw_client(v, "login-%s-%d" % (user, v), user, pw)
                    self.assertEqual(rc, code_for(v, want))
                    r.close()

    def test_passwords_and_acl(self):
        keep5 = self.raw_ok(5, "keep5", "alice", "old")
        keep3 = self.raw_ok(4, "keep3", "gone", "bye")
        keep_paho = self.paho_ok(5, "keep-paho", "nmq", "n-old")
        self.assertEqual(keep_paho.subscribe("q/#", 1), [1])
        self.assertEqual(keep5.subscribe([("r/#", 1)]).codes, [1])
        self.assertEqual(self.pub_rc(keep5, "r/x", 1), 0)  # also primes any ACL cache
        self.assertEqual(self.pub_rc(keep5, "s/x", 1), 0x87)
        keep5.expect_publishes(1, ack=True)
        self.check_logins([("alice", "old", OK), ("mosq", "m-old", OK), ("nmq", "n-old", OK),
                           ("gone", "bye", OK), ("alice", "new", BAD)])

        self.write("plain.conf", "alice: new\n")
        mosquitto_passwd(self.path("mosq_pwd"), "mosq", "m-new")
        nanomq_passwd(self.path("nmq_pwd.conf"), "nmq", "n-new")
        self.write("acl.conf", ACL_AFTER)
        self.sighup()

        # connected clients stay connected...
        for r, what in ((keep5, "v5 raw"), (keep3, "v3 raw")):
            self.assert_open(r, what + " client after SIGHUP")
        self.assertFalse(keep_paho.disconnected.is_set(), "paho client dropped by the reload")
        # ... and their new operations follow the new ACL
        self.assertEqual(self.pub_rc(keep5, "r/x", 1), 0x87, "cached decision survived reload")
        self.assertEqual(self.pub_rc(keep5, "s/x", 1), 0)
        self.assertEqual(keep5.subscribe([("r/y", 1), ("s/#", 1)]).codes, [0x87, 1])
        self.assertEqual(keep3.subscribe([("r/#", 1), ("s/#", 1)]).codes, [0x80, 1])
        keep3.publish("q/from-3", b"q3", qos=1)
        m = keep_paho.wait_message(5)
        self.assertIsNotNone(m, "the connected paho client no longer receives")
        self.assertEqual(m.payload, b"q3")
        # both new s/# subscriptions work
        keep5.publish("s/y", b"sy", qos=1)
        self.assertEqual(sorted(p.payload for p in keep3.expect_publishes(1, ack=True)), [b"sy"])
        self.assertEqual(sorted(p.payload for p in keep5.expect_publishes(1, ack=True)), [b"sy"])

        # new connections use the new passwords
        self.check_logins([("alice", "old", BAD), ("alice", "new", OK),
                           ("mosq", "m-old", BAD), ("mosq", "m-new", OK),
                           ("nmq", "n-old", BAD), ("nmq", "n-new", OK),
                           ("gone", "bye", BAD), ("gone", None, BAD)])
        for v in VERSIONS:
            rc, res = self.mosq_connack(v, "mp-after-%d" % v, "mosq", "m-new")
            self.assertEqual(rc, 0, res.stdout)
            rc, res = self.mosq_connack(v, "mp-after-old-%d" % v, "mosq", "m-old")
            self.assertEqual(rc, code_for(v, BAD), res.stdout)
        self.assert_open(keep5, "v5 raw client at the end")
        self.assert_open(keep3, "v3 raw client at the end")

    # A broken ACL file: the reload fails, the running rules and passwords stay.
    def test_broken_acl_keeps_rules(self):
        keep = self.raw_ok(5, "keep", "alice", "old")
        self.write("plain.conf", "alice: new\n")
        self.write("acl.conf", "rules = [ {permit = maybe, topics = [\"r/#\"]} ]\n")
        self.sighup(ok=False)
        self.assert_open(keep, "client after a failed reload")
        self.assertEqual(self.pub_rc(keep, "r/x", 1), 0)
        self.assertEqual(self.pub_rc(keep, "s/x", 1), 0x87)
        self.check_logins([("alice", "old", OK), ("alice", "new", BAD)])
        # fixed: now both apply
        self.write("acl.conf", ACL_AFTER)
        self.sighup()
        self.assertEqual(self.pub_rc(keep, "r/x", 1), 0x87)
        self.check_logins([("alice", "old", BAD), ("alice", "new", OK)])

    # `nanomq reload` re-reads the password and ACL files too, and refuses a
    # broken ACL file.
    def test_reload_verb(self):
        keep = self.raw_ok(5, "keep-v", "nmq", "n-old")

        def reload():
            env = dict(os.environ)
            env["NANOMQ_PID_FILE"] = os.path.join(self.broker.tmp, "nanomq.pid")
            return subprocess.run([nanomq_bin(), "reload", "--conf", self.broker.conf_path],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                                  env=env, universal_newlines=True, cwd=self.broker.tmp)

        self.write("acl.conf", "rules = [ {permit = allow, topics = [\"r/#\"], action = bogus} ]\n")
        res = reload()
        self.assertEqual(res.returncode, 1, res.stdout)
        self.assertIn("reload failed!", res.stdout)
        self.assertEqual(self.pub_rc(keep, "r/x", 1), 0, "old rules kept")
        nanomq_passwd(self.path("nmq_pwd.conf"), "nmq", "n-new")
        self.write("acl.conf", ACL_AFTER)
        res = reload()
        self.assertEqual(res.returncode, 0, res.stdout)
        self.assertIn("reload succeed!", res.stdout)
        self.assert_open(keep, "client after nanomq reload")
        self.assertEqual(self.pub_rc(keep, "r/x", 1), 0x87)
        self.assertEqual(self.pub_rc(keep, "s/x", 1), 0)
        self.check_logins([("nmq", "n-old", BAD), ("nmq", "n-new", OK)])

    # allow_anonymous itself is reloaded (from the main file).
    def test_allow_anonymous_reloaded(self):
        for v in VERSIONS:
            self.assertEqual(self.raw_client(v, "an-%d" % v)[1], code_for(v, NOT_AUTH))
        with open(self.broker.conf_path) as f:
            text = f.read()
        self.assertIn("allow_anonymous = false", text)
        with open(self.broker.conf_path, "w") as f:
            f.write(text.replace("allow_anonymous = false", "allow_anonymous = true"))
        self.sighup()
        for v in VERSIONS:
            self.raw_ok(v, "an2-%d" % v)
            self.raw_ok(v, "an3-%d" % v, "stranger", "pw")
            self.assertEqual(self.raw_client(v, "an4-%d" % v, "alice", "bad")[1], code_for(v, BAD))


if __name__ == "__main__":
    nmq.main()
