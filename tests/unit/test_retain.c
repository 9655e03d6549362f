// Unit tests of the retained-message store (src/topic/retain.c).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/topic/retain.h"
#include "src/topic/topic_tree.h"

// A fake message: a reference count and the topic it was published on.
typedef struct fmsg {
	_Atomic int refs;
	char        topic[64];
} fmsg;

static _Atomic long n_errors; // checks failed off the main thread

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			atomic_fetch_add(&n_errors, 1);                                            \
		}                                                                                  \
	} while (0)

static void m_hold(void *p)
{
	atomic_fetch_add(&((fmsg *)p)->refs, 1);
}

static void m_release(void *p)
{
	int r = atomic_fetch_sub(&((fmsg *)p)->refs, 1);
	CHECK(r > 0);
}

static const retain_ops ops = { m_hold, m_release };

// Returns a message with one reference (the caller's), for topic.
static fmsg *msg_new(fmsg *m, const char *topic)
{
	atomic_init(&m->refs, 1);
	snprintf(m->topic, sizeof(m->topic), "%s", topic);
	return m;
}

static int set(retain_store *rs, const char *topic, fmsg *m)
{
	return retain_set(rs, topic, strlen(topic), m);
}

typedef struct result {
	fmsg  *m[256];
	size_t n;
} result;

static void collect_cb(void *arg, void *msg)
{
	result *r = arg;
	CHECK(r->n < 256);
	if (r->n < 256) {
		r->m[r->n++] = msg;
	}
}

// Matches filter, checks that the return value is the number of callbacks,
// and releases everything.
static int match(retain_store *rs, const char *filter, result *r)
{
	size_t n = 99;
	r->n     = 0;
	assert_int_equal(retain_match(rs, filter, strlen(filter), collect_cb, r, &n), NMQ_OK);
	assert_int_equal(n, r->n);
	return (int)n;
}

static void release_all(result *r)
{
	for (size_t i = 0; i < r->n; i++) {
		m_release(r->m[i]);
	}
	r->n = 0;
}

static bool has(const result *r, const fmsg *m)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->m[i] == m) {
			return true;
		}
	}
	return false;
}

static void test_set_replace_clear(void **state)
{
	retain_store *rs = retain_alloc(&ops);
	fmsg          a, b, c;
	result        r;
	assert_non_null(rs);
	assert_int_equal(set(rs, "x/y", msg_new(&a, "x/y")), 0);
	assert_int_equal(retain_count(rs), 1);
	assert_int_equal(atomic_load(&a.refs), 1); // the store's

	assert_int_equal(match(rs, "x/y", &r), 1);
	assert_ptr_equal(r.m[0], &a);
	assert_int_equal(atomic_load(&a.refs), 2); // the store's and ours
	release_all(&r);

	// Replace: the old message is released, the count stays.
	assert_int_equal(set(rs, "x/y", msg_new(&b, "x/y")), 0);
	assert_int_equal(atomic_load(&a.refs), 0);
	assert_int_equal(retain_count(rs), 1);
	assert_int_equal(match(rs, "x/y", &r), 1);
	assert_ptr_equal(r.m[0], &b);
	release_all(&r);

	// Replacing with the same message (a new reference) keeps one.
	m_hold(&b);
	assert_int_equal(set(rs, "x/y", &b), 0);
	assert_int_equal(atomic_load(&b.refs), 1);

	// A parent and a child topic are independent.
	assert_int_equal(set(rs, "x", msg_new(&c, "x")), 0);
	assert_int_equal(retain_count(rs), 2);
	assert_int_equal(match(rs, "x", &r), 1);
	assert_ptr_equal(r.m[0], &c);
	release_all(&r);

	// Clear.
	assert_int_equal(retain_set(rs, "x/y", 3, NULL), 0);
	assert_int_equal(atomic_load(&b.refs), 0);
	assert_int_equal(retain_count(rs), 1);
	assert_int_equal(match(rs, "x/y", &r), 0);
	assert_int_equal(match(rs, "x", &r), 1);
	release_all(&r);
	// Clearing what is not there is fine.
	assert_int_equal(retain_set(rs, "x/y", 3, NULL), 0);
	assert_int_equal(retain_set(rs, "nothing/here", 12, NULL), 0);
	assert_int_equal(retain_set(rs, "x/y/z", 5, NULL), 0);
	assert_int_equal(retain_count(rs), 1);

	// Invalid topics: NMQ_EINVAL, and the reference is released.
	fmsg d;
	assert_int_equal(set(rs, "a/+", msg_new(&d, "a/+")), NMQ_EINVAL);
	assert_int_equal(atomic_load(&d.refs), 0);
	assert_int_equal(set(rs, "#", msg_new(&d, "#")), NMQ_EINVAL);
	assert_int_equal(atomic_load(&d.refs), 0);
	assert_int_equal(retain_set(rs, "", 0, msg_new(&d, "")), NMQ_EINVAL);
	assert_int_equal(atomic_load(&d.refs), 0);
	assert_int_equal(retain_set(rs, "a\0b", 3, msg_new(&d, "")), NMQ_EINVAL);
	assert_int_equal(atomic_load(&d.refs), 0);
	assert_int_equal(retain_count(rs), 1);

	// An invalid filter matches nothing.
	assert_int_equal(match(rs, "x/#/y", &r), 0);
	assert_int_equal(match(rs, "", &r), 0);

	// Free releases what is left.
	retain_free(rs);
	assert_int_equal(atomic_load(&c.refs), 0);
	assert_null(retain_alloc(NULL));
}

