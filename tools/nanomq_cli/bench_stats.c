// Receiver-side accounting for the bench tool; see bench_stats.h.
#include "tools/nanomq_cli/bench_stats.h"

#include <stdlib.h>
#include <string.h>

// Stores v little-endian in p[0..4).
static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

// Stores v little-endian in p[0..8).
static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

// Returns the little-endian u32 at p.
static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

// Returns the little-endian u64 at p.
static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

// Writes the bench header; it cannot fail.
void bench_payload_write(uint8_t *p, uint32_t pub_id, uint64_t seq, uint64_t ts_ns)
{
	memcpy(p, BENCH_PAYLOAD_MAGIC, 4);
	put_u32(p + 4, pub_id);
	put_u64(p + 8, seq);
	put_u64(p + 16, ts_ns);
}

// Returns true if the payload carries a bench header, false otherwise.
bool bench_payload_read(
    const uint8_t *p, size_t len, uint32_t *pub_id, uint64_t *seq, uint64_t *ts_ns)
{
	if (len < BENCH_PAYLOAD_HDR || memcmp(p, BENCH_PAYLOAD_MAGIC, 4) != 0) {
		return false;
	}
	*pub_id = get_u32(p + 4);
	*seq    = get_u64(p + 8);
	*ts_ns  = get_u64(p + 16);
	return true;
}

// ---------------------------------------------------------------------------

// Returns the bucket that holds v; always a valid index.
static unsigned hist_index(uint64_t v)
{
	if (v < BENCH_HIST_SUB) {
		return (unsigned)v;
	}
	unsigned e     = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = e - BENCH_HIST_SUB_BITS;
	return (shift + 1) * BENCH_HIST_SUB + (unsigned)((v >> shift) - BENCH_HIST_SUB);
}

// Returns the midpoint of bucket idx.
static uint64_t hist_mid(unsigned idx)
{
	if (idx < BENCH_HIST_SUB) {
		return idx;
	}
	unsigned shift = idx / BENCH_HIST_SUB - 1;
	uint64_t m     = idx % BENCH_HIST_SUB + BENCH_HIST_SUB;
	uint64_t low   = m << shift;
	uint64_t width = (uint64_t)1 << shift;
	return low + width / 2;
}

// Empties h; it cannot fail.
void bench_hist_init(bench_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

// Counts one value; it cannot fail.
void bench_hist_record(bench_hist *h, uint64_t v)
{
	h->buckets[hist_index(v)]++;
	h->count++;
	h->sum += (double)v;
	if (v < h->min) {
		h->min = v;
	}
	if (v > h->max) {
		h->max = v;
	}
}

// Adds src into dst; it cannot fail.
void bench_hist_merge(bench_hist *dst, const bench_hist *src)
{
	if (src->count == 0) {
		return;
	}
	for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
		dst->buckets[i] += src->buckets[i];
	}
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min) {
		dst->min = src->min;
	}
	if (src->max > dst->max) {
		dst->max = src->max;
	}
}

// Returns the value at percentile p, or 0 for an empty histogram.
uint64_t bench_hist_percentile(const bench_hist *h, double p)
{
	if (h->count == 0) {
		return 0;
	}
	if (p >= 100.0) {
		return h->max;
	}
	uint64_t rank = (uint64_t)((p / 100.0) * (double)h->count);
	if (rank >= h->count) {
		rank = h->count - 1;
	}
	uint64_t seen = 0;
	for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen > rank) {
			uint64_t v = hist_mid(i);
			if (v < h->min) {
				v = h->min;
			}
			if (v > h->max) {
				v = h->max;
			}
			return v;
		}
	}
	return h->max;
}

// ---------------------------------------------------------------------------

#define SEQ_BIT(s, n) ((s)->bits[((n) % BENCH_SEQ_WINDOW) / 64] & (1ull << ((n) % 64)))
#define SEQ_SET(s, n) ((s)->bits[((n) % BENCH_SEQ_WINDOW) / 64] |= (1ull << ((n) % 64)))
#define SEQ_CLR(s, n) ((s)->bits[((n) % BENCH_SEQ_WINDOW) / 64] &= ~(1ull << ((n) % 64)))

