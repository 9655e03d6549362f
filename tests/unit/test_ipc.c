// Unit tests of src/daemon/ipc: the command channel's server (NNG's rep0 wire
// protocol without NNG, on its own thread, handler allowed to block) and
// client (NNG req0 with a timeout), over real ipc:// sockets in a temporary
// directory and tcp:// on loopback. The NNG client and raw NNG req0 sockets
// prove interoperability; raw POSIX sockets speaking the SP framing send
// what NNG never would (bad headers, oversized or truncated messages,
// pipelined requests, silence).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "src/daemon/ipc.h"

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
	bool            echo; // answer "<verb>:<path>" instead of text
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
	if (r->echo) {
		char buf[300];
		snprintf(buf, sizeof(buf), "%s:%s", verb, conf_path != NULL ? conf_path : "");
		*reply = strdup(buf);
	} else {
		*reply = r->text != NULL ? strdup(r->text) : NULL;
	}
	int st = r->status;
	pthread_mutex_unlock(&r->mtx);
	return st;
}

// Starts a server on address u with handler r; fails the test if it
// cannot. Returns the server.
static ipc_server *start_at(const char *u, rec *r)
{
	char        err[256] = "";
	ipc_server *s        = ipc_server_start(u, rec_handler, r, err, sizeof(err));
	if (s == NULL) {
		fail_msg("ipc_server_start(%s): %s", u, err);
	}
	return s;
}

// Starts a server on url with handler r. Returns the server.
static ipc_server *start_ok(rec *r)
{
	return start_at(url, r);
}

