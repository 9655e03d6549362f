#!/usr/bin/python3
"""A store file damaged inside its rows, where SQLite's quick_check at open
does not look (a byte changed in a stored message; an index that no longer
matches its table): the broker starts, sends its clients only packets they
can parse, and keeps storing."""

import os
import re
import sqlite3
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq_ops import wait_for  # noqa: E402
from test_70_store import StoreCase  # noqa: E402
from test_84_store_held_crash import Sub  # noqa: E402


class TestDamagedMessageRow(StoreCase):
    def test_properties_not_valid_any_more(self):
        b = self.start()
        sub = self.client(b, "dmg-sub")
        sub.connect()
        sub.subscribe("dmg/#", qos=1)
        sub.disconnect()
        pub = self.client(b, "dmg-pub", clean=True, expiry=0)
        pub.connect()
        for i in range(3):
            pub.publish("dmg/%d" % i, b"m%d" % i, qos=1,
                        props={"ContentType": "text/plain", "UserProperty": [("k", "v")]})
        pub.disconnect()
        self.assertEqual(b.stop(), [])
        db = sqlite3.connect(os.path.join(self.db_dir, "nanomq.db"))
        rows = db.execute("select id, props from msgs order by id").fetchall()
        self.assertEqual(len(rows), 3)
        # The middle one: its content type no longer valid UTF-8.
        mid, props = rows[1]
        bad = bytearray(props)
        bad[bad.index(b"text") + 1] = 0xC5
        db.execute("update msgs set props = ? where id = ?", (bytes(bad), mid))
        db.commit()
        db.close()

        b2 = self.start()
        raw = nmq.RawClient(b2.port, version=5)
        self.clients.append(raw)
        ack = raw.connect("dmg-sub", clean=False, props={"SessionExpiryInterval": 3600})
        self.assertTrue(ack.session_present)
        got = raw.expect_publishes(3, ack=True)
        self.assertEqual([p.payload for p in got], [b"m0", b"m1", b"m2"])
        self.assertEqual(got[0].props.get("ContentType"), "text/plain")
        self.assertIsNone(got[1].props.get("ContentType"))
        self.assertRegex(b2.log_text(), r"error .*event=message_properties_damaged msg_id=%d"
                         % mid)


    def test_topic_not_valid_any_more(self):
        # A topic no longer valid UTF-8, or with a wildcard: the message is
        # dropped as an expired one would be (its row deleted), instead of
        # a PUBLISH that closes the subscriber's connection at each resend.
        for bad in (b"dmg/\xc5", b"dmg/#"):
            with self.subTest(topic=bad):
                for f in os.listdir(self.db_dir):
                    os.unlink(os.path.join(self.db_dir, f))
                b = self.start()
                sub = self.client(b, "dmgt-sub", version=4)
                sub.connect()
                sub.subscribe("dmg/#", qos=1)
                sub.disconnect()
                pub = self.client(b, "dmgt-pub", version=4, clean=True, expiry=0)
                pub.connect()
                for i in range(3):
                    pub.publish("dmg/%d" % i, b"m%d" % i, qos=1)
                pub.disconnect()
                self.assertEqual(b.stop(), [])
                path = os.path.join(self.db_dir, "nanomq.db")
                db = sqlite3.connect(path)
                db.execute("update msgs set topic = cast(? as text) where topic = 'dmg/1'", (bad,))
                db.commit()
                db.close()

                b2 = self.start()
                raw = nmq.RawClient(b2.port, version=4)
                self.clients.append(raw)
                self.assertTrue(raw.connect("dmgt-sub", clean=False).session_present)
                got = raw.expect_publishes(2, ack=True)
                self.assertEqual([p.payload for p in got], [b"m0", b"m2"])
                raw.expect_nothing(types=[nmq.PUBLISH])
                raw.disconnect()
                self.assertRegex(b2.log_text(), r"error .*event=message_topic_damaged")
                self.assertEqual(b2.stop(), [])
                db = sqlite3.connect(path)
                self.assertEqual(db.execute("select count(*) from queue").fetchone()[0], 0)
                db.close()


