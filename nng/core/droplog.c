// The drop and deny counters and the ring of recent events; see droplog.h.
#include "nng/core/droplog.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nng/core/log.h"
#include "nng/core/nmq_mutex.h"

static const char *const reason_names[DROP_REASON_COUNT] = {
	[DROP_QUEUE_FULL]        = "queue_full",
	[DROP_EXPIRED]           = "expired",
	[DROP_TOO_LARGE]         = "too_large",
	[DROP_ACL_PUBLISH]       = "acl_publish",
	[DROP_ACL_DELIVER]       = "acl_deliver",
	[DROP_ACL_REQUEUE]       = "acl_requeue",
	[DROP_MEMORY]            = "max_message_memory",
	[DROP_AWAIT_REL_EXPIRED] = "await_rel_expired",
	[DENY_AUTH]              = "connect_not_authorized",
	[DENY_MAX_CONNECTIONS]   = "max_connections",
	[DENY_CLIENT_ID_OWNER]   = "client_id_owner",
	[DENY_TOPIC_LIMIT]       = "topic_limit",
	[DENY_ACL_SUBSCRIBE]     = "acl_subscribe",
	[DENY_MAX_SUBSCRIPTIONS] = "max_subscriptions",
};

static struct {
	_Atomic uint64_t counts[DROP_REASON_COUNT];
	nmq_mutex        mtx; // guards ring and seq; a leaf
	droplog_event   *ring; // NULL: counters only
	uint32_t         cap;
	uint64_t         seq; // events written so far (the last one's seq)
} dl;

int droplog_init(uint32_t capacity)
{
	droplog_fini();
	nmq_mutex_init(&dl.mtx);
	if (capacity == 0) {
		return 0;
	}
	// calloc of a large block maps fresh zero pages: an unused ring
	// costs no resident memory.
	dl.ring = calloc(capacity, sizeof(*dl.ring));
	if (dl.ring == NULL) {
		log_error("drops", "event=ring_not_allocated capacity=%u", capacity);
		return -1;
	}
	dl.cap = capacity;
	return 0;
}

void droplog_fini(void)
{
	free(dl.ring);
	dl.ring = NULL;
	dl.cap  = 0;
	dl.seq  = 0;
}

const char *droplog_reason_name(droplog_reason r)
{
	return (unsigned)r < DROP_REASON_COUNT ? reason_names[r] : "?";
}

uint64_t droplog_count(droplog_reason r)
{
	return (unsigned)r < DROP_REASON_COUNT
	    ? atomic_load_explicit(&dl.counts[r], memory_order_relaxed)
	    : 0;
}

uint32_t droplog_capacity(void)
{
	return dl.cap;
}

// Copies at most max bytes of s[0..n) into dst (max + 1 bytes), cutting at a
// UTF-8 character boundary, and terminates it.
static void copy_cut(char *dst, size_t max, const char *s, size_t n)
{
	if (s == NULL) {
		dst[0] = '\0';
		return;
	}
	if (n > max) {
		n = max;
		// Do not end inside a multi-byte character: back off the
		// continuation bytes and the lead byte they belong to.
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) {
			n--;
		}
	}
	memcpy(dst, s, n);
	dst[n] = '\0';
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void droplog_record(droplog_reason r, const char *client, const char *topic, size_t topic_len,
    uint8_t qos, uint32_t n)
{
	if ((unsigned)r >= DROP_REASON_COUNT || n == 0) {
		return;
	}
	atomic_fetch_add_explicit(&dl.counts[r], n, memory_order_relaxed);
	uint64_t now = wall_ms();
	if (dl.ring != NULL) {
		nmq_mutex_lock(&dl.mtx);
		uint64_t       seq = ++dl.seq;
		droplog_event *e   = &dl.ring[(seq - 1) % dl.cap];
		e->seq             = seq;
		e->ts_ms           = now;
		e->reason          = (uint8_t)r;
		e->qos             = qos;
		e->count           = n;
		copy_cut(
		    e->client, DROPLOG_CLIENT_MAX, client, client != NULL ? strlen(client) : 0);
		copy_cut(e->topic, DROPLOG_TOPIC_MAX, topic, topic_len);
		nmq_mutex_unlock(&dl.mtx);
	}
	// The sample in the log: each of these two call sites writes at most
	// 10 lines a second and reports how many it left out.
	int tl = topic != NULL ? (int)(topic_len > 200 ? 200 : topic_len) : 0;
	if (r < DENY_AUTH) {
		log_warn_rl("drops", "reason=%s client_id=%s topic=%.*s qos=%d count=%u",
		    reason_names[r], client != NULL ? client : "", tl, topic != NULL ? topic : "",
		    qos == DROPLOG_NO_QOS ? -1 : qos, n);
	} else {
		log_info_rl("drops", "reason=%s client_id=%s topic=%.*s count=%u", reason_names[r],
		    client != NULL ? client : "", tl, topic != NULL ? topic : "", n);
	}
}