// Returns the number of calls r has seen.
static int rec_calls(rec *r)
{
	pthread_mutex_lock(&r->mtx);
	int n = r->calls;
	pthread_mutex_unlock(&r->mtx);
	return n;
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
	bool        ok;
	char        err[256];
	nmq_err     rc = ipc_request(
	        url, "reload", "/etc/x y/nanomq.conf", 5000, &ok, &reply, err, sizeof(err));
	assert_int_equal(rc, NMQ_OK);
	assert_true(ok);
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
	bool        ok;
	char        err[256];
	assert_int_equal(
	    ipc_request(url, "pid", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_true(ok);
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
	bool        ok;
	char        err[256];
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_false(ok);
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
		bool  ok;
		char  err[256];
		char  path[32];
		snprintf(path, sizeof(path), "/p/%d", i);
		assert_int_equal(
		    ipc_request(url, "reload", path, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
		assert_true(ok);
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
	char     *reply = (char *)"x";
	bool      ok;
	char      err[256] = "";
	long long t0       = now_ms();
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_ENOENT);
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
	r.block           = true;
	ipc_server *s     = start_ok(&r);
	char       *reply = NULL;
	bool        ok;
	char        err[256] = "";
	long long   t0       = now_ms();
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 300, &ok, &reply, err, sizeof(err)), NMQ_ETIMEDOUT);
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
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_true(ok);
	assert_string_equal(reply, "second");
	assert_int_equal(r.calls, 2);
	free(reply);
	ipc_server_stop(s);
	rec_fini(&r);
}

// The request a blocked handler is working on is answered when the handler
// is released from another thread (the way main.c forwards reloads).
typedef struct client_arg {
	nmq_err rc;
	bool    ok;
	char   *reply;
	char    err[256];
} client_arg;

// Runs one client request on its own thread. Returns NULL.
static void *client_thread(void *argp)
{
	client_arg *a = argp;
	a->rc         = ipc_request(
	            url, "reload", "/x.conf", 10000, &a->ok, &a->reply, a->err, sizeof(a->err));
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
	assert_int_equal(a.rc, NMQ_OK);
	assert_false(a.ok);
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
	bool        ok;
	char        err[256];
	assert_int_equal(
	    ipc_request(url, "Re load", NULL, 1000, &ok, &reply, err, sizeof(err)), NMQ_EINVAL);
	assert_null(reply);
	assert_int_equal(
	    ipc_request(url, "reload", "", 1000, &ok, &reply, err, sizeof(err)), NMQ_EINVAL);
	assert_null(reply);
	assert_int_equal(
	    ipc_request("", "reload", NULL, 1000, &ok, &reply, err, sizeof(err)), NMQ_EINVAL);
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
	bool  ok;
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_true(ok);
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
	bool        ok;
	char        err[256];
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_true(ok);
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
	bool        ok;
	char        err[256];
	assert_int_equal(
	    ipc_request(url, "reload", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_true(ok);
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

// ---- Raw clients speaking the SP framing ----

// The slots of the server (IPC_MAX_CONNS in ipc.c).
#define SERVER_SLOTS 16

// Connects a raw unix stream socket to sock_path. Returns the descriptor.
static int raw_connect(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

// Connects a raw TCP socket to 127.0.0.1:port. Returns the descriptor.
static int raw_connect_tcp(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family      = AF_INET;
	sa.sin_port        = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

// Returns a TCP port on 127.0.0.1 that was free a moment ago.
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family      = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len      = sizeof(sa);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

// Reads n bytes from fd, waiting up to ms in all. Returns n, the fewer
// bytes read before end of file (or a reset), or -1 on timeout.
static int read_full(int fd, void *buf, size_t n, int ms)
{
	size_t    got      = 0;
	long long deadline = now_ms() + ms;
	while (got < n) {
		struct pollfd pfd  = { .fd = fd, .events = POLLIN };
		long long     left = deadline - now_ms();
		if (left <= 0 || poll(&pfd, 1, (int)left) == 0) {
			return -1;
		}
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			return (int)got;
		}
		got += (size_t)r;
	}
	return (int)n;
}

// Returns true when the peer closes fd within ms (data read meanwhile is
// discarded).
static bool closed_within(int fd, int ms)
{
	char buf[256];
	for (;;) {
		int r = read_full(fd, buf, sizeof(buf), ms);
		if (r < 0) {
			return false;
		}
		if (r < (int)sizeof(buf)) {
			return true;
		}
	}
}

// Writes all of buf to fd. Returns nothing.
static void write_all(int fd, const void *buf, size_t n)
{
	assert_int_equal(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t)n);
}

// Stores v at p as an n-byte big-endian number. Returns nothing.
static void be_put(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = n; i > 0; i--) {
		p[i - 1] = (uint8_t)v;
		v >>= 8;
	}
}

// Returns the n-byte big-endian number at p.
static uint64_t be_get(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		v = v << 8 | p[i];
	}
	return v;
}

// Fills hdr with the SP header of protocol proto. Returns nothing.
static void sp_hdr(uint8_t *hdr, unsigned proto)
{
	static const uint8_t h[8] = { 0, 'S', 'P', 0, 0, 0, 0, 0 };
	memcpy(hdr, h, 8);
	be_put(hdr + 4, proto, 2);
}

// Reads the server's SP header from fd and checks that it is rep0's.
// Returns nothing.
static void expect_rep0_header(int fd)
{
	uint8_t got[8];
	uint8_t want[8];
	sp_hdr(want, 0x31);
	assert_int_equal(read_full(fd, got, 8, 2000), 8);
	assert_memory_equal(got, want, 8);
}

// Sends the SP header of a req0 peer on fd and checks the server's.
// Returns nothing.
static void greet(int fd)
{
	uint8_t hdr[8];
	sp_hdr(hdr, 0x30);
	write_all(fd, hdr, 8);
	expect_rep0_header(fd);
}

// Appends to out (at *off) one ipc:// message: type byte, length, then
// the payload p (len bytes). Returns nothing.
static void put_msg(uint8_t *out, size_t *off, uint8_t type, const void *p, size_t len)
{
	out[*off] = type;
	be_put(out + *off + 1, len, 8);
	memcpy(out + *off + 9, p, len);
	*off += 9 + len;
}

// Sends one ipc:// message of type type with payload p on fd. Returns
// nothing.
static void send_msg(int fd, uint8_t type, const void *p, size_t len)
{
	uint8_t *buf = malloc(9 + len);
	size_t   off = 0;
	assert_non_null(buf);
	put_msg(buf, &off, type, p, len);
	write_all(fd, buf, off);
	free(buf);
}

// Builds in p a req0 payload: the backtrace words bt (n of them), then
// body. Returns its length.
static size_t req_payload(uint8_t *p, const uint32_t *bt, size_t n, const char *body)
{
	for (size_t i = 0; i < n; i++) {
		be_put(p + 4 * i, bt[i], 4);
	}
	memcpy(p + 4 * n, body, strlen(body));
	return 4 * n + strlen(body);
}

// Reads one ipc:// reply from fd within ms and checks its type byte.
// Returns the payload (malloc'ed, NUL-terminated) with its length in *len,
// or NULL when none came whole.
static uint8_t *read_reply(int fd, size_t *len, int ms)
{
	uint8_t head[9];
	if (read_full(fd, head, 9, ms) != 9) {
		return NULL;
	}
	assert_int_equal(head[0], 1);
	uint64_t n = be_get(head + 1, 8);
	assert_true(n <= 70000);
	uint8_t *p = malloc(n + 1);
	assert_non_null(p);
	if (read_full(fd, p, n, ms) != (int)n) {
		free(p); // cut short by the server
		return NULL;
	}
	p[n] = '\0';
	*len = n;
	return p;
}

// Reads one reply from fd and checks that it echoes the backtrace bt (n
// words) and carries text. Returns nothing.
static void expect_reply(int fd, const uint32_t *bt, size_t n, const char *text)
{
	size_t   len;
	uint8_t *p = read_reply(fd, &len, 5000);
	assert_non_null(p);
	assert_int_equal(len, 4 * n + strlen(text));
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(be_get(p + 4 * i, 4), bt[i]);
	}
	assert_memory_equal(p + 4 * n, text, strlen(text));
	free(p);
}

// Asks the server at url for "pid" with the NNG client and checks the
// answer. Returns nothing.
static void expect_served(const char *u, const char *text)
{
	char *reply = NULL;
	char  err[256];
	bool  ok;
	if (ipc_request(u, "pid", NULL, 5000, &ok, &reply, err, sizeof(err)) != NMQ_OK || !ok) {
		fail_msg("ipc_request(%s): %s", u, err);
	}
	assert_string_equal(reply, text);
	free(reply);
}

// tcp:// works too, with the NNG client and with a raw client (messages
// without a type byte); "*" listens on any address; a bad port or a path
// is refused.
static void test_tcp_round_trip(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "over tcp");
	int  port = free_port();
	char u[64];
	char any[64];
	snprintf(u, sizeof(u), "tcp://127.0.0.1:%d", port);
	snprintf(any, sizeof(any), "tcp://*:%d", port);
	ipc_server *s = start_at(u, &r);
	expect_served(u, "over tcp");
	int     fd = raw_connect_tcp(port);
	uint8_t msg[32];
	greet(fd);
	uint32_t id = 0x80000007u;
	size_t   n  = req_payload(msg + 8, &id, 1, "pid");
	be_put(msg, n, 8);
	write_all(fd, msg, 8 + n);
	uint8_t head[8];
	uint8_t body[32];
	assert_int_equal(read_full(fd, head, 8, 5000), 8);
	assert_int_equal(be_get(head, 8), 4 + strlen("ok\nover tcp"));
	assert_int_equal(read_full(fd, body, 4 + strlen("ok\nover tcp"), 5000), 15);
	assert_int_equal(be_get(body, 4), id);
	assert_memory_equal(body + 4, "ok\nover tcp", 11);
	close(fd);
	ipc_server_stop(s);
	s = start_at(any, &r);
	expect_served(u, "over tcp");
	ipc_server_stop(s);
	char err[256] = "";
	assert_null(ipc_server_start("tcp://127.0.0.1:65536", rec_handler, &r, err, sizeof(err)));
	assert_non_null(strstr(err, "65536"));
	snprintf(u, sizeof(u), "tcp://127.0.0.1:%d/x", port);
	assert_null(ipc_server_start(u, rec_handler, &r, err, sizeof(err)));
	assert_int_equal(rec_calls(&r), 3);
	rec_fini(&r);
}

