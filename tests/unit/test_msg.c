// Unit tests of the reference-counted message and the memory accountant
// (nng/core/msg.c): layout of topic, properties and payload in one
// allocation, reference counting across threads, the byte counters going
// back to zero, size limits and expiry arithmetic.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "nng/core/msg.h"

// What one message of these sizes adds to the counters.
static uint64_t msg_size(size_t topic_len, size_t props_len, size_t payload_len)
{
	return sizeof(nmq_msg) + topic_len + 1 + props_len + payload_len;
}

static int check_zero(void **state)
{
	// Every test leaves the accountant where it found it.
	assert_int_equal(nmq_msg_bytes_in_use(), 0);
	assert_int_equal(nmq_mem_in_use(), 0);
	return 0;
}

static void test_layout(void **state)
{
	// The topic is copied up to topic_len (not to the first NUL of the
	// caller's buffer) and NUL-terminated in the message.
	const char src[] = "a/b/cXYZ";
	nmq_msg   *m     = nmq_msg_alloc(src, 5, 3, 4);
	assert_non_null(m);
	assert_int_equal(atomic_load(&m->ref), 1);
	assert_int_equal(m->topic_len, 5);
	assert_int_equal(m->props_len, 3);
	assert_int_equal(m->payload_len, 4);
	assert_string_equal(m->topic, "a/b/c");
	assert_ptr_equal(m->topic, (char *)m->data);
	// Properties right after the topic's NUL, the payload right after the
	// properties: one contiguous [props][payload] body.
	assert_ptr_equal(m->props, m->data + 6);
	assert_ptr_equal(m->payload, m->props + 3);
	// The rest is zero until the builder fills it.
	assert_int_equal(m->qos, 0);
	assert_false(m->retain);
	assert_int_equal(m->expiry_interval, 0);
	assert_int_equal(m->expiry_at_ms, 0);
	assert_int_equal(m->origin_id, 0);

	// The builder writes the whole body; nothing overlaps the topic (ASan
	// would flag a write past the allocation).
	memcpy(m->props, "\x01\x02\x03", 3);
	memcpy(m->payload, "data", 4);
	assert_memory_equal(m->props,
	    "\x01\x02\x03"
	    "data",
	    7);
	assert_string_equal(m->topic, "a/b/c");
	assert_int_equal(nmq_msg_bytes_in_use(), msg_size(5, 3, 4));
	nmq_msg_release(m);
}

static void test_empty_parts(void **state)
{
	nmq_msg *m = nmq_msg_alloc("t", 1, 0, 0);
	assert_non_null(m);
	assert_ptr_equal(m->props, m->payload);
	assert_ptr_equal(m->payload, m->data + 2);
	assert_int_equal(nmq_msg_bytes_in_use(), msg_size(1, 0, 0));
	nmq_msg_release(m);

	// A zero-length topic (a PUBLISH that uses a topic alias is resolved
	// before this, but the allocator itself does not refuse it).
	m = nmq_msg_alloc("", 0, 0, 2);
	assert_non_null(m);
	assert_string_equal(m->topic, "");
	assert_ptr_equal(m->payload, m->data + 1);
	nmq_msg_release(m);
}

static void test_size_limits(void **state)
{
	static char topic[UINT16_MAX + 1];
	memset(topic, 'x', sizeof(topic));

	nmq_msg *m = nmq_msg_alloc(topic, UINT16_MAX, 0, 0);
	assert_non_null(m);
	assert_int_equal(m->topic_len, UINT16_MAX);
	assert_int_equal(strlen(m->topic), UINT16_MAX);
	nmq_msg_release(m);

	// Sizes that do not fit the header's fields are refused, not cut, and
	// count nothing.
	assert_null(nmq_msg_alloc(topic, (size_t)UINT16_MAX + 1, 0, 0));
	if (SIZE_MAX > UINT32_MAX) {
		assert_null(nmq_msg_alloc("t", 1, (size_t)UINT32_MAX + 1, 0));
		assert_null(nmq_msg_alloc("t", 1, 0, (size_t)UINT32_MAX + 1));
	}
	assert_int_equal(nmq_msg_bytes_in_use(), 0);
}

