// Unit tests of the drop and deny log (nng/core/droplog.h): counters per
// reason, the ring (wrap-around, newest first, batches), cutting long
// client ids and topics at a UTF-8 boundary, the JSON rendering, and
// concurrent writers leaving no torn entry.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/core/droplog.h"

static void test_counters_without_ring(void **state)
{
	(void)state;
	assert_int_equal(droplog_init(0), 0);
	uint64_t before = droplog_count(DROP_QUEUE_FULL);
	droplog_record(DROP_QUEUE_FULL, "c1", "a/b", 3, 1, 1);
	droplog_record(DROP_QUEUE_FULL, "c1", "a/b", 3, 1, 4);
	assert_int_equal(droplog_count(DROP_QUEUE_FULL), before + 5);
	droplog_event ev[4];
	assert_int_equal(droplog_snapshot(ev, 4), 0);
	// Out of range reasons are ignored, not counted anywhere.
	droplog_record(DROP_REASON_COUNT, "c", NULL, 0, 0, 1);
	assert_string_equal(droplog_reason_name(DROP_REASON_COUNT), "?");
	assert_string_equal(droplog_reason_name(DROP_EXPIRED), "expired");
	droplog_fini();
}

static void test_ring_wraps_newest_first(void **state)
{
	(void)state;
	assert_int_equal(droplog_init(4), 0);
	char c[16], t[16];
	for (int i = 0; i < 10; i++) {
		snprintf(c, sizeof(c), "c%d", i);
		snprintf(t, sizeof(t), "t/%d", i);
		droplog_record(i % 2 ? DROP_EXPIRED : DENY_AUTH, c, t, strlen(t),
		    i % 2 ? (uint8_t)(i % 3) : DROPLOG_NO_QOS, 1);
	}
	droplog_event ev[8];
	size_t        n = droplog_snapshot(ev, 8);
	assert_int_equal(n, 4);
	for (size_t k = 0; k < n; k++) {
		int i = 9 - (int)k; // newest first: 9, 8, 7, 6
		snprintf(c, sizeof(c), "c%d", i);
		snprintf(t, sizeof(t), "t/%d", i);
		assert_int_equal(ev[k].seq, (uint64_t)i + 1);
		assert_string_equal(ev[k].client, c);
		assert_string_equal(ev[k].topic, t);
		assert_int_equal(ev[k].reason, i % 2 ? DROP_EXPIRED : DENY_AUTH);
		assert_int_equal(ev[k].qos, i % 2 ? i % 3 : DROPLOG_NO_QOS);
		assert_int_equal(ev[k].count, 1);
		assert_true(ev[k].ts_ms > 1600000000000ULL);
	}
	assert_int_equal(droplog_snapshot(ev, 2), 2);
	assert_int_equal(ev[0].seq, 10);
	assert_int_equal(ev[1].seq, 9);
	droplog_fini();
}

static void test_cut_at_utf8_boundary(void **state)
{
	(void)state;
	assert_int_equal(droplog_init(2), 0);
	// 127 ASCII bytes then a 3-byte character (U+20AC): the cut at 128
	// would split it, so the topic keeps the 127 bytes only.
	char topic[200];
	memset(topic, 'a', 127);
	memcpy(topic + 127, "\xE2\x82\xAC", 3);
	memcpy(topic + 130, "zz", 2);
	char client[100];
	memset(client, 'x', sizeof(client) - 1);
	client[sizeof(client) - 1] = '\0';
	droplog_record(DROP_TOO_LARGE, client, topic, 132, 2, 1);
	droplog_event ev[1];
	assert_int_equal(droplog_snapshot(ev, 1), 1);
	assert_int_equal(strlen(ev[0].topic), 127);
	assert_int_equal(strlen(ev[0].client), DROPLOG_CLIENT_MAX);
	// Exactly at the boundary: the character is kept whole.
	memset(topic, 'a', 125);
	memcpy(topic + 125, "\xE2\x82\xAC", 3);
	droplog_record(DROP_TOO_LARGE, "c", topic, 128, 2, 1);
	assert_int_equal(droplog_snapshot(ev, 1), 1);
	assert_int_equal(strlen(ev[0].topic), 128);
	assert_memory_equal(ev[0].topic + 125, "\xE2\x82\xAC", 3);
	droplog_fini();
}