// Requests sent back to back on one connection are answered in order,
// each reply echoing its request's backtrace (one word from a direct
// client, several through devices, up to eight).
static void test_pipelined_requests_in_order(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, NULL);
	r.echo         = true;
	ipc_server *s  = start_ok(&r);
	int         fd = raw_connect();
	greet(fd);
	static const uint32_t id1[] = { 0x80000001u };
	static const uint32_t id2[] = { 7, 9, 0x80000002u };
	static const uint32_t id3[] = { 1, 2, 3, 4, 5, 6, 7, 0xfffffff3u };
	uint8_t               out[512];
	uint8_t               p[128];
	size_t                off = 0;
	put_msg(out, &off, 1, p, req_payload(p, id1, 1, "reload\n/a.conf"));
	put_msg(out, &off, 1, p, req_payload(p, id2, 3, "reload\n/b.conf"));
	put_msg(out, &off, 1, p, req_payload(p, id3, 8, "pid"));
	write_all(fd, out, off);
	expect_reply(fd, id1, 1, "ok\nreload:/a.conf");
	expect_reply(fd, id2, 3, "ok\nreload:/b.conf");
	expect_reply(fd, id3, 8, "ok\npid:");
	assert_int_equal(rec_calls(&r), 3);
	close(fd);
	ipc_server_stop(s);
	rec_fini(&r);
}

