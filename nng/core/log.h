// The log front end every layer calls: levels, the log_* macros (and their
// rate-limited variants) and the sink that turns a statement into a line.
// A statement below the current level costs one integer compare and formats
// nothing. With NOLOG (NMQ_NOLOG), everything below fatal compiles away.
//
// The application installs the sink (src/log: time stamp, file rotation,
// syslog, uds); until it does, and in programs that install none (unit
// tests of the lower layers), lines go to stderr as "<level> <module>: <msg>".
//
// Thread safety: every function may be called from any thread.
// log_set_level and log_set_sink are called by the main thread.
#ifndef NMQ_CORE_LOG_H
#define NMQ_CORE_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>

enum nmq_log_level {
	LOG_LEVEL_TRACE = 0,
	LOG_LEVEL_DEBUG,
	LOG_LEVEL_INFO,
	LOG_LEVEL_WARN,
	LOG_LEVEL_ERROR,
	LOG_LEVEL_FATAL,
};

// The level below which nothing is formatted (warn until set).
extern _Atomic int log_level_current;

// Sets the level, clamped to trace..fatal. Returns nothing.
void log_set_level(int level);
// Returns the level named by word (any ASCII case), or -1 if it names none.
int log_level_parse(const char *word);
// Returns the name of level ("warn"), or "unknown" when out of range.
const char *log_level_name(int level);

// Writes one line of the given level (clamped to trace..fatal); module
// NULL is written "-". Use the macros. Returns nothing; the sink reports
// its own failures where it can.
void log_write(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// A sink: called by log_write for a statement at or above the current
// level, on the logging thread, with the level already clamped, module
// never NULL and `suppressed` the number of lines the rate limit of this
// call site dropped since its previous line (0 usually). Must not call
// log_write. It owns formatting and output.
typedef void (*log_sink_fn)(
    int level, const char *module, int suppressed, const char *fmt, va_list ap);
// Installs fn (NULL: back to the built-in stderr sink). Returns nothing.
void log_set_sink(log_sink_fn fn);

// Rate limit of one call site: at most `per_sec` lines per second; the
// number of suppressed lines is handed to the sink with the next line
// written from that site.
typedef struct log_ratelimit {
	_Atomic int64_t window_start_ms;
	_Atomic int     count;
	_Atomic int     suppressed;
} log_ratelimit;
// Returns 1 when this call site may log in the current one-second window,
// 0 when the line must be dropped.
int log_ratelimit_allow(log_ratelimit *rl, int per_sec);

#ifdef NMQ_NOLOG
#define NMQ_LOG(lvl, mod, ...)                                                                     \
	do {                                                                                       \
		if ((lvl) >= LOG_LEVEL_FATAL)                                                      \
			log_write(lvl, mod, __VA_ARGS__);                                          \
	} while (0)
#define NMQ_LOG_RL(lvl, mod, ...) NMQ_LOG(lvl, mod, __VA_ARGS__)
#else
#define NMQ_LOG(lvl, mod, ...)                                                                     \
	do {                                                                                       \
		if ((lvl) >= atomic_load_explicit(&log_level_current, memory_order_relaxed))       \
			log_write(lvl, mod, __VA_ARGS__);                                          \
	} while (0)
// Rate-limited logging for anything that can repeat per message: at most
// 10 lines per second from one call site at the given level.
#define NMQ_LOG_RL(lvl, mod, ...)                                                                  \
	do {                                                                                       \
		static log_ratelimit rl_;                                                          \
		if ((lvl) >= atomic_load_explicit(&log_level_current, memory_order_relaxed)        \
		    && log_ratelimit_allow(&rl_, 10))                                              \
			log_write(lvl, mod, __VA_ARGS__);                                          \
	} while (0)
#endif

#define log_trace(mod, ...)   NMQ_LOG(LOG_LEVEL_TRACE, mod, __VA_ARGS__)
#define log_debug(mod, ...)   NMQ_LOG(LOG_LEVEL_DEBUG, mod, __VA_ARGS__)
#define log_info(mod, ...)    NMQ_LOG(LOG_LEVEL_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...)    NMQ_LOG(LOG_LEVEL_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...)   NMQ_LOG(LOG_LEVEL_ERROR, mod, __VA_ARGS__)
#define log_fatal(mod, ...)   NMQ_LOG(LOG_LEVEL_FATAL, mod, __VA_ARGS__)
#define log_info_rl(mod, ...) NMQ_LOG_RL(LOG_LEVEL_INFO, mod, __VA_ARGS__)
#define log_warn_rl(mod, ...) NMQ_LOG_RL(LOG_LEVEL_WARN, mod, __VA_ARGS__)

#endif // NMQ_CORE_LOG_H