class TestIndexNotMatchingItsTable(StoreCase):
    """Index entries missing for rows of their table: quick_check passes,
    and the first delete of those rows fails its whole group commit. The
    store rebuilds its indexes then, so that the groups after it commit
    (before, every group deleting one of those rows failed: acked
    messages came back at each restart, and a publisher whose PUBLISH
    went into such a group was not acked)."""

    def test_indexes_rebuilt(self):
        b = self.start()
        sub = self.client(b, "ix-sub", version=4)
        sub.connect()
        sub.subscribe("ix/#", qos=1)
        sub.disconnect()
        pub = self.client(b, "ix-pub", clean=True, expiry=0)
        pub.connect()
        for i in range(5):
            pub.publish("ix/%d" % i, b"m%d" % i, qos=1, props={"MessageExpiryInterval": 3600})
        pub.disconnect()
        self.assertEqual(b.stop(), [])
        # The message rows change while their expiry index is not told.
        path = os.path.join(self.db_dir, "nanomq.db")
        db = sqlite3.connect(path)
        sql = db.execute("select sql from sqlite_schema where name = 'msgs_expiry'").fetchone()[0]
        db.execute("pragma writable_schema = on")
        db.execute("update sqlite_schema set sql = ? where name = 'msgs_expiry'",
                   (sql + " AND 0",))
        db.commit()
        db.close()
        db = sqlite3.connect(path)
        db.execute("update msgs set expiry_wall_ms = expiry_wall_ms + 1")
        db.execute("pragma writable_schema = on")
        db.execute("update sqlite_schema set sql = ? where name = 'msgs_expiry'", (sql,))
        db.commit()
        db.close()
        db = sqlite3.connect(path)
        self.assertEqual(db.execute("pragma quick_check").fetchall(), [("ok",)])
        self.assertNotEqual(db.execute("pragma integrity_check").fetchall(), [("ok",)])
        db.close()

        b2 = self.start()
        self.assertNotIn("event=recovered", b2.log_text())
        sub2 = self.client(b2, "ix-sub", version=4)
        sub2.connect()
        self.assertTrue(sub2.session_present)
        self.assertEqual([m.payload for m in sub2.wait_messages(5)],
                         [b"m%d" % i for i in range(5)])
        self.assertTrue(wait_for(lambda: "event=indexes_rebuilt" in b2.log_text()),
                        b2.log_tail(20))
        # The store commits again: new messages are stored and acked, and
        # their acks delete their rows.
        pub2 = self.client(b2, "ix-pub2", clean=True, expiry=0)
        pub2.connect()
        for i in range(5, 8):
            pub2.publish("ix/%d" % i, b"m%d" % i, qos=1, props={"MessageExpiryInterval": 3600})
        self.assertEqual([m.payload for m in sub2.wait_messages(3)],
                         [b"m%d" % i for i in range(5, 8)])
        sub2.disconnect()
        pub2.disconnect()
        self.assertEqual(len(re.findall("event=commit_failed", b2.log_text())), 1,
                         b2.log_tail(20))
        self.assertEqual(b2.stop(), [])
        db = sqlite3.connect(path)
        self.assertEqual(db.execute("pragma integrity_check").fetchall(), [("ok",)])
        db.close()
        # After a restart only what the failed group held comes again.
        b3 = self.start()
        sub3 = self.client(b3, "ix-sub", version=4)
        sub3.connect()
        self.assertTrue(sub3.session_present)
        again = []
        while True:
            m = sub3.wait_message(timeout=1.0)
            if m is None:
                break
            again.append(m.payload)
        self.assertFalse(set(again) & {b"m5", b"m6", b"m7"}, again)


def break_expiry_index(path):
    """Leaves the message rows' expiry index not matching its table: every
    row with an expiry changes while the index is not told."""
    db = sqlite3.connect(path)
    sql = db.execute("select sql from sqlite_schema where name = 'msgs_expiry'").fetchone()[0]
    db.execute("pragma writable_schema = on")
    db.execute("update sqlite_schema set sql = ? where name = 'msgs_expiry'", (sql + " AND 0",))
    db.commit()
    db.close()
    db = sqlite3.connect(path)
    db.execute("update msgs set expiry_wall_ms = expiry_wall_ms + 1")
    db.execute("pragma writable_schema = on")
    db.execute("update sqlite_schema set sql = ? where name = 'msgs_expiry'", (sql,))
    db.commit()
    db.close()
    db = sqlite3.connect(path)
    ok = db.execute("pragma quick_check").fetchall() == [("ok",)]
    bad = db.execute("pragma integrity_check").fetchall() != [("ok",)]
    db.close()
    return ok and bad


