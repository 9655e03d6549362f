// Unit tests of the HOCON reader (src/conf/hocon.c): every construct of
// the accepted subset, origins, includes, bounds, and each kind of syntax
// error with its exact line and column.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/conf/hocon.h"

// A parsed document and its messages.
typedef struct parsed {
	hocon_doc  *doc;
	conf_errors errs;
	int         rc;
} parsed;

// Parses text (named "t.conf") into a new document.
static parsed parse(const char *text)
{
	parsed p;

	memset(&p, 0, sizeof(p));
	p.doc = hocon_doc_alloc();
	assert_non_null(p.doc);
	p.rc = hocon_parse_text(p.doc, text, strlen(text), "t.conf", NULL, &p.errs);
	return p;
}

// Frees a parsed document.
static void done(parsed *p)
{
	hocon_doc_free(p->doc);
	conf_errors_free(&p->errs);
}

// Returns the node at a dotted path.
static cJSON *at(parsed *p, const char *path)
{
	return hocon_get_path(p->doc, path);
}

// Asserts that the string at path equals want.
static void assert_str(parsed *p, const char *path, const char *want)
{
	cJSON *n = at(p, path);

	if (n == NULL || !cJSON_IsString(n)) {
		fail_msg("%s: not a string", path);
	}
	assert_string_equal(n->valuestring, want);
}

// Asserts that the number at path equals want.
static void assert_num(parsed *p, const char *path, double want)
{
	cJSON *n = at(p, path);

	if (n == NULL || !cJSON_IsNumber(n)) {
		fail_msg("%s: not a number", path);
	}
	assert_true(n->valuedouble == want);
}

// Asserts that parsing text gives exactly one error, equal to want.
static void assert_one_error(const char *text, const char *want)
{
	parsed p = parse(text);

	assert_int_equal(p.rc, -1);
	if (p.errs.n_errors < 1) {
		fail_msg("no error for: %s", text);
	}
	assert_string_equal(p.errs.errors[0], want);
	if (p.errs.n_errors != 1) {
		fail_msg("%d errors, second: %s", p.errs.n_errors, p.errs.errors[1]);
	}
	done(&p);
}

static void test_objects_and_paths(void **state)
{
	parsed p = parse("a { b { c = 1 } }\n"
	                 "x.y.z = 2\n"
	                 "s1 = 1\n"
	                 "s2 : 2\n"
	                 "s3 { k = v }\n"
	                 "s4 = { k = v }\n"
	                 "s5 : { k = v }\n"
	                 "\"q.k\" = 3\n"
	                 "m.\"a b\".n = 4\n");
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_int_equal(p.errs.n_errors, 0);
	assert_num(&p, "a.b.c", 1);
	assert_num(&p, "x.y.z", 2);
	assert_num(&p, "s1", 1);
	assert_num(&p, "s2", 2);
	assert_str(&p, "s3.k", "v");
	assert_str(&p, "s4.k", "v");
	assert_str(&p, "s5.k", "v");
	assert_non_null(cJSON_GetObjectItemCaseSensitive(hocon_doc_root(p.doc), "q.k"));
	assert_num(&p, "m.a b.n", 4);
	done(&p);
}

static void test_merge_and_override(void **state)
{
	parsed p = parse("a { x = 1, y = 2 }\n"
	                 "a { y = 3, z = 4 }\n"
	                 "a.w = 5\n"
	                 "b = 1\n"
	                 "b = 2\n"
	                 "c = 1\n"
	                 "c { d = 1 }\n"
	                 "e { f = 1 }\n"
	                 "e = 7\n"
	                 "g = [1]\n"
	                 "g = [2, 3]\n"
	                 "h.i = 1\n"
	                 "h = { j = 2 }\n");
	cJSON *g;
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_num(&p, "a.x", 1);
	assert_num(&p, "a.y", 3);
	assert_num(&p, "a.z", 4);
	assert_num(&p, "a.w", 5);
	assert_num(&p, "b", 2);
	assert_num(&p, "c.d", 1);
	assert_num(&p, "e", 7);
	g = at(&p, "g");
	assert_true(cJSON_IsArray(g));
	assert_int_equal(cJSON_GetArraySize(g), 2);
	assert_num(&p, "h.i", 1);
	assert_num(&p, "h.j", 2);
	// Later members come after, each key once.
	assert_int_equal(cJSON_GetArraySize(at(&p, "a")), 4);
	done(&p);
}