// Resets a tracker; it cannot fail.
void bench_seq_init(bench_seq *s)
{
	memset(s, 0, sizeof(*s));
}

// Records one arrival and returns how it was classified.
int bench_seq_add(bench_seq *s, uint64_t seq)
{
	if (!s->started) {
		s->started = true;
		s->first   = seq;
		s->high    = seq;
		s->unique  = 1;
		memset(s->bits, 0, sizeof(s->bits));
		SEQ_SET(s, seq);
		return BENCH_SEQ_NEW;
	}
	if (seq > s->high) {
		// Numbers (high, seq] take the slots of those leaving the window.
		if (seq - s->high >= BENCH_SEQ_WINDOW) {
			memset(s->bits, 0, sizeof(s->bits));
		} else {
			for (uint64_t n = s->high + 1; n <= seq; n++) {
				SEQ_CLR(s, n);
			}
		}
		SEQ_SET(s, seq);
		s->high = seq;
		s->unique++;
		return BENCH_SEQ_NEW;
	}
	if (s->high - seq >= BENCH_SEQ_WINDOW) {
		s->unique++;
		s->reordered++;
		s->late++;
		if (seq < s->first) {
			s->first = seq;
		}
		return BENCH_SEQ_LATE;
	}
	if (SEQ_BIT(s, seq)) {
		s->dups++;
		return BENCH_SEQ_DUP;
	}
	SEQ_SET(s, seq);
	s->unique++;
	s->reordered++;
	if (seq < s->first) {
		s->first = seq;
	}
	return BENCH_SEQ_REORDERED;
}

// Returns how many numbers between the lowest and highest seen are missing.
uint64_t bench_seq_gaps(const bench_seq *s)
{
	if (!s->started) {
		return 0;
	}
	uint64_t span = s->high - s->first + 1;
	return span > s->unique ? span - s->unique : 0;
}

// ---------------------------------------------------------------------------

// Returns the 64-bit FNV-1a hash of s[0..len).
uint64_t bench_topic_hash(const uint8_t *s, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++) {
		h ^= s[i];
		h *= 1099511628211ull;
	}
	return h;
}

// Returns the bucket of a stream key.
static size_t stream_bucket(
    const bench_streams *t, uint64_t receiver, uint32_t pub_id, uint64_t topic_hash)
{
	uint64_t h = topic_hash ^ (receiver * 0x9E3779B97F4A7C15ull)
	    ^ ((uint64_t)pub_id * 0xC2B2AE3D27D4EB4Full);
	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	h ^= h >> 32;
	return (size_t)h & t->mask;
}

// Returns 0 with the table ready, or -1 if memory is short.
int bench_streams_init(bench_streams *t, size_t expected, size_t max_streams)
{
	size_t n = 1024;
	while (n < expected * 2 && n < ((size_t)1 << 26)) {
		n <<= 1;
	}
	memset(t, 0, sizeof(*t));
	t->buckets = calloc(n, sizeof(*t->buckets));
	if (t->buckets == NULL) {
		return -1;
	}
	t->mask        = n - 1;
	t->max_streams = max_streams;
	pthread_mutex_init(&t->grow, NULL);
	for (int i = 0; i < BENCH_STREAM_LOCKS; i++) {
		pthread_mutex_init(&t->locks[i], NULL);
	}
	return 0;
}

// Frees every stream and the table; it cannot fail.
void bench_streams_fini(bench_streams *t)
{
	if (t->buckets == NULL) {
		return;
	}
	for (size_t i = 0; i <= t->mask; i++) {
		bench_stream *s = t->buckets[i];
		while (s != NULL) {
			bench_stream *next = s->next;
			free(s);
			s = next;
		}
	}
	free(t->buckets);
	t->buckets = NULL;
	pthread_mutex_destroy(&t->grow);
	for (int i = 0; i < BENCH_STREAM_LOCKS; i++) {
		pthread_mutex_destroy(&t->locks[i]);
	}
}

