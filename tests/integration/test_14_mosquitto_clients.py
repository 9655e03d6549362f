#!/usr/bin/python3
"""14: interoperability with the mosquitto command line clients
(mosquitto-clients 2.0.11), MQTT 3.1.1 and 5.0."""

import os
import signal
import tempfile
import time

import nmq
from nmq import BrokerTestCase, MosquittoSub, mosquitto_pub

VERSIONS = (4, 5)


class MosquittoClientTests(BrokerTestCase):

    def sub(self, topics, version, **kw):
        s = MosquittoSub(self.port, topics, version=version, **kw)
        self.addCleanup(s.close)
        return s.wait_subscribed()

    def pub(self, topic, message=None, version=4, **kw):
        res = mosquitto_pub(self.port, topic, message, version=version, **kw)
        self.assertEqual(res.returncode, 0, "mosquitto_pub failed: %r" % res.stderr)
        return res

    # 3.1.1 [MQTT-3.8.4-6] / 5.0 [MQTT5-3.8.4-8]: delivered QoS = min(published,
    # granted), seen through mosquitto_sub's %q.
    def test_pub_sub_qos(self):
        for v in VERSIONS:
            for sq in (0, 1, 2):
                with self.subTest(version=v, sub_qos=sq):
                    t = "mc/q/%d/%d" % (v, sq)
                    s = self.sub(t, v, qos=sq)
                    for pq in (0, 1, 2):
                        self.pub(t, "m%d" % pq, version=v, qos=pq)
                    lines = s.get(3)
                    got = sorted(tuple(line.split("|")[i] for i in (3, 1)) for line in lines)
                    self.assertEqual(got, sorted(("m%d" % pq, str(min(pq, sq))) for pq in (0, 1, 2)))

    # 3.1.1 [MQTT-3.3.1-5]/[MQTT-3.3.1-8]/[MQTT-3.3.1-10] and 5.0
    # [MQTT5-3.3.1-5]/[MQTT5-3.3.1-6]: retained with -r, delivered with the
    # retain flag; cleared by an empty retained message (-r -n).
    def test_retained(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                t = "mc/ret/%d" % v
                self.pub(t, "stored", version=v, qos=1, retain=True)
                s = self.sub(t, v, qos=1, count=1)
                line = s.get(1)[0]
                self.assertEqual(line, "%s|1|1|stored" % t)
                self.pub(t, None, version=v, qos=1, retain=True, extra=["-n"])
                s2 = self.sub(t, v, qos=1)
                s2.no_more(0.8)

    # 3.1.1 [MQTT-4.6.0-6] / 5.0 [MQTT5-4.6.0-5]: 100 lines published with
    # mosquitto_pub -l arrive once each, in order.
    def test_many_lines_in_order(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                t = "mc/lines/%d" % v
                s = self.sub(t, v, qos=1, fmt="%p")
                data = "".join("line-%03d\n" % i for i in range(100)).encode()
                self.pub(t, None, version=v, qos=1, extra=["-l"], input_bytes=data)
                self.assertEqual(s.get(100, timeout=10), ["line-%03d" % i for i in range(100)])
                s.no_more(0.3)

    # 5.0 [MQTT5-3.3.2-4]/[MQTT5-3.3.2-15]/[MQTT5-3.3.2-16]/[MQTT5-3.3.2-17]/
    # [MQTT5-3.3.2-18]/[MQTT5-3.3.2-20]/[MQTT5-3.3.2-6]: properties set with
    # mosquitto_pub -D reach mosquitto_sub unchanged.
    def test_v5_properties_roundtrip(self):
        s = self.sub("mc/props", 5, qos=1, fmt="P=%P|C=%C|R=%R|D=%D|E=%E|F=%F")
        self.pub("mc/props", "body", version=5, qos=1, extra=[
            "-D", "publish", "user-property", "k1", "v1",
            "-D", "publish", "user-property", "k2", "v2",
            "-D", "publish", "user-property", "k1", "v3",
            "-D", "publish", "content-type", "text/plain",
            "-D", "publish", "response-topic", "mc/reply",
            "-D", "publish", "correlation-data", "corr-1",
            "-D", "publish", "message-expiry-interval", "60",
            "-D", "publish", "payload-format-indicator", "1"])
        f = dict(kv.split("=", 1) for kv in s.get(1)[0].split("|"))
        self.assertEqual(f["P"], "k1:v1 k2:v2 k1:v3")
        self.assertEqual((f["C"], f["R"], f["D"], f["F"]), ("text/plain", "mc/reply", "corr-1", "1"))
        self.assertIn(f["E"], ("59", "60"))

    # 3.1.1 [MQTT-3.1.2-8] / 5.0 [MQTT5-3.1.2-8]: the will of a killed
    # mosquitto_sub is published.
    def test_will_of_killed_client(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                watcher = self.sub("mc/will/#", v, qos=1, fmt="%t|%p")
                doomed = self.sub("mc/none", v, extra=["--will-topic", "mc/will/%d" % v,
                                                      "--will-payload", "bye-%d" % v,
                                                      "--will-qos", "1"])
                doomed.proc.send_signal(signal.SIGKILL)
                doomed.proc.wait()
                self.assertEqual(watcher.get(1)[0], "mc/will/%d|bye-%d" % (v, v))

    # 3.1.1 [MQTT-3.1.2-4]/[MQTT-3.1.2-5] / 5.0 [MQTT5-3.1.2-5]/[MQTT5-3.1.2-23]:
    # mosquitto_sub -c keeps its session; QoS 1 messages published while it
    # is away are delivered when it comes back.
    def test_persistent_session(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                cid = "mc-persist-%d" % v
                t = "mc/persist/%d" % v
                extra = ["-x", "60"] if v == 5 else []
                first = self.sub(t, v, qos=1, client_id=cid, clean=False, extra=extra)
                first.close()
                for i in range(3):
                    self.pub(t, "away-%d" % i, version=v, qos=1)
                back = MosquittoSub(self.port, t, version=v, qos=1, client_id=cid, clean=False,
                                    fmt="%p", count=3, extra=extra)
                self.addCleanup(back.close)
                self.assertEqual(back.get(3), ["away-0", "away-1", "away-2"])

    # The payload is forwarded byte for byte: a 200 KiB file published with
    # mosquitto_pub -f arrives intact (mosquitto_sub prints it as hex).
    def test_large_payload_file(self):
        data = os.urandom(200 * 1024)
        with tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(data)
        self.addCleanup(os.unlink, f.name)
        for v in VERSIONS:
            with self.subTest(version=v):
                s = self.sub("mc/big/%d" % v, v, qos=1, fmt="%x")
                self.pub("mc/big/%d" % v, None, version=v, qos=1, extra=["-f", f.name])
                self.assertEqual(bytes.fromhex(s.get(1, timeout=10)[0]), data)

    # 5.0 4.8.2 (and the 3.1.1 extension): two mosquitto_sub in one share
    # group get each message exactly once between them.
    def test_shared_subscription(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                t = "mc/share/%d" % v
                a = self.sub("$share/grp/" + t, v, qos=1, fmt="%p")
                b = self.sub("$share/grp/" + t, v, qos=1, fmt="%p")
                data = "".join("s%02d\n" % i for i in range(20)).encode()
                self.pub(t, None, version=v, qos=1, extra=["-l"], input_bytes=data)
                deadline = time.monotonic() + 5
                got = []
                while len(got) < 20 and time.monotonic() < deadline:
                    for s in (a, b):
                        try:
                            got.append(s.lines.get(timeout=0.05))
                        except Exception:
                            pass
                time.sleep(nmq.T_QUIET)
                for s in (a, b):
                    while not s.lines.empty():
                        got.append(s.lines.get())
                self.assertEqual(sorted(got), ["s%02d" % i for i in range(20)])

    # mosquitto_sub -E exits 0 once the SUBACK arrived (3.1.1 [MQTT-3.8.4-1] /
    # 5.0 [MQTT5-3.8.4-1]), also for several filters at once.
    def test_subscribe_and_exit(self):
        for v in VERSIONS:
            with self.subTest(version=v):
                s = MosquittoSub(self.port, ["mc/e/1", "mc/e/+", "mc/#"], version=v, qos=2,
                                 extra=["-E"])
                self.addCleanup(s.close)
                self.assertEqual(s.wait_exit(5), 0, s.stderr())


if __name__ == "__main__":
    nmq.main()
