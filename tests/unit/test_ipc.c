// Unit tests of src/cli/ipc: the command channel's server (rep0 on its own
// thread, handler allowed to block) and client (req0 with a timeout), over
// real ipc:// sockets in a temporary directory, plus raw req0 sockets that
// send malformed requests.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "src/cli/ipc.h"

static char tmpdir[64];
static char sock_path[128];
static char url[160];

// Creates a fresh temporary directory and the URL of a socket in it.
// Returns 0.
static int setup_dir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/nmq-ipc-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	snprintf(sock_path, sizeof(sock_path), "%s/cmd.ipc", tmpdir);
	snprintf(url, sizeof(url), "ipc://%s", sock_path);
	return 0;
}

// Removes the temporary directory and what is left in it. Returns 0.
static int teardown_dir(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

// Returns milliseconds of CLOCK_MONOTONIC.
static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// What the recording handler saw and what it answers.
typedef struct rec {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	int             calls;
	char            verb[80];
	char            path[256];
	bool            had_path;
	pthread_t       thread; // thread of the last call
	int             status; // returned to the client
	const char     *text; // reply text, NULL for none
	bool            block; // wait until release is set
	bool            release;
	bool            blocked; // a call is waiting for release
} rec;

// Initialises r to answer status with text. Returns nothing.
static void rec_init(rec *r, int status, const char *text)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mtx, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->status = status;
	r->text   = text;
}

// Frees the synchronisation objects of r. Returns nothing.
static void rec_fini(rec *r)
{
	pthread_mutex_destroy(&r->mtx);
	pthread_cond_destroy(&r->cv);
}

// The handler: records the request, optionally waits for release, and
// answers r->status and r->text. Returns r->status.
static int rec_handler(void *arg, const char *verb, const char *conf_path, char **reply)
{
	rec *r = arg;
	pthread_mutex_lock(&r->mtx);
	r->calls++;
	snprintf(r->verb, sizeof(r->verb), "%s", verb);
	r->had_path = conf_path != NULL;
	snprintf(r->path, sizeof(r->path), "%s", conf_path != NULL ? conf_path : "");
	r->thread = pthread_self();
	if (r->block) {
		r->blocked = true;
		pthread_cond_broadcast(&r->cv);
		while (!r->release) {
			pthread_cond_wait(&r->cv, &r->mtx);
		}
		r->blocked = false;
	}
	*reply = r->text != NULL ? strdup(r->text) : NULL;
	int st = r->status;
	pthread_mutex_unlock(&r->mtx);
	return st;
}

// Starts a server on url with handler r; fails the test if it cannot.
// Returns the server.
static ipc_server *start_ok(rec *r)
{
	char        err[256] = "";
	ipc_server *s        = ipc_server_start(url, rec_handler, r, err, sizeof(err));
	if (s == NULL) {
		fail_msg("ipc_server_start: %s", err);
	}
	return s;
}

// A request with a path reaches the handler with verb and path intact, on
// the server's own thread, and the "ok" reply and its text come back.
static void test_round_trip_with_path(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "reloaded\nkey=mqtt.max_mqueue_len applied");
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	char        err[256];
	int rc = ipc_request(url, "reload", "/etc/x y/nanomq.conf", 5000, &reply, err, sizeof(err));
	assert_int_equal(rc, 0);
	assert_non_null(reply);
	assert_string_equal(reply, "reloaded\nkey=mqtt.max_mqueue_len applied");
	assert_int_equal(r.calls, 1);
	assert_string_equal(r.verb, "reload");
	assert_true(r.had_path);
	assert_string_equal(r.path, "/etc/x y/nanomq.conf");
	assert_false(pthread_equal(r.thread, pthread_self()));
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// Without a path the handler gets NULL; an empty reply text arrives as "".
static void test_round_trip_no_path_empty_text(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, NULL);
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	char        err[256];
	assert_int_equal(ipc_request(url, "pid", NULL, 5000, &reply, err, sizeof(err)), 0);
	assert_non_null(reply);
	assert_string_equal(reply, "");
	assert_false(r.had_path);
	assert_string_equal(r.verb, "pid");
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// A handler failure comes back as status 1 with the error text.
static void test_error_status(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 1, "a.conf:3: mqtt.max_mqueue_len: -1 is out of range");
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	char        err[256];
	assert_int_equal(ipc_request(url, "reload", NULL, 5000, &reply, err, sizeof(err)), 1);
	assert_string_equal(reply, "a.conf:3: mqtt.max_mqueue_len: -1 is out of range");
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// Requests are served one after the other, each with its own answer, and a
// long reply arrives whole.
static void test_many_requests_and_long_reply(void **state)
{
	(void)state;
	char *big = malloc(40000);
	assert_non_null(big);
	for (int i = 0; i < 39999; i++) {
		big[i] = (char)('a' + i % 26);
	}
	big[39999] = '\0';
	rec r;
	rec_init(&r, 0, big);
	ipc_server *s = start_ok(&r);
	for (int i = 0; i < 20; i++) {
		char *reply = NULL;
		char  err[256];
		char  path[32];
		snprintf(path, sizeof(path), "/p/%d", i);
		assert_int_equal(
		    ipc_request(url, "reload", path, 5000, &reply, err, sizeof(err)), 0);
		assert_string_equal(reply, big);
		assert_string_equal(r.path, path);
		free(reply);
	}
	assert_int_equal(r.calls, 20);
	ipc_server_stop(s);
	rec_fini(&r);
	free(big);
}

