#!/usr/bin/python3
"""53: transparent bridges (bridges.mqtt.<name>.transparent, docs/bridge.md):
the filters local clients subscribe to are subscribed on the remote broker
(Debian's mosquitto, whose log shows the SUBSCRIBE and UNSUBSCRIBE the
bridge sends), and unsubscribed when the last local subscription of the
filter goes; the set is subscribed again after the remote restarts (and a
filter subscribed while the link was down is sent on reconnect); a shared
subscription counts as its filter; '$' filters are not mirrored; a local
publish forwarded to the remote does not come back; sessions restored from
the durable store count; with a store, a filter mirrored before a kill -9
that no local session holds any more is unsubscribed after the restart."""

import os
import re
import shutil
import signal
import time
import unittest

import nmq
import nmq_ops
from bridge_util import Mosquitto, bridge_conf, need_mosquitto_remote
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for

GW = "tb-gw"  # the bridge's client id on the remote (bridge_conf: <name>-gw)


setUpModule = need_mosquitto_remote


class Remote(Mosquitto):
    """mosquitto logging every packet it receives."""

    def __init__(self, tmp, port=None):
        # stderr: unbuffered (stdout is written at exit only), and it goes
        # to the log file Mosquitto opens (emptied by a restart).
        super().__init__(tmp, extra="log_type all\nlog_dest stderr", port=port)
        self.path = os.path.join(tmp, "mosquitto-%d.log" % self.port)

    def text(self):
        try:
            with open(self.path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def subscribed(self):
        """(filter, qos) the bridge subscribed, in order."""
        # mosquitto logs "<client id> <qos> <filter>" per filter subscribed
        return [(f, int(q)) for q, f in
                re.findall(r"^\d+: %s (\d) (\S+)$" % GW, self.text(), re.M)]

    def unsubscribes(self):
        return len(re.findall(r"Received UNSUBSCRIBE from %s" % GW, self.text()))


class TransparentCase(OpsTestCase):

    def remote(self, inst, port=None):
        m = Remote(inst.tmp, port=port)
        self.addCleanup(m.stop)
        return m

    def broker(self, inst, remote_port, proto_ver=4, forwards="", extra="", conf_extra=""):
        port = free_port()
        conf = inst.conf(port, extra=bridge_conf(
            "tb", "mqtt-tcp://127.0.0.1:%d" % remote_port, proto_ver, 10, forwards, "",
            "  transparent = true\n" + extra) + conf_extra)
        proc = self.start_broker(inst, ["start", "--conf", conf], port=port)
        return port, proc

    def linked(self, inst, count=1, proc=None):
        hits = inst.wait_output(r"event=link_up", timeout=10, count=count, proc=proc)
        self.assertGreaterEqual(len(hits), count, "link not up:\n" + inst.output(proc)[-3000:])

    def wait_subscribed(self, m, flt, count=1, timeout=5.0):
        ok = wait_for(lambda: [s for s in m.subscribed() if s[0] == flt][count - 1:], timeout)
        self.assertTrue(ok, "the bridge did not subscribe %s %d time(s) on the remote:\n%s"
                        % (flt, count, m.text()[-2000:]))

    def remote_pub(self, m, topic, payload, qos=1):
        p = self.client(m.port, "rpub-%d" % time.monotonic_ns())
        p.connect()
        p.publish(topic, payload, qos=qos)
        p.disconnect()


class TestTransparent(TransparentCase):

    # One local subscriber: its filter is subscribed on the remote with its
    # QoS, and a message published there arrives. A second subscriber of the
    # same filter changes nothing; the remote filter stays while one local
    # subscription holds it, and goes with the last one (an UNSUBSCRIBE),
    # after which the remote's messages stop coming.
    def test_subscribe_follow_and_leave(self):
        inst = self.instance()
        m = self.remote(inst)
        port, proc = self.broker(inst, m.port)
        self.linked(inst)
        self.assertNotIn("key=transparent", inst.output(proc))
        a = self.client(port, "local-a")
        a.connect()
        a.subscribe("t/#", 1)
        self.wait_subscribed(m, "t/#")
        self.assertEqual([s for s in m.subscribed() if s[0] == "t/#"], [("t/#", 1)])
        self.remote_pub(m, "t/x", b"one")
        got = a.wait_message(timeout=5)
        self.assertIsNotNone(got, "nothing arrived from the remote")
        self.assertEqual((got.topic, got.payload, got.qos), ("t/x", b"one", 1))

        b = self.client(port, "local-b")
        b.connect()
        b.subscribe("t/#", 0)
        a.unsubscribe("t/#")
        time.sleep(0.5)
        self.assertEqual(m.unsubscribes(), 0, "unsubscribed while a local subscriber remains")
        # The highest local QoS went from 1 to 0: subscribed again at 0.
        self.wait_subscribed(m, "t/#", count=2)
        self.assertEqual(m.subscribed()[-1], ("t/#", 0))
        self.remote_pub(m, "t/y", b"two")
        got = b.wait_message(timeout=5)
        self.assertIsNotNone(got, "nothing arrived with one subscriber left")
        self.assertEqual((got.topic, got.payload), ("t/y", b"two"))
        a.expect_no_message(0.3)

        # '$' filters stay local.
        b.subscribe("$SYS/#", 0)
        b.disconnect()  # a clean session: its subscriptions go
        self.assertTrue(wait_for(lambda: m.unsubscribes() == 1, 5.0),
                        "no UNSUBSCRIBE on the remote:\n" + m.text()[-2000:])
        self.assertTrue(re.search(r"Received UNSUBSCRIBE from %s\n.*t/#" % GW, m.text()),
                        m.text()[-1500:])
        self.assertFalse([s for s in m.subscribed() if s[0].startswith("$")], m.subscribed())
        # The remote no longer sends t/...: a watcher of our bridge's
        # deliveries on the remote sees none (the remote logs each PUBLISH
        # it sends to the bridge).
        before = len(re.findall(r"Sending PUBLISH to %s" % GW, m.text()))
        self.remote_pub(m, "t/z", b"three")
        time.sleep(0.5)
        self.assertEqual(len(re.findall(r"Sending PUBLISH to %s" % GW, m.text())), before)
        c = self.client(port, "local-c")
        c.connect()
        c.subscribe("u/#", 0)
        self.wait_subscribed(m, "u/#")
        c.expect_no_message(0.3)  # t/z did not come

    # After the remote restarts (its sessions gone), every filter local
    # clients hold is subscribed again; one subscribed while the link was
    # down is sent on the reconnect; one left while it was down is not.
    def test_resubscribed_after_remote_restart(self):
        inst = self.instance()
        m = self.remote(inst)
        port, proc = self.broker(inst, m.port)
        self.linked(inst)
        a = self.client(port, "local-a")
        a.connect()
        a.subscribe("r/#", 2)
        b = self.client(port, "local-b")
        b.connect()
        b.subscribe("gone/#", 1)
        self.wait_subscribed(m, "r/#")
        self.wait_subscribed(m, "gone/#")
        m.stop()
        inst.wait_output(r"event=link_down", timeout=10, proc=proc)
        a.subscribe("late/+", 1)
        b.unsubscribe("gone/#")
        m2 = self.remote(inst, port=m.port)
        self.linked(inst, count=2, proc=proc)
        self.wait_subscribed(m2, "r/#")
        self.wait_subscribed(m2, "late/+")
        self.assertIn(("r/#", 2), m2.subscribed())
        self.assertFalse([s for s in m2.subscribed() if s[0] == "gone/#"], m2.subscribed())
        self.remote_pub(m2, "r/1", b"again", qos=2)
        self.remote_pub(m2, "late/2", b"late", qos=1)
        got = a.wait_messages(2, timeout=5)
        self.assertEqual(sorted((x.topic, x.payload) for x in got),
                         [("late/2", b"late"), ("r/1", b"again")])

    # A shared subscription $share/<g>/<f> is mirrored as <f>; its member
    # gets what the remote sends; the last member leaving unsubscribes.
    def test_shared_subscription(self):
        inst = self.instance()
        m = self.remote(inst)
        port, proc = self.broker(inst, m.port, proto_ver=5)
        self.linked(inst)
        s = self.client(port, "shared-1", version=5)
        s.connect()
        s.subscribe("$share/grp/s/#", 1)
        self.wait_subscribed(m, "s/#")
        self.assertFalse([x for x in m.subscribed() if "$share" in x[0]], m.subscribed())
        self.remote_pub(m, "s/k", b"shared")
        got = s.wait_message(timeout=5)
        self.assertIsNotNone(got, "nothing arrived through the shared subscription")
        self.assertEqual((got.topic, got.payload), ("s/k", b"shared"))
        s.unsubscribe("$share/grp/s/#")
        self.assertTrue(wait_for(lambda: m.unsubscribes() == 1, 5.0), m.text()[-2000:])

    # A bridge that also forwards the topics local clients subscribe to
    # does not bring a local publish back (v3.1.1: mosquitto knows the
    # bridge marker; v5: No Local on the mirrored subscription).
    def test_no_echo_of_local_publishes(self):
        for ver in (4, 5):
            with self.subTest(proto_ver=ver):
                inst = self.instance()
                m = self.remote(inst)
                port, proc = self.broker(
                    inst, m.port, proto_ver=ver,
                    forwards='{ local_topic = "e/#", remote_topic = "", qos = 1 }')
                self.linked(inst)
                rsub = self.client(m.port, "rsub")
                rsub.connect()
                rsub.subscribe("e/#", 1)
                local = self.client(port, "local-sub")
                local.connect()
                local.subscribe("e/#", 1)
                self.wait_subscribed(m, "e/#")
                pub = self.client(port, "local-pub")
                pub.connect()
                pub.publish("e/1", b"once", qos=1)
                got = rsub.wait_message(timeout=5)
                self.assertIsNotNone(got, "not forwarded to the remote")
                self.assertEqual(got.payload, b"once")
                got = local.wait_message(timeout=5)
                self.assertEqual(got.payload, b"once")
                local.expect_no_message(1.0)  # no echo through the remote
                # and what the remote publishes still comes
                self.remote_pub(m, "e/2", b"from-remote")
                got = local.wait_message(timeout=5)
                self.assertIsNotNone(got)
                self.assertEqual(got.payload, b"from-remote")

    # A persistent session restored from the durable store at start counts:
    # its filter is subscribed on the remote before its client comes back.
    def test_restored_session_counts(self):
        inst = self.instance()
        m = self.remote(inst)
        db = os.path.join(inst.tmp, "db")
        os.makedirs(db, exist_ok=True)
        store = ("sqlite {\n  enable = true\n  mounted_file_path = \"%s\"\n}\n" % db)
        port = free_port()
        conf = inst.conf(port, extra=store)
        proc = self.start_broker(inst, ["start", "--conf", conf], port=port)
        c = self.client(port, "keeper", clean=False)
        c.connect()
        c.subscribe("kept/#", 1)
        c.disconnect()
        proc.terminate()
        proc.wait(10)
        conf = inst.conf(port, extra=store + bridge_conf(
            "tb", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 10, "", "", "  transparent = true\n"))
        proc = self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.linked(inst, proc=proc)
        self.wait_subscribed(m, "kept/#")
        self.remote_pub(m, "kept/1", b"queued")
        time.sleep(0.5)
        c2 = self.client(port, "keeper", clean=False)
        c2.connect()
        got = c2.wait_message(timeout=5)
        self.assertIsNotNone(got, "the restored session got nothing from the remote")
        self.assertEqual((got.topic, got.payload), ("kept/1", b"queued"))

    # The last subscription of a filter also goes with a session taken over
    # by a clean start and with a session that expires: the remote filter
    # goes with it.
    def test_takeover_and_expiry(self):
        inst = self.instance()
        m = self.remote(inst)
        port, proc = self.broker(inst, m.port)
        self.linked(inst)
        old = self.client(port, "tk", clean=False)
        old.connect()
        old.subscribe("k/#", 1)
        self.wait_subscribed(m, "k/#")
        new = self.client(port, "tk", clean=True)
        new.connect()
        self.assertTrue(wait_for(lambda: m.unsubscribes() == 1, 5.0),
                        "no UNSUBSCRIBE after a clean-start takeover:\n" + m.text()[-2000:])
        self.assertTrue(re.search(r"Received UNSUBSCRIBE from %s\n.*k/#" % GW, m.text()))
        ex = self.client(port, "ex", version=5, clean=True,
                         conn_props={"SessionExpiryInterval": 1})
        ex.connect()
        ex.subscribe("x/#", 0)
        self.wait_subscribed(m, "x/#")
        ex.disconnect()
        time.sleep(0.3)
        self.assertEqual(m.unsubscribes(), 1, "unsubscribed before the session expired")
        self.assertTrue(wait_for(lambda: m.unsubscribes() == 2, 6.0),
                        "no UNSUBSCRIBE after the session expired:\n" + m.text()[-2000:])
        self.assertTrue(re.search(r"Received UNSUBSCRIBE from %s\n.*x/#" % GW, m.text()))

    # With a store, what was mirrored survives a kill -9: the remote keeps
    # a persistent session (clean_start = false) with the filters of
    # before, and after the restart the one no local session holds any
    # more is unsubscribed (the other, held by a persistent local session
    # restored from the store, is kept); the remote stops sending it.
    def test_stale_filters_unsubscribed_after_restart(self):
        inst = self.instance()
        m = self.remote(inst)
        db = os.path.join(inst.tmp, "db")
        os.makedirs(db, exist_ok=True)
        store = ("sqlite {\n  enable = true\n  mounted_file_path = \"%s\"\n}\n" % db)
        port, proc = self.broker(inst, m.port, extra="  clean_start = false\n",
                                 conf_extra=store)
        self.linked(inst, proc=proc)
        k = self.client(port, "keeper", clean=False)
        k.connect()
        k.subscribe("keep/#", 1)
        a = self.client(port, "a")
        a.connect()
        a.subscribe("drop/#", 1)
        self.wait_subscribed(m, "keep/#")
        self.wait_subscribed(m, "drop/#")
        k.disconnect()
        time.sleep(0.5)  # the rows commit (a group: milliseconds)
        proc.kill()
        proc.wait(5)
        self.assertEqual(m.unsubscribes(), 0, m.text()[-2000:])
        port, proc = self.broker(inst, m.port, extra="  clean_start = false\n",
                                 conf_extra=store)
        self.linked(inst, proc=proc)
        self.assertTrue(wait_for(lambda: m.unsubscribes() == 1, 5.0),
                        "the stale filter was not unsubscribed:\n" + m.text()[-3000:])
        self.assertTrue(re.search(r"Received UNSUBSCRIBE from %s\n.*drop/#" % GW, m.text()),
                        m.text()[-2000:])
        self.assertFalse(re.search(r"Received UNSUBSCRIBE from %s\n.*keep/#" % GW, m.text()))
        before = m.text().count("Sending PUBLISH to %s" % GW)
        self.remote_pub(m, "drop/1", b"d")
        self.remote_pub(m, "keep/1", b"k")
        k2 = self.client(port, "keeper", clean=False)
        k2.connect()
        got = k2.wait_message(timeout=5)
        self.assertIsNotNone(got, "the restored session got nothing from the remote")
        self.assertEqual((got.topic, got.payload), ("keep/1", b"k"))
        self.assertEqual(m.text().count("Sending PUBLISH to %s" % GW), before + 1,
                         "the remote still sends the stale filter:\n" + m.text()[-2000:])
        # The record follows the set: the next start unsubscribes nothing.
        k2.disconnect()
        time.sleep(0.5)
        proc.kill()
        proc.wait(5)
        port, proc = self.broker(inst, m.port, extra="  clean_start = false\n",
                                 conf_extra=store)
        self.linked(inst, proc=proc)
        self.wait_subscribed(m, "keep/#", count=3)
        time.sleep(0.5)
        self.assertEqual(m.unsubscribes(), 1, m.text()[-2000:])

    # A reload that switches transparent off unsubscribes what was
    # mirrored; switching it on again subscribes the current set.
    def test_reload_switches_it(self):
        inst = self.instance()
        m = self.remote(inst)
        port, proc = self.broker(inst, m.port)
        self.linked(inst)
        a = self.client(port, "local-a", clean=False)
        a.connect()
        a.subscribe("w/#", 1)
        self.wait_subscribed(m, "w/#")

        def conf(on):
            return nmq_ops.base_conf(port, inst.ipc_url, extra=bridge_conf(
                "tb", "mqtt-tcp://127.0.0.1:%d" % m.port, 4, 10, "", "",
                "  transparent = %s\n" % ("true" if on else "false")))
        inst.write("nanomq.conf", conf(False))
        inst.kill(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: m.unsubscribes() == 1, 10.0),
                        "no UNSUBSCRIBE after transparent went off:\n" + m.text()[-2000:])
        self.linked(inst, count=2)
        inst.write("nanomq.conf", conf(True))
        inst.kill(signal.SIGHUP)
        self.linked(inst, count=3)
        self.wait_subscribed(m, "w/#", count=2)
        self.remote_pub(m, "w/1", b"back")
        got = a.wait_message(timeout=5)
        self.assertIsNotNone(got, "nothing arrived after transparent came back")
        self.assertEqual(got.payload, b"back")


if __name__ == "__main__":
    unittest.main(verbosity=2)
