// Unit tests of the subscription tree (src/topic/topic_tree.c).
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

#include "nng/codec/mqtt_codec.h"
#include "src/topic/topic_tree.h"

// ---------------------------------------------------------------------------
// A fake subscriber with a reference count.

typedef struct fsub {
	_Atomic int  refs;
	_Atomic bool eligible;
	int          id;
} fsub;

static _Atomic long n_hold;
static _Atomic long n_release;
static _Atomic long n_errors; // checks failed on other threads (cmocka is not thread safe)

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			atomic_fetch_add(&n_errors, 1);                                            \
		}                                                                                  \
	} while (0)

static void fs_hold(void *p)
{
	fsub *s = p;
	atomic_fetch_add(&s->refs, 1);
	atomic_fetch_add(&n_hold, 1);
}

static void fs_release(void *p)
{
	fsub *s = p;
	int   r = atomic_fetch_sub(&s->refs, 1);
	CHECK(r > 0);
	atomic_fetch_add(&n_release, 1);
}

static bool fs_eligible(void *p)
{
	fsub *s = p;
	return atomic_load(&s->eligible);
}

static const topic_tree_ops ops = { fs_hold, fs_release, fs_eligible };

static void fs_init(fsub *s, int n)
{
	for (int i = 0; i < n; i++) {
		atomic_init(&s[i].refs, 0);
		atomic_init(&s[i].eligible, true);
		s[i].id = i;
	}
}

static int ins(topic_tree *t, const char *f, fsub *s, uint32_t sub_id, bool *existed)
{
	topic_sub_opts o = { .qos = 1, .sub_id = sub_id };
	return topic_tree_insert(t, f, strlen(f), s, &o, existed);
}

static int rem(topic_tree *t, const char *f, fsub *s)
{
	return topic_tree_remove(t, f, strlen(f), s);
}

static size_t match(topic_tree *t, const char *topic, topic_match_vec *mv)
{
	topic_match_vec_clear(mv, &ops);
	assert_int_equal(topic_tree_match(t, topic, strlen(topic), mv), 0);
	return mv->n;
}

static bool fm(const char *f, const char *topic)
{
	return topic_filter_match(f, strlen(f), topic, strlen(topic));
}

// ---------------------------------------------------------------------------
// A reference matcher written independently of the module: split both
// strings into level arrays, then compare level by level.

#define REF_MAX 64

static int split(const char *s, char lv[REF_MAX][32])
{
	int         n = 0;
	const char *p = s;
	for (;;) {
		const char *e = strchr(p, '/');
		size_t      l = e != NULL ? (size_t)(e - p) : strlen(p);
		assert_true(l < 32 && n < REF_MAX);
		memcpy(lv[n], p, l);
		lv[n][l] = '\0';
		n++;
		if (e == NULL) {
			return n;
		}
		p = e + 1;
	}
}

static bool ref_match(const char *f, const char *topic)
{
	char fl[REF_MAX][32];
	char tl[REF_MAX][32];
	if (topic[0] == '\0') {
		return false;
	}
	int nf = split(f, fl);
	int nt = split(topic, tl);
	if (topic[0] == '$' && (strcmp(fl[0], "+") == 0 || strcmp(fl[0], "#") == 0)) {
		return false;
	}
	for (int i = 0; i < nf; i++) {
		if (strcmp(fl[i], "#") == 0) {
			return true;
		}
		if (i >= nt) {
			return false;
		}
		if (strcmp(fl[i], "+") != 0 && strcmp(fl[i], tl[i]) != 0) {
			return false;
		}
	}
	return nf == nt;
}

// ---------------------------------------------------------------------------

// The codec's validators and "$share/" splitter, on C strings.
static bool fvalid(const char *f, size_t len)
{
	return mqtt_topic_filter_valid((const uint8_t *)f, len);
}

static bool nvalid(const char *t, size_t len)
{
	return mqtt_topic_name_valid((const uint8_t *)t, len);
}

// Returns true if f is a well-formed shared filter; sets the group (NULL
// when not shared) and the inner filter (the whole when not shared),
// leaving them alone when malformed.
static bool share_split(const char *f, const char **g, size_t *gl, const char **r, size_t *rl)
{
	mqtt_share      sh;
	mqtt_share_kind k = mqtt_share_split((const uint8_t *)f, strlen(f), &sh);
	if (k == MQTT_SHARE_MALFORMED) {
		return false;
	}
	*g  = (const char *)sh.group;
	*gl = sh.glen;
	*r  = (const char *)sh.filter;
	*rl = sh.flen;
	return k == MQTT_SHARE_OK;
}

static void test_filter_valid(void **state)
{
	static const char *good[] = { "a", "#", "+", "/", "//", "a/", "/a", "a//b", "+/+", "a/+/b",
		"a/#", "+/#", "$SYS/#", "$share", "a b/c", "sport/tennis/player1/#", "+/tennis/#",
		"$", "a/$/b" };
	static const char *bad[]  = { "", "a#", "#a", "a/#/b", "a+", "+a", "a/b+/c", "##", "++",
		 "#/", "#/a", "a/++", "a/#/#" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_true(fvalid(good[i], strlen(good[i])));
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(fvalid(bad[i], strlen(bad[i])));
	}
	assert_false(fvalid("a\0b", 3));
	assert_false(fvalid(NULL, 0));

	assert_true(nvalid("a/b", 3));
	assert_true(nvalid("/", 1));
	assert_true(nvalid("$SYS/x", 6));
	assert_false(nvalid("", 0));
	assert_false(nvalid("a/+", 3));
	assert_false(nvalid("a/#", 3));
	assert_false(nvalid("a\0", 2));
}

