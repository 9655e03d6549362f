#!/usr/bin/python3
"""01: CONNECT / CONNACK handling, MQTT 3.1.1 and 5.0.

Spec references: MQTT 3.1.1 (OASIS, 2014) statement numbers are marked
"3.1.1", MQTT 5.0 (OASIS, 2019) ones "5.0"."""

import time

import nmq
from nmq import CONNACK, PINGRESP, BrokerTestCase, skip_on_mosquitto


class ConnectCommon:
    """Tests run for both protocol versions (V = 4 or 5)."""

    V = 4

    def refused_or_closed(self, raw, codes, msg):
        """The broker must not accept: either CONNACK with a code in codes and
        a close, or a close without CONNACK."""
        pkts = raw.expect_closed(nmq.T_CLOSE, msg=msg)
        acks = [p for p in pkts if p.type == CONNACK]
        others = [p for p in pkts if p.type != CONNACK]
        self.assertEqual(others, [], "%s: unexpected packets %r" % (msg, others))
        for a in acks:
            self.assertIn(a.rc, codes, "%s: CONNACK code 0x%02x, expected one of %s or a plain close"
                          % (msg, a.rc, [hex(c) for c in codes]))
        return acks

    # 3.1.1 [MQTT-3.2.2-1] / 5.0 [MQTT5-3.2.2-2]: with Clean Session/Start = 1 the
    # Server MUST set Session Present to 0 in a CONNACK with return code 0.
    def test_connect_clean_accepted(self):
        r = self.raw(self.V)
        ack = r.connect("c1", clean=True)
        self.assertEqual(ack.rc, 0)
        self.assertFalse(ack.session_present)
        # 3.1.1 3.2.2.1 / 5.0 [MQTT5-3.2.2-1]: bits 7-1 of the Connect
        # Acknowledge Flags are reserved and 0.
        self.assertEqual(ack.ack_flags & 0xFE, 0)

    # 3.1.1 [MQTT-3.1.0-1]/[MQTT-4.8.0-1] / 5.0 [MQTT5-3.1.0-1]: the first
    # packet from the Client MUST be CONNECT; the Server closes the connection
    # otherwise, and sends nothing (3.1.1 [MQTT-3.2.0-1] / 5.0 [MQTT5-3.2.0-1]:
    # the first packet from the Server is a CONNACK).
    def test_first_packet_not_connect_closes(self):
        cases = {
            "PINGREQ": nmq.packet(nmq.PINGREQ, 0, b""),
            "PUBLISH": nmq.publish_bytes("a/b", b"x", 0, version=self.V),
            "SUBSCRIBE": nmq.subscribe_bytes([("a/b", 0)], 1, version=self.V),
        }
        for name, data in cases.items():
            with self.subTest(first=name):
                r = self.raw(self.V)
                r.send(data)
                pkts = r.expect_closed(msg=name)
                self.assertEqual(pkts, [], "%s as first packet: the broker answered %r" % (name, pkts))
                self.assertNotIn(PINGRESP, [p.type for p in pkts])

    # 3.1.1 [MQTT-3.1.2-1] / 5.0 [MQTT5-3.1.2-1]: an incorrect protocol name:
    # the Server MAY disconnect, and MUST NOT continue processing the CONNECT
    # under this specification, so it never answers CONNACK 0.
    def test_bad_protocol_name(self):
        r = self.raw(self.V)
        r.send_connect("badname", proto_name="MQTX", version=self.V)
        self.refused_or_closed(r, (0x01, 0x84, 0x81, 0x82), "protocol name MQTX")

    # 3.1.1 [MQTT-3.1.2-2]: unsupported protocol level -> CONNACK 0x01 and
    # close.  5.0 [MQTT5-3.1.2-2]: the Server MAY send CONNACK 0x84 and MUST
    # close.  Our contract: a CONNACK is sent (0x01, or 0x84 for a v5 client).
    def test_bad_protocol_level(self):
        # mosquitto takes 0x80|level as its bridge extension, so 0x85 is only
        # checked against our broker.
        for level in (6, 2) if nmq.USE_MOSQUITTO else (6, 2, 0x85):
            with self.subTest(level=level):
                r = self.raw(self.V)
                r.send_connect("badlevel", proto_level=level, version=4)
                acks = self.refused_or_closed(r, (0x01, 0x84), "protocol level %d" % level)
                self.assertEqual(len(acks), 1, "protocol level %d: expected CONNACK 0x01/0x84 "
                                 "before the close" % level)

    # 3.1.1 [MQTT-3.1.2-3]: the reserved flag in Connect Flags MUST be 0, the
    # Server MUST disconnect otherwise ([MQTT-3.1.4-1]: without CONNACK).
    # 5.0 [MQTT5-3.1.2-3]: Malformed Packet (CONNACK 0x81 allowed before the
    # close, 4.13).
    def test_reserved_connect_flag_closes(self):
        r = self.raw(self.V)
        r.send_connect("resv", flags=0x02 | 0x01, version=self.V)
        self.refused_or_closed(r, (0x81,) if self.V == 5 else (), "reserved connect flag")

    # 3.1.1 [MQTT-3.1.2-13]/[MQTT-3.1.2-14]/[MQTT-3.1.2-15], 5.0
    # [MQTT5-3.1.2-11]/[MQTT5-3.1.2-12]/[MQTT5-3.1.2-13]: Will QoS must be 0 when
    # the Will Flag is 0 and never 3; Will Retain must be 0 when the Will Flag
    # is 0.  Violations are malformed: the connection is closed.
    def test_invalid_will_flags_close(self):
        cases = {
            "will qos 1 without will flag": 0x02 | 0x08,
            "will retain without will flag": 0x02 | 0x20,
            "will qos 3": 0x02 | 0x04 | 0x18,
        }
        for name, flags in cases.items():
            with self.subTest(case=name):
                r = self.raw(self.V)
                will = {"topic": "w/t", "payload": b"w"} if flags & 0x04 else None
                r.send_connect("wflags", flags=flags, will=will, version=self.V)
                self.refused_or_closed(r, (0x81, 0x82) if self.V == 5 else (), name)

    # 3.1.1 [MQTT-3.1.0-2] / 5.0 [MQTT5-3.1.0-2]: a second CONNECT on a
    # connection is a protocol violation: the Server closes the connection
    # (5.0: DISCONNECT 0x82 Protocol Error, see 4.13).
    def test_second_connect_is_protocol_error(self):
        r = self.raw(self.V, "twice")
        r.send_connect("twice", version=self.V)
        self.assert_closed(r, v5_codes=(0x82,), msg="second CONNECT", mosq_plain_close=True)
        # The client id is free again and the broker is fine.
        r2 = self.raw(self.V, "twice")
        r2.pingreq()
        r2.expect(PINGRESP)

    # 3.1.1 [MQTT-3.12.4-1] / 5.0 [MQTT5-3.12.4-1]: the Server MUST send PINGRESP
    # in response to PINGREQ.
    def test_pingreq_pingresp(self):
        r = self.raw(self.V, "pinger")
        for _ in range(3):
            r.pingreq()
            p = r.expect(PINGRESP, 3)
            self.assertEqual(p.body, b"")
            self.assertEqual(p.flags, 0)

    # 3.1.1 [MQTT-3.1.3-5] / 5.0 [MQTT5-3.1.3-5]: client ids of 1 to 23
    # characters from [0-9a-zA-Z] MUST be allowed; longer and other UTF-8
    # ids (allowed by this broker, like NanoMQ) work too and are distinct.
    def test_client_id_forms(self):
        ids = ["a", "0123456789abcdefghijKLM", "x" * 200, "caf\u00e9-\U0001F600", "with space/slash#+"]
        conns = []
        for cid in ids:
            r = self.raw(self.V)
            ack = r.connect(cid)
            self.assertEqual(ack.rc, 0, "client id %r refused" % cid)
            conns.append(r)
        for cid, r in zip(ids, conns):
            self.assertTrue(r.is_open(0.1), "client id %r was disconnected" % cid)

    # paho client: plain connect/disconnect works, and a clean session has
    # Session Present 0 (3.1.1 [MQTT-3.2.2-1], 5.0 [MQTT5-3.2.2-2]).
    def test_paho_connect(self):
        c = self.paho("paho1", self.V)
        self.assertEqual(c.connack_rc, 0)
        self.assertFalse(c.session_present)
        c.disconnect()

    # 3.1.1 [MQTT-3.1.4-1] / 5.0 [MQTT5-3.1.4-1]: a CONNECT that does not match
    # the format (here: a Client Identifier that runs past the packet end) is
    # malformed and the Server MUST close the connection; 3.1.1 [MQTT-3.2.2-6]:
    # no 3.1.1 return code fits, so no CONNACK comes first.
    def test_truncated_connect_closes(self):
        r = self.raw(self.V)
        good = nmq.connect_bytes("abcdef", version=self.V)
        body = bytearray(good[2:])
        body[-8:-6] = b"\x00\x40"  # client id length 64 > the 6 bytes present
        r.send(bytes([good[0]]) + nmq.vbi(len(body)) + bytes(body))
        self.refused_or_closed(r, (0x81, 0x85) if self.V == 5 else (), "client id past packet end")

    # A client that is slow (1.5 s) to send CONNECT is still served: the
    # CONNECT timeout is not shorter than the documented 10 s.
    def test_slow_connect_accepted(self):
        r = self.raw(self.V)
        self.assertTrue(r.is_open(1.5), "connection closed before CONNECT was sent")
        ack = r.connect("slow")
        self.assertEqual(ack.rc, 0)