static void test_arrays(void **state)
{
	parsed p = parse("a = [1, 2, 3]\n"
	                 "b = [\n"
	                 "  one\n"
	                 "  two,\n"
	                 "  # a comment\n"
	                 "  \"three\"\n"
	                 "]\n"
	                 "c = [[1, 2], [], {k = v}, {\"permit\": \"allow\"}]\n"
	                 "d = [a/#, +/b, x,]\n"
	                 "e = []\n");
	cJSON *b;
	cJSON *c;
	cJSON *d;
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_int_equal(cJSON_GetArraySize(at(&p, "a")), 3);
	b = at(&p, "b");
	assert_int_equal(cJSON_GetArraySize(b), 3);
	assert_string_equal(cJSON_GetArrayItem(b, 0)->valuestring, "one");
	assert_string_equal(cJSON_GetArrayItem(b, 1)->valuestring, "two");
	assert_string_equal(cJSON_GetArrayItem(b, 2)->valuestring, "three");
	c = at(&p, "c");
	assert_int_equal(cJSON_GetArraySize(c), 4);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(c, 0)), 2);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 2), "k")->valuestring, "v");
	assert_string_equal(
	    cJSON_GetObjectItem(cJSON_GetArrayItem(c, 3), "permit")->valuestring, "allow");
	d = at(&p, "d");
	assert_int_equal(cJSON_GetArraySize(d), 3);
	assert_string_equal(cJSON_GetArrayItem(d, 0)->valuestring, "a/#");
	assert_string_equal(cJSON_GetArrayItem(d, 1)->valuestring, "+/b");
	assert_int_equal(cJSON_GetArraySize(at(&p, "e")), 0);
	done(&p);
}

static void test_scalars(void **state)
{
	parsed p = parse("t = true\nf = false\ny = yes\nn = null\n"
	                 "i = 42\nneg = -7\nfl = 1.5\nexp = 1e3\nlead = 0755\n"
	                 "bind = 0.0.0.0:1883\n"
	                 "ws = 0.0.0.0:8083/mqtt\n"
	                 "ip = 127.0.0.1\n"
	                 "hash: $7$101$abc+/def==\n"
	                 "url = http://x.y/z?a=b&c=d\n"
	                 "email = a@b.c\n"
	                 "spaces = hello world   \n"
	                 "hashtag = a#b\n"
	                 "dur = 10s\n"
	                 "size = 1.5MB\n"
	                 "q = \"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\ud83d\\ude00\"\n"
	                 "qhash = \"# not a comment\"\n"
	                 "qempty = \"\"\n");
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_true(cJSON_IsTrue(at(&p, "t")));
	assert_true(cJSON_IsFalse(at(&p, "f")));
	assert_str(&p, "y", "yes");
	assert_true(cJSON_IsNull(at(&p, "n")));
	assert_num(&p, "i", 42);
	assert_num(&p, "neg", -7);
	assert_num(&p, "fl", 1.5);
	assert_num(&p, "exp", 1000);
	assert_str(&p, "lead", "0755");
	assert_str(&p, "bind", "0.0.0.0:1883");
	assert_str(&p, "ws", "0.0.0.0:8083/mqtt");
	assert_str(&p, "ip", "127.0.0.1");
	assert_str(&p, "hash", "$7$101$abc+/def==");
	assert_str(&p, "url", "http://x.y/z?a=b&c=d");
	assert_str(&p, "email", "a@b.c");
	assert_str(&p, "spaces", "hello world");
	assert_str(&p, "hashtag", "a#b");
	assert_str(&p, "dur", "10s");
	assert_str(&p, "size", "1.5MB");
	assert_str(&p, "q", "a\"b\\c/d\n\t\xc3\xa9\xf0\x9f\x98\x80");
	assert_str(&p, "qhash", "# not a comment");
	assert_str(&p, "qempty", "");
	// Raw text is kept for unquoted scalars only.
	assert_string_equal(hocon_raw(p.doc, at(&p, "i")), "42");
	assert_string_equal(hocon_raw(p.doc, at(&p, "fl")), "1.5");
	assert_null(hocon_raw(p.doc, at(&p, "q")));
	done(&p);
}

