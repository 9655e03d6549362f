// Unit tests of src/cli: the command line, the pid file, the systemd notify
// protocol, stop/reload by signal, and daemonize. Processes that play the
// running broker are forked children; systemd is played by a datagram
// socket bound by the test.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/daemon/args.h"
#include "src/daemon/ctl.h"
#include "src/daemon/daemon.h"
#include "src/daemon/pidfile.h"
#include "src/daemon/sd_notify.h"

static char tmpdir[64];

// Children started by a test, killed by the teardown even when the test
// failed half-way.
static pid_t children[16];
static int   n_children;

// Creates a fresh temporary directory. Returns 0.
static int setup_dir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/nmq_test_cli.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

// Removes the temporary directory and what the tests left in it. Returns 0.
static int teardown_dir(void **state)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	assert_int_equal(system(cmd), 0);
	for (int i = 0; i < n_children; i++) {
		// Only a child not reaped yet: its pid cannot have been reused.
		if (waitpid(children[i], NULL, WNOHANG) == 0) {
			kill(children[i], SIGKILL);
			waitpid(children[i], NULL, 0);
		}
	}
	n_children = 0;
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	unsetenv("NANOMQ_PID_FILE");
	return 0;
}

// Writes <tmpdir>/<name> into buf. Returns buf.
static char *in_tmp(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
	return buf;
}

// Returns the content of path (up to 4 KiB) in a static buffer, or NULL.
static const char *slurp(const char *path)
{
	static char buf[4096];
	int         fd = open(path, O_RDONLY);
	if (fd < 0) {
		return NULL;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n < 0 ? 0 : n] = '\0';
	return buf;
}

/* ---- the command line -------------------------------------------------- */

// Parses a NULL-terminated list of words after "nanomq". Returns the
// result of cli_args_parse; the message is left in err.
static nmq_err parse(cli_args *a, char *err, size_t errlen, ...)
{
	char   *argv[64] = { "nanomq" };
	int     argc     = 1;
	va_list ap;
	va_start(ap, errlen);
	const char *w;
	while ((w = va_arg(ap, const char *)) != NULL) {
		argv[argc++] = (char *)w;
	}
	va_end(ap);
	return cli_args_parse(a, argc, argv, err, errlen);
}

#define PARSE(a, err, ...) parse(a, err, sizeof(err), __VA_ARGS__, (const char *)NULL)

// Asserts that parsing fails with a message that contains want.
#define PARSE_FAILS(want, ...)                                                                     \
	do {                                                                                       \
		cli_args a_;                                                                       \
		char     e_[256] = "";                                                             \
		assert_int_equal(PARSE(&a_, e_, __VA_ARGS__), NMQ_EINVAL);                         \
		if (strstr(e_, want) == NULL) {                                                    \
			fail_msg("error '%s' does not contain '%s'", e_, want);                    \
		}                                                                                  \
	} while (0)

static void test_args_long_options(void **state)
{
	cli_args a;
	char     err[256];
	assert_int_equal(
	    PARSE(&a, err, "start", "--conf", "/etc/nanomq.conf", "--old_conf", "old.conf", "--url",
	        "nmq-tcp://0.0.0.0:1883", "--url", "tls+nmq-tcp://0.0.0.0:8883", "--daemon",
	        "--tq_thread", "4", "--max_tq_thread", "8", "--parallel", "32", "--property_size",
	        "64", "--msq_len", "1024", "--qos_duration", "10", "--http", "--port", "8081",
	        "--cacert", "ca.pem", "--cert", "cert.pem", "--key", "key.pem", "--keypass",
	        "secret", "--verify", "--fail", "--log_level", "debug", "--log_file",
	        "/var/log/nanomq.log", "--log_stdout", "false", "--log_syslog", "true"),
	    0);
	assert_int_equal(a.verb, CLI_VERB_START);
	assert_false(a.test);
	assert_false(a.help);
	assert_string_equal(a.cli.conf_path, "/etc/nanomq.conf");
	assert_string_equal(a.cli.old_conf_path, "old.conf");
	assert_int_equal(a.cli.n_urls, 2);
	assert_string_equal(a.cli.urls[0], "nmq-tcp://0.0.0.0:1883");
	assert_string_equal(a.cli.urls[1], "tls+nmq-tcp://0.0.0.0:8883");
	assert_int_equal(a.cli.daemon, 1);
	assert_int_equal(a.cli.num_taskq_thread, 4);
	assert_int_equal(a.cli.max_taskq_thread, 8);
	assert_int_equal(a.cli.parallel, 32);
	assert_int_equal(a.cli.property_size, 64);
	assert_int_equal(a.cli.msq_len, 1024);
	assert_int_equal(a.cli.qos_duration, 10);
	assert_int_equal(a.cli.http_enable, 1);
	assert_int_equal(a.cli.http_port, 8081);
	assert_string_equal(a.cli.cacert, "ca.pem");
	assert_string_equal(a.cli.cert, "cert.pem");
	assert_string_equal(a.cli.key, "key.pem");
	assert_string_equal(a.cli.keypass, "secret");
	assert_int_equal(a.cli.verify, 1);
	assert_int_equal(a.cli.fail, 1);
	assert_string_equal(a.cli.log_level, "debug");
	assert_string_equal(a.cli.log_file, "/var/log/nanomq.log");
	assert_int_equal(a.cli.log_stdout, 0);
	assert_int_equal(a.cli.log_syslog, 1);
}