static void test_refcount(void **state)
{
	nmq_msg *a = nmq_msg_alloc("x/y", 3, 2, 10);
	nmq_msg *b = nmq_msg_alloc("z", 1, 0, 1);
	assert_non_null(a);
	assert_non_null(b);
	uint64_t both = msg_size(3, 2, 10) + msg_size(1, 0, 1);
	assert_int_equal(nmq_msg_bytes_in_use(), both);

	nmq_msg_hold(a);
	nmq_msg_hold(a);
	assert_int_equal(atomic_load(&a->ref), 3);
	nmq_msg_release(a);
	nmq_msg_release(a);
	// Still held once: still counted, still readable.
	assert_int_equal(atomic_load(&a->ref), 1);
	assert_int_equal(nmq_msg_bytes_in_use(), both);
	assert_string_equal(a->topic, "x/y");

	nmq_msg_release(a); // the last reference frees it
	assert_int_equal(nmq_msg_bytes_in_use(), msg_size(1, 0, 1));
	nmq_msg_release(b);
	assert_int_equal(nmq_msg_bytes_in_use(), 0);

	nmq_msg_release(NULL); // no-op
	assert_int_equal(nmq_msg_bytes_in_use(), 0);
}

#define THREADS 4
#define ROUNDS  20000

typedef struct shared_msgs {
	nmq_msg   *m[8];
	atomic_int go;
} shared_msgs;

// Each thread takes and drops references to the shared messages, then drops
// the one reference it was given for each: the last of them frees.
static void *hammer(void *arg)
{
	shared_msgs *sh = arg;
	while (!atomic_load(&sh->go)) { }
	for (int i = 0; i < ROUNDS; i++) {
		nmq_msg *m = sh->m[i % 8];
		nmq_msg_hold(m);
		nmq_msg_hold(m);
		nmq_msg_release(m);
		nmq_msg_release(m);
	}
	for (int j = 0; j < 8; j++) {
		nmq_msg_release(sh->m[j]);
	}
	return NULL;
}

static void test_refcount_threads(void **state)
{
	shared_msgs sh;
	atomic_init(&sh.go, 0);
	for (int j = 0; j < 8; j++) {
		sh.m[j] = nmq_msg_alloc("t", 1, 0, 100);
		assert_non_null(sh.m[j]);
		// The creator's reference is handed over: one per thread.
		for (int k = 1; k < THREADS; k++) {
			nmq_msg_hold(sh.m[j]);
		}
	}
	assert_int_equal(nmq_msg_bytes_in_use(), 8 * msg_size(1, 0, 100));
	pthread_t th[THREADS];
	for (int k = 0; k < THREADS; k++) {
		assert_int_equal(pthread_create(&th[k], NULL, hammer, &sh), 0);
	}
	atomic_store(&sh.go, 1);
	for (int k = 0; k < THREADS; k++) {
		pthread_join(th[k], NULL);
	}
	// Each freed exactly once (ASan reports a double free or a leak).
	assert_int_equal(nmq_msg_bytes_in_use(), 0);
}

static void test_accountant(void **state)
{
	nmq_msg *m   = nmq_msg_alloc("t", 1, 0, 50);
	uint64_t one = msg_size(1, 0, 50);
	assert_non_null(m);
	assert_int_equal(nmq_mem_in_use(), one);

	// Buffers are counted with the messages.
	nmq_mem_buffers_add(4096);
	assert_int_equal(nmq_mem_in_use(), one + 4096);
	nmq_mem_buffers_add(-1024);
	assert_int_equal(nmq_mem_in_use(), one + 3072);
	assert_int_equal(nmq_msg_bytes_in_use(), one); // buffers are not messages

	// A shrink reported before the matching growth never makes the total
	// negative or wrap: the buffer part counts as zero meanwhile.
	nmq_mem_buffers_add(-3072 - 500);
	assert_int_equal(nmq_mem_in_use(), one);
	nmq_mem_buffers_add(500);
	assert_int_equal(nmq_mem_in_use(), one);

	nmq_msg_release(m);
	assert_int_equal(nmq_mem_in_use(), 0);
}

static void test_remaining(void **state)
{
	nmq_msg *m = nmq_msg_alloc("t", 1, 0, 0);
	assert_non_null(m);
	assert_int_equal(nmq_msg_remaining(m, 123456), UINT32_MAX); // never expires

	m->expiry_at_ms = 10000;
	assert_int_equal(nmq_msg_remaining(m, 0), 10);
	assert_int_equal(nmq_msg_remaining(m, 1), 10); // 9.999 s rounds up
	assert_int_equal(nmq_msg_remaining(m, 9000), 1);
	assert_int_equal(nmq_msg_remaining(m, 9999), 1);
	assert_int_equal(nmq_msg_remaining(m, 10000), 0); // expired at the deadline
	assert_int_equal(nmq_msg_remaining(m, 20000), 0);
	nmq_msg_release(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_layout, check_zero),
		cmocka_unit_test_teardown(test_empty_parts, check_zero),
		cmocka_unit_test_teardown(test_size_limits, check_zero),
		cmocka_unit_test_teardown(test_refcount, check_zero),
		cmocka_unit_test_teardown(test_refcount_threads, check_zero),
		cmocka_unit_test_teardown(test_accountant, check_zero),
		cmocka_unit_test_teardown(test_remaining, check_zero),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
