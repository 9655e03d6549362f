// The command channel's server: our own thread that speaks the wire
// protocol of NNG's rep0 over ipc:// and tcp:// without NNG, so that serving
// it starts none of NNG's threads. See ipc.h for the wire format and the
// threading rules.
#include "src/daemon/ipc.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/log.h"
#include "src/daemon/ipc_int.h"

// How long a client may take to read its whole reply before it is dropped.
#define IPC_SEND_TIMEOUT_MS 2000
// How long a client has to send its SP header, and then each request
// whole, counted from its connection or from its previous reply; a client
// that is silent or trickles its bytes is dropped after it.
#define IPC_RECV_TIMEOUT_MS 10000
// How long the check for a live server at an ipc:// address waits for it.
#define IPC_PROBE_TIMEOUT_MS 1000
// How long accepting pauses when the process runs out of descriptors.
#define IPC_ACCEPT_PAUSE_MS 100
// Clients served at once; while all are busy, new ones wait in the
// listen backlog.
#define IPC_MAX_CONNS 16
// Mode of an ipc socket file: the owner alone may connect.
#define IPC_SOCKET_MODE 0600
// SP protocol numbers of NNG's req0 and rep0, and the SP header's length.
#define SP_PROTO_REQ0 0x30
#define SP_PROTO_REP0 0x31
#define SP_HEADER_LEN 8
// Backtrace words read before a request is dropped as looping (NNG's
// default maximum TTL).
#define SP_MAX_HOPS 8
// Largest message accepted: IPC_MAX_MSG bytes behind the longest backtrace.
#define IPC_MAX_FRAME (IPC_MAX_MSG + 4 * SP_MAX_HOPS)

// What a connection is doing.
typedef enum {
	CONN_HELLO, // reading the peer's SP header
	CONN_HEAD, // reading a message head: type byte (ipc:// only), length
	CONN_BODY, // reading a message's payload
	CONN_REPLY, // writing a reply; nothing is read meanwhile
} conn_state;

// One client connection. Owned by the server thread.
typedef struct ipc_conn {
	int        fd; // -1 when the slot is free
	conn_state state;
	uint8_t    head[SP_HEADER_LEN + 1]; // SP header or message head read
	uint8_t   *buf; // payload read or reply written (malloc'ed), or NULL
	size_t     need; // bytes the current state reads or writes
	size_t     done; // bytes of them read or written so far
	long long  deadline; // CLOCK_MONOTONIC ms at which the client is dropped
} ipc_conn;

// The server. Set up by ipc_server_start(); between it and the join in
// ipc_server_stop() only the server thread touches it, except wfd.
struct ipc_server {
	int         lfd; // listening socket, or -1
	int         wfd; // eventfd written by ipc_server_stop(), or -1
	bool        framed; // ipc://: each message starts with a type byte
	char       *path; // socket file we created (ipc://), else NULL
	dev_t       dev; // device and inode of that file
	ino_t       ino;
	long long   accept_at; // accept nothing before this (ms)
	pthread_t   thread;
	ipc_handler fn;
	void       *arg;
	ipc_conn    conns[IPC_MAX_CONNS];
};

// Splits a request body into a NUL-terminated verb and path (NULL when
// absent), both copied into one malloc'ed block stored in *block. Returns 0,
// or -1 when the request is malformed or memory runs out.
static int ipc_parse_request(
    const char *buf, size_t len, char **block, const char **verb, const char **path)
{
	if (buf == NULL || len == 0) {
		return -1;
	}
	const char *nl   = memchr(buf, '\n', len);
	size_t      vlen = nl != NULL ? (size_t)(nl - buf) : len;
	if (!ipc_verb_valid(buf, vlen) || memchr(buf, '\0', len) != NULL) {
		return -1;
	}
	if (nl != NULL && vlen + 1 == len) {
		return -1; // a newline announces a path, which must not be empty
	}
	char *b = malloc(len + 2);
	if (b == NULL) {
		return -1;
	}
	memcpy(b, buf, len);
	b[len]  = '\0';
	b[vlen] = '\0';
	*block  = b;
	*verb   = b;
	*path   = nl != NULL ? b + vlen + 1 : NULL;
	return 0;
}