static void test_args_short_and_attached_forms(void **state)
{
	cli_args a;
	char     err[256];
	assert_int_equal(
	    PARSE(&a, err, "-d", "-t", "2", "-T16", "-n", "8", "-s", "32", "-S", "99", "-D", "5",
	        "-p", "9000", "-E", "c.pem", "restart", "--conf=my.conf",
	        "--url=ws://0.0.0.0:8083/mqtt", "--keypass=-starts-with-dash", "--log_stdout=1"),
	    0);
	assert_int_equal(a.verb, CLI_VERB_RESTART);
	assert_int_equal(a.cli.daemon, 1);
	assert_int_equal(a.cli.num_taskq_thread, 2);
	assert_int_equal(a.cli.max_taskq_thread, 16);
	assert_int_equal(a.cli.parallel, 8);
	assert_int_equal(a.cli.property_size, 32);
	assert_int_equal(a.cli.msq_len, 99);
	assert_int_equal(a.cli.qos_duration, 5);
	assert_int_equal(a.cli.http_port, 9000);
	assert_string_equal(a.cli.cert, "c.pem");
	assert_string_equal(a.cli.conf_path, "my.conf");
	assert_string_equal(a.cli.urls[0], "ws://0.0.0.0:8083/mqtt");
	assert_string_equal(a.cli.keypass, "-starts-with-dash");
	assert_int_equal(a.cli.log_stdout, 1);
}

static void test_args_defaults_untouched(void **state)
{
	cli_args a;
	conf_cli init;
	char     err[256];
	conf_cli_init(&init);
	assert_int_equal(PARSE(&a, err, "stop"), 0);
	assert_int_equal(a.verb, CLI_VERB_STOP);
	assert_memory_equal(&a.cli, &init, sizeof(init));
	assert_int_equal(a.cli.daemon, -1);
	assert_null(a.cli.conf_path);
	assert_int_equal(a.cli.n_urls, 0);

	assert_int_equal(PARSE(&a, err, "reload", "--conf", "x.conf"), 0);
	assert_int_equal(a.verb, CLI_VERB_RELOAD);
	assert_string_equal(a.cli.conf_path, "x.conf");
	assert_int_equal(PARSE(&a, err, "start", "--conf", "F", "--test"), 0);
	assert_true(a.test);
	assert_string_equal(cli_verb_name(CLI_VERB_RELOAD), "reload");
	assert_string_equal(cli_verb_name(CLI_VERB_NONE), "");
}

static void test_args_help_and_version(void **state)
{
	cli_args a;
	char     err[256];
	assert_int_equal(PARSE(&a, err, "-h"), 0);
	assert_true(a.help);
	assert_int_equal(PARSE(&a, err, "--help"), 0);
	assert_true(a.help);
	assert_int_equal(PARSE(&a, err, "start", "--conf", "x", "-h"), 0);
	assert_true(a.help);
	assert_int_equal(PARSE(&a, err, "-v"), 0);
	assert_true(a.version);
	assert_false(a.help);
	assert_int_equal(PARSE(&a, err, "--version"), 0);
	assert_true(a.version);
}

