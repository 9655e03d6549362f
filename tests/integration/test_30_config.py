#!/usr/bin/python3
"""30: the configuration file, observed from outside the broker.

docs/compatibility.md §1 and §3: precedence defaults < file < NANOMQ_*
environment < command line (the TCP listener through listeners.tcp.bind,
NANOMQ_BROKER_URL and --url; mqtt.max_mqueue_len through the file,
NANOMQ_MSQ_LEN and -S, seen as the number of queued messages an offline
persistent session gets); the file lookup ($NANOMQ_CONF_PATH); bad files of
many kinds (the broker exits 1 without opening its port, and stderr names
file, line and key); `start --test` (exit 0/1, no socket, no pid file);
includes relative to the including file; the shipped etc/ files; a
NanoMQ-style file with every section."""

import os
import re
import unittest

import nmq
import nmq_ops
from nmq import free_port
from nmq_ops import SRC, OpsTestCase, count_queued, hold_port, port_accepts


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq configuration files and command line only")
    nmq_ops.nanomq_bin()


def line_of(text, needle):
    """1-based number of the first line of text that contains needle."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError("%r not in the test's own file text" % needle)


class TestPrecedence(OpsTestCase):
    """Built-in defaults < file < NANOMQ_* < command line, docs/compatibility.md §1."""

    # The TCP listener: the file's bind, replaced by NANOMQ_BROKER_URL,
    # replaced by --url. Only the winner's port accepts connections.
    def test_listener_bind_file_env_cli(self):
        p_file, p_env, p_cli = free_port(), free_port(), free_port()
        cases = [
            ("file", {}, [], p_file),
            ("file+env", {"NANOMQ_BROKER_URL": "nmq-tcp://127.0.0.1:%d" % p_env}, [], p_env),
            ("file+env+cli", {"NANOMQ_BROKER_URL": "nmq-tcp://127.0.0.1:%d" % p_env},
             ["--url", "nmq-tcp://127.0.0.1:%d" % p_cli], p_cli),
            ("file+cli tcp://", {}, ["--url", "tcp://127.0.0.1:%d" % p_cli], p_cli),
        ]
        for name, env, args, winner in cases:
            with self.subTest(case=name):
                inst = self.instance()
                conf = inst.conf(p_file)
                self.start_broker(inst, ["start", "--conf", conf] + args, env=env, port=winner)
                c = self.client(winner, "prec-" + name.replace("+", "-"))
                c.connect()
                c.disconnect()
                for other in {p_file, p_env, p_cli} - {winner}:
                    self.assertFalse(port_accepts(other),
                                     "%s: port %d (not the winner) accepts" % (name, other))
                self.assert_stops(inst)

    # mqtt.max_mqueue_len: 3 in the file, 5 from NANOMQ_MSQ_LEN, 7 from -S;
    # an offline persistent session then keeps exactly that many of 12.
    def test_max_mqueue_len_file_env_cli(self):
        cases = [
            ("file", "mqtt.max_mqueue_len = 3", {}, [], 3),
            ("file+env", "mqtt.max_mqueue_len = 3", {"NANOMQ_MSQ_LEN": "5"}, [], 5),
            ("file+env+cli", "mqtt.max_mqueue_len = 3", {"NANOMQ_MSQ_LEN": "5"}, ["-S", "7"], 7),
            ("alias msq_len in file", "mqtt.msq_len = 4", {}, [], 4),
            ("env, key absent from file", "", {"NANOMQ_MSQ_LEN": "6"}, [], 6),
            ("cli long form", "mqtt.max_mqueue_len = 3", {}, ["--msq_len=2"], 2),
        ]
        for name, extra, env, args, expect in cases:
            with self.subTest(case=name):
                inst = self.instance()
                port = free_port()
                conf = inst.conf(port, extra=extra)
                self.start_broker(inst, ["start", "--conf", conf] + args, env=env, port=port)
                got = count_queued(port, "mq-" + str(expect), "prec/mq", 12)
                self.assertEqual(got, [b"%03d" % i for i in range(expect)],
                                 "%s: expected the first %d of 12 queued messages"
                                 % (name, expect))
                self.assert_stops(inst)

    # Built-in default: without the key anywhere, far more than 7 messages
    # are kept (MSQ_LEN defaults to 2048).
    def test_max_mqueue_len_default(self):
        inst = self.instance()
        port = free_port()
        self.start_broker(inst, ["start", "--conf", inst.conf(port)], port=port)
        got = count_queued(port, "mq-default", "prec/def", 40)
        self.assertEqual(len(got), 40)
        self.assert_stops(inst)

    # An invalid NANOMQ_* value is an error that names the variable; an
    # invalid command-line value names the option. Neither broker starts.
    def test_invalid_env_and_cli_values(self):
        port = free_port()
        for name, env, args, needle in [
                ("env", {"NANOMQ_MSQ_LEN": "lots"}, [], "NANOMQ_MSQ_LEN"),
                ("env bool", {"NANOMQ_ALLOW_ANONYMOUS": "perhaps"}, [], "NANOMQ_ALLOW_ANONYMOUS"),
                ("cli", {}, ["-S", "lots"], "msq_len"),
                ("cli url", {}, ["--url", "carrier://127.0.0.1:%d" % port], "--url")]:
            with self.subTest(case=name):
                inst = self.instance()
                conf = inst.conf(port)
                out = self.assert_exits_1_without_port(
                    inst, ["start", "--conf", conf] + args, port, env=env)
                self.assertIn(needle, out)

    # $NANOMQ_CONF_PATH is read when --conf is not given, and --conf wins
    # over it.
    def test_conf_path_env_and_conf_option(self):
        inst = self.instance()
        p_env, p_opt = free_port(), free_port()
        env_conf = inst.conf(p_env, name="env.conf")
        opt_conf = inst.conf(p_opt, name="opt.conf")
        self.start_broker(inst, ["start"], env={"NANOMQ_CONF_PATH": env_conf}, port=p_env)
        self.assert_stops(inst)
        self.start_broker(inst, ["start", "--conf", opt_conf],
                          env={"NANOMQ_CONF_PATH": env_conf}, port=p_opt)
        self.assertFalse(port_accepts(p_env))
        self.assert_stops(inst)

    # A file named explicitly that cannot be read is fatal and named.
    def test_missing_conf_file(self):
        inst = self.instance()
        missing = inst.path("no-such.conf")
        for args, env in [(["start", "--conf", missing], {}),
                          (["start"], {"NANOMQ_CONF_PATH": missing})]:
            with self.subTest(args=args):
                out = self.assert_exits_1_without_port(inst, args, None, env=env)
                self.assertIn("no-such.conf", out)


# Each bad file: (name, body, [(line in body, key)]). The message must name
# the file and that line (1 = the body's first line), and the key; key None
# marks a syntax error, reported as file:line:col. {sslport} and {tmp} are
# filled in.
BAD_FILES = [
    ("syntax: unclosed brace", "mqtt {\n  max_mqueue_len = 3\n", [(1, None)]),
    ("syntax: stray brace", "mqtt {\n  max_mqueue_len = 3\n}\n}\n", [(4, None)]),
    ("syntax: unterminated string", "mqtt {\n  max_mqueue_len = \"3\n}\n", [(2, None)]),
    ("syntax: missing key", "mqtt {\n  = 3\n}\n", [(2, None)]),
    ("syntax: unclosed array", "log {\n  to = [console\n}\n", [(2, None)]),
    ("wrong type: size", "mqtt.max_packet_size = hello\n", [(1, "mqtt.max_packet_size")]),
    ("wrong type: bool", "auth {\n  allow_anonymous = maybe\n}\n",
     [(2, "auth.allow_anonymous")]),
    ("wrong type: int", "mqtt {\n  max_inflight_window = lots\n}\n",
     [(2, "mqtt.max_inflight_window")]),
    ("wrong type: duration", "mqtt.retry_interval = 5 fortnights\n", [(1, "mqtt.retry_interval")]),
    ("wrong type: object for a string", "listeners.tcp.bind { a = 1 }\n",
     [(1, "listeners.tcp.bind")]),
    ("out of range: negative", "mqtt.max_mqueue_len = -3\n", [(1, "mqtt.max_mqueue_len")]),
    ("out of range: float", "mqtt.keepalive_multiplier = 0.2\n",
     [(1, "mqtt.keepalive_multiplier")]),
    ("out of range: size", "mqtt.max_packet_size = 512MB\n", [(1, "mqtt.max_packet_size")]),
    ("out of range: port", "listeners.tcp.bind = \"127.0.0.1:99999\"\n",
     [(1, "listeners.tcp.bind")]),
    ("unknown enum: log.level", "log.level = loud\n", [(1, "log.level")]),
    ("unknown enum: deny_action", "auth.deny_action = explode\n", [(1, "auth.deny_action")]),
    ("unknown enum in array: log.to", "log.to = [console, carrier_pigeon]\n", [(1, "log.to")]),
    ("missing include", "auth {\n  password = {include \"nope_pwd.conf\"}\n}\n",
     [(2, "nope_pwd.conf")]),
    ("unreadable cert files",
     "listeners.ssl {\n  bind = \"127.0.0.1:{sslport}\"\n  keyfile = \"{tmp}/missing.key\"\n"
     "  certfile = \"{tmp}/missing.crt\"\n}\n",
     [(3, "listeners.ssl.keyfile"), (4, "listeners.ssl.certfile")]),
    ("cert file is a directory",
     "listeners.ssl {\n  bind = \"127.0.0.1:{sslport}\"\n  keyfile = \"{tmp}\"\n"
     "  certfile = \"{tmp}\"\n}\n",
     [(3, "listeners.ssl.keyfile")]),
    ("preset: missing clientid",
     "preset.session.1 {\n  topic = [{remote_topic = \"a/b\"}]\n}\n",
     [(1, "preset.session.1.clientid")]),
    ("preset: bad filter",
     "preset.session.s1 {\n  clientid = \"c\"\n  topic = [{remote_topic = \"a/#/b\", qos = 1}]\n}\n",
     [(3, "preset.session.s1.topic[0].remote_topic")]),
    ("preset: bad qos (array form)",
     "preset.session = [\n  {clientid = \"c\", topic = [\n    {remote_topic = \"a\", qos = 3}]}\n]\n",
     [(3, "preset.session[0].topic[0].qos")]),
    ("preset: client id twice",
     "preset.session = [\n  {clientid = \"c\"}\n  {clientid = \"c\"}\n]\n",
     [(3, "preset.session[1].clientid")]),
    ("preset: a bridge's client id",
     "preset.session.1 {\n  clientid = \"$bridge/b1\"\n  topic = [{remote_topic = \"a\"}]\n}\n",
     [(2, "preset.session.1.clientid")]),
    ("sqlite: bad values",
     "sqlite {\n  enable = true\n  mounted_file_path = \"{tmp}/db\"\n  disk_cache_size = -5\n"
     "  flush_mem_threshold = lots\n  resend_interval = -1s\n  durability = always\n}\n",
     [(4, "sqlite.disk_cache_size"), (5, "sqlite.flush_mem_threshold"),
      (6, "sqlite.resend_interval"), (7, "sqlite.durability")]),
    ("several errors in one file",
     "mqtt {\n  max_mqueue_len = -1\n  max_packet_size = big\n}\nlog.level = chatty\n"
     "auth.no_match = maybe\n",
     [(2, "mqtt.max_mqueue_len"), (3, "mqtt.max_packet_size"), (5, "log.level"),
      (6, "auth.no_match")]),
]


class TestBadFiles(OpsTestCase):
    """docs/compatibility.md §1: every problem is reported as file:line: key: reason
    (file:line:col for syntax), and the broker refuses to start."""

    def _bad_file(self, inst, port, body):
        body = body.replace("{sslport}", str(free_port())).replace("{tmp}", inst.tmp)
        head = nmq_ops.base_conf(port, inst.ipc_url)
        return inst.write("bad.conf", head + body), len(head.splitlines())

    def _assert_names(self, out, path, offset, expects):
        for line, key in expects:
            if key is None:
                rx = r"%s:%d:\d+: " % (re.escape(path), offset + line)
            else:
                rx = r"%s:%d(:\d+)?: .*%s" % (re.escape(path), offset + line, re.escape(key))
            self.assertTrue(any(re.search(rx, l) for l in out.splitlines()),
                            "no message naming %s:%d and %r in:\n%s"
                            % (path, offset + line, key, out))

    # Start: exit status 1, the port never opens, stderr names file:line and
    # the key; no pid file is left behind.
    def test_bad_files_refuse_start(self):
        for name, body, expects in BAD_FILES:
            with self.subTest(case=name):
                inst = self.instance()
                port = free_port()
                path, offset = self._bad_file(inst, port, body)
                out = self.assert_exits_1_without_port(inst, ["start", "--conf", path], port)
                self._assert_names(out, path, offset, expects)
                self.assertFalse(os.path.exists(inst.pid_file), "pid file left behind")

    # --test reports the same and exits 1. The listener's port is held by
    # the test meanwhile: --test must not try to bind it.
    def test_bad_files_with_test_option(self):
        for name, body, expects in BAD_FILES:
            with self.subTest(case=name):
                inst = self.instance()
                with hold_port() as held:
                    path, offset = self._bad_file(inst, held.port, body)
                    r = inst.run(["start", "--conf", path, "--test"])
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self._assert_names(r.stdout + r.stderr, path, offset, expects)
                self.assertFalse(os.path.exists(inst.pid_file))
                self.assertFalse(os.path.exists(inst.ipc_sock))

    # A valid file passes --test: exit 0, a message, and no socket opened
    # (the listener's port is held by the test; binding it would fail), no
    # pid file, no command channel.
    def test_valid_file_with_test_option(self):
        inst = self.instance()
        with hold_port() as held:
            path = inst.conf(held.port, extra="mqtt.max_mqueue_len = 10")
            r = inst.run(["start", "--conf", path, "--test"])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("valid", r.stdout + r.stderr)
        self.assertFalse(os.path.exists(inst.pid_file))
        self.assertFalse(os.path.exists(inst.ipc_sock))

    # --test also works while a broker with the same pid file runs.
    def test_test_option_beside_running_broker(self):
        inst = self.instance()
        port = free_port()
        conf = inst.conf(port)
        p = self.start_broker(inst, ["start", "--conf", conf], port=port)
        r = inst.run(["start", "--conf", conf, "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(inst.read_pid_file(), p.pid)
        self.assert_stops(inst)

    # An unknown key is a warning naming file:line and the key; the broker
    # starts and --test passes.
    def test_unknown_key_is_a_warning(self):
        inst = self.instance()
        port = free_port()
        extra = "mqtt {\n  bogus_key = 1\n}\nnot_a_section.x = 2\n"
        path = inst.conf(port, extra=extra)
        with open(path) as f:
            text = f.read()
        r = inst.run(["start", "--conf", path, "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.start_broker(inst, ["start", "--conf", path], port=port)
        out = inst.output()
        for needle, key in (("bogus_key", "mqtt.bogus_key"), ("not_a_section", "not_a_section")):
            rx = r"nanomq\.conf:%d: .*%s" % (line_of(text, needle), re.escape(key))
            self.assertRegex(out, rx)
            self.assertRegex(r.stderr, rx)
        self.assertNotRegex(out, r"(?i)error")
        self.assert_stops(inst)


class TestIncludes(OpsTestCase):
    """`{include "path"}`: a relative path is resolved against the
    directory of the file that contains the include, not the working
    directory."""

    def test_relative_include_from_other_cwd(self):
        inst = self.instance()
        port = free_port()
        inst.write("etc/auth/pwd.conf", "alice: wonderland\n\"bob.1\": \"builder pw\"\n")
        inst.write("etc/auth/acl.conf",
                   "rules = [\n  {permit = deny, action = subscribe, topics = [\"secret/#\"]}\n"
                   "  {permit = allow}\n]\n")
        # The included file itself includes a file relative to its own
        # directory (etc/auth/), not to the main file's (etc/).
        inst.write("etc/auth/auth.conf",
                   "allow_anonymous = false\npassword = {include \"pwd.conf\"}\n"
                   "acl = {include \"acl.conf\"}\n")
        conf = inst.write("etc/nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url) +
                          "auth = {include \"auth/auth.conf\"}\n")
        os.makedirs(inst.path("elsewhere"))
        r = inst.run(["start", "--conf", conf, "--test"], cwd=inst.path("elsewhere"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        inst.start(["start", "--conf", conf], port=port, cwd=inst.path("elsewhere"))
        self.assertTrue(port_accepts(port), inst.output())
        ok = self.client(port, "inc-ok", username="alice", password="wonderland")
        self.assertEqual(ok.connect(), 0)
        self.assertEqual(ok.subscribe("secret/x", 1), [0x80], "ACL include not applied")
        self.assertEqual(ok.subscribe("public/x", 1), [1])
        ok.disconnect()
        bob = self.client(port, "inc-bob", username="bob.1", password="builder pw")
        self.assertEqual(bob.connect(), 0)
        bob.disconnect()
        bad = self.client(port, "inc-bad", username="alice", password="wrong")
        self.assertEqual(bad.connect(expect_rc=None), 4)
        anon = self.client(port, "inc-anon")
        self.assertEqual(anon.connect(expect_rc=None), 5)
        self.assert_stops(inst)

    # A missing nested include names the file that holds the include.
    def test_missing_nested_include(self):
        inst = self.instance()
        port = free_port()
        inst.write("etc/auth/auth.conf", "allow_anonymous = false\n\n"
                   "password = {include \"absent.conf\"}\n")
        conf = inst.write("etc/nanomq.conf", nmq_ops.base_conf(port, inst.ipc_url) +
                          "auth = {include \"auth/auth.conf\"}\n")
        out = self.assert_exits_1_without_port(inst, ["start", "--conf", conf], port)
        self.assertRegex(out, r"auth\.conf:3(:\d+)?: .*absent\.conf")
        self.assertIn(inst.path("etc", "auth", "absent.conf"), out)


# A file in the style NanoMQ ships (0.14+ HOCON): every section, includes
# for the password and ACL files, and sections this broker only accepts.
NANOMQ_STYLE = """
# nanomq.conf written the way NanoMQ users write theirs.
system {
    daemon = false
    num_taskq_thread = 0
    max_taskq_thread = 0
    parallel = 0
    enable_ipc_internal = true
    cmd_ipc_url = "{ipc}"
    hook_ipc_url = "{ipc}.hook"
}

