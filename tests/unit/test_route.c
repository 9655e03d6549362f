// Unit tests for src/broker/route: the routing decisions of one message,
// from real topic tree matches to deliveries, without sockets or sessions:
// overlapping subscriptions of one session merged into one delivery,
// shared-group picks, No Local, Retain As Published, the admit gate and
// stand-ins.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/broker/route.h"
#include "src/topic/topic_tree.h"

// A subscriber: an opaque pointer to the tree and the router.
typedef struct fsub {
	int  refs;
	bool ineligible;
	bool refuse; // the admit gate says no
} fsub;

static void fs_hold(void *p)
{
	((fsub *)p)->refs++;
}

static void fs_release(void *p)
{
	((fsub *)p)->refs--;
}

static bool fs_eligible(void *p)
{
	return !((fsub *)p)->ineligible;
}

static const topic_tree_ops tops = { fs_hold, fs_release, fs_eligible };

#define MAX_REC 64

// What the router delivered.
typedef struct rec {
	void    *sub;
	uint8_t  qos;
	bool     retain;
	bool     shared;
	uint32_t n_ids;
	uint32_t ids[ROUTE_MAX_IDS];
} rec;

typedef struct sink {
	rec    v[MAX_REC];
	size_t n;
	size_t admits; // admit() calls
} sink;

static void sink_deliver(void *arg, const route_delivery *d)
{
	sink *s = arg;
	assert_true(s->n < MAX_REC);
	rec *r    = &s->v[s->n++];
	r->sub    = d->sub;
	r->qos    = d->qos;
	r->retain = d->retain;
	r->shared = d->shared;
	r->n_ids  = d->n_ids;
	assert_true(d->n_ids <= ROUTE_MAX_IDS);
	if (d->n_ids > 0) {
		memcpy(r->ids, d->ids, d->n_ids * sizeof(uint32_t));
	}
}

static bool sink_admit(void *arg, const topic_match *v, size_t n)
{
	sink *s = arg;
	s->admits++;
	for (size_t i = 1; i < n; i++) {
		assert_ptr_equal(v[i].sub, v[0].sub); // one subscriber per call
	}
	return !((fsub *)v[0].sub)->refuse;
}

static const route_ops plain_ops = { NULL, sink_deliver };
static const route_ops gated_ops = { sink_admit, sink_deliver };

static topic_tree     *tree;
static topic_match_vec mv;

static int setup(void **state)
{
	(void)state;
	tree = topic_tree_alloc(&tops);
	topic_match_vec_init(&mv);
	return tree != NULL ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	topic_match_vec_fini(&mv, &tops);
	topic_tree_free(tree);
	return 0;
}

static void sub(const char *filter, fsub *s, uint8_t qos, uint32_t id, bool nl, bool rap)
{
	topic_sub_opts o      = { 0 };
	o.qos                 = qos;
	o.sub_id              = id;
	o.no_local            = nl;
	o.retain_as_published = rap;
	assert_int_equal(topic_tree_insert(tree, filter, strlen(filter), s, &o, NULL), 0);
}

// Matches the topic and routes a message through ops into *out.
static route_stats route(
    const char *topic, const void *from, uint8_t qos, bool retain, const route_ops *ops, sink *out)
{
	route_stats st;
	memset(out, 0, sizeof(*out));
	assert_int_equal(topic_tree_match(tree, topic, strlen(topic), &mv), 0);
	route_deliver(&mv, from, qos, retain, ops, out, &st);
	topic_match_vec_clear(&mv, &tops);
	assert_int_equal(st.deliveries, out->n);
	return st;
}

// The deliveries to s in out, of the given kind.
static size_t count_for(const sink *out, const fsub *s, bool shared)
{
	size_t n = 0;
	for (size_t i = 0; i < out->n; i++) {
		n += out->v[i].sub == s && out->v[i].shared == shared;
	}
	return n;
}

static const rec *find_rec(const sink *out, const fsub *s, bool shared)
{
	for (size_t i = 0; i < out->n; i++) {
		if (out->v[i].sub == s && out->v[i].shared == shared) {
			return &out->v[i];
		}
	}
	return NULL;
}

static bool has_id(const rec *r, uint32_t id)
{
	for (uint32_t i = 0; i < r->n_ids; i++) {
		if (r->ids[i] == id) {
			return true;
		}
	}
	return false;
}

