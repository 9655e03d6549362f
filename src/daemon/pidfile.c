// The pid file, locked with flock(2). See pidfile.h for the contract.
#include "src/daemon/pidfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// A locked file may still be empty for a moment while its holder writes it;
// pidfile_read retries this many times, 10 ms apart.
#define PIDFILE_READ_TRIES 50
// A busy lock is tried this many more times, 10 ms apart, before the file
// is declared held by another broker.
#define PIDFILE_LOCK_TRIES 5

// Returns $NANOMQ_PID_FILE, or the default path when it is unset or empty.
const char *pidfile_path(void)
{
	const char *p = getenv("NANOMQ_PID_FILE");
	if (p == NULL || p[0] == '\0') {
		return PIDFILE_DEFAULT_PATH;
	}
	return p;
}

// Creates every missing directory above path (mode 0755), like mkdir -p on
// its dirname. Returns 0, or -1 with errno set and the failing directory in
// dir.
static int pidfile_mkdirs(const char *path, char *dir, size_t dirlen)
{
	snprintf(dir, dirlen, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL || slash == dir) {
		return 0;
	}
	*slash = '\0';
	struct stat st;
	if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
		return 0; // the usual case: nothing to create
	}
	for (char *p = dir + 1; *p != '\0'; p++) {
		if (*p != '/') {
			continue;
		}
		*p = '\0';
		if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
			return -1;
		}
		*p = '/';
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		return -1;
	}
	return 0;
}

// Sleeps for ms milliseconds. Returns nothing.
static void pidfile_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { }
}

// Reads a pid ("<digits>\n") from fd at offset 0. Returns it, or 0 when the
// file is empty or does not hold a valid pid.
static pid_t pidfile_parse_fd(int fd)
{
	char    buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0) {
		return 0;
	}
	buf[n] = '\0';
	char *end;
	errno  = 0;
	long v = strtol(buf, &end, 10);
	if (errno != 0 || end == buf || (*end != '\n' && *end != '\0') || v <= 0 || v > INT_MAX) {
		return 0;
	}
	return (pid_t)v;
}

// Reads the pid from a locked file, waiting briefly if its holder has not
// written it yet. Returns the pid, or 0 when none appeared.
static pid_t pidfile_parse_locked(int fd)
{
	for (int i = 0; i < PIDFILE_READ_TRIES; i++) {
		pid_t pid = pidfile_parse_fd(fd);
		if (pid > 0) {
			return pid;
		}
		pidfile_sleep_ms(10);
	}
	return 0;
}

// Replaces the content of fd with the caller's pid. Returns 0, or -1 with
// errno set.
static int pidfile_write_pid(int fd)
{
	char buf[32];
	int  n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) != 0) {
		return -1;
	}
	if (pwrite(fd, buf, (size_t)n, 0) != n) {
		if (errno == 0) {
			errno = EIO;
		}
		return -1;
	}
	return 0;
}

// Returns NMQ_OK with the file locked and holding our pid, or an error
// with a message in err (naming the holder's pid when the lock is taken).
nmq_err pidfile_acquire(pidfile *pf, const char *path, char *err, size_t errlen)
{
	char dir[sizeof(pf->path)];

	pf->fd = -1;
	if (path == NULL || path[0] == '\0' || strlen(path) >= sizeof(pf->path)) {
		snprintf(err, errlen, "invalid pid file path");
		return NMQ_EINVAL;
	}
	snprintf(pf->path, sizeof(pf->path), "%s", path);
	if (pidfile_mkdirs(path, dir, sizeof(dir)) != 0) {
		int e = errno;
		snprintf(err, errlen, "cannot create directory %s for the pid file: %s", dir,
		    strerror(e));
		return nmq_err_from_errno(e);
	}

	// Retry while the file we locked was unlinked or replaced by an exiting
	// holder between our open() and flock().
	for (int tries = 0; tries < 100; tries++) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0) {
			int e = errno;
			snprintf(err, errlen, "cannot open pid file %s: %s", path, strerror(e));
			return nmq_err_from_errno(e);
		}
		int rc = flock(fd, LOCK_EX | LOCK_NB);
		// A `stop` or `reload` probing the lock holds it shared for an
		// instant: look again before declaring the file taken.
		for (int i = 0; rc != 0 && errno == EWOULDBLOCK && i < PIDFILE_LOCK_TRIES; i++) {
			pidfile_sleep_ms(10);
			rc = flock(fd, LOCK_EX | LOCK_NB);
		}
		if (rc != 0) {
			int e = errno;
			if (e == EWOULDBLOCK) {
				pid_t holder = pidfile_parse_locked(fd);
				close(fd);
				if (holder > 0) {
					snprintf(err, errlen,
					    "nanomq is already running with pid %ld (pid file %s "
					    "is locked)",
					    (long)holder, path);
				} else {
					snprintf(err, errlen,
					    "nanomq is already running (pid file %s is locked)",
					    path);
				}
				return NMQ_EEXIST;
			}
			close(fd);
			snprintf(err, errlen, "cannot lock pid file %s: %s", path, strerror(e));
			return nmq_err_from_errno(e);
		}
		struct stat a, b;
		if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev
		    || a.st_ino != b.st_ino) {
			close(fd);
			continue;
		}
		if (pidfile_write_pid(fd) != 0) {
			int e = errno;
			snprintf(err, errlen, "cannot write pid file %s: %s", path, strerror(e));
			close(fd);
			return nmq_err_from_errno(e);
		}
		pf->fd = fd;
		return NMQ_OK;
	}
	snprintf(err, errlen, "pid file %s keeps changing; giving up", path);
	return NMQ_EBUSY;
}

// Returns NMQ_OK once the held file names the caller, or an error with a
// message in err when it is not held or cannot be written.
nmq_err pidfile_update(pidfile *pf, char *err, size_t errlen)
{
	if (pf->fd < 0) {
		snprintf(err, errlen, "pid file is not held");
		return NMQ_EINVAL;
	}
	if (pidfile_write_pid(pf->fd) != 0) {
		int e = errno;
		snprintf(err, errlen, "cannot write pid file %s: %s", pf->path, strerror(e));
		return nmq_err_from_errno(e);
	}
	return NMQ_OK;
}

// Unlinks the file, then drops the lock. Returns nothing.
void pidfile_release(pidfile *pf)
{
	if (pf->fd < 0) {
		return;
	}
	// Unlink while still holding the lock, so that nobody can lock the
	// old inode and believe it owns the path.
	(void)unlink(pf->path);
	close(pf->fd);
	pf->fd = -1;
}

// Stores the pid of the lock holder in *holder, 0 when nobody holds the
// lock. Returns NMQ_OK, or an error with a message in err.
nmq_err pidfile_read(const char *path, pid_t *holder, char *err, size_t errlen)
{
	*holder = 0;
	int fd  = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT) {
			return NMQ_OK;
		}
		snprintf(err, errlen, "cannot open pid file %s: %s", path, strerror(e));
		return nmq_err_from_errno(e);
	}
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		// Nobody holds the exclusive lock: no broker, whatever the file says.
		close(fd);
		return NMQ_OK;
	}
	if (errno != EWOULDBLOCK) {
		int e = errno;
		snprintf(err, errlen, "cannot lock pid file %s: %s", path, strerror(e));
		close(fd);
		return nmq_err_from_errno(e);
	}
	pid_t pid = pidfile_parse_locked(fd);
	close(fd);
	if (pid <= 0) {
		snprintf(err, errlen, "pid file %s is locked but holds no valid pid", path);
		return NMQ_ECORRUPT;
	}
	*holder = pid;
	return NMQ_OK;
}
