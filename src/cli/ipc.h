// The command channel (compat.md 1.4 and 4.1, system.cmd_ipc_url): a
// request/reply channel on which `nanomq reload` asks the running broker to
// reload and gets the outcome back. The broker serves it with an NNG rep0
// socket; the command line uses a req0 socket.
//
// Wire format (NNG messages, text, no terminating NUL):
// - request: "<verb>" or "<verb>\n<conf path>". The verb is one word of
//   [a-z_-]; the path, when present, is everything after the first newline
//   and is not empty.
// - reply: "ok\n<text>" or "error\n<text>". The text is free form (lines
//   meant for the user) and may be empty.
//
// Threading:
// - ipc_server_start() creates one dedicated thread that receives requests
//   with a blocking nng_recv() and calls the handler for each, one at a
//   time, in order. The handler therefore runs on that thread, never on an
//   NNG callback thread, and it MAY block: it may hand the request to
//   another thread (the main thread, which owns reload) and wait for the
//   answer. Clients wait meanwhile; they give up after their own timeout.
// - ipc_server_stop() closes the socket, which ends a pending receive, and
//   joins the thread. It waits for a handler call in progress to return, so
//   the caller must make sure that such a call can return: it must never
//   wait for the thread that calls ipc_server_stop(). Release any waiting
//   handler first.
// - ipc_request() is synchronous and meant for the short-lived `nanomq
//   reload` process. Any thread may call it.
// - Both sides must be used only after daemonize() (see daemon.h), because
//   NNG starts threads of its own.
#ifndef NMQ_CLI_IPC_H
#define NMQ_CLI_IPC_H

#include <stddef.h>

// Largest request or reply accepted, in bytes.
#define IPC_MAX_MSG 65536

typedef struct ipc_server ipc_server;

// Handles one request. verb is the request's verb; conf_path is the path
// that came with it, or NULL. The handler stores a reply text allocated with
// malloc() in *reply (or leaves it NULL for an empty text) and returns 0 for
// success or non-zero for failure ("ok" or "error" on the wire). It runs on
// the server's own thread and may block (see the threading notes above).
typedef int (*ipc_handler)(void *arg, const char *verb, const char *conf_path, char **reply);

// Listens on url (an NNG URL such as "ipc:///tmp/nanomq_cmd.ipc"; an ipc
// socket file is made accessible to its owner only) and starts the server
// thread, which calls fn(arg, ...) for each request. A stale ipc socket file
// left by a dead process is replaced; one that a live process serves makes
// the start fail. Returns the server, or NULL with a message in err.
ipc_server *ipc_server_start(const char *url, ipc_handler fn, void *arg, char *err, size_t errlen);

// Stops listening, waits for the server thread to end and frees s. Safe
// with NULL. Returns nothing.
void ipc_server_stop(ipc_server *s);

// Sends verb (and conf_path, unless NULL) to the server at url and waits up
// to timeout_ms in all for its reply. On 0 or 1, *reply receives the
// reply's text (malloc'ed, NUL-terminated, possibly empty; free() it).
// Returns 0 when the server answered "ok", 1 when it answered "error", -1
// with a message in err when no answer came (nothing listens at url, the
// timeout passed, or the reply was malformed); *reply is then NULL.
int ipc_request(const char *url, const char *verb, const char *conf_path, int timeout_ms,
    char **reply, char *err, size_t errlen);

#endif // NMQ_CLI_IPC_H