mqtt {
    property_size = 32
    max_packet_size = 10MB
    max_mqueue_len = 2048
    retry_interval = 10s
    keepalive_multiplier = 1.25
    max_inflight_window = 2048
    max_awaiting_rel = 10s
    await_rel_timeout = 10s
}

listeners.tcp {
    bind = "127.0.0.1:{port}"
}

listeners.ws {
    bind = "127.0.0.1:{wsport}/mqtt"
}

http_server {
    port = {httpport}
    ip_addr = 127.0.0.1
    limit_conn = 2
    username = admin
    password = public
    auth_type = basic
}

log {
    to = [console]
    level = info
    dir = "{tmp}"
    file = "nanomq.log"
    rotation {
        size = 10MB
        count = 5
    }
}

auth {
    allow_anonymous = true
    no_match = allow
    deny_action = ignore
    cache = {
        max_size = 32
        ttl = 1m
    }
    password = {include "{tmp}/nanomq_pwd.conf"}
    acl = {include "{tmp}/nanomq_acl.conf"}
}

webhook {
    url = "http://127.0.0.1:{hookport}/webhook"
    headers.content-type = "application/json"
    body.encoding = plain
    pool_size = 32
    events = [
        { event = "on_message_publish", topic = "a/b/c" }
        { event = "on_client_connack" }
    ]
}

