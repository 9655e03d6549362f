// Unit tests of the connection object (nng/transport/conn*.c) over a
// socketpair(): a minimal upper layer (conn_ops) on the broker's end, the
// test as the peer on the other.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "nng/transport/conn.h"
#include "nng/transport/workq.h"

static atomic_int closed_calls;

static int upper_frame(void *upper, const uint8_t *frame, size_t len)
{
	(void)upper;
	(void)frame;
	(void)len;
	return 0;
}

static void upper_too_large(void *upper, uint32_t size)
{
	(void)upper;
	(void)size;
}

static void upper_closed(void *upper)
{
	(void)upper;
	atomic_fetch_add(&closed_calls, 1);
}

static void upper_writable(void *upper)
{
	(void)upper;
}

static const conn_ops ops = {
	.frame     = upper_frame,
	.too_large = upper_too_large,
	.closed    = upper_closed,
	.writable  = upper_writable,
};

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) { }
}

// Waits until every connection is destroyed (at most 5 s).
static void wait_no_conns(void)
{
	for (int i = 0; i < 500 && conn_live_count() > 0; i++) {
		sleep_ms(10);
	}
	assert_int_equal(conn_live_count(), 0);
}

// Once a lingering close has begun (the last packet is out and the socket
// half-closed), nothing more is written, even if the upper layer queues
// and flushes more (e.g. a message delivered to the session before it
// learns of the close): a write after the half-close fails, and the
// connection would then be closed at once, resetting a peer that is still
// sending, which is what the linger is there to avoid. The peer can go on
// writing until it closes.
static void test_no_output_after_linger_begins(void **state)
{
	(void)state;
	workq   *wq  = workq_alloc(1);
	conn_env env = { .wq = wq, .max_packet_size = 1 << 20, .tx_high_water = 1 << 16 };
	int      sv[2];
	assert_non_null(wq);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
	struct timeval tv = { 5, 0 };
	setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	nmq_conn *c = conn_alloc_fd(sv[0], &env);
	assert_non_null(c);
	conn_start(c, &ops, NULL);

	// The last packet, then the drain: the peer reads it, then the end of
	// the stream (the half-close).
	static const uint8_t last[] = { 0xE0, 0x00 };
	conn_tx_lock(c);
	uint8_t *b = conn_tx_reserve(c, sizeof(last));
	assert_non_null(b);
	memcpy(b, last, sizeof(last));
	conn_tx_commit(c, sizeof(last));
	conn_tx_unlock(c);
	conn_shutdown(c);
	conn_tx_flush_later(c);
	uint8_t got[8];
	assert_int_equal(read(sv[1], got, sizeof(got)), (ssize_t)sizeof(last));
	assert_memory_equal(got, last, sizeof(last));
	assert_int_equal(read(sv[1], got, sizeof(got)), 0);
	for (int i = 0; i < 500 && atomic_load(&closed_calls) == 0; i++) {
		sleep_ms(10);
	}
	assert_int_equal(atomic_load(&closed_calls), 1);

	// More output from the upper layer is refused.
	conn_tx_lock(c);
	b = conn_tx_reserve(c, 4);
	if (b != NULL) {
		memset(b, 0x30, 4);
		conn_tx_commit(c, 4);
	}
	conn_tx_unlock(c);
	conn_tx_flush_later(c);
	sleep_ms(100);

	// The peer is still read from and discarded, not reset.
	static const uint8_t more[64] = { 0x30 };
	for (int i = 0; i < 5; i++) {
		assert_int_equal(write(sv[1], more, sizeof(more)), (ssize_t)sizeof(more));
		sleep_ms(20);
	}
	assert_null(b);
	close(sv[1]); // ends the linger
	conn_release(c);
	wait_no_conns();
	workq_free(wq);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); // as the broker does
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_output_after_linger_begins),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
