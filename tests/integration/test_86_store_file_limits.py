#!/usr/bin/python3
"""86: the durable store against the limits of the files it writes, as a
user sets them up.

* A file size limit (`ulimit -f`, RLIMIT_FSIZE): a write past it fails
  with EFBIG, and the kernel's SIGXFSZ, whose default action kills the
  process, must not end the broker (it did: "File size limit exceeded").
  The commit that could not be written fails like one on a full disk: its
  messages get no success ack, the broker goes on, and after a restart
  without the limit exactly the acknowledged messages are there."""

import os
import resource
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmq  # noqa: E402
from nmq import RawClient  # noqa: E402
from test_70_store import StoreCase  # noqa: E402


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq store configuration")


class TestFileSizeLimit(StoreCase):
    LIMIT = 1 << 20  # bytes, for every file the broker writes

    def start_limited(self):
        # The child inherits the limit (subprocess restores SIGXFSZ to its
        # default action before the exec, as a shell does).
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.LIMIT, hard))
        try:
            return self.start()
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    def test_no_success_ack_past_the_limit_and_no_crash(self):
        b = self.start_limited()
        sub = self.client(b, "offline")
        sub.connect()
        sub.subscribe("fsz/#", qos=1)
        sub.disconnect()
        pub = RawClient(b.port, 5)
        self.addCleanup(pub.close)
        self.assertEqual(pub.connect("filler").rc, 0)
        acked, refused = [], 0
        pad = b"x" * 4000
        for i in range(400):  # ~1.6 MB into a 1 MB limit
            a = pub.publish("fsz/1", b"%d|" % i + pad, qos=1, timeout=10)
            if a.rc == 0:
                acked.append(i)
            else:
                self.assertEqual(a.rc, 0x80, "reason of a refused PUBACK")
                refused += 1
                if refused >= 20:
                    break
        self.assertTrue(b.alive(), "the broker died past the file size limit:\n"
                        + b.log_tail(20))
        self.assertGreater(refused, 0, "the limit was never reached")
        self.assertIn("event=commit_failed", b.log_text())
        pub.close()
        self.assertEqual(b.stop(), [])

        b2 = self.start()
        c = self.client(b2, "offline")
        c.connect()
        got = c.wait_messages(len(acked), timeout=10)
        ids = [int(m.payload.split(b"|")[0]) for m in got]
        self.assertEqual(ids, acked)


if __name__ == "__main__":
    unittest.main(verbosity=2)
