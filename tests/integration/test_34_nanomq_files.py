#!/usr/bin/python3
"""34: configuration files in the shape of NanoMQ's own load here.

The files in nanomq-files/ (see its README.md) are written for this project
with the sections, keys and syntax of NanoMQ's shipped files and of the
examples in its documentation. Each one must pass `nanomq start --conf F
--test`: exit 0, no error, and one warning naming every section this broker
does not implement yet (HTTP authentication, rules...).
NanoMQ's default file names a JWT key file that does not exist while
auth_type is basic: that file is only checked when JWT is in use. A real
mistake in such a file (an unreadable certificate of an enabled listener,
a missing JWT key with auth_type = jwt) is still an error."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import nmq
import nmq_ops
from nmq_ops import SRC, OpsTestCase

FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nanomq-files")
CERTS = None


def setUpModule():
    global CERTS
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq configuration files only")
    nmq_ops.nanomq_bin()
    if shutil.which("openssl") is None:
        raise unittest.SkipTest("openssl is needed for the certificates")
    CERTS = tempfile.mkdtemp(prefix="nmq-files-pki-")
    subprocess.run(["bash", os.path.join(SRC, "scripts", "gen-certs.sh"), CERTS], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["openssl", "rsa", "-in", os.path.join(CERTS, "server.key"), "-pubout",
                    "-out", os.path.join(CERTS, "jwt.pub")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tearDownModule():
    if CERTS and not nmq.KEEP_TMP:
        shutil.rmtree(CERTS, ignore_errors=True)


# Sections each file holds that are not implemented yet: each must be
# named by a warning (the broker says "not supported").
UNSUPPORTED = {
    "nanomq_example.conf": ["bridges.aws", "rules",
                            "exchange_client", "parquet", "plugin"],
}


class TestNanomqFiles(OpsTestCase):

    def copy_files(self, inst):
        """Copies nanomq-files/ into the instance with @DIR@ and @CERTS@
        replaced; returns the list of configuration file names."""
        names = []
        for name in sorted(os.listdir(FILES)):
            if not name.endswith(".conf"):
                continue
            with open(os.path.join(FILES, name)) as f:
                text = f.read()
            inst.write(name, text.replace("@DIR@", inst.tmp).replace("@CERTS@", CERTS))
            if not name.startswith("nanomq_pwd") and not name.startswith("nanomq_acl"):
                names.append(name)
        return names

    def test_every_file_passes_test(self):
        inst = self.instance()
        names = self.copy_files(inst)
        self.assertGreaterEqual(len(names), 14)
        for name in names:
            with self.subTest(file=name):
                r = inst.run(["start", "--conf", inst.path(name), "--test"])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("is valid", r.stdout)
                self.assertNotRegex(r.stderr, r"(?i)\berror\b", r.stderr)
                warnings = [l for l in r.stderr.splitlines() if "warning" in l]
                for section in UNSUPPORTED.get(name, []):
                    rx = r"(^|[\s:`])%s[:.` ].*not supported" % re.escape(section)
                    hits = [l for l in warnings if re.search(rx, l)]
                    self.assertEqual(len(hits), 1, "want one warning for %s:\n%s"
                                     % (section, r.stderr))
                # Nothing else is unknown: every other key is ours.
                for l in warnings:
                    self.assertNotIn("unknown", l, r.stderr)

    # NanoMQ's default file: the JWT key it names does not exist, which
    # matters only once auth_type = jwt.
    def test_jwt_key_checked_only_with_jwt(self):
        inst = self.instance()
        self.copy_files(inst)
        with open(inst.path("nanomq.conf")) as f:
            text = f.read()
        self.assertIn("/etc/certs/jwt/jwtRS256.key.pub", text)
        self.assertFalse(os.path.exists("/etc/certs/jwt/jwtRS256.key.pub"))
        conf = inst.write("jwt.conf", text.replace("auth_type = basic", "auth_type = jwt"))
        r = inst.run(["start", "--conf", conf, "--test"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"jwt\.conf:\d+: http_server\.jwt\.public\.keyfile: "
                                   r"cannot read \"/etc/certs/jwt/jwtRS256\.key\.pub\"")

    # A real mistake in the big example is still an error naming the key.
    def test_real_error_still_fails(self):
        inst = self.instance()
        self.copy_files(inst)
        with open(inst.path("nanomq_example.conf")) as f:
            text = f.read()
        bad = text.replace(os.path.join(CERTS, "server.crt"), "/nonexistent/server.crt")
        self.assertNotEqual(bad, text)
        conf = inst.write("bad.conf", bad)
        r = inst.run(["start", "--conf", conf, "--test"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"bad\.conf:\d+: listeners\.ssl\.certfile: cannot read")
        self.assertNotIn("is valid", r.stdout)


if __name__ == "__main__":
    nmq.main()