static void test_json(void **state)
{
	(void)state;
	assert_int_equal(droplog_init(8), 0);
	droplog_record(DROP_ACL_PUBLISH, "we\"ird\\id", "t/\x01x", 4, 1, 1);
	droplog_record(DENY_MAX_CONNECTIONS, "cc", NULL, 0, DROPLOG_NO_QOS, 1);
	droplog_record(DROP_ACL_REQUEUE, "dd", NULL, 0, DROPLOG_NO_QOS, 7);
	char *j = droplog_json(2);
	assert_non_null(j);
	assert_non_null(strstr(j, "\"code\":0,\"capacity\":8,\"counters\":{\"queue_full\":"));
	// Newest first, limited to 2: the ACL publish event is not listed.
	char *a = strstr(j,
	    "\"reason\":\"acl_requeue\",\"clientid\":\"dd\",\"topic\":\"\","
	    "\"qos\":null,\"count\":7}");
	char *b = strstr(j, "\"reason\":\"max_connections\",\"clientid\":\"cc\"");
	assert_non_null(a);
	assert_non_null(b);
	assert_true(a < b);
	assert_null(strstr(j, "acl_publish\",\"clientid"));
	free(j);
	j = droplog_json(100);
	assert_non_null(j);
	assert_non_null(
	    strstr(j, "\"clientid\":\"we\\\"ird\\\\id\",\"topic\":\"t/\\u0001x\",\"qos\":1,"));
	// The time field is ISO 8601 UTC with milliseconds.
	char *tm = strstr(j, "\"time\":\"");
	assert_non_null(tm);
	tm += 8;
	assert_true(strlen(tm) > 24);
	assert_true(
	    tm[4] == '-' && tm[7] == '-' && tm[10] == 'T' && tm[19] == '.' && tm[23] == 'Z');
	free(j);
	droplog_fini();
}

#define WRITERS 4
#define ROUNDS  20000

static void *writer(void *arg)
{
	int  w = (int)(intptr_t)arg;
	char c[32], t[64];
	for (int i = 0; i < ROUNDS; i++) {
		snprintf(c, sizeof(c), "w%d-%d", w, i);
		int n = snprintf(t, sizeof(t), "topic/w%d-%d/end", w, i);
		droplog_record(DROP_QUEUE_FULL, c, t, (size_t)n, (uint8_t)w % 3, 1);
	}
	return NULL;
}

static void test_concurrent_writers(void **state)
{
	(void)state;
	assert_int_equal(droplog_init(64), 0);
	uint64_t  before = droplog_count(DROP_QUEUE_FULL);
	pthread_t th[WRITERS];
	for (int w = 0; w < WRITERS; w++) {
		pthread_create(&th[w], NULL, writer, (void *)(intptr_t)w);
	}
	droplog_event ev[64];
	for (int round = 0; round < 200; round++) {
		size_t n = droplog_snapshot(ev, 64);
		for (size_t k = 0; k < n; k++) {
			// Each entry is whole: its topic is built from its client id.
			char t[96];
			snprintf(t, sizeof(t), "topic/%s/end", ev[k].client);
			assert_string_equal(ev[k].topic, t);
			if (k > 0) {
				assert_int_equal(ev[k].seq + 1, ev[k - 1].seq);
			}
		}
	}
	for (int w = 0; w < WRITERS; w++) {
		pthread_join(th[w], NULL);
	}
	assert_int_equal(droplog_count(DROP_QUEUE_FULL), before + WRITERS * ROUNDS);
	assert_int_equal(droplog_snapshot(ev, 64), 64);
	assert_int_equal(ev[0].seq, WRITERS * ROUNDS);
	droplog_fini();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_without_ring),
		cmocka_unit_test(test_ring_wraps_newest_first),
		cmocka_unit_test(test_cut_at_utf8_boundary),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_concurrent_writers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