static void test_share_split(void **state)
{
	const char *g;
	const char *r;
	size_t      gl;
	size_t      rl;
	const char *f = "$share/grp/a/b/#";
	assert_true(share_split(f, &g, &gl, &r, &rl));
	assert_int_equal(gl, 3);
	assert_memory_equal(g, "grp", 3);
	assert_int_equal(rl, 5);
	assert_memory_equal(r, "a/b/#", 5);

	f = "$share/g/#";
	assert_true(share_split(f, &g, &gl, &r, &rl));
	assert_int_equal(rl, 1);
	assert_int_equal(r[0], '#');

	f = "$share/g//";
	assert_true(share_split(f, &g, &gl, &r, &rl));
	assert_int_equal(rl, 1);

	// Malformed: the prefix is there, the rest is not.
	static const char *bad[] = { "$share/", "$share/g", "$share/g/", "$share//a", "$share/g+/a",
		"$share/#/a", "$share/a#b/c" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		g = NULL;
		assert_int_equal(mqtt_share_split((const uint8_t *)bad[i], strlen(bad[i]), NULL),
		    MQTT_SHARE_MALFORMED);
		assert_false(share_split(bad[i], &g, &gl, &r, &rl));
		assert_null(g);
		assert_false(fvalid(bad[i], strlen(bad[i])));
	}
	// Plain filters: no group, the whole filter.
	static const char *no[]
	    = { "$share", "share/g/a", "$SHARE/g/a", "a/$share/g/b", "$sharex/g/a" };
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		mqtt_share sh;
		assert_int_equal(
		    mqtt_share_split((const uint8_t *)no[i], strlen(no[i]), &sh), MQTT_SHARE_NONE);
		assert_null(sh.group);
		assert_ptr_equal(sh.filter, no[i]);
		assert_int_equal(sh.flen, strlen(no[i]));
	}
	// The inner filter must itself be valid once the prefix is stripped.
	assert_false(fvalid("$share/g/a/#/b", 14));
	assert_false(fvalid("$share/g/$share/x", 17));
	assert_true(fvalid("$share/g/$share/h/x", 19));
}

