// Logging, the application's sink (nng/core/log.h calls it): formats one
// line per statement and hands it to each target (console, file with size
// rotation, syslog, unix datagram socket) with a single write(2), send(2)
// or syslog(3) call per target.
//
// Threading: the line is formatted by the calling thread without any lock;
// one mutex then guards the target state (file descriptor, size, rotation)
// and the writes themselves, so lines of different threads never interleave
// and every target sees them in the same order.
#include "src/log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

// A line up to this size is built on the stack; a longer one on the heap, up
// to LOG_LINE_MAX bytes, beyond which the message is cut and ends in "...".
#define LOG_LINE_STACK 1024
#define LOG_LINE_MAX   65536
// Room kept after the message for " suppressed=<n>" and the newline.
#define LOG_LINE_TAIL 40
// A log file that cannot be opened is retried at most this often.
#define LOG_FILE_RETRY_MS 1000

static const int log_syslog_prio[] = {
	LOG_DEBUG,
	LOG_DEBUG,
	LOG_INFO,
	LOG_WARNING,
	LOG_ERR,
	LOG_CRIT,
};

typedef struct log_target {
	int                targets; // CONF_LOG_TO_* bits
	int                file_fd; // -1 when closed or failed
	char              *file_path;
	uint64_t           file_size;
	bool               file_failed; // the failure was already reported
	int64_t            file_retry_ms;
	uint64_t           rotation_size; // 0: never rotate
	int                rotation_count;
	int                uds_fd;
	struct sockaddr_un uds_addr;
	socklen_t          uds_len;
	bool               syslog_open;
} log_target;

#define LOG_TARGET_INIT                                                                            \
	{                                                                                          \
		.targets = CONF_LOG_TO_CONSOLE, .file_fd = -1, .uds_fd = -1                        \
	}

static pthread_mutex_t log_mtx = PTHREAD_MUTEX_INITIALIZER;
static log_target      log_tgt = LOG_TARGET_INIT;

// Returns milliseconds of CLOCK_MONOTONIC; it cannot fail.
static int64_t log_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Writes all of buf to fd, retrying after EINTR or a short write. Returns 0,
// or -1 with errno set when the descriptor refuses the data.
static int log_write_all(int fd, const char *buf, size_t len)
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