// Clients that connect and say nothing, stop half way through the SP
// header, or half way through a message, do not keep another client from
// being served at once.
static void test_silent_clients_do_not_block(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "served");
	ipc_server *s      = start_ok(&r);
	int         silent = raw_connect();
	int         half   = raw_connect();
	write_all(half, "\0SP", 3);
	int partial = raw_connect();
	greet(partial);
	uint8_t head[9 + 10] = { 1, 0, 0, 0, 0, 0, 0, 0, 100, 0x80, 0, 0, 1, 'r', 'e' };
	write_all(partial, head, sizeof(head));
	long long t0 = now_ms();
	expect_served(url, "served");
	assert_true(now_ms() - t0 < 2000);
	assert_int_equal(rec_calls(&r), 1);
	close(silent);
	close(half);
	close(partial);
	ipc_server_stop(s);
	rec_fini(&r);
}

// A peer whose SP header is not req0's (rep0's protocol, a bad signature,
// non-zero reserved bytes) gets our header and is then disconnected; the
// server keeps serving.
static void test_bad_sp_header_closed(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "still here");
	ipc_server *s = start_ok(&r);
	uint8_t     cases[4][8];
	sp_hdr(cases[0], 0x31);
	sp_hdr(cases[1], 0x30);
	cases[1][1] = 'X';
	sp_hdr(cases[2], 0x30);
	cases[2][7] = 1;
	sp_hdr(cases[3], 0x30);
	cases[3][0] = 1;
	for (int i = 0; i < 4; i++) {
		int fd = raw_connect();
		write_all(fd, cases[i], 8);
		expect_rep0_header(fd);
		assert_true(closed_within(fd, 2000));
		close(fd);
	}
	expect_served(url, "still here");
	assert_int_equal(rec_calls(&r), 1);
	ipc_server_stop(s);
	rec_fini(&r);
}

// A length over IPC_MAX_MSG plus the longest backtrace closes the
// connection before any payload; a request right at the limit (eight
// backtrace words and an IPC_MAX_MSG-byte body) is served.
static void test_oversized_message_closed(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "big one");
	ipc_server *s  = start_ok(&r);
	int         fd = raw_connect();
	greet(fd);
	uint8_t head[9] = { 1 };
	be_put(head + 1, IPC_MAX_MSG + 32 + 1, 8);
	write_all(fd, head, sizeof(head));
	assert_true(closed_within(fd, 2000));
	close(fd);
	size_t   max = IPC_MAX_MSG + 32;
	uint8_t *p   = malloc(max);
	assert_non_null(p);
	static const uint32_t bt[] = { 1, 2, 3, 4, 5, 6, 7, 0x80000001u };
	for (int i = 0; i < 8; i++) {
		be_put(p + 4 * i, bt[i], 4);
	}
	memcpy(p + 32, "reload\n/", 8);
	memset(p + 40, 'x', max - 40);
	fd = raw_connect();
	greet(fd);
	send_msg(fd, 1, p, max);
	expect_reply(fd, bt, 8, "ok\nbig one");
	assert_int_equal(rec_calls(&r), 1);
	assert_int_equal(strlen(r.path), sizeof(r.path) - 1); // cut by rec_handler
	close(fd);
	free(p);
	ipc_server_stop(s);
	rec_fini(&r);
}

// On ipc:// a message whose type byte is not 1 closes the connection.
static void test_bad_message_type_closed(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "ok");
	ipc_server *s  = start_ok(&r);
	int         fd = raw_connect();
	greet(fd);
	uint8_t  p[16];
	uint32_t id = 0x80000001u;
	send_msg(fd, 2, p, req_payload(p, &id, 1, "pid"));
	assert_true(closed_within(fd, 2000));
	close(fd);
	assert_int_equal(rec_calls(&r), 0);
	expect_served(url, "ok");
	ipc_server_stop(s);
	rec_fini(&r);
}

// A payload that ends before its backtrace does (under 4 bytes, or words
// without the end bit up to the end) gets no reply and, as NNG's rep0
// does, costs the peer its connection; the server serves on.
static void test_truncated_backtrace_closed(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "fine");
	ipc_server          *s       = start_ok(&r);
	static const uint8_t cases[] = { 0x80, 0, 0, 0, 1, 0, 0, 0, 2 };
	const size_t         lens[]  = { 0, 2, 3, 4, 6, 8 };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		int fd = raw_connect();
		greet(fd);
		send_msg(fd, 1, lens[i] < 4 ? cases : cases + 1, lens[i]);
		assert_true(closed_within(fd, 2000));
		close(fd);
	}
	assert_int_equal(rec_calls(&r), 0);
	expect_served(url, "fine");
	ipc_server_stop(s);
	rec_fini(&r);
}