// Expected results written out by hand: the anchor for the semantics.
static const struct {
	const char *filter;
	const char *topic;
	bool        match;
} table[] = {
	{ "a", "a", true },
	{ "a", "b", false },
	{ "a", "a/b", false },
	{ "a/b", "a", false },
	{ "a/b", "a/b", true },
	{ "a/b", "a/b/", false },
	{ "a/b/", "a/b/", true },
	{ "a/b/", "a/b", false },
	{ "/a", "/a", true },
	{ "/a", "a", false },
	{ "a//b", "a//b", true },
	{ "a//b", "a/b", false },
	{ "a/+/b", "a//b", true },
	{ "a/+/b", "a/x/b", true },
	{ "a/+/b", "a/b", false },
	{ "a/+/b", "a/x/y/b", false },
	{ "+", "a", true },
	{ "+", "/", false },
	{ "+", "a/b", false },
	{ "+/+", "/", true },
	{ "+/+", "a/b", true },
	{ "+/+", "a", false },
	{ "/+", "/a", true },
	{ "/+", "/", true },
	{ "/+", "a", false },
	{ "+/", "a/", true },
	{ "+/", "a", false },
	{ "#", "a", true },
	{ "#", "a/b/c", true },
	{ "#", "/", true },
	{ "#", "/a", true },
	{ "a/#", "a", true },
	{ "a/#", "a/", true },
	{ "a/#", "a/b", true },
	{ "a/#", "a/b/c", true },
	{ "a/#", "b", false },
	{ "a/#", "ab", false },
	{ "a/#", "ab/c", false },
	{ "a/b/#", "a", false },
	{ "a/b/#", "a/b", true },
	{ "a/b/#", "a/c", false },
	{ "+/#", "a", true },
	{ "+/#", "a/b/c", true },
	{ "+/#", "/", true },
	{ "+/+/#", "a", false },
	{ "+/+/#", "a/b", true },
	{ "/#", "/", true },
	{ "/#", "/a/b", true },
	{ "/#", "a", false },
	{ "a/+/#", "a/b", true },
	{ "a/+/#", "a", false },
	{ "sport/tennis/player1/#", "sport/tennis/player1", true },
	{ "sport/tennis/player1/#", "sport/tennis/player1/ranking", true },
	{ "sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true },
	{ "sport/#", "sport", true },
	{ "sport/tennis/+", "sport/tennis/player1", true },
	{ "sport/tennis/+", "sport/tennis/player1/ranking", false },
	{ "sport/+", "sport", false },
	{ "sport/+", "sport/", true },
	{ "+/tennis/#", "sport/tennis", true },
	{ "+/tennis/#", "sport/tennis/x/y", true },
	{ "#", "$SYS", false },
	{ "#", "$SYS/x", false },
	{ "#", "$", false },
	{ "+", "$SYS", false },
	{ "+/x", "$SYS/x", false },
	{ "+/#", "$SYS/x", false },
	{ "$SYS/#", "$SYS/x", true },
	{ "$SYS/#", "$SYS", true },
	{ "$SYS/+", "$SYS/x", true },
	{ "$SYS/+/y", "$SYS/x/y", true },
	{ "$SYS", "$SYS", true },
	{ "a/$x", "a/$x", true },
	{ "a/+", "a/$x", true },
	{ "a/#", "a/$x/y", true },
	{ "$share", "$share", true },
	{ "A", "a", false },
	{ "a b", "a b", true },
	{ "a", "", false },
	{ "#", "", false },
};

// [MQTT-4.7.1-2] [MQTT-4.7.1-3] [MQTT5-4.7.1-1] [MQTT5-4.7.1-2]
static void test_match_table(void **state)
{
	topic_tree     *t = topic_tree_alloc(&ops);
	topic_match_vec mv;
	size_t          n = sizeof(table) / sizeof(table[0]);
	fsub           *s = calloc(n, sizeof(*s));
	assert_non_null(t);
	fs_init(s, (int)n);
	topic_match_vec_init(&mv);

	for (size_t i = 0; i < n; i++) {
		bool got = fm(table[i].filter, table[i].topic);
		if (got != table[i].match) {
			fail_msg("filter_match(%s, %s) = %d", table[i].filter, table[i].topic, got);
		}
		if (table[i].topic[0] != '\0') {
			assert_int_equal(
			    ref_match(table[i].filter, table[i].topic), table[i].match);
		}
		// Each filter alone in a fresh tree.
		assert_int_equal(ins(t, table[i].filter, &s[i], 0, NULL), 0);
		size_t m = match(t, table[i].topic, &mv);
		if (m != (table[i].match ? 1u : 0u)) {
			fail_msg("tree(%s, %s) = %zu", table[i].filter, table[i].topic, m);
		}
		topic_match_vec_clear(&mv, &ops);
		assert_int_equal(rem(t, table[i].filter, &s[i]), 0);
		assert_int_equal(topic_tree_sub_count(t), 0);
	}
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
	free(s);
}

// Every filter of a pool against every topic of a pool (thousands of
// pairs): the tree, topic_filter_match and the reference agree.
static const char *fpool[] = { "#", "+", "+/+", "+/#", "/#", "/+", "+/", "a", "a/", "a/#", "a/+",
	"a/b", "a/b/c", "a/+/c", "a/+/+", "a/b/#", "a/+/#", "a//c", "a//#", "+/b/#", "+/+/+",
	"+/+/#", "//", "/", "$SYS/#", "$SYS/+", "$SYS", "$SYS/+/b", "b/#", "b", "a/b/c/d", "+/b",
	"#/", "$share/g/a/#", "$share/g/+", "$share/h/a/b", "$share/g/#", "$share/g/$SYS/#" };
static const char *tpool[] = { "a", "a/", "/a", "/", "//", "a/b", "a/b/", "a/b/c", "a//c", "a/x/c",
	"a/b/c/d", "b", "b/b", "x/b/y", "$SYS", "$SYS/a", "$SYS/a/b", "$SYS/", "ab", "a/bc", "/a/b",
	"a/b/c/d/e", "$x/b" };

static void test_match_cross(void **state)
{
	size_t          nf = sizeof(fpool) / sizeof(fpool[0]);
	size_t          nt = sizeof(tpool) / sizeof(tpool[0]);
	topic_tree     *t  = topic_tree_alloc(&ops);
	fsub           *s  = calloc(nf, sizeof(*s));
	topic_match_vec mv;
	size_t          pairs = 0;
	fs_init(s, (int)nf);
	topic_match_vec_init(&mv);

	for (size_t i = 0; i < nf; i++) {
		int rc = ins(t, fpool[i], &s[i], (uint32_t)i + 1, NULL);
		if (strcmp(fpool[i], "#/") == 0) {
			assert_int_equal(rc, NMQ_EINVAL);
		} else {
			assert_int_equal(rc, 0);
		}
	}
	assert_int_equal(topic_tree_sub_count(t), nf - 1);
	assert_int_equal(topic_tree_filter_count(t), nf - 1);
	for (size_t j = 0; j < nt; j++) {
		match(t, tpool[j], &mv);
		for (size_t i = 0; i < nf; i++) {
			const char *real = fpool[i];
			size_t      rl;
			const char *g;
			size_t      gl;
			bool        shared = share_split(fpool[i], &g, &gl, &real, &rl);
			bool        valid  = fvalid(fpool[i], strlen(fpool[i]));
			bool        expect = valid && ref_match(real, tpool[j]);
			assert_int_equal(valid && fm(real, tpool[j]), expect);
			size_t found = 0;
			for (size_t k = 0; k < mv.n; k++) {
				if (mv.v[k].sub == &s[i]) {
					found++;
					assert_int_equal(mv.v[k].opts.sub_id, i + 1);
					assert_int_equal(mv.v[k].shared, shared);
				}
			}
			if (found != (expect ? 1u : 0u)) {
				fail_msg("tree: filter %s topic %s found %zu", fpool[i], tpool[j],
				    found);
			}
			pairs++;
		}
	}
	assert_true(pairs > 800);
	topic_match_vec_clear(&mv, &ops);
	for (size_t i = 0; i < nf; i++) {
		assert_int_equal(atomic_load(&s[i].refs), 0);
		if (strcmp(fpool[i], "#/") != 0) {
			assert_int_equal(rem(t, fpool[i], &s[i]), 0);
		}
	}
	assert_int_equal(topic_tree_sub_count(t), 0);
	assert_int_equal(topic_tree_filter_count(t), 0);
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
	free(s);
}

// Random filters and topics over a tiny alphabet, many inserts and removes,
// checked against a brute-force model.
static uint64_t rng = 88172645463325252ull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void rand_topic(char *buf, bool filter)
{
	static const char *lv[]  = { "a", "b", "", "$s" };
	int                depth = 1 + (int)(rnd() % 4);
	buf[0]                   = '\0';
	for (int i = 0; i < depth; i++) {
		if (i > 0) {
			strcat(buf, "/");
		}
		uint32_t r = rnd() % 10;
		if (filter && r == 0 && i == depth - 1) {
			strcat(buf, "#");
		} else if (filter && r <= 2) {
			strcat(buf, "+");
		} else {
			const char *l = lv[rnd() % 4];
			if (i > 0 && l[0] == '$') {
				l = "c";
			}
			strcat(buf, l);
		}
	}
	if (buf[0] == '\0') {
		strcpy(buf, "b"); // a filter or topic has at least one byte
	}
}

#define RF 60
#define RS 8

static void test_match_random(void **state)
{
	char            filters[RF][64];
	bool            in[RF][RS];
	fsub            s[RS];
	topic_tree     *t = topic_tree_alloc(&ops);
	topic_match_vec mv;
	fs_init(s, RS);
	topic_match_vec_init(&mv);
	memset(in, 0, sizeof(in));
	for (int i = 0; i < RF; i++) {
		// Distinct filters only, so that the model is a plain set.
		for (;;) {
			rand_topic(filters[i], true);
			bool dup = false;
			for (int j = 0; j < i; j++) {
				dup = dup || strcmp(filters[j], filters[i]) == 0;
			}
			if (!dup) {
				break;
			}
		}
	}
	size_t live = 0;
	for (int round = 0; round < 3000; round++) {
		int  f = (int)(rnd() % RF);
		int  k = (int)(rnd() % RS);
		bool existed;
		if (rnd() % 3 != 0) {
			if (ins(t, filters[f], &s[k], (uint32_t)f, &existed) != 0) {
				fail_msg("insert %s", filters[f]);
			}
			assert_int_equal(existed, in[f][k]);
			live += !in[f][k];
			in[f][k] = true;
		} else {
			assert_int_equal(rem(t, filters[f], &s[k]), in[f][k] ? NMQ_OK : NMQ_ENOENT);
			live -= in[f][k];
			in[f][k] = false;
		}
		assert_int_equal(topic_tree_sub_count(t), live);
		if (round % 10 == 0) {
			char topic[64];
			rand_topic(topic, false);
			match(t, topic, &mv);
			size_t expect = 0;
			for (int i = 0; i < RF; i++) {
				for (int j = 0; j < RS; j++) {
					expect += in[i][j] && ref_match(filters[i], topic);
				}
			}
			assert_int_equal(mv.n, expect);
			for (size_t i = 0; i < mv.n; i++) {
				int fi = (int)mv.v[i].opts.sub_id;
				assert_true(in[fi][((fsub *)mv.v[i].sub)->id]);
				assert_true(ref_match(filters[fi], topic));
			}
		}
	}
	topic_match_vec_clear(&mv, &ops);
	for (int i = 0; i < RF; i++) {
		for (int j = 0; j < RS; j++) {
			if (in[i][j]) {
				assert_int_equal(rem(t, filters[i], &s[j]), 0);
			}
		}
	}
	assert_int_equal(topic_tree_sub_count(t), 0);
	assert_int_equal(topic_tree_filter_count(t), 0);
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
}

static void test_overlap(void **state)
{
	topic_tree     *t = topic_tree_alloc(&ops);
	topic_match_vec mv;
	fsub            s[2];
	fs_init(s, 2);
	topic_match_vec_init(&mv);
	assert_int_equal(ins(t, "a/b", &s[0], 1, NULL), 0);
	assert_int_equal(ins(t, "a/+", &s[0], 2, NULL), 0);
	assert_int_equal(ins(t, "a/#", &s[0], 3, NULL), 0);
	assert_int_equal(ins(t, "#", &s[0], 4, NULL), 0);
	assert_int_equal(ins(t, "+/b", &s[0], 5, NULL), 0);
	assert_int_equal(ins(t, "a/b", &s[1], 6, NULL), 0);
	assert_int_equal(topic_tree_filter_count(t), 5);
	assert_int_equal(topic_tree_sub_count(t), 6);

	assert_int_equal(match(t, "a/b", &mv), 6);
	uint32_t seen = 0;
	for (size_t i = 0; i < mv.n; i++) {
		seen |= 1u << mv.v[i].opts.sub_id;
		assert_int_equal(mv.v[i].opts.qos, 1);
		assert_false(mv.v[i].shared);
		assert_ptr_equal(mv.v[i].sub, mv.v[i].opts.sub_id == 6 ? &s[1] : &s[0]);
	}
	assert_int_equal(seen, 0x7e);
	assert_int_equal(atomic_load(&s[0].refs), 5);
	assert_int_equal(atomic_load(&s[1].refs), 1);
	topic_match_vec_clear(&mv, &ops);
	assert_int_equal(atomic_load(&s[0].refs), 0);
	assert_int_equal(mv.n, 0);

	assert_int_equal(match(t, "a", &mv), 2); // a/# and #
	assert_int_equal(match(t, "x/b", &mv), 2); // # and +/b
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
}

// [MQTT-3.8.4-3] [MQTT5-3.8.4-3]
static void test_replace(void **state)
{
	topic_tree     *t = topic_tree_alloc(&ops);
	topic_match_vec mv;
	fsub            s[1];
	bool            existed = true;
	fs_init(s, 1);
	topic_match_vec_init(&mv);

	assert_int_equal(ins(t, "x/y", &s[0], 7, &existed), 0);
	assert_false(existed);
	topic_sub_opts o = { .qos    = 2,
		.no_local            = true,
		.retain_as_published = true,
		.retain_handling     = 2,
		.sub_id              = 9 };
	assert_int_equal(topic_tree_insert(t, "x/y", 3, &s[0], &o, &existed), 0);
	assert_true(existed);
	assert_int_equal(topic_tree_sub_count(t), 1);
	assert_int_equal(topic_tree_filter_count(t), 1);
	assert_int_equal(match(t, "x/y", &mv), 1);
	assert_int_equal(mv.v[0].opts.qos, 2);
	assert_true(mv.v[0].opts.no_local);
	assert_true(mv.v[0].opts.retain_as_published);
	assert_int_equal(mv.v[0].opts.retain_handling, 2);
	assert_int_equal(mv.v[0].opts.sub_id, 9);

	// The same filter in a share group is a different key.
	assert_int_equal(ins(t, "$share/g/x/y", &s[0], 1, &existed), 0);
	assert_false(existed);
	assert_int_equal(ins(t, "$share/g/x/y", &s[0], 2, &existed), 0);
	assert_true(existed);
	assert_int_equal(ins(t, "$share/h/x/y", &s[0], 3, &existed), 0);
	assert_false(existed);
	assert_int_equal(topic_tree_sub_count(t), 3);
	assert_int_equal(topic_tree_filter_count(t), 3);

	// NULL opts store zeros; NULL existed is accepted.
	assert_int_equal(topic_tree_insert(t, "z", 1, &s[0], NULL, NULL), 0);
	assert_int_equal(match(t, "z", &mv), 1);
	assert_int_equal(mv.v[0].opts.qos, 0);
	assert_int_equal(mv.v[0].opts.sub_id, 0);

	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
}

static void test_invalid(void **state)
{
	topic_tree *t = topic_tree_alloc(&ops);
	fsub        s[1];
	fs_init(s, 1);
	static const char *bad[] = { "", "a/#/b", "a+", "a/b#", "$share/g", "$share//a",
		"$share/g+/a", "$share/g/", "$share/g/a/#/b", "$share/", "$share/#/a" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ins(t, bad[i], &s[0], 0, NULL), NMQ_EINVAL);
		assert_int_equal(rem(t, bad[i], &s[0]), NMQ_EINVAL);
	}
	assert_int_equal(topic_tree_insert(t, "a\0b", 3, &s[0], NULL, NULL), NMQ_EINVAL);
	assert_int_equal(topic_tree_sub_count(t), 0);
	assert_null(topic_tree_alloc(NULL));
	topic_tree_ops no_hold = { NULL, fs_release, NULL };
	assert_null(topic_tree_alloc(&no_hold));

	// Matching an empty topic finds nothing, even with "#".
	topic_match_vec mv;
	topic_match_vec_init(&mv);
	assert_int_equal(ins(t, "#", &s[0], 0, NULL), 0);
	assert_int_equal(topic_tree_match(t, "", 0, &mv), 0);
	assert_int_equal(mv.n, 0);
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
}