// With nothing listening the client fails at once, naming the address.
static void test_no_server(void **state)
{
	(void)state;
	char     *reply    = (char *)"x";
	char      err[256] = "";
	long long t0       = now_ms();
	assert_int_equal(ipc_request(url, "reload", NULL, 5000, &reply, err, sizeof(err)), -1);
	assert_true(now_ms() - t0 < 2000);
	assert_null(reply);
	assert_non_null(strstr(err, sock_path));
}

// A handler that blocks longer than the client's timeout: the client gives
// up after about its timeout; the handler, once released, finishes; the
// server then still answers the next client; and stop returns.
static void test_blocking_handler_and_timeout(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "late");
	r.block              = true;
	ipc_server *s        = start_ok(&r);
	char       *reply    = NULL;
	char        err[256] = "";
	long long   t0       = now_ms();
	assert_int_equal(ipc_request(url, "reload", NULL, 300, &reply, err, sizeof(err)), -1);
	long long took = now_ms() - t0;
	assert_true(took >= 250);
	assert_true(took < 3000);
	assert_null(reply);
	assert_non_null(strstr(err, "no answer"));
	pthread_mutex_lock(&r.mtx);
	assert_true(r.blocked);
	r.block   = false;
	r.release = true;
	r.text    = "second";
	pthread_cond_broadcast(&r.cv);
	pthread_mutex_unlock(&r.mtx);
	assert_int_equal(ipc_request(url, "reload", NULL, 5000, &reply, err, sizeof(err)), 0);
	assert_string_equal(reply, "second");
	assert_int_equal(r.calls, 2);
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// The request a blocked handler is working on is answered when the handler
// is released from another thread (the way main.c forwards reloads).
typedef struct client_arg {
	int   rc;
	char *reply;
	char  err[256];
} client_arg;

// Runs one client request on its own thread. Returns NULL.
static void *client_thread(void *argp)
{
	client_arg *a = argp;
	a->rc = ipc_request(url, "reload", "/x.conf", 10000, &a->reply, a->err, sizeof(a->err));
	return NULL;
}

static void test_handler_released_from_other_thread(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 1, "x.conf:1:1: syntax error");
	r.block       = true;
	ipc_server *s = start_ok(&r);
	client_arg  a;
	memset(&a, 0, sizeof(a));
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, client_thread, &a), 0);
	pthread_mutex_lock(&r.mtx);
	while (!r.blocked) {
		pthread_cond_wait(&r.cv, &r.mtx);
	}
	r.release = true;
	pthread_cond_broadcast(&r.cv);
	pthread_mutex_unlock(&r.mtx);
	pthread_join(t, NULL);
	assert_int_equal(a.rc, 1);
	assert_string_equal(a.reply, "x.conf:1:1: syntax error");
	free(a.reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// Sends raw bytes with a req0 socket and returns the raw reply (malloc'ed,
// NUL-terminated).
static char *raw_request(const void *body, size_t len)
{
	nng_socket sock;
	assert_int_equal(nng_req0_open(&sock), 0);
	assert_int_equal(nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 5000), 0);
	assert_int_equal(nng_dial(sock, url, NULL, 0), 0);
	assert_int_equal(nng_send(sock, (void *)body, len, 0), 0);
	char  *buf = NULL;
	size_t sz  = 0;
	assert_int_equal(nng_recv(sock, &buf, &sz, NNG_FLAG_ALLOC), 0);
	char *out = malloc(sz + 1);
	assert_non_null(out);
	memcpy(out, buf, sz);
	out[sz] = '\0';
	nng_free(buf, sz);
	nng_close(sock);
	return out;
}

