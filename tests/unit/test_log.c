// Unit tests of src/log and nng/core/log.c: level filtering, line format, the file, console and
// uds targets, size rotation, reopen, rate limiting and concurrent writers.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "src/log/log.h"

static char tmpdir[256];

// Creates a fresh temporary directory for one test. Returns 0.
static int setup_dir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/nmq_test_log.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

// Closes the log and removes the temporary directory. Returns 0.
static int teardown_dir(void **state)
{
	log_close();
	log_set_level(LOG_LEVEL_WARN);
	DIR *d = opendir(tmpdir);
	if (d != NULL) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.') {
				continue;
			}
			char p[512];
			snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(tmpdir);
	return 0;
}

// Returns the whole content of path as a NUL-terminated malloc'ed string,
// or NULL when the file does not exist.
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		return NULL;
	}
	size_t cap = 4096, len = 0;
	char  *buf = malloc(cap);
	size_t n;
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (cap - len < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
	}
	buf[len] = '\0';
	fclose(f);
	return buf;
}

// Returns CLOCK_MONOTONIC in milliseconds, the rate limiter's clock.
static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Pins the one-second window of rl open: its start an hour ahead of the
// clock, so that a loaded machine pausing this thread in the middle of a
// burst cannot make the burst straddle two windows.
static void window_pin(log_ratelimit *rl)
{
	atomic_store(&rl->window_start_ms, mono_ms() + 3600 * 1000);
}

// Ends the window of rl: the next call opens a new one.
static void window_end(log_ratelimit *rl)
{
	atomic_store(&rl->window_start_ms, 1);
}

// Returns the content of <tmpdir>/<name> (see slurp).
static char *slurp_in(const char *name)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	return slurp(p);
}

// Returns the number of lines (newline characters) in s.
static int count_lines(const char *s)
{
	int n = 0;
	for (; s != NULL && *s; s++) {
		n += *s == '\n';
	}
	return n;
}

// Fills a configuration that logs to <tmpdir>/nanomq.log at the given level.
static void file_conf(nmq_conf *c, int level, uint64_t rot_size, int rot_count)
{
	memset(c, 0, sizeof(*c));
	c->log_to             = CONF_LOG_TO_FILE;
	c->log_level          = level;
	c->log_dir            = tmpdir;
	c->log_file           = "nanomq.log";
	c->log_rotation_size  = rot_size;
	c->log_rotation_count = rot_count;
}

// Opens the file target, failing the test on error.
static void open_file_log(int level, uint64_t rot_size, int rot_count)
{
	nmq_conf c;
	char     err[256] = "";
	file_conf(&c, level, rot_size, rot_count);
	assert_int_equal(log_open(&c, err, sizeof(err)), 0);
	assert_string_equal(err, "");
}

// Asserts that s matches the extended regular expression re.
static void assert_matches(const char *s, const char *re)
{
	regex_t rx;
	assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE), 0);
	int rc = regexec(&rx, s, 0, NULL, 0);
	regfree(&rx);
	if (rc != 0) {
		fail_msg("'%s' does not match /%s/", s, re);
	}
}

static void test_level_parse_and_name(void **state)
{
	assert_int_equal(log_level_parse("trace"), LOG_LEVEL_TRACE);
	assert_int_equal(log_level_parse("debug"), LOG_LEVEL_DEBUG);
	assert_int_equal(log_level_parse("info"), LOG_LEVEL_INFO);
	assert_int_equal(log_level_parse("warn"), LOG_LEVEL_WARN);
	assert_int_equal(log_level_parse("ERROR"), LOG_LEVEL_ERROR);
	assert_int_equal(log_level_parse("fatal"), LOG_LEVEL_FATAL);
	assert_int_equal(log_level_parse("warning"), -1);
	assert_int_equal(log_level_parse(""), -1);
	assert_int_equal(log_level_parse(NULL), -1);
	assert_string_equal(log_level_name(LOG_LEVEL_WARN), "warn");
	assert_string_equal(log_level_name(LOG_LEVEL_TRACE), "trace");
	assert_string_equal(log_level_name(99), "unknown");
	log_set_level(42);
	assert_int_equal(log_level_current, LOG_LEVEL_FATAL);
	log_set_level(-3);
	assert_int_equal(log_level_current, LOG_LEVEL_TRACE);
}