class TestConnectV311(ConnectCommon, BrokerTestCase):
    V = 4

    # 3.1.1 [MQTT-3.1.0-1] with the CONNECT timeout of our design (10 s): a
    # socket that never sends CONNECT is closed (we allow up to 16 s).  The
    # version does not matter before CONNECT, so this runs once.
    @skip_on_mosquitto("mosquitto 2.0 has no CONNECT timeout for silent sockets")
    def test_connect_timeout(self):
        r = self.raw(4)
        t0 = time.monotonic()
        r.expect_closed(16, msg="silent socket")
        dt = time.monotonic() - t0
        self.assertGreater(dt, 2.0, "a silent socket was closed after only %.1f s" % dt)

    # 3.1.1 [MQTT-3.1.3-6]: a Server MAY allow a zero-byte ClientId (our
    # contract does, like NanoMQ) and then assigns a unique ClientId, so two
    # such clients do not take each other over; [MQTT-3.1.3-7]: this needs
    # CleanSession = 1.
    def test_empty_client_id_clean_accepted(self):
        a = self.raw(4)
        self.assertEqual(a.connect("", clean=True).rc, 0)
        b = self.raw(4)
        self.assertEqual(b.connect("", clean=True).rc, 0)
        # Both stay connected: the two empty ids did not take each other over.
        self.assertTrue(a.is_open(0.5))
        a.pingreq()
        a.expect(PINGRESP)

    # 3.1.1 [MQTT-3.1.3-8]: zero-byte ClientId with CleanSession = 0 -> CONNACK
    # 0x02 (Identifier rejected) and close.
    def test_empty_client_id_persistent_rejected(self):
        r = self.raw(4)
        r.send_connect("", clean=False)
        acks = self.refused_or_closed(r, (0x02,), "empty client id, clean session 0")
        self.assertEqual(len(acks), 1, "expected CONNACK 0x02 before the close")

    # 3.1.1 [MQTT-3.1.2-22]: if the User Name Flag is 0 the Password Flag MUST
    # be 0; a violation is malformed and the connection is closed.
    def test_password_without_username_closes(self):
        r = self.raw(4)
        r.send_connect("pwonly", password=b"secret")
        self.refused_or_closed(r, (0x04, 0x05), "password flag without user name flag")

    # 3.1.1 [MQTT-3.2.2-4]: a refusing CONNACK has Session Present 0.
    def test_refusing_connack_session_present_zero(self):
        r = self.raw(4)
        r.send_connect("", clean=False)
        pkts = r.expect_closed()
        for p in pkts:
            if p.type == CONNACK:
                self.assertFalse(p.session_present)