static const char *topics[] = { "a", "a/", "/a", "/", "//", "a/b", "a/b/", "a/b/c", "a//c", "a/x/c",
	"a/b/c/d", "b", "b/b", "x/b/y", "$SYS", "$SYS/a", "$SYS/a/b", "$SYS/", "ab", "a/bc", "/a/b",
	"a/b/c/d/e", "$x/b", "a/$x", "a/$x/y", "$share/g/a" };

static const char *filters[] = { "#", "+", "+/+", "+/#", "/#", "/+", "+/", "a", "a/", "a/#", "a/+",
	"a/b", "a/b/c", "a/+/c", "a/+/+", "a/b/#", "a/+/#", "a//c", "a//#", "+/b/#", "+/+/+",
	"+/+/#", "//", "/", "$SYS/#", "$SYS/+", "$SYS", "$SYS/+/b", "b/#", "b", "a/b/c/d", "+/b",
	"nomatch", "a/b/c/d/e/f", "+/+/+/+/+", "$share/#", "$x/+", "a/+/y" };

#define NT (sizeof(topics) / sizeof(topics[0]))
#define NF (sizeof(filters) / sizeof(filters[0]))

// Every filter against a store holding every topic: the result is exactly
// the topics topic_filter_match() accepts.
static void test_match_cross(void **state)
{
	retain_store *rs = retain_alloc(&ops);
	fmsg          m[NT];
	result        r;
	size_t        pairs = 0;
	for (size_t i = 0; i < NT; i++) {
		assert_int_equal(set(rs, topics[i], msg_new(&m[i], topics[i])), 0);
	}
	assert_int_equal(retain_count(rs), NT);
	for (size_t f = 0; f < NF; f++) {
		match(rs, filters[f], &r);
		size_t expect = 0;
		for (size_t i = 0; i < NT; i++) {
			bool e = topic_filter_match(
			    filters[f], strlen(filters[f]), topics[i], strlen(topics[i]));
			expect += e;
			if (has(&r, &m[i]) != e) {
				fail_msg(
				    "filter %s topic %s: expected %d", filters[f], topics[i], e);
			}
			pairs++;
		}
		assert_int_equal(r.n, expect);
		release_all(&r);
	}
	assert_true(pairs > 900);

	// A few written out by hand.
	assert_int_equal(match(rs, "#", &r), 20); // every topic but the 6 starting with '$'
	release_all(&r);
	assert_int_equal(match(rs, "a/#", &r), 12);
	release_all(&r);
	assert_int_equal(match(rs, "$SYS/#", &r), 4);
	release_all(&r);
	assert_int_equal(match(rs, "+", &r), 3); // a, b, ab
	release_all(&r);
	assert_int_equal(match(rs, "+/+", &r), 7); // a/ /a / a/b b/b a/bc a/$x
	release_all(&r);

	for (size_t i = 0; i < NT; i++) {
		assert_int_equal(atomic_load(&m[i].refs), 1);
		assert_int_equal(retain_set(rs, topics[i], strlen(topics[i]), NULL), 0);
		assert_int_equal(atomic_load(&m[i].refs), 0);
	}
	assert_int_equal(retain_count(rs), 0);
	assert_int_equal(match(rs, "#", &r), 0);
	retain_free(rs);
}