static void test_level_filter_skips_arguments(void **state)
{
	int evaluated = 0;
	open_file_log(LOG_LEVEL_WARN, 0, 0);

	log_trace("t", "trace %d", ++evaluated);
	log_debug("t", "debug %d", ++evaluated);
	log_info("t", "info %d", ++evaluated);
	assert_int_equal(evaluated, 0);
#ifndef NMQ_NOLOG
	log_warn("t", "warn %d", ++evaluated);
	log_error("t", "error %d", ++evaluated);
	assert_int_equal(evaluated, 2);
#endif
	log_fatal("t", "fatal %d", 3);

	char *s = slurp_in("nanomq.log");
	assert_non_null(s);
	assert_null(strstr(s, "trace"));
	assert_null(strstr(s, "debug"));
	assert_null(strstr(s, "info"));
#ifndef NMQ_NOLOG
	assert_non_null(strstr(s, "warn  t: warn 1\n"));
	assert_non_null(strstr(s, "error t: error 2\n"));
	assert_int_equal(count_lines(s), 3);
#endif
	assert_non_null(strstr(s, "fatal t: fatal 3\n"));
	free(s);

	// Lowering the level at run time takes effect at once.
	log_set_level(LOG_LEVEL_DEBUG);
	evaluated = 0;
	log_trace("t", "%d", ++evaluated);
	log_debug("t", "%d", ++evaluated);
#ifndef NMQ_NOLOG
	assert_int_equal(evaluated, 1);
#endif
}

// Formats the current UTC time as the log does, to the second, into buf.
// The clock is the log's (CLOCK_REALTIME): time() may read a coarser one
// that is still in the previous second.
static void utc_stamp(char *buf, size_t len)
{
	struct timespec ts;
	struct tm       tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
}

static void test_line_format(void **state)
{
	char before[32];
	char after[32];
	open_file_log(LOG_LEVEL_TRACE, 0, 0);
	utc_stamp(before, sizeof(before));
	log_write(LOG_LEVEL_WARN, "session", "client_id=%s peer=%s reason=%s", "abc", "1.2.3.4:5",
	    "keepalive");
	utc_stamp(after, sizeof(after));
	log_write(LOG_LEVEL_INFO, "conf", "loaded");
	log_write(LOG_LEVEL_ERROR, "store", "x=%d", 1);

	char *s = slurp_in("nanomq.log");
	assert_non_null(s);
	assert_int_equal(count_lines(s), 3);
	// The first line's time, to the second, is the UTC time of the call:
	// between the times read before and after it (same width, so the
	// strings compare as the times do).
	assert_true(strncmp(before, s, 19) <= 0 && strncmp(s, after, 19) <= 0);
	const char *ts = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z ";
	char        re[256];
	snprintf(re, sizeof(re), "%s%s", ts,
	    "warn  session: client_id=abc peer=1\\.2\\.3\\.4:5 reason=keepalive$");
	assert_matches(s, re);
	snprintf(re, sizeof(re), "%s%s", ts, "info  conf: loaded$");
	assert_matches(s, re);
	snprintf(re, sizeof(re), "%s%s", ts, "error store: x=1$");
	assert_matches(s, re);
	free(s);
}

static void test_control_characters_cannot_split_lines(void **state)
{
	open_file_log(LOG_LEVEL_TRACE, 0, 0);
	log_write(LOG_LEVEL_WARN, "session", "client_id=%s",
	    "evil\n2026-01-01T00:00:00.000Z fatal x: forged\r");
	char *s = slurp_in("nanomq.log");
	assert_int_equal(count_lines(s), 1);
	assert_non_null(strstr(s, "client_id=evil?2026-01-01T00:00:00.000Z fatal x: forged?\n"));
	free(s);
}