// Returns the n-byte big-endian number at p.
static uint64_t get_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		v = v << 8 | p[i];
	}
	return v;
}

// Stores v at p as an n-byte big-endian number. Returns nothing.
static void put_be(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = n; i > 0; i--) {
		p[i - 1] = (uint8_t)v;
		v >>= 8;
	}
}

// Fills hdr with the SP header that announces protocol proto:
// 00 'S' 'P' 00, the protocol (16 bits, big-endian), 00 00. Returns nothing.
static void sp_header(uint8_t *hdr, unsigned proto)
{
	memset(hdr, 0, SP_HEADER_LEN);
	hdr[1] = 'S';
	hdr[2] = 'P';
	put_be(hdr + 4, proto, 2);
}

// Finds the backtrace at the start of a request's payload p (len bytes):
// 32-bit words up to and including the first whose top bit is set. Returns
// its length in bytes; 0 when the payload ends first (NNG's rep0 then drops
// the peer); -1 when none of the first SP_MAX_HOPS words has the bit (rep0
// then drops the request alone).
static long sp_backtrace_len(const uint8_t *p, size_t len)
{
	for (size_t off = 0; off < 4 * SP_MAX_HOPS; off += 4) {
		if (len - off < 4) {
			return 0;
		}
		if ((p[off] & 0x80) != 0) {
			return (long)(off + 4);
		}
	}
	return -1;
}

// Returns the length of a message head: the type byte (ipc:// only) and
// the 64-bit length.
static size_t msg_head_len(const ipc_server *s)
{
	return s->framed ? 9 : 8;
}