// Counts the nodes of a tree with a walk.
static void count_cb(void *arg, const char *level, size_t len, int depth, size_t n_children,
    void *const *subs, size_t n_subs)
{
	(*(size_t *)arg)++;
}

static size_t node_count(topic_tree *t)
{
	size_t n = 0;
	topic_tree_walk(t, count_cb, &n);
	return n;
}

static void test_remove_prune(void **state)
{
	topic_tree *t = topic_tree_alloc(&ops);
	fsub        s[3];
	fs_init(s, 3);
	assert_int_equal(ins(t, "a/b/c/d", &s[0], 0, NULL), 0);
	assert_int_equal(node_count(t), 4);
	assert_int_equal(ins(t, "a/b", &s[1], 0, NULL), 0);
	assert_int_equal(ins(t, "a/+/#", &s[1], 0, NULL), 0);
	assert_int_equal(ins(t, "$share/g/a/b/c/d", &s[2], 0, NULL), 0);
	assert_int_equal(node_count(t), 6);
	assert_int_equal(topic_tree_filter_count(t), 4);

	assert_int_equal(rem(t, "a/b/c/d", &s[1]), NMQ_ENOENT); // wrong subscriber
	assert_int_equal(rem(t, "a/b/c", &s[0]), NMQ_ENOENT); // inner node, no sub
	assert_int_equal(rem(t, "a/b/c/d/e", &s[0]), NMQ_ENOENT);
	assert_int_equal(rem(t, "$share/h/a/b/c/d", &s[2]), NMQ_ENOENT); // wrong group
	assert_int_equal(rem(t, "$share/g/a/b/c/d", &s[0]), NMQ_ENOENT); // not a member
	assert_int_equal(rem(t, "a/b/c/d", &s[0]), 0);
	assert_int_equal(rem(t, "a/b/c/d", &s[0]), NMQ_ENOENT);
	assert_int_equal(node_count(t), 6); // the group still holds a/b/c/d
	assert_int_equal(rem(t, "$share/g/a/b/c/d", &s[2]), 0);
	assert_int_equal(node_count(t), 4); // a, a/b, a/+, a/+/#
	assert_int_equal(rem(t, "a/+/#", &s[1]), 0);
	assert_int_equal(node_count(t), 2);
	assert_int_equal(rem(t, "a/b", &s[1]), 0);
	assert_int_equal(node_count(t), 0);
	assert_int_equal(topic_tree_sub_count(t), 0);
	assert_int_equal(topic_tree_filter_count(t), 0);
	topic_tree_free(t);
}