static void test_long_lines(void **state)
{
	open_file_log(LOG_LEVEL_TRACE, 0, 0);
	char *big = malloc(200000);
	memset(big, 'a', 199999);
	big[199999] = '\0';
	big[5000]   = '\0';
	log_write(LOG_LEVEL_WARN, "m", "<%s>", big); // 5002 bytes: kept whole
	big[5000] = 'a';
	log_write(LOG_LEVEL_WARN, "m", "<%s>", big); // cut at 64 KiB
	free(big);

	char *s = slurp_in("nanomq.log");
	assert_int_equal(count_lines(s), 2);
	char *l2  = strchr(s, '\n') + 1;
	*(l2 - 1) = '\0';
	assert_non_null(strstr(s, "m: <"));
	assert_int_equal(strlen(strstr(s, "<")), 5002);
	assert_true(strlen(l2) < 65536);
	assert_true(strlen(l2) > 65000);
	assert_memory_equal(l2 + strlen(l2) - 4, "...\n", 4);
	free(s);
}

static void test_console_target(void **state)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);

	// Before log_open (once main has called log_init), and after
	// log_close, lines go to stderr in the full format.
	log_init();
	log_close();
	log_set_level(LOG_LEVEL_INFO);
	log_write(LOG_LEVEL_INFO, "main", "before open");
	nmq_conf c;
	char     err[256];
	memset(&c, 0, sizeof(c));
	c.log_to    = CONF_LOG_TO_CONSOLE;
	c.log_level = LOG_LEVEL_ERROR;
	assert_int_equal(log_open(&c, err, sizeof(err)), 0);
	log_write(LOG_LEVEL_WARN, "main", "filtered");
	log_write(LOG_LEVEL_ERROR, "main", "after open");

	dup2(saved, STDERR_FILENO);
	close(saved);
	char *s = slurp(path);
	assert_int_equal(count_lines(s), 2);
	assert_matches(s, "Z info  main: before open$");
	assert_matches(s, "Z error main: after open$");
	assert_null(strstr(s, "filtered"));
	free(s);
}

static void test_open_errors(void **state)
{
	nmq_conf c;
	char     err[256] = "";
	file_conf(&c, LOG_LEVEL_WARN, 0, 0);
	c.log_dir = "/nonexistent/nmq/dir";
	assert_int_equal(log_open(&c, err, sizeof(err)), NMQ_ENOENT);
	assert_non_null(strstr(err, "/nonexistent/nmq/dir/nanomq.log"));

	memset(&c, 0, sizeof(c));
	c.log_to = CONF_LOG_TO_UDS;
	err[0]   = '\0';
	assert_int_equal(log_open(&c, err, sizeof(err)), NMQ_EINVAL);
	assert_non_null(strstr(err, "uds_addr"));
}

static void test_reconfigure_switches_file(void **state)
{
	open_file_log(LOG_LEVEL_WARN, 0, 0);
	log_write(LOG_LEVEL_WARN, "m", "one");
	nmq_conf c;
	char     err[256];
	file_conf(&c, LOG_LEVEL_WARN, 0, 0);
	c.log_file = "other.log";
	assert_int_equal(log_open(&c, err, sizeof(err)), 0);
	log_write(LOG_LEVEL_WARN, "m", "two");

	// A failed reconfiguration keeps the running one.
	c.log_dir = "/nonexistent/nmq/dir";
	assert_int_equal(log_open(&c, err, sizeof(err)), NMQ_ENOENT);
	log_write(LOG_LEVEL_WARN, "m", "three");

	char *a = slurp_in("nanomq.log");
	char *b = slurp_in("other.log");
	assert_int_equal(count_lines(a), 1);
	assert_non_null(strstr(a, "m: one\n"));
	assert_int_equal(count_lines(b), 2);
	assert_non_null(strstr(b, "m: two\n"));
	assert_non_null(strstr(b, "m: three\n"));
	free(a);
	free(b);
}

// Returns the "n=<number>" of the first line of s, or -1.
static int first_seq(const char *s)
{
	const char *p = s == NULL ? NULL : strstr(s, "n=");
	return p == NULL ? -1 : atoi(p + 2);
}

// Returns the "n=<number>" of the last line of s, or -1.
static int last_seq(const char *s)
{
	const char *p = NULL, *q = s;
	while (q != NULL && (q = strstr(q, "n=")) != NULL) {
		p = q++;
	}
	return p == NULL ? -1 : atoi(p + 2);
}