static void test_comments(void **state)
{
	parsed p = parse("# hash comment\n"
	                 "// slash comment\n"
	                 "   # indented\n"
	                 "a = 1 # trailing\n"
	                 "b = x // trailing\n"
	                 "c = http://host/path\n"
	                 "d { # after brace\n"
	                 "  e = 2 // here\n"
	                 "}\n"
	                 "f = \"q\" # after quoted\n"
	                 "g = [1, # in array\n"
	                 "  2]\n");
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_int_equal(p.errs.n_errors, 0);
	assert_num(&p, "a", 1);
	assert_str(&p, "b", "x");
	assert_str(&p, "c", "http://host/path");
	assert_num(&p, "d.e", 2);
	assert_str(&p, "f", "q");
	assert_int_equal(cJSON_GetArraySize(at(&p, "g")), 2);
	done(&p);
}

static void test_root_braces_and_json(void **state)
{
	parsed p
	    = parse("\xef\xbb\xbf{\n  \"a\": {\"b\": [1, 2, {\"c\": null}]},\n  \"d\": \"e\"\n}\n");
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_str(&p, "d", "e");
	assert_int_equal(cJSON_GetArraySize(at(&p, "a.b")), 3);
	done(&p);
	assert_one_error("{ a = 1 }\nb = 2\n", "t.conf:2:1: unexpected text after the closing '}'");
}

static void test_locations(void **state)
{
	parsed      p = parse("a = 1\n\n  b {\n    c = \"x\"\n  }\nd.e = [\n 1,\n 2 ]\n");
	const char *file;
	int         line;
	int         col;
	(void)state;
	assert_int_equal(p.rc, 0);
	assert_true(hocon_loc(p.doc, at(&p, "a"), &file, &line, &col, NULL));
	assert_string_equal(file, "t.conf");
	assert_int_equal(line, 1);
	assert_int_equal(col, 5);
	assert_true(hocon_loc(p.doc, at(&p, "b"), NULL, &line, &col, NULL));
	assert_int_equal(line, 3);
	assert_int_equal(col, 3);
	assert_true(hocon_loc(p.doc, at(&p, "b.c"), NULL, &line, NULL, NULL));
	assert_int_equal(line, 4);
	assert_true(hocon_loc(p.doc, at(&p, "d"), NULL, &line, NULL, NULL));
	assert_int_equal(line, 6);
	assert_true(
	    hocon_loc(p.doc, cJSON_GetArrayItem(at(&p, "d.e"), 1), NULL, &line, NULL, NULL));
	assert_int_equal(line, 8);
	assert_true(hocon_seq(p.doc, at(&p, "a")) < hocon_seq(p.doc, at(&p, "b")));
	assert_true(hocon_seq(p.doc, at(&p, "b")) < hocon_seq(p.doc, at(&p, "d")));
	assert_false(hocon_loc(p.doc, hocon_doc_root(p.doc), NULL, NULL, NULL, NULL));
	done(&p);
}