typedef struct walk_rec {
	char   line[32][64];
	size_t n;
} walk_rec;

static void walk_cb(void *arg, const char *level, size_t len, int depth, size_t n_children,
    void *const *subs, size_t n_subs)
{
	walk_rec *w   = arg;
	int       ids = 0;
	for (size_t i = 0; i < n_subs; i++) {
		ids += ((fsub *)subs[i])->id;
	}
	assert_true(w->n < 32);
	snprintf(w->line[w->n++], 64, "%d %.*s k%zu s%zu id%d", depth, (int)len, level, n_children,
	    n_subs, ids);
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void test_walk(void **state)
{
	topic_tree *t = topic_tree_alloc(&ops);
	fsub        s[4];
	walk_rec    w = { .n = 0 };
	fs_init(s, 4);
	assert_int_equal(ins(t, "a/b", &s[1], 0, NULL), 0);
	assert_int_equal(ins(t, "a/b", &s[2], 0, NULL), 0);
	assert_int_equal(ins(t, "a/+", &s[3], 0, NULL), 0);
	assert_int_equal(ins(t, "$share/g/a/+", &s[1], 0, NULL), 0);
	assert_int_equal(ins(t, "$share/g/a/+", &s[2], 0, NULL), 0);
	assert_int_equal(ins(t, "#", &s[3], 0, NULL), 0);
	assert_int_equal(ins(t, "x//", &s[0], 0, NULL), 0);
	topic_tree_walk(t, walk_cb, &w);
	qsort(w.line, w.n, sizeof(w.line[0]), cmp_line);
	static const char *expect[] = { "1 # k0 s1 id3", "1 a k2 s0 id0", "1 x k1 s0 id0",
		"2  k1 s0 id0", "2 + k0 s3 id6", "2 b k0 s2 id3", "3  k0 s1 id0" };
	assert_int_equal(w.n, sizeof(expect) / sizeof(expect[0]));
	for (size_t i = 0; i < w.n; i++) {
		assert_string_equal(w.line[i], expect[i]);
	}
	topic_tree_free(t);
}

// [MQTT-4.7.2-1] [MQTT5-4.7.2-1]
static void test_dollar(void **state)
{
	topic_tree     *t = topic_tree_alloc(&ops);
	topic_match_vec mv;
	fsub            s[6];
	fs_init(s, 6);
	topic_match_vec_init(&mv);
	assert_int_equal(ins(t, "#", &s[0], 0, NULL), 0);
	assert_int_equal(ins(t, "+/x", &s[1], 0, NULL), 0);
	assert_int_equal(ins(t, "$SYS/#", &s[2], 0, NULL), 0);
	assert_int_equal(ins(t, "$share/g/#", &s[3], 0, NULL), 0);
	assert_int_equal(ins(t, "$share/g/$SYS/+", &s[4], 0, NULL), 0);
	assert_int_equal(ins(t, "+/+", &s[5], 0, NULL), 0);
	assert_int_equal(match(t, "$SYS/x", &mv), 2);
	for (size_t i = 0; i < mv.n; i++) {
		assert_true(mv.v[i].sub == &s[2] || mv.v[i].sub == &s[4]);
	}
	assert_int_equal(match(t, "$SYS", &mv), 1);
	assert_int_equal(match(t, "a/x", &mv), 4); // #, +/x, $share/g/#, +/+
	assert_int_equal(match(t, "a$/x", &mv), 4);
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
}

static void test_shared_rr(void **state)
{
	topic_tree     *t = topic_tree_alloc(&ops);
	topic_match_vec mv;
	fsub            s[5];
	int             hits[5];
	fs_init(s, 5);
	topic_match_vec_init(&mv);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ins(t, "$share/g/job/+", &s[i], 0, NULL), 0);
	}
	assert_int_equal(ins(t, "$share/other/job/#", &s[3], 0, NULL), 0);
	assert_int_equal(ins(t, "job/+", &s[4], 0, NULL), 0);
	assert_int_equal(topic_tree_filter_count(t), 3);

	// Fair round robin: 300 matches give each member exactly 100.
	memset(hits, 0, sizeof(hits));
	for (int i = 0; i < 300; i++) {
		assert_int_equal(match(t, "job/1", &mv), 3);
		int shared = 0;
		for (size_t j = 0; j < mv.n; j++) {
			hits[((fsub *)mv.v[j].sub)->id]++;
			shared += mv.v[j].shared;
			assert_int_equal(mv.v[j].shared, mv.v[j].sub != &s[4]);
		}
		assert_int_equal(shared, 2);
	}
	assert_int_equal(hits[0], 100);
	assert_int_equal(hits[1], 100);
	assert_int_equal(hits[2], 100);
	assert_int_equal(hits[3], 300);
	assert_int_equal(hits[4], 300);

	// An ineligible member is skipped, and the others share evenly.
	atomic_store(&s[1].eligible, false);
	memset(hits, 0, sizeof(hits));
	for (int i = 0; i < 300; i++) {
		match(t, "job/1", &mv);
		for (size_t j = 0; j < mv.n; j++) {
			hits[((fsub *)mv.v[j].sub)->id]++;
		}
	}
	assert_int_equal(hits[1], 0);
	assert_true(hits[0] >= 140 && hits[0] <= 160);
	assert_true(hits[2] >= 140 && hits[2] <= 160);
	assert_int_equal(hits[0] + hits[2], 300);

	// Nobody eligible: still one member per match.
	atomic_store(&s[0].eligible, false);
	atomic_store(&s[2].eligible, false);
	memset(hits, 0, sizeof(hits));
	for (int i = 0; i < 30; i++) {
		match(t, "job/1", &mv);
		assert_int_equal(mv.n, 3);
		for (size_t j = 0; j < mv.n; j++) {
			hits[((fsub *)mv.v[j].sub)->id]++;
		}
	}
	assert_int_equal(hits[0] + hits[1] + hits[2], 30);

	// Only one eligible: always that one.
	atomic_store(&s[2].eligible, true);
	for (int i = 0; i < 30; i++) {
		match(t, "job/1", &mv);
		for (size_t j = 0; j < mv.n; j++) {
			assert_true(mv.v[j].sub != &s[0] && mv.v[j].sub != &s[1]);
		}
	}

	// Members leave one by one; the group goes away with the last.
	assert_int_equal(rem(t, "$share/g/job/+", &s[0]), 0);
	assert_int_equal(rem(t, "$share/g/job/+", &s[2]), 0);
	match(t, "job/1", &mv);
	assert_int_equal(mv.n, 3);
	assert_int_equal(rem(t, "$share/g/job/+", &s[1]), 0);
	assert_int_equal(match(t, "job/1", &mv), 2);
	assert_int_equal(topic_tree_filter_count(t), 2);
	topic_match_vec_fini(&mv, &ops);
	assert_int_equal(atomic_load(&s[3].refs), 0);
	topic_tree_free(t);

	// Without an eligible callback every member is eligible.
	topic_tree_ops o2 = { fs_hold, fs_release, NULL };
	t                 = topic_tree_alloc(&o2);
	topic_match_vec_init(&mv);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(ins(t, "$share/g/q", &s[i], 0, NULL), 0);
	}
	memset(hits, 0, sizeof(hits));
	for (int i = 0; i < 40; i++) {
		match(t, "q", &mv);
		hits[((fsub *)mv.v[0].sub)->id]++;
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(hits[i], 10);
	}
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
}

