#!/usr/bin/python3
"""60: "why was my message dropped?" (docs/compatibility.md, the drop log):
every message the broker discards and every request it refuses is counted
per reason, kept in a ring of recent events (time, reason, client id,
topic, QoS) and sampled into the log. These tests cause known drops and
refusals with real clients and check what the broker says about them."""

import json
import os
import re
import subprocess
import time
import unittest

import nmq
from nmq import BrokerTestCase, skip_on_mosquitto

HTTP_PORT = nmq.free_port()


def curl(path):
    """GET through curl; returns (status, body bytes)."""
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}",
                          "http://127.0.0.1:%d%s" % (HTTP_PORT, path)],
                         capture_output=True, timeout=20)
    body, _, code = out.stdout.rpartition(b"\n")
    return int(code), body


def drop_lines(broker, reason):
    """The sampled log lines of one reason, as dicts of their fields."""
    out = []
    for line in broker.log_text().splitlines():
        m = re.search(r"drops: reason=%s client_id=(\S*) topic=(\S*)(?: qos=(-?\d+))? "
                      r"count=(\d+)" % reason, line)
        if m:
            out.append({"client": m.group(1), "topic": m.group(2),
                        "qos": m.group(3), "count": int(m.group(4))})
    return out


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return pred()


@skip_on_mosquitto("the drop log is nanomq's")
class QueueFullTests(BrokerTestCase):
    CONF = ("mqtt.max_mqueue_len = 4\n"
            "http_server { port = %d, auth_type = no_auth }\n" % HTTP_PORT)

    def test_offline_queue_overflow_names_client_topic_and_qos(self):
        # A persistent session goes offline with a QoS 1 subscription; 10
        # QoS 1 messages for it overflow its queue of 4: 6 drops.
        sub = self.raw(4)
        sub.connect("parked", clean=False)
        sub.subscribe([("q/#", 1)])
        sub.disconnect()
        sub.expect_closed()
        self.broker.wait_disconnected("parked")  # offline now
        pub = self.paho("pub1")
        for i in range(10):
            pub.publish("q/%d" % i, b"x", qos=1).wait_for_publish(5)
        lines = wait_for(lambda: len(drop_lines(self.broker, "queue_full")) >= 6 and
                         drop_lines(self.broker, "queue_full"))
        self.assertEqual(len(lines), 6, lines)
        self.assertEqual([l["topic"] for l in lines], ["q/%d" % i for i in range(4, 10)])
        for l in lines:
            self.assertEqual((l["client"], l["qos"], l["count"]), ("parked", "1", 1))
        # The same events through the REST API, newest first.
        code, body = curl("/api/v4/drops")
        self.assertEqual(code, 200, body)
        j = json.loads(body)
        self.assertEqual(j["code"], 0)
        self.assertEqual(j["capacity"], 1024)
        self.assertEqual(j["counters"]["queue_full"], 6)
        self.assertEqual(j["counters"]["expired"], 0)
        qf = [e for e in j["data"] if e["reason"] == "queue_full"]
        self.assertEqual([e["topic"] for e in qf], ["q/%d" % i for i in range(9, 3, -1)])
        for e in qf:
            self.assertEqual((e["clientid"], e["qos"], e["count"]), ("parked", 1, 1))
            self.assertRegex(e["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        seqs = [e["seq"] for e in j["data"]]
        self.assertEqual(seqs, sorted(seqs, reverse=True))
        code, body = curl("/api/v4/drops?limit=2")
        self.assertEqual([e["topic"] for e in json.loads(body)["data"]], ["q/9", "q/8"])
        code, body = curl("/api/v4/drops?limit=x")
        self.assertEqual((code, json.loads(body)["code"]), (400, 108))
        # And through nanomq_cli, as an operator reads them.
        cli = os.environ.get("NANOMQ_CLI_BIN", "")
        if os.access(cli, os.X_OK):
            out = subprocess.run([cli, "drops", "-p", str(HTTP_PORT), "-n", "3"],
                                 capture_output=True, timeout=20)
            self.assertEqual(out.returncode, 0, out.stderr)
            j = json.loads(out.stdout)
            self.assertEqual(j["counters"]["queue_full"], 6)
            self.assertEqual([(e["reason"], e["clientid"], e["topic"], e["qos"])
                              for e in j["data"]],
                             [("queue_full", "parked", "q/%d" % i, 1) for i in (9, 8, 7)])
            out = subprocess.run([cli, "drops", "-p", str(nmq.free_port())],
                                 capture_output=True, timeout=20)
            self.assertEqual(out.returncode, 1)
            self.assertIn(b"cannot connect", out.stderr)
        # The four queued ones are still delivered when the client returns.
        back = self.raw(4)
        ack = back.connect("parked", clean=False)
        self.assertTrue(ack.session_present)
        got = back.expect_publishes(4)
        self.assertEqual([p.topic for p in got], ["q/0", "q/1", "q/2", "q/3"])


@skip_on_mosquitto("the drop log is nanomq's")
class RefusalTests(BrokerTestCase):
    CONF = "mqtt { max_subscriptions = 1, max_topic_length = 16 }"

    def test_refused_filters_are_recorded(self):
        c = self.raw(5)
        c.connect("subber")
        c.subscribe([("a/1", 1)])
        c.subscribe([("b/2", 2)])  # over max_subscriptions
        c.subscribe([("c/" + "x" * 20, 0)])  # over max_topic_length
        subs = wait_for(lambda: drop_lines(self.broker, "max_subscriptions"))
        self.assertEqual(subs, [{"client": "subber", "topic": "b/2", "qos": None, "count": 1}])
        tl = wait_for(lambda: drop_lines(self.broker, "topic_limit"))
        self.assertEqual(tl, [{"client": "subber", "topic": "c/" + "x" * 20, "qos": None,
                               "count": 1}])
        # The client itself is unaffected: its first subscription works.
        self.assert_broker_healthy()


if __name__ == "__main__":
    unittest.main()
