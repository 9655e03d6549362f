// Detaching the broker from its terminal (`nanomq start -d`,
// system.daemon = true), while keeping the exit status of `nanomq start`
// meaningful: the original process waits until the daemon says that it has
// started (or failed) and exits with that status.
//
// Contract:
// - daemonize() MUST be called before any NNG function and before any
//   thread is created: fork() copies only the calling thread, so NNG's
//   task, poller and resolver threads (and any lock they hold) would be
//   lost in the daemon. Call it after the configuration is validated and
//   the pid file is acquired (the flock survives the fork), then call
//   pidfile_update() in the daemon.
// - Flush stdio before calling it (it does fflush(NULL) itself).
// - Not under systemd: there the broker runs in the foreground
//   (Type=notify).
#ifndef NMQ_DAEMON_H
#define NMQ_DAEMON_H

#include <stddef.h>

#include "nng/core/nmq_err.h"

// Forks twice with setsid() in between (the daemon is not a session leader
// and can never acquire a controlling terminal), changes to "/" and points
// stdin, stdout and stderr at /dev/null. The umask is kept.
//
// Returns NMQ_OK in the daemon, with *ready_fd set to the pipe on which
// daemon_ready() reports to the original process. The original process
// never returns: it waits for that report, prints its message (stdout on
// success, stderr on failure) and calls _exit() with its status, or with 1
// and "nanomq: the daemon exited during startup" when the daemon dies
// first. Returns the error of pipe or fork (NMQ_EBUSY, NMQ_ENOMEM, ...)
// with a message in err, in the unchanged original process, when the pipe
// or the first fork fails.
nmq_err daemonize(int *ready_fd, char *err, size_t errlen);

// Reports the end of startup to the original process: status 0 when the
// broker is serving, non-zero when it failed; msg (may be NULL) is printed
// by the original process. Closes fd; does nothing when fd < 0 (not
// daemonized), so it can be called unconditionally. Returns nothing.
void daemon_ready(int fd, int status, const char *msg);

#endif // NMQ_DAEMON_H