// [MQTT-3.3.5-1] [MQTT-3.8.4-6] [MQTT5-3.3.4-2] [MQTT5-3.3.4-3]
// [MQTT5-3.3.4-4]: overlapping subscriptions of one session make one
// delivery with the highest granted QoS (capped by the message's) and
// every subscription identifier.
static void test_overlap_merged(void **state)
{
	(void)state;
	fsub a = { 0 }, b = { 0 };
	sink out;
	sub("ov/+", &a, 0, 1, false, false);
	sub("ov/#", &a, 2, 2, false, false);
	sub("ov/x", &a, 1, 0, false, false);
	sub("ov/x", &b, 1, 5, false, false);

	route("ov/x", NULL, 2, false, &plain_ops, &out);
	assert_int_equal(out.n, 2);
	const rec *ra = find_rec(&out, &a, false);
	assert_non_null(ra);
	assert_int_equal(count_for(&out, &a, false), 1);
	assert_int_equal(ra->qos, 2);
	assert_int_equal(ra->n_ids, 2); // the id-less subscription adds none
	assert_true(has_id(ra, 1));
	assert_true(has_id(ra, 2));
	const rec *rb = find_rec(&out, &b, false);
	assert_non_null(rb);
	assert_int_equal(rb->qos, 1);
	assert_int_equal(rb->n_ids, 1);
	assert_int_equal(rb->ids[0], 5);

	// The message's QoS caps the granted one.
	route("ov/x", NULL, 1, false, &plain_ops, &out);
	assert_int_equal(find_rec(&out, &a, false)->qos, 1);
	route("ov/x", NULL, 0, false, &plain_ops, &out);
	assert_int_equal(find_rec(&out, &a, false)->qos, 0);
	assert_int_equal(find_rec(&out, &b, false)->qos, 0);

	// Only the matching subscriptions count: "ov/y" misses "ov/x".
	route("ov/y", NULL, 2, false, &plain_ops, &out);
	assert_int_equal(out.n, 1);
	ra = find_rec(&out, &a, false);
	assert_int_equal(ra->qos, 2);
	assert_int_equal(ra->n_ids, 2);
	assert_int_equal(a.refs, 0);
	assert_int_equal(b.refs, 0);
}

// More identifiers than one delivery carries: ROUTE_MAX_IDS go, the rest
// are counted as dropped, and the delivery is still one.
static void test_many_ids(void **state)
{
	(void)state;
	fsub a = { 0 };
	sink out;
	char f[32];
	// Every mix of literal and '+' levels matches "mi/1/2/3/4/5/6".
	for (int i = 0; i < ROUTE_MAX_IDS + 3; i++) {
		size_t p = (size_t)snprintf(f, sizeof(f), "mi");
		for (int k = 0; k < 6; k++) {
			if (i & (1 << k)) {
				p += (size_t)snprintf(f + p, sizeof(f) - p, "/+");
			} else {
				p += (size_t)snprintf(f + p, sizeof(f) - p, "/%d", k + 1);
			}
		}
		sub(f, &a, 1, (uint32_t)i + 100, false, false);
	}
	route_stats st = route("mi/1/2/3/4/5/6", NULL, 1, false, &plain_ops, &out);
	assert_int_equal(out.n, 1);
	assert_int_equal(out.v[0].n_ids, ROUTE_MAX_IDS);
	assert_int_equal(st.ids_dropped, 3);
	for (uint32_t i = 0; i < ROUTE_MAX_IDS; i++) {
		uint32_t id = out.v[0].ids[i];
		assert_true(id >= 100 && id < 100 + ROUTE_MAX_IDS + 3);
		for (uint32_t j = 0; j < i; j++) {
			assert_int_not_equal(out.v[0].ids[j], id);
		}
	}
	// A topic that only some of them match.
	// A topic that only the filters with '+' first match (odd i).
	st = route("mi/x/2/3/4/5/6", NULL, 1, false, &plain_ops, &out);
	assert_int_equal(out.n, 1);
	assert_int_equal(st.ids_dropped, 0);
	assert_int_equal(out.v[0].n_ids, (ROUTE_MAX_IDS + 3) / 2);
	for (uint32_t i = 0; i < out.v[0].n_ids; i++) {
		assert_int_equal((out.v[0].ids[i] - 100) % 2, 1);
	}
}