// Large sets: 20k subscribers on one filter (pointer index), 20k children
// of one node (child table growth and shrink), removed in a scrambled order.
#define BIG 20000

static void test_big(void **state)
{
	topic_tree     *t     = topic_tree_alloc(&ops);
	fsub           *s     = calloc(BIG, sizeof(*s));
	int            *order = malloc(BIG * sizeof(int));
	topic_match_vec mv;
	char            f[32];
	fs_init(s, BIG);
	topic_match_vec_init(&mv);
	for (int i = 0; i < BIG; i++) {
		order[i] = i;
		assert_int_equal(ins(t, "big/one", &s[i], (uint32_t)i, NULL), 0);
		snprintf(f, sizeof(f), "big/many/%d", i);
		assert_int_equal(ins(t, f, &s[i], (uint32_t)i, NULL), 0);
	}
	for (int i = BIG - 1; i > 0; i--) {
		int j    = (int)(rnd() % (uint32_t)(i + 1));
		int x    = order[i];
		order[i] = order[j];
		order[j] = x;
	}
	assert_int_equal(topic_tree_sub_count(t), 2 * BIG);
	assert_int_equal(match(t, "big/one", &mv), BIG);
	assert_int_equal(match(t, "big/many/12345", &mv), 1);
	assert_ptr_equal(mv.v[0].sub, &s[12345]);
	for (int k = 0; k < BIG; k++) {
		int  i = order[k];
		bool existed;
		if (k % 1000 == 0) {
			// Re-insert finds the entry through the index.
			assert_int_equal(ins(t, "big/one", &s[i], 1, &existed), 0);
			assert_true(existed);
		}
		assert_int_equal(rem(t, "big/one", &s[i]), 0);
		assert_int_equal(rem(t, "big/one", &s[i]), NMQ_ENOENT);
		snprintf(f, sizeof(f), "big/many/%d", i);
		assert_int_equal(rem(t, f, &s[i]), 0);
		if (k % 997 == 0 && k + 1 < BIG) {
			int j = order[k + 1];
			snprintf(f, sizeof(f), "big/many/%d", j);
			assert_int_equal(match(t, f, &mv), 1);
			assert_ptr_equal(mv.v[0].sub, &s[j]);
			assert_int_equal(match(t, "big/one", &mv), BIG - k - 1);
		}
	}
	assert_int_equal(topic_tree_sub_count(t), 0);
	assert_int_equal(node_count(t), 0);
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t);
	free(order);
	free(s);
}

