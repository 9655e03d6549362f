// Logging, the application's side: the sink that nng/core/log.h hands
// every statement to. Formats "<time> <level> <module>: <msg>" (UTC time,
// control characters of the message replaced, long lines cut at 64 KiB)
// and writes it to the targets of the configuration: console, file with
// size rotation, syslog, unix datagram socket. The levels, the log_*
// macros and the rate limit are in nng/core/log.h, included here.
//
// Thread safety: lines may be written from any thread. log_init /
// log_open / log_close / log_reopen are called by the main thread.
#ifndef NMQ_LOG_H
#define NMQ_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "nng/core/log.h"
#include "nng/core/nmq_err.h"
#include "src/conf/conf.h"

// Installs this module's sink with the console target, so that lines
// logged before log_open have the full format. Returns nothing.
void log_init(void);
// Opens the targets named in conf (log_to, dir/file, rotation, uds), installs
// the sink and sets the level. Returns NMQ_OK, or NMQ_EINVAL (bad uds
// address, path too long), NMQ_ENOMEM, or the error of the failed open or
// socket call (NMQ_ENOENT, NMQ_EACCES, NMQ_EIO, ...) with a message in err.
// May be called again (reload): the new targets are opened first and swapped
// in only on success; on failure the running ones stay. Before the first
// log_open and after log_close, lines go to stderr.
nmq_err log_open(const nmq_conf *conf, char *err, size_t errlen);
void    log_close(void);
// Reopens log files (SIGUSR1, after logrotate).
void log_reopen(void);
// gmtime_r() without libc's time-zone code (see log.c): splits t, seconds
// since the epoch, into UTC calendar fields.
void log_gmtime(int64_t t, struct tm *tm);

#endif // NMQ_LOG_H