static void test_args_errors(void **state)
{
	PARSE_FAILS("missing command", "--conf", "x");
	{
		cli_args a;
		char     err[256];
		char    *argv[] = { "nanomq" };
		assert_int_equal(cli_args_parse(&a, 1, argv, err, sizeof(err)), NMQ_EINVAL);
		assert_non_null(strstr(err, "missing command"));
	}
	PARSE_FAILS("unknown command 'begin'", "begin");
	PARSE_FAILS("unexpected argument 'now'", "start", "now");
	PARSE_FAILS("unknown option '--bogus'", "start", "--bogus");
	PARSE_FAILS("unknown option '-x'", "start", "-x");
	PARSE_FAILS("unknown option '--'", "start", "--");
	PARSE_FAILS("unknown option '-'", "start", "-");
	PARSE_FAILS("option --conf needs a value", "start", "--conf");
	PARSE_FAILS("option --conf needs a value", "start", "--conf", "--url", "tcp://a:1");
	PARSE_FAILS("option -t/--tq_thread needs a value", "start", "-t");
	PARSE_FAILS("option -t/--tq_thread: 'four' is not an integer >= 0", "start", "-t", "four");
	PARSE_FAILS("option -t/--tq_thread: '-1' is not an integer", "start", "--tq_thread=-1");
	PARSE_FAILS("'12x' is not an integer", "start", "-n", "12x");
	PARSE_FAILS("'+3' is not an integer", "start", "-n", "+3");
	PARSE_FAILS("'99999999999' is not an integer", "start", "-n", "99999999999");
	PARSE_FAILS("option -S/--msq_len: '0' is not an integer >= 1", "start", "-S", "0");
	PARSE_FAILS(
	    "option -p/--port: '70000' is not an integer from 1 to 65535", "start", "-p", "70000");
	PARSE_FAILS(
	    "option --log_stdout: 'maybe' is not true or false", "start", "--log_stdout", "maybe");
	PARSE_FAILS("option --log_level: unknown level 'loud'", "start", "--log_level", "loud");
	PARSE_FAILS("'http://x:1' is not a listener URL", "start", "--url", "http://x:1");
	PARSE_FAILS("is not a listener URL", "start", "--url", "nmq-tcp://");
	PARSE_FAILS("option --http takes no value", "start", "--http=1");
	PARSE_FAILS("option -d/--daemon takes no value", "start", "-dx");
	PARSE_FAILS("option --conf: empty value", "start", "--conf=");
	PARSE_FAILS("--test is only valid with start", "stop", "--test");
	PARSE_FAILS("at most 8 URLs", "start", "--url", "tcp://a:1", "--url", "tcp://a:2", "--url",
	    "tcp://a:3", "--url", "tcp://a:4", "--url", "tcp://a:5", "--url", "tcp://a:6", "--url",
	    "tcp://a:7", "--url", "tcp://a:8", "--url", "tcp://a:9");
}

static void test_usage_lists_every_option(void **state)
{
	char  *text = NULL;
	size_t len  = 0;
	FILE  *f    = open_memstream(&text, &len);
	cli_usage(f);
	cli_version(f);
	fclose(f);
	const char *want[] = { "start", "stop", "restart", "reload", "--conf <file>", "--old_conf",
		"--url <url>", "-d, --daemon", "-t, --tq_thread <n>", "-T, --max_tq_thread <n>",
		"-n, --parallel <n>", "-s, --property_size <n>", "-S, --msq_len <n>",
		"-D, --qos_duration <n>", "--http", "-p, --port <n>", "--cacert <file>",
		"-E, --cert <file>", "--key <file>", "--keypass <pass>", "--verify", "--fail",
		"--log_level <level>", "--log_file <path>", "--log_stdout <true|false>",
		"--log_syslog <true|false>", "--test", "-h, --help", "-v, --version",
		"NANOMQ_PID_FILE", "nanomq 0" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (strstr(text, want[i]) == NULL) {
			fail_msg("usage lacks '%s'", want[i]);
		}
	}
	free(text);
}

/* ---- the pid file ------------------------------------------------------ */

// A child process that holds a pid file, as a running broker would.
typedef struct holder {
	pid_t pid;
} holder;

static volatile sig_atomic_t hup_count;
static pidfile               child_pf;

// SIGTERM in a holder: clean exit, as the broker's drain ends.
static void on_term(int sig)
{
	pidfile_release(&child_pf);
	_exit(0);
}

