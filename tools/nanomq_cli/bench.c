// The bench load generator; see bench.h.
#include "tools/nanomq_cli/bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tools/nanomq_cli/bench_stats.h"
#include "tools/nanomq_cli/cli_client.h"

enum { ROLE_SUB = 0, ROLE_PUB = 1, ROLE_CONN = 2, ROLES = 3 };

enum {
	PH_INIT = 0,
	PH_CONNECT_SUBS, // subscribers (or bench conn clients) connect and subscribe
	PH_CONNECT_PUBS,
	PH_RUN,
	PH_STOP_PUB, // publishers stop; in-flight messages complete
	PH_DISCONNECT,
};

#define BENCH_QUIET_MS     1000 // drain ends after this long without progress
#define BENCH_EXIT_WAIT_MS 5000 // how long DISCONNECT may take in all
#define BENCH_MAX_STREAMS  20000000 // stream table cap

typedef struct bench_thread bench_thread;

// A counter written by one thread and read by main.
typedef _Atomic uint64_t counter;

// Adds n to a counter owned by the calling thread (no locked instruction).
static inline void bump(counter *c, uint64_t n)
{
	atomic_store_explicit(
	    c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

// Returns a counter's value; any thread.
static inline uint64_t peek(counter *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

// One simulated client. Owned by its thread once the threads run; main
// reads `next_seq` (through issued counters) only after the threads exit.
typedef struct bench_client {
	cli_conn      conn;
	bench_thread *th;
	uint32_t      index; // start number + position
	uint8_t       role;
	bool          connecting;
	bool          connected;
	bool          done; // publisher reached -L
	char         *topic; // publish topic or subscription filter
	size_t        topic_len;
	uint64_t      receiver; // subscriber: accounting key
	uint32_t      fan; // publisher: receivers that expect its messages
	uint64_t      next_seq; // publisher: sequence numbers issued
	uint64_t      owed; // publisher: paced messages due but not sent
	uint64_t      next_due;
	uint64_t      held; // --fault-swap: number held back
	bool          have_held;
	cli_timer     tick;
	// Publisher, QoS 1/2: when each packet id (1..window) was queued, 0 if
	// it is not in flight; for the ack latency.
	uint64_t *sent_ns;
	uint16_t  sent_cap;
	char      id[64];
} bench_client;

struct bench_thread {
	cli_loop       loop;
	pthread_t      tid;
	uint32_t       no;
	bench_client **mine[ROLES]; // this thread's clients by role
	uint32_t       nmine[ROLES];
	// Connection ramp of the current phase.
	bench_client **queue;
	uint32_t       nqueue;
	uint32_t       qnext;
	uint32_t       connecting;
	cli_timer      ramp;
	int            phase;
	uint32_t       live; // started and not closed
	bool           run; // publishers may publish
	uint8_t       *payload; // message template
	bench_hist    *hist;
	bench_hist    *ack_hist; // publish to PUBACK / PUBCOMP
	// Counters for main.
	counter     connected[ROLES];
	counter     failed[ROLES];
	counter     subscribed;
	counter     sub_failed;
	counter     sent; // PUBLISH packets queued
	counter     issued; // sequence numbers issued
	counter     expect; // deliveries expected from the issued numbers
	counter     acked; // QoS 1/2 completed
	counter     refused; // of which with a failure reason
	counter     received; // first arrivals
	counter     dups;
	counter     reordered;
	counter     foreign; // payloads without a bench header
	counter     untracked;
	counter     closed; // unexpected closes after connecting
	counter     pubs_done;
	counter     first_connect_ns;
	counter     last_connack_ns;
	counter     first_rx_ns;
	counter     last_rx_ns;
	atomic_bool exited;
};

// A receiver: one subscriber, or one shared-subscription group.
typedef struct bench_receiver {
	uint64_t    id;
	const char *filter; // without "$share/<group>/"
} bench_receiver;

// A (receiver, publisher) pair whose messages are expected.
typedef struct bench_pair {
	uint32_t recv;
	uint32_t pub;
} bench_pair;

// The run. Written by main before the threads start; afterwards threads
// only read it, except `phase` and `streams` (which has its own locks).
static struct {
	cli_opts       *o;
	cli_conn_cfg    cfg;
	bench_thread   *threads;
	uint32_t        nthreads;
	bench_client   *clients[ROLES];
	uint32_t        n[ROLES];
	bench_streams   streams;
	bench_receiver *recv;
	uint32_t        nrecv;
	bench_pair     *pairs;
	size_t          npairs;
	atomic_int      phase;
} B;

static const cli_conn_ops bench_ops;

// ---------------------------------------------------------------------------
// Topics.

// Returns true if an MQTT topic filter matches a topic name.
static bool topic_match(const char *f, const char *t)
{
	if ((f[0] == '+' || f[0] == '#') && t[0] == '$') {
		return false;
	}
	for (;;) {
		if (f[0] == '#') {
			return true;
		}
		if (f[0] == '+') {
			while (*t != '\0' && *t != '/') {
				t++;
			}
			f++;
		} else {
			while (*f != '\0' && *f != '/' && *f == *t) {
				f++;
				t++;
			}
			if ((*f != '\0' && *f != '/') || (*t != '\0' && *t != '/')) {
				return false;
			}
		}
		if (*f == '\0' && *t == '\0') {
			return true;
		}
		if (*f == '\0' || *t == '\0') {
			// "a/#" also matches "a".
			return *t == '\0' && strcmp(f, "/#") == 0;
		}
		f++;
		t++;
	}
}

// Returns the filter without a "$share/<group>/" prefix, and sets *shared
// (mqtt_share_split; a malformed one is left whole, the broker refuses it).
static const char *share_strip(const char *f, bool *shared)
{
	mqtt_share sh;
	*shared = mqtt_share_split((const uint8_t *)f, strlen(f), &sh) == MQTT_SHARE_OK;
	return *shared ? (const char *)sh.filter : f;
}

// ---------------------------------------------------------------------------
// /proc sampling of the broker.

typedef struct proc_sample {
	bool   ok;
	double cpu_s; // utime + stime of all threads
	long   rss_kb; // VmRSS
	long   hwm_kb; // VmHWM
} proc_sample;

// Returns a sample of pid; .ok is false if /proc could not be read.
static proc_sample proc_read(int pid)
{
	proc_sample s = { 0 };
	char        path[64], buf[4096];
	FILE       *f;

	if (pid <= 0) {
		return s;
	}
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL) {
		return s;
	}
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n]  = '\0';
	char *p = strrchr(buf, ')');
	if (p == NULL) {
		return s;
	}
	// Fields after the command: state is field 3; utime and stime are 14, 15.
	unsigned long long utime = 0, stime = 0;
	int                field = 2;
	for (char *tok = strtok(p + 1, " "); tok != NULL; tok = strtok(NULL, " ")) {
		field++;
		if (field == 14) {
			utime = strtoull(tok, NULL, 10);
		} else if (field == 15) {
			stime = strtoull(tok, NULL, 10);
			break;
		}
	}
	s.cpu_s = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((f = fopen(path, "r")) == NULL) {
		return s;
	}
	while (fgets(buf, sizeof(buf), f) != NULL) {
		if (strncmp(buf, "VmRSS:", 6) == 0) {
			s.rss_kb = strtol(buf + 6, NULL, 10);
		} else if (strncmp(buf, "VmHWM:", 6) == 0) {
			s.hwm_kb = strtol(buf + 6, NULL, 10);
		}
	}
	fclose(f);
	s.ok = true;
	return s;
}

// Returns this process's CPU seconds (all threads).
static double self_cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6
	    + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

// ---------------------------------------------------------------------------
// Loop-thread side.

// Starts connections of the current phase as the ramp allows; cannot fail.
static void ramp_step(bench_thread *th)
{
	const cli_opts *o   = B.o;
	uint32_t        cap = o->max_connecting / B.nthreads;
	char            err[256];

	if (cap == 0) {
		cap = 1;
	}
	while (th->qnext < th->nqueue && (o->conn_interval_ms > 0 || th->connecting < cap)) {
		bench_client *cl = th->queue[th->qnext++];
		if (peek(&th->first_connect_ns) == 0) {
			atomic_store(&th->first_connect_ns, th->loop.now);
		}
		if (cli_conn_start(&cl->conn, cl->id, err, sizeof(err)) != 0) {
			bump(&th->failed[cl->role], 1);
			if (o->verbose) {
				fprintf(stderr, "%s: %s\n", cl->id, err);
			}
		} else {
			cl->connecting = true;
			th->connecting++;
			th->live++;
		}
		if (o->conn_interval_ms > 0) {
			uint64_t step = (uint64_t)o->conn_interval_ms * B.nthreads * 1000000ull;
			if (th->qnext < th->nqueue) {
				cli_loop_timer_arm(&th->loop, &th->ramp, th->loop.now + step);
			}
			return;
		}
	}
}

// Timer: the next paced connect is due.
static void ramp_tick(cli_timer *t)
{
	bench_thread *th = (bench_thread *)((char *)t - offsetof(bench_thread, ramp));
	ramp_step(th);
}

// Sends one PUBLISH with sequence number seq. Returns an enum cli_conn_err.
static int pub_send(bench_client *cl, uint64_t seq)
{
	uint8_t *at;
	uint16_t id = 0;
	int rv = cli_conn_publish(&cl->conn, cl->topic, cl->topic_len, cl->th->payload, B.o->size,
	    (uint8_t)B.o->qos, B.o->retain, NULL, &at, &id);
	if (rv == CLI_CONN_OK) {
		uint64_t now = cli_now_ns();
		bench_payload_write(at, cl->index, seq, now);
		bump(&cl->th->sent, 1);
		if (id != 0 && id <= cl->sent_cap) {
			cl->sent_ns[id] = now;
		}
	}
	return rv;
}

// Issues the next sequence number and sends it, applying the --fault-*
// options. Returns CLI_CONN_OK, CLI_CONN_EBUSY (nothing issued) or another
// error.
static int pub_one(bench_client *cl)
{
	const cli_opts *o  = B.o;
	bench_thread   *th = cl->th;
	int             rv;

	if (!cli_conn_can_publish(&cl->conn, (uint8_t)o->qos)
	    || (o->fault_dup && cl->conn.nfree < 2 && o->qos > 0)) {
		return CLI_CONN_EBUSY;
	}
	uint64_t seq  = cl->next_seq;
	bool     skip = o->fault_skip && seq % o->fault_skip == o->fault_skip - 1;
	bool     hold = o->fault_swap && seq % o->fault_swap == o->fault_swap - 2;
	bool     dup  = o->fault_dup && seq % o->fault_dup == o->fault_dup - 1;
	rv            = CLI_CONN_OK;
	if (hold) {
		cl->held      = seq;
		cl->have_held = true;
	} else if (!skip) {
		rv = pub_send(cl, seq);
		if (rv == CLI_CONN_OK && dup) {
			pub_send(cl, seq);
		}
	}
	if (rv != CLI_CONN_OK) {
		return rv;
	}
	cl->next_seq++;
	bump(&th->issued, 1);
	bump(&th->expect, cl->fan);
	return CLI_CONN_OK;
}

// Publishes as much as the pacing, the window and -L allow; cannot fail.
static void pub_pump(bench_client *cl)
{
	const cli_opts *o  = B.o;
	bench_thread   *th = cl->th;

	if (!th->run || !cl->connected || cl->done) {
		return;
	}
	for (;;) {
		// A held-back number goes out right after its successor (or at
		// the end).
		if (cl->have_held
		    && (cl->next_seq != cl->held + 1
		        || (o->limit > 0 && cl->next_seq >= o->limit))) {
			if (pub_send(cl, cl->held) != CLI_CONN_OK) {
				return;
			}
			cl->have_held = false;
		}
		if (o->limit > 0 && cl->next_seq >= o->limit && !cl->have_held) {
			cl->done = true;
			bump(&th->pubs_done, 1);
			return;
		}
		if (o->interval_ms > 0 && cl->owed == 0) {
			return;
		}
		int rv = pub_one(cl);
		if (rv == CLI_CONN_EBUSY) {
			return;
		}
		if (rv != CLI_CONN_OK) {
			fprintf(stderr,
			    "nanomq_cli: %s: cannot encode the PUBLISH (topic or size)\n", cl->id);
			cl->done = true;
			bump(&th->pubs_done, 1);
			return;
		}
		if (o->interval_ms > 0) {
			cl->owed--;
		}
	}
}

// Timer: a paced publish is due.
static void pub_tick(cli_timer *t)
{
	bench_client *cl = (bench_client *)((char *)t - offsetof(bench_client, tick));
	bench_thread *th = cl->th;

	if (!th->run || cl->done) {
		return;
	}
	cl->owed++;
	cl->next_due += (uint64_t)B.o->interval_ms * 1000000ull;
	cli_loop_timer_arm(&th->loop, &cl->tick, cl->next_due);
	pub_pump(cl);
}

// Starts publishing for every connected publisher of th; cannot fail.
static void pub_start_all(bench_thread *th)
{
	uint64_t ival = (uint64_t)B.o->interval_ms * 1000000ull;
	uint32_t np   = B.n[ROLE_PUB] ? B.n[ROLE_PUB] : 1;

	th->run = true;
	for (uint32_t i = 0; i < th->nmine[ROLE_PUB]; i++) {
		bench_client *cl = th->mine[ROLE_PUB][i];
		if (!cl->connected) {
			continue;
		}
		if (ival > 0) {
			// Spread the publishers over one interval.
			uint32_t pos = cl->index - B.o->start_number;
			cl->next_due = th->loop.now + ival * pos / np;
			cl->owed     = 0;
			cli_loop_timer_arm(&th->loop, &cl->tick, cl->next_due);
		} else {
			pub_pump(cl);
		}
	}
}

// Stops publishing; in-flight messages still complete. Cannot fail.
static void pub_stop_all(bench_thread *th)
{
	th->run = false;
	for (uint32_t i = 0; i < th->nmine[ROLE_PUB]; i++) {
		cli_loop_timer_cancel(&th->loop, &th->mine[ROLE_PUB][i]->tick);
	}
}

// Sets the ramp to connect th's clients of a role; cannot fail.
static void ramp_begin(bench_thread *th, int role)
{
	th->queue  = th->mine[role];
	th->nqueue = th->nmine[role];
	th->qnext  = 0;
	ramp_step(th);
}

// Disconnects every client of th; the loop stops when all are closed.
static void disconnect_all(bench_thread *th)
{
	pub_stop_all(th);
	cli_loop_timer_cancel(&th->loop, &th->ramp);
	th->nqueue = th->qnext; // no further connects
	for (int r = 0; r < ROLES; r++) {
		for (uint32_t i = 0; i < th->nmine[r]; i++) {
			cli_conn_disconnect(&th->mine[r][i]->conn);
		}
	}
	if (th->live == 0) {
		cli_loop_stop(&th->loop);
	}
}

// Acts on each phase that main entered since the last wake; cannot fail.
static void thread_wake(cli_loop *l)
{
	bench_thread *th    = l->arg;
	int           phase = atomic_load(&B.phase);

	while (th->phase < phase) {
		th->phase++;
		switch (th->phase) {
		case PH_CONNECT_SUBS:
			ramp_begin(th, B.o->verb == CLI_CONN ? ROLE_CONN : ROLE_SUB);
			break;
		case PH_CONNECT_PUBS:
			ramp_begin(th, ROLE_PUB);
			break;
		case PH_RUN:
			pub_start_all(th);
			break;
		case PH_STOP_PUB:
			pub_stop_all(th);
			break;
		case PH_DISCONNECT:
			disconnect_all(th);
			break;
		default:
			break;
		}
	}
}

// A handshake ended (either way): let the ramp continue.
static void handshake_done(bench_client *cl)
{
	bench_thread *th = cl->th;
	if (!cl->connecting) {
		return;
	}
	cl->connecting = false;
	th->connecting--;
	if (B.o->conn_interval_ms == 0 && th->phase < PH_DISCONNECT) {
		ramp_step(th);
	}
}

// CONNACK: count it, subscribe subscribers, let publishers go if running.
static void bench_on_connack(cli_conn *c, const mqtt_connack *ack)
{
	bench_client *cl = c->arg;
	bench_thread *th = cl->th;

	if (ack->reason != 0) {
		return; // on_close counts the failure
	}
	cl->connected = true;
	bump(&th->connected[cl->role], 1);
	if (cl->role == ROLE_PUB && B.o->qos > 0 && cl->sent_cap < c->window) {
		// Packet ids are 1..window; no ack latency if this fails.
		uint64_t *p = realloc(cl->sent_ns, ((size_t)c->window + 1) * sizeof(*p));
		if (p != NULL) {
			memset(p, 0, ((size_t)c->window + 1) * sizeof(*p));
			cl->sent_ns  = p;
			cl->sent_cap = c->window;
		}
	}
	atomic_store_explicit(&th->last_connack_ns, cli_now_ns(), memory_order_relaxed);
	handshake_done(cl);
	if (cl->role == ROLE_SUB) {
		mqtt_sub_opts so = { .qos = (uint8_t)B.o->sub_qos };
		const char   *f  = cl->topic;
		if (cli_conn_subscribe(c, &f, 1, &so, 0) != CLI_CONN_OK) {
			fprintf(stderr, "nanomq_cli: cannot encode SUBSCRIBE to '%s'\n", cl->topic);
			bump(&th->sub_failed, 1);
		}
	} else if (cl->role == ROLE_PUB && th->run) {
		pub_pump(cl);
	}
}

// SUBACK: count the subscriber as ready or refused.
static void bench_on_suback(cli_conn *c, const mqtt_suback *ack)
{
	bench_client *cl = c->arg;
	if (ack->count >= 1 && ack->codes[0] < 0x80) {
		bump(&cl->th->subscribed, 1);
	} else {
		bump(&cl->th->sub_failed, 1);
		if (B.o->verbose) {
			fprintf(stderr, "%s: subscription to '%s' refused (0x%02x)\n", cl->id,
			    cl->topic, ack->count ? ack->codes[0] : 0);
		}
	}
}

// A message arrived: latency, then sequence accounting.
static void bench_on_message(cli_conn *c, const mqtt_publish *p)
{
	bench_client *cl = c->arg;
	bench_thread *th = cl->th;
	uint32_t      pub_id;
	uint64_t      seq, ts;

	if (!bench_payload_read(p->payload.p, p->payload.len, &pub_id, &seq, &ts)) {
		bump(&th->foreign, 1);
		return;
	}
	uint64_t now = c->rx_ns;
	bench_hist_record(th->hist, now > ts ? now - ts : 0);
	if (peek(&th->first_rx_ns) == 0) {
		atomic_store_explicit(&th->first_rx_ns, now, memory_order_relaxed);
	}
	atomic_store_explicit(&th->last_rx_ns, now, memory_order_relaxed);
	int r = bench_streams_record(
	    &B.streams, cl->receiver, pub_id, bench_topic_hash(p->topic.p, p->topic.len), seq);
	switch (r) {
	case BENCH_SEQ_NEW:
		bump(&th->received, 1);
		break;
	case BENCH_SEQ_REORDERED:
	case BENCH_SEQ_LATE:
		bump(&th->received, 1);
		bump(&th->reordered, 1);
		break;
	case BENCH_SEQ_DUP:
		bump(&th->dups, 1);
		break;
	default:
		bump(&th->untracked, 1);
		break;
	}
}

// A publish completed.
static void bench_on_acked(cli_conn *c, uint16_t id, uint8_t reason)
{
	bench_client *cl = c->arg;
	bump(&cl->th->acked, 1);
	if (id != 0 && id <= cl->sent_cap && cl->sent_ns[id] != 0) {
		uint64_t now = cli_now_ns();
		bench_hist_record(
		    cl->th->ack_hist, now > cl->sent_ns[id] ? now - cl->sent_ns[id] : 0);
		cl->sent_ns[id] = 0;
	}
	if (reason >= 0x80) {
		bump(&cl->th->refused, 1);
	}
}

// Room in the window or the buffer.
static void bench_on_writable(cli_conn *c)
{
	bench_client *cl = c->arg;
	if (cl->role == ROLE_PUB) {
		pub_pump(cl);
	}
}

// A connection closed: count it, keep the ramp going, stop when all are
// gone in the last phase.
static void bench_on_close(cli_conn *c, const char *why)
{
	bench_client *cl = c->arg;
	bench_thread *th = cl->th;

	cli_loop_timer_cancel(&th->loop, &cl->tick);
	if (cl->connecting) {
		bump(&th->failed[cl->role], 1);
		if (B.o->verbose) {
			fprintf(stderr, "%s: %s\n", cl->id, why);
		}
		handshake_done(cl);
	} else if (th->phase < PH_DISCONNECT) {
		bump(&th->closed, 1);
		if (B.o->verbose) {
			fprintf(stderr, "%s: %s\n", cl->id, why);
		}
	}
	if (cl->role == ROLE_PUB && !cl->done) {
		cl->done = true;
		bump(&th->pubs_done, 1);
	}
	cl->connected = false;
	th->live--;
	if (th->live == 0 && th->phase >= PH_DISCONNECT) {
		cli_loop_stop(&th->loop);
	}
}

static const cli_conn_ops bench_ops = {
	.on_connack  = bench_on_connack,
	.on_suback   = bench_on_suback,
	.on_message  = bench_on_message,
	.on_acked    = bench_on_acked,
	.on_writable = bench_on_writable,
	.on_close    = bench_on_close,
};

// Thread body: runs the loop until the last phase is done. Returns NULL.
static void *thread_main(void *arg)
{
	bench_thread *th = arg;
	th->loop.now     = cli_now_ns();
	thread_wake(&th->loop);
	cli_loop_run(&th->loop);
	for (int r = 0; r < ROLES; r++) {
		for (uint32_t i = 0; i < th->nmine[r]; i++) {
			cli_conn_fini(&th->mine[r][i]->conn);
		}
	}
	atomic_store(&th->exited, true);
	return NULL;
}

// ---------------------------------------------------------------------------
// Main-thread side.

typedef struct totals {
	uint64_t connected[ROLES], failed[ROLES];
	uint64_t subscribed, sub_failed;
	uint64_t sent, issued, expect, acked, refused;
	uint64_t received, dups, reordered, foreign, untracked, closed, pubs_done;
	uint64_t first_connect_ns, last_connack_ns, first_rx_ns, last_rx_ns;
} totals;

// Returns the sum of every thread's counters.
static totals sum_threads(void)
{
	totals t;
	memset(&t, 0, sizeof(t));
	for (uint32_t i = 0; i < B.nthreads; i++) {
		bench_thread *th = &B.threads[i];
		for (int r = 0; r < ROLES; r++) {
			t.connected[r] += peek(&th->connected[r]);
			t.failed[r] += peek(&th->failed[r]);
		}
		t.subscribed += peek(&th->subscribed);
		t.sub_failed += peek(&th->sub_failed);
		t.sent += peek(&th->sent);
		t.issued += peek(&th->issued);
		t.expect += peek(&th->expect);
		t.acked += peek(&th->acked);
		t.refused += peek(&th->refused);
		t.received += peek(&th->received);
		t.dups += peek(&th->dups);
		t.reordered += peek(&th->reordered);
		t.foreign += peek(&th->foreign);
		t.untracked += peek(&th->untracked);
		t.closed += peek(&th->closed);
		t.pubs_done += peek(&th->pubs_done);
		uint64_t v = peek(&th->first_connect_ns);
		if (v && (t.first_connect_ns == 0 || v < t.first_connect_ns)) {
			t.first_connect_ns = v;
		}
		v = peek(&th->first_rx_ns);
		if (v && (t.first_rx_ns == 0 || v < t.first_rx_ns)) {
			t.first_rx_ns = v;
		}
		if ((v = peek(&th->last_connack_ns)) > t.last_connack_ns) {
			t.last_connack_ns = v;
		}
		if ((v = peek(&th->last_rx_ns)) > t.last_rx_ns) {
			t.last_rx_ns = v;
		}
	}
	return t;
}

// Enters a phase and wakes every thread; cannot fail.
static void set_phase(int phase)
{
	atomic_store(&B.phase, phase);
	for (uint32_t i = 0; i < B.nthreads; i++) {
		cli_loop_wake(&B.threads[i].loop);
	}
}

// Waits until every client of a role has connected (and subscribed) or
// failed. Returns false if interrupted.
static bool wait_connected(int role)
{
	uint64_t last = 0, last_change = cli_now_ns();
	for (;;) {
		totals   t    = sum_threads();
		uint64_t done = t.connected[role] + t.failed[role];
		if (role == ROLE_SUB) {
			done = t.subscribed + t.sub_failed + t.failed[role] + t.closed;
		}
		if (done >= B.n[role]) {
			return true;
		}
		if (cli_interrupted) {
			return false;
		}
		if (done != last) {
			last        = done;
			last_change = cli_now_ns();
		} else if (role == ROLE_SUB && cli_now_ns() - last_change > 60000000000ull) {
			// SUBACKs that never come.
			return true;
		}
		cli_sleep_ms(5);
	}
}

// Writes a progress line to stderr; cannot fail.
static void progress(uint64_t t0, totals *prev, uint64_t *prev_ns)
{
	uint64_t now = cli_now_ns();
	totals   t   = sum_threads();
	double   dt  = (double)(now - *prev_ns) / 1e9;
	fprintf(stderr,
	    "[%6.1fs] sent %llu (%.0f/s)  received %llu (%.0f/s)  dup %llu  reordered %llu  "
	    "closed %llu\n",
	    (double)(now - t0) / 1e9, (unsigned long long)t.sent,
	    dt > 0 ? (double)(t.sent - prev->sent) / dt : 0.0, (unsigned long long)t.received,
	    dt > 0 ? (double)(t.received - prev->received) / dt : 0.0, (unsigned long long)t.dups,
	    (unsigned long long)t.reordered, (unsigned long long)t.closed);
	*prev    = t;
	*prev_ns = now;
}

// Accounting result of the final pass.
typedef struct account {
	uint64_t expected; // deliveries expected (0 = unknown)
	uint64_t unique; // distinct messages received
	uint64_t lost;
	uint64_t tail; // of lost: after the last number seen on the stream
	uint64_t dups;
	uint64_t reordered;
	uint64_t late;
	uint64_t unexpected; // unique messages on streams nobody expected
	uint64_t streams;
} account;

// Computes loss against the (receiver, publisher) pairs, given how many
// sequence numbers each publisher issued (issued[pub]); used by pubsub and
// by the self-test. Cannot fail.
static account account_pairs(bench_streams *st, const bench_receiver *recv, const bench_pair *pairs,
    size_t npairs, const uint32_t *pub_ids, const uint64_t *pub_topic_hash, const uint64_t *issued)
{
	account     a;
	bench_tally tally;

	memset(&a, 0, sizeof(a));
	for (size_t i = 0; i < npairs; i++) {
		const bench_pair *p   = &pairs[i];
		uint64_t          exp = issued[p->pub];
		bench_stream     *s   = bench_streams_find(
		          st, recv[p->recv].id, pub_ids[p->pub], pub_topic_hash[p->pub]);
		uint64_t got = 0, seen_to = 0;
		if (s != NULL) {
			s->matched = true;
			got        = s->seq.unique;
			seen_to    = s->seq.high + 1;
		}
		a.expected += exp;
		a.lost += got < exp ? exp - got : 0;
		a.tail += seen_to < exp ? exp - seen_to : 0;
	}
	bench_streams_tally(st, &tally);
	a.unique     = tally.unique;
	a.dups       = tally.dups;
	a.reordered  = tally.reordered;
	a.late       = tally.late;
	a.unexpected = tally.unmatched;
	a.streams    = tally.streams;
	return a;
}

// Builds receivers and expected pairs from the clients' topics. Returns 0,
// or -1 if memory is short.
static int build_pairs(void)
{
	uint32_t ns = B.n[ROLE_SUB], np = B.n[ROLE_PUB];

	B.recv = calloc(ns ? ns : 1, sizeof(*B.recv));
	if (B.recv == NULL) {
		return -1;
	}
	for (uint32_t i = 0; i < ns; i++) {
		bench_client *cl = &B.clients[ROLE_SUB][i];
		bool          shared;
		const char   *f = share_strip(cl->topic, &shared);
		if (shared) {
			cl->receiver = (1ull << 63)
			    | bench_topic_hash((const uint8_t *)cl->topic, cl->topic_len);
		} else {
			cl->receiver = cl->index;
		}
		uint32_t r;
		for (r = 0; r < B.nrecv; r++) {
			if (B.recv[r].id == cl->receiver) {
				break;
			}
		}
		if (r == B.nrecv) {
			B.recv[B.nrecv].id     = cl->receiver;
			B.recv[B.nrecv].filter = f;
			B.nrecv++;
		}
	}
	size_t cap = 0, prev_lo = 0, prev_hi = 0;
	for (uint32_t r = 0; r < B.nrecv; r++) {
		// A receiver with the same filter as the previous one has the same
		// publishers: copy its pairs instead of matching again.
		bool   reuse = r > 0 && strcmp(B.recv[r].filter, B.recv[r - 1].filter) == 0;
		size_t lo    = B.npairs;
		size_t todo  = reuse ? prev_hi - prev_lo : np;
		for (size_t k = 0; k < todo; k++) {
			uint32_t p = reuse ? B.pairs[prev_lo + k].pub : (uint32_t)k;
			if (!reuse
			    && !topic_match(B.recv[r].filter, B.clients[ROLE_PUB][p].topic)) {
				continue;
			}
			if (B.npairs == cap) {
				size_t      ncap = cap ? cap * 2 : 1024;
				bench_pair *grow = realloc(B.pairs, ncap * sizeof(*grow));
				if (grow == NULL) {
					return -1;
				}
				B.pairs = grow;
				cap     = ncap;
			}
			B.pairs[B.npairs].recv = r;
			B.pairs[B.npairs].pub  = p;
			B.npairs++;
			B.clients[ROLE_PUB][p].fan++;
		}
		prev_lo = lo;
		prev_hi = B.npairs;
	}
	return 0;
}

// Prints "x us" scaled to a readable unit into buf; returns buf.
static const char *fmt_ns(char *buf, size_t len, uint64_t ns)
{
	if (ns < 1000000) {
		snprintf(buf, len, "%.1f us", (double)ns / 1e3);
	} else if (ns < 1000000000ull) {
		snprintf(buf, len, "%.2f ms", (double)ns / 1e6);
	} else {
		snprintf(buf, len, "%.2f s", (double)ns / 1e9);
	}
	return buf;
}

// Everything the report needs.
typedef struct report {
	totals      t;
	account     a;
	bool        have_expect; // a.expected is meaningful
	bench_hist *hist;
	bench_hist *ack_hist;
	double      connect_s;
	double      publish_s; // run start to stop of publishing
	double      window_s; // run start (or first receipt) to last receipt
	double      gen_cpu_s;
	const char *drain; // how the drain ended
	double      gen_pub_cpu_s; // generator CPU while publishing
	proc_sample bstop; // broker when publishing stopped
	proc_sample b0, b1; // broker at start and end of the window
	proc_sample bc0, bc1; // broker around the connection ramp
} report;

static const char *mode_name[] = { "", "pub", "sub", "conn", "pubsub" };

// Prints the report as JSON on stdout; cannot fail.
static void report_json(const report *r)
{
	const cli_opts *o         = B.o;
	const totals   *t         = &r->t;
	uint64_t        conns     = B.n[0] + B.n[1] + B.n[2];
	uint64_t        ok        = t->connected[0] + t->connected[1] + t->connected[2];
	uint64_t        delivered = r->a.unique;
	double          dsec      = r->window_s > 0 ? r->window_s : 1;

	printf("{\"mode\":\"%s\",\"version\":%u,\"qos\":%d,\"sub_qos\":%d,\"size\":%u,"
	       "\"interval_ms\":%u,\"threads\":%u,\"pubs\":%u,\"subs\":%u,\"conns\":%u,",
	    mode_name[o->verb], o->version, o->qos, o->sub_qos, o->size, o->interval_ms, B.nthreads,
	    B.n[ROLE_PUB], B.n[ROLE_SUB], B.n[ROLE_CONN]);
	printf("\"connect\":{\"attempted\":%llu,\"ok\":%llu,\"failed\":%llu,\"seconds\":%.3f,"
	       "\"per_second\":%.1f},",
	    (unsigned long long)conns, (unsigned long long)ok,
	    (unsigned long long)(t->failed[0] + t->failed[1] + t->failed[2]), r->connect_s,
	    r->connect_s > 0 ? (double)ok / r->connect_s : 0.0);
	printf("\"subscribed\":%llu,\"subscribe_failed\":%llu,\"disconnects\":%llu,",
	    (unsigned long long)t->subscribed, (unsigned long long)t->sub_failed,
	    (unsigned long long)t->closed);
	printf("\"publish_s\":%.3f,\"window_s\":%.3f,\"sent\":%llu,\"issued\":%llu,\"acked\":%llu,"
	       "\"refused\":%llu,",
	    r->publish_s, r->window_s, (unsigned long long)t->sent, (unsigned long long)t->issued,
	    (unsigned long long)t->acked, (unsigned long long)t->refused);
	if (r->have_expect) {
		printf("\"expected\":%llu,", (unsigned long long)r->a.expected);
	} else {
		printf("\"expected\":null,");
	}
	printf("\"drain\":\"%s\",\"lost_tail\":%llu,", r->drain ? r->drain : "none",
	    (unsigned long long)r->a.tail);
	printf("\"received\":%llu,\"lost\":%llu,\"duplicated\":%llu,\"reordered\":%llu,"
	       "\"late\":%llu,\"unexpected\":%llu,\"foreign\":%llu,\"untracked\":%llu,"
	       "\"streams\":%llu,",
	    (unsigned long long)delivered, (unsigned long long)r->a.lost,
	    (unsigned long long)r->a.dups, (unsigned long long)r->a.reordered,
	    (unsigned long long)r->a.late, (unsigned long long)r->a.unexpected,
	    (unsigned long long)t->foreign, (unsigned long long)t->untracked,
	    (unsigned long long)r->a.streams);
	printf("\"send_rate\":%.1f,\"delivered_rate\":%.1f,",
	    r->publish_s > 0 ? (double)t->sent / r->publish_s : 0.0, (double)delivered / dsec);
	const bench_hist *h = r->hist;
	printf(
	    "\"latency_us\":{\"count\":%llu,\"mean\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,"
	    "\"max\":%.1f},",
	    (unsigned long long)h->count, h->count ? h->sum / (double)h->count / 1e3 : 0.0,
	    (double)bench_hist_percentile(h, 50) / 1e3, (double)bench_hist_percentile(h, 90) / 1e3,
	    (double)bench_hist_percentile(h, 99) / 1e3,
	    (double)bench_hist_percentile(h, 100) / 1e3);
	h = r->ack_hist;
	printf("\"ack_latency_us\":{\"count\":%llu,\"mean\":%.1f,\"p50\":%.1f,\"p90\":%.1f,"
	       "\"p99\":%.1f,\"max\":%.1f},",
	    (unsigned long long)h->count, h->count ? h->sum / (double)h->count / 1e3 : 0.0,
	    (double)bench_hist_percentile(h, 50) / 1e3, (double)bench_hist_percentile(h, 90) / 1e3,
	    (double)bench_hist_percentile(h, 99) / 1e3,
	    (double)bench_hist_percentile(h, 100) / 1e3);
	printf("\"generator_cpu_s\":%.3f,\"generator_cpu_s_publishing\":%.3f", r->gen_cpu_s,
	    r->gen_pub_cpu_s);
	if (B.cfg.tls != NULL) {
		uint64_t full, resumed;
		cli_tls_counts(B.cfg.tls, &full, &resumed);
		printf(",\"tls\":{\"full\":%llu,\"resumed\":%llu}", (unsigned long long)full,
		    (unsigned long long)resumed);
	}
	if (r->b0.ok && r->b1.ok) {
		double cpu = r->b1.cpu_s - r->b0.cpu_s;
		printf(",\"broker\":{\"pid\":%d,\"cpu_s\":%.3f,\"cpu_s_per_million\":%.3f,"
		       "\"vmhwm_kb\":%ld,\"rss_kb_start\":%ld,\"rss_kb_end\":%ld",
		    o->broker_pid, cpu, delivered ? cpu / ((double)delivered / 1e6) : 0.0,
		    r->b1.hwm_kb, r->b0.rss_kb, r->b1.rss_kb);
		if (r->bstop.ok) {
			printf(",\"cpu_s_publishing\":%.3f", r->bstop.cpu_s - r->b0.cpu_s);
		}
		if (r->bc0.ok && r->bc1.ok && ok > 0) {
			printf(",\"rss_kb_before_connect\":%ld,\"rss_kb_after_connect\":%ld,"
			       "\"bytes_per_conn\":%.0f,\"cpu_s_connect\":%.3f,"
			       "\"cpu_ms_per_connect\":%.3f",
			    r->bc0.rss_kb, r->bc1.rss_kb,
			    (double)(r->bc1.rss_kb - r->bc0.rss_kb) * 1024.0 / (double)ok,
			    r->bc1.cpu_s - r->bc0.cpu_s,
			    (r->bc1.cpu_s - r->bc0.cpu_s) * 1e3 / (double)ok);
		}
		printf("}");
	}
	printf("}\n");
}

// Prints the report as text on stdout; cannot fail.
static void report_text(const report *r)
{
	const cli_opts *o = B.o;
	const totals   *t = &r->t;
	char            a[32], b[32], c[32], d[32];
	uint64_t        ok   = t->connected[0] + t->connected[1] + t->connected[2];
	double          dsec = r->window_s > 0 ? r->window_s : 1;

	printf("bench %s: %u publisher(s), %u subscriber(s), %u idle, MQTT %s, QoS %d, %u B, %s, "
	       "%u thread(s)\n",
	    mode_name[o->verb], B.n[ROLE_PUB], B.n[ROLE_SUB], B.n[ROLE_CONN],
	    o->version == 5       ? "5.0"
	        : o->version == 4 ? "3.1.1"
	                          : "3.1",
	    o->qos, o->size,
	    B.n[ROLE_PUB] == 0   ? "no publishing"
	        : o->interval_ms ? "paced"
	                         : "flat out",
	    B.nthreads);
	if (o->interval_ms && B.n[ROLE_PUB]) {
		printf("  pacing:     one message per %u ms per publisher\n", o->interval_ms);
	}
	printf("  connect:    %llu ok, %llu failed in %.2f s (%.0f conn/s)\n",
	    (unsigned long long)ok,
	    (unsigned long long)(t->failed[0] + t->failed[1] + t->failed[2]), r->connect_s,
	    r->connect_s > 0 ? (double)ok / r->connect_s : 0.0);
	if (B.n[ROLE_SUB]) {
		printf("  subscribe:  %llu ok, %llu refused\n", (unsigned long long)t->subscribed,
		    (unsigned long long)t->sub_failed);
	}
	if (t->closed) {
		printf("  closed:     %llu connection(s) closed unexpectedly\n",
		    (unsigned long long)t->closed);
	}
	if (o->verb == CLI_CONN) {
		if (r->bc0.ok && r->bc1.ok && ok > 0) {
			printf("  broker:     RSS %ld kB -> %ld kB, %.0f bytes per connection; "
			       "CPU %.3f ms per connection\n",
			    r->bc0.rss_kb, r->bc1.rss_kb,
			    (double)(r->bc1.rss_kb - r->bc0.rss_kb) * 1024.0 / (double)ok,
			    (r->bc1.cpu_s - r->bc0.cpu_s) * 1e3 / (double)ok);
		}
		if (B.cfg.tls != NULL) {
			uint64_t full, resumed;
			cli_tls_counts(B.cfg.tls, &full, &resumed);
			printf("  tls:        %llu full handshakes, %llu resumed\n",
			    (unsigned long long)full, (unsigned long long)resumed);
		}
		return;
	}
	if (B.n[ROLE_PUB]) {
		printf("  sent:       %llu in %.2f s (%.0f msg/s); acked %llu, refused %llu\n",
		    (unsigned long long)t->sent, r->publish_s,
		    r->publish_s > 0 ? (double)t->sent / r->publish_s : 0.0,
		    (unsigned long long)t->acked, (unsigned long long)t->refused);
		if (r->ack_hist->count > 0) {
			printf("  ack:        p50 %s  p90 %s  p99 %s  max %s (publish to "
			       "PUBACK/PUBCOMP)\n",
			    fmt_ns(a, sizeof(a), bench_hist_percentile(r->ack_hist, 50)),
			    fmt_ns(b, sizeof(b), bench_hist_percentile(r->ack_hist, 90)),
			    fmt_ns(c, sizeof(c), bench_hist_percentile(r->ack_hist, 99)),
			    fmt_ns(d, sizeof(d), bench_hist_percentile(r->ack_hist, 100)));
		}
	}
	if (B.n[ROLE_SUB]) {
		if (r->have_expect) {
			printf("  received:   %llu of %llu expected; lost %llu, duplicated %llu, "
			       "reordered %llu\n",
			    (unsigned long long)r->a.unique, (unsigned long long)r->a.expected,
			    (unsigned long long)r->a.lost, (unsigned long long)r->a.dups,
			    (unsigned long long)r->a.reordered);
			if (r->a.tail > 0) {
				printf("  not in:     %llu of the lost are after the last message "
				       "seen on "
				       "their stream (drain %s: %s)\n",
				    (unsigned long long)r->a.tail, r->drain ? r->drain : "none",
				    r->drain && strcmp(r->drain, "timeout") == 0
				        ? "deliveries were still arriving, raise --drain"
				        : "the broker dropped them or never got them");
			}
		} else {
			printf("  received:   %llu; lost (gaps) %llu, duplicated %llu, reordered "
			       "%llu\n",
			    (unsigned long long)r->a.unique, (unsigned long long)r->a.lost,
			    (unsigned long long)r->a.dups, (unsigned long long)r->a.reordered);
		}
		if (t->foreign || r->a.unexpected || t->untracked) {
			printf("  other:      %llu foreign, %llu unexpected, %llu untracked\n",
			    (unsigned long long)t->foreign, (unsigned long long)r->a.unexpected,
			    (unsigned long long)t->untracked);
		}
		printf("  delivered:  %.0f msg/s over %.2f s\n", (double)r->a.unique / dsec,
		    r->window_s);
		printf("  latency:    p50 %s  p90 %s  p99 %s  max %s\n",
		    fmt_ns(a, sizeof(a), bench_hist_percentile(r->hist, 50)),
		    fmt_ns(b, sizeof(b), bench_hist_percentile(r->hist, 90)),
		    fmt_ns(c, sizeof(c), bench_hist_percentile(r->hist, 99)),
		    fmt_ns(d, sizeof(d), bench_hist_percentile(r->hist, 100)));
	}
	printf("  generator:  %.2f CPU s (%.2f s while running)\n", r->gen_cpu_s, r->gen_pub_cpu_s);
	if (r->b0.ok && r->b1.ok) {
		double cpu = r->b1.cpu_s - r->b0.cpu_s;
		printf("  broker:     %.2f CPU s", cpu);
		if (r->a.unique) {
			printf(
			    " (%.2f s per million delivered)", cpu / ((double)r->a.unique / 1e6));
		}
		if (r->bstop.ok) {
			printf(", %.2f s while running", r->bstop.cpu_s - r->b0.cpu_s);
		}
		printf(", VmHWM %ld kB\n", r->b1.hwm_kb);
	}
}

// Runs the accounting self-test. Returns 0 if every check passed.
static int selftest(const cli_opts *o)
{
	FILE *out   = o->json ? stderr : stdout;
	int   fails = bench_stats_selftest(out);

	// A report-level scenario through the same accounting as pubsub: two
	// subscribers and one shared group, two publishers of 100 messages.
	// Stream (s0, p0): 10 lost, 3 duplicated, 2 reordered; (s1, p1) never
	// arrives; the group gets everything once; one stream is unexpected.
	bench_streams  st;
	bench_receiver recv[3]   = { { 0, "t/0" }, { 1, "t/+" }, { 1ull << 63 | 7, "t/#" } };
	bench_pair     pairs[]   = { { 0, 0 }, { 1, 0 }, { 1, 1 }, { 2, 0 }, { 2, 1 } };
	uint32_t       ids[2]    = { 0, 1 };
	uint64_t       th[2]     = { bench_topic_hash((const uint8_t *)"t/0", 3),
		          bench_topic_hash((const uint8_t *)"t/1", 3) };
	uint64_t       issued[2] = { 100, 100 };

	if (bench_streams_init(&st, 8, 100) != 0) {
		return fails + 1;
	}
	for (uint64_t s = 0; s < 100; s++) {
		if (s % 10 != 3) {
			uint64_t x = s == 50 ? 51 : s == 51 ? 50 : s == 70 ? 71 : s == 71 ? 70 : s;
			bench_streams_record(&st, 0, 0, th[0], x);
		}
		if (s == 20 || s == 21 || s == 22) {
			bench_streams_record(&st, 0, 0, th[0], s);
		}
		bench_streams_record(&st, 1, 0, th[0], s);
		bench_streams_record(&st, recv[2].id, 0, th[0], s);
		bench_streams_record(&st, recv[2].id, 1, th[1], s);
	}
	bench_streams_record(&st, 9, 9, 9, 0);
	account a = account_pairs(&st, recv, pairs, 5, ids, th, issued);
	bench_streams_fini(&st);
	struct {
		const char *what;
		uint64_t    got, want;
	} c[] = {
		{ "report expected", a.expected, 500 },
		{ "report received", a.unique, 391 }, // 90 + 100 + 0 + 100 + 100 + 1
		{ "report lost", a.lost, 110 },
		{ "report duplicated", a.dups, 3 },
		{ "report reordered", a.reordered, 2 },
		{ "report unexpected", a.unexpected, 1 },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		bool okc = c[i].got == c[i].want;
		fprintf(out, "%s %s: got %llu, want %llu\n", okc ? "ok  " : "FAIL", c[i].what,
		    (unsigned long long)c[i].got, (unsigned long long)c[i].want);
		fails += okc ? 0 : 1;
	}
	if (o->json) {
		printf(
		    "{\"selftest\":\"%s\",\"failed\":%d,\"expected\":%llu,\"received\":%llu,"
		    "\"lost\":%llu,\"duplicated\":%llu,\"reordered\":%llu,\"unexpected\":%llu}\n",
		    fails ? "fail" : "pass", fails, (unsigned long long)a.expected,
		    (unsigned long long)a.unique, (unsigned long long)a.lost,
		    (unsigned long long)a.dups, (unsigned long long)a.reordered,
		    (unsigned long long)a.unexpected);
	} else {
		printf("selftest: %s (%d failed)\n", fails ? "FAIL" : "pass", fails);
	}
	return fails == 0 ? 0 : 1;
}

// Creates the clients of one role: ids, topics, thread assignment. Returns
// 0, or -1 with a message printed.
static int make_clients(int role, uint32_t n)
{
	const cli_opts   *o          = B.o;
	const char       *prefix     = o->prefix ? o->prefix : "nmqb";
	static const char tag[ROLES] = { 's', 'p', 'c' };

	B.n[role]       = n;
	B.clients[role] = calloc(n ? n : 1, sizeof(bench_client));
	if (B.clients[role] == NULL) {
		fprintf(stderr, "nanomq_cli: out of memory\n");
		return -1;
	}
	for (uint32_t i = 0; i < n; i++) {
		bench_client *cl = &B.clients[role][i];
		bench_thread *th = &B.threads[i % B.nthreads];
		char          topic[1024];
		cl->index   = o->start_number + i;
		cl->role    = (uint8_t)role;
		cl->th      = th;
		cl->tick.fn = pub_tick;
		snprintf(cl->id, sizeof(cl->id), "%s-%c%u-%x", prefix, tag[role], cl->index,
		    (unsigned)getpid());
		if (role != ROLE_CONN) {
			const char *tmpl
			    = role == ROLE_SUB && o->sub_topic ? o->sub_topic : o->topics[0];
			if (cli_opts_expand(
			        tmpl, cl->index, cl->id, o->username, topic, sizeof(topic))
			    != 0) {
				fprintf(stderr, "nanomq_cli: topic too long\n");
				return -1;
			}
			cl->topic     = strdup(topic);
			cl->topic_len = strlen(topic);
			if (cl->topic == NULL) {
				fprintf(stderr, "nanomq_cli: out of memory\n");
				return -1;
			}
			if (role == ROLE_PUB
			    && !mqtt_topic_name_valid((const uint8_t *)topic, cl->topic_len)) {
				fprintf(
				    stderr, "nanomq_cli: '%s' is not a valid topic name\n", topic);
				return -1;
			}
		}
		cli_conn_init(&cl->conn, &th->loop, &B.cfg, &bench_ops, cl);
		th->mine[role][th->nmine[role]++] = cl;
	}
	return 0;
}

// Returns the exit code of the bench command.
int bench_run(cli_opts *o)
{
	char     err[256];
	int      rc      = 1;
	uint32_t started = 0;
	report   r;

	if (o->selftest) {
		return selftest(o);
	}
	memset(&B, 0, sizeof(B));
	memset(&r, 0, sizeof(r));
	B.o               = o;
	uint32_t n[ROLES] = { 0, 0, 0 };
	switch (o->verb) {
	case CLI_PUB:
		n[ROLE_PUB] = o->clients;
		break;
	case CLI_SUB:
		n[ROLE_SUB] = o->clients;
		break;
	case CLI_CONN:
		n[ROLE_CONN] = o->clients;
		break;
	default:
		n[ROLE_PUB] = o->pubs;
		n[ROLE_SUB] = o->subs;
		break;
	}
	uint32_t total = n[0] + n[1] + n[2];
	B.nthreads     = o->threads < total ? o->threads : (total ? total : 1);
	if (cli_opts_conn_cfg(o, &B.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "nanomq_cli: %s\n", err);
		return 1;
	}
	if (B.cfg.tls != NULL && o->resume
	    && cli_tls_prime(B.cfg.tls, (const struct sockaddr *)&B.cfg.addr, B.cfg.addrlen,
	           (int)o->connect_timeout_ms, err, sizeof(err))
	        != 0) {
		fprintf(stderr, "nanomq_cli: --resume: priming handshake: %s\n", err);
		cli_opts_conn_cfg_fini(&B.cfg);
		return 1;
	}
	// A subscriber's window is its receive maximum; keep it large so that
	// the broker, not the generator, limits the flow.
	if (o->version == 5 && B.cfg.receive_maximum == 0 && n[ROLE_SUB] > 0) {
		B.cfg.receive_maximum = 65535;
	}
	long nofile = cli_signals_install();
	if (nofile > 0 && (long)total + 64 > nofile) {
		fprintf(stderr,
		    "nanomq_cli: %u connections need more than the %ld open files allowed "
		    "(ulimit -n)\n",
		    total, nofile);
		return 1;
	}
	if (bench_streams_init(
	        &B.streams, (size_t)n[ROLE_SUB] * (n[ROLE_PUB] ? 1 : 4), BENCH_MAX_STREAMS)
	    != 0) {
		fprintf(stderr, "nanomq_cli: out of memory\n");
		return 1;
	}
	B.threads  = calloc(B.nthreads, sizeof(*B.threads));
	r.hist     = malloc(sizeof(*r.hist));
	r.ack_hist = malloc(sizeof(*r.ack_hist));
	if (B.threads == NULL || r.hist == NULL || r.ack_hist == NULL) {
		fprintf(stderr, "nanomq_cli: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < B.nthreads; i++) {
		B.threads[i].loop.epfd = -1;
	}
	bench_hist_init(r.hist);
	bench_hist_init(r.ack_hist);
	for (uint32_t i = 0; i < B.nthreads; i++) {
		bench_thread *th = &B.threads[i];
		th->no           = i;
		if (cli_loop_init(&th->loop, err, sizeof(err)) != 0) {
			fprintf(stderr, "nanomq_cli: %s\n", err);
			goto out;
		}
		th->loop.arg     = th;
		th->loop.on_wake = thread_wake;
		th->ramp.fn      = ramp_tick;
		th->hist         = malloc(sizeof(*th->hist));
		th->ack_hist     = malloc(sizeof(*th->ack_hist));
		th->payload      = calloc(o->size ? o->size : 1, 1);
		if (th->hist == NULL || th->ack_hist == NULL || th->payload == NULL) {
			fprintf(stderr, "nanomq_cli: out of memory\n");
			goto out;
		}
		memset(th->payload, 'x', o->size);
		bench_hist_init(th->hist);
		bench_hist_init(th->ack_hist);
		for (int role = 0; role < ROLES; role++) {
			uint32_t share = n[role] / B.nthreads + 1;
			th->mine[role] = calloc(share, sizeof(bench_client *));
			if (th->mine[role] == NULL) {
				fprintf(stderr, "nanomq_cli: out of memory\n");
				goto out;
			}
		}
	}
	for (int role = 0; role < ROLES; role++) {
		if (make_clients(role, n[role]) != 0) {
			goto out;
		}
	}
	if (build_pairs() != 0) {
		fprintf(stderr, "nanomq_cli: out of memory\n");
		goto out;
	}

	cli_signals_block(true);
	for (uint32_t i = 0; i < B.nthreads; i++) {
		if (pthread_create(&B.threads[i].tid, NULL, thread_main, &B.threads[i]) != 0) {
			fprintf(stderr, "nanomq_cli: cannot start a thread\n");
			break;
		}
		started++;
	}
	cli_signals_block(false);
	if (started < B.nthreads) {
		set_phase(PH_DISCONNECT);
		goto join;
	}

	// Connect: subscribers (or idle clients) first, then publishers.
	uint64_t t_conn0 = cli_now_ns();
	r.bc0            = proc_read(o->broker_pid);
	set_phase(PH_CONNECT_SUBS);
	bool go = wait_connected(o->verb == CLI_CONN ? ROLE_CONN : ROLE_SUB);
	if (go) {
		set_phase(PH_CONNECT_PUBS);
		go = wait_connected(ROLE_PUB);
	}
	r.t              = sum_threads();
	r.bc1            = proc_read(o->broker_pid);
	uint64_t last_ok = r.t.last_connack_ns > t_conn0 ? r.t.last_connack_ns : t_conn0;
	r.connect_s      = (double)(last_ok - t_conn0) / 1e9;
	uint64_t ok_all  = r.t.connected[0] + r.t.connected[1] + r.t.connected[2];
	if (!o->json && o->progress_ms) {
		fprintf(stderr, "connected %llu of %u in %.2f s\n", (unsigned long long)ok_all,
		    total, r.connect_s);
	}
	if (ok_all == 0) {
		fprintf(stderr, "nanomq_cli: no client could connect\n");
		go = false;
	}

	// Run.
	double   gen0 = self_cpu();
	uint64_t t0   = cli_now_ns();
	r.b0          = proc_read(o->broker_pid);
	double dur    = o->duration_s;
	if (dur == 0 && o->limit == 0 && (o->verb == CLI_PUB || o->verb == CLI_PUBSUB)) {
		dur = 10;
	}
	uint64_t deadline = dur > 0 ? t0 + (uint64_t)(dur * 1e9) : 0;
	uint64_t t_stop   = t0;
	if (go) {
		set_phase(PH_RUN);
		totals   prev    = sum_threads();
		uint64_t prev_ns = t0, next_progress = t0 + (uint64_t)o->progress_ms * 1000000ull;
		uint64_t expect_sub = (uint64_t)B.nrecv * o->expect_pubs * o->expect_msgs;
		for (;;) {
			uint64_t now = cli_now_ns();
			totals   t   = sum_threads();
			if (cli_interrupted || (deadline && now >= deadline)) {
				break;
			}
			if (B.n[ROLE_PUB] && o->limit > 0 && t.pubs_done >= B.n[ROLE_PUB]) {
				break;
			}
			if (o->verb == CLI_SUB && expect_sub > 0 && t.received >= expect_sub) {
				break;
			}
			if (o->progress_ms && now >= next_progress) {
				progress(t0, &prev, &prev_ns);
				next_progress += (uint64_t)o->progress_ms * 1000000ull;
			}
			cli_sleep_ms(5);
		}
		t_stop          = cli_now_ns();
		r.bstop         = proc_read(o->broker_pid);
		r.gen_pub_cpu_s = self_cpu() - gen0;
		set_phase(PH_STOP_PUB);

		// Drain: wait for acks and deliveries, until all are in, nothing
		// moves for BENCH_QUIET_MS, or --drain passes.
		uint64_t drain_end = t_stop + (uint64_t)o->drain_ms * 1000000ull;
		uint64_t last_move = t_stop;
		totals   last      = sum_threads();
		while (o->verb != CLI_SUB && o->verb != CLI_CONN && !cli_interrupted) {
			uint64_t now     = cli_now_ns();
			totals   t       = sum_threads();
			bool     acks_in = o->qos == 0 || t.acked >= t.sent;
			bool     recv_in = B.n[ROLE_SUB] == 0 || t.received >= t.expect;
			if (acks_in && recv_in) {
				r.drain = "complete";
				break;
			}
			if (now >= drain_end) {
				r.drain = "timeout";
				break;
			}
			if (t.received != last.received || t.acked != last.acked) {
				last      = t;
				last_move = now;
			} else if (now - last_move > BENCH_QUIET_MS * 1000000ull) {
				r.drain = "quiet";
				break;
			}
			cli_sleep_ms(5);
		}
	}
	r.b1        = proc_read(o->broker_pid);
	r.gen_cpu_s = self_cpu() - gen0;
	if (o->verb == CLI_CONN) {
		r.bc1 = r.b1; // memory per connection: at the end of the hold
	}
	r.t         = sum_threads();
	r.publish_s = (double)(t_stop - t0) / 1e9;
	if (o->verb == CLI_SUB) {
		uint64_t a0 = r.t.first_rx_ns ? r.t.first_rx_ns : t0;
		r.window_s  = r.t.last_rx_ns > a0 ? (double)(r.t.last_rx_ns - a0) / 1e9 : 0;
	} else {
		r.window_s
		    = r.t.last_rx_ns > t0 ? (double)(r.t.last_rx_ns - t0) / 1e9 : r.publish_s;
	}
	set_phase(PH_DISCONNECT);

join:
	// Give DISCONNECTs a moment, then stop the loops regardless.
	for (uint64_t waited = 0; waited < BENCH_EXIT_WAIT_MS; waited += 5) {
		bool all = true;
		for (uint32_t i = 0; i < started; i++) {
			all = all && atomic_load(&B.threads[i].exited);
		}
		if (all) {
			break;
		}
		cli_sleep_ms(5);
	}
	for (uint32_t i = 0; i < started; i++) {
		cli_loop_stop(&B.threads[i].loop);
		pthread_join(B.threads[i].tid, NULL);
	}
	if (started < B.nthreads) {
		goto out;
	}

	// Accounting.
	r.t = sum_threads();
	for (uint32_t i = 0; i < B.nthreads; i++) {
		bench_hist_merge(r.hist, B.threads[i].hist);
		bench_hist_merge(r.ack_hist, B.threads[i].ack_hist);
	}
	if (o->verb == CLI_PUBSUB) {
		uint32_t *ids    = calloc(B.n[ROLE_PUB] + 1, sizeof(*ids));
		uint64_t *hashes = calloc(B.n[ROLE_PUB] + 1, sizeof(*hashes));
		uint64_t *issued = calloc(B.n[ROLE_PUB] + 1, sizeof(*issued));
		if (ids == NULL || hashes == NULL || issued == NULL) {
			fprintf(stderr, "nanomq_cli: out of memory\n");
			free(ids);
			free(hashes);
			free(issued);
			goto out;
		}
		for (uint32_t p = 0; p < B.n[ROLE_PUB]; p++) {
			bench_client *cl = &B.clients[ROLE_PUB][p];
			ids[p]           = cl->index;
			hashes[p] = bench_topic_hash((const uint8_t *)cl->topic, cl->topic_len);
			issued[p] = cl->next_seq;
		}
		r.a = account_pairs(&B.streams, B.recv, B.pairs, B.npairs, ids, hashes, issued);
		r.have_expect = true;
		free(ids);
		free(hashes);
		free(issued);
	} else {
		bench_tally tally;
		bench_streams_tally(&B.streams, &tally);
		r.a.unique    = tally.unique;
		r.a.dups      = tally.dups;
		r.a.reordered = tally.reordered;
		r.a.late      = tally.late;
		r.a.streams   = tally.streams;
		if (o->verb == CLI_SUB && o->expect_pubs && o->expect_msgs) {
			r.have_expect = true;
			r.a.expected  = (uint64_t)B.nrecv * o->expect_pubs * o->expect_msgs;
			r.a.lost = r.a.expected > tally.unique ? r.a.expected - tally.unique : 0;
		} else {
			r.a.lost = tally.gaps;
		}
	}
	if (o->json) {
		report_json(&r);
	} else {
		report_text(&r);
	}
	fflush(stdout);
	rc = (r.t.connected[0] + r.t.connected[1] + r.t.connected[2]) > 0 ? 0 : 1;

out:
	for (uint32_t i = 0; B.threads != NULL && i < B.nthreads; i++) {
		bench_thread *th = &B.threads[i];
		if (th->loop.epfd >= 0) {
			cli_loop_fini(&th->loop);
		}
		free(th->hist);
		free(th->ack_hist);
		free(th->payload);
		for (int role = 0; role < ROLES; role++) {
			free(th->mine[role]);
		}
	}
	for (int role = 0; role < ROLES; role++) {
		for (uint32_t i = 0; B.clients[role] != NULL && i < B.n[role]; i++) {
			free(B.clients[role][i].topic);
			free(B.clients[role][i].sent_ns);
		}
		free(B.clients[role]);
	}
	free(B.threads);
	free(B.recv);
	free(B.pairs);
	free(r.hist);
	free(r.ack_hist);
	bench_streams_fini(&B.streams);
	cli_opts_conn_cfg_fini(&B.cfg);
	return rc;
}