// Returns the stream of a key in chain `head`, or NULL.
static bench_stream *chain_find(
    bench_stream *head, uint64_t receiver, uint32_t pub_id, uint64_t topic_hash)
{
	for (bench_stream *s = head; s != NULL; s = s->next) {
		if (s->receiver == receiver && s->pub_id == pub_id && s->topic_hash == topic_hash) {
			return s;
		}
	}
	return NULL;
}

// Returns the classification of the arrival, or -1 if it cannot be tracked.
int bench_streams_record(
    bench_streams *t, uint64_t receiver, uint32_t pub_id, uint64_t topic_hash, uint64_t seq)
{
	size_t           b    = stream_bucket(t, receiver, pub_id, topic_hash);
	pthread_mutex_t *lock = &t->locks[b % BENCH_STREAM_LOCKS];
	int              rv;

	pthread_mutex_lock(lock);
	bench_stream *s = chain_find(t->buckets[b], receiver, pub_id, topic_hash);
	if (s == NULL) {
		bool room;
		pthread_mutex_lock(&t->grow);
		room = t->count < t->max_streams;
		if (room) {
			t->count++;
		}
		pthread_mutex_unlock(&t->grow);
		if (!room || (s = malloc(sizeof(*s))) == NULL) {
			pthread_mutex_unlock(lock);
			return -1;
		}
		s->receiver   = receiver;
		s->pub_id     = pub_id;
		s->topic_hash = topic_hash;
		s->matched    = false;
		bench_seq_init(&s->seq);
		s->next       = t->buckets[b];
		t->buckets[b] = s;
	}
	rv = bench_seq_add(&s->seq, seq);
	pthread_mutex_unlock(lock);
	return rv;
}

// Returns the stream of a key, or NULL if it was never seen.
bench_stream *bench_streams_find(
    bench_streams *t, uint64_t receiver, uint32_t pub_id, uint64_t topic_hash)
{
	return chain_find(t->buckets[stream_bucket(t, receiver, pub_id, topic_hash)], receiver,
	    pub_id, topic_hash);
}

// Sums the trackers of every stream into out; it cannot fail.
void bench_streams_tally(const bench_streams *t, bench_tally *out)
{
	memset(out, 0, sizeof(*out));
	if (t->buckets == NULL) {
		return;
	}
	for (size_t i = 0; i <= t->mask; i++) {
		for (const bench_stream *s = t->buckets[i]; s != NULL; s = s->next) {
			out->streams++;
			out->unique += s->seq.unique;
			out->dups += s->seq.dups;
			out->reordered += s->seq.reordered;
			out->late += s->seq.late;
			out->gaps += bench_seq_gaps(&s->seq);
			if (!s->matched) {
				out->unmatched += s->seq.unique;
				out->unmatched_streams++;
			}
		}
	}
}

// ---------------------------------------------------------------------------

// Prints one check and returns 1 if it failed, 0 if it passed.
static int check(FILE *out, const char *what, uint64_t got, uint64_t want)
{
	fprintf(out, "%s %s: got %llu, want %llu\n", got == want ? "ok  " : "FAIL", what,
	    (unsigned long long)got, (unsigned long long)want);
	return got == want ? 0 : 1;
}

