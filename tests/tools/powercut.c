// A simulated power cut for tests of the durable store.
//
// Loaded with LD_PRELOAD into the broker, it watches the files below
// $NMQ_POWERCUT_DIR. Before every write to such a file (write, pwrite,
// pwritev, ftruncate) it appends to $NMQ_POWERCUT_LOG what the write is
// about to overwrite (the old bytes and the old size), and an fsync or
// fdatasync of the file appends a sync mark. After the broker is killed
// with SIGKILL, `powercut_restore LOG` undoes, file by file and newest
// first, every write made after that file's last sync mark: the files are
// then as a disk would hold them after losing power, with only what was
// synced (the pessimistic case: the kernel wrote back nothing on its own).
//
// The undo log is written with plain write(): a SIGKILL does not lose the
// page cache, so the log is complete for the process's life.
//
// Build: a shared object (preloaded) and, with -DPOWERCUT_RESTORE, the
// restore program; both from this file.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

// One record of the undo log: a header, then the path, then (for kind
// REC_WRITE) the old bytes.
enum { REC_WRITE = 1, REC_SYNC = 2 };

typedef struct rec_hdr {
	uint32_t kind;
	uint32_t path_len;
	uint64_t offset; // where the write starts
	uint64_t old_size; // the file's size before the write
	uint64_t old_len; // old bytes saved (the overwritten part inside old_size)
} rec_hdr;

#ifndef POWERCUT_RESTORE

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static char            watch_dir[PATH_MAX];
static size_t          watch_len;
static int             log_fd = -1;
// Watched descriptors and their paths (small programs: a flat table).
#define MAX_FDS 4096
static char *fd_path[MAX_FDS];

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);

__attribute__((constructor)) static void powercut_init(void)
{
	real_write       = dlsym(RTLD_NEXT, "write");
	real_pwrite      = dlsym(RTLD_NEXT, "pwrite");
	real_pwrite64    = dlsym(RTLD_NEXT, "pwrite64");
	real_pwritev     = dlsym(RTLD_NEXT, "pwritev");
	real_pread       = dlsym(RTLD_NEXT, "pread");
	real_open        = dlsym(RTLD_NEXT, "open");
	real_open64      = dlsym(RTLD_NEXT, "open64");
	real_openat      = dlsym(RTLD_NEXT, "openat");
	real_openat64    = dlsym(RTLD_NEXT, "openat64");
	real_close       = dlsym(RTLD_NEXT, "close");
	real_fsync       = dlsym(RTLD_NEXT, "fsync");
	real_fdatasync   = dlsym(RTLD_NEXT, "fdatasync");
	real_ftruncate   = dlsym(RTLD_NEXT, "ftruncate");
	real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
	const char *dir  = getenv("NMQ_POWERCUT_DIR");
	const char *log  = getenv("NMQ_POWERCUT_LOG");
	if (dir == NULL || log == NULL || realpath(dir, watch_dir) == NULL) {
		return;
	}
	watch_len = strlen(watch_dir);
	log_fd    = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

static void log_all(const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = real_write(log_fd, c, n);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			abort(); // a test that cannot log would lie
		}
		c += w;
		n -= (size_t)w;
	}
}

// Records fd's path if it is a regular file below the watched directory.
static void track(int fd)
{
	if (fd < 0 || fd >= MAX_FDS || log_fd < 0) {
		return;
	}
	char link[64], path[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0) {
		return;
	}
	path[n] = '\0';
	if (strncmp(path, watch_dir, watch_len) != 0 || path[watch_len] != '/') {
		return;
	}
	pthread_mutex_lock(&mtx);
	free(fd_path[fd]);
	fd_path[fd] = strdup(path);
	pthread_mutex_unlock(&mtx);
}

// Saves what a write of len bytes at off (or a truncation to off, when
// truncate) is about to change. Called with mtx held.
static void save_undo(int fd, uint64_t off, uint64_t len, int truncate)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		return;
	}
	uint64_t size = (uint64_t)st.st_size;
	rec_hdr  h    = { .kind = REC_WRITE,
		    .path_len   = (uint32_t)strlen(fd_path[fd]),
		    .offset     = off,
		    .old_size   = size };
	uint64_t end  = truncate ? size : off + len;
	if (off < size) {
		h.old_len = (end < size ? end : size) - off;
	}
	char *old = NULL;
	if (h.old_len > 0) {
		old = malloc(h.old_len);
		if (old == NULL
		    || real_pread(fd, old, h.old_len, (off_t)off) != (ssize_t)h.old_len) {
			abort();
		}
	}
	log_all(&h, sizeof(h));
	log_all(fd_path[fd], h.path_len);
	if (h.old_len > 0) {
		log_all(old, h.old_len);
	}
	free(old);
}