static void test_set_get_remove(void **state)
{
	parsed   p = parse("a.b = 1\n");
	int      o = hocon_origin_add(p.doc, "environment variable X");
	cJSON   *n;
	unsigned flags;
	int      line;
	(void)state;
	n = hocon_set_path(p.doc, "a.c.d", cJSON_CreateString("v"), o, 0, HOCON_LOC_LOOSE);
	assert_non_null(n);
	assert_str(&p, "a.c.d", "v");
	assert_num(&p, "a.b", 1);
	assert_true(hocon_loc(p.doc, n, NULL, &line, NULL, &flags));
	assert_int_equal(line, 0);
	assert_true(flags & HOCON_LOC_LOOSE);
	assert_string_equal(hocon_origin_name(p.doc, o), "environment variable X");
	// Replacing a scalar by an object and back.
	assert_non_null(hocon_set_path(p.doc, "a.b.x", cJSON_CreateNumber(2), o, 0, 0));
	assert_num(&p, "a.b.x", 2);
	assert_non_null(hocon_set_path(p.doc, "a.b", cJSON_CreateNumber(3), o, 0, 0));
	assert_num(&p, "a.b", 3);
	hocon_remove_path(p.doc, "a.b");
	assert_null(at(&p, "a.b"));
	assert_non_null(at(&p, "a.c"));
	hocon_remove_path(p.doc, "no.such");
	assert_null(hocon_set_path(p.doc, "bad..path", cJSON_CreateNumber(1), o, 0, 0));
	assert_null(hocon_set_path(p.doc, "", cJSON_CreateNumber(1), o, 0, 0));
	done(&p);
}

// ---------------------------------------------------------------- errors

static void test_syntax_errors(void **state)
{
	(void)state;
	assert_one_error("a = 1\nb = \"abc\nc = 2\n",
	    "t.conf:2:5: string is not closed before the end of the line");
	assert_one_error(
	    "a = \"abc", "t.conf:1:5: string is not closed before the end of the file");
	assert_one_error("a = 1\nb =\nc = 2\n", "t.conf:2:4: missing value (found end of line)");
	assert_one_error("a = # nothing\n", "t.conf:1:14: missing value (found end of line)");
	assert_one_error(
	    "x = 1\ny = \"a\\qb\"\n", "t.conf:2:7: invalid escape sequence in a string");
	assert_one_error("y = \"\\u12\"\n", "t.conf:1:6: \\u must be followed by 4 hex digits");
	assert_one_error(
	    "y = \"\\ud800x\"\n", "t.conf:1:6: unpaired UTF-16 surrogate in \\u escape");
	assert_one_error("y = \"\\u0000\"\n", "t.conf:1:6: \\u0000 is not allowed in a string");
	assert_one_error("a = 1\n}\nb = 2\n", "t.conf:2:1: unexpected '}' (no '{' is open)");
	assert_one_error(
	    "a {\n  b = 1\n", "t.conf:1:3: '{' is not closed before the end of the file");
	assert_one_error(
	    "a = [1,\n 2\n", "t.conf:1:5: '[' is not closed before the end of the file");
	assert_one_error(
	    "a = 1\nb 2\n", "t.conf:2:3: expected '=', ':' or '{' after key \"b\", found '2'");
	assert_one_error(
	    "a = \"x\" y\n", "t.conf:1:9: expected ',' or a new line after a value, found 'y'");
	assert_one_error("a = x\"y\"\n",
	    "t.conf:1:6: unexpected '\"' inside an unquoted value (quote the whole value)");
	assert_one_error("a..b = 1\n", "t.conf:1:3: expected a key, found '.'");
	assert_one_error("= 1\n", "t.conf:1:1: expected a key, found '='");
	assert_one_error(
	    "a = [1, 2] x\n", "t.conf:1:12: expected ',' or a new line after a value, found 'x'");
	assert_one_error("a = [1, \"2\" x]\n",
	    "t.conf:1:13: expected ',' or ']' after an array element, found 'x'");
	assert_one_error("a = [1, ,2]\n", "t.conf:1:9: unexpected ',' (missing array element)");
	assert_one_error("a = \"x\ty\x01\"\n", "t.conf:1:9: control character (0x01) in a string");
	assert_one_error("a = x\x01y\n", "t.conf:1:6: control character (0x01) in a value");
}