// A request whose backtrace has no end among its first eight words is
// dropped without a reply, as NNG's rep0 does, and the same connection
// is then served.
static void test_looping_request_dropped(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "after");
	ipc_server *s  = start_ok(&r);
	int         fd = raw_connect();
	greet(fd);
	static const uint32_t loop[] = { 1, 2, 3, 4, 5, 6, 7, 8, 0x80000009u };
	uint8_t               p[128];
	send_msg(fd, 1, p, req_payload(p, loop, 9, "pid"));
	size_t len;
	assert_null(read_reply(fd, &len, 300));
	uint32_t id = 0x80000042u;
	send_msg(fd, 1, p, req_payload(p, &id, 1, "pid"));
	expect_reply(fd, &id, 1, "ok\nafter");
	assert_int_equal(rec_calls(&r), 1);
	close(fd);
	ipc_server_stop(s);
	rec_fini(&r);
}

// Stopping the server while clients sit idle returns promptly, closes
// them and removes the socket file.
static void test_stop_with_idle_clients(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, NULL);
	ipc_server *s    = start_ok(&r);
	int         idle = raw_connect();
	int         hi   = raw_connect();
	greet(hi);
	long long t0 = now_ms();
	ipc_server_stop(s);
	assert_true(now_ms() - t0 < 1000);
	assert_true(closed_within(idle, 1000));
	assert_true(closed_within(hi, 1000));
	struct stat st;
	assert_int_equal(stat(sock_path, &st), -1);
	close(idle);
	close(hi);
	rec_fini(&r);
}

// With every slot held by an idle client, one more connection waits in
// the listen backlog (no SP header yet) and is taken up as soon as a slot
// frees; then clients are served again.
static void test_too_many_clients(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, "room");
	ipc_server *s = start_ok(&r);
	int         fds[SERVER_SLOTS];
	for (int i = 0; i < SERVER_SLOTS; i++) {
		fds[i] = raw_connect();
		greet(fds[i]);
	}
	int     extra = raw_connect();
	uint8_t b[8];
	assert_int_equal(read_full(extra, b, sizeof(b), 300), -1);
	close(fds[0]);
	expect_rep0_header(extra);
	close(fds[1]);
	expect_served(url, "room");
	close(extra);
	for (int i = 2; i < SERVER_SLOTS; i++) {
		close(fds[i]);
	}
	ipc_server_stop(s);
	rec_fini(&r);
}

// An address that NNG's own rep0 serves is refused, and the check leaves
// that server working (NNG 1.5.2 listeners break on a bare
// connect-and-close).
static void test_live_nng_server_refused(void **state)
{
	(void)state;
	nng_socket rep;
	assert_int_equal(nng_rep0_open(&rep), 0);
	assert_int_equal(nng_listen(rep, url, NULL, 0), 0);
	rec r;
	rec_init(&r, 0, NULL);
	char err[256] = "";
	assert_null(ipc_server_start(url, rec_handler, &r, err, sizeof(err)));
	assert_non_null(strstr(err, "another process serves it"));
	assert_non_null(strstr(err, url));
	nng_socket req;
	assert_int_equal(nng_req0_open(&req), 0);
	assert_int_equal(nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, 5000), 0);
	assert_int_equal(nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, 5000), 0);
	assert_int_equal(nng_dial(req, url, NULL, 0), 0);
	assert_int_equal(nng_send(req, "pid", 3, 0), 0);
	char  *buf = NULL;
	size_t sz  = 0;
	assert_int_equal(nng_recv(rep, &buf, &sz, NNG_FLAG_ALLOC), 0);
	nng_free(buf, sz);
	assert_int_equal(nng_send(rep, "ok\nnng", 6, 0), 0);
	assert_int_equal(nng_recv(req, &buf, &sz, NNG_FLAG_ALLOC), 0);
	assert_int_equal(sz, 6);
	nng_free(buf, sz);
	nng_close(req);
	nng_close(rep);
	rec_fini(&r);
}

// Returns true when the peer has closed fd, reading (and discarding)
// whatever it sent before; does not wait.
static bool peer_closed(int fd)
{
	char buf[256];
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno == ECONNRESET)) {
			return true;
		}
		if (r < 0) {
			return false;
		}
	}
}