static void save_sync(int fd)
{
	rec_hdr h = { .kind = REC_SYNC, .path_len = (uint32_t)strlen(fd_path[fd]) };
	log_all(&h, sizeof(h));
	log_all(fd_path[fd], h.path_len);
}

static int watched(int fd)
{
	return fd >= 0 && fd < MAX_FDS && fd_path[fd] != NULL;
}

#define OPEN_WRAPPER(name, real, ...)                                                              \
	{                                                                                          \
		mode_t mode = 0;                                                                   \
		if (flags & (O_CREAT | O_TMPFILE)) {                                               \
			va_list ap;                                                                \
			va_start(ap, flags);                                                       \
			mode = (mode_t)va_arg(ap, int);                                            \
			va_end(ap);                                                                \
		}                                                                                  \
		int fd = real(__VA_ARGS__, flags, mode);                                           \
		track(fd);                                                                         \
		return fd;                                                                         \
	}

int open(const char *path, int flags, ...)
    OPEN_WRAPPER(open, real_open, path) int open64(const char *path, int flags, ...) OPEN_WRAPPER(
        open64, real_open64, path) int openat(int dirfd, const char *path, int flags, ...)
        OPEN_WRAPPER(openat, real_openat, dirfd, path) int openat64(int dirfd, const char *path,
            int flags, ...) OPEN_WRAPPER(openat64, real_openat64, dirfd, path)

            int close(int fd)
{
	if (fd >= 0 && fd < MAX_FDS) {
		pthread_mutex_lock(&mtx);
		free(fd_path[fd]);
		fd_path[fd] = NULL;
		pthread_mutex_unlock(&mtx);
	}
	return real_close(fd);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	if (!watched(fd)) {
		return real_write(fd, buf, n);
	}
	pthread_mutex_lock(&mtx);
	off_t pos = lseek(fd, 0, SEEK_CUR);
	if (pos >= 0 && watched(fd)) {
		save_undo(fd, (uint64_t)pos, n, 0);
	}
	ssize_t r = real_write(fd, buf, n);
	pthread_mutex_unlock(&mtx);
	return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (!watched(fd)) {
		return real_pwrite(fd, buf, n, off);
	}
	pthread_mutex_lock(&mtx);
	if (watched(fd)) {
		save_undo(fd, (uint64_t)off, n, 0);
	}
	ssize_t r = real_pwrite(fd, buf, n, off);
	pthread_mutex_unlock(&mtx);
	return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	if (!watched(fd)) {
		return real_pwrite64(fd, buf, n, off);
	}
	pthread_mutex_lock(&mtx);
	if (watched(fd)) {
		save_undo(fd, (uint64_t)off, n, 0);
	}
	ssize_t r = real_pwrite64(fd, buf, n, off);
	pthread_mutex_unlock(&mtx);
	return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (!watched(fd)) {
		return real_pwritev(fd, iov, cnt, off);
	}
	size_t n = 0;
	for (int i = 0; i < cnt; i++) {
		n += iov[i].iov_len;
	}
	pthread_mutex_lock(&mtx);
	if (watched(fd)) {
		save_undo(fd, (uint64_t)off, n, 0);
	}
	ssize_t r = real_pwritev(fd, iov, cnt, off);
	pthread_mutex_unlock(&mtx);
	return r;
}

static int do_truncate(int fd, uint64_t len, int is64)
{
	if (watched(fd)) {
		pthread_mutex_lock(&mtx);
		if (watched(fd)) {
			save_undo(fd, len, 0, 1);
		}
		int r = is64 ? real_ftruncate64(fd, (off64_t)len) : real_ftruncate(fd, (off_t)len);
		pthread_mutex_unlock(&mtx);
		return r;
	}
	return is64 ? real_ftruncate64(fd, (off64_t)len) : real_ftruncate(fd, (off_t)len);
}

int ftruncate(int fd, off_t len)
{
	return do_truncate(fd, (uint64_t)len, 0);
}

