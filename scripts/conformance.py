#!/usr/bin/python3
"""Conformance report: which tests check which normative statement of MQTT.

    scripts/conformance.py            rewrite docs/conformance.md
    scripts/conformance.py --check    exit 1 if a tag names no statement, or
                                      if docs/conformance.md is not what this
                                      script would write (run by ctest as
                                      lint.conformance)

The statements
--------------
tests/conformance/mqtt-3.1.1.tsv and tests/conformance/mqtt-5.0.tsv list
every numbered normative statement ([MQTT-x.y.z-n]) of MQTT 3.1.1 (OASIS
Standard 2014, with Errata 01) and MQTT 5.0 (OASIS Standard 2019): id,
section, who it binds, and a short summary in our own words (the
specifications' sentences are not copied).  They were collected from each
specification's Appendix B ("Mandatory normative statements"), the summary
table of every numbered statement, read in public copies of the OASIS text,
and checked against the statement numbers in the body of the chapters (two
3.1.1 numbers are misprinted in the specification, "MQTT-3.1.2.7" and
"MQTT-3-8.3-4"; they are listed as MQTT-3.1.2-7 and MQTT-3.8.3-4).  3.1.1
has 141 statements, 5.0 has 251.  "binds" is who the MUST falls on: Server,
Client, Both (client and server alike), Sender or Receiver (whichever side
sends or receives that packet, so a server as well).  A statement whose
first half binds the client and second half the server (e.g. SUBSCRIBE
reserved flags) is filed under the side a broker can be tested on.
An optional fifth column marks a statement no test can apply to this
broker (a rule for servers without QoS 2, or for enhanced authentication,
which the broker refuses) and says why: the report lists it as not
applicable instead of as a gap.  Keep those notes true when the broker
changes.

The tags
--------
A test names the statement it asserts with a tag in a comment (or a
docstring):

    # [MQTT-3.1.2-24]      MQTT 3.1.1 statement 3.1.2-24
    # [MQTT5-3.1.2-22]     MQTT 5.0 statement 3.1.2-22
    // [MQTT5-4.13.1-1]    the same in a C test

Only the bracketed form is a tag.  A tag belongs to:
  1. the test function it is written in (Python: a function or method whose
     name starts with "test"; C: a function registered with cmocka_unit_test
     or whose name starts with "test_"), or
  2. when it is outside every function, the test function defined directly
     below it: only comment and blank lines (and decorators) between them.
A tag inside a helper function, a class or module docstring, or anywhere
else belongs to no test: it is still checked against the lists, and is
listed at the end of the report, but covers nothing.  Tag only what the
test really asserts (a broken promise to the reader is worse than a gap).

Every file under tests/ ending in .py, .c or .h is scanned.  The report
names the file and the test (Class.method for Python), never a line number,
so that editing a test does not make the report stale; adding, moving or
removing a tag does: run this script and commit docs/conformance.md with
the change.
"""

import argparse
import ast
import difflib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT = "docs/conformance.md"

SPECS = [
    # key, tag prefix, title, statement list
    ("3.1.1", "MQTT", "MQTT 3.1.1", "tests/conformance/mqtt-3.1.1.tsv"),
    ("5.0", "MQTT5", "MQTT 5.0", "tests/conformance/mqtt-5.0.tsv"),
]
BINDS = ["Server", "Both", "Sender", "Receiver", "Client"]
BIND_TITLE = {
    "Server": "The Server MUST",
    "Both": "Client and Server alike",
    "Sender": "The sender of a packet (a server too)",
    "Receiver": "The receiver of a packet (a server too)",
    "Client": "The Client MUST (not testable on a broker)",
}
TAG_RE = re.compile(r"\[(MQTT5?)-([0-9]+(?:\.[0-9]+)*-[0-9]+)\]")
SCAN_EXT = (".py", ".c", ".h")


class Statement:
    def __init__(self, sid, section, binds, summary, na=""):
        self.id = sid
        self.section = section
        self.binds = binds
        self.summary = summary
        self.na = na  # why no test can apply to this broker, or ""
        self.tests = set()  # (relpath, test name)


def load_statements(path, errors):
    out = {}
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            cols = line.split("\t")
            where = "%s:%d" % (path, n)
            if len(cols) not in (4, 5):
                errors.append("%s: expected 4 or 5 tab-separated columns, got %d"
                              % (where, len(cols)))
                continue
            sid, section, binds, summary = cols[:4]
            na = cols[4] if len(cols) == 5 else ""
            if not re.fullmatch(r"MQTT-[0-9]+(\.[0-9]+)*-[0-9]+", sid):
                errors.append("%s: malformed statement id %r" % (where, sid))
            if binds not in BINDS:
                errors.append("%s: binds %r is not one of %s" % (where, binds, ", ".join(BINDS)))
            if sid in out:
                errors.append("%s: %s listed twice" % (where, sid))
            out[sid] = Statement(sid, section, binds, summary, na)
    return out


