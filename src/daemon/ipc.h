// The command channel (docs/compatibility.md §1 and §5, system.cmd_ipc_url): a
// request/reply channel on which `nanomq reload` asks the running broker to
// reload and gets the outcome back. The command line uses an NNG req0
// socket. The broker serves the channel without NNG (opening any NNG socket
// would start NNG's threads and cost memory at startup): its own server
// speaks the wire protocol of NNG 1.5.2's rep0 over ipc:// and tcp://, so
// any NNG req0 client can use it.
//
// Wire format (SP messages, as NNG frames them):
// - On connecting, each side sends the 8-byte SP header 00 'S' 'P' 00,
//   its protocol (16 bits, big-endian; req0 0x30, rep0 0x31), 00 00. The
//   server accepts only req0 peers.
// - Each message is, on ipc://, a type byte 0x01, a 64-bit big-endian
//   length and the payload; on tcp://, the length and the payload. A
//   request's payload starts with its backtrace: 32-bit words up to the
//   first with the top bit set (a direct client's request id); the reply
//   repeats it. The server drops a peer that breaks this framing, sends
//   a message longer than IPC_MAX_MSG plus 32 bytes, or whose payload ends
//   inside its backtrace; a request with no end of backtrace in 8 words
//   gets no reply (both as NNG's rep0).
// - Bodies are text without a terminating NUL. Request: "<verb>" or
//   "<verb>\n<conf path>". The verb is one word of [a-z_-]; the path, when
//   present, is everything after the first newline and is not empty.
//   Reply: "ok\n<text>" or "error\n<text>" ("error\nmalformed request"
//   for a body that is not a request). The text is free form (lines meant
//   for the user) and may be empty.
//
// Threading:
// - ipc_server_start() creates one dedicated thread that serves every
//   connection with one poll() loop: non-blocking sockets, up to 16
//   clients at once (more wait in the listen backlog), each given 10 s
//   to send a request whole and 2 s to take its reply, so that silent or
//   slow clients never hold up the others for long. The thread calls the
//   handler for each request, one at a time, in order. The handler MAY
//   block: it may hand the request to another thread (the main thread,
//   which owns reload) and wait for the answer; time spent there is not
//   held against the other clients. Clients wait meanwhile; they give up
//   after their own timeout.
// - ipc_server_stop() wakes the thread, which closes the connections, and
//   joins it. It waits for a handler call in progress to return, so the
//   caller must make sure that such a call can return: it must never wait
//   for the thread that calls ipc_server_stop(). Release any waiting
//   handler first.
// - ipc_request() is synchronous and meant for the short-lived `nanomq
//   reload` process. Any thread may call it.
// - Both sides must be used only after daemonize() (see daemon.h): the
//   server starts a thread, and NNG starts threads of its own.
#ifndef NMQ_CLI_IPC_H
#define NMQ_CLI_IPC_H

#include <stdbool.h>
#include <stddef.h>

#include "nng/core/nmq_err.h"

// Largest request or reply accepted, in bytes.
#define IPC_MAX_MSG 65536

typedef struct ipc_server ipc_server;

// Handles one request. verb is the request's verb; conf_path is the path
// that came with it, or NULL. The handler stores a reply text allocated with
// malloc() in *reply (or leaves it NULL for an empty text) and returns 0 for
// success or non-zero for failure ("ok" or "error" on the wire). It runs on
// the server's own thread and may block (see the threading notes above).
typedef int (*ipc_handler)(void *arg, const char *verb, const char *conf_path, char **reply);

// Listens on url and starts the server thread, which calls fn(arg, ...)
// for each request. url is an NNG URL: "ipc://<path>" (such as
// "ipc:///tmp/nanomq_cmd.ipc"; the socket file is accessible to its owner
// only) or "tcp://<host>:<port>" (also tcp4://, tcp6://; host "*" or empty
// for any address, "[...]" for an IPv6 one); any other scheme fails. A
// stale ipc socket file left by a dead process is replaced; one that a
// live process serves, or a file that is not a socket, makes the start
// fail. Returns the server, or NULL with a message in err.
ipc_server *ipc_server_start(const char *url, ipc_handler fn, void *arg, char *err, size_t errlen);

// Stops listening, closes the connections, waits for the server thread
// to end, removes the ipc socket file it created and frees s. Safe with
// NULL. Returns nothing.
void ipc_server_stop(ipc_server *s);

// Sends verb (and conf_path, unless NULL) to the server at url and waits up
// to timeout_ms in all for its reply. Returns NMQ_OK when the server
// answered: *ok is true for "ok", false for "error", and *reply receives
// the reply's text (malloc'ed, NUL-terminated, possibly empty; free() it).
// Otherwise returns, with a message in err, *ok false and *reply NULL:
// NMQ_EINVAL (no url, invalid verb or path, unusable url), NMQ_ENOENT
// (nothing listens at url), NMQ_ETIMEDOUT (no answer in time), NMQ_EPROTO
// (malformed reply), NMQ_ENOMEM, or another error of the socket.
nmq_err ipc_request(const char *url, const char *verb, const char *conf_path, int timeout_ms,
    bool *ok, char **reply, char *err, size_t errlen);

#endif // NMQ_CLI_IPC_H
