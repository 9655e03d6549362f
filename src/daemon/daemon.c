// Detaching into the background with a startup report to the original
// process. See daemon.h.
#include "src/daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

// Largest message carried from the daemon to the original process.
#define DAEMON_MSG_MAX 1024

// Writes all of buf to fd, retrying after EINTR or a short write. Returns 0,
// or -1 when the pipe is gone.
static int daemon_write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

// Sends the status byte and the message, then closes fd. Returns nothing;
// a vanished original process is ignored.
void daemon_ready(int fd, int status, const char *msg)
{
	char   buf[1 + DAEMON_MSG_MAX];
	size_t len = 0;

	if (fd < 0) {
		return;
	}
	buf[0] = (char)(status & 0xff);
	if (buf[0] == 0 && status != 0) {
		buf[0] = 1; // a failure must not read as success
	}
	if (msg != NULL) {
		len = strlen(msg);
		if (len > DAEMON_MSG_MAX) {
			len = DAEMON_MSG_MAX;
		}
		memcpy(buf + 1, msg, len);
	}
	(void)daemon_write_all(fd, buf, 1 + len);
	close(fd);
}

// Runs in the original process: waits for the daemon's report on fd and
// exits with its status. Never returns.
static void daemon_wait_report(int fd, pid_t child)
{
	char    buf[1 + DAEMON_MSG_MAX + 1];
	size_t  len = 0;
	ssize_t n;

	// The intermediate child exits as soon as it has forked the daemon.
	while (waitpid(child, NULL, 0) < 0 && errno == EINTR) { }
	while (len < sizeof(buf) - 1) {
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			break;
		}
		len += (size_t)n;
	}
	if (len == 0) {
		fprintf(stderr, "nanomq: the daemon exited during startup (see the log)\n");
		_exit(1);
	}
	buf[len]   = '\0';
	int status = (unsigned char)buf[0];
	if (len > 1) {
		fprintf(status == 0 ? stdout : stderr, "%s\n", buf + 1);
	}
	fflush(NULL);
	_exit(status);
}

// Points fd 0, 1 and 2 at /dev/null. Returns 0, or -1 with errno set.
static int daemon_null_stdio(void)
{
	int fd = open("/dev/null", O_RDWR);
	if (fd < 0) {
		return -1;
	}
	for (int i = 0; i <= 2; i++) {
		if (fd != i && dup2(fd, i) < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
	}
	if (fd > 2) {
		close(fd);
	}
	return 0;
}

// Returns NMQ_OK in the daemon with *ready_fd set; the original process
// exits in daemon_wait_report. Returns the error of pipe or the first fork
// with a message in err; later failures are reported through the pipe.
nmq_err daemonize(int *ready_fd, char *err, size_t errlen)
{
	int  p[2];
	char msg[256];

	*ready_fd = -1;
	fflush(NULL);
	if (pipe2(p, O_CLOEXEC) != 0) {
		int e = errno;
		snprintf(err, errlen, "daemonize: pipe: %s", strerror(e));
		return nmq_err_from_errno(e);
	}
	pid_t child = fork();
	if (child < 0) {
		int e = errno;
		snprintf(err, errlen, "daemonize: fork: %s", strerror(e));
		close(p[0]);
		close(p[1]);
		return nmq_err_from_errno(e);
	}
	if (child > 0) {
		close(p[1]);
		daemon_wait_report(p[0], child);
	}

	// Intermediate child: a new session, then fork again so the daemon is
	// not a session leader.
	close(p[0]);
	if (setsid() < 0) {
		snprintf(msg, sizeof(msg), "nanomq: daemonize: setsid: %s", strerror(errno));
		daemon_ready(p[1], 1, msg);
		_exit(1);
	}
	pid_t daemon_pid = fork();
	if (daemon_pid < 0) {
		snprintf(msg, sizeof(msg), "nanomq: daemonize: fork: %s", strerror(errno));
		daemon_ready(p[1], 1, msg);
		_exit(1);
	}
	if (daemon_pid > 0) {
		_exit(0);
	}

	// The daemon. It keeps the working directory it was started in: every
	// relative path of the configuration (log.dir, certificate and key
	// files, sqlite.mounted_file_path), read at start or at a reload, is
	// that directory's, as in a foreground run.
	if (daemon_null_stdio() != 0) {
		snprintf(msg, sizeof(msg), "nanomq: daemonize: %s", strerror(errno));
		daemon_ready(p[1], 1, msg);
		_exit(1);
	}
	*ready_fd = p[1];
	return NMQ_OK;
}
