// The command channel's client: the NNG req0 socket that `nanomq reload`
// uses to reach the broker's server (ipc_server.c). See ipc.h for the wire
// format.
#include "src/daemon/ipc.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "src/daemon/ipc_int.h"

// Maps an NNG error of the client's socket to an nmq_err.
static nmq_err ipc_nng_err(int rv)
{
	switch (rv) {
	case NNG_ENOMEM:
		return NMQ_ENOMEM;
	case NNG_ETIMEDOUT:
		return NMQ_ETIMEDOUT;
	case NNG_ENOENT:
	case NNG_ECONNREFUSED:
		return NMQ_ENOENT;
	case NNG_EINVAL:
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP:
		return NMQ_EINVAL;
	case NNG_EPERM:
		return NMQ_EACCES;
	case NNG_ECLOSED:
	case NNG_ECONNRESET:
	case NNG_ECONNSHUT:
		return NMQ_ECLOSED;
	case NNG_EPROTO:
		return NMQ_EPROTO;
	default:
		return NMQ_EIO;
	}
}

// Builds the request body for verb and path. Returns a malloc'ed buffer
// with its length in *len, or NULL with a message in err and *e set
// (NMQ_EINVAL, NMQ_ENOMEM).
static char *ipc_build_request(
    const char *verb, const char *conf_path, size_t *len, nmq_err *e, char *err, size_t errlen)
{
	size_t vlen = strlen(verb);
	*e          = NMQ_EINVAL;
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
		*e = NMQ_ENOMEM;
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

// Splits a reply into its status (*ok) and a malloc'ed copy of its text.
// Returns NMQ_OK with the text in *reply, or NMQ_EPROTO (not a reply) or
// NMQ_ENOMEM with a message in err.
static nmq_err ipc_parse_reply(
    const char *buf, size_t sz, bool *ok, char **reply, char *err, size_t errlen)
{
	size_t skip;
	if (sz >= 3 && memcmp(buf, "ok\n", 3) == 0) {
		*ok  = true;
		skip = 3;
	} else if (sz >= 6 && memcmp(buf, "error\n", 6) == 0) {
		*ok  = false;
		skip = 6;
	} else {
		snprintf(err, errlen, "malformed reply from the broker");
		return NMQ_EPROTO;
	}
	char *text = malloc(sz - skip + 1);
	if (text == NULL) {
		snprintf(err, errlen, "out of memory");
		return NMQ_ENOMEM;
	}
	memcpy(text, buf + skip, sz - skip);
	text[sz - skip] = '\0';
	*reply          = text;
	return NMQ_OK;
}

// Sends one request to url and waits for the reply. Returns NMQ_OK with
// the broker's status in *ok and its text in *reply, or an error with a
// message in err.
nmq_err ipc_request(const char *url, const char *verb, const char *conf_path, int timeout_ms,
    bool *ok, char **reply, char *err, size_t errlen)
{
	*reply = NULL;
	*ok    = false;
	if (url == NULL || url[0] == '\0') {
		snprintf(err, errlen, "no command channel address");
		return NMQ_EINVAL;
	}
	size_t  len;
	nmq_err e;
	char   *req = ipc_build_request(verb, conf_path, &len, &e, err, errlen);
	if (req == NULL) {
		return e;
	}
	long long  deadline = ipc_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	nng_socket sock;
	int        rv = nng_req0_open(&sock);
	if (rv != 0) {
		snprintf(err, errlen, "cannot open a socket: %s", nng_strerror(rv));
		free(req);
		return ipc_nng_err(rv);
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
		return ipc_nng_err(rv);
	}
	rv = nng_send(sock, req, len, 0);
	free(req);
	if (rv != 0) {
		snprintf(err, errlen, "cannot send to the broker at %s: %s", url, nng_strerror(rv));
		nng_close(sock);
		return ipc_nng_err(rv);
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
		return ipc_nng_err(rv);
	}
	e = ipc_parse_reply(buf, sz, ok, reply, err, errlen);
	nng_free(buf, sz);
	nng_close(sock);
	return e;
}