// Closes c and frees what it holds, leaving its slot free. Returns nothing.
static void conn_close(ipc_conn *c)
{
	close(c->fd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

// Closes c because of what `reason` names (a protocol violation, a
// deadline, an error), with a log line: a peer ended by its own end of file
// is closed with conn_close alone. Returns nothing.
static void conn_drop(ipc_conn *c, const char *reason)
{
	log_warn_rl("ipc", "event=client_dropped reason=%s", reason);
	conn_close(c);
}

// Makes c wait for its next message, which must arrive whole within
// IPC_RECV_TIMEOUT_MS. Returns nothing.
static void conn_expect_head(const ipc_server *s, ipc_conn *c)
{
	free(c->buf);
	c->buf      = NULL;
	c->state    = CONN_HEAD;
	c->need     = msg_head_len(s);
	c->done     = 0;
	c->deadline = ipc_now_ms() + IPC_RECV_TIMEOUT_MS;
}

// Builds the reply message to a request whose backtrace is bt (btlen
// bytes): the message head, bt, the status line and text, the last two cut
// to IPC_MAX_MSG bytes. Returns the malloc'ed message with its length in
// *len, or NULL when memory runs out.
static uint8_t *ipc_reply_msg(
    const ipc_server *s, const uint8_t *bt, size_t btlen, int status, const char *text, size_t *len)
{
	const char *head = status == 0 ? "ok\n" : "error\n";
	size_t      hlen = strlen(head);
	size_t      tlen = text != NULL ? strlen(text) : 0;
	if (hlen + tlen > IPC_MAX_MSG) {
		tlen = IPC_MAX_MSG - hlen;
	}
	size_t   mlen = msg_head_len(s);
	size_t   plen = btlen + hlen + tlen;
	uint8_t *m    = malloc(mlen + plen);
	if (m == NULL) {
		return NULL;
	}
	m[0] = 1; // the type byte on ipc://, overwritten by the length on tcp://
	put_be(m + mlen - 8, plen, 8);
	memcpy(m + mlen, bt, btlen);
	memcpy(m + mlen + btlen, head, hlen);
	if (tlen > 0) {
		memcpy(m + mlen + btlen + hlen, text, tlen);
	}
	*len = mlen + plen;
	return m;
}

// Moves the deadlines of every connection but c ms later: time spent in
// the handler is not held against clients that waited for it. Returns
// nothing.
static void ipc_defer_deadlines(ipc_server *s, const ipc_conn *c, long long ms)
{
	for (int i = 0; i < IPC_MAX_CONNS; i++) {
		if (s->conns[i].fd >= 0 && &s->conns[i] != c) {
			s->conns[i].deadline += ms;
		}
	}
}

// What the result n of a non-blocking send() or recv() on c means.
enum io_outcome { IO_RETRY, IO_WAIT, IO_MOVED, IO_CLOSED };

// Classifies n (counting moved bytes into c->done) and closes c on error or
// end of file. Returns the outcome.
static enum io_outcome conn_io(ipc_conn *c, ssize_t n)
{
	if (n < 0 && errno == EINTR) {
		return IO_RETRY;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		return IO_WAIT;
	}
	if (n < 0) {
		log_warn_rl("ipc", "event=client_dropped reason=\"%s\"", strerror(errno));
	}
	if (n <= 0) {
		conn_close(c);
		return IO_CLOSED;
	}
	c->done += (size_t)n;
	return IO_MOVED;
}

// Writes as much of c's reply as its socket takes; once all is written, c
// waits for its next request. Returns nothing; c is closed on error.
static void conn_write(ipc_server *s, ipc_conn *c)
{
	while (c->done < c->need) {
		enum io_outcome o
		    = conn_io(c, send(c->fd, c->buf + c->done, c->need - c->done, MSG_NOSIGNAL));
		if (o == IO_WAIT || o == IO_CLOSED) {
			return;
		}
	}
	conn_expect_head(s, c);
}

// Serves the request whose payload c has read: splits off the backtrace,
// has the body handled (or answers a malformed one with an error) and
// starts writing the reply, which has until IPC_SEND_TIMEOUT_MS to go out.
// As NNG's rep0 does, a request without the end of its backtrace among the
// first SP_MAX_HOPS words gets no reply, and one that ends inside its
// backtrace closes the connection. Returns nothing.
static void conn_request(ipc_server *s, ipc_conn *c)
{
	long bt = sp_backtrace_len(c->buf, c->need);
	if (bt == 0) {
		conn_drop(c, "request_ends_in_backtrace");
		return;
	}
	if (bt < 0) {
		log_warn_rl("ipc", "event=request_ignored reason=backtrace_too_long");
		conn_expect_head(s, c);
		return;
	}
	const char *body   = (const char *)c->buf + bt;
	char       *block  = NULL;
	const char *verb   = NULL;
	const char *path   = NULL;
	char       *reply  = NULL;
	const char *text   = "malformed request";
	int         status = 1;
	if (ipc_parse_request(body, c->need - (size_t)bt, &block, &verb, &path) == 0) {
		long long t0 = ipc_now_ms();
		status       = s->fn(s->arg, verb, path, &reply);
		text         = reply;
		ipc_defer_deadlines(s, c, ipc_now_ms() - t0);
		free(block);
	}
	size_t   len;
	uint8_t *msg = ipc_reply_msg(s, c->buf, (size_t)bt, status, text, &len);
	free(reply);
	free(c->buf);
	c->buf = msg;
	if (msg == NULL) {
		conn_drop(c, "out_of_memory");
		return;
	}
	c->state    = CONN_REPLY;
	c->need     = len;
	c->done     = 0;
	c->deadline = ipc_now_ms() + IPC_SEND_TIMEOUT_MS;
	conn_write(s, c);
}

// Acts on what c has completely read: the peer's SP header (which must be
// req0's), a message head (a type byte of 1 on ipc://, a length from 4 to
// IPC_MAX_FRAME) or a payload. Returns nothing; c is closed on a protocol
// violation or when memory runs out.
static void conn_step(ipc_server *s, ipc_conn *c)
{
	uint8_t want[SP_HEADER_LEN];
	switch (c->state) {
	case CONN_HELLO:
		sp_header(want, SP_PROTO_REQ0);
		if (memcmp(c->head, want, SP_HEADER_LEN) != 0) {
			conn_drop(c, "not_a_req0_peer");
			return;
		}
		conn_expect_head(s, c);
		return;
	case CONN_HEAD: {
		uint64_t len = get_be(c->head + c->need - 8, 8);
		if ((s->framed && c->head[0] != 1) || len < 4 || len > IPC_MAX_FRAME) {
			conn_drop(c, "bad_message_head");
			return;
		}
		c->buf = malloc(len);
		if (c->buf == NULL) {
			conn_drop(c, "out_of_memory");
			return;
		}
		c->state = CONN_BODY;
		c->need  = len;
		c->done  = 0;
		return;
	}
	case CONN_BODY:
		conn_request(s, c);
		return;
	case CONN_REPLY:
		return;
	}
}

// Reads what c's peer sent as far as the socket has data, acting on each
// complete header and message head, and returns once a whole request has
// been served (further pipelined requests wait for the next poll round, so
// that one client cannot starve the others). Returns nothing; c is closed
// on end of file, error or protocol violation.
static void conn_read(ipc_server *s, ipc_conn *c)
{
	while (c->fd >= 0) {
		uint8_t        *dst = c->state == CONN_BODY ? c->buf : c->head;
		enum io_outcome o   = conn_io(c, recv(c->fd, dst + c->done, c->need - c->done, 0));
		if (o == IO_WAIT || o == IO_CLOSED) {
			return;
		}
		if (o == IO_RETRY || c->done < c->need) {
			continue;
		}
		bool request = c->state == CONN_BODY;
		conn_step(s, c);
		if (request) {
			return;
		}
	}
}

// Returns a free connection slot of s, or NULL when all are taken.
static ipc_conn *ipc_free_slot(ipc_server *s)
{
	for (int i = 0; i < IPC_MAX_CONNS; i++) {
		if (s->conns[i].fd < 0) {
			return &s->conns[i];
		}
	}
	return NULL;
}

// Takes the new connection fd into the free slot c and sends it our SP
// header (8 bytes, which the empty socket buffer of a new connection always
// takes; fd is closed at once if not). Returns nothing.
static void ipc_adopt(ipc_server *s, ipc_conn *c, int fd)
{
	uint8_t hello[SP_HEADER_LEN];
	sp_header(hello, SP_PROTO_REP0);
	if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello)) {
		log_warn_rl("ipc", "event=client_dropped reason=hello_not_sent");
		close(fd);
		return;
	}
	if (!s->framed) {
		int on = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	}
	c->fd       = fd;
	c->state    = CONN_HELLO;
	c->need     = SP_HEADER_LEN;
	c->done     = 0;
	c->deadline = ipc_now_ms() + IPC_RECV_TIMEOUT_MS;
}