static void test_error_recovery(void **state)
{
	parsed p = parse("a = 1\n"
	                 "b = \"open\n"
	                 "c = 2\n"
	                 "d {\n"
	                 "  e = \n"
	                 "  f = 3\n"
	                 "}\n"
	                 "g = 4\n"
	                 "h = [1, , 2]\n"
	                 "i = 5\n");
	(void)state;
	assert_int_equal(p.rc, -1);
	assert_int_equal(p.errs.n_errors, 3);
	assert_string_equal(
	    p.errs.errors[0], "t.conf:2:5: string is not closed before the end of the line");
	assert_string_equal(p.errs.errors[1], "t.conf:5:7: missing value (found end of line)");
	assert_string_equal(p.errs.errors[2], "t.conf:9:9: unexpected ',' (missing array element)");
	// What is valid is kept.
	assert_num(&p, "c", 2);
	assert_num(&p, "d.f", 3);
	assert_num(&p, "g", 4);
	assert_num(&p, "i", 5);
	assert_int_equal(hocon_doc_syntax_errors(p.doc), 3);
	done(&p);
}

static void test_error_limit(void **state)
{
	char  *text = malloc(100 * 8 + 1);
	size_t n    = 0;
	parsed p;
	(void)state;
	for (int i = 0; i < 100; i++) {
		n += (size_t)sprintf(text + n, "k%02d \n", i);
	}
	p = parse(text);
	assert_int_equal(p.rc, -1);
	assert_int_equal(p.errs.n_errors, 20);
	assert_int_equal(p.errs.n_dropped_errors, 0);
	assert_string_equal(p.errs.errors[19],
	    "t.conf:20:5: expected '=', ':' or '{' after key \"k19\", found end of line");
	done(&p);
	free(text);
}

static void test_nul_byte(void **state)
{
	static const char text[] = "a = 1\nb = x\0y\n";
	parsed            p;
	(void)state;
	memset(&p, 0, sizeof(p));
	p.doc = hocon_doc_alloc();
	p.rc  = hocon_parse_text(p.doc, text, sizeof(text) - 1, "t.conf", NULL, &p.errs);
	assert_int_equal(p.rc, -1);
	assert_string_equal(p.errs.errors[0], "t.conf:2:6: NUL byte in the file");
	done(&p);
}

static void test_depth_bound(void **state)
{
	char  *text = malloc(4096);
	size_t n    = 0;
	parsed p;
	(void)state;
	for (int i = 0; i < 100; i++) {
		n += (size_t)sprintf(text + n, "a%d {\n", i);
	}
	text[n] = '\0';
	p       = parse(text);
	assert_int_equal(p.rc, -1);
	assert_int_equal(p.errs.n_errors, 1);
	assert_string_equal(p.errs.errors[0], "t.conf:64:1: values nested deeper than 64 levels");
	done(&p);

	memset(text, '[', 3000);
	memcpy(text, "a = ", 4);
	text[3000] = '\0';
	p          = parse(text);
	assert_int_equal(p.rc, -1);
	assert_string_equal(p.errs.errors[0], "t.conf:1:68: values nested deeper than 64 levels");
	done(&p);

	n = 0;
	for (int i = 0; i < 70; i++) {
		n += (size_t)sprintf(text + n, "k.");
	}
	sprintf(text + n, "x = 1\n");
	p = parse(text);
	assert_int_equal(p.rc, -1);
	assert_non_null(strstr(p.errs.errors[0], "t.conf:1:"));
	done(&p);
	free(text);
}