def id_key(sid):
    """MQTT-3.10.4-2 sorts after MQTT-3.9.3-1."""
    head, _, num = sid[len("MQTT-"):].rpartition("-")
    return [int(x) for x in head.split(".")] + [int(num)]


# --- attribution -------------------------------------------------------------

def python_functions(text, path):
    """[(first line, last line, qualified name, is_test)] for every function."""
    tree = ast.parse(text, filename=path)
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                name = prefix + child.name
                out.append((first, child.end_lineno, name, child.name.startswith("test")))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


C_FUNC_RE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*$")


def strip_c(text):
    """Blank out comments and string/char literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + (c if j - 1 > i else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def c_functions(text):
    code = strip_c(text)
    lines = code.split("\n")
    registered = set(re.findall(r"cmocka_unit_test\w*\(\s*(\w+)", code))
    out = []
    i = 0
    while i < len(lines):
        m = C_FUNC_RE.match(lines[i])
        if not m or m.group(1) in ("if", "for", "while", "switch", "return"):
            i += 1
            continue
        # the body starts at the first '{' before any ';'
        j, depth, start = i, 0, None
        end = None
        while j < len(lines):
            for ch in lines[j]:
                if ch == ";" and start is None and depth == 0:
                    end = -1
                    break
                if ch == "{":
                    depth += 1
                    start = j if start is None else start
                elif ch == "}":
                    depth -= 1
                    if depth == 0 and start is not None:
                        end = j
                        break
            if end is not None:
                break
            j += 1
        if end is None or end < 0:
            i += 1
            continue
        name = m.group(1)
        out.append((i + 1, end + 1, name, name in registered or name.startswith("test_")))
        i = end + 1
    return out


def is_comment_or_blank(line, lang):
    s = line.strip()
    if not s:
        return True
    if lang == "py":
        return s.startswith("#") or s.startswith("@")
    return s.startswith("//") or s.startswith("/*") or s.startswith("*")


def attribute(lines, funcs, lineno, lang):
    """Name of the test a tag on line lineno belongs to, or None."""
    enclosing = [f for f in funcs if f[0] <= lineno <= f[1]]
    if enclosing:
        tests = [f for f in enclosing if f[3]]
        if not tests:
            return None
        return max(tests, key=lambda f: f[0])[2]
    nxt = [f for f in funcs if f[0] > lineno]
    if not nxt:
        return None
    f = min(nxt, key=lambda f: f[0])
    if not f[3]:
        return None
    if not is_comment_or_blank(lines[lineno - 1], lang):
        return None
    between = lines[lineno:f[0] - 1]
    if all(is_comment_or_blank(l, lang) for l in between):
        return f[2]
    return None


def scan(specs, errors):
    """Record tags in the statements; return the tags that belong to no test."""
    stray = []
    by_prefix = {prefix: (key, stmts) for key, prefix, _, _, stmts in specs}
    files = []
    for base, dirs, names in os.walk(os.path.join(ROOT, "tests")):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "corpus"))
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith(SCAN_EXT)]
    for path in sorted(files):
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if not TAG_RE.search(text):
            continue
        lang = "py" if path.endswith(".py") else "c"
        try:
            funcs = python_functions(text, rel) if lang == "py" else c_functions(text)
        except SyntaxError as e:
            errors.append("%s: cannot parse: %s" % (rel, e))
            continue
        lines = text.split("\n")
        for n, line in enumerate(lines, 1):
            for m in TAG_RE.finditer(line):
                prefix, num = m.group(1), m.group(2)
                key, stmts = by_prefix[prefix]
                sid = "MQTT-" + num
                if sid not in stmts:
                    errors.append("%s:%d: %s names no normative statement of MQTT %s"
                                  % (rel, n, m.group(0), key))
                    continue
                test = attribute(lines, funcs, n, lang)
                if test is None:
                    stray.append((rel, n, m.group(0)))
                else:
                    stmts[sid].tests.add((rel, test))
    return stray


# --- report ------------------------------------------------------------------

def counts(stmts):
    """(covered, not applicable, not covered) of some statements."""
    stmts = list(stmts)
    cov = sum(1 for s in stmts if s.tests)
    na = sum(1 for s in stmts if not s.tests and s.na)
    return cov, na, len(stmts) - cov - na


def md(s):
    return s.replace("|", "\\|")


def render(specs, stray):
    out = []
    w = out.append
    w("# MQTT conformance")
    w("")
    w("<!-- Generated by scripts/conformance.py from the tags in tests/ and the")
    w("     statement lists in tests/conformance/. Do not edit: run")
    w("     `/usr/bin/python3 scripts/conformance.py` and commit the result. -->")
    w("")
    w("Every numbered normative statement (`[MQTT-x.y.z-n]`) of MQTT 3.1.1 and")
    w("MQTT 5.0, and the tests that check it. A test claims a statement with a")
    w("tag in a comment: `# [MQTT-3.1.2-24]` for MQTT 3.1.1, `# [MQTT5-3.1.2-22]`")
    w("for MQTT 5.0 (`//` in C). The tag belongs to the test function it is")
    w("written in, or to the test function directly below it (see the header")
    w("of `scripts/conformance.py` for the exact rule). The summaries are short")
    w("paraphrases: the specification's text is the reference.")
    w("")
    w("`ctest -R lint.conformance` fails when a tag names a statement that does")
    w("not exist, or when this file is out of date with the tags.")
    w("")
    w("## Summary")
    w("")
    w("| Specification | Binds | Statements | Covered | Not applicable | Not covered |")
    w("|---|---|---:|---:|---:|---:|")
    for key, prefix, title, _, stmts in specs:
        for b in BINDS:
            sel = [s for s in stmts.values() if s.binds == b]
            cov, na, gap = counts(sel)
            w("| %s | %s | %d | %d | %d | %d |" % (title, b, len(sel), cov, na, gap))
        cov, na, gap = counts(stmts.values())
        w("| %s | **all** | %d | %d | %d | %d |" % (title, len(stmts), cov, na, gap))
    w("")
    w("\"Not applicable\" statements have no test and a note saying why none")
    w("can apply to this broker (for example a rule for servers without QoS 2).")
    w("\"Server\" statements are the ones a broker must meet itself; \"Both\",")
    w("\"Sender\" and \"Receiver\" bind a broker too; \"Client\" statements bind")
    w("only the client and are listed for completeness.")
    w("")
    for key, prefix, title, _, stmts in specs:
        w("## %s" % title)
        w("")
        w("Tag: `[%s-x.y.z-n]`." % prefix)
        w("")
        for b in BINDS:
            sel = sorted((s for s in stmts.values() if s.binds == b), key=lambda s: id_key(s.id))
            if not sel:
                continue
            cov = sum(1 for s in sel if s.tests)
            w("### %s %s (%d of %d covered)" % (title, BIND_TITLE[b], cov, len(sel)))
            w("")
            w("| Statement | Section | Summary | Tests |")
            w("|---|---|---|---|")
            for s in sel:
                if s.tests:
                    cells = []
                    for rel, test in sorted(s.tests):
                        cells.append("[%s](../%s) `%s`" % (os.path.basename(rel), rel, test))
                    tests = "<br>".join(cells)
                elif s.na:
                    tests = "not applicable: %s" % md(s.na)
                else:
                    tests = "**not covered**"
                w("| %s | %s | %s | %s |" % (s.id, s.section, md(s.summary), tests))
            w("")
        missing = [s.id for s in sorted(stmts.values(), key=lambda s: id_key(s.id))
                   if s.binds != "Client" and not s.tests and not s.na]
        w("### %s statements binding a server that no test covers yet (%d)" % (title, len(missing)))
        w("")
        w(", ".join(missing) if missing else "None.")
        w("")
    w("## Tags outside a test")
    w("")
    if stray:
        w("These tags are valid statement ids but belong to no test function")
        w("(helpers, docstrings of modules or classes); they cover nothing.")
        w("")
        by_file = {}
        for rel, _, tag in stray:
            by_file.setdefault(rel, set()).add(tag)
        for rel in sorted(by_file):
            w("- [%s](../%s): %s" % (rel, rel, " ".join(sorted(by_file[rel]))))
    else:
        w("None.")
    w("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; fail on unknown tags or a stale %s" % REPORT)
    args = ap.parse_args()

    errors = []
    specs = [(k, p, t, path, load_statements(path, errors)) for k, p, t, path in SPECS]
    stray = scan(specs, errors)
    text = render(specs, stray)
    for e in errors:
        print("conformance: %s" % e, file=sys.stderr)
    report = os.path.join(ROOT, REPORT)
    if args.check:
        try:
            with open(report, encoding="utf-8") as f:
                old = f.read()
        except OSError as e:
            old = ""
            print("conformance: cannot read %s: %s" % (REPORT, e), file=sys.stderr)
        if old != text:
            print("conformance: %s is stale: run /usr/bin/python3 scripts/conformance.py "
                  "and commit the result" % REPORT, file=sys.stderr)
            diff = list(difflib.unified_diff(old.split("\n"), text.split("\n"),
                                             REPORT, "expected", lineterm="", n=0))
            for line in diff[:60]:
                print(line, file=sys.stderr)
            if len(diff) > 60:
                print("... (%d more diff lines)" % (len(diff) - 60), file=sys.stderr)
            errors.append("stale report")
        if errors:
            return 1
        for key, prefix, title, _, stmts in specs:
            cov, na, _ = counts(stmts.values())
            scov, sna, _ = counts(s for s in stmts.values() if s.binds == "Server")
            nsrv = sum(1 for s in stmts.values() if s.binds == "Server")
            print("conformance: %s: %d/%d statements covered (%d not applicable), "
                  "Server MUST %d/%d (%d not applicable)"
                  % (title, cov, len(stmts), na, scov, nsrv, sna))
        return 0
    with open(report, "w", encoding="utf-8") as f:
        f.write(text)
    print("conformance: wrote %s" % REPORT)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