size_t droplog_snapshot(droplog_event *out, size_t max)
{
	size_t k = 0;
	if (dl.ring == NULL) {
		return 0;
	}
	nmq_mutex_lock(&dl.mtx);
	uint64_t have = dl.seq < dl.cap ? dl.seq : dl.cap;
	for (uint64_t i = 0; i < have && k < max; i++) {
		uint64_t seq = dl.seq - i;
		out[k++]     = dl.ring[(seq - 1) % dl.cap];
	}
	nmq_mutex_unlock(&dl.mtx);
	return k;
}

// A growing output buffer; `failed` once an allocation failed.
typedef struct jbuf {
	char  *p;
	size_t len, cap;
	bool   failed;
} jbuf;

static void jb_reserve(jbuf *b, size_t more)
{
	if (b->failed || b->len + more + 1 <= b->cap) {
		return;
	}
	size_t ncap = b->cap ? b->cap : 1024;
	while (ncap < b->len + more + 1) {
		ncap *= 2;
	}
	char *np = realloc(b->p, ncap);
	if (np == NULL) {
		b->failed = true;
		return;
	}
	b->p   = np;
	b->cap = ncap;
}

static void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_printf(jbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->failed = true;
		return;
	}
	jb_reserve(b, (size_t)n);
	if (b->failed) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

// Appends s as a JSON string: quotes, backslashes and control characters
// escaped (the bytes are UTF-8, checked by the codec and cut at a
// character boundary).
static void jb_str(jbuf *b, const char *s)
{
	size_t n = strlen(s);
	jb_reserve(b, n * 6 + 2);
	if (b->failed) {
		return;
	}
	char *o = b->p + b->len;
	*o++    = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c < 0x20 || c == 0x7F) {
			o += sprintf(o, "\\u%04x", c);
		} else {
			*o++ = (char)c;
		}
	}
	*o++   = '"';
	b->len = (size_t)(o - b->p);
}

// Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
static void civil(int64_t days, int *y, unsigned *m, unsigned *d)
{
	days += 719468;
	int64_t  era = (days >= 0 ? days : days - 146096) / 146097;
	unsigned doe = (unsigned)(days - era * 146097);
	unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	unsigned mp  = (5 * doy + 2) / 153;
	*d           = doy - (153 * mp + 2) / 5 + 1;
	*m           = mp < 10 ? mp + 3 : mp - 9;
	*y           = (int)(yoe + era * 400) + (*m <= 2);
}

char *droplog_json(size_t limit)
{
	size_t         max = limit < dl.cap ? limit : dl.cap;
	droplog_event *ev  = NULL;
	size_t         n   = 0;
	if (max > 0) {
		ev = malloc(max * sizeof(*ev));
		if (ev == NULL) {
			return NULL;
		}
		n = droplog_snapshot(ev, max);
	}
	jbuf b = { 0 };
	jb_printf(&b, "{\"code\":0,\"capacity\":%u,\"counters\":{", dl.cap);
	for (int r = 0; r < DROP_REASON_COUNT; r++) {
		jb_printf(&b, "%s\"%s\":%llu", r ? "," : "", reason_names[r],
		    (unsigned long long)droplog_count((droplog_reason)r));
	}
	jb_printf(&b, "},\"data\":[");
	for (size_t i = 0; i < n; i++) {
		droplog_event *e  = &ev[i];
		uint64_t       s  = e->ts_ms / 1000;
		int            y  = 0;
		unsigned       mo = 0, d = 0;
		civil((int64_t)(s / 86400), &y, &mo, &d);
		unsigned sod = (unsigned)(s % 86400);
		jb_printf(&b,
		    "%s{\"seq\":%llu,\"ts\":%llu,\"time\":\"%04d-%02u-%02uT%02u:%02u:%02u.%03uZ\","
		    "\"reason\":\"%s\",\"clientid\":",
		    i ? "," : "", (unsigned long long)e->seq, (unsigned long long)e->ts_ms, y, mo,
		    d, sod / 3600, sod / 60 % 60, sod % 60, (unsigned)(e->ts_ms % 1000),
		    droplog_reason_name((droplog_reason)e->reason));
		jb_str(&b, e->client);
		jb_printf(&b, ",\"topic\":");
		jb_str(&b, e->topic);
		if (e->qos == DROPLOG_NO_QOS) {
			jb_printf(&b, ",\"qos\":null,\"count\":%u}", e->count);
		} else {
			jb_printf(&b, ",\"qos\":%u,\"count\":%u}", e->qos, e->count);
		}
	}
	jb_printf(&b, "]}");
	free(ev);
	if (b.failed) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