// Accepts the connections waiting on the listening socket while slots are
// free; the others stay in the listen backlog until a slot frees. When the
// process is out of descriptors, accepting pauses for IPC_ACCEPT_PAUSE_MS
// (the listener would otherwise stay readable and spin the loop). Returns
// nothing.
static void ipc_accept(ipc_server *s)
{
	ipc_conn *c;
	while ((c = ipc_free_slot(s)) != NULL) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			ipc_adopt(s, c, fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED) {
			continue;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			log_warn_rl("ipc", "event=accept_paused reason=\"%s\" pause_ms=%d",
			    strerror(errno), IPC_ACCEPT_PAUSE_MS);
			s->accept_at = ipc_now_ms() + IPC_ACCEPT_PAUSE_MS;
		}
		return;
	}
}

// Fills pfd with the descriptors the server thread waits on: the wake-up
// eventfd, the listener (while a slot is free and accepting does not
// pause) and each connection,
// for reading or, while it has a reply to write, for writing; idx receives
// each connection's slot. Returns the number of entries, with the poll()
// timeout (ms, -1 for none) that the earliest deadline gives in *timeout.
static int ipc_poll_set(ipc_server *s, struct pollfd *pfd, int *idx, int *timeout)
{
	long long now  = ipc_now_ms();
	long long next = LLONG_MAX;
	pfd[0]         = (struct pollfd) { .fd = s->wfd, .events = POLLIN };
	pfd[1]         = (struct pollfd) { .fd = s->lfd, .events = POLLIN };
	if (s->accept_at > now) {
		pfd[1].events = 0;
		next          = s->accept_at;
	} else if (ipc_free_slot(s) == NULL) {
		pfd[1].events = 0;
	}
	int n = 2;
	for (int i = 0; i < IPC_MAX_CONNS; i++) {
		ipc_conn *c = &s->conns[i];
		if (c->fd < 0) {
			continue;
		}
		short ev = c->state == CONN_REPLY ? POLLOUT : POLLIN;
		pfd[n]   = (struct pollfd) { .fd = c->fd, .events = ev };
		idx[n]   = i;
		n++;
		if (c->deadline < next) {
			next = c->deadline;
		}
	}
	if (next == LLONG_MAX) {
		*timeout = -1;
	} else {
		long long ms = next - now;
		*timeout     = ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
	}
	return n;
}