static void test_size_bound(void **state)
{
	size_t len  = HOCON_MAX_FILE_SIZE + 1;
	char  *text = malloc(len);
	parsed p;
	(void)state;
	memset(text, ' ', len);
	memset(&p, 0, sizeof(p));
	p.doc = hocon_doc_alloc();
	p.rc  = hocon_parse_text(p.doc, text, len, "big.conf", NULL, &p.errs);
	assert_int_equal(p.rc, -1);
	assert_string_equal(p.errs.errors[0], "big.conf: larger than 4194304 bytes");
	done(&p);
	free(text);
}

static void test_many_keys_linear(void **state)
{
	size_t  n    = 0;
	int     keys = 100000;
	char   *text = malloc((size_t)keys * 24);
	parsed  p;
	clock_t t0 = clock();
	(void)state;
	for (int i = 0; i < keys; i++) {
		n += (size_t)sprintf(text + n, "user%d: secret%d\n", i, i);
	}
	for (int i = 0; i < 100; i++) { // later assignments win
		n += (size_t)sprintf(text + n, "user%d: again\n", i);
	}
	p = parse(text);
	assert_int_equal(p.rc, 0);
	assert_int_equal(cJSON_GetArraySize(hocon_doc_root(p.doc)), keys);
	assert_str(&p, "user5", "again");
	assert_str(&p, "user500", "secret500");
	// Quadratic behaviour would take minutes here.
	assert_true((double)(clock() - t0) / CLOCKS_PER_SEC < 30.0);
	done(&p);
	free(text);
}

// ---------------------------------------------------------------- includes

static char tmpdir[64];