// Deep topics do not recurse on the C stack.
static void test_deep(void **state)
{
	size_t          levels = 20000;
	char           *topic  = malloc(2 * levels);
	char           *filter = malloc(2 * levels);
	topic_tree     *t      = topic_tree_alloc(&ops);
	topic_match_vec mv;
	fsub            s[3];
	fs_init(s, 3);
	topic_match_vec_init(&mv);
	for (size_t i = 0; i < levels; i++) {
		topic[2 * i]      = 'x';
		topic[2 * i + 1]  = '/';
		filter[2 * i]     = i % 2 == 0 ? '+' : 'x';
		filter[2 * i + 1] = '/';
	}
	size_t tlen = 2 * levels - 1;
	assert_int_equal(topic_tree_insert(t, filter, tlen, &s[0], NULL, NULL), 0);
	filter[tlen - 1] = '#';
	assert_int_equal(topic_tree_insert(t, filter, tlen, &s[1], NULL, NULL), 0);
	assert_int_equal(topic_tree_insert(t, "x/x/#", 5, &s[2], NULL, NULL), 0);
	assert_int_equal(topic_tree_match(t, topic, tlen, &mv), 0);
	assert_int_equal(mv.n, 3);
	assert_true(topic_filter_match(filter, tlen, topic, tlen));
	topic_match_vec_clear(&mv, &ops);
	// 20000 empty levels: "////...".
	memset(topic, '/', tlen);
	assert_int_equal(topic_tree_insert(t, topic, tlen, &s[0], NULL, NULL), 0);
	assert_int_equal(topic_tree_match(t, topic, tlen, &mv), 0);
	assert_int_equal(mv.n, 1);
	topic_match_vec_fini(&mv, &ops);
	topic_tree_free(t); // frees 40k nodes iteratively
	free(topic);
	free(filter);
}

// ---------------------------------------------------------------------------
// Stress: matchers and mutators in parallel.

#define ST_MUT   2
#define ST_MATCH 3
#define ST_SUBS  16

static const char *st_filters[] = { "s/#", "s/+", "s/a", "s/a/b", "+/a", "+/+/b", "#", "s/+/b",
	"$share/g/s/#", "$share/g/+/a", "$share/h/s/a", "t/a", "t/#", "u/+/+", "s//b" };
static const char *st_topics[]  = { "s/a", "s/a/b", "t/a", "s", "u/x/y", "s//b", "x/a", "$SYS/a" };

