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
// the broker is still that pid. Returns CTL_OK with its pid in *pid,
// CTL_NOT_RUNNING (also when another pid holds the file now), or
// CTL_ERROR; msg is filled except on CTL_OK.
static int ctl_signal(const char *path, int sig, long *pid, char *msg, size_t msglen)
{
	char  err[256] = "";
	pid_t p;
	if (pidfile_read(path, &p, err, sizeof(err)) != NMQ_OK) {
		snprintf(msg, msglen, "%s", err);
		return CTL_ERROR;
	}
	if (p == 0 || (*pid != 0 && (long)p != *pid)) {
		snprintf(
		    msg, msglen, "nanomq is not running (no process holds the pid file %s)", path);
		return CTL_NOT_RUNNING;
	}
	*pid = (long)p;
	if (kill(p, sig) != 0) {
		if (errno == ESRCH) {
			snprintf(msg, msglen, "nanomq is not running (pid %ld has exited)", *pid);
			return CTL_NOT_RUNNING;
		}
		snprintf(msg, msglen, "cannot signal nanomq (pid %ld): %s%s", *pid, strerror(errno),
		    errno == EPERM ? " (run as the user that started the broker)" : "");
		return CTL_ERROR;
	}
	return CTL_OK;
}

// Returns an enum ctl_result with a report in msg: CTL_OK once the lock
// is released, CTL_TIMEOUT, CTL_NOT_RUNNING, or CTL_ERROR when the pid file
// cannot be read or the signal not sent.
int ctl_stop(const char *path, int timeout_ms, bool kill_after, char *msg, size_t msglen)
{
	long pid = 0;
	int  rc  = ctl_signal(path, SIGTERM, &pid, msg, msglen);
	if (rc != CTL_OK) {
		return rc;
	}
	if (ctl_wait_gone(path, pid, timeout_ms)) {
		snprintf(msg, msglen, "nanomq (pid %ld) stopped", pid);
		return CTL_OK;
	}
	if (!kill_after) {
		snprintf(msg, msglen, "nanomq (pid %ld) is still running after %d s", pid,
		    timeout_ms / 1000);
		return CTL_TIMEOUT;
	}
	rc = ctl_signal(path, SIGKILL, &pid, msg, msglen);
	if (rc == CTL_NOT_RUNNING) {
		// It exited just as the wait ran out.
		snprintf(msg, msglen, "nanomq (pid %ld) stopped", pid);
		return CTL_OK;
	}
	if (rc != CTL_OK) {
		return rc;
	}
	if (ctl_wait_gone(path, pid, CTL_KILL_WAIT_MS)) {
		snprintf(msg, msglen, "nanomq (pid %ld) killed after %d s", pid, timeout_ms / 1000);
		return CTL_OK;
	}
	snprintf(msg, msglen, "nanomq (pid %ld) is still running after SIGKILL", pid);
	return CTL_TIMEOUT;
}

// Returns CTL_OK once SIGHUP is delivered, CTL_NOT_RUNNING or CTL_ERROR,
// with a report in msg.
int ctl_reload(const char *path, char *msg, size_t msglen)
{
	long pid = 0;
	int  rc  = ctl_signal(path, SIGHUP, &pid, msg, msglen);
	if (rc == CTL_OK) {
		snprintf(msg, msglen, "reload signal sent to nanomq (pid %ld)", pid);
	}
	return rc;
}
