// The systemd notify protocol over a unix datagram socket. See sd_notify.h.
#include "src/daemon/sd_notify.h"
#include "nng/core/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

// Logs a failure to notify (rate-limited: the watchdog ping repeats) and
// returns its nmq_err.
static nmq_err sd_notify_failed(const char *addr, const char *state, int e)
{
	const char *nl = strchr(state, '\n');
	int         sl = nl != NULL ? (int)(nl - state) : (int)strlen(state);
	log_warn_rl("sd_notify", "event=notify_failed socket=%s state=%.*s reason=\"%s\"", addr, sl,
	    state, strerror(e));
	return nmq_err_from_errno(e);
}

// Returns NMQ_OK when the datagram was sent or NOTIFY_SOCKET is unset;
// NMQ_EINVAL (invalid address) or the error of socket/sendto, logged.
nmq_err sd_notify_send(const char *state)
{
	const char *addr = getenv("NOTIFY_SOCKET");
	if (addr == NULL || addr[0] == '\0') {
		return NMQ_OK;
	}

	struct sockaddr_un sa;
	size_t             len = strlen(addr);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if ((addr[0] != '/' && addr[0] != '@') || len < 2 || len >= sizeof(sa.sun_path)) {
		return sd_notify_failed(addr, state, EINVAL);
	}
	memcpy(sa.sun_path, addr, len);
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	if (addr[0] == '@') {
		sa.sun_path[0] = '\0'; // abstract: the name is exactly len bytes
	} else {
		salen++; // a path: include its terminating NUL
	}

	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		return sd_notify_failed(addr, state, errno);
	}
	ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	int     e = errno;
	close(fd);
	if (n < 0) {
		return sd_notify_failed(addr, state, e);
	}
	return NMQ_OK;
}

// Sends READY=1. Returns as sd_notify_send().
nmq_err sd_notify_ready(void)
{
	return sd_notify_send("READY=1");
}

// Sends RELOADING=1 and the CLOCK_MONOTONIC time in microseconds. Returns
// as sd_notify_send().
nmq_err sd_notify_reloading(void)
{
	struct timespec ts;
	char            buf[64];
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu",
	    (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL);
	return sd_notify_send(buf);
}

// Sends STOPPING=1. Returns as sd_notify_send().
nmq_err sd_notify_stopping(void)
{
	return sd_notify_send("STOPPING=1");
}

// Sends WATCHDOG=1. Returns as sd_notify_send().
nmq_err sd_notify_watchdog(void)
{
	return sd_notify_send("WATCHDOG=1");
}

// Sends STATUS= with the formatted text on one line. Returns as
// sd_notify_send().
nmq_err sd_notify_status(const char *fmt, ...)
{
	char    buf[512];
	va_list ap;

	if (getenv("NOTIFY_SOCKET") == NULL) {
		return NMQ_OK;
	}
	memcpy(buf, "STATUS=", 7);
	va_start(ap, fmt);
	(void)vsnprintf(buf + 7, sizeof(buf) - 7, fmt, ap);
	va_end(ap);
	for (char *p = buf; *p != '\0'; p++) {
		if (*p == '\n') {
			*p = ' ';
		}
	}
	return sd_notify_send(buf);
}

// Parses a positive decimal number with nothing after it. Returns it, or 0
// when s is NULL or not such a number.
static unsigned long long sd_parse_u64(const char *s)
{
	if (s == NULL || s[0] < '0' || s[0] > '9') {
		return 0;
	}
	char *end;
	errno                = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0') {
		return 0;
	}
	return v;
}

// Returns half of WATCHDOG_USEC in microseconds, or 0 when the watchdog is
// off, invalid, or meant for another pid.
uint64_t sd_notify_watchdog_interval_us(void)
{
	unsigned long long usec = sd_parse_u64(getenv("WATCHDOG_USEC"));
	if (usec == 0) {
		return 0;
	}
	const char *pid = getenv("WATCHDOG_PID");
	if (pid != NULL && sd_parse_u64(pid) != (unsigned long long)getpid()) {
		return 0;
	}
	return (uint64_t)(usec / 2);
}
