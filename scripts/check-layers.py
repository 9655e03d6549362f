#!/usr/bin/python3
"""Checks the layering of the source tree (docs/architecture.md).

Every `#include "..."` line of a .c or .h file under nng/, src/ and tools/
must name a header by its path from the repository root, of the file's
own layer or a layer below it (LAYERS), and must not name another
folder's private header (*_impl.h, *_int.h, *_priv.h). Tests (tests/) are
white-box and may include anything.

Usage: check-layers.py [ROOT]    checks ROOT (default: the repository),
                                 prints one line per violation, exits 1
                                 if there is any.
       check-layers.py --self-test
                                 checks fake trees with known violations
                                 and a clean one; exits 1 if the checker
                                 misses one or reports a false one.
"""
import os
import re
import sys
import tempfile

# Bottom up. A file may include headers of its own folder and of folders
# with a lower rank. Folders that do not exist yet keep their place.
LAYERS = [
    "nng/core",  # log front end, message + memory accountant, mutex, nmq_err
    "nng/codec",  # the only code that reads or writes MQTT bytes
    "nng/transport",  # event loops, connections, listeners, TLS
    "nng/protocol",  # sessions, QoS, queues, timers
    "src/conf",  # configuration schema, files, environment (logs nothing)
    "src/log",  # the log sink: format, targets, rotation (reads nmq_conf)
    "src/topic",  # subscription tree, retained messages
    "src/auth",  # passwords, ACL
    "src/store",  # persistence of sessions and messages (SQLite)
    "src/broker",  # routing policy between sessions
    "src/bridge",  # MQTT bridges: links to remote brokers
    "src/http",  # HTTP server, REST API, outbound HTTP client
    "src/events",  # $SYS statistics, outbound notifications
    "src/daemon",  # command line, pid file, command channel, systemd
    "src/main.c",  # wiring
]
# Folders outside the stack, with the layers they may use besides their own.
SIDE = {
    "tools/nanomq_cli": ["nng/core", "nng/codec"],
}
PRIVATE = re.compile(r"_(impl|int|priv)\.h$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SCANNED = ("nng", "src", "tools")


def unit_of(path):
    """The LAYERS or SIDE entry that path (relative to the root) belongs
    to, or None."""
    for u in list(LAYERS) + list(SIDE):
        if path == u or path.startswith(u + "/"):
            return u
    return None


def may_include(src_unit, hdr_unit):
    if src_unit == hdr_unit:
        return True
    if src_unit in SIDE:
        return hdr_unit in SIDE[src_unit]
    if hdr_unit not in LAYERS:
        return False
    return LAYERS.index(hdr_unit) < LAYERS.index(src_unit)


def check_file(root, rel, out):
    src_unit = unit_of(rel)
    if src_unit is None:
        out.append(f"{rel}: folder not in the layer table of scripts/check-layers.py")
        return
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m is None:
                continue
            inc = m.group(1)
            where = f"{rel}:{lineno}"
            if not os.path.isfile(os.path.join(root, inc)):
                beside = os.path.join(os.path.dirname(rel), inc)
                if os.path.isfile(os.path.join(root, beside)):
                    out.append(f'{where}: include "{beside}" by its path from the repository root')
                else:
                    out.append(f'{where}: "{inc}" not found from the repository root')
                continue
            hdr_unit = unit_of(inc)
            if hdr_unit is None:
                out.append(f'{where}: "{inc}" is outside the layer table')
                continue
            if not may_include(src_unit, hdr_unit):
                out.append(f'{where}: {src_unit} may not include "{inc}" ({hdr_unit} is not below it)')
                continue
            if PRIVATE.search(inc) and os.path.dirname(inc) != os.path.dirname(rel):
                out.append(f'{where}: "{inc}" is private to {os.path.dirname(inc)}/')


def check_tree(root):
    out = []
    for top in SCANNED:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".c", ".h")):
                    check_file(root, os.path.relpath(os.path.join(d, name), root), out)
    return out


def self_test():
    """Each case: files to create, and the substrings that the violations
    found must contain (one per expected violation, in order)."""
    base = {
        "nng/core/log.h": "",
        "nng/core/msg.h": '#include "nng/core/log.h"\n',
        "nng/codec/codec.h": '#include "nng/core/msg.h"\n',
        "nng/codec/codec_priv.h": "",
        "nng/codec/codec.c": '#include "nng/codec/codec_priv.h"\n#include "nng/codec/codec.h"\n',
        "nng/protocol/proto_impl.h": "",
        "src/conf/conf.h": '#include "nng/core/log.h"\n',
        "src/log/log.h": '#include "src/conf/conf.h"\n',
        "src/main.c": '#include "src/log/log.h"\n#include "nng/protocol/proto_impl.h"\n',
        "tools/nanomq_cli/cli.c": '#include "nng/codec/codec.h"\n',
    }
    cases = [
        ("clean tree", {}, ["src/main.c:2"]),  # main.c's private include below
        ("upward include", {"nng/protocol/a.c": '#include "src/log/log.h"\n'},
         ["nng/protocol/a.c:1: nng/protocol may not include"]),
        ("upward within src", {"src/conf/x.c": '  #  include "src/log/log.h"\n'},
         ["src/conf/x.c:1: src/conf may not include"]),
        ("private header", {"src/log/y.c": '#include "nng/codec/codec_priv.h"\n'},
         ["src/log/y.c:1: \"nng/codec/codec_priv.h\" is private"]),
        ("cli uses protocol", {"tools/nanomq_cli/z.c": '#include "nng/protocol/proto_impl.h"\n'},
         ["tools/nanomq_cli/z.c:1: tools/nanomq_cli may not include"]),
        ("cli uses src", {"tools/nanomq_cli/z.c": '#include "src/conf/conf.h"\n'},
         ["tools/nanomq_cli/z.c:1: tools/nanomq_cli may not include"]),
        ("relative include", {"nng/codec/r.c": '#include "codec.h"\n'},
         ['nng/codec/r.c:1: include "nng/codec/codec.h" by its path']),
        ("missing header", {"nng/core/m.c": '#include "nng/core/nothere.h"\n'},
         ["nng/core/m.c:1: \"nng/core/nothere.h\" not found"]),
        ("unknown folder", {"src/gadget/g.c": '#include "nng/core/log.h"\n'},
         ["src/gadget/g.c: folder not in the layer table"]),
        ("header outside table", {"nng/core/o.c": '#include "tests/t.h"\n', "tests/t.h": ""},
         ['nng/core/o.c:1: "tests/t.h" is outside the layer table']),
        ("future layer order", {"src/store/s.c": '#include "src/broker/b.h"\n', "src/broker/b.h": ""},
         ["src/store/s.c:1: src/store may not include"]),
    ]
    failed = 0
    for name, extra, expect in cases:
        files = dict(base)
        files.update(extra)
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            found = check_tree(root)
        # src/main.c:2 of the base tree includes a private header: every
        # case must report it, and nothing else beyond the expected ones.
        want = sorted(set(expect) | {"src/main.c:2"})
        ok = len(found) == len(want) and all(any(w in f for f in found) for w in want)
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
        if not ok:
            failed += 1
            print("  expected:", want)
            print("  found:   ", found)
    return 1 if failed else 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = check_tree(root)
    for line in found:
        print(line)
    if found:
        print(f"check-layers: {len(found)} violation(s); the layer table is in scripts/check-layers.py")
        return 1
    print("check-layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
