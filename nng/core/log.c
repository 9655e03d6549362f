// The log front end: level, rate limits and the installed sink (see log.h).
// The application's sink (src/log) does the formatting and the targets;
// the built-in one writes "<level> <module>: <msg>" to stderr.
#include "nng/core/log.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

_Atomic int log_level_current = LOG_LEVEL_WARN;

static const char *const log_level_names[] = {
	"trace",
	"debug",
	"info",
	"warn",
	"error",
	"fatal",
};

static _Atomic(log_sink_fn) log_sink;

// Lines suppressed by log_ratelimit_allow at the call site that this thread
// is about to log from; log_write hands it to the sink and clears it.
static _Thread_local int log_tls_suppressed;

// Returns milliseconds of CLOCK_MONOTONIC; it cannot fail.
static int64_t log_core_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// The built-in sink: one write(2) of "<level> <module>: <msg>[
// suppressed=<n>]\n" to stderr, cut at 1 KiB. Returns nothing; a failing
// stderr is ignored (there is nowhere left to say it).
static void log_stderr_sink(
    int level, const char *module, int suppressed, const char *fmt, va_list ap)
{
	char buf[1024];
	int  n = snprintf(buf, sizeof(buf), "%s %s: ", log_level_names[level], module);
	if (n < 0 || (size_t)n >= sizeof(buf)) {
		return;
	}
	size_t len  = (size_t)n;
	size_t room = sizeof(buf) - len - 32; // " suppressed=<n>\n"
	int    m    = vsnprintf(buf + len, room, fmt, ap);
	if (m > 0) {
		len += (size_t)m < room ? (size_t)m : room - 1;
	}
	if (suppressed > 0) {
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, " suppressed=%d", suppressed);
	}
	buf[len++]    = '\n';
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(STDERR_FILENO, p, len);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			return;
		}
		p += w;
		len -= (size_t)w;
	}
}

void log_set_sink(log_sink_fn fn)
{
	atomic_store_explicit(&log_sink, fn, memory_order_release);
}

// Checks the level again (log_write may be called without the macros),
// then hands the statement to the installed sink.
void log_write(int level, const char *module, const char *fmt, ...)
{
	if (level < atomic_load_explicit(&log_level_current, memory_order_relaxed)) {
		return;
	}
	if (level < LOG_LEVEL_TRACE) {
		level = LOG_LEVEL_TRACE;
	}
	if (level > LOG_LEVEL_FATAL) {
		level = LOG_LEVEL_FATAL;
	}
	if (module == NULL) {
		module = "-";
	}
	int suppressed     = log_tls_suppressed;
	log_tls_suppressed = 0;
	log_sink_fn fn     = atomic_load_explicit(&log_sink, memory_order_acquire);
	if (fn == NULL) {
		fn = log_stderr_sink;
	}
	va_list ap;
	va_start(ap, fmt);
	fn(level, module, suppressed, fmt, ap);
	va_end(ap);
}

void log_set_level(int level)
{
	if (level < LOG_LEVEL_TRACE) {
		level = LOG_LEVEL_TRACE;
	}
	if (level > LOG_LEVEL_FATAL) {
		level = LOG_LEVEL_FATAL;
	}
	atomic_store_explicit(&log_level_current, level, memory_order_relaxed);
}

// ASCII-only case folding (no locale tables: see docs/decisions/0004).
static int log_ascii_lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

int log_level_parse(const char *word)
{
	if (word == NULL) {
		return -1;
	}
	for (int i = LOG_LEVEL_TRACE; i <= LOG_LEVEL_FATAL; i++) {
		const char *a = word;
		const char *b = log_level_names[i];
		while (*a != '\0' && log_ascii_lower((unsigned char)*a) == *b) {
			a++;
			b++;
		}
		if (*a == '\0' && *b == '\0') {
			return i;
		}
	}
	return -1;
}

const char *log_level_name(int level)
{
	if (level < LOG_LEVEL_TRACE || level > LOG_LEVEL_FATAL) {
		return "unknown";
	}
	return log_level_names[level];
}

int log_ratelimit_allow(log_ratelimit *rl, int per_sec)
{
	int64_t now   = log_core_now_ms();
	int64_t start = atomic_load_explicit(&rl->window_start_ms, memory_order_relaxed);

	if (per_sec < 1) {
		per_sec = 1;
	}
	if (start == 0 || now - start >= 1000) {
		// One thread opens the new window; the others count in it.
		if (atomic_compare_exchange_strong(&rl->window_start_ms, &start, now)) {
			atomic_store(&rl->count, 0);
		}
	}
	if (atomic_fetch_add(&rl->count, 1) < per_sec) {
		int s = atomic_exchange(&rl->suppressed, 0);
		if (s > 0) {
			log_tls_suppressed += s;
		}
		return 1;
	}
	atomic_fetch_add(&rl->suppressed, 1);
	return 0;
}