// Writes text to tmpdir/name.
static void write_file(const char *name, const char *text)
{
	char  path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

// Parses tmpdir/name as a file.
static parsed parse_file(const char *name)
{
	char   path[256];
	parsed p;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	memset(&p, 0, sizeof(p));
	p.doc = hocon_doc_alloc();
	p.rc  = hocon_parse_file(p.doc, path, &p.errs);
	return p;
}

static int setup_dir(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_hocon.XXXXXX");
	if (mkdtemp(tmpdir) == NULL) {
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "%s/sub", tmpdir);
	return mkdir(cmd, 0700);
}

static int teardown_dir(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_include(void **state)
{
	parsed      p;
	const char *file;
	int         line;
	(void)state;
	write_file("main.conf",
	    "a = 1\n"
	    "auth {\n"
	    "  password = {include \"sub/pwd.conf\"}\n"
	    "  acl {include \"sub/acl.conf\"}\n"
	    "}\n"
	    "include \"top.conf\"\n"
	    "b = 2\n");
	write_file("sub/pwd.conf", "admin: public\n\"user.x\": \"p w\"\n");
	write_file("sub/acl.conf", "rules = [{permit: allow}]\ninclude \"more.conf\"\n");
	write_file("sub/more.conf", "enable = false\n");
	write_file("top.conf", "{ c = 3, a = 10 }\n");
	p = parse_file("main.conf");
	assert_int_equal(p.rc, 0);
	assert_int_equal(p.errs.n_errors, 0);
	assert_num(&p, "a", 10);
	assert_num(&p, "b", 2);
	assert_num(&p, "c", 3);
	assert_str(&p, "auth.password.admin", "public");
	assert_true(cJSON_IsFalse(at(&p, "auth.acl.enable")));
	assert_int_equal(cJSON_GetArraySize(at(&p, "auth.acl.rules")), 1);
	assert_true(hocon_loc(p.doc, at(&p, "auth.password.admin"), &file, &line, NULL, NULL));
	assert_non_null(strstr(file, "sub/pwd.conf"));
	assert_int_equal(line, 1);
	assert_true(hocon_loc(p.doc, at(&p, "auth.acl.enable"), &file, &line, NULL, NULL));
	assert_non_null(strstr(file, "sub/more.conf"));
	done(&p);
}

static void test_include_errors(void **state)
{
	parsed p;
	char   want[256];
	(void)state;
	write_file("missing.conf", "a = 1\nb { include \"nope.conf\" }\n");
	p = parse_file("missing.conf");
	assert_int_equal(p.rc, -1);
	snprintf(want, sizeof(want),
	    "%s/missing.conf:2:5: cannot read include \"%s/nope.conf\": No such file or directory",
	    tmpdir, tmpdir);
	assert_string_equal(p.errs.errors[0], want);
	done(&p);

	write_file("cyc1.conf", "a = 1\ninclude \"cyc2.conf\"\n");
	write_file("cyc2.conf", "b = 1\n\ninclude \"cyc1.conf\"\n");
	p = parse_file("cyc1.conf");
	assert_int_equal(p.rc, -1);
	assert_int_equal(p.errs.n_errors, 1);
	snprintf(want, sizeof(want),
	    "%s/cyc2.conf:3:1: include cycle: \"%s/cyc1.conf\" is already being read", tmpdir,
	    tmpdir);
	assert_string_equal(p.errs.errors[0], want);
	done(&p);

	write_file("self.conf", "include \"self.conf\"\n");
	p = parse_file("self.conf");
	assert_int_equal(p.rc, -1);
	assert_non_null(strstr(p.errs.errors[0], "include cycle"));
	done(&p);

	// A chain of 12 files exceeds the include depth of 8.
	for (int i = 0; i < 12; i++) {
		char name[32];
		char text[64];
		snprintf(name, sizeof(name), "chain%d.conf", i);
		snprintf(text, sizeof(text), "k%d = %d\ninclude \"chain%d.conf\"\n", i, i, i + 1);
		write_file(name, text);
	}
	write_file("chain12.conf", "end = 1\n");
	p = parse_file("chain0.conf");
	assert_int_equal(p.rc, -1);
	assert_int_equal(p.errs.n_errors, 1);
	assert_non_null(strstr(p.errs.errors[0], "chain8.conf:2:1: includes nested deeper than 8"));
	assert_num(&p, "k8", 8);
	assert_null(at(&p, "k9"));
	done(&p);

	// A syntax error inside an include names the included file.
	write_file("bad_inner.conf", "x = 1\ny = [\n");
	write_file("bad_outer.conf", "a { include \"bad_inner.conf\" }\n");
	p = parse_file("bad_outer.conf");
	assert_int_equal(p.rc, -1);
	snprintf(want, sizeof(want),
	    "%s/bad_inner.conf:2:5: '[' is not closed before the end of the file", tmpdir);
	assert_string_equal(p.errs.errors[0], want);
	done(&p);

	// The main file itself.
	p = parse_file("does-not-exist.conf");
	assert_int_equal(p.rc, -1);
	snprintf(want, sizeof(want),
	    "%s/does-not-exist.conf: cannot read: No such file or directory", tmpdir);
	assert_string_equal(p.errs.errors[0], want);
	done(&p);

	p = parse_file("sub");
	assert_int_equal(p.rc, -1);
	assert_non_null(strstr(p.errs.errors[0], "not a regular file"));
	done(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_objects_and_paths),
		cmocka_unit_test(test_merge_and_override),
		cmocka_unit_test(test_arrays),
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_comments),
		cmocka_unit_test(test_root_braces_and_json),
		cmocka_unit_test(test_locations),
		cmocka_unit_test(test_set_get_remove),
		cmocka_unit_test(test_syntax_errors),
		cmocka_unit_test(test_error_recovery),
		cmocka_unit_test(test_error_limit),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_depth_bound),
		cmocka_unit_test(test_size_bound),
		cmocka_unit_test(test_many_keys_linear),
		cmocka_unit_test_setup_teardown(test_include, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_include_errors, setup_dir, teardown_dir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