// Reports a problem of the log itself on stderr, the only place left to say
// it. Returns nothing; a failing stderr is ignored.
static void log_complain(const char *what, const char *path, int err)
{
	char buf[512];
	int  n = snprintf(buf, sizeof(buf), "nanomq: log: %s %s: %s\n", what, path, strerror(err));
	if (n > 0) {
		(void)log_write_all(
		    STDERR_FILENO, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
	}
}

// Opens (creating it if needed) the log file at path for appending. Returns
// the descriptor and stores the current size in *size, or returns -1 with
// errno set.
static int log_file_open(const char *path, uint64_t *size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	*size = (uint64_t)st.st_size;
	return fd;
}

// Reopens the file target of t, reporting a failure on stderr once. Returns
// 0 on success or -1, leaving t->file_fd at -1 and scheduling a retry.
static int log_file_reopen_locked(log_target *t)
{
	if (t->file_fd >= 0) {
		close(t->file_fd);
	}
	t->file_fd = log_file_open(t->file_path, &t->file_size);
	if (t->file_fd < 0) {
		if (!t->file_failed) {
			log_complain("cannot open", t->file_path, errno);
		}
		t->file_failed   = true;
		t->file_retry_ms = log_now_ms() + LOG_FILE_RETRY_MS;
		return -1;
	}
	t->file_failed = false;
	return 0;
}

// Shifts nanomq.log.1..N-1 to .2..N (deleting .N first), moves the live file
// to .1 and opens a fresh one. Returns 0, or -1 when the new file cannot be
// opened; a failed rename is reported and does not stop the rotation.
static int log_file_rotate_locked(log_target *t)
{
	char from[PATH_MAX + 16];
	char to[PATH_MAX + 16];

	close(t->file_fd);
	t->file_fd = -1;
	if (t->rotation_count <= 0) {
		if (unlink(t->file_path) != 0 && errno != ENOENT) {
			log_complain("cannot remove", t->file_path, errno);
		}
		return log_file_reopen_locked(t);
	}
	snprintf(to, sizeof(to), "%s.%d", t->file_path, t->rotation_count);
	if (unlink(to) != 0 && errno != ENOENT) {
		log_complain("cannot remove", to, errno);
	}
	for (int i = t->rotation_count - 1; i >= 1; i--) {
		snprintf(from, sizeof(from), "%s.%d", t->file_path, i);
		snprintf(to, sizeof(to), "%s.%d", t->file_path, i + 1);
		if (rename(from, to) != 0 && errno != ENOENT) {
			log_complain("cannot rename", from, errno);
		}
	}
	snprintf(to, sizeof(to), "%s.1", t->file_path);
	if (rename(t->file_path, to) != 0 && errno != ENOENT) {
		log_complain("cannot rename", t->file_path, errno);
	}
	return log_file_reopen_locked(t);
}

// Appends one line to the file target, rotating first when the line would
// take the file past the rotation size. Returns nothing: a failure is
// reported on stderr once and the file is retried later.
static void log_file_write_locked(log_target *t, const char *line, size_t len)
{
	if (t->file_fd < 0) {
		if (t->file_path == NULL || log_now_ms() < t->file_retry_ms) {
			return;
		}
		if (log_file_reopen_locked(t) != 0) {
			return;
		}
	}
	if (t->rotation_size > 0 && t->file_size > 0 && t->file_size + len > t->rotation_size) {
		if (log_file_rotate_locked(t) != 0) {
			return;
		}
	}
	if (log_write_all(t->file_fd, line, len) != 0) {
		if (!t->file_failed) {
			log_complain("cannot write", t->file_path, errno);
		}
		t->file_failed = true;
		return;
	}
	t->file_failed = false;
	t->file_size += len;
}

// Sends one syslog-formatted datagram ("<PRI>Mmm dd hh:mm:ss nanomq[pid]:
// body") to the uds target. Returns nothing: a receiver that is absent or
// full loses the line, so that logging never blocks on it.
static void log_uds_send_locked(log_target *t, int level, const char *body, size_t len)
{
	static const char *const mon[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
		"Sep", "Oct", "Nov", "Dec" };
	char                     head[96];
	struct tm                tm;
	time_t                   now = time(NULL);

	localtime_r(&now, &tm);
	int n = snprintf(head, sizeof(head),
	    "<%d>%s %2d %02d:%02d:%02d nanomq[%ld]: ", LOG_DAEMON | log_syslog_prio[level],
	    mon[tm.tm_mon], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof(head)) {
		return;
	}
	struct iovec  iov[2] = { { head, (size_t)n }, { (void *)body, len } };
	struct msghdr mh     = {
		    .msg_name    = &t->uds_addr,
		    .msg_namelen = t->uds_len,
		    .msg_iov     = iov,
		    .msg_iovlen  = 2,
	};
	(void)sendmsg(t->uds_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Fills *sa from addr, a filesystem path or "@name" for the abstract
// namespace. Returns the address length, or 0 when addr does not fit.
static socklen_t log_unix_addr(struct sockaddr_un *sa, const char *addr)
{
	size_t len = strlen(addr);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (len == 0 || len >= sizeof(sa->sun_path)) {
		return 0;
	}
	memcpy(sa->sun_path, addr, len);
	if (addr[0] == '@') {
		sa->sun_path[0] = '\0';
		return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

// Joins a and b with one '/' between them (none when a is empty or already
// ends with one). Returns a malloc'ed string, or NULL when out of memory.
static char *log_join2(const char *a, const char *b)
{
	size_t la  = strlen(a);
	bool   sep = la > 0 && a[la - 1] != '/';
	size_t n   = la + (sep ? 1 : 0) + strlen(b) + 1;
	char  *p   = malloc(n);
	if (p != NULL) {
		snprintf(p, n, "%s%s%s", a, sep ? "/" : "", b);
	}
	return p;
}

// Builds the absolute path of the log file from log.dir and log.file (file
// alone when it is absolute; a relative result is prefixed with the working
// directory, so that rotation and reopen still find the file after
// daemonize() changes to "/"). Returns a malloc'ed string, or NULL with
// errno set when out of memory or the working directory is unknown.
static char *log_join_path(const char *dir, const char *file)
{
	char cwd[PATH_MAX];

	if (file == NULL || file[0] == '\0') {
		file = "nanomq.log";
	}
	if (file[0] == '/') {
		return strdup(file);
	}
	char *rel = log_join2(dir != NULL ? dir : "", file);
	if (rel == NULL || rel[0] == '/') {
		return rel;
	}
	if (getcwd(cwd, sizeof(cwd)) == NULL) {
		free(rel);
		return NULL;
	}
	char *abs = log_join2(cwd, rel);
	free(rel);
	return abs;
}

// Releases what t holds (descriptors, path, syslog connection) and resets
// it to the console-only default. Returns nothing; it cannot fail.
static void log_target_fini(log_target *t)
{
	if (t->file_fd >= 0) {
		close(t->file_fd);
	}
	if (t->uds_fd >= 0) {
		close(t->uds_fd);
	}
	free(t->file_path);
	*t = (log_target)LOG_TARGET_INIT;
}

static void log_emit(int level, const char *module, int suppressed, const char *fmt, va_list ap);

void log_init(void)
{
	log_set_sink(log_emit);
}

// Opens the targets of conf into a new state and swaps it in under the lock.
// Returns NMQ_OK, or an error with a message in err, the running targets
// untouched.
nmq_err log_open(const nmq_conf *conf, char *err, size_t errlen)
{
	log_target nt = LOG_TARGET_INIT;
	nmq_err    rv = NMQ_EINVAL;

	nt.targets = conf->log_to;
	if (nt.targets & CONF_LOG_TO_FILE) {
		nt.file_path = log_join_path(conf->log_dir, conf->log_file);
		if (nt.file_path == NULL) {
			rv = nmq_err_from_errno(errno);
			snprintf(err, errlen, "log: cannot build the log file path: %s",
			    strerror(errno));
			goto fail;
		}
		if (strlen(nt.file_path) >= PATH_MAX) {
			snprintf(err, errlen, "log: file path too long: %s", nt.file_path);
			goto fail;
		}
		nt.file_fd = log_file_open(nt.file_path, &nt.file_size);
		if (nt.file_fd < 0) {
			rv = nmq_err_from_errno(errno);
			snprintf(
			    err, errlen, "log: cannot open %s: %s", nt.file_path, strerror(errno));
			goto fail;
		}
		nt.rotation_size  = conf->log_rotation_size;
		nt.rotation_count = conf->log_rotation_count;
	}
	if (nt.targets & CONF_LOG_TO_UDS) {
		if (conf->log_uds_addr == NULL || conf->log_uds_addr[0] == '\0') {
			snprintf(err, errlen,
			    "log: uds is listed in log.to but log.uds_addr is not set");
			goto fail;
		}
		nt.uds_len = log_unix_addr(&nt.uds_addr, conf->log_uds_addr);
		if (nt.uds_len == 0) {
			snprintf(err, errlen, "log: uds_addr too long: %s", conf->log_uds_addr);
			goto fail;
		}
		nt.uds_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (nt.uds_fd < 0) {
			rv = nmq_err_from_errno(errno);
			snprintf(err, errlen, "log: socket: %s", strerror(errno));
			goto fail;
		}
	}

	pthread_mutex_lock(&log_mtx);
	log_target old = log_tgt;
	log_tgt        = nt;
	if (nt.targets & CONF_LOG_TO_SYSLOG) {
		if (!old.syslog_open) {
			openlog("nanomq", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		}
		log_tgt.syslog_open = true;
	} else if (old.syslog_open) {
		closelog();
	}
	old.syslog_open = false;
	pthread_mutex_unlock(&log_mtx);

	log_target_fini(&old);
	log_set_sink(log_emit);
	log_set_level(conf->log_level);
	return NMQ_OK;

fail:
	log_target_fini(&nt);
	return rv;
}

// Closes every target and falls back to the console. Returns nothing.
void log_close(void)
{
	pthread_mutex_lock(&log_mtx);
	log_target old = log_tgt;
	log_tgt        = (log_target)LOG_TARGET_INIT;
	if (old.syslog_open) {
		closelog();
	}
	pthread_mutex_unlock(&log_mtx);
	log_target_fini(&old);
}

// Reopens the log file at its path (after logrotate moved it). Returns
// nothing; a failure is reported on stderr and the open is retried later.
void log_reopen(void)
{
	pthread_mutex_lock(&log_mtx);
	if ((log_tgt.targets & CONF_LOG_TO_FILE) && log_tgt.file_path != NULL) {
		log_tgt.file_failed = false;
		(void)log_file_reopen_locked(&log_tgt);
	}
	pthread_mutex_unlock(&log_mtx);
}

// Replaces control characters (other than tab) in s[0..len) with '?', so a
// client-supplied string can never forge or split a log line. Returns
// nothing.
static void log_sanitize(char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f) {
			s[i] = '?';
		}
	}
}

// Splits t into UTC calendar fields, as gmtime_r() does, but without
// libc's time-zone machinery: gmtime_r() reads /etc/localtime on first use
// and pulls some 130 kB of libc's code and tables into the broker's
// resident memory. Days are counted in 400-year eras of 146097 days that
// start on 1 March, so that the leap day ends the year. Fills tm_year,
// tm_mon, tm_mday, tm_hour, tm_min, tm_sec, tm_wday and tm_yday.
void log_gmtime(int64_t t, struct tm *tm)
{
	int64_t days = t / 86400;
	int64_t sod  = t % 86400;
	if (sod < 0) {
		sod += 86400;
		days--;
	}
	memset(tm, 0, sizeof(*tm));
	tm->tm_hour = (int)(sod / 3600);
	tm->tm_min  = (int)(sod / 60 % 60);
	tm->tm_sec  = (int)(sod % 60);
	tm->tm_wday = (int)((days % 7 + 11) % 7); // 1970-01-01 was a Thursday

	int64_t z   = days + 719468; // days since 0000-03-01
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097; // [0, 146096]
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; // [0, 399]
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from 1 March
	int64_t mp  = (5 * doy + 2) / 153; // [0, 11], 0 = March
	int64_t y   = yoe + era * 400 + (mp >= 10);
	int     mon = (int)(mp < 10 ? mp + 2 : mp - 10); // 0 = January

	tm->tm_year = (int)(y - 1900);
	tm->tm_mon  = mon;
	tm->tm_mday = (int)(doy - (153 * mp + 2) / 5 + 1);
	bool leap   = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	// Day of the year from 1 January: March 1st is day 59 (60 in leap years).
	tm->tm_yday = (int)(mp < 10 ? doy + 59 + leap : doy - 306);
}

// Formats the UTC time of now as "2026-11-22T10:00:00.123Z". Returns the
// number of characters written to buf (at least 32 bytes).
static int log_format_time(char *buf, size_t cap)
{
	struct timespec ts;
	struct tm       tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	log_gmtime((int64_t)ts.tv_sec, &tm);
	int year = tm.tm_year + 1900;
	int ms   = (int)(ts.tv_nsec / 1000000);
	if (year < 0 || year > 9999 || cap < 25) {
		return snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", year,
		    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
	}
	// Digits by hand: zero padding is printf's _IO_padn, one more 64 KiB
	// window of libc resident from the first line logged.
	const int         field[] = { year / 100, year % 100, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		        tm.tm_min, tm.tm_sec };
	static const char before[] = { 0, 0, '-', '-', 'T', ':', ':' };
	char             *o        = buf;
	for (int i = 0; i < 7; i++) {
		if (before[i] != 0) {
			*o++ = before[i];
		}
		*o++ = (char)('0' + field[i] / 10);
		*o++ = (char)('0' + field[i] % 10);
	}
	*o++ = '.';
	*o++ = (char)('0' + ms / 100);
	*o++ = (char)('0' + ms / 10 % 10);
	*o++ = (char)('0' + ms % 10);
	*o++ = 'Z';
	*o   = '\0';
	return (int)(o - buf);
}

// The sink: formats one line without the lock, then writes it to every
// target with one call each under the lock. level is within trace..fatal
// and module is not NULL (log_write sees to both). Returns nothing; a
// failing target is reported on stderr and skipped.
static void log_emit(int level, const char *module, int suppressed, const char *fmt, va_list ap)
{
	char    stack[LOG_LINE_STACK];
	char   *line = stack;
	size_t  cap  = sizeof(stack);
	va_list ap2;

	// "<time> <level> " then the body "<module>: <message>".
	int tlen = log_format_time(line, cap);
	// The level padded to five characters by hand, not with "%-5s" (see
	// log_format_time).
	const char *name = log_level_name(level);
	size_t      nl   = strlen(name);
	size_t      body = (size_t)tlen + 7;
	line[tlen]       = ' ';
	memcpy(line + tlen + 1, name, nl);
	memset(line + tlen + 1 + nl, ' ', 6 - nl);
	int    mlen = snprintf(line + body, cap - body, "%.64s: ", module);
	size_t msg  = body + (size_t)mlen;

	size_t room = cap - msg - LOG_LINE_TAIL;
	va_copy(ap2, ap);
	int n = vsnprintf(line + msg, room, fmt, ap2);
	va_end(ap2);
	if (n < 0) {
		n = 0;
	}
	size_t out = (size_t)n;
	if (out >= room) {
		size_t want = msg + out + 1 + LOG_LINE_TAIL;
		if (want > LOG_LINE_MAX) {
			want = LOG_LINE_MAX;
		}
		char *big = malloc(want);
		if (big != NULL) {
			memcpy(big, line, msg);
			line = big;
			cap  = want;
			room = cap - msg - LOG_LINE_TAIL;
			(void)vsnprintf(line + msg, room, fmt, ap);
		}
		if (out >= room) {
			// Cut: keep what fits and say so.
			out = room - 1;
			memcpy(line + msg + out - 3, "...", 3);
		}
	}
	size_t len = msg + out;
	log_sanitize(line + msg, len - msg);
	if (suppressed > 0) {
		len += (size_t)snprintf(line + len, cap - len, " suppressed=%d", suppressed);
	}
	line[len++] = '\n';

	pthread_mutex_lock(&log_mtx);
	log_target *t = &log_tgt;
	if (t->targets & CONF_LOG_TO_CONSOLE) {
		(void)log_write_all(STDERR_FILENO, line, len);
	}
	if (t->targets & CONF_LOG_TO_FILE) {
		log_file_write_locked(t, line, len);
	}
	if ((t->targets & CONF_LOG_TO_SYSLOG) && t->syslog_open) {
		syslog(log_syslog_prio[level], "%.*s", (int)(len - 1 - body), line + body);
	}
	if ((t->targets & CONF_LOG_TO_UDS) && t->uds_fd >= 0) {
		log_uds_send_locked(t, level, line + body, len - 1 - body);
	}
	pthread_mutex_unlock(&log_mtx);

	if (line != stack) {
		free(line);
	}
}
