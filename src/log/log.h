// Logging: levels trace..fatal, targets console/file/syslog/uds, key=value
// fields. A statement below the current level costs one integer compare and
// formats nothing. With NOLOG, everything below fatal compiles away.
//
// Thread safety: every function may be called from any thread. log_open /
// log_close / log_reopen / log_set_level are called by the main thread.
#ifndef NMQ_LOG_H
#define NMQ_LOG_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "src/conf/conf.h"

extern _Atomic int log_level_current;

// Opens the targets named in conf (log_to, dir/file, rotation, uds).
// Returns 0 or -1 with a message in err.
// May be called again (reload): the new targets are opened first and swapped
// in only on success; on failure the running ones stay. Before the first
// log_open and after log_close, lines go to stderr (level warn until set).
int  log_open(const nmq_conf *conf, char *err, size_t errlen);
void log_close(void);
// Reopens log files (SIGUSR1, after logrotate).
void        log_reopen(void);
void        log_set_level(int level);
int         log_level_parse(const char *word); // -1 if unknown
const char *log_level_name(int level);
// gmtime_r() without libc's time-zone code (see log.c): splits t, seconds
// since the epoch, into UTC calendar fields.
void log_gmtime(int64_t t, struct tm *tm);

// Writes one line: "<time> <level> <module>: <msg>". Use the macros.
void log_write(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Rate-limited variant for anything that may repeat per message: at most
// `per_sec` lines per second per call site; the number of suppressed lines
// is reported in the next line written.
typedef struct log_ratelimit {
	_Atomic int64_t window_start_ms;
	_Atomic int     count;
	_Atomic int     suppressed;
} log_ratelimit;
int log_ratelimit_allow(log_ratelimit *rl, int per_sec);

#ifdef NMQ_NOLOG
#define NMQ_LOG(lvl, mod, ...)                                                                     \
	do {                                                                                       \
		if ((lvl) >= LOG_LEVEL_FATAL)                                                      \
			log_write(lvl, mod, __VA_ARGS__);                                          \
	} while (0)
#else
#define NMQ_LOG(lvl, mod, ...)                                                                     \
	do {                                                                                       \
		if ((lvl) >= atomic_load_explicit(&log_level_current, memory_order_relaxed))       \
			log_write(lvl, mod, __VA_ARGS__);                                          \
	} while (0)
#endif

#define log_trace(mod, ...) NMQ_LOG(LOG_LEVEL_TRACE, mod, __VA_ARGS__)
#define log_debug(mod, ...) NMQ_LOG(LOG_LEVEL_DEBUG, mod, __VA_ARGS__)
#define log_info(mod, ...)  NMQ_LOG(LOG_LEVEL_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...)  NMQ_LOG(LOG_LEVEL_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...) NMQ_LOG(LOG_LEVEL_ERROR, mod, __VA_ARGS__)
#define log_fatal(mod, ...) NMQ_LOG(LOG_LEVEL_FATAL, mod, __VA_ARGS__)

// Rate-limited logging for anything that can repeat per message: at most
// 10 lines per second from one call site at the given level.
#define NMQ_LOG_RL(lvl, mod, ...)                                                                  \
	do {                                                                                       \
		static log_ratelimit rl_;                                                          \
		if ((lvl) >= atomic_load_explicit(&log_level_current, memory_order_relaxed)        \
		    && log_ratelimit_allow(&rl_, 10))                                              \
			log_write(lvl, mod, __VA_ARGS__);                                          \
	} while (0)

#define log_info_rl(mod, ...) NMQ_LOG_RL(LOG_LEVEL_INFO, mod, __VA_ARGS__)
#define log_warn_rl(mod, ...) NMQ_LOG_RL(LOG_LEVEL_WARN, mod, __VA_ARGS__)

#endif // NMQ_LOG_H
