// Receiver-side accounting for `nanomq_cli bench`: the payload header that
// every bench message carries, a log-bucket latency histogram, a per-stream
// sequence tracker that tells new, duplicated and reordered messages apart,
// and a table of streams shared by the load generator's threads.
//
// Threading: a bench_hist and a bench_seq belong to one thread (each loop
// thread has its own histogram; the table protects each bench_seq with the
// lock of its bucket stripe). bench_streams_record() may be called from any
// thread at the same time; bench_streams_find() and bench_streams_tally()
// only once every recording thread has stopped.
//
// Memory: nothing here allocates per message. The table allocates one node
// the first time a stream is seen.
#ifndef NMQ_CLIENT_BENCH_STATS_H
#define NMQ_CLIENT_BENCH_STATS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// ---------------------------------------------------------------------------
// Payload header: "NQB1", publisher id (u32), sequence number (u64), send
// time (CLOCK_MONOTONIC ns, u64), all little-endian, then padding up to the
// requested message size.
#define BENCH_PAYLOAD_MAGIC "NQB1"
#define BENCH_PAYLOAD_HDR   24

// Writes the header into p, which must hold BENCH_PAYLOAD_HDR bytes.
void bench_payload_write(uint8_t *p, uint32_t pub_id, uint64_t seq, uint64_t ts_ns);

// Returns true and fills the fields if p[0..len) starts with a bench
// header; returns false for any other payload.
bool bench_payload_read(
    const uint8_t *p, size_t len, uint32_t *pub_id, uint64_t *seq, uint64_t *ts_ns);

// ---------------------------------------------------------------------------
// Latency histogram (HDR style): exact below 64 ns, then 64 linear
// sub-buckets per power of two, so any recorded value is reported within
// 1/128 of itself. Covers the whole uint64_t range; 30 KB per histogram.
#define BENCH_HIST_SUB_BITS 6
#define BENCH_HIST_SUB      (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_BUCKETS  ((64 - BENCH_HIST_SUB_BITS + 1) * BENCH_HIST_SUB)

typedef struct bench_hist {
	uint64_t count;
	uint64_t min;
	uint64_t max;
	double   sum;
	uint64_t buckets[BENCH_HIST_BUCKETS];
} bench_hist;

void bench_hist_init(bench_hist *h);
void bench_hist_record(bench_hist *h, uint64_t v);
void bench_hist_merge(bench_hist *dst, const bench_hist *src);

// Returns the value at percentile p (0..100): the midpoint of the bucket
// that holds it, clamped to the recorded min and max; 0 if h is empty.
uint64_t bench_hist_percentile(const bench_hist *h, double p);

// ---------------------------------------------------------------------------
// Sequence tracker for one stream (one receiver, one publisher, one topic).
// Remembers which of the last BENCH_SEQ_WINDOW numbers below the highest one
// were seen; a number older than that window is counted as reordered (and
// late), since it can no longer be told apart from a duplicate.
#define BENCH_SEQ_WINDOW 4096

enum bench_seq_result {
	BENCH_SEQ_NEW       = 0, // first time seen, in order
	BENCH_SEQ_REORDERED = 1, // first time seen, after a higher number
	BENCH_SEQ_DUP       = 2, // seen before
	BENCH_SEQ_LATE      = 3, // below the window: counted reordered and late
};

typedef struct bench_seq {
	bool     started;
	uint64_t first; // lowest number seen
	uint64_t high; // highest number seen
	uint64_t unique; // distinct numbers seen
	uint64_t dups; // arrivals of a number already seen
	uint64_t reordered; // distinct numbers that arrived after a higher one
	uint64_t late; // of which were too old for the window
	uint64_t bits[BENCH_SEQ_WINDOW / 64];
} bench_seq;

void bench_seq_init(bench_seq *s);

// Records one arrival and returns an enum bench_seq_result.
int bench_seq_add(bench_seq *s, uint64_t seq);

// Returns the numbers missing between the lowest and highest seen.
uint64_t bench_seq_gaps(const bench_seq *s);

// ---------------------------------------------------------------------------
// The stream table.
typedef struct bench_stream {
	struct bench_stream *next;
	uint64_t             receiver; // subscriber index, or shared-group id
	uint64_t             topic_hash; // bench_topic_hash() of the topic
	uint32_t             pub_id;
	bool                 matched; // set by the final accounting
	bench_seq            seq;
} bench_stream;

#define BENCH_STREAM_LOCKS 256

typedef struct bench_streams {
	bench_stream  **buckets;
	size_t          mask;
	size_t          max_streams;
	size_t          count; // guarded by `grow` below
	pthread_mutex_t grow;
	pthread_mutex_t locks[BENCH_STREAM_LOCKS];
} bench_streams;

// Prepares a table sized for about `expected` streams that accepts at most
// `max_streams`. Returns 0, or -1 if memory is short.
int  bench_streams_init(bench_streams *t, size_t expected, size_t max_streams);
void bench_streams_fini(bench_streams *t);

// Records the arrival of `seq` on a stream, creating the stream when it is
// new. Returns an enum bench_seq_result, or -1 when the stream is new and
// the table is full or memory is short (the arrival is then not tracked).
int bench_streams_record(
    bench_streams *t, uint64_t receiver, uint32_t pub_id, uint64_t topic_hash, uint64_t seq);

// Returns the stream, or NULL if it was never seen. Not thread-safe.
bench_stream *bench_streams_find(
    bench_streams *t, uint64_t receiver, uint32_t pub_id, uint64_t topic_hash);

// Sums over every stream. Not thread-safe.
typedef struct bench_tally {
	uint64_t streams;
	uint64_t unique;
	uint64_t dups;
	uint64_t reordered;
	uint64_t late;
	uint64_t gaps; // missing between the lowest and highest seen
	uint64_t unmatched; // unique messages on streams nobody expected
	uint64_t unmatched_streams;
} bench_tally;
void bench_streams_tally(const bench_streams *t, bench_tally *out);

// 64-bit FNV-1a of a topic.
uint64_t bench_topic_hash(const uint8_t *s, size_t len);

// ---------------------------------------------------------------------------
// Runs the built-in checks of this module: crafted sequences with known
// loss, duplication and reordering, and histogram accuracy. Writes one line
// per check to `out` and returns the number of failed checks (0 = pass).
int bench_stats_selftest(FILE *out);

#endif // NMQ_CLIENT_BENCH_STATS_H