static uint64_t rng = 0x853c49e6748fea9bull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void rand_name(char *buf, bool filter)
{
	static const char *lv[]  = { "a", "b", "", "$s" };
	int                depth = 1 + (int)(rnd() % 4);
	buf[0]                   = '\0';
	for (int i = 0; i < depth; i++) {
		if (i > 0) {
			strcat(buf, "/");
		}
		uint32_t x = rnd() % 10;
		if (filter && x == 0 && i == depth - 1) {
			strcat(buf, "#");
		} else if (filter && x <= 2) {
			strcat(buf, "+");
		} else {
			strcat(buf, lv[rnd() % 4]);
		}
	}
	if (buf[0] == '\0') {
		strcpy(buf, "b");
	}
}

// Random sets and clears against a model; random filters checked by brute
// force.
#define RT 80

static void test_random(void **state)
{
	retain_store *rs = retain_alloc(&ops);
	char          names[RT][64];
	fmsg          m[RT];
	fmsg         *cur[RT];
	result        r;
	size_t        live = 0;
	for (int i = 0; i < RT; i++) {
		for (;;) {
			rand_name(names[i], false);
			bool dup = false;
			for (int j = 0; j < i; j++) {
				dup = dup || strcmp(names[i], names[j]) == 0;
			}
			if (!dup) {
				break;
			}
		}
		cur[i] = NULL;
		atomic_init(&m[i].refs, 0);
	}
	for (int round = 0; round < 4000; round++) {
		int i = (int)(rnd() % RT);
		if (rnd() % 3 != 0) {
			if (cur[i] == NULL) {
				live++;
			}
			assert_int_equal(atomic_load(&m[i].refs), cur[i] != NULL ? 1 : 0);
			m_hold(&m[i]);
			assert_int_equal(set(rs, names[i], &m[i]), 0);
			cur[i] = &m[i];
		} else {
			assert_int_equal(set(rs, names[i], NULL), 0);
			live -= cur[i] != NULL;
			cur[i] = NULL;
		}
		assert_int_equal(atomic_load(&m[i].refs), cur[i] != NULL ? 1 : 0);
		assert_int_equal(retain_count(rs), live);
		if (round % 8 == 0) {
			char f[64];
			rand_name(f, true);
			match(rs, f, &r);
			size_t expect = 0;
			for (int j = 0; j < RT; j++) {
				bool e = cur[j] != NULL
				    && topic_filter_match(f, strlen(f), names[j], strlen(names[j]));
				expect += e;
				assert_int_equal(has(&r, &m[j]), e);
			}
			assert_int_equal(r.n, expect);
			release_all(&r);
		}
	}
	retain_free(rs);
	for (int i = 0; i < RT; i++) {
		assert_int_equal(atomic_load(&m[i].refs), 0);
	}
}

// A match callback that drops the reference at once.
static void release_cb(void *arg, void *msg)
{
	m_release(msg);
}

// 20k retained topics: exact filters, narrow wildcards, and clearing all.
#define BIG 20000