static void test_rotation(void **state)
{
	// Each line is about 50 bytes; 300 bytes hold 5 or 6 lines.
	open_file_log(LOG_LEVEL_WARN, 300, 3);
	for (int i = 0; i < 100; i++) {
		log_write(LOG_LEVEL_WARN, "rot", "n=%03d", i);
	}
	char *live = slurp_in("nanomq.log");
	char *r[5];
	for (int i = 1; i <= 4; i++) {
		char name[32];
		snprintf(name, sizeof(name), "nanomq.log.%d", i);
		r[i] = slurp_in(name);
	}
	assert_non_null(live);
	assert_non_null(r[1]);
	assert_non_null(r[2]);
	assert_non_null(r[3]);
	assert_null(r[4]); // count = 3: the oldest was deleted
	assert_true(strlen(live) <= 300);
	// Every rotated file was filled to the size without passing it.
	for (int i = 1; i <= 3; i++) {
		assert_true(strlen(r[i]) <= 300);
		assert_true(strlen(r[i]) > 300 - 60);
	}
	// The files hold one contiguous run of the most recent lines.
	assert_int_equal(last_seq(live), 99);
	assert_int_equal(first_seq(live), last_seq(r[1]) + 1);
	assert_int_equal(first_seq(r[1]), last_seq(r[2]) + 1);
	assert_int_equal(first_seq(r[2]), last_seq(r[3]) + 1);
	assert_true(first_seq(r[3]) > 0); // older lines are gone
	int total = count_lines(live) + count_lines(r[1]) + count_lines(r[2]) + count_lines(r[3]);
	assert_int_equal(total, 100 - first_seq(r[3]));
	free(live);
	for (int i = 1; i <= 4; i++) {
		free(r[i]);
	}
}

static void test_rotation_count_zero_truncates(void **state)
{
	open_file_log(LOG_LEVEL_WARN, 300, 0);
	for (int i = 0; i < 20; i++) {
		log_write(LOG_LEVEL_WARN, "rot", "n=%03d", i);
	}
	char *live = slurp_in("nanomq.log");
	char *r1   = slurp_in("nanomq.log.1");
	assert_null(r1);
	assert_true(strlen(live) <= 300);
	assert_int_equal(last_seq(live), 19);
	free(live);
}

static void test_rotation_existing_file_size_counts(void **state)
{
	// A file left by a previous run counts towards the rotation size.
	char path[512];
	snprintf(path, sizeof(path), "%s/nanomq.log", tmpdir);
	FILE *f = fopen(path, "w");
	for (int i = 0; i < 290; i++) {
		fputc('x', f);
	}
	fclose(f);
	open_file_log(LOG_LEVEL_WARN, 300, 2);
	log_write(LOG_LEVEL_WARN, "rot", "n=1");
	char *live = slurp_in("nanomq.log");
	char *r1   = slurp_in("nanomq.log.1");
	assert_non_null(r1);
	assert_int_equal(strlen(r1), 290);
	assert_int_equal(count_lines(live), 1);
	free(live);
	free(r1);
}

static void test_relative_path_survives_chdir(void **state)
{
	// daemonize() changes to "/" after log_open: a relative log.dir must
	// keep naming the same file for reopen and rotation.
	char cwd[512];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(tmpdir), 0);
	nmq_conf c;
	char     err[256];
	file_conf(&c, LOG_LEVEL_WARN, 0, 0);
	c.log_dir  = NULL;
	c.log_file = "rel.log";
	int rc     = log_open(&c, err, sizeof(err));
	assert_int_equal(chdir("/"), 0);
	assert_int_equal(rc, 0);
	log_reopen();
	log_write(LOG_LEVEL_WARN, "m", "after chdir");
	assert_int_equal(chdir(cwd), 0);
	char *s = slurp_in("rel.log");
	assert_non_null(s);
	assert_non_null(strstr(s, "m: after chdir\n"));
	free(s);
}