// Closes the connections whose deadline has passed. Returns nothing.
static void ipc_expire(ipc_server *s)
{
	long long now = ipc_now_ms();
	for (int i = 0; i < IPC_MAX_CONNS; i++) {
		if (s->conns[i].fd >= 0 && s->conns[i].deadline <= now) {
			conn_drop(&s->conns[i], "deadline_passed");
		}
	}
}

// The server thread: one poll() loop over the wake-up eventfd, the
// listener and the connections, serving one request at a time, until
// ipc_server_stop() writes to the eventfd. Closes the connections before
// it returns NULL.
static void *ipc_server_main(void *argp)
{
	ipc_server *s = argp;
	for (;;) {
		struct pollfd pfd[2 + IPC_MAX_CONNS];
		int           idx[2 + IPC_MAX_CONNS];
		int           timeout;
		int           n = ipc_poll_set(s, pfd, idx, &timeout);
		if (poll(pfd, (nfds_t)n, timeout) < 0) {
			if (errno != EINTR) {
				struct timespec ts = { 0, 10 * 1000000 };
				nanosleep(&ts, NULL); // ENOMEM: try again shortly
			}
			continue;
		}
		if (pfd[0].revents != 0) {
			break;
		}
		for (int k = 2; k < n; k++) {
			ipc_conn *c = &s->conns[idx[k]];
			if (pfd[k].revents == 0 || c->fd < 0) {
				continue;
			}
			if (c->state == CONN_REPLY) {
				conn_write(s, c);
			} else {
				conn_read(s, c);
			}
		}
		if ((pfd[1].revents & POLLIN) != 0) {
			ipc_accept(s);
		}
		ipc_expire(s);
	}
	for (int i = 0; i < IPC_MAX_CONNS; i++) {
		if (s->conns[i].fd >= 0) {
			conn_close(&s->conns[i]);
		}
	}
	return NULL;
}

// Reads up to n bytes from the non-blocking socket fd into buf, waiting at
// most ms in all. Returns the number of bytes read (fewer than n on end of
// file, error or timeout).
static size_t ipc_read_for(int fd, uint8_t *buf, size_t n, int ms)
{
	size_t    got      = 0;
	long long deadline = ipc_now_ms() + ms;
	while (got < n) {
		long long     left = deadline - ipc_now_ms();
		struct pollfd pfd  = { .fd = fd, .events = POLLIN };
		if (left <= 0 || poll(&pfd, 1, (int)left) == 0) {
			break;
		}
		ssize_t r = recv(fd, buf + got, n - got, 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
			continue;
		}
		if (r <= 0) {
			break;
		}
		got += (size_t)r;
	}
	return got;
}

// Connects to the unix socket sa to find out whether a server is there. A
// server that accepts is greeted as a req0 client would, and its SP header
// awaited for up to IPC_PROBE_TIMEOUT_MS before we hang up: NNG 1.5.2
// listeners stop accepting after a bare connect-and-close (NNG issue
// #1518), a complete handshake does them no harm. Returns 1 when a server
// is there, 0 when the connection is refused (a stale file), or -1 with
// errno set when the check itself fails.
static int ipc_probe(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -1;
	}
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
		int e = errno;
		close(fd);
		if (e == ECONNREFUSED) {
			return 0;
		}
		if (e == EAGAIN) {
			return 1; // its backlog is full: somebody listens
		}
		errno = e;
		return -1;
	}
	uint8_t hdr[SP_HEADER_LEN];
	sp_header(hdr, SP_PROTO_REQ0);
	if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == sizeof(hdr)) {
		(void)ipc_read_for(fd, hdr, sizeof(hdr), IPC_PROBE_TIMEOUT_MS);
	}
	close(fd);
	return 1;
}