static void test_big(void **state)
{
	retain_store *rs = retain_alloc(&ops);
	fmsg         *m  = calloc(BIG, sizeof(*m));
	result        r;
	char          t[64];
	for (int i = 0; i < BIG; i++) {
		snprintf(t, sizeof(t), "dev/%d/%s", i / 2, i % 2 ? "status" : "cfg");
		assert_int_equal(set(rs, t, msg_new(&m[i], t)), 0);
	}
	assert_int_equal(retain_count(rs), BIG);
	assert_int_equal(match(rs, "dev/777/status", &r), 1);
	assert_ptr_equal(r.m[0], &m[1555]);
	release_all(&r);
	assert_int_equal(match(rs, "dev/777/+", &r), 2);
	release_all(&r);
	assert_int_equal(match(rs, "dev/777/#", &r), 2);
	release_all(&r);
	assert_int_equal(match(rs, "dev/77777/#", &r), 0);
	size_t n = 0;
	assert_int_equal(retain_match(rs, "dev/+/status", 12, release_cb, NULL, &n), NMQ_OK);
	assert_int_equal(n, BIG / 2);
	for (int i = 0; i < BIG; i += 2) {
		snprintf(t, sizeof(t), "dev/%d/%s", i / 2, i % 2 ? "status" : "cfg");
		assert_int_equal(retain_set(rs, t, strlen(t), NULL), 0);
	}
	assert_int_equal(retain_count(rs), BIG / 2);
	assert_int_equal(retain_match(rs, "#", 1, release_cb, NULL, &n), NMQ_OK);
	assert_int_equal(n, BIG / 2);
	retain_free(rs);
	for (int i = 0; i < BIG; i++) {
		assert_int_equal(atomic_load(&m[i].refs), 0);
	}
	free(m);
}

// A 20000-level topic: set, match with '#' and '+', clear, free; nothing
// recurses on the C stack.
static void test_deep(void **state)
{
	size_t        levels = 20000;
	size_t        len    = 2 * levels - 1;
	char         *topic  = malloc(len + 1);
	char         *filter = malloc(len + 1);
	retain_store *rs     = retain_alloc(&ops);
	fmsg          a, b;
	result        r;
	for (size_t i = 0; i < levels; i++) {
		topic[2 * i]  = 'x';
		filter[2 * i] = i % 3 == 0 ? '+' : 'x';
		if (i + 1 < levels) {
			topic[2 * i + 1]  = '/';
			filter[2 * i + 1] = '/';
		}
	}
	assert_int_equal(retain_set(rs, topic, len, msg_new(&a, "deep")), 0);
	assert_int_equal(set(rs, "x", msg_new(&b, "x")), 0);
	assert_int_equal(match(rs, "#", &r), 2);
	release_all(&r);
	assert_int_equal(match(rs, "x/#", &r), 2);
	release_all(&r);
	r.n = 0;
	assert_int_equal(retain_match(rs, filter, len, collect_cb, &r, NULL), NMQ_OK);
	assert_int_equal(r.n, 1);
	release_all(&r);
	filter[len - 1] = '#';
	r.n             = 0;
	assert_int_equal(retain_match(rs, filter, len, collect_cb, &r, NULL), NMQ_OK);
	assert_int_equal(r.n, 1);
	release_all(&r);
	assert_int_equal(retain_set(rs, topic, len, NULL), 0);
	assert_int_equal(atomic_load(&a.refs), 0);
	assert_int_equal(retain_count(rs), 1);
	m_hold(&a);
	assert_int_equal(retain_set(rs, topic, len, &a), 0);
	retain_free(rs); // frees 20000 nodes and releases both messages
	assert_int_equal(atomic_load(&a.refs), 0);
	assert_int_equal(atomic_load(&b.refs), 0);
	free(topic);
	free(filter);
}

// Setters and matchers in parallel; references balance at the end.
#define CT_TOPICS 16

typedef struct ct_ctx {
	retain_store *rs;
	fmsg          pool[4][CT_TOPICS][4];
	_Atomic bool  stop;
	_Atomic long  sets;
	_Atomic long  matches;
} ct_ctx;