class TestConnectV5(ConnectCommon, BrokerTestCase):
    V = 5

    # 5.0 [MQTT5-3.1.3-6]/[MQTT5-3.1.3-7]: a zero-length ClientID gets a unique
    # id assigned, returned as Assigned Client Identifier in CONNACK.
    def test_assigned_client_identifier(self):
        ids = []
        for _ in range(2):
            r = self.raw(5)
            ack = r.connect("", clean=True)
            self.assertEqual(ack.rc, 0)
            aid = ack.props.get("AssignedClientIdentifier")
            self.assertTrue(aid, "no Assigned Client Identifier in CONNACK: %r" % ack)
            ids.append(aid)
        self.assertNotEqual(ids[0], ids[1], "the two assigned client ids are equal")

    # 5.0 [MQTT5-3.1.3-7] with paho: the assigned id is visible to the client.
    def test_assigned_client_identifier_paho(self):
        c = self.paho("", 5)
        self.assertTrue(c.connack_props.get("AssignedClientIdentifier"))

    # 5.0 3.1.2.9: MQTT 5 allows a Password without a User Name; with anonymous
    # access allowed the connection is accepted.
    def test_password_without_username_allowed(self):
        r = self.raw(5)
        ack = r.connect("pwonly5", password=b"secret")
        self.assertEqual(ack.rc, 0)

    # 5.0 3.1.2.11.3 and 3.1.2.11.4: a Receive Maximum of 0 or a Maximum Packet
    # Size of 0 is a Protocol Error: CONNACK >= 0x80 (0x82 or 0x81) or close.
    # [MQTT5-3.1.4-1]/[MQTT5-3.2.2-7].
    def test_zero_receive_maximum_or_packet_size_refused(self):
        for name in ("ReceiveMaximum", "MaximumPacketSize"):
            with self.subTest(prop=name):
                r = self.raw(5)
                r.send_connect("zero-" + name, props={name: 0})
                self.refused_or_closed(r, (0x81, 0x82), "%s = 0" % name)

    # 5.0 2.2.2.2: a property that may appear once (Session Expiry Interval)
    # given twice is a Protocol Error.
    # [MQTT5-3.1.4-1]/[MQTT5-3.2.2-7].
    def test_duplicate_connect_property_refused(self):
        r = self.raw(5)
        r.send_connect("dupprop", props=[("SessionExpiryInterval", 10),
                                         ("SessionExpiryInterval", 20)])
        self.refused_or_closed(r, (0x81, 0x82), "Session Expiry Interval twice")

    # 5.0 [MQTT5-3.1.2-28]: with Request Response Information 0 the Server MUST
    # NOT return Response Information.
    def test_no_response_information_unless_requested(self):
        r = self.raw(5)
        ack = r.connect("rri0", props={"RequestResponseInformation": 0})
        self.assertEqual(ack.rc, 0)
        self.assertNotIn("ResponseInformation", ack.props)
        r2 = self.raw(5)
        ack2 = r2.connect("rri-default")
        self.assertNotIn("ResponseInformation", ack2.props)

    # 5.0 3.1.2.11.7: Request Response Information 1 is allowed; the broker
    # may or may not answer with Response Information, which must then be a
    # UTF-8 string (checked by the decoder).
    def test_response_information_requested(self):
        r = self.raw(5)
        ack = r.connect("rri1", props={"RequestResponseInformation": 1})
        self.assertEqual(ack.rc, 0)
        if "ResponseInformation" in ack.props:
            self.assertIsInstance(ack.props["ResponseInformation"], str)


if __name__ == "__main__":
    nmq.main()