// Removes the socket file at path (address sa, from url) when no process
// serves it any more. Returns 0 when it is gone, or -1 with a message in
// err when a live server answers there, the file is not a socket, or it
// cannot be checked or removed.
static int ipc_remove_stale(
    const char *url, const char *path, const struct sockaddr_un *sa, char *err, size_t errlen)
{
	struct stat st;
	if (lstat(path, &st) != 0) {
		if (errno == ENOENT) {
			return 0;
		}
		snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(errno));
		return -1;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(
		    err, errlen, "cannot listen on %s: %s exists and is not a socket", url, path);
		return -1;
	}
	int live = ipc_probe(sa);
	if (live > 0) {
		snprintf(err, errlen,
		    "cannot listen on %s: Address in use (another process serves it)", url);
		return -1;
	}
	if (live < 0 || (unlink(path) != 0 && errno != ENOENT)) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(errno));
		return -1;
	}
	return 0;
}

// Listens on the unix socket file path (from url), replacing a stale file.
// The file is private from its creation (on Linux it takes the mode of the
// socket, set before bind()) and is chmod'ed again before listen(): until
// listen() nobody can connect, so it is never open to others. Returns 0,
// or -1 with a message in err.
static int ipc_listen_unix(
    ipc_server *s, const char *url, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (path[0] == '\0' || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "cannot listen on %s: path empty or too long", url);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(errno));
		return -1;
	}
	(void)fchmod(fd, IPC_SOCKET_MODE);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (rc != 0 && errno == EADDRINUSE) {
		if (ipc_remove_stale(url, path, &sa, err, errlen) != 0) {
			close(fd);
			return -1;
		}
		rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	}
	if (rc != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(errno));
		close(fd);
		return -1;
	}
	struct stat st;
	s->path = strdup(path);
	if (s->path == NULL || chmod(path, IPC_SOCKET_MODE) != 0 || listen(fd, 128) != 0
	    || stat(path, &st) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url,
		    s->path == NULL ? "out of memory" : strerror(errno));
		unlink(path);
		free(s->path);
		s->path = NULL;
		close(fd);
		return -1;
	}
	s->dev    = st.st_dev;
	s->ino    = st.st_ino;
	s->lfd    = fd;
	s->framed = true;
	return 0;
}

// Splits hp, "host:port" or "[IPv6 address]:port" with an optional "/"
// after it, into host (brackets removed, possibly empty or "*") and port
// (decimal, 0 to 65535; "0" when empty, as NNG allows for a listener).
// Returns 0, or -1 when hp is malformed or host does not fit.
static int ipc_split_hostport(const char *hp, char *host, size_t hostlen, char *port)
{
	const char *h = hp;
	const char *e; // end of the host
	const char *p; // the ':' before the port, or the end
	if (hp[0] == '[') {
		h = hp + 1;
		e = strchr(h, ']');
		if (e == NULL) {
			return -1;
		}
		p = e + 1;
	} else {
		e = hp + strcspn(hp, ":/");
		p = e;
	}
	if ((size_t)(e - h) >= hostlen || (*p != ':' && *p != '\0' && strcmp(p, "/") != 0)) {
		return -1;
	}
	memcpy(host, h, (size_t)(e - h));
	host[e - h] = '\0';
	if (*p == ':') {
		p++;
	}
	long v = 0;
	while (*p >= '0' && *p <= '9' && v <= 65535) {
		v = v * 10 + (*p++ - '0');
	}
	if (v > 65535 || (*p != '\0' && strcmp(p, "/") != 0)) {
		return -1;
	}
	snprintf(port, 8, "%u", (unsigned)(uint16_t)v);
	return 0;
}