// Malformed requests get "error" without reaching the handler, and the
// server keeps serving.
static void test_malformed_requests(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "fine");
	ipc_server       *s     = start_ok(&r);
	static const char bad[] = "reload\n"; // newline without a path
	const struct {
		const void *p;
		size_t      n;
	} cases[] = {
		{ "", 0 },
		{ bad, sizeof(bad) - 1 },
		{ "Reload", 6 },
		{ "re load", 7 },
		{ "reload\0/x", 9 },
		{ "\n/etc/nanomq.conf", 17 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *out = raw_request(cases[i].p, cases[i].n);
		assert_string_equal(out, "error\nmalformed request");
		free(out);
	}
	assert_int_equal(r.calls, 0);
	char *out = raw_request("reload\n/etc/a b.conf", 20);
	assert_string_equal(out, "ok\nfine");
	assert_string_equal(r.path, "/etc/a b.conf");
	free(out);
	ipc_server_stop(s);
	rec_fini(&r);
}

// The client refuses a bad verb or an empty path without sending anything.
static void test_client_validates(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "fine");
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	char        err[256];
	assert_int_equal(ipc_request(url, "Re load", NULL, 1000, &reply, err, sizeof(err)), -1);
	assert_null(reply);
	assert_int_equal(ipc_request(url, "reload", "", 1000, &reply, err, sizeof(err)), -1);
	assert_null(reply);
	assert_int_equal(ipc_request("", "reload", NULL, 1000, &reply, err, sizeof(err)), -1);
	assert_int_equal(r.calls, 0);
	ipc_server_stop(s);
	rec_fini(&r);
}

// The socket file is private to its owner.
static void test_socket_mode(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, NULL);
	ipc_server *s = start_ok(&r);
	struct stat st;
	assert_int_equal(stat(sock_path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	ipc_server_stop(s);
	rec_fini(&r);
}

// A second server on the same address fails and says where; the first one
// keeps answering.
static void test_address_in_use(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "first");
	ipc_server *s        = start_ok(&r);
	char        err[256] = "";
	rec         r2;
	rec_init(&r2, 0, "second");
	assert_null(ipc_server_start(url, rec_handler, &r2, err, sizeof(err)));
	assert_non_null(strstr(err, url));
	char *reply = NULL;
	assert_int_equal(ipc_request(url, "reload", NULL, 5000, &reply, err, sizeof(err)), 0);
	assert_string_equal(reply, "first");
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
	rec_fini(&r2);
}

// A socket file left by a dead process (nobody accepts on it) is replaced.
static void test_stale_socket_replaced(void **state)
{
	(void)state;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	assert_true(strlen(sock_path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd); // the file stays, nobody listens
	struct stat st;
	assert_int_equal(stat(sock_path, &st), 0);
	rec r;
	rec_init(&r, 0, "new");
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	char        err[256];
	assert_int_equal(ipc_request(url, "reload", NULL, 5000, &reply, err, sizeof(err)), 0);
	assert_string_equal(reply, "new");
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// Stopping an idle server returns promptly and the address can be served
// again at once; stopping NULL is harmless.
static void test_stop_and_restart(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "again");
	for (int i = 0; i < 3; i++) {
		ipc_server *s  = start_ok(&r);
		long long   t0 = now_ms();
		ipc_server_stop(s);
		assert_true(now_ms() - t0 < 2000);
	}
	ipc_server_stop(NULL);
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	char        err[256];
	assert_int_equal(ipc_request(url, "reload", NULL, 5000, &reply, err, sizeof(err)), 0);
	assert_string_equal(reply, "again");
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// A server address that cannot be bound fails with a message.
static void test_bad_address(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, NULL);
	char err[256] = "";
	assert_null(ipc_server_start(
	    "ipc:///nonexistent-dir-nmq/cmd.ipc", rec_handler, &r, err, sizeof(err)));
	assert_non_null(strstr(err, "/nonexistent-dir-nmq/cmd.ipc"));
	err[0] = '\0';
	assert_null(ipc_server_start("bogus://x", rec_handler, &r, err, sizeof(err)));
	assert_true(err[0] != '\0');
	err[0] = '\0';
	assert_null(ipc_server_start("", rec_handler, &r, err, sizeof(err)));
	assert_true(err[0] != '\0');
	rec_fini(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip_with_path, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_round_trip_no_path_empty_text, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_error_status, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_many_requests_and_long_reply, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_no_server, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_blocking_handler_and_timeout, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_handler_released_from_other_thread, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_malformed_requests, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_client_validates, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_socket_mode, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_address_in_use, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_stale_socket_replaced, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_stop_and_restart, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_bad_address, setup_dir, teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