class TestHeldRowsOverADamagedIndex(StoreCase):
    """Held rows left by a kill -9 (decisions/0045) are restored at open;
    restoring them deletes the message rows all of whose deliveries were
    acked, which fails on a damaged index: the broker did not start
    ("restoring held rows: not an error"). Now the indexes are rebuilt and
    the restore runs again."""

    def test_starts_and_restores(self):
        b = self.start()
        # (They ack once all 20 are there: acked at once, a delivery can
        # cancel out with its row before the store takes it, and no
        # message row is left to delete at the restore.)
        fast = [Sub("hx-fast-%d" % i, 5, False) for i in range(4)]
        for s in fast:
            s.connect(b.port, subscribe=True)
            s.start()
        # The slow one never acks, and wants only half of the messages:
        # the other half is acked by all its subscribers, in generations
        # the slow one keeps held.
        slow = Sub("hx-slow", 5, False)
        slow.connect(b.port, subscribe=False)
        slow.raw.subscribe([("held/b/#", 1)])
        slow.start()
        pub = self.client(b, "hx-pub", clean=True, expiry=0)
        pub.connect()
        infos = [pub.publish("held/%s/%d" % ("ab"[i % 2], i), b"m%d" % i, qos=1, wait=False,
                             props={"MessageExpiryInterval": 3600}) for i in range(20)]
        for info in infos:
            self.assertTrue(pub._ev(pub._acks, info.mid)[0].wait(5))
        self.assertTrue(wait_for(lambda: all(len(s.pkts) == 20 for s in fast)))
        for s in fast:
            for p in s.pkts:
                s.raw.ack(p)
        time.sleep(0.15)  # (the acks committed; the generations are 500 ms old at most)
        self.kill9(b)
        for s in fast + [slow]:
            s.halt()
        path = os.path.join(self.db_dir, "nanomq.db")
        db = sqlite3.connect(path)
        self.assertGreater(db.execute("select count(*) from held").fetchone()[0], 0)
        db.close()
        self.assertTrue(break_expiry_index(path))

        b2 = self.start()
        text = b2.log_text()
        self.assertNotIn("event=recovered", text)
        self.assertIn("event=indexes_rebuilt", text)
        self.assertIn("event=held_restored", text)
        slow.got = []
        self.assertTrue(slow.connect(b2.port, subscribe=False).session_present)
        slow.acks = True
        slow.start()
        want = [b"m%d" % i for i in range(1, 20, 2)]
        self.assertTrue(wait_for(lambda: len(slow.got) >= len(want)), slow.got)
        slow.halt()
        self.assertEqual(slow.got, want)


class TestDamagedWal(StoreCase):
    """The write-ahead log overwritten at its start: SQLite takes it for an
    empty log, so what it held is gone; that is said (logged at error,
    the log moved aside for inspection), not silent."""

    def test_wal_header_overwritten(self):
        b = self.start()
        c = self.client(b, "wal-sub")
        c.connect()
        c.subscribe("w/#", qos=1)
        c.disconnect()
        self.kill9(b)  # (no checkpoint at a kill: the session is in the log)
        wal = os.path.join(self.db_dir, "nanomq.db-wal")
        size = os.path.getsize(wal)
        self.assertGreater(size, 32)
        with open(wal, "r+b") as f:
            f.write(os.urandom(64))
        b2 = self.start()
        self.assertRegex(b2.log_text(), r"error .*event=wal_damaged bytes=%d moved_to=\S*"
                         r"nanomq\.db-wal\.damaged-" % size)
        moved = [f for f in os.listdir(self.db_dir) if f.startswith("nanomq.db-wal.damaged-")]
        self.assertEqual(len(moved), 1, os.listdir(self.db_dir))
        # The store works on.
        c2 = self.client(b2, "wal-sub2")
        c2.connect()
        c2.subscribe("w/#", qos=1)
        c2.disconnect()
        self.assertEqual(b2.stop(), [])
        b3 = self.start()
        self.assertNotIn("wal_damaged", b3.log_text())
        c3 = self.client(b3, "wal-sub2")
        c3.connect()
        self.assertTrue(c3.session_present)


if __name__ == "__main__":
    unittest.main(verbosity=2)
