// A slow disk for tests of the durable store's back-pressure.
//
// Loaded with LD_PRELOAD into the broker, it makes every fsync and
// fdatasync of a file below $NMQ_SLOWSYNC_DIR (all files when unset) take
// $NMQ_SLOWSYNC_MS milliseconds longer (default 20): the store's group
// commits become slow, so that writes pile up in its queue as they would
// on a slow SD card. While the file $NMQ_SLOWSYNC_MS_FILE exists, the
// number of milliseconds it holds replaces $NMQ_SLOWSYNC_MS (a disk that
// turns slow after the start). While the file $NMQ_FAILSYNC_FILE exists,
// those calls fail with EIO instead (a disk that fails under the store's
// commits). With $NMQ_SLOWSYNC_LOG set, each watched sync that succeeded
// appends a line "START END PATH" to that file (CLOCK_MONOTONIC, ns, when
// the call began and returned): a test orders the broker's acks against
// the syncs that made their messages durable.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

// True when fd is a file below $NMQ_SLOWSYNC_DIR (or the variable is unset).
static int watched(int fd)
{
	const char *dir = getenv("NMQ_SLOWSYNC_DIR");
	if (dir == NULL || dir[0] == '\0') {
		return 1;
	}
	char link[64], path[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0) {
		return 0;
	}
	path[n] = '\0';
	return strncmp(path, dir, strlen(dir)) == 0;
}

// Delays a watched fd's sync; returns -1 (errno EIO) when it must fail.
static int delay(int fd)
{
	if (!watched(fd)) {
		return 0;
	}
	const char *fail = getenv("NMQ_FAILSYNC_FILE");
	if (fail != NULL && fail[0] != '\0' && access(fail, F_OK) == 0) {
		errno = EIO;
		return -1;
	}
	const char *v  = getenv("NMQ_SLOWSYNC_MS");
	long        ms = v != NULL ? strtol(v, NULL, 10) : 20;
	const char *mf = getenv("NMQ_SLOWSYNC_MS_FILE");
	if (mf != NULL && mf[0] != '\0') {
		FILE *f = fopen(mf, "r");
		if (f != NULL) {
			long fm = 0;
			if (fscanf(f, "%ld", &fm) == 1) {
				ms = fm;
			}
			fclose(f);
		}
	}
	if (ms > 0) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	return 0;
}

static long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Appends "start end path" to $NMQ_SLOWSYNC_LOG (one write: lines of
// several threads do not mix).
static void log_sync(int fd, long long start)
{
	const char *lp = getenv("NMQ_SLOWSYNC_LOG");
	if (lp == NULL || lp[0] == '\0' || !watched(fd)) {
		return;
	}
	long long end = mono_ns();
	char      link[64], path[PATH_MAX], line[PATH_MAX + 64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0) {
		return;
	}
	path[n]   = '\0';
	int   len = snprintf(line, sizeof(line), "%lld %lld %s\n", start, end, path);
	FILE *f   = fopen(lp, "a");
	if (f != NULL) {
		fwrite(line, 1, (size_t)len, f);
		fclose(f);
	}
}

int fsync(int fd)
{
	if (real_fsync == NULL) {
		real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	}
	long long start = mono_ns();
	if (delay(fd) != 0) {
		return -1;
	}
	int r = real_fsync(fd);
	if (r == 0) {
		log_sync(fd, start);
	}
	return r;
}

int fdatasync(int fd)
{
	if (real_fdatasync == NULL) {
		real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	}
	long long start = mono_ns();
	if (delay(fd) != 0) {
		return -1;
	}
	int r = real_fdatasync(fd);
	if (r == 0) {
		log_sync(fd, start);
	}
	return r;
}