// SIGHUP in a holder: counted and reported on stdout (a pipe).
static void on_hup(int sig)
{
	hup_count++;
	(void)!write(STDOUT_FILENO, "H", 1);
}

// Forks a child that acquires path and then waits; with ignore_term it
// ignores SIGTERM (a broker stuck in its drain). *report receives the read
// end of a pipe carrying "H" per SIGHUP. Returns the holder.
static holder start_holder(const char *path, int ignore_term, int *report)
{
	int ready[2], rep[2];
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(rep), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char err[256];
		alarm(30); // never outlive a crashed test for long
		dup2(rep[1], STDOUT_FILENO);
		signal(SIGTERM, ignore_term ? SIG_IGN : on_term);
		signal(SIGHUP, on_hup);
		if (pidfile_acquire(&child_pf, path, err, sizeof(err)) != 0) {
			_exit(2);
		}
		(void)!write(ready[1], "R", 1);
		for (;;) {
			pause();
		}
	}
	children[n_children++] = pid;
	close(ready[1]);
	close(rep[1]);
	char c = 0;
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(c, 'R');
	close(ready[0]);
	if (report != NULL) {
		*report = rep[0];
	} else {
		close(rep[0]);
	}
	return (holder) { .pid = pid };
}

// Kills a holder with SIGKILL and reaps it. Returns nothing.
static void kill_holder(holder h)
{
	kill(h.pid, SIGKILL);
	waitpid(h.pid, NULL, 0);
}

static void test_pidfile_path_env(void **state)
{
	unsetenv("NANOMQ_PID_FILE");
	assert_string_equal(pidfile_path(), "/tmp/nanomq/nanomq.pid");
	setenv("NANOMQ_PID_FILE", "", 1);
	assert_string_equal(pidfile_path(), PIDFILE_DEFAULT_PATH);
	setenv("NANOMQ_PID_FILE", "/run/nanomq/nanomq.pid", 1);
	assert_string_equal(pidfile_path(), "/run/nanomq/nanomq.pid");
	unsetenv("NANOMQ_PID_FILE");
}

// Returns the pid holding the lock on path (0 for none); fails the test
// when pidfile_read fails.
static pid_t read_holder(const char *path)
{
	char  err[256] = "";
	pid_t pid      = -1;
	if (pidfile_read(path, &pid, err, sizeof(err)) != NMQ_OK) {
		fail_msg("pidfile_read(%s): %s", path, err);
	}
	return pid;
}