// [MQTT5-3.8.3-3]: No Local subscriptions do not deliver the session's own
// messages; its other overlapping subscriptions still do, with their own
// QoS and identifiers only.
static void test_no_local(void **state)
{
	(void)state;
	fsub a = { 0 }, b = { 0 };
	sink out;
	sub("nl/#", &a, 2, 1, true, false);
	sub("nl/+", &a, 1, 2, false, false);
	sub("nl/only", &b, 1, 3, true, false);

	route("nl/x", &a, 2, false, &plain_ops, &out);
	assert_int_equal(out.n, 1);
	const rec *r = find_rec(&out, &a, false);
	assert_non_null(r);
	assert_int_equal(r->qos, 1);
	assert_int_equal(r->n_ids, 1);
	assert_int_equal(r->ids[0], 2);

	// From another session: both subscriptions count.
	route("nl/x", &b, 2, false, &plain_ops, &out);
	r = find_rec(&out, &a, false);
	assert_int_equal(r->qos, 2);
	assert_int_equal(r->n_ids, 2);

	// All of b's matching subscriptions are No Local: nothing for b.
	route("nl/only", &b, 1, false, &plain_ops, &out);
	assert_int_equal(count_for(&out, &b, false), 0);
	assert_int_equal(count_for(&out, &a, false), 1);
	route("nl/only", NULL, 1, false, &plain_ops, &out);
	assert_int_equal(count_for(&out, &b, false), 1);
}

// [MQTT5-3.3.1-12] [MQTT5-3.3.1-13]: RETAIN is sent set only for a retained
// message through a subscription with Retain As Published (any of the
// merged ones).
static void test_retain_as_published(void **state)
{
	(void)state;
	fsub a = { 0 }, b = { 0 };
	sink out;
	sub("rp/#", &a, 1, 0, false, false);
	sub("rp/+", &a, 1, 0, false, true);
	sub("rp/x", &b, 1, 0, false, false);

	route("rp/x", NULL, 1, true, &plain_ops, &out);
	assert_true(find_rec(&out, &a, false)->retain);
	assert_false(find_rec(&out, &b, false)->retain);
	route("rp/x", NULL, 1, false, &plain_ops, &out);
	assert_false(find_rec(&out, &a, false)->retain);
	assert_false(find_rec(&out, &b, false)->retain);
	// "rp/x/y" matches only "rp/#" (without RAP).
	route("rp/x/y", NULL, 1, true, &plain_ops, &out);
	assert_false(find_rec(&out, &a, false)->retain);
}

// [MQTT5-4.8.2-3]: each message goes to one member of each share group,
// round robin, at the QoS granted to that member's subscription; several
// groups each get it, and so do plain subscribers.
static void test_shared_pick(void **state)
{
	(void)state;
	fsub g[3] = { { 0 } }, h[2] = { { 0 } }, p = { 0 };
	sink out;
	for (int i = 0; i < 3; i++) {
		sub("$share/g/sh/+", &g[i], 2, 10 + (uint32_t)i, false, false);
	}
	for (int i = 0; i < 2; i++) {
		sub("$share/h/sh/#", &h[i], 1, 20 + (uint32_t)i, false, false);
	}
	sub("sh/#", &p, 0, 30, false, false);

	int ng[3] = { 0 }, nh[2] = { 0 };
	for (int m = 0; m < 30; m++) {
		route("sh/t", NULL, 2, false, &plain_ops, &out);
		assert_int_equal(out.n, 3); // one per group, one plain
		size_t in_g = 0, in_h = 0;
		for (int i = 0; i < 3; i++) {
			size_t c = count_for(&out, &g[i], true);
			in_g += c;
			ng[i] += (int)c;
			if (c == 1) {
				const rec *r = find_rec(&out, &g[i], true);
				assert_int_equal(r->qos, 2);
				assert_int_equal(r->n_ids, 1);
				assert_int_equal(r->ids[0], 10 + (uint32_t)i);
			}
		}
		for (int i = 0; i < 2; i++) {
			size_t c = count_for(&out, &h[i], true);
			in_h += c;
			nh[i] += (int)c;
			if (c == 1) {
				assert_int_equal(find_rec(&out, &h[i], true)->qos, 1);
			}
		}
		assert_int_equal(in_g, 1);
		assert_int_equal(in_h, 1);
		assert_int_equal(count_for(&out, &p, false), 1);
		assert_int_equal(find_rec(&out, &p, false)->qos, 0);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ng[i], 10); // round robin: an even share
	}
	assert_int_equal(nh[0], 15);
	assert_int_equal(nh[1], 15);

	// An ineligible (offline) member is passed over while others are not.
	g[1].ineligible = true;
	memset(ng, 0, sizeof(ng));
	for (int m = 0; m < 30; m++) {
		route("sh/t", NULL, 2, false, &plain_ops, &out);
		for (int i = 0; i < 3; i++) {
			ng[i] += (int)count_for(&out, &g[i], true);
		}
	}
	assert_int_equal(ng[1], 0);
	assert_int_equal(ng[0] + ng[2], 30);
	assert_true(ng[0] >= 10 && ng[2] >= 10);
	g[1].ineligible = false;
}

