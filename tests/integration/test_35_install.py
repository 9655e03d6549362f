#!/usr/bin/python3
"""35: what `cmake --install` puts in place.

The binary, etc/nanomq.conf, the password and ACL examples it includes
(the password list readable by its owner only) and the systemd unit with
ExecStart and --conf pointing at the installed files. The installed
configuration, with the installed includes switched on, passes --test."""

import os
import shutil
import stat
import subprocess
import tempfile
import unittest

import nmq
import nmq_ops
from nmq_ops import OpsTestCase


def build_dir():
    # NANOMQ_BIN is <build>/src/nanomq.
    return os.path.dirname(os.path.dirname(os.path.abspath(nmq_ops.nanomq_bin())))


def setUpModule():
    if nmq.USE_MOSQUITTO:
        raise unittest.SkipTest("nanomq installation")
    nmq_ops.nanomq_bin()
    if shutil.which("cmake") is None:
        raise unittest.SkipTest("cmake is needed")
    if not os.path.exists(os.path.join(build_dir(), "cmake_install.cmake")):
        raise unittest.SkipTest("not a CMake build directory")


class TestInstall(OpsTestCase):

    def test_install_tree(self):
        dest = tempfile.mkdtemp(prefix="nmq-install-")
        self.addCleanup(shutil.rmtree, dest, True)
        r = subprocess.run(["cmake", "--install", build_dir()], env=dict(os.environ, DESTDIR=dest),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)
        installed = {}
        for root, _, files in os.walk(dest):
            for f in files:
                installed[f] = os.path.join(root, f)
        for name in ("nanomq", "nanomq.conf", "nanomq_pwd.conf", "nanomq_acl.conf",
                     "nanomq.service"):
            self.assertIn(name, installed, sorted(installed))
        etc = os.path.dirname(installed["nanomq.conf"])
        self.assertEqual(os.path.dirname(installed["nanomq_pwd.conf"]), etc)
        self.assertEqual(os.path.dirname(installed["nanomq_acl.conf"]), etc)
        self.assertEqual(stat.S_IMODE(os.stat(installed["nanomq_pwd.conf"]).st_mode), 0o600)

        # The unit runs the installed binary on the installed file, and
        # promises nothing about a store the broker does not have yet.
        with open(installed["nanomq.service"]) as f:
            unit = f.read()
        bindir = os.path.dirname(installed["nanomq"])[len(dest):]
        self.assertIn("ExecStart=%s/nanomq start --conf %s/nanomq.conf"
                      % (bindir, etc[len(dest):]), unit)
        self.assertNotRegex(unit.lower(), r"store is flushed|persistence \(sqlite\)")

        # The installed file with the installed includes switched on passes.
        inst = self.instance()
        with open(installed["nanomq.conf"]) as f:
            text = f.read()
        text = text.replace('# password = {include "/etc/nanomq_pwd.conf"}',
                            'password = {include "%s"}' % installed["nanomq_pwd.conf"])
        text = text.replace('# acl = {include "/etc/nanomq_acl.conf"}',
                            'acl = {include "%s"}' % installed["nanomq_acl.conf"])
        self.assertIn(installed["nanomq_acl.conf"], text)
        self.assertIn(installed["nanomq_pwd.conf"], text)
        conf = inst.write("nanomq.conf", text)
        r = subprocess.run([installed["nanomq"], "start", "--conf", conf, "--test"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, env=inst.env(), timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("is valid", r.stdout)
        self.assertNotIn("warning", r.stderr)


if __name__ == "__main__":
    nmq.main()