// Listens on the TCP address hp (see ipc_split_hostport(); "*" or an empty
// host is any address) of url, in family af (AF_UNSPEC for either), on the
// first address the host resolves to, as NNG does. Returns 0, or -1 with a
// message in err.
static int ipc_listen_tcp(
    ipc_server *s, const char *url, const char *hp, int af, char *err, size_t errlen)
{
	char host[256];
	char port[8];
	if (ipc_split_hostport(hp, host, sizeof(host), port) != 0) {
		snprintf(err, errlen, "cannot listen on %s: invalid address", url);
		return -1;
	}
	struct addrinfo hints;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family      = af;
	hints.ai_socktype    = SOCK_STREAM;
	hints.ai_protocol    = IPPROTO_TCP;
	hints.ai_flags       = AI_PASSIVE | AI_NUMERICSERV;
	bool             any = host[0] == '\0' || strcmp(host, "*") == 0;
	struct addrinfo *res = NULL;
	int              rc  = getaddrinfo(any ? NULL : host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, gai_strerror(rc));
		return -1;
	}
	const struct addrinfo *ai = res;
	while (ai != NULL && ai->ai_family != AF_INET && ai->ai_family != AF_INET6) {
		ai = ai->ai_next;
	}
	int fd = -1;
	int on = 1;
	rc     = -1;
	if (ai != NULL) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	}
	if (fd >= 0) {
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		rc = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? listen(fd, 128) : -1;
	}
	int e = ai == NULL ? EAFNOSUPPORT : errno;
	freeaddrinfo(res);
	if (rc != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(e));
		if (fd >= 0) {
			close(fd);
		}
		return -1;
	}
	s->lfd    = fd;
	s->framed = false;
	return 0;
}

// Opens the listening socket for url: ipc://<path>, or tcp://, tcp4:// or
// tcp6:// <host>:<port>. Returns 0, or -1 with a message in err.
static int ipc_listen(ipc_server *s, const char *url, char *err, size_t errlen)
{
	if (ipc_is_unix(url)) {
		return ipc_listen_unix(s, url, url + 6, err, errlen);
	}
	if (strncmp(url, "tcp://", 6) == 0) {
		return ipc_listen_tcp(s, url, url + 6, AF_UNSPEC, err, errlen);
	}
	if (strncmp(url, "tcp4://", 7) == 0) {
		return ipc_listen_tcp(s, url, url + 7, AF_INET, err, errlen);
	}
	if (strncmp(url, "tcp6://", 7) == 0) {
		return ipc_listen_tcp(s, url, url + 7, AF_INET6, err, errlen);
	}
	snprintf(err, errlen,
	    "cannot listen on %s: unsupported address (the command channel takes ipc:// or tcp://)",
	    url);
	return -1;
}

// Closes s's descriptors, removes the socket file it created unless
// another has replaced it since, and frees s. Returns nothing.
static void ipc_server_free(ipc_server *s)
{
	struct stat st;
	if (s->path != NULL && lstat(s->path, &st) == 0 && st.st_dev == s->dev
	    && st.st_ino == s->ino) {
		(void)unlink(s->path);
	}
	if (s->lfd >= 0) {
		close(s->lfd);
	}
	if (s->wfd >= 0) {
		close(s->wfd);
	}
	free(s->path);
	free(s);
}

// Opens the listening socket and the wake-up eventfd, and starts the
// server thread. Returns the server, or NULL with a message in err.
ipc_server *ipc_server_start(const char *url, ipc_handler fn, void *arg, char *err, size_t errlen)
{
	if (url == NULL || url[0] == '\0' || fn == NULL) {
		snprintf(err, errlen, "no command channel address");
		return NULL;
	}
	ipc_server *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->fn  = fn;
	s->arg = arg;
	s->lfd = -1;
	s->wfd = -1;
	for (int i = 0; i < IPC_MAX_CONNS; i++) {
		s->conns[i].fd = -1;
	}
	if (ipc_listen(s, url, err, errlen) != 0) {
		ipc_server_free(s);
		return NULL;
	}
	s->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->wfd < 0) {
		snprintf(err, errlen, "cannot open the command channel: %s", strerror(errno));
		ipc_server_free(s);
		return NULL;
	}
	// The thread takes no signals: they belong to the main thread.
	sigset_t all;
	sigset_t old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rv = pthread_create(&s->thread, NULL, ipc_server_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rv != 0) {
		snprintf(err, errlen, "cannot start the command channel thread: %s", strerror(rv));
		ipc_server_free(s);
		return NULL;
	}
	return s;
}

// Wakes the server thread through the eventfd, joins it (it closes the
// connections), then closes the listener, removes the socket file and
// frees s. Returns nothing.
void ipc_server_stop(ipc_server *s)
{
	if (s == NULL) {
		return;
	}
	uint64_t one = 1;
	while (write(s->wfd, &one, sizeof(one)) < 0 && errno == EINTR) { }
	pthread_join(s->thread, NULL);
	ipc_server_free(s);
}
