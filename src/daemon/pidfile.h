// The pid file: a file holding the broker's pid, locked with flock(2) for as
// long as the broker runs.
//
// Contract:
// - The lock, not the content, says whether a broker is running: the kernel
//   drops it when the holder exits, even after kill -9, so a stale file is
//   simply taken over, and a stale pid never leads `stop` to signal an
//   unrelated process.
// - The lock belongs to the open file description, so it survives fork():
//   acquire before daemonize() (errors still reach the terminal), then call
//   pidfile_update() in the daemon to write its new pid.
// - Several brokers may run at once with different pid files.
// - All functions are called by the main thread and block only on local
//   file system calls.
#ifndef NMQ_PIDFILE_H
#define NMQ_PIDFILE_H

#include <stddef.h>
#include <sys/types.h>

#include "nng/core/nmq_err.h"

#define PIDFILE_DEFAULT_PATH "/tmp/nanomq/nanomq.pid"

typedef struct pidfile {
	int  fd; // -1 when not held
	char path[4096];
} pidfile;

// Returns $NANOMQ_PID_FILE when it is set and not empty, else
// PIDFILE_DEFAULT_PATH. The string is not to be freed.
const char *pidfile_path(void);

// Creates path's directory if needed (mode 0755), opens and locks path and
// writes the caller's pid into it; *pf then holds the lock until
// pidfile_release() or exit. Returns NMQ_OK, or with a message in err:
// NMQ_EEXIST when another process holds the lock (the message names its
// pid), NMQ_EINVAL for an empty or too long path, NMQ_EBUSY when the file
// kept being replaced, or the error of mkdir/open/flock/write (NMQ_EACCES,
// NMQ_ENOENT, NMQ_EIO, ...).
nmq_err pidfile_acquire(pidfile *pf, const char *path, char *err, size_t errlen);

// Rewrites the held file with the caller's pid (after daemonize()). Returns
// NMQ_OK, or with a message in err NMQ_EINVAL when pf is not held, or the
// error of the write.
nmq_err pidfile_update(pidfile *pf, char *err, size_t errlen);

// Removes the file and drops the lock (clean exit). Safe to call on a
// pidfile that is not held. Returns nothing.
void pidfile_release(pidfile *pf);

// Reads the pid of the broker that holds the lock on path into *holder:
// the pid (> 0), or 0 when no process holds the lock (no file, or a stale
// one). Returns NMQ_OK; or, with *holder 0 and a message in err,
// NMQ_ECORRUPT when the file is locked but holds no valid pid, or the
// error of open/flock (NMQ_EACCES, ...).
nmq_err pidfile_read(const char *path, pid_t *holder, char *err, size_t errlen);

#endif // NMQ_PIDFILE_H