static void test_pidfile_acquire_release(void **state)
{
	char    path[256], err[256] = "", want[32];
	pidfile pf;
	in_tmp(path, sizeof(path), "a/b/c/nanomq.pid"); // directories are created
	assert_int_equal(pidfile_acquire(&pf, path, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%ld\n", (long)getpid());
	assert_string_equal(slurp(path), want);
	// Another open file description of the same process conflicts too.
	assert_int_equal(read_holder(path), getpid());
	pidfile pf2;
	assert_int_equal(pidfile_acquire(&pf2, path, err, sizeof(err)), NMQ_EEXIST);
	snprintf(want, sizeof(want), "pid %ld", (long)getpid());
	assert_non_null(strstr(err, want));

	pidfile_release(&pf);
	assert_null(slurp(path));
	assert_int_equal(read_holder(path), 0);
	pidfile_release(&pf); // twice is harmless
}

static void test_pidfile_second_instance_refused(void **state)
{
	char    path[256], err[256] = "", want[64];
	pidfile pf;
	in_tmp(path, sizeof(path), "nanomq.pid");
	holder h = start_holder(path, 0, NULL);

	assert_int_equal(read_holder(path), h.pid);
	assert_int_equal(pidfile_acquire(&pf, path, err, sizeof(err)), NMQ_EEXIST);
	snprintf(want, sizeof(want), "already running with pid %ld", (long)h.pid);
	if (strstr(err, want) == NULL) {
		fail_msg("'%s' lacks '%s'", err, want);
	}
	assert_non_null(strstr(err, path));
	kill_holder(h);
}

static void test_pidfile_stale_after_kill9(void **state)
{
	char    path[256], err[256] = "", want[32];
	pidfile pf;
	in_tmp(path, sizeof(path), "nanomq.pid");
	holder h = start_holder(path, 0, NULL);
	kill_holder(h); // kill -9: the file stays, with the dead pid in it

	snprintf(want, sizeof(want), "%ld\n", (long)h.pid);
	assert_string_equal(slurp(path), want);
	assert_int_equal(read_holder(path), 0);
	assert_int_equal(pidfile_acquire(&pf, path, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%ld\n", (long)getpid());
	assert_string_equal(slurp(path), want);
	pidfile_release(&pf);
}

static void test_pidfile_stale_garbage_replaced(void **state)
{
	char    path[256], err[256] = "";
	pidfile pf;
	in_tmp(path, sizeof(path), "nanomq.pid");
	FILE *f = fopen(path, "w");
	fputs("1\n", f); // init's pid, unlocked: must never be reported
	fclose(f);
	assert_int_equal(read_holder(path), 0);
	f = fopen(path, "w");
	fputs("garbage that is much longer than any pid would ever be\n", f);
	fclose(f);
	assert_int_equal(pidfile_acquire(&pf, path, err, sizeof(err)), 0);
	assert_int_equal(atol(slurp(path)), getpid());
	assert_null(strchr(slurp(path), 'g'));
	pidfile_release(&pf);
}

static void test_pidfile_different_files_coexist(void **state)
{
	char    a[256], b[256], err[256] = "";
	pidfile pf;
	in_tmp(a, sizeof(a), "one.pid");
	in_tmp(b, sizeof(b), "two.pid");
	holder h = start_holder(a, 0, NULL);
	assert_int_equal(pidfile_acquire(&pf, b, err, sizeof(err)), 0);
	assert_int_equal(read_holder(a), h.pid);
	assert_int_equal(read_holder(b), getpid());
	pidfile_release(&pf);
	kill_holder(h);
}

static void test_pidfile_lock_survives_fork(void **state)
{
	char    path[256], err[256] = "";
	pidfile pf;
	int     go[2], done[2];
	in_tmp(path, sizeof(path), "nanomq.pid");
	assert_int_equal(pidfile_acquire(&pf, path, err, sizeof(err)), 0);
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	pid_t pid = fork();
	if (pid == 0) {
		// The "daemon": writes its own pid, then waits to be told to exit.
		char c;
		(void)!read(go[0], &c, 1);
		if (pidfile_update(&pf, err, sizeof(err)) != NMQ_OK
		    || write(done[1], "D", 1) != 1) {
			_exit(1);
		}
		(void)!read(go[0], &c, 1);
		_exit(0);
	}
	// The "original process" goes away (closes its descriptor): the lock
	// must stay with the child.
	close(pf.fd);
	pf.fd = -1;
	assert_int_equal(write(go[1], "G", 1), 1);
	char c;
	assert_int_equal(read(done[0], &c, 1), 1);
	assert_int_equal(atol(slurp(path)), pid);
	assert_int_equal(read_holder(path), pid);
	pidfile other;
	assert_int_equal(pidfile_acquire(&other, path, err, sizeof(err)), NMQ_EEXIST);

	assert_int_equal(write(go[1], "X", 1), 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(read_holder(path), 0);
	assert_int_equal(pidfile_update(&pf, err, sizeof(err)), NMQ_EINVAL); // not held
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
}

static void test_pidfile_errors(void **state)
{
	char    path[256], err[256] = "";
	pidfile pf;
	assert_int_equal(pidfile_acquire(&pf, "", err, sizeof(err)), NMQ_EINVAL);
	// A directory that cannot be created.
	in_tmp(path, sizeof(path), "file");
	FILE *f = fopen(path, "w");
	fclose(f);
	in_tmp(path, sizeof(path), "file/sub/nanomq.pid");
	assert_int_not_equal(pidfile_acquire(&pf, path, err, sizeof(err)), NMQ_OK); // ENOTDIR
	assert_non_null(strstr(err, "cannot create directory"));
	// A symlink is not followed.
	char target[256];
	in_tmp(target, sizeof(target), "target");
	in_tmp(path, sizeof(path), "link.pid");
	assert_int_equal(symlink(target, path), 0);
	assert_int_not_equal(pidfile_acquire(&pf, path, err, sizeof(err)), NMQ_OK); // ELOOP
	assert_null(slurp(target));
}

/* ---- systemd notify ---------------------------------------------------- */

// Binds a datagram socket at addr (a path, or "@name"). Returns it.
static int bind_dgram(const char *addr)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t             n  = strlen(addr);
	int                fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	assert_true(fd >= 0);
	memcpy(sa.sun_path, addr, n);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	if (addr[0] == '@') {
		sa.sun_path[0] = '\0';
	} else {
		len++;
	}
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
	struct timeval tv = { 2, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

// Receives one datagram from fd and asserts that it is exactly want.
static void expect_msg(int fd, const char *want)
{
	char    buf[1024];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static void test_sd_notify_unset_is_noop(void **state)
{
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(sd_notify_ready(), NMQ_OK);
	assert_int_equal(sd_notify_reloading(), NMQ_OK);
	assert_int_equal(sd_notify_stopping(), NMQ_OK);
	assert_int_equal(sd_notify_watchdog(), NMQ_OK);
	assert_int_equal(sd_notify_status("x=%d", 1), NMQ_OK);
}

// Returns CLOCK_MONOTONIC in microseconds.
static unsigned long long mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
}

// Plays systemd on addr and checks every message the broker sends.
static void check_notify_protocol(const char *addr)
{
	int fd = bind_dgram(addr);
	setenv("NOTIFY_SOCKET", addr, 1);

	assert_int_equal(sd_notify_ready(), NMQ_OK);
	expect_msg(fd, "READY=1");

	unsigned long long before = mono_us();
	assert_int_equal(sd_notify_reloading(), NMQ_OK);
	unsigned long long after = mono_us();
	char               buf[256];
	ssize_t            n = recv(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	unsigned long long usec;
	char               tail;
	assert_int_equal(sscanf(buf, "RELOADING=1\nMONOTONIC_USEC=%llu%c", &usec, &tail), 1);
	assert_true(usec >= before && usec <= after);

	assert_int_equal(sd_notify_stopping(), NMQ_OK);
	expect_msg(fd, "STOPPING=1");
	assert_int_equal(sd_notify_watchdog(), NMQ_OK);
	expect_msg(fd, "WATCHDOG=1");
	assert_int_equal(sd_notify_status("serving clients=%d", 3), NMQ_OK);
	expect_msg(fd, "STATUS=serving clients=3");
	assert_int_equal(sd_notify_status("two\nlines"), NMQ_OK);
	expect_msg(fd, "STATUS=two lines");
	assert_int_equal(sd_notify_send("READY=1\nSTATUS=ok"), NMQ_OK);
	expect_msg(fd, "READY=1\nSTATUS=ok");
	close(fd);
}

static void test_sd_notify_path_socket(void **state)
{
	char path[100];
	in_tmp(path, sizeof(path), "notify");
	check_notify_protocol(path);
}

static void test_sd_notify_abstract_socket(void **state)
{
	char name[64];
	snprintf(name, sizeof(name), "@nmq-test-notify-%ld", (long)getpid());
	check_notify_protocol(name);
}

static void test_sd_notify_errors(void **state)
{
	char path[100];
	setenv("NOTIFY_SOCKET", "relative/path", 1);
	assert_int_equal(sd_notify_ready(), NMQ_EINVAL);
	setenv("NOTIFY_SOCKET", "@", 1);
	assert_int_equal(sd_notify_ready(), NMQ_EINVAL);
	// Nobody listening.
	setenv("NOTIFY_SOCKET", in_tmp(path, sizeof(path), "nobody"), 1);
	assert_int_equal(sd_notify_ready(), NMQ_ENOENT);
	unsetenv("NOTIFY_SOCKET");
}

static void test_sd_notify_watchdog_interval(void **state)
{
	char pid[32];
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	assert_int_equal(sd_notify_watchdog_interval_us(), 0);
	setenv("WATCHDOG_USEC", "30000000", 1);
	assert_int_equal(sd_notify_watchdog_interval_us(), 15000000);
	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(sd_notify_watchdog_interval_us(), 15000000);
	snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(sd_notify_watchdog_interval_us(), 0);
	unsetenv("WATCHDOG_PID");
	setenv("WATCHDOG_USEC", "30s", 1);
	assert_int_equal(sd_notify_watchdog_interval_us(), 0);
	setenv("WATCHDOG_USEC", "-5", 1);
	assert_int_equal(sd_notify_watchdog_interval_us(), 0);
	setenv("WATCHDOG_USEC", "0", 1);
	assert_int_equal(sd_notify_watchdog_interval_us(), 0);
}

/* ---- stop / reload ----------------------------------------------------- */

static void test_ctl_stop_graceful(void **state)
{
	char path[256], msg[256], want[64];
	in_tmp(path, sizeof(path), "nanomq.pid");
	holder h = start_holder(path, 0, NULL);
	assert_int_equal(ctl_stop(path, 5000, false, msg, sizeof(msg)), NMQ_OK);
	snprintf(want, sizeof(want), "nanomq (pid %ld) stopped", (long)h.pid);
	assert_string_equal(msg, want);
	int st;
	assert_int_equal(waitpid(h.pid, &st, 0), h.pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_null(slurp(path)); // the broker removed its pid file
}

static void test_ctl_stop_timeout_then_kill(void **state)
{
	char path[256], msg[256], want[64];
	in_tmp(path, sizeof(path), "nanomq.pid");
	holder h = start_holder(path, 1, NULL); // ignores SIGTERM

	assert_int_equal(ctl_stop(path, 200, false, msg, sizeof(msg)), NMQ_ETIMEDOUT);
	assert_non_null(strstr(msg, "still running"));
	assert_int_equal(kill(h.pid, 0), 0);

	assert_int_equal(ctl_stop(path, 200, true, msg, sizeof(msg)), NMQ_OK);
	snprintf(want, sizeof(want), "nanomq (pid %ld) killed", (long)h.pid);
	assert_non_null(strstr(msg, want));
	int st;
	assert_int_equal(waitpid(h.pid, &st, 0), h.pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);
	// The file stays (kill -9) but is stale: a new start may take it.
	char    err[256];
	pidfile pf;
	assert_int_equal(pidfile_acquire(&pf, path, err, sizeof(err)), 0);
	pidfile_release(&pf);
}

static void test_ctl_stale_pid_is_never_signalled(void **state)
{
	char path[256], msg[256];
	in_tmp(path, sizeof(path), "nanomq.pid");
	// A stale file naming a live process (this test): no signal may reach it.
	FILE *f = fopen(path, "w");
	fprintf(f, "%ld\n", (long)getpid());
	fclose(f);
	signal(SIGHUP, SIG_DFL);
	assert_int_equal(ctl_stop(path, 200, true, msg, sizeof(msg)), NMQ_ENOENT);
	assert_non_null(strstr(msg, "not running"));
	assert_int_equal(ctl_reload(path, msg, sizeof(msg)), NMQ_ENOENT);
	unlink(path);
	assert_int_equal(ctl_stop(path, 200, false, msg, sizeof(msg)), NMQ_ENOENT);
	assert_int_equal(ctl_reload(path, msg, sizeof(msg)), NMQ_ENOENT);
}

static void test_ctl_reload_sends_sighup(void **state)
{
	char path[256], msg[256], want[64];
	int  report;
	in_tmp(path, sizeof(path), "nanomq.pid");
	holder h = start_holder(path, 0, &report);
	assert_int_equal(ctl_reload(path, msg, sizeof(msg)), NMQ_OK);
	snprintf(want, sizeof(want), "reload signal sent to nanomq (pid %ld)", (long)h.pid);
	assert_string_equal(msg, want);
	char c = 0;
	assert_int_equal(read(report, &c, 1), 1);
	assert_int_equal(c, 'H');
	// The broker keeps running after a reload.
	assert_int_equal(kill(h.pid, 0), 0);
	close(report);
	assert_int_equal(ctl_stop(path, 5000, false, msg, sizeof(msg)), NMQ_OK);
	waitpid(h.pid, NULL, 0);
}

/* ---- daemonize --------------------------------------------------------- */

// Forks a process that daemonizes with its stdout and stderr sent to files
// in tmpdir; the daemon writes facts about itself to <tmpdir>/facts and then
// reports status and msg (or exits without reporting when status < 0).
// Returns the exit status of the original process.
static int run_daemonize(int status, const char *msg)
{
	char  out[256], errp[256], facts[256];
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o
		    = open(in_tmp(out, sizeof(out), "stdout"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(
		    in_tmp(errp, sizeof(errp), "stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(o, STDOUT_FILENO);
		dup2(e, STDERR_FILENO);
		int  fd;
		char err[256];
		if (daemonize(&fd, err, sizeof(err)) != NMQ_OK) {
			_exit(99);
		}
		// In the daemon.
		char        cwd[256] = "";
		struct stat st[3], null;
		(void)!getcwd(cwd, sizeof(cwd));
		stat("/dev/null", &null);
		int nulls = 0;
		for (int i = 0; i < 3; i++) {
			if (fstat(i, &st[i]) == 0 && st[i].st_rdev == null.st_rdev) {
				nulls++;
			}
		}
		FILE *f = fopen(in_tmp(facts, sizeof(facts), "facts.tmp"), "w");
		fprintf(f, "pid=%ld sid=%ld leader=%d cwd=%s nulls=%d tty=%d\n", (long)getpid(),
		    (long)getsid(0), getsid(0) == getpid(), cwd, nulls, isatty(0));
		fclose(f);
		char final[256];
		rename(facts, in_tmp(final, sizeof(final), "facts"));
		if (status >= 0) {
			daemon_ready(fd, status, msg);
		}
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_daemonize_reports_success(void **state)
{
	char path[256];
	assert_int_equal(run_daemonize(0, "nanomq started in the background"), 0);
	assert_string_equal(
	    slurp(in_tmp(path, sizeof(path), "stdout")), "nanomq started in the background\n");
	assert_string_equal(slurp(in_tmp(path, sizeof(path), "stderr")), "");
	const char *facts = slurp(in_tmp(path, sizeof(path), "facts"));
	assert_non_null(facts);
	long dpid = 0, dsid = 0;
	int  leader = -1, nulls = -1, tty = -1;
	char cwd[256] = "", here[256] = "";
	assert_int_equal(sscanf(facts, "pid=%ld sid=%ld leader=%d cwd=%255s nulls=%d tty=%d", &dpid,
	                     &dsid, &leader, cwd, &nulls, &tty),
	    6);
	assert_int_equal(leader, 0); // double fork: not a session leader
	assert_true(dsid != getsid(0)); // but in a session of its own
	// It keeps the working directory: relative paths of the configuration
	// mean what they mean in the foreground.
	assert_non_null(getcwd(here, sizeof(here)));
	assert_string_equal(cwd, here);
	assert_int_equal(nulls, 3);
	assert_int_equal(tty, 0);
}

static void test_daemonize_reports_failure(void **state)
{
	char path[256];
	assert_int_equal(run_daemonize(3, "nanomq: cannot bind 0.0.0.0:1883"), 3);
	assert_string_equal(slurp(in_tmp(path, sizeof(path), "stdout")), "");
	assert_string_equal(
	    slurp(in_tmp(path, sizeof(path), "stderr")), "nanomq: cannot bind 0.0.0.0:1883\n");
	// A status that would wrap to 0 is still a failure.
	assert_int_equal(run_daemonize(256, NULL), 1);
}

static void test_daemonize_daemon_dies_silently(void **state)
{
	char path[256];
	assert_int_equal(run_daemonize(-1, NULL), 1);
	assert_non_null(strstr(
	    slurp(in_tmp(path, sizeof(path), "stderr")), "the daemon exited during startup"));
	daemon_ready(-1, 0, "nothing happens"); // not daemonized: a no-op
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_args_long_options),
		cmocka_unit_test(test_args_short_and_attached_forms),
		cmocka_unit_test(test_args_defaults_untouched),
		cmocka_unit_test(test_args_help_and_version),
		cmocka_unit_test(test_args_errors),
		cmocka_unit_test(test_usage_lists_every_option),
		cmocka_unit_test_setup_teardown(test_pidfile_path_env, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pidfile_acquire_release, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pidfile_second_instance_refused, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pidfile_stale_after_kill9, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pidfile_stale_garbage_replaced, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pidfile_different_files_coexist, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pidfile_lock_survives_fork, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_pidfile_errors, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_sd_notify_unset_is_noop, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_sd_notify_path_socket, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_sd_notify_abstract_socket, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_sd_notify_errors, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_sd_notify_watchdog_interval, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ctl_stop_graceful, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_ctl_stop_timeout_then_kill, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_ctl_stale_pid_is_never_signalled, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_ctl_reload_sends_sighup, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_daemonize_reports_success, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_daemonize_reports_failure, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_daemonize_daemon_dies_silently, setup_dir, teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