typedef struct ct_arg {
	ct_ctx *c;
	int     id;
} ct_arg;

static const char *ct_names[CT_TOPICS] = { "s/0", "s/1", "s/2", "s/0/a", "s/1/a", "t", "t/x",
	"t/x/y", "$SYS/a", "$SYS/b", "u//v", "u/", "/u", "v/w/x/y", "v/w", "v" };
static const char *ct_filters[]
    = { "#", "s/+", "s/#", "+/x/#", "$SYS/#", "t/x/y", "+/+", "u/#", "v/+/x/#" };

static void ct_count_cb(void *arg, void *msg)
{
	CHECK(atomic_load(&((fmsg *)msg)->refs) > 0);
	m_release(msg);
}

static void *ct_setter(void *p)
{
	ct_arg  *a = p;
	ct_ctx  *c = a->c;
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(a->id + 3);
	while (!atomic_load(&c->stop)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		// Each setter owns the topics i with i % 2 == id, so that a
		// message's references are only ever taken by its setter.
		int   i = (int)((x % (CT_TOPICS / 2)) * 2 + (uint64_t)a->id);
		int   k = (int)((x >> 20) % 5);
		fmsg *m = k < 4 ? &c->pool[a->id][i][k] : NULL;
		if (m != NULL) {
			m_hold(m);
		}
		CHECK(retain_set(c->rs, ct_names[i], strlen(ct_names[i]), m) == 0);
		atomic_fetch_add(&c->sets, 1);
	}
	return NULL;
}

static void *ct_matcher(void *p)
{
	ct_arg  *a  = p;
	ct_ctx  *c  = a->c;
	size_t   nf = sizeof(ct_filters) / sizeof(ct_filters[0]);
	uint64_t x  = 0x2545f4914f6cdd1dull * (uint64_t)(a->id + 5);
	while (!atomic_load(&c->stop)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		const char *f = ct_filters[x % nf];
		CHECK(retain_match(c->rs, f, strlen(f), ct_count_cb, NULL, NULL) == NMQ_OK);
		atomic_fetch_add(&c->matches, 1);
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	ct_ctx   *c = calloc(1, sizeof(*c));
	pthread_t th[4];
	ct_arg    args[4];
	c->rs = retain_alloc(&ops);
	atomic_init(&c->stop, false);
	for (int i = 0; i < 4; i++) {
		args[i].c  = c;
		args[i].id = i % 2;
		assert_int_equal(
		    pthread_create(&th[i], NULL, i < 2 ? ct_setter : ct_matcher, &args[i]), 0);
	}
	struct timespec ts = { 0, 400 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	atomic_store(&c->stop, true);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
	}
	print_message(
	    "retain: %ld sets, %ld matches\n", atomic_load(&c->sets), atomic_load(&c->matches));
	assert_int_equal(atomic_load(&n_errors), 0);
	assert_true(atomic_load(&c->sets) > 100);
	assert_true(atomic_load(&c->matches) > 100);
	size_t held = 0;
	for (int s = 0; s < 2; s++) {
		for (int i = 0; i < CT_TOPICS; i++) {
			for (int k = 0; k < 4; k++) {
				int r = atomic_load(&c->pool[s][i][k].refs);
				assert_true(r == 0 || r == 1);
				held += (size_t)r;
			}
		}
	}
	assert_int_equal(held, retain_count(c->rs));
	retain_free(c->rs);
	for (int s = 0; s < 2; s++) {
		for (int i = 0; i < CT_TOPICS; i++) {
			for (int k = 0; k < 4; k++) {
				assert_int_equal(atomic_load(&c->pool[s][i][k].refs), 0);
			}
		}
	}
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_set_replace_clear),
		cmocka_unit_test(test_match_cross),
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_big),
		cmocka_unit_test(test_deep),
		cmocka_unit_test(test_concurrent),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (atomic_load(&n_errors) != 0) {
		fprintf(stderr, "%ld checks failed off the main thread\n", atomic_load(&n_errors));
		rc = 1;
	}
	return rc;
}
