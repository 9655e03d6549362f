// Unit tests for src/topic/level_table: lookups by (scope, level), growth,
// backward-shift deletion across colliding and wrapping probe runs,
// shrinking, and teardown by pop.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/topic/level_table.h"

typedef struct node {
	int       id;
	level_key key;
	char      level[16];
} node;
LEVEL_KEY_CHECK(node, key, level);

// Fills n with the level text; h is the real hash unless forced_h != 0.
static void node_set(node *n, const void *scope, const char *text, uint32_t forced_h)
{
	size_t len = strlen(text);
	memcpy(n->level, text, len);
	n->key.scope = scope;
	n->key.len   = (uint32_t)len;
	n->key.h     = forced_h != 0 ? forced_h : level_hash(scope, text, len);
}

static node *find(const level_table *t, const void *scope, const char *text, uint32_t h)
{
	size_t     len = strlen(text);
	level_key *k
	    = level_table_find(t, scope, text, len, h != 0 ? h : level_hash(scope, text, len));
	return k != NULL ? LEVEL_ENTRY(k, node, key) : NULL;
}

// Equal levels under different scopes are different keys; a key is found
// by its own scope only, and a prefix or extension of a level is not it.
static void test_scope_and_text(void **state)
{
	(void)state;
	level_table t;
	node        a, b, c;
	int         p1, p2;
	level_table_init(&t);
	assert_null(find(&t, NULL, "x", 0));
	node_set(&a, &p1, "sensor", 0);
	node_set(&b, &p2, "sensor", 0);
	node_set(&c, NULL, "", 0);
	a.id = 1;
	b.id = 2;
	c.id = 3;
	assert_int_equal(level_table_add(&t, &a.key), NMQ_OK);
	assert_int_equal(level_table_add(&t, &b.key), NMQ_OK);
	assert_int_equal(level_table_add(&t, &c.key), NMQ_OK);
	assert_int_equal(t.n, 3);
	assert_int_equal(find(&t, &p1, "sensor", 0)->id, 1);
	assert_int_equal(find(&t, &p2, "sensor", 0)->id, 2);
	assert_int_equal(find(&t, NULL, "", 0)->id, 3); // an empty level is a level
	assert_null(find(&t, NULL, "sensor", 0));
	assert_null(find(&t, &p1, "senso", 0));
	assert_null(find(&t, &p1, "sensors", 0));
	level_table_del(&t, &a.key);
	assert_null(find(&t, &p1, "sensor", 0));
	assert_int_equal(find(&t, &p2, "sensor", 0)->id, 2);
	level_table_del(&t, &b.key);
	level_table_del(&t, &c.key);
	assert_int_equal(t.n, 0);
	assert_null(t.slots); // an empty table holds no memory
	assert_null(find(&t, NULL, "", 0));
}

// Keys that all hash to the last slot of the table form one probe run
// that wraps around to slot 0; deleting any of them must leave every
// other findable (backward shift across the wrap).
static void test_collisions_wrap(void **state)
{
	(void)state;
	enum { N = 5 };
	for (int victim = 0; victim < N; victim++) {
		level_table t;
		node        v[N];
		char        name[8];
		level_table_init(&t);
		for (int i = 0; i < N; i++) {
			snprintf(name, sizeof(name), "k%d", i);
			// 7 mod any capacity >= 8 is the last slot of an 8-table.
			node_set(&v[i], NULL, name, 0xFFFFFFF7u);
			v[i].id = i;
			assert_int_equal(level_table_add(&t, &v[i].key), NMQ_OK);
		}
		assert_int_equal(t.cap, 8);
		level_table_del(&t, &v[victim].key);
		for (int i = 0; i < N; i++) {
			snprintf(name, sizeof(name), "k%d", i);
			node *f = find(&t, NULL, name, 0xFFFFFFF7u);
			if (i == victim) {
				assert_null(f);
			} else {
				assert_non_null(f);
				assert_int_equal(f->id, i);
			}
		}
		level_table_fini(&t);
	}
}

// Grows past many doublings, then deletes most keys (shrinking) in an
// order unrelated to insertion; the table stays exact throughout.
static void test_grow_shrink(void **state)
{
	(void)state;
	enum { N = 3000 };
	level_table t;
	node       *v = calloc(N, sizeof(*v));
	char        name[16];
	assert_non_null(v);
	level_table_init(&t);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "lvl%d", i);
		node_set(&v[i], NULL, name, 0);
		v[i].id = i;
		assert_int_equal(level_table_add(&t, &v[i].key), NMQ_OK);
		assert_true((uint64_t)t.n * 4 <= (uint64_t)t.cap * 3);
	}
	uint32_t big = t.cap;
	for (int i = 0; i < N; i++) {
		int j = (i * 7919) % N; // a permutation (7919 is prime, N is not a multiple)
		if (j % 10 == 0) {
			continue; // keep every tenth
		}
		level_table_del(&t, &v[j].key);
	}
	assert_int_equal(t.n, N / 10);
	assert_true(t.cap < big);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "lvl%d", i);
		node *f = find(&t, NULL, name, 0);
		if (i % 10 == 0) {
			assert_non_null(f);
			assert_int_equal(f->id, i);
		} else {
			assert_null(f);
		}
	}
	// Teardown: pop returns each remaining key exactly once.
	int        popped = 0;
	level_key *k;
	while ((k = level_table_pop(&t)) != NULL) {
		node *n = LEVEL_ENTRY(k, node, key);
		assert_int_equal(n->id % 10, 0);
		n->id = -1;
		popped++;
	}
	assert_int_equal(popped, N / 10);
	level_table_fini(&t);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scope_and_text),
		cmocka_unit_test(test_collisions_wrap),
		cmocka_unit_test(test_grow_shrink),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