// Clients that stay silent, stop half way through the SP header, or
// trickle a request byte by byte are dropped IPC_RECV_TIMEOUT_MS (10 s)
// after they connected: a request must arrive whole in that time, however
// recently its last byte came.
static void test_slow_clients_dropped(void **state)
{
	(void)state;
	rec r;
	rec_init(&r, 0, NULL);
	ipc_server *s      = start_ok(&r);
	long long   t0     = now_ms();
	int         fds[3] = { raw_connect(), raw_connect(), raw_connect() };
	write_all(fds[1], "\0SP", 3);
	greet(fds[2]);
	uint8_t head[9] = { 1, 0, 0, 0, 0, 0, 0, 0, 100 };
	write_all(fds[2], head, sizeof(head));
	long long gone[3] = { 0, 0, 0 };
	int       left    = 3;
	while (left > 0 && now_ms() - t0 < 15000) {
		(void)send(fds[2], "x", 1, MSG_NOSIGNAL);
		struct timespec ts = { 0, 250 * 1000000 };
		nanosleep(&ts, NULL);
		for (int i = 0; i < 3; i++) {
			if (gone[i] == 0 && peer_closed(fds[i])) {
				gone[i] = now_ms() - t0;
				left--;
			}
		}
	}
	for (int i = 0; i < 3; i++) {
		if (gone[i] < 9000 || gone[i] > 13000) {
			fail_msg("client %d dropped after %lld ms", i, gone[i]);
		}
		close(fds[i]);
	}
	assert_int_equal(rec_calls(&r), 0);
	ipc_server_stop(s);
	rec_fini(&r);
}

// A client that sends requests but does not read its replies is dropped
// once a reply has waited IPC_SEND_TIMEOUT_MS (2 s) for room; meanwhile
// other clients are served.
static void test_reply_not_read_dropped(void **state)
{
	(void)state;
	char *big = malloc(60001);
	assert_non_null(big);
	memset(big, 'y', 60000);
	big[60000] = '\0';
	rec r;
	rec_init(&r, 0, big);
	ipc_server *s  = start_ok(&r);
	int         fd = raw_connect();
	greet(fd);
	uint8_t out[10 * 32];
	uint8_t p[32];
	size_t  off = 0;
	for (uint32_t i = 1; i <= 10; i++) {
		uint32_t id = 0x80000000u | i;
		put_msg(out, &off, 1, p, req_payload(p, &id, 1, "pid"));
	}
	write_all(fd, out, off);
	long long t0    = now_ms();
	char     *reply = NULL;
	bool      ok;
	char      err[256];
	assert_int_equal(
	    ipc_request(url, "pid", NULL, 5000, &ok, &reply, err, sizeof(err)), NMQ_OK);
	assert_true(ok);
	assert_true(now_ms() - t0 < 1500);
	assert_string_equal(reply, big);
	free(reply);
	struct timespec ts = { 3, 0 };
	nanosleep(&ts, NULL);
	int    got = 0;
	size_t len;
	for (uint8_t *m; (m = read_reply(fd, &len, 2000)) != NULL; got++) {
		assert_int_equal(be_get(m, 4), 0x80000000u | (uint32_t)(got + 1));
		free(m);
	}
	assert_true(got >= 1);
	assert_true(got < 10);
	assert_true(closed_within(fd, 100));
	close(fd);
	ipc_server_stop(s);
	rec_fini(&r);
	free(big);
}

// A file in the way that is not a socket is neither removed nor served.
static void test_regular_file_kept(void **state)
{
	(void)state;
	FILE *f = fopen(sock_path, "w");
	assert_non_null(f);
	fclose(f);
	rec r;
	rec_init(&r, 0, NULL);
	char err[256] = "";
	assert_null(ipc_server_start(url, rec_handler, &r, err, sizeof(err)));
	assert_non_null(strstr(err, "not a socket"));
	struct stat st;
	assert_int_equal(stat(sock_path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
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
		cmocka_unit_test_setup_teardown(test_tcp_round_trip, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_pipelined_requests_in_order, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_silent_clients_do_not_block, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_bad_sp_header_closed, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_oversized_message_closed, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_bad_message_type_closed, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_truncated_backtrace_closed, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_looping_request_dropped, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_stop_with_idle_clients, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_too_many_clients, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_live_nng_server_refused, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_regular_file_kept, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_slow_clients_dropped, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(
		    test_reply_not_read_dropped, setup_dir, teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
