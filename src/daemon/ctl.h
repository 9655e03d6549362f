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

// How long `stop` and `restart` wait for a graceful exit.
#define CTL_STOP_TIMEOUT_MS 30000
// How long `restart` waits for the lock to go after SIGKILL.
#define CTL_KILL_WAIT_MS 5000

enum ctl_result {
	CTL_ERROR       = -1, // could not read the pid file or send the signal
	CTL_OK          = 0, // stopped (or, for reload, signal delivered)
	CTL_NOT_RUNNING = 1, // no broker holds the pid file
	CTL_TIMEOUT     = 2, // still running after the wait (stop without kill)
};

// Sends SIGTERM to the broker holding the pid file at path and waits up to
// timeout_ms for it to exit. With kill_after, a broker still running then
// gets SIGKILL and CTL_KILL_WAIT_MS more. Returns an enum ctl_result, with
// a report in msg ("nanomq (pid 123) stopped", "... killed after 30 s",
// "nanomq is not running", or the error).
int ctl_stop(const char *path, int timeout_ms, bool kill_after, char *msg, size_t msglen);

// Sends SIGHUP to the broker holding the pid file at path. Returns CTL_OK
// once the signal is delivered (the outcome of the reload itself is only in
// the broker's log on this path), CTL_NOT_RUNNING or CTL_ERROR, with a
// report in msg.
int ctl_reload(const char *path, char *msg, size_t msglen);

#endif // NMQ_CTL_H
