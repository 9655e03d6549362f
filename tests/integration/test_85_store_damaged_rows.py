#!/usr/bin/python3
"""A store file damaged inside its rows, where SQLite's quick_check at open
does not look (a byte changed in a stored message; an index that no longer
matches its table): the broker starts, sends its clients only packets they
can parse, and keeps storing."""

import os
import sqlite3
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from test_70_store import StoreCase  # noqa: E402


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
