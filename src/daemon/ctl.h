// Controlling a running broker from the command line: `nanomq stop`,
// `nanomq restart` (the stop half) and `nanomq reload` (by SIGHUP).
//
// Contract:
// - The broker is found through its pid file (see pidfile.h), and only
//   while it holds the lock: a stale file never gets a signal sent to
//   whatever process now has that pid.
// - "Stopped" means the pid file lock was released, which happens at a
//   clean exit (pidfile_release) and when the kernel reaps the descriptors
//   of a killed process, so the caller may start a new broker at once.
// - These functions block (polling every 50 ms) up to the timeout given;
//   they are meant for the short-lived `nanomq stop|restart|reload`
//   process, never for the broker itself.
// - msg always receives one line for the user, whatever the result.
#ifndef NMQ_CTL_H
#define NMQ_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include "nng/core/nmq_err.h"

// How long `stop` and `restart` wait for a graceful exit.
#define CTL_STOP_TIMEOUT_MS 30000
// How long `restart` waits for the lock to go after SIGKILL.
#define CTL_KILL_WAIT_MS 5000

// Sends SIGTERM to the broker holding the pid file at path and waits up to
// timeout_ms for it to exit. With kill_after, a broker still running then
// gets SIGKILL and CTL_KILL_WAIT_MS more. Returns, with a report in msg
// ("nanomq (pid 123) stopped", "... killed after 30 s", "nanomq is not
// running", or the error): NMQ_OK once it stopped; NMQ_ENOENT when no
// broker holds the pid file; NMQ_ETIMEDOUT when it still runs after the
// wait; NMQ_EACCES when the signal is not permitted; or the error of
// reading the pid file (NMQ_ECORRUPT, ...).
nmq_err ctl_stop(const char *path, int timeout_ms, bool kill_after, char *msg, size_t msglen);

// Sends SIGHUP to the broker holding the pid file at path. Returns NMQ_OK
// once the signal is delivered (the outcome of the reload itself is only in
// the broker's log on this path), or fails as ctl_stop (NMQ_ENOENT: not
// running), with a report in msg.
nmq_err ctl_reload(const char *path, char *msg, size_t msglen);

#endif // NMQ_CTL_H