static void test_reopen(void **state)
{
	open_file_log(LOG_LEVEL_WARN, 0, 0);
	log_write(LOG_LEVEL_WARN, "m", "first");
	char a[512], b[512];
	snprintf(a, sizeof(a), "%s/nanomq.log", tmpdir);
	snprintf(b, sizeof(b), "%s/nanomq.log.old", tmpdir);
	assert_int_equal(rename(a, b), 0); // what logrotate does
	log_write(LOG_LEVEL_WARN, "m", "second"); // still the renamed file
	log_reopen();
	log_write(LOG_LEVEL_WARN, "m", "third");

	char *old = slurp_in("nanomq.log.old");
	char *cur = slurp_in("nanomq.log");
	assert_int_equal(count_lines(old), 2);
	assert_non_null(strstr(old, "m: first\n"));
	assert_non_null(strstr(old, "m: second\n"));
	assert_int_equal(count_lines(cur), 1);
	assert_non_null(strstr(cur, "m: third\n"));
	free(old);
	free(cur);
}

// What the test sink below was handed.
static int  sink_calls;
static int  sink_level;
static int  sink_suppressed;
static char sink_module[32];
static char sink_text[128];

static void test_sink(int level, const char *module, int suppressed, const char *fmt, va_list ap)
{
	sink_calls++;
	sink_level      = level;
	sink_suppressed = suppressed;
	snprintf(sink_module, sizeof(sink_module), "%s", module);
	vsnprintf(sink_text, sizeof(sink_text), fmt, ap);
}

// nng/core/log.c on its own: the built-in stderr sink before any is
// installed, an installed sink gets the clamped level, "-" for a NULL
// module and the rate limit's suppressed count; log_init puts src/log's
// sink back.
static void test_core_sink(void **state)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	int saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
	log_set_sink(NULL);
	log_write(LOG_LEVEL_ERROR, "core", "plain %d", 7);
	log_write(LOG_LEVEL_INFO, "core", "filtered");
	dup2(saved, STDERR_FILENO);
	close(saved);
	char *s = slurp(path);
	assert_string_equal(s, "error core: plain 7\n");
	free(s);

	log_set_sink(test_sink);
	sink_calls = 0;
	log_write(99, NULL, "x=%s", "y");
	assert_int_equal(sink_calls, 1);
	assert_int_equal(sink_level, LOG_LEVEL_FATAL);
	assert_string_equal(sink_module, "-");
	assert_string_equal(sink_text, "x=y");
	assert_int_equal(sink_suppressed, 0);

	static log_ratelimit rl;
	window_pin(&rl);
	for (int i = 0; i < 5; i++) {
		if (log_ratelimit_allow(&rl, 2)) {
			log_write(LOG_LEVEL_WARN, "rl", "i=%d", i);
		}
	}
	assert_int_equal(sink_calls, 3);
	window_end(&rl);
	assert_true(log_ratelimit_allow(&rl, 2));
	log_write(LOG_LEVEL_WARN, "rl", "i=%d", 5);
	assert_int_equal(sink_calls, 4);
	assert_int_equal(sink_suppressed, 3);
	assert_string_equal(sink_text, "i=5");
	log_write(LOG_LEVEL_WARN, "rl", "again");
	assert_int_equal(sink_suppressed, 0);
	log_init();
}

static void test_ratelimit(void **state)
{
	static log_ratelimit rl;
	open_file_log(LOG_LEVEL_WARN, 0, 0);

	window_pin(&rl);
	int allowed = 0;
	for (int i = 0; i < 10; i++) {
		if (log_ratelimit_allow(&rl, 3)) {
			allowed++;
			log_write(LOG_LEVEL_WARN, "rl", "i=%d", i);
		}
	}
	assert_int_equal(allowed, 3);
	assert_int_equal(rl.suppressed, 7);

	// One second later (ended rather than slept for) a new window opens,
	// and its first line reports what was suppressed.
	window_end(&rl);
	assert_true(log_ratelimit_allow(&rl, 3));
	log_write(LOG_LEVEL_WARN, "rl", "i=%d", 10);
	assert_true(log_ratelimit_allow(&rl, 3));
	log_write(LOG_LEVEL_WARN, "rl", "i=%d", 11);

	char *s = slurp_in("nanomq.log");
	assert_int_equal(count_lines(s), 5);
	assert_non_null(strstr(s, "rl: i=2\n"));
	assert_null(strstr(s, "i=3"));
	assert_non_null(strstr(s, "rl: i=10 suppressed=7\n"));
	assert_non_null(strstr(s, "rl: i=11\n"));
	free(s);
}

