// `nanomq stop|restart|reload`: signals to the broker named by the pid file.
#include "src/daemon/ctl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "src/daemon/pidfile.h"

#define CTL_POLL_MS 50

// Returns milliseconds of CLOCK_MONOTONIC.
static long long ctl_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Sleeps for ms milliseconds. Returns nothing.
static void ctl_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { }
}

// Polls the pid file until pid no longer holds it or timeout_ms passes.
// Returns 1 when pid is gone, 0 on timeout.
static int ctl_wait_gone(const char *path, long pid, int timeout_ms)
{
	long long deadline = ctl_now_ms() + timeout_ms;
	for (;;) {
		char  err[256];
		pid_t now;
		// An unreadable file is looked at again until the timeout, which
		// the caller reports.
		if (pidfile_read(path, &now, err, sizeof(err)) == NMQ_OK
		    && (now == 0 || now != pid)) {
			return 1;
		}
		if (ctl_now_ms() >= deadline) {
			return 0;
		}
		ctl_sleep_ms(CTL_POLL_MS);
	}
}

// Finds the running broker and sends it sig; when *pid is not 0, only if
// the broker is still that pid. Returns NMQ_OK with its pid in *pid,
// NMQ_ENOENT when it is not running (also when another pid holds the file
// now), or the error of reading the pid file or of kill(); msg is filled
// except on NMQ_OK.
static nmq_err ctl_signal(const char *path, int sig, long *pid, char *msg, size_t msglen)
{
	char    err[256] = "";
	pid_t   p;
	nmq_err e = pidfile_read(path, &p, err, sizeof(err));
	if (e != NMQ_OK) {
		snprintf(msg, msglen, "%s", err);
		// NMQ_ENOENT means "not running" to the callers.
		return e == NMQ_ENOENT ? NMQ_EIO : e;
	}
	if (p == 0 || (*pid != 0 && (long)p != *pid)) {
		snprintf(
		    msg, msglen, "nanomq is not running (no process holds the pid file %s)", path);
		return NMQ_ENOENT;
	}
	*pid = (long)p;
	if (kill(p, sig) != 0) {
		int k = errno;
		if (k == ESRCH) {
			snprintf(msg, msglen, "nanomq is not running (pid %ld has exited)", *pid);
			return NMQ_ENOENT;
		}
		snprintf(msg, msglen, "cannot signal nanomq (pid %ld): %s%s", *pid, strerror(k),
		    k == EPERM ? " (run as the user that started the broker)" : "");
		return k == EPERM ? NMQ_EACCES : NMQ_EIO;
	}
	return NMQ_OK;
}

// Returns NMQ_OK once the lock is released, NMQ_ETIMEDOUT, NMQ_ENOENT (not
// running), or the error of ctl_signal, with a report in msg.
nmq_err ctl_stop(const char *path, int timeout_ms, bool kill_after, char *msg, size_t msglen)
{
	long    pid = 0;
	nmq_err rc  = ctl_signal(path, SIGTERM, &pid, msg, msglen);
	if (rc != NMQ_OK) {
		return rc;
	}
	if (ctl_wait_gone(path, pid, timeout_ms)) {
		snprintf(msg, msglen, "nanomq (pid %ld) stopped", pid);
		return NMQ_OK;
	}
	if (!kill_after) {
		snprintf(msg, msglen, "nanomq (pid %ld) is still running after %d s", pid,
		    timeout_ms / 1000);
		return NMQ_ETIMEDOUT;
	}
	rc = ctl_signal(path, SIGKILL, &pid, msg, msglen);
	if (rc == NMQ_ENOENT) {
		// It exited just as the wait ran out.
		snprintf(msg, msglen, "nanomq (pid %ld) stopped", pid);
		return NMQ_OK;
	}
	if (rc != NMQ_OK) {
		return rc;
	}
	if (ctl_wait_gone(path, pid, CTL_KILL_WAIT_MS)) {
		snprintf(msg, msglen, "nanomq (pid %ld) killed after %d s", pid, timeout_ms / 1000);
		return NMQ_OK;
	}
	snprintf(msg, msglen, "nanomq (pid %ld) is still running after SIGKILL", pid);
	return NMQ_ETIMEDOUT;
}

// Returns NMQ_OK once SIGHUP is delivered, or the error of ctl_signal,
// with a report in msg.
nmq_err ctl_reload(const char *path, char *msg, size_t msglen)
{
	long    pid = 0;
	nmq_err rc  = ctl_signal(path, SIGHUP, &pid, msg, msglen);
	if (rc == NMQ_OK) {
		snprintf(msg, msglen, "reload signal sent to nanomq (pid %ld)", pid);
	}
	return rc;
}
