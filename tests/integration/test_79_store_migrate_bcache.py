#!/usr/bin/python3
"""79: a store file of schema version 1 with a bridge's backlog is migrated
at open (docs/persistence.md "Schema versions", decisions/0032).

data/store_v1_bridge_backlog.db is a genuine version 1 file: the broker of
version 1 (main at 1b926b3) ran with bridge "f" whose remote was down,
took 1,200 QoS 1 (q1/s) and 300 QoS 2 (q2/s) publishes into its offline
cache, and was stopped (SIGTERM). It was made by
    NANOMQ_BIN=<version 1 nanomq> /usr/bin/python3 test_79_store_migrate_bcache.py \\
        --make-fixture data/store_v1_bridge_backlog.db
Our broker opens it, moves the backlog to the bridges' cache table in one
transaction, and once the remote (Debian's mosquitto) is up the backlog
arrives complete and in order (QoS 2 exactly once), with nothing left in
the file afterwards."""

import os
import shutil
import sqlite3
import sys
import time
import unittest

import nmq
import nmq_ops
from bridge_util import Mosquitto, bridge_conf, first_order, health
from nmq import free_port
from nmq_ops import OpsTestCase, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "data", "store_v1_bridge_backlog.db")
N1, N2 = 1200, 300
PAD = b"." * 48


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("our broker's store only")
    nmq_ops.nanomq_bin()
    if shutil.which("mosquitto") is None:
        raise unittest.SkipTest("Debian's mosquitto is needed as the remote broker")


def conf_for(inst, port, remote_port):
    cache = ("bridges.mqtt.cache {\n disk_cache_size = 100000\n"
             " mounted_file_path = \"%s\"\n}\n" % inst.tmp)
    return inst.conf(port, extra=bridge_conf(
        "f", "mqtt-tcp://127.0.0.1:%d" % remote_port, 4, 2,
        '{ local_topic = "q1/#", remote_topic = "" },'
        '{ local_topic = "q2/#", remote_topic = "" }',
        extra="max_send_queue_len = 64") + cache)


class TestMigrateBridgeCache(OpsTestCase):

    def test_v1_backlog_drains_in_order(self):
        # Read as an immutable file: no -wal or -shm left beside the
        # fixture in the source tree.
        with sqlite3.connect("file:%s?immutable=1" % FIXTURE, uri=True) as db:
            self.assertEqual(db.execute("PRAGMA user_version").fetchone()[0], 1)
            self.assertEqual(db.execute(
                "SELECT COUNT(*) FROM queue WHERE cid = '$bridge/f'").fetchone()[0], N1 + N2)
        inst = self.instance()
        shutil.copy(FIXTURE, inst.path("nanomq.db"))
        m = Mosquitto(inst.tmp)
        self.addCleanup(m.stop)
        col = self.client(m.port, "collector", version=5)
        col.connect()
        col.subscribe("q1/#", 1)
        col.subscribe("q2/#", 2)
        port = free_port()
        conf = conf_for(inst, port, m.port)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        self.assertTrue(inst.wait_output(r"event=migrated to_version=\d+ bridge_cache_rows=%d"
                                         % (N1 + N2), timeout=5), inst.output()[-3000:])

        def done():
            with col._lock:
                got1 = {x.payload for x in col.received if x.topic == "q1/s"}
                got2 = [x for x in col.received if x.topic == "q2/s"]
            return len(got1) >= N1 and len(got2) >= N2
        wait_for(done, 30, step=0.2)
        time.sleep(0.5)  # late duplicates, if any
        with col._lock:
            got1 = [x.payload for x in col.received if x.topic == "q1/s"]
            got2 = [x.payload for x in col.received if x.topic == "q2/s"]
        want1 = [b"%d" % i + PAD for i in range(N1)]
        want2 = [b"%d" % i for i in range(N2)]
        self.assertEqual(first_order(got1), want1, "QoS 1: %d distinct of %d" % (
            len(set(got1)), N1))
        self.assertEqual(got2, want2, "QoS 2: %d received, want %d" % (len(got2), N2))
        # Drained: the acked rows are deleted (within a tick of the link).
        mon = self.client(port, "mon")
        mon.connect()
        mon.subscribe("$SYS/brokers/bridges/#", 0)
        h = health(mon, "f", timeout=10, pred=lambda h: h["backlog"] == 0)
        self.assertEqual((h or {}).get("backlog"), 0, h)
        self.assert_stops(inst)
        with sqlite3.connect(inst.path("nanomq.db")) as db:
            self.assertEqual(db.execute("PRAGMA user_version").fetchone()[0], 2)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM queue").fetchone()[0], 0)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM msgs").fetchone()[0], 0)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM bcache").fetchone()[0], 0)


def make_fixture(path):
    """Runs NANOMQ_BIN (a version 1 broker) with its remote down and fills
    its cache; writes the store file to path."""
    import signal
    inst = nmq_ops.Instance()
    try:
        port = free_port()
        dead = free_port()  # nothing listens there: the link stays down
        conf = conf_for(inst, port, dead)
        p = inst.start(["start", "--conf", conf], port=port)
        pub = nmq.PahoClient(port, "pub")
        pub.connect()
        for i in range(N1):
            pub.publish("q1/s", b"%d" % i + PAD, qos=1)
            if i < N2:
                pub.publish("q2/s", b"%d" % i, qos=2)
        pub.close()
        time.sleep(1.0)
        inst.kill(signal.SIGTERM)
        p.wait(15)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        shutil.copy(inst.path("nanomq.db"), path)
        with sqlite3.connect(path) as db:
            print("version", db.execute("PRAGMA user_version").fetchone()[0], "rows",
                  db.execute("SELECT COUNT(*) FROM queue").fetchone()[0])
    finally:
        inst.cleanup()
        inst.remove()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--make-fixture"]:
        make_fixture(sys.argv[2])
    else:
        unittest.main()