static void test_warn_rl_macro(void **state)
{
	open_file_log(LOG_LEVEL_WARN, 0, 0);
	int64_t t0 = mono_ms();
	for (int i = 0; i < 25; i++) {
		log_warn_rl("hot", "i=%d", i);
	}
	int64_t took = mono_ms() - t0;
	char   *s    = slurp_in("nanomq.log");
#ifndef NMQ_NOLOG
	// 10 lines a second: one window, unless a loaded machine held this
	// thread over a second in the loop (then 10 per window it spanned).
	if (took < 1000) {
		assert_int_equal(count_lines(s), 10);
	} else {
		assert_true(count_lines(s) >= 10 && count_lines(s) <= 10 * (took / 1000 + 1));
	}
#endif
	free(s);

	// Below the level, the rate limiter is not even consulted.
	log_set_level(LOG_LEVEL_ERROR);
	int evaluated = 0;
	log_warn_rl("hot", "%d", ++evaluated);
	assert_int_equal(evaluated, 0);
}

#define N_THREADS 8
#define N_LINES   2000

// Writes N_LINES lines tagged with the thread number. Returns NULL.
static void *writer(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int i = 0; i < N_LINES; i++) {
		log_write(LOG_LEVEL_WARN, "mt", "thread=%d seq=%05d pad=%s", id, i,
		    "0123456789abcdefghijklmnopqrstuvwxyz");
	}
	return NULL;
}

// Checks every line of s and marks (thread, seq) in seen. Returns the
// number of lines.
static int check_lines(const char *s, unsigned char seen[N_THREADS][N_LINES])
{
	int         n = 0;
	const char *p = s;
	while (p != NULL && *p) {
		const char *nl = strchr(p, '\n');
		assert_non_null(nl);
		int  t = -1, q = -1;
		char want[128];
		assert_true(nl - p > 24);
		assert_int_equal(sscanf(p + 24, " warn  mt: thread=%d seq=%d", &t, &q), 2);
		int wl = snprintf(want, sizeof(want), " warn  mt: thread=%d seq=%05d pad=%s", t, q,
		    "0123456789abcdefghijklmnopqrstuvwxyz");
		assert_int_equal(nl - p, 24 + wl);
		assert_memory_equal(p + 24, want, (size_t)wl);
		assert_true(t >= 0 && t < N_THREADS && q >= 0 && q < N_LINES);
		seen[t][q]++;
		n++;
		p = nl + 1;
	}
	return n;
}

static void test_concurrent_writers(void **state)
{
	static unsigned char seen[N_THREADS][N_LINES];
	pthread_t            th[N_THREADS];

	memset(seen, 0, sizeof(seen));
	open_file_log(LOG_LEVEL_WARN, 128 * 1024, 30);
	for (int i = 0; i < N_THREADS; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i), 0);
	}
	for (int i = 0; i < N_THREADS; i++) {
		pthread_join(th[i], NULL);
	}
	log_close();

	int total = 0;
	for (int i = 0; i <= 31; i++) {
		char name[32];
		if (i == 0) {
			snprintf(name, sizeof(name), "nanomq.log");
		} else {
			snprintf(name, sizeof(name), "nanomq.log.%d", i);
		}
		char *s = slurp_in(name);
		if (s != NULL) {
			assert_true(strlen(s) <= 128 * 1024);
			total += check_lines(s, seen);
		}
		free(s);
	}
	assert_int_equal(total, N_THREADS * N_LINES);
	for (int t = 0; t < N_THREADS; t++) {
		for (int q = 0; q < N_LINES; q++) {
			assert_int_equal(seen[t][q], 1);
		}
	}
}