// [MQTT5-3.3.4-5]: a session that is a group member and also a plain
// subscriber gets both copies, each with its own options and identifier;
// No Local does not apply to its shared copy.
static void test_shared_and_plain_same_session(void **state)
{
	(void)state;
	fsub a = { 0 };
	sink out;
	sub("$share/solo/both/x", &a, 1, 7, false, false);
	sub("both/+", &a, 2, 8, true, true);

	route("both/x", NULL, 2, true, &plain_ops, &out);
	assert_int_equal(out.n, 2);
	const rec *s = find_rec(&out, &a, true);
	const rec *p = find_rec(&out, &a, false);
	assert_non_null(s);
	assert_non_null(p);
	assert_int_equal(s->qos, 1);
	assert_false(s->retain);
	assert_int_equal(s->ids[0], 7);
	assert_int_equal(p->qos, 2);
	assert_true(p->retain);
	assert_int_equal(p->ids[0], 8);

	route("both/x", &a, 2, false, &plain_ops, &out);
	assert_int_equal(out.n, 1);
	assert_non_null(find_rec(&out, &a, true));
}

// The admit gate: asked once per subscriber, before anything is
// delivered to it; a refusal removes every copy of that subscriber only.
static void test_admit(void **state)
{
	(void)state;
	fsub a = { 0 }, b = { 0 };
	sink out;
	sub("ad/#", &a, 1, 0, false, false);
	sub("ad/+", &a, 1, 0, false, false);
	sub("$share/g/ad/x", &a, 1, 0, false, false);
	sub("ad/x", &b, 1, 0, false, false);

	route_stats st = route("ad/x", NULL, 1, false, &gated_ops, &out);
	assert_int_equal(out.admits, 2);
	assert_int_equal(out.n, 3);
	assert_int_equal(st.refused, 0);
	a.refuse = true;
	st       = route("ad/x", NULL, 1, false, &gated_ops, &out);
	assert_int_equal(out.admits, 2);
	assert_int_equal(st.refused, 1);
	assert_int_equal(out.n, 1);
	assert_int_equal(count_for(&out, &b, false), 1);
	a.refuse = false;
}

// Entries marked alt (stand-ins the caller did not choose) are not
// delivered, and a subscriber with only such entries is not even asked.
static void test_alt_skipped(void **state)
{
	(void)state;
	fsub            a = { 0 }, b = { 0 };
	sink            out;
	topic_match_vec v;
	topic_match_vec_init(&v);
	v.v   = calloc(4, sizeof(topic_match));
	v.cap = 4;
	assert_non_null(v.v);
	// a: stand-ins only. b: a chosen shared pick and a plain stand-in.
	v.v[0]          = (topic_match) { .sub = &a, .shared = true, .alt = true };
	v.v[1]          = (topic_match) { .sub = &b, .shared = true, .alt = false };
	v.v[2]          = (topic_match) { .sub = &a, .shared = false, .alt = true };
	v.v[3]          = (topic_match) { .sub = &b, .shared = false, .alt = true };
	v.v[1].opts.qos = 1;
	v.v[3].opts.qos = 2;
	v.n             = 4;
	memset(&out, 0, sizeof(out));
	route_stats st;
	route_deliver(&v, NULL, 2, false, &gated_ops, &out, &st);
	assert_int_equal(out.admits, 1);
	assert_int_equal(out.n, 1);
	assert_ptr_equal(out.v[0].sub, &b);
	assert_int_equal(out.v[0].qos, 1);
	assert_true(out.v[0].shared);
	free(v.v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_overlap_merged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_ids, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_local, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retain_as_published, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_pick, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_shared_and_plain_same_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_admit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alt_skipped, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
