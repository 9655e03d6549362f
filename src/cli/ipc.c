// The command channel: an NNG rep0 server on its own thread, and the req0
// client that `nanomq reload` uses. See ipc.h for the wire format and the
// threading rules.
#include "src/cli/ipc.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

// How long the server waits for a reply to be taken by the transport.
#define IPC_SEND_TIMEOUT_MS 2000
// Mode of an ipc socket file: the owner alone may connect.
#define IPC_SOCKET_MODE 0600

struct ipc_server {
	nng_socket  sock;
	pthread_t   thread;
	ipc_handler fn;
	void       *arg;
};

// Returns true when url names an ipc:// (unix domain socket) address.
static bool ipc_is_unix(const char *url)
{
	return strncmp(url, "ipc://", 6) == 0;
}

// Returns milliseconds of CLOCK_MONOTONIC.
static long long ipc_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Returns true when verb is a non-empty word of [a-z_-] of sane length.
static bool ipc_verb_valid(const char *verb, size_t len)
{
	if (len == 0 || len > 64) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		char c = verb[i];
		if (!((c >= 'a' && c <= 'z') || c == '_' || c == '-')) {
			return false;
		}
	}
	return true;
}

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

// Sends the reply for one request: the status line, then text. Returns
// nothing: a client that went away simply gets no answer.
static void ipc_send_reply(nng_socket sock, int status, const char *text)
{
	const char *head = status == 0 ? "ok\n" : "error\n";
	size_t      hlen = strlen(head);
	size_t      tlen = text != NULL ? strlen(text) : 0;
	if (hlen + tlen > IPC_MAX_MSG) {
		tlen = IPC_MAX_MSG - hlen;
	}
	char *msg = malloc(hlen + tlen);
	if (msg == NULL) {
		return;
	}
	memcpy(msg, head, hlen);
	if (tlen > 0) {
		memcpy(msg + hlen, text, tlen);
	}
	(void)nng_send(sock, msg, hlen + tlen, 0);
	free(msg);
}

// The server thread: receives one request at a time, calls the handler and
// sends its reply, until the socket is closed. Returns NULL.
static void *ipc_server_main(void *argp)
{
	ipc_server *s = argp;
	for (;;) {
		char  *buf = NULL;
		size_t sz  = 0;
		int    rv  = nng_recv(s->sock, &buf, &sz, NNG_FLAG_ALLOC);
		if (rv == NNG_ECLOSED) {
			break;
		}
		if (rv != 0) {
			continue;
		}
		char       *block = NULL;
		const char *verb  = NULL;
		const char *path  = NULL;
		if (ipc_parse_request(buf, sz, &block, &verb, &path) != 0) {
			nng_free(buf, sz);
			ipc_send_reply(s->sock, 1, "malformed request");
			continue;
		}
		nng_free(buf, sz);
		char *reply  = NULL;
		int   status = s->fn(s->arg, verb, path, &reply);
		ipc_send_reply(s->sock, status, reply);
		free(reply);
		free(block);
	}
	return NULL;
}

// Returns true when a live server already answers on the ipc:// address
// url. NNG 1.5.2 finds this out itself by connecting and closing at once,
// which stops the other server's listener from accepting anyone ever after
// (NNG issue #1518); a complete req0 connection does not, so we ask first.
static bool ipc_in_use(const char *url)
{
	nng_socket probe;
	if (nng_req0_open(&probe) != 0) {
		return false;
	}
	bool live = nng_dial(probe, url, NULL, 0) == 0;
	nng_close(probe);
	return live;
}

// Opens the rep0 socket, listens on url and starts the server thread.
// Returns the server, or NULL with a message in err.
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
	if (ipc_is_unix(url) && ipc_in_use(url)) {
		snprintf(err, errlen, "cannot listen on %s: %s (another process serves it)", url,
		    nng_strerror(NNG_EADDRINUSE));
		free(s);
		return NULL;
	}
	int rv = nng_rep0_open(&s->sock);
	if (rv != 0) {
		snprintf(err, errlen, "cannot open the command channel: %s", nng_strerror(rv));
		free(s);
		return NULL;
	}
	nng_listener l;
	(void)nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, IPC_MAX_MSG);
	(void)nng_socket_set_ms(s->sock, NNG_OPT_SENDTIMEO, IPC_SEND_TIMEOUT_MS);
	rv = nng_listener_create(&l, s->sock, url);
	if (rv == 0 && ipc_is_unix(url)) {
		rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, IPC_SOCKET_MODE);
	}
	if (rv == 0) {
		rv = nng_listener_start(l, 0);
	}
	if (rv != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", url, nng_strerror(rv));
		nng_close(s->sock);
		free(s);
		return NULL;
	}
	// The thread takes no signals: they belong to the main thread.
	sigset_t all;
	sigset_t old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rv = pthread_create(&s->thread, NULL, ipc_server_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rv != 0) {
		snprintf(err, errlen, "cannot start the command channel thread: %s", strerror(rv));
		nng_close(s->sock);
		free(s);
		return NULL;
	}
	return s;
}