static void test_uds_target(void **state)
{
	char path[100];
	snprintf(path, sizeof(path), "%.80s/log.sock", tmpdir);
	int rx = socket(AF_UNIX, SOCK_DGRAM, 0);
	assert_true(rx >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_int_equal(bind(rx, (struct sockaddr *)&sa, sizeof(sa)), 0);

	nmq_conf c;
	char     err[256];
	memset(&c, 0, sizeof(c));
	c.log_to       = CONF_LOG_TO_UDS;
	c.log_level    = LOG_LEVEL_INFO;
	c.log_uds_addr = path;
	assert_int_equal(log_open(&c, err, sizeof(err)), 0);
	log_write(LOG_LEVEL_WARN, "session", "client_id=%s", "abc");
	log_write(LOG_LEVEL_INFO, "conf", "ok");

	char buf[1024];
	char re[256];
	// LOG_DAEMON (24) + LOG_WARNING (4) = 28; + LOG_INFO (6) = 30.
	ssize_t n = recv(rx, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	snprintf(re, sizeof(re),
	    "^<28>[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} nanomq\\[%ld\\]: "
	    "session: client_id=abc$",
	    (long)getpid());
	assert_matches(buf, re);
	n = recv(rx, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_matches(buf, "^<30>.*: conf: ok$");
	close(rx);
}

static void test_syslog_target_opens(void **state)
{
	// syslog(3) output cannot be observed here; check that the target can
	// be opened, used and closed together with another one.
	nmq_conf c;
	char     err[256];
	file_conf(&c, LOG_LEVEL_FATAL, 0, 0);
	c.log_to |= CONF_LOG_TO_SYSLOG;
	assert_int_equal(log_open(&c, err, sizeof(err)), 0);
	log_write(LOG_LEVEL_FATAL, "test", "syslog and file");
	log_close();
	char *s = slurp_in("nanomq.log");
	assert_non_null(strstr(s, "fatal test: syslog and file\n"));
	free(s);
}

// log_gmtime() agrees with libc's gmtime_r() on every field it fills: each
// 37th day boundary from 1968 to 2101 (leap years, 2000, 2100), a second before
// and after each, and a spread of times far before and after the epoch.
static void test_gmtime_matches_libc(void **state)
{
	(void)state;
	int64_t samples[4096];
	size_t  n = 0;
	for (int64_t d = -400; d < 48000; d += 37) { // 3,925 samples
		assert_true(n + 3 + 8 <= 4096);
		samples[n++] = d * 86400;
		samples[n++] = d * 86400 - 1;
		samples[n++] = d * 86400 + 86399;
	}
	const int64_t far[] = { -62135596800LL, -2208988800LL, 951782400LL, 951868799LL,
		4107542400LL, 4107628800LL, 253402300799LL, 1795000000LL };
	for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
		samples[n++] = far[i];
	}
	for (size_t i = 0; i < n; i++) {
		time_t    t = (time_t)samples[i];
		struct tm want;
		struct tm got;
		assert_non_null(gmtime_r(&t, &want));
		log_gmtime(samples[i], &got);
		assert_int_equal(got.tm_year, want.tm_year);
		assert_int_equal(got.tm_mon, want.tm_mon);
		assert_int_equal(got.tm_mday, want.tm_mday);
		assert_int_equal(got.tm_hour, want.tm_hour);
		assert_int_equal(got.tm_min, want.tm_min);
		assert_int_equal(got.tm_sec, want.tm_sec);
		assert_int_equal(got.tm_wday, want.tm_wday);
		assert_int_equal(got.tm_yday, want.tm_yday);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_level_parse_and_name),
		cmocka_unit_test_setup_teardown(
		    test_level_filter_skips_arguments, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_line_format, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_control_characters_cannot_split_lines, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_long_lines, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_console_target, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_open_errors, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_reconfigure_switches_file, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_rotation, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_rotation_count_zero_truncates, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_rotation_existing_file_size_counts, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_relative_path_survives_chdir, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_reopen, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_core_sink, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ratelimit, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_warn_rl_macro, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_concurrent_writers, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_uds_target, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_syslog_target_opens, setup_dir, teardown_dir),
		cmocka_unit_test(test_gmtime_matches_libc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