int ftruncate64(int fd, off64_t len)
{
	return do_truncate(fd, (uint64_t)len, 1);
}

// The lock is held across the sync: a write another thread makes while
// it runs is logged after its mark, so it is not taken as synced (a sync
// covers what was written before it began, not what it overlaps). Any
// descriptor of the file counts: marks go by path.
static int do_sync(int fd, int data)
{
	if (!watched(fd)) {
		return data ? real_fdatasync(fd) : real_fsync(fd);
	}
	pthread_mutex_lock(&mtx);
	int r = data ? real_fdatasync(fd) : real_fsync(fd);
	if (r == 0 && watched(fd)) {
		save_sync(fd);
	}
	pthread_mutex_unlock(&mtx);
	return r;
}

int fsync(int fd)
{
	return do_sync(fd, 0);
}

int fdatasync(int fd)
{
	return do_sync(fd, 1);
}

#else // POWERCUT_RESTORE

// One undo entry kept in memory by the restore program.
typedef struct undo {
	char    *path;
	uint64_t offset, old_size, old_len;
	char    *old;
	int      kind;
} undo;

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: powercut_restore UNDO_LOG\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	if (f == NULL) {
		perror(argv[1]);
		return 1;
	}
	undo   *v = NULL;
	size_t  n = 0, cap = 0;
	rec_hdr h;
	while (fread(&h, sizeof(h), 1, f) == 1) {
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			v   = realloc(v, cap * sizeof(*v));
		}
		undo *u     = &v[n++];
		u->kind     = (int)h.kind;
		u->offset   = h.offset;
		u->old_size = h.old_size;
		u->old_len  = h.old_len;
		u->path     = calloc(1, h.path_len + 1);
		u->old      = h.old_len ? malloc(h.old_len) : NULL;
		if (fread(u->path, 1, h.path_len, f) != h.path_len
		    || (h.old_len && fread(u->old, 1, h.old_len, f) != h.old_len)) {
			// A record cut by the kill: its write never happened.
			free(u->path);
			free(u->old);
			n--;
			break;
		}
	}
	fclose(f);
	// The last sync mark of each file (few files: a flat list).
	char  **paths = calloc(n + 1, sizeof(*paths));
	size_t *last  = calloc(n + 1, sizeof(*last));
	size_t  np    = 0;
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		while (k < np && strcmp(paths[k], v[i].path) != 0) {
			k++;
		}
		if (k == np) {
			paths[np] = v[i].path;
			last[np]  = SIZE_MAX;
			np++;
		}
		if (v[i].kind == REC_SYNC) {
			last[k] = i;
		}
	}
	// Newest first: undo each write made after its file's last sync mark.
	size_t undone = 0;
	for (size_t i = n; i-- > 0;) {
		if (v[i].kind != REC_WRITE) {
			continue;
		}
		size_t k = 0;
		while (strcmp(paths[k], v[i].path) != 0) {
			k++;
		}
		if (last[k] != SIZE_MAX && last[k] > i) {
			continue;
		}
		int fd = open(v[i].path, O_WRONLY);
		if (fd < 0) {
			continue; // deleted since: nothing to restore
		}
		if (v[i].old_len
		    && pwrite(fd, v[i].old, v[i].old_len, (off_t)v[i].offset)
		        != (ssize_t)v[i].old_len) {
			perror("pwrite");
			return 1;
		}
		if (ftruncate(fd, (off_t)v[i].old_size) != 0) {
			perror("ftruncate");
			return 1;
		}
		close(fd);
		undone++;
	}
	// The WAL index (-shm) is shared memory, not data; after a power cut
	// it may describe WAL frames that were lost. SQLite rebuilds it from
	// the WAL when it is missing.
	for (size_t k = 0; k < np; k++) {
		size_t len = strlen(paths[k]);
		if (len > 4 && strcmp(paths[k] + len - 4, "-wal") == 0) {
			char shm[PATH_MAX];
			snprintf(shm, sizeof(shm), "%.*s-shm", (int)(len - 4), paths[k]);
			unlink(shm);
		}
	}
	printf("powercut_restore: %zu records, %zu writes undone\n", n, undone);
	for (size_t i = 0; i < n; i++) {
		free(v[i].path);
		free(v[i].old);
	}
	free(v);
	free(paths);
	free(last);
	return 0;
}

#endif