typedef struct st_ctx {
	topic_tree  *t;
	fsub        *subs;
	fsub        *anchor;
	_Atomic bool stop;
	_Atomic long matches;
	_Atomic long mutations;
} st_ctx;

typedef struct st_arg {
	st_ctx *c;
	int     id;
} st_arg;

static void *st_matcher(void *p)
{
	st_arg         *a = p;
	st_ctx         *c = a->c;
	topic_match_vec mv;
	uint64_t        r = 0x9e3779b97f4a7c15ull * (uint64_t)(a->id + 1);
	topic_match_vec_init(&mv);
	while (!atomic_load(&c->stop)) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		const char *topic = st_topics[r % (sizeof(st_topics) / sizeof(st_topics[0]))];
		CHECK(topic_tree_match(c->t, topic, strlen(topic), &mv) == 0);
		// The anchor subscription on "s/#" is never removed.
		bool anchor = false;
		for (size_t i = 0; i < mv.n; i++) {
			anchor = anchor || mv.v[i].sub == c->anchor;
			CHECK(atomic_load(&((fsub *)mv.v[i].sub)->refs) > 0);
		}
		CHECK(anchor == (topic[0] == 's'));
		topic_match_vec_clear(&mv, &ops);
		atomic_fetch_add(&c->matches, 1);
	}
	topic_match_vec_fini(&mv, &ops);
	return NULL;
}

static void *st_mutator(void *p)
{
	st_arg  *a  = p;
	st_ctx  *c  = a->c;
	size_t   nf = sizeof(st_filters) / sizeof(st_filters[0]);
	bool     in[sizeof(st_filters) / sizeof(st_filters[0])][ST_SUBS];
	fsub    *mine = c->subs + a->id * ST_SUBS;
	uint64_t r    = 0x2545f4914f6cdd1dull * (uint64_t)(a->id + 7);
	memset(in, 0, sizeof(in));
	while (!atomic_load(&c->stop)) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		size_t      f  = r % nf;
		size_t      k  = (r >> 20) % ST_SUBS;
		const char *fs = st_filters[f];
		if (!in[f][k]) {
			bool existed;
			CHECK(ins(c->t, fs, &mine[k], 0, &existed) == 0);
			CHECK(!existed);
		} else {
			CHECK(rem(c->t, fs, &mine[k]) == 0);
		}
		in[f][k] = !in[f][k];
		atomic_fetch_add(&c->mutations, 1);
	}
	for (size_t f = 0; f < nf; f++) {
		for (size_t k = 0; k < ST_SUBS; k++) {
			if (in[f][k]) {
				CHECK(rem(c->t, st_filters[f], &mine[k]) == 0);
			}
		}
	}
	return NULL;
}

static void test_stress(void **state)
{
	st_ctx    c;
	pthread_t th[ST_MUT + ST_MATCH];
	st_arg    args[ST_MUT + ST_MATCH];
	fsub      subs[ST_MUT * ST_SUBS + 1];
	fs_init(subs, ST_MUT * ST_SUBS + 1);
	atomic_store(&subs[3].eligible, false);
	memset(&c, 0, sizeof(c));
	c.t      = topic_tree_alloc(&ops);
	c.subs   = subs;
	c.anchor = &subs[ST_MUT * ST_SUBS];
	atomic_init(&c.stop, false);
	atomic_init(&c.matches, 0);
	atomic_init(&c.mutations, 0);
	long h0 = atomic_load(&n_hold);
	long r0 = atomic_load(&n_release);
	assert_int_equal(ins(c.t, "s/#", c.anchor, 0, NULL), 0);

	for (int i = 0; i < ST_MUT + ST_MATCH; i++) {
		args[i].c  = &c;
		args[i].id = i < ST_MUT ? i : i - ST_MUT;
		assert_int_equal(
		    pthread_create(&th[i], NULL, i < ST_MUT ? st_mutator : st_matcher, &args[i]),
		    0);
	}
	struct timespec ts = { 1, 0 };
	nanosleep(&ts, NULL);
	atomic_store(&c.stop, true);
	for (int i = 0; i < ST_MUT + ST_MATCH; i++) {
		pthread_join(th[i], NULL);
	}
	print_message("stress: %ld matches, %ld mutations\n", atomic_load(&c.matches),
	    atomic_load(&c.mutations));
	assert_int_equal(atomic_load(&n_errors), 0);
	assert_true(atomic_load(&c.matches) > 100);
	assert_true(atomic_load(&c.mutations) > 100);
	assert_int_equal(atomic_load(&n_hold) - h0, atomic_load(&n_release) - r0);
	for (int i = 0; i <= ST_MUT * ST_SUBS; i++) {
		assert_int_equal(atomic_load(&subs[i].refs), 0);
	}
	assert_int_equal(topic_tree_sub_count(c.t), 1);
	assert_int_equal(rem(c.t, "s/#", c.anchor), 0);
	assert_int_equal(topic_tree_sub_count(c.t), 0);
	assert_int_equal(topic_tree_filter_count(c.t), 0);
	assert_int_equal(node_count(c.t), 0);
	topic_tree_free(c.t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_filter_valid),
		cmocka_unit_test(test_share_split),
		cmocka_unit_test(test_match_table),
		cmocka_unit_test(test_match_cross),
		cmocka_unit_test(test_match_random),
		cmocka_unit_test(test_overlap),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_remove_prune),
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_dollar),
		cmocka_unit_test(test_shared_rr),
		cmocka_unit_test(test_big),
		cmocka_unit_test(test_deep),
		cmocka_unit_test(test_stress),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (atomic_load(&n_errors) != 0) {
		fprintf(stderr, "%ld checks failed off the main thread\n", atomic_load(&n_errors));
		rc = 1;
	}
	return rc;
}