// Returns the number of failed checks of the crafted sequences and the
// histogram; 0 means every check passed.
int bench_stats_selftest(FILE *out)
{
	int           fails = 0;
	bench_streams t;
	bench_stream *s;
	uint8_t       hdr[BENCH_PAYLOAD_HDR];
	uint32_t      pid;
	uint64_t      seq, ts;

	if (bench_streams_init(&t, 16, 1000) != 0) {
		fprintf(out, "FAIL out of memory\n");
		return 1;
	}

	// Stream 1: 0..999 in order.
	for (uint64_t i = 0; i < 1000; i++) {
		bench_streams_record(&t, 1, 7, 11, i);
	}
	s = bench_streams_find(&t, 1, 7, 11);
	fails += check(out, "in-order unique", s ? s->seq.unique : 0, 1000);
	fails += check(out, "in-order gaps", s ? bench_seq_gaps(&s->seq) : 1, 0);
	fails += check(out, "in-order dups", s ? s->seq.dups : 1, 0);
	fails += check(out, "in-order reordered", s ? s->seq.reordered : 1, 0);

	// Stream 2: 0..99 with 10, 20 and 30 lost, 40 and 41 twice, and 50/51
	// swapped.
	for (uint64_t i = 0; i < 100; i++) {
		if (i == 10 || i == 20 || i == 30) {
			continue;
		}
		if (i == 50) {
			bench_streams_record(&t, 2, 7, 11, 51);
			bench_streams_record(&t, 2, 7, 11, 50);
			i = 51;
			continue;
		}
		bench_streams_record(&t, 2, 7, 11, i);
		if (i == 40 || i == 41) {
			bench_streams_record(&t, 2, 7, 11, i);
		}
	}
	s = bench_streams_find(&t, 2, 7, 11);
	fails += check(out, "crafted unique", s ? s->seq.unique : 0, 97);
	fails += check(out, "crafted gaps (lost)", s ? bench_seq_gaps(&s->seq) : 0, 3);
	fails += check(out, "crafted dups", s ? s->seq.dups : 0, 2);
	fails += check(out, "crafted reordered", s ? s->seq.reordered : 0, 1);

	// Stream 3: a number far behind the window counts as late.
	bench_streams_record(&t, 3, 7, 11, 0);
	bench_streams_record(&t, 3, 7, 11, 5000);
	bench_streams_record(&t, 3, 7, 11, 1);
	s = bench_streams_find(&t, 3, 7, 11);
	fails += check(out, "late counted", s ? s->seq.late : 0, 1);

	// A table that is full refuses new streams but keeps old ones.
	bench_streams small;
	if (bench_streams_init(&small, 1, 1) == 0) {
		fails += check(out, "full table accepts first",
		    (uint64_t)(bench_streams_record(&small, 1, 1, 1, 0) == BENCH_SEQ_NEW), 1);
		fails += check(out, "full table refuses second",
		    (uint64_t)(bench_streams_record(&small, 2, 1, 1, 0) == -1), 1);
		bench_streams_fini(&small);
	}

	bench_tally tally;
	bench_streams_tally(&t, &tally);
	fails += check(out, "tally streams", tally.streams, 3);
	fails += check(out, "tally dups", tally.dups, 2);
	bench_streams_fini(&t);

	// Payload round trip; a foreign payload is rejected.
	bench_payload_write(hdr, 0xdeadbeef, 1234567890123ull, 42);
	fails
	    += check(out, "payload read", bench_payload_read(hdr, sizeof(hdr), &pid, &seq, &ts), 1);
	fails += check(out, "payload pub id", pid, 0xdeadbeef);
	fails += check(out, "payload seq", seq, 1234567890123ull);
	fails += check(out, "payload ts", ts, 42);
	fails += check(out, "foreign payload",
	    bench_payload_read((const uint8_t *)"hello", 5, &pid, &seq, &ts), 0);

	// Histogram: 1..1,000,000 ns uniform; percentiles within 1%.
	bench_hist *h = malloc(sizeof(*h));
	if (h == NULL) {
		fprintf(out, "FAIL out of memory\n");
		return fails + 1;
	}
	bench_hist_init(h);
	for (uint64_t v = 1; v <= 1000000; v++) {
		bench_hist_record(h, v);
	}
	const double pct[] = { 50, 90, 99 };
	for (int i = 0; i < 3; i++) {
		uint64_t want = (uint64_t)(pct[i] * 10000);
		uint64_t got  = bench_hist_percentile(h, pct[i]);
		uint64_t err  = got > want ? got - want : want - got;
		char     what[64];
		snprintf(what, sizeof(what), "hist p%.0f within 1%%", pct[i]);
		fails += check(out, what, err * 100 <= want, 1);
	}
	fails += check(out, "hist max", bench_hist_percentile(h, 100), 1000000);
	fails += check(out, "hist small exact", hist_mid(hist_index(37)), 37);
	free(h);
	return fails;
}