sqlite {
    disk_cache_size = 102400
    mounted_file_path = "{tmp}/"
    flush_mem_threshold = 100
    resend_interval = 5000
}

bridges.mqtt.emqx1 {
    server = "mqtt-tcp://127.0.0.1:{bridgeport}"
    proto_ver = 4
    clientid = "bridge_client"
    keepalive = 60s
    clean_start = false
    username = username
    password = passwd
    forwards = [
        { remote_topic = "fwd/topic1", local_topic = "topic1" }
    ]
    subscription = [
        { remote_topic = "cmd/topic1", local_topic = "topic3", qos = 1 }
    ]
    max_parallel_processes = 2
    max_send_queue_len = 1024
    max_recv_queue_len = 1024
}

bridges.mqtt.cache {
    disk_cache_size = 102400
    mounted_file_path = "{tmp}/"
    flush_mem_threshold = 100
    resend_interval = 5000
}

bridges.aws.c1 {
    server = "127.0.0.1:8883"
    clientid = "aws_bridge_client"
}

rules.sqlite {
    path = "{tmp}/rule.db"
    rules = [
        { enable = false, table = broker, sql = "SELECT * FROM \\"abc\\"" }
    ]
}
"""


class TestShippedAndNanomqStyleFiles(OpsTestCase):

    # etc/nanomq.conf as shipped (every key written out) passes --test, and
    # so do the shipped password and ACL files included from a file.
    def test_shipped_files_pass_test(self):
        inst = self.instance()
        r = inst.run(["start", "--conf", os.path.join(SRC, "etc", "nanomq.conf"), "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("warning", r.stderr)
        conf = inst.write("inc.conf", "auth {\n  password = {include \"%s\"}\n"
                          "  acl = {include \"%s\"}\n}\n"
                          % (os.path.join(SRC, "etc", "nanomq_pwd.conf"),
                             os.path.join(SRC, "etc", "nanomq_acl.conf")))
        r = inst.run(["start", "--conf", conf, "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    # The shipped file really runs (its port moved by NANOMQ_BROKER_URL, its
    # command channel moved by a copy of the file).
    def test_shipped_file_runs(self):
        inst = self.instance()
        port = free_port()
        with open(os.path.join(SRC, "etc", "nanomq.conf")) as f:
            text = f.read()
        text = text.replace("ipc:///tmp/nanomq_cmd.ipc", inst.ipc_url)
        conf = inst.write("nanomq.conf", text)
        self.start_broker(inst, ["start", "--conf", conf],
                          env={"NANOMQ_BROKER_URL": "nmq-tcp://127.0.0.1:%d" % port}, port=port)
        c = self.client(port, "shipped")
        c.connect()
        c.subscribe("s/#", 1)
        c.publish("s/1", b"x", qos=1)
        self.assertIsNotNone(c.wait_message())
        c.disconnect()
        self.assert_stops(inst)

    # A NanoMQ-style file with every section: --test passes; the broker
    # starts; each unsupported section gets one warning naming file:line and
    # the section; the included password and ACL files are in force.
    def test_nanomq_style_file(self):
        inst = self.instance()
        port = free_port()
        inst.write("nanomq_pwd.conf", "admin: public\nclient: public\n")
        inst.write("nanomq_acl.conf",
                   "rules = [\n"
                   "  {\"permit\": \"allow\", \"username\": \"dashboard\", \"action\": \"subscribe\", "
                   "\"topics\": [\"$SYS/#\"]}\n"
                   "  {\"permit\": \"deny\", \"username\": \"#\", \"action\": \"subscribe\", "
                   "\"topics\": [\"$SYS/#\", \"@#\"]}\n"
                   "  {\"permit\": \"allow\"}\n]\n")
        text = NANOMQ_STYLE
        for k, v in (("{ipc}", inst.ipc_url), ("{port}", str(port)),
                     ("{wsport}", str(free_port())), ("{httpport}", str(free_port())),
                     ("{hookport}", str(free_port())), ("{bridgeport}", str(free_port())),
                     ("{tmp}", inst.tmp)):
            text = text.replace(k, v)
        conf = inst.write("nanomq.conf", text)
        r = inst.run(["start", "--conf", conf, "--test"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.start_broker(inst, ["start", "--conf", conf], port=port)
        out = inst.output()
        for section in ("bridges.aws", "rules"):
            rx = r"nanomq\.conf:%d: .*%s" % (line_of(text, section + "."), re.escape(section))
            self.assertEqual(len([l for l in out.splitlines() if re.search(rx, l)]), 1,
                             "expected one warning for %s:\n%s" % (section, out))
        for l in out.splitlines():
            if "warn" in l and "nanomq.conf:" in l:
                self.assertRegex(l, r"nanomq\.conf:\d+")
        self.assertNotRegex(out, r"(?i)\berror\b")
        admin = self.client(port, "style-admin", username="admin", password="public")
        self.assertEqual(admin.connect(), 0)
        self.assertEqual(admin.subscribe("$SYS/#", 0), [0x80], "ACL include not in force")
        self.assertEqual(admin.subscribe("#", 0), [0x80], "@# rule not in force")
        self.assertEqual(admin.subscribe("a/b/c", 1), [1])
        admin.disconnect()
        wrong = self.client(port, "style-wrong", username="admin", password="nope")
        self.assertEqual(wrong.connect(expect_rc=None), 4, "password include not in force")
        self.assert_stops(inst)


if __name__ == "__main__":
    nmq.main()