// Closes the socket (ending a pending receive), joins the server thread and
// frees s. Returns nothing.
void ipc_server_stop(ipc_server *s)
{
	if (s == NULL) {
		return;
	}
	nng_close(s->sock);
	pthread_join(s->thread, NULL);
	free(s);
}

// Builds the request body for verb and path. Returns a malloc'ed buffer
// with its length in *len, or NULL with a message in err.
static char *ipc_build_request(
    const char *verb, const char *conf_path, size_t *len, char *err, size_t errlen)
{
	size_t vlen = strlen(verb);
	if (!ipc_verb_valid(verb, vlen)) {
		snprintf(err, errlen, "invalid command \"%.64s\"", verb);
		return NULL;
	}
	size_t plen = conf_path != NULL ? strlen(conf_path) : 0;
	if (conf_path != NULL && (plen == 0 || vlen + 1 + plen > IPC_MAX_MSG)) {
		snprintf(err, errlen, "invalid configuration path");
		return NULL;
	}
	char *msg = malloc(vlen + 1 + plen);
	if (msg == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	memcpy(msg, verb, vlen);
	*len = vlen;
	if (conf_path != NULL) {
		msg[vlen] = '\n';
		memcpy(msg + vlen + 1, conf_path, plen);
		*len = vlen + 1 + plen;
	}
	return msg;
}

// Splits a reply into its status and a malloc'ed copy of its text. Returns
// 0 or 1 (the status) with the text in *reply, or -1 with a message in err.
static int ipc_parse_reply(const char *buf, size_t sz, char **reply, char *err, size_t errlen)
{
	int    status;
	size_t skip;
	if (sz >= 3 && memcmp(buf, "ok\n", 3) == 0) {
		status = 0;
		skip   = 3;
	} else if (sz >= 6 && memcmp(buf, "error\n", 6) == 0) {
		status = 1;
		skip   = 6;
	} else {
		snprintf(err, errlen, "malformed reply from the broker");
		return -1;
	}
	char *text = malloc(sz - skip + 1);
	if (text == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(text, buf + skip, sz - skip);
	text[sz - skip] = '\0';
	*reply          = text;
	return status;
}

// Sends one request to url and waits for the reply. Returns 0 or 1 (the
// broker's status) with the text in *reply, or -1 with a message in err.
int ipc_request(const char *url, const char *verb, const char *conf_path, int timeout_ms,
    char **reply, char *err, size_t errlen)
{
	*reply = NULL;
	if (url == NULL || url[0] == '\0') {
		snprintf(err, errlen, "no command channel address");
		return -1;
	}
	size_t len;
	char  *req = ipc_build_request(verb, conf_path, &len, err, errlen);
	if (req == NULL) {
		return -1;
	}
	long long  deadline = ipc_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	nng_socket sock;
	int        rv = nng_req0_open(&sock);
	if (rv != 0) {
		snprintf(err, errlen, "cannot open a socket: %s", nng_strerror(rv));
		free(req);
		return -1;
	}
	// One request, never resent: a reload is not repeated behind the
	// user's back when it takes long.
	(void)nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	(void)nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, IPC_MAX_MSG);
	(void)nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, timeout_ms);
	// An ipc:// address is reached (or refused) at once, so dial
	// synchronously for a clear error; anything else is dialled in the
	// background and bounded by the receive timeout.
	rv = nng_dial(sock, url, NULL, ipc_is_unix(url) ? 0 : NNG_FLAG_NONBLOCK);
	if (rv != 0) {
		snprintf(err, errlen, "cannot reach the broker at %s: %s", url, nng_strerror(rv));
		nng_close(sock);
		free(req);
		return -1;
	}
	rv = nng_send(sock, req, len, 0);
	free(req);
	if (rv != 0) {
		snprintf(err, errlen, "cannot send to the broker at %s: %s", url, nng_strerror(rv));
		nng_close(sock);
		return -1;
	}
	long long left = deadline - ipc_now_ms();
	(void)nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, left > 0 ? (nng_duration)left : 1);
	char  *buf = NULL;
	size_t sz  = 0;
	rv         = nng_recv(sock, &buf, &sz, NNG_FLAG_ALLOC);
	if (rv != 0) {
		if (rv == NNG_ETIMEDOUT) {
			snprintf(err, errlen, "no answer from the broker at %s within %d ms", url,
			    timeout_ms);
		} else {
			snprintf(err, errlen, "no answer from the broker at %s: %s", url,
			    nng_strerror(rv));
		}
		nng_close(sock);
		return -1;
	}
	int status = ipc_parse_reply(buf, sz, reply, err, errlen);
	nng_free(buf, sz);
	nng_close(sock);
	return status;
}
