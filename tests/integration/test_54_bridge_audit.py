#!/usr/bin/python3
"""54: bridge set-ups as NanoMQ users bring them.

* A legacy flat file (`--old_conf`) with NanoMQ's numbered bridge lists
  (`forwards.N.*`, `subscription.N.*`, `subscription.N.topic`) and the
  older `forwards=a/#,b/#`: the lists become the arrays, and the bridge
  forwards and subscribes with them (a real remote, Debian's mosquitto).
* `bridges.mqtt.cache` beside a `sqlite` section: the cache is kept in
  the sqlite section's database; the cache's own directory and size are
  ignored, and the start says so (warning) instead of leaving the user to
  look for a file that never comes.
* With the store, client ids beginning with "$bridge/" (the key of the
  bridges' cache rows) are refused.
* TLS to mosquitto by IP address: the certificate's iPAddress names are
  checked (the right CA is accepted, another address or CA refused, with
  a warning that says why).
* A message from the remote is acked to it only once what routing it
  wrote to the store is committed (kill -9 on a slow disk)."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import nmq
import nmq_ops
from bridge_util import Mosquitto, first_order
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for


CERTS = None


def setUpModule():
    global CERTS
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("bridges of our broker only")
    nmq_ops.nanomq_bin()
    if shutil.which("mosquitto") is None:
        raise unittest.SkipTest("Debian's mosquitto is needed as the remote broker")
    CERTS = tempfile.mkdtemp(prefix="nmq-bridge-pki-")
    subprocess.run(["bash", os.path.join(nmq_ops.SRC, "scripts", "gen-certs.sh"), CERTS],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.chmod(CERTS, 0o755)
    for f in os.listdir(CERTS):
        os.chmod(os.path.join(CERTS, f), 0o644)  # mosquitto drops root


def tearDownModule():
    if CERTS and not nmq.KEEP_TMP:
        shutil.rmtree(CERTS, ignore_errors=True)


class TestBridgeAudit(OpsTestCase):

    def test_old_conf_numbered_lists(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("up/#", 1)
        port = free_port()
        old = inst.write("old.conf", (
            "url=nmq-tcp://127.0.0.1:%d\n"
            "log.to=console\nlog.level=info\n"
            "bridge.mqtt.emqx.bridge_mode=true\n"
            "bridge.mqtt.emqx.address=mqtt-tcp://127.0.0.1:%d\n"
            "bridge.mqtt.emqx.proto_ver=4\n"
            "bridge.mqtt.emqx.clientid=old_bridge\n"
            "bridge.mqtt.emqx.keepalive=60\n"
            "bridge.mqtt.emqx.clean_start=false\n"
            "bridge.mqtt.emqx.forwards.2.remote_topic=\n"
            "bridge.mqtt.emqx.forwards.2.local_topic=up/b\n"
            "bridge.mqtt.emqx.forwards.1.remote_topic=up/renamed\n"
            "bridge.mqtt.emqx.forwards.1.local_topic=local/a\n"
            "bridge.mqtt.emqx.forwards.1.qos=1\n"
            "bridge.mqtt.emqx.subscription.1.topic=down/#\n"
            "bridge.mqtt.emqx.subscription.1.qos=1\n"
            "bridge.sqlite.enable=true\n"
            "bridge.sqlite.mounted_file_path=%s/\n" % (port, m.port, inst.tmp)))
        r = inst.run(["start", "--old_conf", old, "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.start_broker(inst, ["start", "--old_conf", old], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        self.assertRegex(inst.output(), r"forwards=2 subscriptions=1 cache=on")
        local = self.client(port, "local", version=5)
        local.connect()
        local.subscribe("down/#", 1)
        for i in range(5):
            local.publish("local/a", b"a%d" % i, qos=1)
            local.publish("up/b", b"b%d" % i, qos=1)
        wait_for(lambda: len(col.received) >= 10, 10)
        with col._lock:
            got = [(x.topic, x.payload) for x in col.received]
        self.assertEqual(first_order([p for t, p in got if t == "up/renamed"]),
                         [b"a%d" % i for i in range(5)])
        self.assertEqual(first_order([p for t, p in got if t == "up/b"]),
                         [b"b%d" % i for i in range(5)])
        # The subscription (subscription.1.topic) brings the remote's
        # messages here.
        rp = self.client(m.port, "rpub", version=5)
        rp.connect()
        rp.publish("down/cmd", b"do", qos=1)
        msg = local.wait_message(timeout=5)
        self.assertIsNotNone(msg)
        self.assertEqual((msg.topic, msg.payload), ("down/cmd", b"do"))
        self.assert_stops(inst)

        # NanoMQ 0.13: forwards=a/#,b/# (each forwarded as it is).
        old2 = inst.write("old2.conf", (
            "url=nmq-tcp://127.0.0.1:%d\n"
            "bridge.mqtt.emqx.address=mqtt-tcp://127.0.0.1:%d\n"
            "bridge.mqtt.emqx.forwards=up/a, up/b/#\n" % (port, m.port)))
        r = inst.run(["start", "--old_conf", old2, "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # A numbered element with an error is named by its index and line.
        old3 = inst.write("old3.conf", (
            "url=nmq-tcp://127.0.0.1:%d\n"
            "bridge.mqtt.emqx.address=mqtt-tcp://127.0.0.1:%d\n"
            "bridge.mqtt.emqx.forwards.1.local_topic=a\n"
            "bridge.mqtt.emqx.forwards.7.local_topic=b\n"
            "bridge.mqtt.emqx.forwards.7.qos=3\n" % (port, m.port)))
        r = inst.run(["start", "--old_conf", old3, "--test"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("old3.conf:5: bridges.mqtt.emqx.forwards[1].qos", r.stderr)

    def test_cache_beside_sqlite(self):
        inst = self.instance()
        port = free_port()
        db = inst.path("db")
        cache = inst.path("cache")
        conf = inst.conf(port, extra=(
            "sqlite { mounted_file_path = \"%s\" }\n"
            "bridges.mqtt.cache { mounted_file_path = \"%s\", disk_cache_size = 500 }\n"
            "bridges.mqtt.b { server = \"mqtt-tcp://127.0.0.1:%d\", forwards = "
            "[{ local_topic = \"x/#\", remote_topic = \"\" }] }\n" % (db, cache, free_port())))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        out = inst.output()
        self.assertRegex(out, r"warn .*key=bridges.mqtt.cache.mounted_file_path value=%s "
                              r"event=ignored" % cache)
        self.assertRegex(out, r"warn .*key=bridges.mqtt.cache.disk_cache_size value=500 "
                              r"event=ignored")
        self.assertTrue(os.path.exists(os.path.join(db, "nanomq.db")))
        self.assertFalse(os.path.exists(os.path.join(cache, "nanomq.db")))
        self.assert_stops(inst)

    # The store keys a bridge's cache rows by "$bridge/<name>": a client
    # with such an id had its persistent queue read back by the bridge
    # after a restart and forwarded to the remote (topics no forward
    # names). With the store, such ids are refused.
    def test_bridge_client_id_prefix_refused(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        port = free_port()
        conf = inst.conf(port, extra=(
            "sqlite { mounted_file_path = \"%s\" }\n"
            "bridges.mqtt.f { server = \"mqtt-tcp://127.0.0.1:%d\", forwards = "
            "[{ local_topic = \"up/#\", remote_topic = \"\" }] }\n" % (inst.path("db"), m.port)))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        for version, rc in ((5, 0x85), (4, 2)):
            r = nmq.RawClient(port, version)
            self.addCleanup(r.close)
            ack = r.connect("$bridge/f", clean=False)
            self.assertEqual(ack.rc, rc)
            r.expect_closed()
        self.assertIn("event=client_id_refused reason=reserved_prefix", inst.output())
        self.assert_stops(inst)

    # Older NanoMQ files write a forward as its filter alone and a
    # subscription's filter as `topic`: they were refused ("expected an
    # object") and ignored ("unknown key"), so the broker did not start.
    def test_older_nanomq_list_forms(self):
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        port = free_port()
        conf = inst.conf(port, extra=(
            'bridges.mqtt.old {\n server = "mqtt-tcp://127.0.0.1:%d"\n proto_ver = 4\n'
            ' forwards = ["up/#", "more/#"]\n'
            ' subscription = [{ topic = "down/#", qos = 1 }]\n}\n' % m.port))
        r = inst.run(["start", "--conf", conf, "--test"])
        self.assertEqual((r.returncode, "warning" in r.stderr), (0, False), r.stderr)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        remote = self.client(m.port, "remote")
        remote.connect()
        remote.subscribe("#", 1)
        local = self.client(port, "local")
        local.connect()
        local.subscribe("down/#", 1)
        time.sleep(0.3)  # the bridge's SUBSCRIBE is in place
        local.publish("up/1", b"u", qos=1)
        got = remote.wait_message(timeout=5)
        self.assertEqual((got.topic, got.payload), ("up/1", b"u"))
        remote.publish("down/2", b"d", qos=1)
        got = local.wait_message(timeout=5)
        self.assertEqual((got.topic, got.payload), ("down/2", b"d"))

    # Two bridges with one clientid on one remote take the session from
    # each other for ever (seen: 8 link_up in 8 s against mosquitto): the
    # check warns. Another server, or the default clientids, do not.
    def test_same_clientid_same_server_warned(self):
        inst = self.instance()
        port = free_port()
        warn = 'clientid "gw" and server are those of bridge a'
        for srv_b, cid, warned in (("127.0.0.1:1883", 'clientid = "gw"', True),
                                   ("127.0.0.1:1884", 'clientid = "gw"', False),
                                   ("127.0.0.1:1883", "", False)):
            conf = inst.conf(port, extra=(
                'bridges.mqtt.a { server = "mqtt-tcp://127.0.0.1:1883"\n %s }\n'
                'bridges.mqtt.b { server = "mqtt-tcp://%s"\n %s }\n' % (cid, srv_b, cid)))
            r = inst.run(["start", "--conf", conf, "--test"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(warn in r.stderr, warned, r.stderr)

    # TLS follows the server URL: ssl files beside only mqtt-tcp:// URLs
    # (a NanoMQ habit is `ssl { enable = true ... }`) made a plain link to
    # a TLS port, seen only as failed connections. Now the check warns;
    # a tls+mqtt-tcp:// failover server is TLS, so no warning then.
    def test_ssl_files_without_tls_url_warned(self):
        inst = self.instance()
        port = free_port()
        ssl = 'ssl { enable = true, cacertfile = "%s" }' % inst.path("ca.pem")
        warn = "ssl files are set but no server is tls+mqtt-tcp://"
        for hybrid, warned in (("", True), ('hybrid_servers = ["tls+mqtt-tcp://127.0.0.1:8883"]', False)):
            conf = inst.conf(port, extra='bridges.mqtt.t {\n server = "mqtt-tcp://127.0.0.1:1883"\n'
                             ' %s\n %s\n}\n' % (ssl, hybrid))
            r = inst.run(["start", "--conf", conf, "--test"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(warn in r.stderr, warned, r.stderr)

    # TLS to Debian's mosquitto by IP address, as the certificates of
    # scripts/gen-certs.sh allow (subjectAltName IP:127.0.0.1): mbed TLS
    # 2.28 only matched DNS names, so the right CA was refused too. Now the
    # address must be one of the certificate's iPAddress names; a refusal
    # says why (the link alone only saw its connection end).
    def test_tls_to_mosquitto_by_address(self):
        inst0 = self.instance()
        tls_port = free_port()
        m = Mosquitto(inst0.tmp, extra=(
            "listener %d\ncafile %s/ca.crt\ncertfile %s/server.crt\nkeyfile %s/server.key\n"
            % (tls_port, CERTS, CERTS, CERTS)))
        self.addCleanup(m.stop)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("s/#", 1)
        cases = (("127.0.0.1", "ca.crt", None),
                 ("127.0.0.2", "ca.crt", "no iPAddress subjectAltName matches the address"),
                 ("127.0.0.1", "other-ca.crt", "not correctly signed"))
        for host, ca, refused in cases:
            with self.subTest(host=host, ca=ca):
                inst = self.instance()
                port = free_port()
                conf = inst.conf(port, extra=(
                    "bridges.mqtt.t { server = \"tls+mqtt-tcp://%s:%d\", proto_ver = 5\n"
                    "  keepalive = 5s, ssl { cacertfile = \"%s/%s\" }\n"
                    "  forwards = [{ local_topic = \"s/#\", remote_topic = \"\" }] }\n"
                    % (host, tls_port, CERTS, ca)))
                self.start_broker(inst, ["start", "--conf", conf], port=port)
                pub = self.client(port, "p")
                pub.connect()
                if refused is None:
                    self.assertTrue(inst.wait_output(r"event=link_up", timeout=10),
                                    inst.output()[-2000:])
                    pub.publish("s/1", b"secure", qos=1)
                    got = col.wait_message(timeout=5)
                    self.assertIsNotNone(got)
                    self.assertEqual(got.payload, b"secure")
                else:
                    self.assertTrue(inst.wait_output(
                        r"tls: server=%s event=handshake_failed reason=.*%s" % (host, refused),
                        timeout=10), inst.output()[-2000:])
                    self.assertNotIn("event=link_up", inst.output())
                    pub.publish("s/1", b"must-not-pass", qos=1)
                    col.expect_no_message(0.5)
                self.assert_stops(inst)

    # A message from the remote is acked (PUBACK, PUBREC) only once what
    # routing it wrote is committed: the remote forgets it at the ack. A
    # slow disk (tests/tools/slowsync.c) holds the commit while our
    # broker is killed -9; the remote (persistent bridge session) resends
    # what was not acked, and the offline persistent subscriber gets
    # every message.
    def test_inbound_acked_after_commit(self):
        shim = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(
            nmq_ops.nanomq_bin()))), "tests", "tools", "libnmq_slowsync.so")
        if not os.path.exists(shim):
            self.skipTest("slowsync shim not built")
        inst = self.instance()
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        port = free_port()
        db = inst.path("db")
        conf = inst.conf(port, extra=(
            "sqlite { mounted_file_path = \"%s\" }\n"
            "bridges.mqtt.f { server = \"mqtt-tcp://127.0.0.1:%d\", clean_start = false\n"
            "  keepalive = 5s, subscription = [{ remote_topic = \"down/#\", qos = 2 }] }\n"
            % (db, m.port)))
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        s = self.client(port, "offline-sub", clean=False)
        s.connect()
        s.subscribe("down/#", 2)
        s.disconnect()
        self.assert_stops(inst)
        slow = {"LD_PRELOAD": shim, "NMQ_SLOWSYNC_DIR": db, "NMQ_SLOWSYNC_MS": "400",
                "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        self.start_broker(inst, ["start", "--conf", conf], port=port, env=slow)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        rp = self.client(m.port, "remote-pub", version=5)
        rp.connect()
        want = set()
        for qos in (1, 2):
            for i in range(10):
                rp.publish("down/q%d" % qos, b"%d" % i, qos=qos)
                want.add(("down/q%d" % qos, b"%d" % i))
        inst.kill(signal.SIGKILL)  # before the slow commit
        inst.proc.wait(5)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=link_up", timeout=10), inst.output()[-2000:])
        s2 = self.client(port, "offline-sub", clean=False)
        s2.connect()
        wait_for(lambda: {(x.topic, x.payload) for x in list(s2.received)} >= want, 10)
        self.assertEqual({(x.topic, x.payload) for x in list(s2.received)}, want)
        self.assert_stops(inst)


if __name__ == "__main__":
    unittest.main(verbosity=2)
