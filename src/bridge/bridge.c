// MQTT bridges; see bridge.h.
//
// Locks: bridge.mtx -> connection tx lock (conn.h), bridge.mtx -> store
// queue (store_* calls never wait on the disk). No bridge lock is held
// while a message is routed locally (routing may deliver to this very
// bridge's forwards), nor while the link thread connects.
//
// The send queue is one list in arrival (seq) order. An entry is QUEUED
// (not sent on this link), SENT (PUBLISH sent, awaiting PUBACK/PUBREC) or
// RELEASED (PUBREL sent, awaiting PUBCOMP); next_unsent is the first
// entry not sent on the current link. A disconnect resets next_unsent to
// the head: SENT entries go again with DUP and their packet id, RELEASED
// ones as PUBREL, as MQTT requires of a resumed session.
//
// With the cache, every QoS 1/2 entry is written to the store when it is
// queued (write-through, so a kill -9 loses nothing that was committed)
// and deleted when acked; QoS 2 state changes are recorded so that a
// restart resends PUBREL rather than the message. Beyond
// max_send_queue_len entries in memory, new messages are only written to
// the store (disk_only counts them) and the memory queue is refilled from
// it, in seq order, as acks free room.
#include "src/bridge/bridge.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "nng/codec/mqtt_codec.h"
#include "nng/codec/mqtt_publish_out.h"
#include "nng/core/log.h"
#include "nng/protocol/proto.h"
#include "nng/protocol/timer_wheel.h"
#include "nng/transport/conn_dial.h"
#include "nng/transport/tls_pem.h"
#include "src/topic/topic_tree.h"
#ifdef NMQ_HAVE_STORE
#include "src/store/store.h"
#include "src/store/store_bcache.h"
#endif

#define CONNECT_TIMEOUT_MS 10000
// After a link that was up at least FAST_RETRY_AFTER_UP_MS, or on which
// the remote acked a forward or sent a PUBLISH, drops, the first attempt
// comes within
// FAST_RETRY_MS (a random 50-100 % of it).
#define FAST_RETRY_AFTER_UP_MS 5000
#define FAST_RETRY_MS          500
// A failed attempt that cost the remote no more than a TCP handshake
// (refused, unreachable, or a plain TCP connection it closed before
// sending anything: cheap_fail) backs off up to a CHEAP_CAP_DIV-th of
// backoff_max (at least CHEAP_CAP_MIN_MS, at most backoff_max), instead
// of backoff_max (decisions/0046).
#define CHEAP_CAP_DIV    4
#define CHEAP_CAP_MIN_MS 500
#define SUB_PID          65535 // the SUBSCRIBE of each connect; never a PUBLISH's
#define RT_SUB_PID       65534 // runtime (UN)SUBSCRIBEs (REST); never a PUBLISH's
#define TP_PID           65533 // transparent (UN)SUBSCRIBEs; never a PUBLISH's
#define TP_BATCH         64 // filters in one transparent (UN)SUBSCRIBE
// In flight on a 3.1.1 link, which has no Receive Maximum. QoS 1: MQTT
// 3.1.1 sets no bound and brokers ack QoS 1 as they route it (Mosquitto
// counts an inbound QoS 1 message against its quota only until its
// PUBACK, in the same call), so the window is wide: a drain then moves
// hundreds of messages per read and write instead of a few. QoS 2 in
// flight stays within what brokers keep for a 3.1.1 client (Mosquitto: 20,
// answering the excess with a PUBREC and dropping it, since a 3.1.1
// PUBREC carries no reason code).
#define V3_WINDOW    256
#define V3_WINDOW_Q2 16
// The refill of a wide window after acks (pump_after_ack_locked): while at
// least half of a window of REFILL_MIN_WINDOW or more is in flight, the
// PUBLISHes that acks made room for go once REFILL_BATCH slots are free,
// or REFILL_WAIT_MS after the first of them (the link thread sends them),
// whichever comes first.
#define REFILL_MIN_WINDOW 64
#define REFILL_BATCH      32
#define REFILL_WAIT_MS    2
#define DISK_UNKNOWN      (UINT64_MAX / 2) // rows on disk not yet counted
#define POOL_MAX          1024 // free entries kept per bridge
// Acked cache rows deleted in one store operation: at most DEL_BATCH rows
// in at most DEL_RANGES runs of consecutive seqs (acks come oldest first:
// usually one run, one DELETE in the store).
#define DEL_BATCH  1024
#define DEL_RANGES 256
// Echo guard of a 3.1.1 link without the bridge marker: digests of the
// messages forwarded recently (direct-mapped slots), matched against what
// the remote sends back.
#define ECHO_SLOTS    4096
#define ECHO_TTL_MS   30000
#define SYS_PERIOD_MS 10000 // health on $SYS/brokers/bridges/<name>
// A forward the remote closes the link on (a 3.1.1 broker closes on a
// packet over its limit, a retained message it does not allow, ...): after
// SUSPECT_CLOSES closes in a row with no ack on the link and the same
// oldest unacked PUBLISH, the next links send with a window of 1; once
// that PUBLISH was alone in flight at SUSPECT_ALONE such closes, it is
// dropped (see note_close_locked).
#define SUSPECT_CLOSES 2
#define SUSPECT_ALONE  2

enum { Q_QUEUED = 0, Q_SENT = 1, Q_RELEASED = 2 }; // = enum store_qstate

enum bstate { BS_STOPPED = 0, BS_CONNECTING, BS_UP, BS_DOWN, BS_BACKOFF, BS_SWITCHED_OFF };
static const char *const state_names[]
    = { "stopped", "connecting", "up", "down", "backing_off", "switched_off" };

typedef struct bentry {
	struct bentry *prev, *next;
	nmq_msg       *msg; // the topic is the remote one
	uint64_t       seq; // row in the cache, 0 = memory only
	uint64_t       at_ms; // when it was queued (or loaded)
	uint16_t       pid;
	uint8_t        qos;
	bool           retain;
	uint8_t        state;
	bool           dup; // to go again on the next link (pump_locked)
	// Its PUBLISH went on a link (or may have: in flight at a restart),
	// so a resend carries DUP; a held one (below) that never left does
	// not.
	bool wire;
	// A QoS 2 forward whose PUBLISH waits for the commit of its SENT state
	// (decisions/0041): counted in flight, not yet on the wire.
	bool     held;
	uint32_t hold_batch; // the store_sync barrier it waits for
	// The tag (srv_tag) of the server whose PUBREC made it RELEASED,
	// kept in its cache row with that state; 0 when not known (a row of
	// a file written before the tag was kept).
	uint32_t rel_srv;
} bentry;

typedef struct bridge bridge;

// A row read back from the cache, before it joins the queue.
typedef struct staged {
	nmq_msg *msg; // held
	uint64_t seq;
	uint32_t srv; // rel_srv
	uint16_t pid;
	uint8_t  qos;
	uint8_t  state;
	bool     retain;
} staged;

// One forward: a subscriber in the broker's topic tree.
typedef struct bfwd {
	broker_sink            sink; // first: the tree's subscriber
	bridge                *b;
	const conf_bridge_fwd *cfg; // in b's configuration (kept until b is freed)
	bool                   dead; // guarded by b->mtx
} bfwd;

// One connection of the link; the connection's upper-layer pointer.
typedef struct blink {
	bridge   *b;
	nmq_conn *c;
	bool      closed; // guarded by b->mtx
} blink;

// Configurations and forward arrays replaced by a reload, freed with the
// bridge (a worker may still hold a forward matched before the swap).
// A filter subscribed on the remote because local clients hold it
// (transparent).
typedef struct tpf {
	char   *f;
	uint8_t qos;
} tpf;

typedef struct tpvec {
	tpf   *v;
	size_t n, cap;
	bool   oom;
} tpvec;

typedef struct retired {
	struct retired *next;
	conf_bridge    *cfg;
	bfwd           *fwds;
} retired;

struct bridge {
	atomic_int   refs;
	nmq_bridges *set;
	bridge      *next; // in the set
	char        *name;
	char        *store_id; // "$bridge/<name>"
	char        *host_id; // "<name>-<hostname>", the default client id
	uint64_t     origin; // marks messages received from the remote
	broker_sink  self; // the publisher of inbound messages (not in the tree)

	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	pthread_t       thr;
	bool            thr_started;
	bool            stop;
	_Atomic bool    cancel; // stop, readable without mtx (interrupts a connect)
	bool            restart; // reconnect with a new configuration
	bool            switched_off; // link taken down at runtime (bridges_switch)

	conf_bridge *cfg;
	bfwd        *fwds;
	int          n_fwds;
	retired     *retired;

	// the link
	blink   *link;
	bool     up; // CONNACK accepted on link
	uint8_t  ver; // 3, 4 or 5 on the current link
	int      state; // enum bstate
	uint64_t state_since_ms;
	uint64_t last_rx_ms;
	// When a packet was last queued on the link: the client must send
	// one within every keepalive (MQTT 3.1.2.10), also while the remote
	// sends us QoS 0 messages and we have nothing to answer.
	uint64_t last_tx_ms;
	// The keepalive of the link (s): the configured one, or a v5
	// remote's Server Keep Alive, which the client must use instead.
	uint32_t ka_s;
	uint64_t ping_at_ms;
	bool     ping_pending;
	uint32_t window; // most in flight (the remote's Receive Maximum)
	// A refill put off by pump_after_ack_locked: when the link thread
	// sends it (monotonic ms), 0 when none is waiting.
	uint64_t pump_at;
	uint32_t window_full; // the window of this link outside a probe
	uint32_t remote_max_packet;
	// A v5 remote's CONNACK Maximum QoS and Retain Available (2 and true
	// otherwise): what is sent is kept within them (pump_locked).
	uint8_t  remote_max_qos;
	bool     remote_retain;
	bool     logged_up; // link up was logged (once per change)
	bool     marker_sent; // this CONNECT carried the v3 bridge marker
	bool     marker_refused; // the remote refused it: plain CONNECT from now on
	bool     marker_retry; // reconnect at once, without it
	char     last_error[200];
	char     server_now[256];
	uint32_t srv_tag; // of server_now (srv_tag())
	bool     no_session; // the CONNACK of this link: session present 0

	// the send queue
	bentry  *head, *tail, *next_unsent;
	size_t   n_mem;
	size_t   inflight;
	size_t   inflight_q2; // of which QoS 2 (bounded by V3_WINDOW_Q2 on 3.1.1)
	bentry **by_pid; // 65536 slots
	uint16_t next_pid;
	bentry  *pool;
	size_t   n_pool;
	uint64_t next_seq;
	uint64_t mem_last_seq; // newest cached seq held in memory
	// QoS 2 PUBLISHes held until their SENT state has committed
	// (hold_commit_locked): n_held of them, the oldest held_first;
	// hold_batch numbers the next barrier.
	size_t   n_held;
	bentry  *held_first;
	uint32_t hold_batch;
	uint64_t disk_only; // cached rows not in memory
	uint64_t puts_since_read;
	bool     reading;
	bool     counting; // the first read after a start: every row, counted
	uint64_t counted;
	uint32_t read_asked, read_got;
	// Rows of a read in progress (not counting), staged by the store
	// thread without the lock and queued by read_done under it.
	struct staged *stage;
	uint32_t       n_stage;
	uint64_t       oldest_disk_ms; // queue time of the oldest row on disk only
	nmq_store     *store;
	// Rows of removed entries not yet deleted: n_rng runs [lo, hi] of
	// consecutive seqs (del_rng[2i], del_rng[2i+1]), n_del rows in all.
	uint64_t *del_rng;
	uint32_t  n_rng, n_del;

	// A forward suspected of making the remote close the link (the oldest
	// unacked PUBLISH at suspect_closes closes in a row without an ack;
	// suspect_alone of them with it alone in flight). probe: links send
	// one at a time until an ack comes or the suspect is dropped.
	// link_acked: an ack of ours came on this link. disc_msg: the remote's
	// DISCONNECT (v5) named a fault of a message. link_rx_pub: a PUBLISH
	// came on this link (it carried data: retried at once when it drops).
	bentry  *suspect;
	uint32_t suspect_closes, suspect_alone;
	bool     probe, link_acked, disc_msg, link_rx_pub;
	// link_rx_any: a packet came on this link. link_tls: it is TLS.
	// cheap_fail: the last attempt failed at no cost to the remote beyond
	// a TCP handshake (bridge_main's backoff; decisions/0046).
	bool link_rx_any, link_tls, cheap_fail;

	// inbound QoS 2 packet ids awaiting PUBREL. With a store and
	// clean_start = false they are also rows of store_id (store_rel_put,
	// committed with the message's local writes before its PUBREC; deleted
	// before the PUBCOMP) and read back at start (rel_loading until then:
	// no link meanwhile), so that a PUBLISH the remote resends after a
	// kill -9 is not published twice. rel_rows: rows may exist.
	uint8_t rel[65536 / 8];
	bool    rel_loading, rel_rows;
	// Links made so far: an inbound ack that waited for the store goes
	// out only on the link its PUBLISH came by.
	uint64_t link_gen;

	// digests of recent forwards (only while echo_guard; NULL otherwise)
	struct echo_slot {
		uint64_t digest;
		uint64_t at_ms;
		uint32_t count;
	} * echo;

	// transparent: the filters local sessions hold, mirrored on the remote
	// by the link thread (tp_sync_locked). tp_dirty: the set changed (or
	// a new link, a runtime change) since the last sync; tp_resync: send
	// every filter again (a new link). tp_sent (sorted by filter) is what
	// the remote was last told, kept across links so that a filter left
	// while the link was down is unsubscribed on the next one. tp_gone:
	// filters UNSUBSCRIBEd whose UNSUBACK has not come (tp_unsub_out
	// UNSUBSCRIBEs unanswered on this link): a link that closes before
	// they are answered may have lost them, so the next one sends them
	// again (unless they are held again).
	bool     tp_dirty, tp_resync;
	tpf     *tp_sent;
	size_t   n_tp_sent;
	tpf     *tp_gone;
	size_t   n_tp_gone;
	uint32_t tp_unsub_out;
	// `subscription` filters a reload removed: UNSUBSCRIBEd after the next
	// CONNACK, so that a persistent remote session stops sending them.
	char **subs_gone;
	int    n_subs_gone;
	// With a store, tp_sent is also kept as subscription rows of
	// store_id (a filter's row is written when it is first subscribed or
	// its QoS changes, deleted once its UNSUBSCRIBE is answered), and
	// read back at start (tp_loading until then: no sync meanwhile), so
	// that filters a persistent remote session still holds from before a
	// restart are unsubscribed when no local session holds them.
	bool    tp_loading;
	tpvec   tp_load; // rows read back, before they seed tp_sent
	bridge *tp_next; // in set->tp_head, from bridge_run to bridge_halt

	// counters (guarded by mtx)
	uint64_t forwarded, received, dropped, dropped_qos0, evicted, refused, reconnects,
	    loop_guarded, expired, dropped_link_closed;
};

struct nmq_bridges {
	pthread_mutex_t mtx; // the list
	// Serialises the changes of the set (reload, REST), taken before mtx.
	pthread_mutex_t change_mtx;
	bridge         *head;
	bridge_env      env;
	uint64_t        next_origin;
	// The running bridges, for the broker's filter watcher (tp_changed):
	// tp_mtx is taken under the broker's count lock, before a bridge's mtx.
	pthread_mutex_t tp_mtx;
	bridge         *tp_head;
	// The listing of the cache at start (orphan_scan_start) until its done
	// callback has run on the store thread, which reads the set (mtx).
	bool orphan_pending;
};

static _Atomic(nmq_bridges *) g_set; // for the store's callbacks
// The store's callbacks using g_set now: bridges_stop frees the set only
// once none is (a callback may have loaded it just before it was cleared).
static atomic_int g_set_users;

static nmq_bridges *set_enter(void)
{
	atomic_fetch_add(&g_set_users, 1);
	nmq_bridges *set = atomic_load(&g_set);
	if (set == NULL) {
		atomic_fetch_sub(&g_set_users, 1);
	}
	return set;
}

static void set_leave(void)
{
	atomic_fetch_sub(&g_set_users, 1);
}

// The bridge whose cache rows belong to client_id, for the store's
// callbacks: returned with the set's mtx and its own held (unlock with
// store_bridge_unlock), or NULL, with nothing held, for a client id that
// is not a bridge's or a set that is stopping.
static bridge *store_bridge_lock(const char *client_id, nmq_bridges **setp)
{
	if (strncmp(client_id, "$bridge/", 8) != 0) {
		return NULL;
	}
	nmq_bridges *set = set_enter();
	if (set == NULL) {
		return NULL;
	}
	pthread_mutex_lock(&set->mtx);
	for (bridge *b = set->head; b != NULL; b = b->next) {
		if (strcmp(b->store_id, client_id) == 0) {
			pthread_mutex_lock(&b->mtx);
			*setp = set;
			return b;
		}
	}
	pthread_mutex_unlock(&set->mtx);
	set_leave();
	return NULL;
}

static void store_bridge_unlock(nmq_bridges *set, bridge *b)
{
	pthread_mutex_unlock(&b->mtx);
	pthread_mutex_unlock(&set->mtx);
	set_leave();
}
#ifdef NMQ_HAVE_STORE
static bool bridges_store_row_gone(void *arg, const char *client_id, uint64_t seq);
static void bridges_store_expired(void *arg, const char *client_id, uint64_t seq);
#endif

static void bridge_release(bridge *b);
static void pump_locked(bridge *b);

static uint64_t now_ms(void)
{
	return nmq_clock_ms();
}

static uint64_t wall_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

static void set_state_locked(bridge *b, int st)
{
	if (b->state != st) {
		b->state          = st;
		b->state_since_ms = now_ms();
	}
}

static void set_error_locked(bridge *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error_locked(bridge *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b->last_error, sizeof(b->last_error), fmt, ap);
	va_end(ap);
}

// ------------------------------------------------------------ echo guard

// A 3.1.1 remote that refused the bridge marker sends a forward back when
// the bridge also subscribes its topic (it has no No Local). Such a link
// remembers a digest of each PUBLISH it sends (topic and payload) for
// ECHO_TTL_MS, and an inbound PUBLISH with a remembered digest is taken as
// the echo: acked, not published locally, counted in loop_guarded. A
// message published on the remote with the same topic and payload within
// that time is taken for an echo too (the price of a remote without No
// Local); a slot reused by another digest lets one echo through.
static bool echo_guard_on(const bridge *b)
{
	return b->ver != MQTT_PROTO_V5 && b->cfg->no_local_v4 && b->marker_refused;
}

static uint64_t echo_digest(const uint8_t *t, size_t tl, const uint8_t *p, size_t pl)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < tl; i++) {
		h = (h ^ t[i]) * 1099511628211ull;
	}
	h = (h ^ 0xFF) * 1099511628211ull; // topic | payload
	for (size_t i = 0; i < pl; i++) {
		h = (h ^ p[i]) * 1099511628211ull;
	}
	return h | 1; // never 0 (an empty slot)
}

static void echo_remember_locked(bridge *b, const nmq_msg *m)
{
	if (!echo_guard_on(b)) {
		return;
	}
	if (b->echo == NULL && (b->echo = calloc(ECHO_SLOTS, sizeof(*b->echo))) == NULL) {
		return;
	}
	uint64_t d
	    = echo_digest((const uint8_t *)m->topic, m->topic_len, m->payload, m->payload_len);
	struct echo_slot *s   = &b->echo[d % ECHO_SLOTS];
	uint64_t          now = now_ms();
	if (s->digest == d && now - s->at_ms < ECHO_TTL_MS) {
		s->count++;
	} else {
		s->digest = d;
		s->count  = 1;
	}
	s->at_ms = now;
}

// True when p is the echo of a recent forward (and forgets one of them).
static bool echo_take_locked(bridge *b, const mqtt_publish *p)
{
	if (b->echo == NULL || !echo_guard_on(b)) {
		return false;
	}
	uint64_t          d = echo_digest(p->topic.p, p->topic.len, p->payload.p, p->payload.len);
	struct echo_slot *s = &b->echo[d % ECHO_SLOTS];
	if (s->digest != d || s->count == 0 || now_ms() - s->at_ms >= ECHO_TTL_MS) {
		return false;
	}
	if (--s->count == 0) {
		s->digest = 0;
	}
	return true;
}

// ---------------------------------------------------------------- queue

static bentry *entry_new(bridge *b)
{
	bentry *e = b->pool;
	if (e != NULL) {
		b->pool = e->next;
		b->n_pool--;
		memset(e, 0, sizeof(*e));
		return e;
	}
	return calloc(1, sizeof(*e));
}

static void entry_free(bridge *b, bentry *e)
{
	if (e->msg != NULL) {
		nmq_msg_release(e->msg);
	}
	if (b->n_pool < POOL_MAX) {
		e->next = b->pool;
		b->pool = e;
		b->n_pool++;
		return;
	}
	free(e);
}

static void list_append(bridge *b, bentry *e)
{
	e->next = NULL;
	e->prev = b->tail;
	if (b->tail != NULL) {
		b->tail->next = e;
	} else {
		b->head = e;
	}
	b->tail = e;
	b->n_mem++;
	if (b->next_unsent == NULL) {
		b->next_unsent = e;
	}
}

#ifdef NMQ_HAVE_STORE
// Deletes the cache rows of the entries removed since the last call, in
// one store operation (one wake-up of the store thread, one transaction).
static void flush_deletes_locked(bridge *b)
{
	if (b->n_rng == 0) {
		return;
	}
	nmq_err err
	    = store_queue_del_ranges(b->store, b->store_id, b->del_rng, b->n_rng, NULL, NULL);
	if (err != NMQ_OK) {
		log_warn_rl("bridge", "bridge=%s rows=%u event=cache_delete_failed reason=%s",
		    b->name, b->n_del, nmq_strerror(err));
	}
	b->n_rng = 0;
	b->n_del = 0;
}

// Records that the row of seq is to be deleted (its entry is gone: acked,
// refused or dropped): it extends the last run when it follows it.
static void note_delete_locked(bridge *b, uint64_t seq)
{
	if (b->n_rng > 0 && b->del_rng[2 * b->n_rng - 1] + 1 == seq) {
		b->del_rng[2 * b->n_rng - 1] = seq;
	} else {
		if (b->n_rng == DEL_RANGES) {
			flush_deletes_locked(b);
		}
		b->del_rng[2 * b->n_rng]     = seq;
		b->del_rng[2 * b->n_rng + 1] = seq;
		b->n_rng++;
	}
	if (++b->n_del >= DEL_BATCH) {
		flush_deletes_locked(b);
	}
}
#else
static void flush_deletes_locked(bridge *b)
{
	(void)b;
}
#endif

// Unlinks e (acked, refused or dropped) and frees it; deletes its row (in
// a batch: flush_deletes_locked runs when DEL_BATCH are waiting, when the
// queue drains, on every tick of the link thread and when the link ends).
static void entry_remove(bridge *b, bentry *e, bool delete_row)
{
	if (b->suspect == e) {
		b->suspect        = NULL;
		b->suspect_closes = 0;
		b->suspect_alone  = 0;
	}
	if (b->next_unsent == e) {
		b->next_unsent = e->next;
	}
	if (e->prev != NULL) {
		e->prev->next = e->next;
	} else {
		b->head = e->next;
	}
	if (e->next != NULL) {
		e->next->prev = e->prev;
	} else {
		b->tail = e->prev;
	}
	b->n_mem--;
	if (e->held) {
		e->held = false;
		b->n_held--;
		if (b->held_first == e) {
			bentry *x = e->next;
			while (x != NULL && !x->held) {
				x = x->next;
			}
			b->held_first = b->n_held > 0 ? x : NULL;
		}
	}
	if (e->pid != 0 && b->by_pid[e->pid] == e) {
		b->by_pid[e->pid] = NULL;
		if (e->state != Q_QUEUED && b->inflight > 0 && !e->dup) {
			b->inflight--;
			if (e->qos == 2 && b->inflight_q2 > 0) {
				b->inflight_q2--;
			}
		}
	}
#ifdef NMQ_HAVE_STORE
	if (delete_row && e->seq != 0 && b->store != NULL && b->del_rng != NULL) {
		note_delete_locked(b, e->seq);
	}
#else
	(void)delete_row;
#endif
	entry_free(b, e);
}

// Returns a free packet id (1..65532), or 0 when every one is in use.
static uint16_t pid_alloc(bridge *b, bentry *e)
{
	for (uint32_t i = 0; i < 65532; i++) {
		uint16_t p  = b->next_pid;
		b->next_pid = p >= 65532 ? 1 : (uint16_t)(p + 1);
		if (p != 0 && b->by_pid[p] == NULL) {
			b->by_pid[p] = e;
			e->pid       = p;
			return p;
		}
	}
	return 0;
}

#ifdef NMQ_HAVE_STORE
static void record_state(bridge *b, bentry *e)
{
	if (e->seq == 0 || b->store == NULL || e->qos != 2) {
		return;
	}
	// (The server of a PUBREC rides on the RELEASED state's write.)
	(void)store_queue_state_srv(b->store, b->store_id, e->seq, e->state, e->pid,
	    e->state == Q_RELEASED ? e->rel_srv : 0, NULL, NULL);
}
#else
static void record_state(bridge *b, bentry *e)
{
	(void)b;
	(void)e;
}
#endif

// The oldest entry not in flight (the one a full memory queue drops).
static bentry *oldest_queued(bridge *b)
{
	for (bentry *e = b->head; e != NULL; e = e->next) {
		if (e->state == Q_QUEUED && (e->pid == 0 || b->by_pid[e->pid] != e)) {
			return e;
		}
	}
	return NULL;
}

// Queues msg (held by the caller's reference, consumed) for the remote.
// With the cache, a QoS 1/2 message (QoS 0 too with retry_qos_0) is written
// through to the store first; it joins the memory queue only while nothing
// waits on disk only and the queue has room.
static void enqueue_locked(bridge *b, nmq_msg *msg, uint8_t qos, bool retain)
{
	uint64_t now = now_ms();
	uint64_t seq = 0;
#ifdef NMQ_HAVE_STORE
	if (b->store != NULL && (qos > 0 || b->cfg->retry_qos_0)) {
		seq         = ++b->next_seq;
		bool    mem = b->disk_only == 0 && b->n_mem < b->cfg->max_send_queue_len;
		nmq_err e   = store_queue_put(
		      b->store, b->store_id, seq, msg, qos, retain, NULL, 0, NULL, NULL);
		if (e == NMQ_OK) {
			// On the publisher's worker, while it is routed: its ack
			// waits for this write's commit (see proto_store_noted and
			// proto_set_ack_store).
			proto_store_noted();
			if (!mem) {
				if (b->disk_only == 0 || b->oldest_disk_ms == 0) {
					b->oldest_disk_ms = now;
				}
				if (b->disk_only != DISK_UNKNOWN) {
					b->disk_only++;
				}
				b->puts_since_read++;
				nmq_msg_release(msg);
				return;
			}
		} else {
			// Not cached (the store's queue is full or closing): the
			// publisher gets no success ack for it (decisions/0021); it
			// is kept in memory unless rows on disk must stay ahead.
			log_warn_rl("bridge", "bridge=%s event=cache_write_failed reason=%s",
			    b->name, nmq_strerror(e));
			proto_store_refused();
			seq = 0;
			if (b->disk_only > 0) {
				// Cannot keep it in order behind the rows on disk.
				b->dropped++;
				nmq_msg_release(msg);
				return;
			}
		}
	}
#endif
	// In memory (only there without the cache, or when its write failed).
	if (b->n_mem >= b->cfg->max_send_queue_len) {
		bentry *old = oldest_queued(b);
		b->dropped++;
		log_warn_rl("bridge", "bridge=%s event=dropped reason=max_send_queue_len", b->name);
		if (old == NULL) {
			nmq_msg_release(msg);
			return;
		}
		entry_remove(b, old, true);
	}
	bentry *en = entry_new(b);
	if (en == NULL) {
		b->dropped++;
		nmq_msg_release(msg);
		return;
	}
	en->msg    = msg;
	en->seq    = seq;
	en->qos    = qos;
	en->retain = retain;
	en->at_ms  = now;
	if (seq != 0) {
		b->mem_last_seq = seq;
	}
	list_append(b, en);
}

// ------------------------------------------------------------ the cache

// A server's tag: a hash of its URL as configured (never 0), so that it
// names the same server after a restart and after a reload that adds,
// removes or reorders servers.
static uint32_t srv_tag(const char *url)
{
	uint32_t h = 2166136261u; // FNV-1a
	for (const unsigned char *p = (const unsigned char *)url; *p != '\0'; p++) {
		h = (h ^ *p) * 16777619u;
	}
	return h != 0 ? h : 1;
}

// True when the QoS 2 forward e, RELEASED (its PUBREC came), must be sent
// again as a new message on a link whose server has no session for us;
// false when it is taken as received. It was received when its PUBREC
// came from this server (a remote that lost the session after delivering
// on the PUBLISH). When it came from another one (a failover), this one
// never had it and the other may hold it until our PUBREL (Mosquitto
// delivers then): sent again. Not known (a row of an older file): taken
// as this server's when the bridge has only one, else sent again (at
// least once rather than lost). docs/bridge.md, "Guarantees".
static bool rel_resend(const bridge *b, const bentry *e)
{
	if (e->rel_srv == 0) {
		return b->cfg->n_hybrid_servers > 0;
	}
	return e->rel_srv != b->srv_tag;
}

// e (RELEASED) on a link whose server has no session for us: queued again
// as a new message, or counted received and removed (rel_resend).
static void rel_lost_session_locked(bridge *b, bentry *e)
{
	if (rel_resend(b, e)) {
		if (e->pid != 0 && b->by_pid[e->pid] == e) {
			b->by_pid[e->pid] = NULL;
		}
		e->pid     = 0;
		e->state   = Q_QUEUED;
		e->dup     = false;
		e->wire    = false;
		e->rel_srv = 0;
		record_state(b, e);
	} else {
		b->forwarded++;
		entry_remove(b, e, true);
	}
}

#ifdef NMQ_HAVE_STORE
// Queues a row read back from the cache (mtx held).
static void take_row_locked(bridge *b, const staged *q)
{
	if (q->seq > b->mem_last_seq) {
		bentry *e = entry_new(b);
		if (e != NULL) {
			nmq_msg_hold(q->msg);
			e->msg    = q->msg;
			e->seq    = q->seq;
			e->qos    = q->qos;
			e->retain = q->retain;
			e->at_ms  = b->oldest_disk_ms != 0 ? b->oldest_disk_ms : now_ms();
			if (q->state != Q_QUEUED && q->pid != 0 && q->pid != SUB_PID
			    && b->by_pid[q->pid] == NULL) {
				// In flight when the broker stopped: resent as such.
				e->state          = q->state;
				e->pid            = q->pid;
				e->dup            = true;
				e->wire           = true;
				e->rel_srv        = q->state == Q_RELEASED ? q->srv : 0;
				b->by_pid[q->pid] = e;
			}
			list_append(b, e);
			if (e->state == Q_RELEASED && b->state == BS_UP && b->no_session) {
				// Read after the CONNACK that said so (a row beyond
				// what memory held then): as the CONNACK would have.
				rel_lost_session_locked(b, e);
			}
		}
		b->mem_last_seq = q->seq;
		if (b->disk_only != DISK_UNKNOWN && b->disk_only > 0) {
			b->disk_only--;
		}
		if (q->seq >= b->next_seq) {
			b->next_seq = q->seq;
		}
	}
}

// A row read back from the cache (store thread). A counting read (the
// first after a start) takes the lock per row; any other read only
// stages the row (b->stage holds read_asked of them, and nothing else
// touches it until read_done), so that the workers serving the link do
// not contend with the store thread once per row.
static void read_row(void *arg, const store_qmsg *q)
{
	bridge *b = arg;
	staged  r = { q->msg, q->seq, q->server, q->packet_id, q->qos, q->state, q->retain };
	if (b->stage != NULL) {
		if (b->n_stage < b->read_asked) {
			nmq_msg_hold(q->msg);
			b->stage[b->n_stage++] = r;
		}
		return;
	}
	pthread_mutex_lock(&b->mtx);
	b->read_got++;
	if (b->counting && (b->counted > 0 || b->n_mem >= b->cfg->max_send_queue_len)) {
		// The first read after a start goes through every row: what does
		// not fit in memory is only counted (read again later, in order).
		// Once a row was counted, every later one is too, even if acks
		// freed room meanwhile: memory holds a run of the oldest rows,
		// and the next read starts after the last one it holds.
		b->counted++;
		if (q->seq >= b->next_seq) {
			b->next_seq = q->seq;
		}
		pthread_mutex_unlock(&b->mtx);
		return;
	}
	take_row_locked(b, &r);
	pthread_mutex_unlock(&b->mtx);
}

static void read_done(void *arg, nmq_err err)
{
	bridge *b = arg;
	pthread_mutex_lock(&b->mtx);
	if (b->stage != NULL) {
		b->read_got = b->n_stage;
		for (uint32_t i = 0; i < b->n_stage; i++) {
			take_row_locked(b, &b->stage[i]);
			nmq_msg_release(b->stage[i].msg);
		}
		free(b->stage);
		b->stage   = NULL;
		b->n_stage = 0;
	}
	b->reading = false;
	if (err != NMQ_OK) {
		log_warn("bridge", "bridge=%s event=cache_read_failed reason=%s", b->name,
		    nmq_strerror(err));
	}
	if (b->counting) {
		// Every row on disk was seen: those not in memory, and the puts
		// that went to disk only while the read ran.
		b->counting  = false;
		b->disk_only = b->counted + b->puts_since_read;
		if (b->disk_only > 0 && b->oldest_disk_ms == 0) {
			b->oldest_disk_ms = now_ms();
		}
	} else if (b->read_got < b->read_asked) {
		// Everything on disk before the read is in memory now.
		b->disk_only = b->puts_since_read;
	}
	if (b->disk_only == 0) {
		b->oldest_disk_ms = 0;
	}
	pump_locked(b);
	pthread_mutex_unlock(&b->mtx);
	bridge_release(b);
}

// Refills the memory queue from the cache when it has room.
static void refill_locked(bridge *b)
{
	uint32_t max = b->cfg->max_send_queue_len;
	if (b->store == NULL || b->disk_only == 0 || b->reading || b->stop || b->n_mem > max / 2) {
		return;
	}
	b->counting        = b->disk_only == DISK_UNKNOWN;
	b->counted         = 0;
	b->read_asked      = b->counting ? 0 : (uint32_t)(max - b->n_mem); // 0: every row
	b->read_got        = 0;
	b->puts_since_read = 0;
	b->n_stage         = 0;
	b->stage           = NULL;
	if (!b->counting) {
		b->stage = malloc((size_t)b->read_asked * sizeof(*b->stage));
		if (b->stage == NULL) {
			log_warn_rl("bridge", "bridge=%s event=cache_read_failed reason=%s",
			    b->name, nmq_strerror(NMQ_ENOMEM));
			return;
		}
	}
	atomic_fetch_add(&b->refs, 1);
	nmq_err e = store_queue_read(
	    b->store, b->store_id, b->mem_last_seq, b->read_asked, read_row, read_done, b);
	if (e != NMQ_OK) {
		atomic_fetch_sub(&b->refs, 1);
		free(b->stage);
		b->stage = NULL;
		log_warn_rl("bridge", "bridge=%s event=cache_read_failed reason=%s", b->name,
		    nmq_strerror(e));
		return;
	}
	b->reading = true;
}
#else
static void refill_locked(bridge *b)
{
	(void)b;
}
#endif

// -------------------------------------------------------------- sending

// Encodes and queues one packet on the link. Returns false on failure.
static bool send_packet_locked(bridge *b, const mqtt_packet *pk)
{
	nmq_conn *c     = b->link->c;
	uint8_t   proto = b->ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	size_t    n     = mqtt_encoded_size(proto, pk);
	if (n == 0) {
		return false;
	}
	conn_tx_lock(c);
	uint8_t *p = conn_tx_reserve(c, n);
	if (p != NULL) {
		mqtt_encode(p, n, proto, pk);
		conn_tx_commit(c, n);
	}
	conn_tx_unlock(c);
	conn_tx_flush_later(c);
	if (p != NULL) {
		b->last_tx_ms = now_ms();
	}
	return p != NULL;
}

static void send_ack_locked(bridge *b, uint8_t type, uint16_t pid)
{
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type            = type;
	pk.flags           = type == MQTT_PUBREL ? 0x2 : 0;
	pk.u.ack.packet_id = pid;
	(void)send_packet_locked(b, &pk);
}

// Encodes one PUBLISH of e. Returns 1 sent, 0 no room (try later), -1 it
// can never be sent (too large).
static int send_publish_locked(bridge *b, bentry *e, bool dup)
{
	nmq_msg          *m = e->msg;
	mqtt_publish_head h;
	memset(&h, 0, sizeof(h));
	h.proto       = b->ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	h.qos         = e->qos;
	h.dup         = dup && e->wire && e->qos > 0;
	h.retain      = e->retain && b->remote_retain;
	h.topic       = (const uint8_t *)m->topic;
	h.topic_len   = m->topic_len;
	h.packet_id   = e->qos > 0 ? e->pid : 0;
	h.payload_len = m->payload_len;
	if (h.proto == MQTT_PROTO_V5) {
		h.fwd_props_len = m->props_len;
		if (m->expiry_at_ms != 0) {
			h.has_expiry = true;
			h.expiry     = nmq_msg_remaining(m, now_ms());
			if (h.expiry == 0) {
				h.expiry = 1;
			}
		}
	}
	size_t total = mqtt_publish_total_size(&h);
	if (total == 0 || (b->remote_max_packet != 0 && total > b->remote_max_packet)) {
		return -1;
	}
	nmq_conn      *c        = b->link->c;
	size_t         hs       = mqtt_publish_head_size(&h);
	const uint8_t *tail     = h.proto == MQTT_PROTO_V5 ? m->props : m->payload;
	size_t         tail_len = m->payload_len + (h.proto == MQTT_PROTO_V5 ? m->props_len : 0);
	bool           copy     = tail_len <= 1024;
	int            rc       = 1;
	conn_tx_lock(c);
	uint8_t *p = conn_tx_reserve(c, hs + (copy ? tail_len : 0));
	if (p == NULL) {
		rc = 0;
	} else if (mqtt_publish_head_encode(p, hs, &h) != hs) {
		rc = -1;
	} else if (copy) {
		memcpy(p + hs, tail, tail_len);
		conn_tx_commit(c, hs + tail_len);
	} else {
		conn_tx_commit(c, hs);
		if (!conn_tx_ref(c, m, tail, tail_len)) {
			rc = 0;
		}
	}
	conn_tx_unlock(c);
	if (rc > 0) {
		e->wire = true;
	}
	return rc;
}

// True when the link's send buffer is full (conn_tx_full needs the
// connection's tx lock: a flush on a worker changes what it reads).
static bool link_tx_full(nmq_conn *c)
{
	conn_tx_lock(c);
	bool full = conn_tx_full(c);
	conn_tx_unlock(c);
	return full;
}

// Drops e, which can never be sent on this link (larger than the remote's
// maximum packet size).
static void drop_too_large_locked(bridge *b, bentry *e)
{
	b->dropped++;
	NMQ_LOG_RL(LOG_LEVEL_ERROR, "bridge",
	    "bridge=%s topic=%.*s event=dropped "
	    "reason=larger_than_remote_maximum",
	    b->name, (int)(e->msg->topic_len > 200 ? 200 : e->msg->topic_len), e->msg->topic);
	entry_remove(b, e, true);
}

// The first PUBLISH of a cached QoS 2 forward goes only once its SENT
// state (with its packet id) has committed (decisions/0041): a remote
// that delivers QoS 2 on the PUBLISH (the spec's "method A") would
// otherwise, after a kill -9 before that commit, get the message again
// from the restart under a fresh packet id, a new message to it. pump_locked
// counts such an entry in flight, records its state and marks it held;
// every entry held in one pass waits for one store_sync barrier
// (hold_commit_locked), whose completion sends them (release_held_locked).
// What follows a held entry in the queue waits behind it (the order),
// except more QoS 2 forwards, held with it.
//
#ifdef NMQ_HAVE_STORE
// Releases the entries held for barrier batch or an earlier one (mtx
// held): each one still counted on the current link is sent; one whose
// link has gone since (dup) is resent by the next link's pump.
static void release_held_locked(bridge *b, uint32_t batch)
{
	bool    up     = b->link != NULL && b->up && !b->link->closed;
	bool    sent   = false;
	bentry *rewind = NULL; // the first that found no room on the link
	bentry *e      = b->held_first;
	while (e != NULL && b->n_held > 0) {
		bentry *nx = e->next;
		if (!e->held) {
			e = nx;
			continue;
		}
		if ((int32_t)(e->hold_batch - batch) > 0) {
			break; // a later barrier's
		}
		e->held = false;
		b->n_held--;
		if (!e->dup && up) {
			int rc = rewind == NULL ? send_publish_locked(b, e, false) : 0;
			if (rc > 0) {
				echo_remember_locked(b, e->msg);
				sent = true;
			} else if (rc < 0) {
				drop_too_large_locked(b, e);
			} else {
				// No room on the link now: sent again by pump_locked, as
				// after a reconnect (not counted in flight until then).
				e->dup = true;
				if (b->inflight > 0) {
					b->inflight--;
				}
				if (b->inflight_q2 > 0) {
					b->inflight_q2--;
				}
				if (rewind == NULL) {
					rewind = e;
				}
			}
		}
		e = nx;
	}
	b->held_first = b->n_held > 0 ? e : NULL;
	if (rewind != NULL) {
		b->next_unsent = rewind; // what it passed since is sent or held
	}
	if (sent) {
		conn_tx_flush_later(b->link->c);
	}
}

typedef struct hold_out {
	bridge  *b; // held
	uint32_t batch;
} hold_out;

static void hold_done(void *arg, nmq_err err)
{
	hold_out *h = arg;
	bridge   *b = h->b;
	(void)err; // not stored: sent anyway (as before decisions/0041)
	pthread_mutex_lock(&b->mtx);
	release_held_locked(b, h->batch);
	pump_locked(b); // what waited behind them
	pthread_mutex_unlock(&b->mtx);
	bridge_release(b);
	free(h);
}

// The barrier the entries held by this pass of pump_locked wait for.
static void hold_commit_locked(bridge *b)
{
	uint32_t  batch = b->hold_batch++;
	hold_out *h     = malloc(sizeof(*h));
	if (h != NULL) {
		*h = (hold_out) { b, batch };
		atomic_fetch_add(&b->refs, 1);
		if (store_sync(b->store, hold_done, h) == NMQ_OK) {
			return;
		}
		atomic_fetch_sub(&b->refs, 1);
		free(h);
	}
	release_held_locked(b, batch); // no barrier: at once
}
#endif

// Sends what the window allows, oldest first: entries to resend after a
// reconnect (dup: PUBLISH with DUP, or PUBREL) and new ones. Then refills
// the memory queue from the cache.
static void pump_locked(bridge *b)
{
	b->pump_at = 0; // what it waited for goes now
	if (b->link != NULL && b->up && !b->link->closed) {
		nmq_conn *c    = b->link->c;
		bool      sent = false;
		bool      hold = false; // entries held in this pass
		while (b->next_unsent != NULL && !link_tx_full(c)) {
			bentry *e = b->next_unsent;
			if (e->held) {
				break; // waits for its state's commit; what follows too
			}
			if (e->qos > b->remote_max_qos && e->state != Q_RELEASED) {
				// A client must not send a QoS above the server's Maximum
				// QoS (MQTT 5.0 3.2.2.3.4): the remote would close the
				// link on it. Sent at that QoS (and acked as such).
				e->qos = b->remote_max_qos;
			}
			bool counts = e->qos > 0 && (e->state == Q_QUEUED || e->dup);
			if (counts && b->inflight >= b->window) {
				break;
			}
			if (counts && e->qos == 2 && b->ver != MQTT_PROTO_V5
			    && b->inflight_q2 >= V3_WINDOW_Q2) {
				break; // in order: what follows waits too
			}
			if (e->state != Q_QUEUED && !e->dup) {
				b->next_unsent = e->next; // sent on this link already
				continue;
			}
			bool holds = false; // its PUBLISH waits for its SENT state
#ifdef NMQ_HAVE_STORE
			holds = e->qos == 2 && e->state == Q_QUEUED && e->seq != 0
			    && b->store != NULL;
#endif
			if (b->n_held > 0 && !holds) {
				break; // in order: behind the held ones
			}
			if (e->state == Q_RELEASED) {
				send_ack_locked(b, MQTT_PUBREL, e->pid);
				e->dup = false;
				b->inflight++;
				b->inflight_q2++;
				b->next_unsent = e->next;
				sent           = true;
				continue;
			}
			if (e->state == Q_QUEUED && e->msg->expiry_at_ms != 0
			    && nmq_msg_remaining(e->msg, now_ms()) == 0) {
				// Its Message Expiry Interval passed while it waited: a
				// server must not forward it (MQTT 5.0 3.3.2.3.3).
				b->next_unsent = e->next;
				b->expired++;
				b->dropped++;
				entry_remove(b, e, true);
				continue;
			}
			if (e->qos > 0 && e->pid == 0 && pid_alloc(b, e) == 0) {
				break;
			}
			if (holds) {
				b->next_unsent = e->next;
				b->inflight++;
				b->inflight_q2++;
				e->dup        = false;
				e->state      = Q_SENT;
				e->held       = true;
				e->hold_batch = b->hold_batch;
				if (b->n_held++ == 0) {
					b->held_first = e;
				}
				record_state(b, e);
				hold = true;
				continue;
			}
			int rc = send_publish_locked(b, e, e->state == Q_SENT);
			if (rc == 0) {
				break;
			}
			sent           = true;
			b->next_unsent = e->next;
			if (rc > 0) {
				echo_remember_locked(b, e->msg);
			}
			if (rc < 0) {
				drop_too_large_locked(b, e);
				continue;
			}
			if (e->qos == 0) {
				b->forwarded++;
				entry_remove(b, e, true);
				continue;
			}
			b->inflight++;
			if (e->qos == 2) {
				b->inflight_q2++;
			}
			e->dup = false;
			if (e->state == Q_QUEUED) {
				e->state = Q_SENT;
				record_state(b, e);
			}
		}
		if (sent) {
			conn_tx_flush_later(c);
			b->last_tx_ms = now_ms();
		}
#ifdef NMQ_HAVE_STORE
		if (hold) {
			hold_commit_locked(b);
		}
#else
		(void)hold;
#endif
	}
	if (b->n_mem == 0 && b->n_rng > 0) {
		flush_deletes_locked(b); // drained: nothing more to batch with
	}
	refill_locked(b);
}

// After an ack freed a slot of the window (mtx held). A drain keeps the
// window full: sending the one PUBLISH each ack makes room for as it comes
// sets the link's pace to a few packets per read and write, each a
// wake-up of the worker (and of the remote), about 10 us each. While at
// least half of a wide window is still in flight the remote has plenty
// to answer, so the refill waits until REFILL_BATCH slots are free, at
// most REFILL_WAIT_MS (the link thread then sends what is free): the
// link carries larger writes, answered by larger reads, at a fraction
// of the wake-ups. The wait is bounded because a remote may hold its acks
// back (Nagle's algorithm on its side, waiting for our ACK, which would
// come with our next PUBLISH). A narrow window (a v5 Receive Maximum
// under REFILL_MIN_WINDOW, a probe's window of 1) is refilled at once.
static void pump_after_ack_locked(bridge *b)
{
	uint32_t room = b->window > b->inflight ? b->window - b->inflight : 0;
	if (b->window >= REFILL_MIN_WINDOW && room < REFILL_BATCH && b->inflight >= b->window / 2
	    && b->next_unsent != NULL) {
		if (b->pump_at == 0) {
			b->pump_at = now_ms() + REFILL_WAIT_MS;
			pthread_cond_broadcast(&b->cv); // the link thread's deadline
		}
		refill_locked(b); // reading the cache back does not wait
		return;
	}
	pump_locked(b);
}

// --------------------------------------------------------------- forwards

static void fwd_hold(broker_sink *s)
{
	atomic_fetch_add(&((bfwd *)s)->b->refs, 1);
}

static void fwd_release(broker_sink *s)
{
	bridge_release(((bfwd *)s)->b);
}

// Builds "<prefix><topic><suffix>" for the remote topic of f, or holds m
// when nothing changes. Returns NULL when out of memory or too long.
static nmq_msg *rewrite(nmq_msg *m, const char *topic, const char *prefix, const char *suffix)
{
	size_t tl = topic != NULL && topic[0] != '\0' ? strlen(topic) : m->topic_len;
	size_t pl = prefix != NULL ? strlen(prefix) : 0;
	size_t sl = suffix != NULL ? strlen(suffix) : 0;
	if ((topic == NULL || topic[0] == '\0') && pl == 0 && sl == 0) {
		nmq_msg_hold(m);
		return m;
	}
	size_t n = pl + tl + sl;
	if (n > 65535) {
		return NULL;
	}
	char *t = malloc(n + 1);
	if (t == NULL) {
		return NULL;
	}
	memcpy(t, prefix != NULL ? prefix : "", pl);
	memcpy(t + pl, topic != NULL && topic[0] != '\0' ? topic : m->topic, tl);
	memcpy(t + pl + tl, suffix != NULL ? suffix : "", sl);
	t[n]       = '\0';
	nmq_msg *c = nmq_msg_alloc(t, n, m->props_len, m->payload_len);
	free(t);
	if (c == NULL) {
		return NULL;
	}
	memcpy(c->props, m->props, m->props_len);
	memcpy(c->payload, m->payload, m->payload_len);
	c->qos             = m->qos;
	c->retain          = m->retain;
	c->expiry_interval = m->expiry_interval;
	c->expiry_at_ms    = m->expiry_at_ms;
	c->origin_id       = m->origin_id;
	return c;
}

// A local message matched forward s (publisher's worker thread).
static void fwd_deliver(broker_sink *s, nmq_msg *msg, uint8_t qos, bool retain)
{
	bfwd   *f = (bfwd *)s;
	bridge *b = f->b;
	pthread_mutex_lock(&b->mtx);
	if (f->dead || b->stop) {
		pthread_mutex_unlock(&b->mtx);
		return;
	}
	if (msg->origin_id == b->origin
	    && (b->cfg->proto_ver == MQTT_PROTO_V5 || b->cfg->no_local_v4)) {
		b->loop_guarded++;
		pthread_mutex_unlock(&b->mtx);
		return;
	}
	const conf_bridge_fwd *fc = f->cfg;
	if (fc->qos >= 0) {
		qos = (uint8_t)fc->qos;
	} else {
		qos = msg->qos;
	}
	if (fc->retain != 2) {
		retain = fc->retain == 1;
	} else {
		retain = msg->retain;
	}
	if (qos == 0 && !b->up && !b->cfg->retry_qos_0) {
		b->dropped_qos0++;
		b->dropped++;
		pthread_mutex_unlock(&b->mtx);
		return;
	}
	nmq_msg *m = rewrite(msg, fc->remote_topic, fc->prefix, fc->suffix);
	if (m == NULL) {
		b->dropped++;
		log_warn_rl("bridge", "bridge=%s event=dropped reason=out_of_memory", b->name);
		pthread_mutex_unlock(&b->mtx);
		return;
	}
	enqueue_locked(b, m, qos, retain);
	pump_locked(b);
	pthread_mutex_unlock(&b->mtx);
}

static void self_hold(broker_sink *s)
{
	(void)s;
}

static void self_release(broker_sink *s)
{
	(void)s;
}

static void self_deliver(broker_sink *s, nmq_msg *msg, uint8_t qos, bool retain)
{
	(void)s;
	(void)msg;
	(void)qos;
	(void)retain;
}

// Puts b's forwards in the tree (b->mtx not held: the tree may call back).
static void fwds_subscribe(bridge *b, bfwd *fw, int n)
{
	for (int i = 0; i < n; i++) {
		nmq_err e = broker_sink_subscribe(
		    b->set->env.broker, &fw[i].sink, fw[i].cfg->local_topic, 2, false);
		if (e != NMQ_OK) {
			log_warn("bridge", "bridge=%s filter=%s event=forward_not_added reason=%s",
			    b->name, fw[i].cfg->local_topic, nmq_strerror(e));
		}
	}
}

static void fwds_unsubscribe(bridge *b, bfwd *fw, int n)
{
	for (int i = 0; i < n; i++) {
		(void)broker_sink_unsubscribe(
		    b->set->env.broker, &fw[i].sink, fw[i].cfg->local_topic);
	}
}

static bfwd *fwds_alloc(bridge *b, const conf_bridge *cfg)
{
	bfwd *fw = calloc((size_t)(cfg->n_fwds > 0 ? cfg->n_fwds : 1), sizeof(*fw));
	if (fw == NULL) {
		return NULL;
	}
	for (int i = 0; i < cfg->n_fwds; i++) {
		fw[i].sink.deliver = fwd_deliver;
		fw[i].sink.hold    = fwd_hold;
		fw[i].sink.release = fwd_release;
		fw[i].b            = b;
		fw[i].cfg          = &cfg->fwds[i];
	}
	return fw;
}

// ---------------------------------------------------------------- inbound

static const conf_bridge_sub *sub_for(const conf_bridge *cfg, const uint8_t *t, size_t len)
{
	for (int i = 0; i < cfg->n_subs; i++) {
		const conf_bridge_sub *s = &cfg->subs[i];
		// A shared subscription's messages match its inner filter.
		mqtt_share sh;
		if (mqtt_share_split((const uint8_t *)s->remote_topic, strlen(s->remote_topic), &sh)
		        != MQTT_SHARE_MALFORMED
		    && topic_filter_match((const char *)sh.filter, sh.flen, (const char *)t, len)) {
			return s;
		}
	}
	return NULL;
}

// Publishes a message from the remote locally (link worker, b->mtx not
// held). Returns false when it could not be built.
static bool publish_local(bridge *b, const conf_bridge *cfg, const mqtt_publish *p)
{
	const conf_bridge_sub *s = sub_for(cfg, p->topic.p, p->topic.len);
	if (s == NULL && !cfg->transparent) {
		// Of no subscription (one a reload removed, still in a persistent
		// remote session): not ours to publish, and no rewrite to give it.
		log_info_rl(
		    "bridge", "bridge=%s event=inbound_dropped reason=no_subscription", b->name);
		return false;
	}
	const char *base   = s != NULL && s->local_topic != NULL && s->local_topic[0] != '\0'
	      ? s->local_topic
	      : NULL;
	const char *prefix = s != NULL && s->prefix != NULL ? s->prefix : "";
	const char *suffix = s != NULL && s->suffix != NULL ? s->suffix : "";
	size_t      bl     = base != NULL ? strlen(base) : p->topic.len;
	size_t      pl = strlen(prefix), sl = strlen(suffix);
	char        stack[512];
	char       *t = pl + bl + sl + 1 <= sizeof(stack) ? stack : malloc(pl + bl + sl + 1);
	if (t == NULL) {
		return false;
	}
	memcpy(t, prefix, pl);
	memcpy(t + pl, base != NULL ? base : (const char *)p->topic.p, bl);
	memcpy(t + pl + bl, suffix, sl);
	size_t n = pl + bl + sl;
	t[n]     = '\0';
	bool rt  = p->retain;
	if (s != NULL && s->retain != 2) {
		rt = s->retain == 1;
	}
	mqtt_bytes tb = { (const uint8_t *)t, (uint32_t)n };
	nmq_msg   *m  = NULL;
	if (n <= 65535 && mqtt_topic_name_valid((const uint8_t *)t, n)) {
		m = proto_msg_build(b->ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311, tb,
		    b->ver == MQTT_PROTO_V5 ? &p->props : NULL, p->payload, p->qos, rt, b->origin);
	}
	if (t != stack) {
		free(t);
	}
	if (m == NULL) {
		return false;
	}
	proto_who who = { cfg->clientid != NULL ? cfg->clientid : b->host_id, cfg->username,
		b->server_now, PROTO_ACL_NONE, false, 0, 0 };
	int       rc  = broker_sink_publish(b->set->env.broker, &b->self, &who, m);
	nmq_msg_release(m);
	if (rc != 0) {
		log_info_rl("bridge", "bridge=%s event=inbound_refused reason=0x%02x", b->name, rc);
		return false;
	}
	return true;
}

#ifdef NMQ_HAVE_STORE
// The PUBREL of a cached QoS 2 forward waits for the commit of its
// RELEASED state (recorded at its PUBREC): a remote may deliver the
// message on our PUBREL and then forget its packet id (Mosquitto does),
// so after a kill -9 a row still SENT would send the PUBLISH again (DUP,
// same packet id), which the remote takes for a new message: delivered
// twice. With the state committed first, the row says RELEASED and a
// restart sends the PUBREL, not the message.
typedef struct rel_out {
	bridge  *b; // held
	uint64_t gen; // b->link_gen of the link the PUBREC came by
	uint16_t pid;
} rel_out;

static void pubrel_done(void *arg, nmq_err err)
{
	rel_out *r = arg;
	bridge  *b = r->b;
	(void)err; // not stored: sent anyway (as a reconnect would)
	pthread_mutex_lock(&b->mtx);
	bentry *e = b->by_pid[r->pid];
	if (b->link != NULL && !b->link->closed && b->up && b->link_gen == r->gen && e != NULL
	    && e->state == Q_RELEASED) {
		send_ack_locked(b, MQTT_PUBREL, r->pid);
	}
	pthread_mutex_unlock(&b->mtx);
	bridge_release(b);
	free(r);
}

// Sends e's PUBREL once its RELEASED state has committed (mtx held).
static void send_pubrel_locked(bridge *b, bentry *e)
{
	if (e->seq != 0 && b->store != NULL) {
		rel_out *r = malloc(sizeof(*r));
		if (r != NULL) {
			*r = (rel_out) { b, b->link_gen, e->pid };
			atomic_fetch_add(&b->refs, 1);
			if (store_sync(b->store, pubrel_done, r) == NMQ_OK) {
				return;
			}
			atomic_fetch_sub(&b->refs, 1);
			free(r);
		}
	}
	send_ack_locked(b, MQTT_PUBREL, e->pid);
}

// The PUBACK or PUBREC of a PUBLISH from the remote, waiting for the
// commit of what routing it wrote (the queue rows of offline persistent
// sessions, a retained copy): the remote forgets a message once acked, so
// a crash before that commit would lose it. The store's barriers complete
// in order, so the acks keep the order of their PUBLISHes.
typedef struct in_ack {
	bridge  *b; // held
	uint64_t gen; // b->link_gen of the link the PUBLISH came by
	uint8_t  type;
	uint16_t pid;
} in_ack;

static void in_ack_done(void *arg, nmq_err err)
{
	in_ack *a = arg;
	bridge *b = a->b;
	pthread_mutex_lock(&b->mtx);
	if (b->link != NULL && !b->link->closed && b->link_gen == a->gen) {
		if (err == NMQ_OK) {
			send_ack_locked(b, a->type, a->pid);
		} else {
			// Not stored: no ack; the remote resends it on the next
			// link.
			set_error_locked(b, "a message from the remote could not be stored");
			conn_close(b->link->c);
		}
	}
	pthread_mutex_unlock(&b->mtx);
	bridge_release(b);
	free(a);
}

// Sends the ack once everything queued in the store so far has committed
// (mtx held; called inside the store batch of the routing).
static void in_ack_later_locked(bridge *b, uint8_t type, uint16_t pid)
{
	in_ack *a = malloc(sizeof(*a));
	if (a != NULL) {
		a->b    = b;
		a->gen  = b->link_gen;
		a->type = type;
		a->pid  = pid;
		atomic_fetch_add(&b->refs, 1);
		if (store_sync(b->store, in_ack_done, a) == NMQ_OK) {
			return;
		}
		atomic_fetch_sub(&b->refs, 1);
		free(a);
	}
	set_error_locked(b, "a message from the remote could not be stored");
	conn_close(b->link->c);
}

// True when the inbound QoS 2 ids are kept in the store: the remote keeps
// the session (clean_start = false) and resends, after a restart of ours,
// a PUBLISH whose PUBREC it did not get.
static bool rel_durable(const bridge *b)
{
	return b->store != NULL && !b->cfg->clean_start;
}

// Forgets every inbound QoS 2 id (the remote lost the session), their
// rows too (mtx held).
static void rel_clear_locked(bridge *b)
{
	if (b->store != NULL && b->rel_rows) {
		// One batch: one hand-over to the store thread and one
		// transaction for all of them, not one per id.
		uint32_t failed = 0;
		store_batch_begin(b->store);
		for (uint32_t byte = 0; byte < sizeof(b->rel); byte++) {
			for (uint32_t bits = b->rel[byte]; bits != 0; bits &= bits - 1) {
				uint16_t pid = (uint16_t)(byte * 8 + (uint32_t)__builtin_ctz(bits));
				if (store_rel_del(b->store, b->store_id, pid, NULL, NULL)
				    != NMQ_OK) {
					failed++;
				}
			}
		}
		store_batch_end(b->store);
		if (failed > 0) {
			log_warn("bridge", "bridge=%s ids=%u event=qos2_ids_not_deleted", b->name,
			    failed);
		}
		b->rel_rows = false;
	}
	memset(b->rel, 0, sizeof(b->rel));
}

// An inbound QoS 2 id read back at start (store thread).
static void rel_load_row(void *arg, uint16_t pid)
{
	bridge *b = arg;
	pthread_mutex_lock(&b->mtx);
	b->rel[pid / 8] |= (uint8_t)(1u << (pid % 8));
	b->rel_rows = true;
	pthread_mutex_unlock(&b->mtx);
}

static void rel_load_done(void *arg, nmq_err err)
{
	bridge *b = arg;
	pthread_mutex_lock(&b->mtx);
	if (err != NMQ_OK) {
		log_warn("bridge", "bridge=%s event=qos2_ids_not_read reason=%s", b->name,
		    nmq_strerror(err));
	} else if (b->rel_rows) {
		uint32_t n = 0;
		for (size_t i = 0; i < sizeof(b->rel); i++) {
			n += (uint32_t)__builtin_popcount(b->rel[i]);
		}
		log_info("bridge", "bridge=%s event=qos2_ids_read ids=%u", b->name, n);
	}
	b->rel_loading = false;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mtx);
	bridge_release(b);
}

// Reads the inbound QoS 2 ids back (bridge start; the link waits for it).
static void rel_load_start(bridge *b)
{
	if (b->store == NULL) {
		return;
	}
	pthread_mutex_lock(&b->mtx);
	b->rel_loading = true;
	atomic_fetch_add(&b->refs, 1);
	nmq_err e = store_rels_read(b->store, b->store_id, rel_load_row, rel_load_done, b);
	if (e != NMQ_OK) {
		atomic_fetch_sub(&b->refs, 1);
		b->rel_loading = false;
		log_warn("bridge", "bridge=%s event=qos2_ids_not_read reason=%s", b->name,
		    nmq_strerror(e));
	}
	pthread_mutex_unlock(&b->mtx);
}
#else
static void send_pubrel_locked(bridge *b, bentry *e)
{
	send_ack_locked(b, MQTT_PUBREL, e->pid);
}

static bool rel_durable(const bridge *b)
{
	(void)b;
	return false;
}

static void rel_clear_locked(bridge *b)
{
	memset(b->rel, 0, sizeof(b->rel));
}

static void rel_load_start(bridge *b)
{
	(void)b;
}
#endif

// ------------------------------------------------------------ link frames

// An ack of a forward came on this link (mtx held): the remote takes what
// is sent, so no forward is suspected of closing the link, and a probe
// ends (the window opens again). Returns true when a probe ended.
static bool acked_locked(bridge *b)
{
	bool ended        = b->probe;
	b->link_acked     = true;
	b->suspect        = NULL;
	b->suspect_closes = 0;
	b->suspect_alone  = 0;
	if (ended) {
		b->probe  = false;
		b->window = b->window_full;
		log_info("bridge", "bridge=%s event=probe_ended window=%u", b->name, b->window);
	}
	return ended;
}

// The link closed (mtx held, before its entries are reset for the next
// link). oldest: the oldest PUBLISH awaiting its PUBACK / PUBREC, if it
// was sent on this link; alone: nothing else was in flight. Counts the
// closes that may be its doing: the link was up, the remote closed it
// (no DISCONNECT, or a v5 DISCONNECT naming a fault of a message), no ack
// of any forward came on it, and the same oldest was sent on it. After
// SUSPECT_CLOSES such closes the next links send one PUBLISH at a time
// (probe); after SUSPECT_ALONE of them in a probe with the suspect alone
// in flight, it is dropped (returned; the caller drops it once the link's
// state is reset). Anything else (a stall found by the keepalive, a close
// of ours, an ack, nothing in flight) clears the suspicion: a cut or a
// remote restart during a stream, whose acks flow, never drops anything.
static bentry *note_close_locked(bridge *b, bool was_up, bool by_remote, bentry *oldest, bool alone)
{
	if (!was_up) {
		return NULL; // no CONNACK: nothing was sent
	}
	if (!by_remote || b->link_acked || oldest == NULL) {
		if (b->probe) {
			log_info("bridge", "bridge=%s event=probe_ended", b->name);
		}
		b->suspect        = NULL;
		b->suspect_closes = 0;
		b->suspect_alone  = 0;
		b->probe          = false;
		return NULL;
	}
	if (oldest != b->suspect) {
		b->suspect        = oldest;
		b->suspect_closes = 0;
		b->suspect_alone  = 0;
		b->probe          = false;
	}
	b->suspect_closes++;
	if (b->probe && alone) {
		b->suspect_alone++;
	}
	int tl = (int)(oldest->msg->topic_len > 200 ? 200 : oldest->msg->topic_len);
	if (b->suspect_alone >= SUSPECT_ALONE) {
		return oldest;
	}
	if (!b->probe && b->suspect_closes >= SUSPECT_CLOSES) {
		b->probe = true;
		log_warn("bridge",
		    "bridge=%s topic=%.*s bytes=%u closes=%u event=suspect_forward "
		    "action=window_1",
		    b->name, tl, oldest->msg->topic, oldest->msg->payload_len, b->suspect_closes);
	}
	return NULL;
}

// Drops e, which the remote closed the link on each time it was alone in
// flight (mtx held, link gone).
static void drop_suspect_locked(bridge *b, bentry *e)
{
	int tl = (int)(e->msg->topic_len > 200 ? 200 : e->msg->topic_len);
	log_error("bridge",
	    "bridge=%s topic=%.*s qos=%u bytes=%u closes=%u event=dropped "
	    "reason=remote_closed_link",
	    b->name, tl, e->msg->topic, e->qos, e->msg->payload_len, b->suspect_closes);
	b->dropped++;
	b->dropped_link_closed++;
	b->probe = false;
	entry_remove(b, e, true);
}

// The remote refused e for now (quota exceeded, rate too high): e goes
// back to the queue, in its place, and the window halves so that the
// remote's real limit is found.
static void requeue_locked(bridge *b, bentry *e)
{
	b->by_pid[e->pid] = NULL;
	e->pid            = 0;
	e->state          = Q_QUEUED;
	e->dup            = false;
	if (b->inflight > 0) {
		b->inflight--;
	}
	if (e->qos == 2 && b->inflight_q2 > 0) {
		b->inflight_q2--;
	}
	b->window = b->window > 2 ? b->window / 2 : 1;
	bentry *x = b->next_unsent;
	while (x != NULL && x != e) {
		x = x->next;
	}
	if (x == NULL) {
		b->next_unsent = e; // e is older than everything not yet sent
	}
	log_info_rl(
	    "bridge", "bridge=%s event=remote_quota_exceeded window=%u", b->name, b->window);
	record_state(b, e);
}

// Sets n user properties (v5) on p.
static void bridge_user_props_set(mqtt_props *p, const mqtt_user_prop *up, uint32_t n)
{
	if (n > 0 && up != NULL) {
		p->present |= MQTT_PBIT(MQTT_PROP_USER_PROPERTY);
		p->user_props   = up;
		p->n_user_props = n;
	}
}

// The codec's view of configured user properties (out has room for 64,
// the configuration's bound). Returns the count.
static uint32_t conf_props_codec(const conf_props *p, mqtt_user_prop *out)
{
	uint32_t n = 0;
	for (int i = 0; i < p->n && n < 64; i++, n++) {
		out[n].key.p     = (const uint8_t *)p->kv[2 * i];
		out[n].key.len   = (uint32_t)strlen(p->kv[2 * i]);
		out[n].value.p   = (const uint8_t *)p->kv[2 * i + 1];
		out[n].value.len = (uint32_t)strlen(p->kv[2 * i + 1]);
	}
	return n;
}

// Sends one SUBSCRIBE of subs[0..n) on the link (mtx held, link up), with
// the configured subscription identifier and user properties (v5): the
// configured ones, or up[0..n_up) when given.
static void send_subscribe_locked(bridge *b, const conf_bridge_sub *subs, int n, uint16_t pid,
    const mqtt_user_prop *up, uint32_t n_up)
{
	const conf_bridge *cfg = b->cfg;
	size_t             cap = 0;
	for (int i = 0; i < n; i++) {
		cap += strlen(subs[i].remote_topic) + 3;
	}
	uint8_t       *list  = malloc(cap);
	size_t         len   = 0;
	uint8_t        proto = b->ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	mqtt_user_prop cup[64]; // the configured user properties, while encoding
	for (int i = 0; list != NULL && i < n; i++) {
		const conf_bridge_sub *s = &subs[i];
		mqtt_sub_opts          o = { (uint8_t)s->qos, false, false, 0 };
		if (proto == MQTT_PROTO_V5) {
			// No Local on a shared subscription is a Protocol Error
			// (MQTT 5.0 3.8.3.1): the remote would close the link.
			o.no_local = s->nolocal
			    && mqtt_share_split(
			           (const uint8_t *)s->remote_topic, strlen(s->remote_topic), NULL)
			        == MQTT_SHARE_NONE;
			o.retain_as_published = s->retain_as_published;
			o.retain_handling     = (uint8_t)s->retain_handling;
		}
		mqtt_bytes f
		    = { (const uint8_t *)s->remote_topic, (uint32_t)strlen(s->remote_topic) };
		len += mqtt_sub_list_put(list + len, cap - len, proto, f, &o);
	}
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type                  = MQTT_SUBSCRIBE;
	pk.flags                 = 0x2;
	pk.u.subscribe.packet_id = pid;
	pk.u.subscribe.count     = (uint32_t)n;
	pk.u.subscribe.list.p    = list;
	pk.u.subscribe.list.len  = (uint32_t)len;
	if (proto == MQTT_PROTO_V5) {
		if (cfg->sub_identifier > 0) {
			pk.u.subscribe.props.present |= MQTT_PBIT(MQTT_PROP_SUBSCRIPTION_ID);
			pk.u.subscribe.props.subscription_id = cfg->sub_identifier;
		}
		if (up == NULL) {
			up   = cup;
			n_up = conf_props_codec(&cfg->sub_user_props, cup);
		}
		bridge_user_props_set(&pk.u.subscribe.props, up, n_up);
	}
	if (list == NULL || !send_packet_locked(b, &pk)) {
		log_warn("bridge", "bridge=%s event=subscribe_not_sent", b->name);
	}
	free(list);
}

// Sends one UNSUBSCRIBE of filters[0..n) on the link (mtx held, link up),
// with user properties up[0..n_up) (v5).
static void send_unsubscribe_locked(bridge *b, const char *const *filters, int n, uint16_t pid,
    const mqtt_user_prop *up, uint32_t n_up)
{
	size_t cap = 0;
	for (int j = 0; j < n; j++) {
		cap += strlen(filters[j]) + 2;
	}
	uint8_t *list = malloc(cap);
	size_t   len  = 0;
	for (int j = 0; list != NULL && j < n; j++) {
		mqtt_bytes f = { (const uint8_t *)filters[j], (uint32_t)strlen(filters[j]) };
		len += mqtt_unsub_list_put(list + len, cap - len, f);
	}
	mqtt_packet pk;
	memset(&pk, 0, sizeof(pk));
	pk.type                    = MQTT_UNSUBSCRIBE;
	pk.flags                   = 0x2;
	pk.u.unsubscribe.packet_id = pid;
	pk.u.unsubscribe.count     = (uint32_t)n;
	pk.u.unsubscribe.list.p    = list;
	pk.u.unsubscribe.list.len  = (uint32_t)len;
	if (b->ver == MQTT_PROTO_V5) {
		bridge_user_props_set(&pk.u.unsubscribe.props, up, n_up);
	}
	if (list == NULL || !send_packet_locked(b, &pk)) {
		log_warn("bridge", "bridge=%s event=unsubscribe_not_sent", b->name);
	}
	free(list);
}

// ------------------------------------------------------------ transparent

// broker_filters_each callback: copies one filter.
static void tp_collect(void *arg, const char *f, size_t len, uint8_t qos)
{
	tpvec *d = arg;
	if (d->oom) {
		return;
	}
	if (d->n == d->cap) {
		size_t ncap = d->cap ? d->cap * 2 : 16;
		tpf   *nv   = realloc(d->v, ncap * sizeof(*nv));
		if (nv == NULL) {
			d->oom = true;
			return;
		}
		d->v   = nv;
		d->cap = ncap;
	}
	char *c = strndup(f, len);
	if (c == NULL) {
		d->oom = true;
		return;
	}
	d->v[d->n].f   = c;
	d->v[d->n].qos = qos;
	d->n++;
}

static int tpf_cmp(const void *a, const void *b)
{
	return strcmp(((const tpf *)a)->f, ((const tpf *)b)->f);
}

static void tpf_free(tpf *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].f);
	}
	free(v);
}

// True when f is one of the configured subscriptions' remote filters
// (those are the configuration's business, never mirrored).
static bool tp_configured(const conf_bridge *cfg, const char *f)
{
	for (int i = 0; i < cfg->n_subs; i++) {
		if (strcmp(cfg->subs[i].remote_topic, f) == 0) {
			return true;
		}
	}
	return false;
}

// Remembers an unsubscribed filter until its UNSUBACK (tp_gone). False
// when out of memory.
static bool tp_gone_add(bridge *b, const char *f)
{
	for (size_t i = 0; i < b->n_tp_gone; i++) {
		if (strcmp(b->tp_gone[i].f, f) == 0) {
			return true;
		}
	}
	tpf  *nv = realloc(b->tp_gone, (b->n_tp_gone + 1) * sizeof(*nv));
	char *c  = strdup(f);
	if (nv != NULL) {
		b->tp_gone = nv;
	}
	if (nv == NULL || c == NULL) {
		free(c);
		return false;
	}
	b->tp_gone[b->n_tp_gone].f   = c;
	b->tp_gone[b->n_tp_gone].qos = 0;
	b->n_tp_gone++;
	return true;
}

#ifdef NMQ_HAVE_STORE
// Records (qos >= 0) or forgets (qos < 0) a mirrored filter in the store.
static void tp_store(bridge *b, const char *f, int qos)
{
	if (b->store == NULL) {
		return;
	}
	nmq_err e;
	if (qos >= 0) {
		store_sub r = { b->store_id, f, (uint8_t)qos, 0 };
		e           = store_sub_put(b->store, &r, NULL, NULL);
	} else {
		e = store_sub_del(b->store, b->store_id, f, NULL, NULL);
	}
	if (e != NMQ_OK) {
		log_warn_rl("bridge",
		    "bridge=%s filter=%s event=transparent_not_recorded reason=%s", b->name, f,
		    nmq_strerror(e));
	}
}

// A row of the mirrored set read back at start (store thread).
static void tp_load_row(void *arg, const store_sub *sub)
{
	bridge *b = arg;
	pthread_mutex_lock(&b->mtx);
	tp_collect(&b->tp_load, sub->filter, strlen(sub->filter), sub->options & 0x3);
	pthread_mutex_unlock(&b->mtx);
}

// The mirrored set read back at start: it is what the remote was told
// before (store thread).
static void tp_load_done(void *arg, nmq_err err)
{
	bridge *b = arg;
	pthread_mutex_lock(&b->mtx);
	if (err != NMQ_OK || b->tp_load.oom) {
		log_warn("bridge", "bridge=%s event=transparent_set_not_read reason=%s", b->name,
		    nmq_strerror(err != NMQ_OK ? err : NMQ_ENOMEM));
		tpf_free(b->tp_load.v, b->tp_load.n);
	} else if (b->tp_load.n > 0) {
		qsort(b->tp_load.v, b->tp_load.n, sizeof(*b->tp_load.v), tpf_cmp);
		tpf_free(b->tp_sent, b->n_tp_sent); // empty: no sync ran meanwhile
		b->tp_sent   = b->tp_load.v;
		b->n_tp_sent = b->tp_load.n;
		log_info("bridge", "bridge=%s event=transparent_set_read filters=%zu", b->name,
		    b->tp_load.n);
	} else {
		free(b->tp_load.v);
	}
	memset(&b->tp_load, 0, sizeof(b->tp_load));
	b->tp_loading = false;
	b->tp_dirty   = true;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mtx);
	bridge_release(b);
}

// Reads the mirrored set back (bridge start).
static void tp_load_start(bridge *b)
{
	if (b->store == NULL) {
		return;
	}
	pthread_mutex_lock(&b->mtx);
	b->tp_loading = true;
	atomic_fetch_add(&b->refs, 1);
	nmq_err e = store_subs_read(b->store, b->store_id, tp_load_row, tp_load_done, b);
	if (e != NMQ_OK) {
		atomic_fetch_sub(&b->refs, 1);
		b->tp_loading = false;
		log_warn("bridge", "bridge=%s event=transparent_set_not_read reason=%s", b->name,
		    nmq_strerror(e));
	}
	pthread_mutex_unlock(&b->mtx);
}
#else
static void tp_store(bridge *b, const char *f, int qos)
{
	(void)b;
	(void)f;
	(void)qos;
}

static void tp_load_start(bridge *b)
{
	(void)b;
}
#endif

// Sends the (UN)SUBSCRIBEs of one batch (mtx held, link up).
static void tp_flush_locked(
    bridge *b, conf_bridge_sub *subs, int *n_subs, const char **unsubs, int *n_unsubs)
{
	if (*n_subs > 0) {
		send_subscribe_locked(b, subs, *n_subs, TP_PID, NULL, 0);
		*n_subs = 0;
	}
	if (*n_unsubs > 0) {
		send_unsubscribe_locked(b, unsubs, *n_unsubs, TP_PID, NULL, 0);
		b->tp_unsub_out++;
		*n_unsubs = 0;
	}
}

// Brings the remote's mirrored filters in line with the filters local
// sessions hold (link thread, mtx held and released meanwhile, link up):
// SUBSCRIBE for the new ones and those whose QoS changed (every one after
// a new link), UNSUBSCRIBE for those no local session holds any more.
// Returns false when memory ran out (tp_dirty is then set again).
static bool tp_sync_locked(bridge *b)
{
	if (b->tp_loading) {
		return true; // tp_load_done syncs (tp_dirty)
	}
	bool   resync = b->tp_resync;
	blink *l      = b->link;
	b->tp_dirty   = false;
	b->tp_resync  = false;
	tpvec d       = { NULL, 0, 0, false };
	if (b->cfg->transparent) {
		pthread_mutex_unlock(&b->mtx);
		(void)broker_filters_each(b->set->env.broker, tp_collect, &d);
		if (d.n > 1) {
			qsort(d.v, d.n, sizeof(*d.v), tpf_cmp);
		}
		pthread_mutex_lock(&b->mtx);
	} else if (b->n_tp_sent == 0 && (b->n_tp_gone == 0 || !resync)) {
		return true;
	}
	if (b->link != l || !b->up || l->closed) {
		tpf_free(d.v, d.n); // a new link syncs again from its CONNACK
		return true;
	}
	if (d.oom) {
		log_warn_rl("bridge",
		    "bridge=%s event=transparent_sync_failed reason=out_of_memory", b->name);
		b->tp_dirty  = true; // again at the next wake-up
		b->tp_resync = resync;
		tpf_free(d.v, d.n);
		return false;
	}
	conf_bridge_sub subs[TP_BATCH];
	const char     *unsubs[TP_BATCH];
	int             ns = 0, nu = 0;
	size_t          bytes = 0, n_sub = 0, n_unsub = 0;
	size_t          i = 0, j = 0, untracked = 0;
	while (i < d.n || j < b->n_tp_sent) {
		int c = i == d.n ? 1 : j == b->n_tp_sent ? -1 : strcmp(d.v[i].f, b->tp_sent[j].f);
		const tpf  *sub  = NULL;
		const char *gone = NULL;
		if (c < 0) {
			sub = &d.v[i++];
		} else if (c > 0) {
			gone = b->tp_sent[j++].f;
		} else {
			if (resync || d.v[i].qos != b->tp_sent[j].qos) {
				sub = &d.v[i];
			}
			if (d.v[i].qos != b->tp_sent[j].qos && !tp_configured(b->cfg, d.v[i].f)) {
				tp_store(b, d.v[i].f, d.v[i].qos);
			}
			i++;
			j++;
		}
		if (c < 0 && !tp_configured(b->cfg, sub->f)) {
			tp_store(b, sub->f, sub->qos);
		}
		if (gone != NULL && !tp_gone_add(b, gone)) {
			untracked++; // sent, but not again if this link drops
		}
		if (sub != NULL && !tp_configured(b->cfg, sub->f)) {
			memset(&subs[ns], 0, sizeof(subs[ns]));
			subs[ns].remote_topic = sub->f;
			subs[ns].qos          = sub->qos;
			subs[ns].retain       = 2;
			subs[ns].nolocal      = true; // v5: no echo of our forwards
			ns++;
			n_sub++;
			bytes += strlen(sub->f);
		}
		if (gone != NULL && !tp_configured(b->cfg, gone)) {
			unsubs[nu++] = gone;
			n_unsub++;
			bytes += strlen(gone);
		}
		if (ns == TP_BATCH || nu == TP_BATCH || bytes >= 16384) {
			tp_flush_locked(b, subs, &ns, unsubs, &nu);
			bytes = 0;
		}
	}
	if (resync) {
		// Unanswered UNSUBSCRIBEs of an earlier link, for filters no
		// local session holds again.
		// (Not those of the old set: sent above already.)
		for (size_t g = 0; g < b->n_tp_gone; g++) {
			const char *f   = b->tp_gone[g].f;
			tpf         key = { (char *)f, 0 };
			if ((d.n == 0 || bsearch(&key, d.v, d.n, sizeof(*d.v), tpf_cmp) == NULL)
			    && (b->n_tp_sent == 0
			        || bsearch(
			               &key, b->tp_sent, b->n_tp_sent, sizeof(*b->tp_sent), tpf_cmp)
			            == NULL)
			    && !tp_configured(b->cfg, f)) {
				unsubs[nu++] = f;
				n_unsub++;
				if (nu == TP_BATCH) {
					tp_flush_locked(b, subs, &ns, unsubs, &nu);
				}
			}
		}
	}
	tp_flush_locked(b, subs, &ns, unsubs, &nu);
	tpf_free(b->tp_sent, b->n_tp_sent);
	b->tp_sent   = d.v;
	b->n_tp_sent = d.n;
	if (untracked > 0) {
		log_warn_rl("bridge",
		    "bridge=%s event=transparent_unsubscribe_untracked filters=%zu "
		    "reason=out_of_memory",
		    b->name, untracked);
	}
	if (n_sub > 0 || n_unsub > 0) {
		log_info("bridge",
		    "bridge=%s event=transparent_sync subscribed=%zu unsubscribed=%zu held=%zu",
		    b->name, n_sub, n_unsub, d.n);
	}
	return true;
}

// The broker's filter watcher (broker_watch_filters): the set of filters
// local sessions hold changed. Wakes the link thread of every transparent
// bridge. Runs on a worker with broker locks held: only flags and signals.
static void tp_changed(void *arg)
{
	nmq_bridges *set = arg;
	pthread_mutex_lock(&set->tp_mtx);
	for (bridge *b = set->tp_head; b != NULL; b = b->tp_next) {
		pthread_mutex_lock(&b->mtx);
		if (b->cfg->transparent) {
			b->tp_dirty = true;
			pthread_cond_broadcast(&b->cv);
		}
		pthread_mutex_unlock(&b->mtx);
	}
	pthread_mutex_unlock(&set->tp_mtx);
}

static void subs_gone_free(bridge *b)
{
	for (int i = 0; i < b->n_subs_gone; i++) {
		free(b->subs_gone[i]);
	}
	free(b->subs_gone);
	b->subs_gone   = NULL;
	b->n_subs_gone = 0;
}

// Adds the `subscription` filters of old that nc has not to b->subs_gone,
// and takes those nc has again out of it (mtx held). Out of memory: the
// remote keeps sending them; they are not published (publish_local).
static void subs_gone_add_locked(bridge *b, const conf_bridge *old, const conf_bridge *nc)
{
	for (int i = 0; i < old->n_subs; i++) {
		const char *f    = old->subs[i].remote_topic;
		bool        kept = false;
		for (int j = 0; j < nc->n_subs && !kept; j++) {
			kept = strcmp(f, nc->subs[j].remote_topic) == 0;
		}
		for (int j = 0; j < b->n_subs_gone && !kept; j++) {
			kept = strcmp(f, b->subs_gone[j]) == 0;
		}
		if (kept) {
			continue;
		}
		char **v = realloc(b->subs_gone, (size_t)(b->n_subs_gone + 1) * sizeof(*v));
		if (v == NULL) {
			return;
		}
		b->subs_gone = v;
		if ((v[b->n_subs_gone] = strdup(f)) == NULL) {
			return;
		}
		b->n_subs_gone++;
	}
	for (int j = 0; j < b->n_subs_gone;) {
		bool back = false;
		for (int k = 0; k < nc->n_subs && !back; k++) {
			back = strcmp(b->subs_gone[j], nc->subs[k].remote_topic) == 0;
		}
		if (back) {
			free(b->subs_gone[j]);
			b->subs_gone[j] = b->subs_gone[--b->n_subs_gone];
		} else {
			j++;
		}
	}
}

static void handle_connack_locked(bridge *b, const mqtt_connack *ca)
{
	if (ca->reason == MQTT_V3_BAD_PROTOCOL && b->ver != MQTT_PROTO_V5 && b->marker_sent) {
		// The remote does not know the bridge marker: the loop guard is
		// then ours alone (messages from the remote are never forwarded
		// back; the remote may still echo what we forward).
		b->marker_refused = true;
		b->marker_retry   = true;
		log_info("bridge", "bridge=%s event=bridge_marker_refused action=plain_connect",
		    b->name);
		set_error_locked(
		    b, "the remote refused the bridge protocol marker; retrying without");
		conn_close(b->link->c);
		return;
	}
	if (ca->reason != 0) {
		set_error_locked(b, "CONNACK refused: %s (0x%02x)",
		    b->ver == MQTT_PROTO_V5 ? mqtt_reason_name(ca->reason) : "v3 return code",
		    ca->reason);
		conn_close(b->link->c);
		return;
	}
	b->up                = true;
	b->window            = b->ver == MQTT_PROTO_V5 ? 65535 : V3_WINDOW;
	b->remote_max_packet = b->cfg->remote_max_packet_size; // 0: none
	b->remote_max_qos    = 2;
	b->remote_retain     = true;
	if (b->ver == MQTT_PROTO_V5) {
		if ((ca->props.present & MQTT_PBIT(MQTT_PROP_SERVER_KEEP_ALIVE))
		    && ca->props.server_keep_alive != 0) {
			b->ka_s = ca->props.server_keep_alive; // MQTT 5.0 3.2.2.3.14
		}
		if (ca->props.present & MQTT_PBIT(MQTT_PROP_MAXIMUM_QOS)) {
			b->remote_max_qos = ca->props.maximum_qos;
		}
		if (ca->props.present & MQTT_PBIT(MQTT_PROP_RETAIN_AVAILABLE)) {
			b->remote_retain = ca->props.retain_available != 0;
		}
		if (b->remote_max_qos < 2 || !b->remote_retain) {
			log_info("bridge",
			    "bridge=%s event=remote_limits maximum_qos=%u retain_available=%d",
			    b->name, b->remote_max_qos, b->remote_retain ? 1 : 0);
		}
		if (ca->props.present & MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM)) {
			b->window = ca->props.receive_maximum;
		}
		if ((ca->props.present & MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE))
		    && (b->remote_max_packet == 0
		        || ca->props.maximum_packet_size < b->remote_max_packet)) {
			b->remote_max_packet = ca->props.maximum_packet_size;
		}
	}
	if (b->window > 1024) {
		b->window = 1024;
	}
	b->window_full = b->window;
	if (b->probe) {
		b->window = 1; // the suspect alone (note_close_locked)
		log_info("bridge", "bridge=%s event=probe window=1", b->name);
	}
	set_state_locked(b, BS_UP);
	b->last_error[0] = '\0';
	if (!ca->session_present) {
		// The remote lost the session: a message whose PUBREC came back
		// was received; the rest go again. Inbound QoS 2 state is void.
		// After a failover, a message whose PUBREC came from another
		// server is not on this one, and the other may hold it until our
		// PUBREL (Mosquitto delivers then): it is sent again, as new.
		// (rel_resend says which.)
		rel_clear_locked(b);
		for (bentry *e = b->head, *nx; e != NULL; e = nx) {
			nx = e->next;
			if (e->state == Q_RELEASED) {
				rel_lost_session_locked(b, e);
			}
		}
	}
	b->no_session = !ca->session_present;
	if (!b->logged_up) {
		log_info("bridge",
		    "bridge=%s server=%s event=link_up session_present=%d backlog=%zu", b->name,
		    b->server_now, ca->session_present ? 1 : 0,
		    b->n_mem + (b->disk_only == DISK_UNKNOWN ? 0 : (size_t)b->disk_only));
		b->logged_up = true;
	}
	// Subscriptions, in one SUBSCRIBE; the mirrored ones from the link
	// thread (tp_sync_locked), every one again.
	if (b->cfg->n_subs > 0) {
		send_subscribe_locked(b, b->cfg->subs, b->cfg->n_subs, SUB_PID, NULL, 0);
	}
	if (b->n_subs_gone > 0) {
		send_unsubscribe_locked(
		    b, (const char *const *)b->subs_gone, b->n_subs_gone, RT_SUB_PID, NULL, 0);
		subs_gone_free(b);
	}
	b->tp_dirty     = true;
	b->tp_resync    = true;
	b->tp_unsub_out = 0;
	// The backlog, at once: unacked first (DUP), then the rest.
	b->next_unsent = b->head;
	for (bentry *e = b->head; e != NULL; e = e->next) {
		if (e->state != Q_QUEUED) {
			e->dup = true;
		}
	}
	b->inflight    = 0;
	b->inflight_q2 = 0;
	pump_locked(b);
}

static int link_frame(void *upper, const uint8_t *frame, size_t len)
{
	blink  *l = upper;
	bridge *b = l->b;
	pthread_mutex_lock(&b->mtx);
	if (b->link != l || l->closed) {
		pthread_mutex_unlock(&b->mtx);
		return -1;
	}
	b->link_rx_any = true;
	mqtt_packet pk;
	uint8_t     proto = b->ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
	int         rc    = mqtt_decode(frame, len, proto, &pk);
	if (rc != 0) {
		set_error_locked(
		    b, "malformed packet from the remote: %s", mqtt_reason_name((uint8_t)rc));
		conn_close(l->c);
		pthread_mutex_unlock(&b->mtx);
		return -1;
	}
	b->last_rx_ms   = now_ms();
	b->ping_pending = false;
	if (!b->up && pk.type != MQTT_CONNACK) {
		set_error_locked(b, "%s before CONNACK", mqtt_packet_name(pk.type));
		conn_close(l->c);
		pthread_mutex_unlock(&b->mtx);
		return -1;
	}
	switch (pk.type) {
	case MQTT_CONNACK:
		if (b->up) {
			break;
		}
		handle_connack_locked(b, &pk.u.connack);
		pthread_cond_broadcast(&b->cv);
		break;
	case MQTT_PUBACK:
	case MQTT_PUBCOMP: {
		uint16_t pid = pk.u.ack.packet_id;
		bentry  *e   = b->by_pid[pid];
		if (e != NULL && e->state != Q_QUEUED
		    && (pk.type == MQTT_PUBACK ? e->qos == 1 : e->state == Q_RELEASED)) {
			(void)acked_locked(b);
			if (pk.type == MQTT_PUBACK
			    && (pk.u.ack.reason == MQTT_RC_QUOTA_EXCEEDED
			        || pk.u.ack.reason == MQTT_RC_MESSAGE_RATE_TOO_HIGH)) {
				requeue_locked(b, e);
				break;
			}
			if (pk.u.ack.reason >= 0x80) {
				b->refused++;
				b->dropped++;
				log_warn_rl("bridge",
				    "bridge=%s event=refused_by_remote reason=%s(0x%02x)", b->name,
				    mqtt_reason_name(pk.u.ack.reason), pk.u.ack.reason);
			} else {
				b->forwarded++;
			}
			entry_remove(b, e, true);
			pump_after_ack_locked(b);
		}
		break;
	}
	case MQTT_PUBREC: {
		uint16_t pid = pk.u.ack.packet_id;
		bentry  *e   = b->by_pid[pid];
		if (e != NULL && e->qos == 2 && e->state == Q_SENT && !e->held) {
			bool reopen = acked_locked(b);
			if (pk.u.ack.reason == MQTT_RC_QUOTA_EXCEEDED
			    || pk.u.ack.reason == MQTT_RC_MESSAGE_RATE_TOO_HIGH) {
				requeue_locked(b, e);
				break;
			}
			if (pk.u.ack.reason >= 0x80) {
				b->refused++;
				b->dropped++;
				entry_remove(b, e, true);
				pump_locked(b);
				break;
			}
			e->state   = Q_RELEASED;
			e->rel_srv = b->srv_tag;
			record_state(b, e);
			send_pubrel_locked(b, e); // once that state has committed
			if (reopen) {
				pump_locked(b);
			}
		} else if (e != NULL && e->state == Q_RELEASED) {
			send_pubrel_locked(b, e);
		}
		break;
	}
	case MQTT_PUBLISH: {
		if (pk.u.publish.props.present & MQTT_PBIT(MQTT_PROP_TOPIC_ALIAS)) {
			// The CONNECT allowed no topic alias (Topic Alias Maximum 0):
			// a Protocol Error (MQTT 5.0 3.3.2.3.4), not a message to ack
			// and drop. The link is reset; the remote sends it again.
			mqtt_packet d;
			memset(&d, 0, sizeof(d));
			d.type                = MQTT_DISCONNECT;
			d.u.disconnect.reason = MQTT_RC_TOPIC_ALIAS_INVALID;
			(void)send_packet_locked(b, &d);
			set_error_locked(
			    b, "PUBLISH with a topic alias from the remote (none allowed)");
			conn_shutdown(l->c); // after the DISCONNECT
			pthread_mutex_unlock(&b->mtx);
			return -1;
		}
		b->link_rx_pub         = true;
		mqtt_publish      *p   = &pk.u.publish;
		const conf_bridge *cfg = b->cfg;
		uint16_t           pid = p->packet_id;
		// A PUBLISH whose id awaits PUBREL is the same message again
		// (a sender resends with DUP; it reuses an id only after PUBCOMP).
		bool dup_q2    = p->qos == 2 && p->dup && (b->rel[pid / 8] & (1u << (pid % 8)));
		bool echo      = !dup_q2 && echo_take_locked(b, p);
		bool rel_store = p->qos == 2 && !dup_q2 && rel_durable(b);
		bool rel_fail  = false;
		if (echo) {
			b->loop_guarded++;
		}
		pthread_mutex_unlock(&b->mtx);
		bool ok = true;
#ifdef NMQ_HAVE_STORE
		// The QoS 2 id, what routing writes and the barrier the ack waits
		// for, in one group (a failed group fails its ack).
		nmq_store *st = p->qos > 0 ? b->store : NULL;
		if (st != NULL) {
			store_batch_begin(st);
		}
		if (rel_store) {
			rel_fail = store_rel_put(st, b->store_id, pid, NULL, NULL) != NMQ_OK;
		}
#endif
		bool rel_put = rel_store && !rel_fail; // a row to delete later
		if (!dup_q2 && !echo && !rel_fail) {
			(void)proto_store_take_refused();
			ok = publish_local(b, cfg, p);
			// A write the routing needed was refused (the store's queue
			// is full): the message is not stored, so it is not acked.
			rel_fail = p->qos > 0 && proto_store_take_refused();
		}
		pthread_mutex_lock(&b->mtx);
		if (rel_put) {
			b->rel_rows = true;
		}
		if (rel_fail && b->link == l && !l->closed) {
			// Neither published nor acked: the remote resends it.
			set_error_locked(b, "a message from the remote could not be stored");
			conn_close(l->c);
		} else if (b->link == l && !l->closed) {
			if (!dup_q2 && !echo) {
				if (ok) {
					b->received++;
				} else {
					b->dropped++;
				}
			}
			if (p->qos == 2) {
				b->rel[pid / 8] |= (uint8_t)(1u << (pid % 8));
			}
			if (p->qos > 0) {
				uint8_t type = p->qos == 1 ? MQTT_PUBACK : MQTT_PUBREC;
#ifdef NMQ_HAVE_STORE
				if (st != NULL) {
					in_ack_later_locked(b, type, pid);
				} else
#endif
				{
					send_ack_locked(b, type, pid);
				}
			}
		}
#ifdef NMQ_HAVE_STORE
		if (st != NULL) {
			store_batch_end(st);
		}
#endif
		break;
	}
	case MQTT_PUBREL: {
		uint16_t pid = pk.u.ack.packet_id;
		b->rel[pid / 8] &= (uint8_t) ~(1u << (pid % 8));
#ifdef NMQ_HAVE_STORE
		if (b->store != NULL && (b->rel_rows || rel_durable(b))) {
			// PUBCOMP once the id's row is deleted: the remote may reuse
			// the id then, and a stale row read back after a restart
			// would take its next message for a duplicate.
			store_batch_begin(b->store);
			if (store_rel_del(b->store, b->store_id, pid, NULL, NULL) == NMQ_OK) {
				in_ack_later_locked(b, MQTT_PUBCOMP, pid);
			} else {
				set_error_locked(
				    b, "a QoS 2 id from the remote could not be deleted");
				conn_close(l->c); // the remote sends PUBREL again
			}
			store_batch_end(b->store);
			break;
		}
#endif
		send_ack_locked(b, MQTT_PUBCOMP, pid);
		break;
	}
	case MQTT_SUBACK:
		for (uint32_t i = 0; i < pk.u.suback.count; i++) {
			if (pk.u.suback.codes[i] >= 0x80) {
				log_warn("bridge",
				    "bridge=%s event=subscription_refused index=%u reason=0x%02x",
				    b->name, i, pk.u.suback.codes[i]);
			}
		}
		break;
	case MQTT_UNSUBACK:
		// Every transparent UNSUBSCRIBE of this link answered: none
		// needs sending again on the next one.
		if (pk.u.suback.packet_id == TP_PID && b->tp_unsub_out > 0
		    && --b->tp_unsub_out == 0) {
			for (size_t g = 0; g < b->n_tp_gone; g++) {
				tpf key = { b->tp_gone[g].f, 0 };
				if (b->n_tp_sent == 0
				    || bsearch(&key, b->tp_sent, b->n_tp_sent, sizeof(*b->tp_sent),
				           tpf_cmp)
				        == NULL) {
					tp_store(b, b->tp_gone[g].f, -1);
				}
			}
			tpf_free(b->tp_gone, b->n_tp_gone);
			b->tp_gone   = NULL;
			b->n_tp_gone = 0;
		}
		break;
	case MQTT_PINGRESP:
		break;
	case MQTT_DISCONNECT:
		set_error_locked(b, "DISCONNECT from the remote: %s (0x%02x)",
		    mqtt_reason_name(pk.u.disconnect.reason), pk.u.disconnect.reason);
		switch (pk.u.disconnect.reason) {
		case 0x81: // malformed packet
		case 0x82: // protocol error
		case 0x83: // implementation specific error
		case 0x87: // not authorized
		case 0x90: // topic name invalid
		case 0x95: // packet too large
		case 0x99: // payload format invalid
		case 0x9A: // retain not supported
		case 0x9B: // QoS not supported
			b->disc_msg = true; // may be the doing of a forward
			break;
		default:
			break;
		}
		conn_close(l->c);
		pthread_mutex_unlock(&b->mtx);
		return -1;
	default:
		set_error_locked(b, "unexpected %s from the remote", mqtt_packet_name(pk.type));
		conn_close(l->c);
		pthread_mutex_unlock(&b->mtx);
		return -1;
	}
	pthread_mutex_unlock(&b->mtx);
	return 0;
}

static void link_too_large(void *upper, uint32_t size)
{
	blink  *l = upper;
	bridge *b = l->b;
	pthread_mutex_lock(&b->mtx);
	set_error_locked(b, "packet of %u bytes from the remote exceeds the maximum", size);
	pthread_mutex_unlock(&b->mtx);
	conn_close(l->c);
}

static void link_closed(void *upper)
{
	blink  *l = upper;
	bridge *b = l->b;
	pthread_mutex_lock(&b->mtx);
	l->closed = true;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mtx);
}

static void link_writable(void *upper)
{
	blink  *l = upper;
	bridge *b = l->b;
	pthread_mutex_lock(&b->mtx);
	// A refill put off after acks goes at its own time (it is due within
	// REFILL_WAIT_MS), not at each write that drained.
	if (b->link == l && !l->closed && b->pump_at == 0) {
		pump_locked(b);
	}
	pthread_mutex_unlock(&b->mtx);
}

static const conn_ops link_ops = {
	.frame     = link_frame,
	.header    = NULL,
	.too_large = link_too_large,
	.closed    = link_closed,
	.writable  = link_writable,
};

// ------------------------------------------------------------- link thread

static void send_connect_locked(bridge *b)
{
	const conf_bridge *cfg = b->cfg;
	mqtt_packet        pk;
	memset(&pk, 0, sizeof(pk));
	pk.type         = MQTT_CONNECT;
	mqtt_connect *c = &pk.u.connect;
	c->proto_level  = (uint8_t)cfg->proto_ver;
	c->bridge_marker
	    = cfg->proto_ver != MQTT_PROTO_V5 && cfg->no_local_v4 && !b->marker_refused;
	b->marker_sent   = c->bridge_marker;
	c->clean_start   = cfg->clean_start;
	c->keep_alive    = (uint16_t)cfg->keepalive_s;
	const char *cid  = cfg->clientid != NULL ? cfg->clientid : b->host_id;
	c->client_id.p   = (const uint8_t *)cid;
	c->client_id.len = (uint32_t)strlen(cid);
	if (cfg->username != NULL) {
		c->has_username = true;
		c->username.p   = (const uint8_t *)cfg->username;
		c->username.len = (uint32_t)strlen(cfg->username);
	}
	if (cfg->password != NULL) {
		c->has_password = true;
		c->password.p   = (const uint8_t *)cfg->password;
		c->password.len = (uint32_t)strlen(cfg->password);
	}
	if (cfg->will_topic != NULL) {
		c->will_flag        = true;
		c->will_qos         = (uint8_t)cfg->will_qos;
		c->will_retain      = cfg->will_retain;
		c->will_topic.p     = (const uint8_t *)cfg->will_topic;
		c->will_topic.len   = (uint32_t)strlen(cfg->will_topic);
		const char *wp      = cfg->will_payload != NULL ? cfg->will_payload : "";
		c->will_payload.p   = (const uint8_t *)wp;
		c->will_payload.len = (uint32_t)strlen(wp);
	}
	mqtt_user_prop cup[64], wup[64];
	if (cfg->proto_ver == MQTT_PROTO_V5) {
		bridge_user_props_set(&c->props, cup, conf_props_codec(&cfg->cp_user_props, cup));
		if (c->will_flag) {
			mqtt_props *w = &c->will_props;
			bridge_user_props_set(w, wup, conf_props_codec(&cfg->will_user_props, wup));
			if (cfg->will_payload_format >= 0) {
				w->present |= MQTT_PBIT(MQTT_PROP_PAYLOAD_FORMAT);
				w->payload_format = (uint8_t)cfg->will_payload_format;
			}
			if (cfg->will_message_expiry > 0) {
				w->present |= MQTT_PBIT(MQTT_PROP_MESSAGE_EXPIRY);
				w->message_expiry = cfg->will_message_expiry;
			}
			if (cfg->will_delay_interval > 0) {
				w->present |= MQTT_PBIT(MQTT_PROP_WILL_DELAY);
				w->will_delay = cfg->will_delay_interval;
			}
			const struct {
				const char *v;
				int         id;
				mqtt_bytes *out;
			} strs[] = {
				{ cfg->will_content_type, MQTT_PROP_CONTENT_TYPE,
				    &w->content_type },
				{ cfg->will_response_topic, MQTT_PROP_RESPONSE_TOPIC,
				    &w->response_topic },
				{ cfg->will_correlation_data, MQTT_PROP_CORRELATION_DATA,
				    &w->correlation_data },
			};
			for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
				if (strs[i].v != NULL && strs[i].v[0] != '\0') {
					w->present |= MQTT_PBIT(strs[i].id);
					strs[i].out->p   = (const uint8_t *)strs[i].v;
					strs[i].out->len = (uint32_t)strlen(strs[i].v);
				}
			}
		}
		mqtt_props *p   = &c->props;
		uint32_t    exp = cfg->cp_session_expiry_interval;
		if (exp == 0 && !cfg->clean_start) {
			exp = UINT32_MAX;
		}
		if (exp != 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_SESSION_EXPIRY);
			p->session_expiry = exp;
		}
		if (cfg->cp_receive_maximum != 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_RECEIVE_MAXIMUM);
			p->receive_maximum = (uint16_t)cfg->cp_receive_maximum;
		}
		uint32_t mps = cfg->cp_maximum_packet_size;
		if (mps == 0 || mps > b->set->env.cenv->max_packet_size) {
			mps = b->set->env.cenv->max_packet_size;
		}
		if (mps != 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_MAX_PACKET_SIZE);
			p->maximum_packet_size = mps;
		}
		// conn_properties.topic_alias_maximum is not sent: the bridge does
		// not resolve topic aliases from the remote.
		if (cfg->cp_request_problem_information >= 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_REQUEST_PROBLEM);
			p->request_problem_info = (uint8_t)cfg->cp_request_problem_information;
		}
		if (cfg->cp_request_response_information >= 0) {
			p->present |= MQTT_PBIT(MQTT_PROP_REQUEST_RESPONSE);
			p->request_response_info = (uint8_t)cfg->cp_request_response_information;
		}
	}
	if (!send_packet_locked(b, &pk)) {
		// No room: the connection is already closing (the remote, or
		// something between, closed it as soon as it was accepted).
		uint8_t proto = b->ver == MQTT_PROTO_V5 ? MQTT_PROTO_V5 : MQTT_PROTO_V311;
		set_error_locked(b,
		    mqtt_encoded_size(proto, &pk) == 0
		        ? "CONNECT could not be encoded"
		        : "connection closed before CONNECT was sent");
		conn_close(b->link->c);
	}
}

// The health JSON of b (mtx held). Returns what snprintf returns.
static int health_locked(bridge *b, char *buf, size_t cap)
{
	uint64_t now    = now_ms();
	uint64_t disk   = b->disk_only == DISK_UNKNOWN ? 0 : b->disk_only;
	uint64_t oldest = b->head != NULL ? b->head->at_ms : b->oldest_disk_ms;
	char     err[sizeof(b->last_error) * 2];
	size_t   j = 0;
	for (const char *p = b->last_error; *p != '\0' && j + 2 < sizeof(err); p++) {
		if (*p == '"' || *p == '\\') {
			err[j++] = '\\';
		}
		err[j++] = (unsigned char)*p < 0x20 ? ' ' : *p;
	}
	err[j] = '\0';
	return snprintf(buf, cap,
	    "{\"name\":\"%s\",\"state\":\"%s\",\"state_ms\":%" PRIu64 ",\"server\":\"%s\","
	    "\"last_error\":\"%s\",\"backlog\":%" PRIu64 ",\"backlog_memory\":%zu,"
	    "\"backlog_disk\":%" PRIu64 ",\"backlog_disk_counted\":%s,\"oldest_age_ms\":%" PRIu64
	    ",\"inflight\":%zu,\"forwarded\":%" PRIu64 ",\"received\":%" PRIu64
	    ",\"dropped\":%" PRIu64 ",\"dropped_qos0\":%" PRIu64 ",\"evicted\":%" PRIu64
	    ",\"refused\":%" PRIu64 ",\"expired\":%" PRIu64 ",\"loop_guarded\":%" PRIu64
	    ",\"reconnects\":%" PRIu64 ",\"dropped_link_closed\":%" PRIu64 "}",
	    b->name, state_names[b->state], now - b->state_since_ms, b->server_now, err,
	    (uint64_t)b->n_mem + disk, b->n_mem, disk,
	    b->disk_only == DISK_UNKNOWN ? "false" : "true",
	    oldest != 0 && now > oldest ? now - oldest : 0, b->inflight, b->forwarded, b->received,
	    b->dropped, b->dropped_qos0, b->evicted, b->refused, b->expired, b->loop_guarded,
	    b->reconnects, b->dropped_link_closed);
}

// Publishes the health of b on $SYS/brokers/bridges/<name> (retained).
static void publish_health(bridge *b)
{
	char buf[1536];
	pthread_mutex_lock(&b->mtx);
	int n = health_locked(b, buf, sizeof(buf));
	pthread_mutex_unlock(&b->mtx);
	if (n <= 0 || (size_t)n >= sizeof(buf)) {
		return;
	}
	char topic[300];
	int  tl = snprintf(topic, sizeof(topic), "$SYS/brokers/bridges/%s", b->name);
	if (tl <= 0 || (size_t)tl >= sizeof(topic)) {
		return;
	}
	nmq_msg *m = nmq_msg_alloc(topic, (size_t)tl, 0, (size_t)n);
	if (m == NULL) {
		return;
	}
	memcpy(m->payload, buf, (size_t)n);
	m->qos    = 0;
	m->retain = true;
	(void)broker_sink_publish(b->set->env.broker, &b->self, NULL, m);
	nmq_msg_release(m);
}

// Clears the retained health of a bridge removed (reload or REST), once
// its thread has stopped, so that $SYS/brokers/bridges/<name> does not
// keep describing a bridge that is gone.
static void clear_health(bridge *b)
{
	char topic[300];
	int  tl = snprintf(topic, sizeof(topic), "$SYS/brokers/bridges/%s", b->name);
	if (tl <= 0 || (size_t)tl >= sizeof(topic)) {
		return;
	}
	nmq_msg *m = nmq_msg_alloc(topic, (size_t)tl, 0, 0);
	if (m == NULL) {
		return;
	}
	m->qos    = 0;
	m->retain = true; // empty: clears the retained message
	(void)broker_sink_publish(b->set->env.broker, &b->self, NULL, m);
	nmq_msg_release(m);
}

// Waits on b->cv until deadline (nmq_clock_ms) or a signal. mtx held.
static void wait_until_locked(bridge *b, uint64_t deadline)
{
	if (deadline > now_ms()) {
		(void)nmq_cond_wait_until(&b->cv, &b->mtx, deadline); // cv: CLOCK_MONOTONIC
	}
}

// Connects to url; on success sets b->link (mtx held on return, released
// while connecting). Returns true when connected.
static bool dial_locked(bridge *b, const char *url)
{
	char        host[256], why[256];
	int         port;
	bool        tls;
	conf_bridge cfg_copy = *b->cfg; // scalar settings; strings stay valid (retired, not freed)
	snprintf(b->server_now, sizeof(b->server_now), "%s", url);
	if (conf_bridge_url(url, &tls, host, sizeof(host), &port, why, sizeof(why)) != 0) {
		set_error_locked(b, "%s", why);
		return false;
	}
	pthread_mutex_unlock(&b->mtx);
	nmq_conn      *c = NULL;
	char           err[256];
	nmq_err        e;
	conn_dial_opts o  = { cfg_copy.tcp_nodelay, cfg_copy.tcp_keepalive,
		 (int)cfg_copy.tcp_keepidle, (int)cfg_copy.tcp_keepintvl, (int)cfg_copy.tcp_keepcnt,
		 cfg_copy.bind_interface, &b->cancel };
	int            fd = -1;
	if (!tls) {
		e = conn_dial_tcp(host, port, &o, CONNECT_TIMEOUT_MS, &fd, err, sizeof(err));
		if (e == NMQ_OK && (c = conn_alloc_fd(fd, b->set->env.cenv)) == NULL) {
			close(fd);
			e = NMQ_ENOMEM;
			snprintf(err, sizeof(err), "out of memory");
		}
	} else {
		// TCP, then the TLS handshake on this thread; the link then runs
		// on the workers' loops like an accepted TLS connection
		// (decisions/0042).
		tls_pem_spec s;
		memset(&s, 0, sizeof(s));
		char name[300];
		snprintf(name, sizeof(name), "bridges.mqtt.%s.ssl", b->name);
		s.name                = name;
		s.certfile            = cfg_copy.certfile;
		s.keyfile             = cfg_copy.keyfile;
		s.cacertfile          = cfg_copy.cacertfile;
		s.key_password        = cfg_copy.key_password;
		s.verify_peer         = cfg_copy.verify_peer;
		tls_engine_direct *tc = NULL;
		conn_tls          *t  = NULL;
		e                     = tls_pem_client_build(&s, &tc, err, sizeof(err));
		if (e == NMQ_OK) {
			e = conn_dial_tls(
			    host, port, &o, tc, CONNECT_TIMEOUT_MS, &fd, &t, err, sizeof(err));
			tls_engine_direct_free(tc); // t holds its own reference
		}
		if (e == NMQ_OK && (c = conn_alloc_tls(fd, t, b->set->env.cenv)) == NULL) {
			conn_tls_free(t);
			close(fd);
			e = NMQ_ENOMEM;
			snprintf(err, sizeof(err), "out of memory");
		}
	}
	pthread_mutex_lock(&b->mtx);
	if (e != NMQ_OK) {
		set_error_locked(b, "%s", err);
		// Refused or unreachable (NMQ_EIO): no server process took the
		// connection. A name not resolved, a timeout (the attempt took its
		// time already) and a TLS handshake (the remote's key operations)
		// are not cheap.
		b->cheap_fail = e == NMQ_EIO;
		return false;
	}
	blink *l = calloc(1, sizeof(*l));
	if (l == NULL) {
		set_error_locked(b, "out of memory");
		conn_release(c);
		return false;
	}
	l->b             = b;
	l->c             = c;
	b->last_error[0] = '\0';
	b->link          = l;
	b->link_gen++;
	b->link_acked   = false;
	b->link_rx_pub  = false;
	b->link_rx_any  = false;
	b->link_tls     = tls;
	b->disc_msg     = false;
	b->up           = false;
	b->ver          = (uint8_t)b->cfg->proto_ver;
	b->last_rx_ms   = now_ms();
	b->last_tx_ms   = b->last_rx_ms;
	b->ka_s         = b->cfg->keepalive_s;
	b->ping_pending = false;
	// Frames may arrive as soon as it starts; they wait for mtx.
	conn_start(c, &link_ops, l);
	send_connect_locked(b);
	return true;
}

// Runs one connection until it closes (mtx held).
static void serve_locked(bridge *b)
{
	blink *l = b->link;
	// CONNACK within the keepalive (at least 2 s, at most 10 s): a remote
	// that accepts TCP and then says nothing is a stall like any other.
	uint64_t wait_ms   = (uint64_t)b->cfg->keepalive_s * 1000;
	wait_ms            = wait_ms < 2000           ? 2000
	               : wait_ms > CONNECT_TIMEOUT_MS ? CONNECT_TIMEOUT_MS
	                                              : wait_ms;
	uint64_t deadline  = now_ms() + wait_ms;
	uint64_t next_sys  = 0;
	uint64_t next_del  = now_ms() + 1000; // acked rows deleted at least this often
	bool     was_empty = true;
	bool     closing   = false; // closed here, the callback not yet in
	while (!l->closed) {
		uint64_t now = now_ms();
		uint64_t ka  = (uint64_t)b->ka_s * 1000;
		if (!closing && (b->stop || b->restart || b->switched_off)) {
			// b->restart stays set: the next attempt goes at once, with no
			// backoff (it is cleared when that attempt starts).
			closing = true;
			conn_close(l->c);
			set_error_locked(b,
			    b->stop               ? "stopping"
			        : b->switched_off ? "switched off"
			                          : "configuration changed");
		} else if (!b->up) {
			if (now >= deadline) {
				set_error_locked(
				    b, "no CONNACK within %d s", CONNECT_TIMEOUT_MS / 1000);
				conn_close(l->c);
			}
		} else {
			if (b->ping_pending && now - b->ping_at_ms >= ka) {
				set_error_locked(
				    b, "link stalled: no answer within keepalive (%u s)", b->ka_s);
				conn_close(l->c);
			} else if (!b->ping_pending
			    && (now - b->last_rx_ms >= ka / 2 || now - b->last_tx_ms >= ka / 2)) {
				mqtt_packet pk;
				memset(&pk, 0, sizeof(pk));
				pk.type         = MQTT_PINGREQ;
				b->ping_pending = true;
				b->ping_at_ms   = now;
				(void)send_packet_locked(b, &pk);
			}
		}
		// Also at once (within a second) when the backlog has just
		// drained, or just started to build.
		bool empty = b->n_mem == 0 && (b->disk_only == 0 || b->disk_only == DISK_UNKNOWN);
		if (b->up && (now >= next_sys || empty != was_empty)) {
			was_empty = empty;
			next_sys  = now + SYS_PERIOD_MS;
			pthread_mutex_unlock(&b->mtx);
			publish_health(b);
			pthread_mutex_lock(&b->mtx);
			continue;
		}
		uint64_t next = now + 1000;
		if (!b->up && deadline < next) {
			next = deadline;
		}
		if (b->up && next_sys < next) {
			next = next_sys;
		}
		if (b->up) {
			uint64_t t = b->ping_pending
			    ? b->ping_at_ms + ka
			    : (b->last_rx_ms < b->last_tx_ms ? b->last_rx_ms : b->last_tx_ms)
			        + ka / 2;
			if (t < next) {
				next = t;
			}
		}
		if (b->pump_at != 0 && b->up) {
			if (now >= b->pump_at) {
				pump_locked(b); // a refill put off after acks
			} else if (b->pump_at < next) {
				next = b->pump_at;
			}
		}
		if (now >= next_del) {
			// The worker deletes by DEL_BATCH; what is left after a
			// pause goes within a second (not at each refill above).
			flush_deletes_locked(b);
			next_del = now + 1000;
		}
		if (next_del < next) {
			next = next_del;
		}
		bool was_up = b->up;
		if (b->up && b->tp_dirty && !b->tp_loading && !l->closed && !closing) {
			if (!tp_sync_locked(b)) {
				wait_until_locked(b, now + 1000); // out of memory: again later
				continue;
			}
			if (b->tp_dirty) {
				continue; // changed while the set was copied
			}
		}
		wait_until_locked(b, next > now ? next : now + 1);
		if (!was_up && b->up) {
			pthread_mutex_unlock(&b->mtx);
			publish_health(b);
			pthread_mutex_lock(&b->mtx);
		}
	}
	bool by_remote = b->last_error[0] == '\0' || b->disc_msg;
	// Closed by the remote before it sent a single packet, on plain TCP
	// (over TLS the remote did the handshake's key operations): it took
	// the connection and no more (a load balancer with no server behind
	// it, a broker at its connection limit).
	b->cheap_fail = !b->up && !b->link_rx_any && !b->link_tls && b->last_error[0] == '\0'
	    && !b->stop && !b->restart && !b->switched_off;
	if (b->last_error[0] == '\0') {
		set_error_locked(b,
		    b->up ? "connection closed by the remote"
		          : "connection closed by the remote before CONNACK");
	}
	bentry *oldest = b->head;
	while (oldest != NULL && (oldest->state != Q_SENT || oldest->held)) {
		oldest = oldest->next; // (a held one was not sent)
	}
	if (oldest != NULL && oldest->dup) {
		oldest = NULL; // not sent again on this link: not its doing
	}
	bentry *culprit = note_close_locked(
	    b, b->up, by_remote && !b->stop, oldest, oldest != NULL && b->inflight == 1);
	// Closed: every entry goes again on the next link.
	flush_deletes_locked(b);
	b->pump_at     = 0;
	b->link        = NULL;
	b->up          = false;
	b->inflight    = 0;
	b->inflight_q2 = 0;
	b->next_unsent = b->head;
	for (bentry *e = b->head; e != NULL; e = e->next) {
		if (e->state != Q_QUEUED) {
			e->dup = true;
		}
	}
	if (culprit != NULL) {
		drop_suspect_locked(b, culprit);
	}
	pthread_mutex_unlock(&b->mtx);
	conn_release(l->c);
	free(l);
	pthread_mutex_lock(&b->mtx);
}

static void *bridge_main(void *arg)
{
	bridge *b = arg;
	char    tname[16];
	snprintf(tname, sizeof(tname), "nmq:br:%.8s", b->name);
	pthread_setname_np(pthread_self(), tname);
	unsigned attempt = 0;
	int      idx     = 0;
	uint32_t seed    = (uint32_t)wall_us() ^ (uint32_t)(uintptr_t)b;
	// The first attempt that fails after a change (the start, the link
	// going down, switched on again) is logged at warn, the retries not.
	bool log_fail = true;
	pthread_mutex_lock(&b->mtx);
	while (!b->stop) {
		if (b->switched_off) {
			set_state_locked(b, BS_SWITCHED_OFF);
			pthread_mutex_unlock(&b->mtx);
			publish_health(b);
			pthread_mutex_lock(&b->mtx);
			while (b->switched_off && !b->stop) {
				wait_until_locked(b, now_ms() + 1000);
			}
			attempt  = 0;
			log_fail = true;
			continue;
		}
		if (b->rel_loading) {
			wait_until_locked(b, now_ms() + 1000); // rel_load_done signals
			continue;
		}
		const conf_bridge *cfg = b->cfg;
		int                n   = 1 + cfg->n_hybrid_servers;
		idx %= n; // a reload may have shortened the list
		const char *url = idx == 0 ? cfg->server : cfg->hybrid_servers[idx - 1];
		b->restart      = false;
		b->cheap_fail   = false;
		set_state_locked(b, BS_CONNECTING);
		b->srv_tag    = srv_tag(url);
		b->no_session = false;
		// The link that was up and went down is logged once, with the
		// delay before the next attempt (below), or without one when
		// nothing follows.
		bool down = false;
		if (dial_locked(b, url)) {
			serve_locked(b);
			if (b->logged_up) {
				down         = true;
				b->logged_up = false;
				b->reconnects++;
			}
		}
		bool     had_up = b->state == BS_UP;
		uint64_t up_ms  = had_up ? now_ms() - b->state_since_ms : 0;
		// A link on which the remote acked a forward or sent a message
		// made progress: its drop is a cut or a restart, not a remote
		// refusing us, however soon it came (a flapping uplink).
		bool fast = had_up
		    && (up_ms >= FAST_RETRY_AFTER_UP_MS || b->link_acked || b->link_rx_pub);
		if (down && (b->stop || b->switched_off)) {
			log_info("bridge", "bridge=%s server=%s event=link_down reason=\"%s\"",
			    b->name, b->server_now, b->last_error);
		}
		if (b->stop) {
			break;
		}
		if (b->switched_off) {
			continue;
		}
		set_state_locked(b, BS_DOWN);
		if (fast) {
			attempt = 0;
		}
		// Exponential backoff with jitter: 1 s, 2 s, 4 s ... backoff_max,
		// each between half and all of it; up to a quarter of backoff_max
		// after an attempt that cost the remote no more than a TCP
		// handshake (cheap_fail: refused, unreachable, closed before it
		// sent anything; decisions/0046). A link that was up for a while
		// and dropped, or on which an ack came, is tried again at once,
		// within FAST_RETRY_MS (a remote restarting or a connection reset
		// by the network), and backs off from 1 s after that; one that
		// dropped soon after it came up with no ack (a remote that takes
		// the connection and then closes it) does not start the backoff
		// over: such a remote is tried ever less often, up to
		// backoff_max, not every second.
		uint64_t cap = (uint64_t)b->cfg->backoff_max_s * 1000;
		if (b->cheap_fail && !had_up) {
			uint64_t c = cap / CHEAP_CAP_DIV;
			if (c < CHEAP_CAP_MIN_MS) {
				c = CHEAP_CAP_MIN_MS;
			}
			cap = c < cap ? c : cap;
		}
		uint64_t delay = attempt >= 20 ? cap : (uint64_t)1000 << attempt;
		if (fast) {
			delay = FAST_RETRY_MS;
		} else if (delay > cap) {
			delay = cap;
		}
		seed  = seed * 1103515245u + 12345u;
		delay = delay / 2 + (delay / 2) * ((seed >> 8) % 1000) / 1000;
		if (b->restart || b->marker_retry) {
			delay           = 0;
			b->marker_retry = false;
		}
		if (down) {
			log_info("bridge",
			    "bridge=%s server=%s event=link_down reason=\"%s\" "
			    "retry_in_ms=%" PRIu64,
			    b->name, b->server_now, b->last_error, delay);
			log_fail = true; // the next attempt that fails is logged
		} else if (log_fail) {
			log_warn("bridge",
			    "bridge=%s server=%s event=connect_failed reason=\"%s\" "
			    "retry_in_ms=%" PRIu64,
			    b->name, url, b->last_error, delay);
			log_fail = false;
		}
		if (n > 1 && !had_up) {
			idx = (idx + 1) % n;
		}
		pthread_mutex_unlock(&b->mtx);
		publish_health(b);
		pthread_mutex_lock(&b->mtx);
		if (b->stop) {
			break;
		}
		if (b->restart) {
			delay = 0;
		}
		attempt++;
		set_state_locked(b, BS_BACKOFF);
		if (delay > 0) {
			// Subscribers of the health see the wait, as REST does.
			pthread_mutex_unlock(&b->mtx);
			publish_health(b);
			pthread_mutex_lock(&b->mtx);
		}
		// While it waits (up to backoff_max) the health is published
		// every SYS_PERIOD_MS too, as while the link is up: the backlog
		// grows, and expires, without a connect attempt to tell of it.
		uint64_t until    = now_ms() + delay;
		uint64_t next_sys = now_ms() + SYS_PERIOD_MS;
		while (!b->stop && !b->restart && !b->switched_off && now_ms() < until) {
			wait_until_locked(b, until < next_sys ? until : next_sys);
			if (now_ms() >= next_sys && now_ms() < until && !b->stop) {
				pthread_mutex_unlock(&b->mtx);
				publish_health(b);
				pthread_mutex_lock(&b->mtx);
				next_sys = now_ms() + SYS_PERIOD_MS;
			}
		}
	}
	set_state_locked(b, BS_STOPPED);
	pthread_mutex_unlock(&b->mtx);
	return NULL;
}

// ------------------------------------------------------------ life cycle

static void bridge_free(bridge *b)
{
	size_t lost = 0;
	for (bentry *e = b->head, *nx; e != NULL; e = nx) {
		nx = e->next;
		lost += e->seq == 0;
		if (e->msg != NULL) {
			nmq_msg_release(e->msg);
		}
		free(e);
	}
	if (lost > 0) {
		log_warn("bridge", "bridge=%s event=stopped lost_uncached=%zu", b->name, lost);
	}
	for (bentry *e = b->pool, *nx; e != NULL; e = nx) {
		nx = e->next;
		free(e);
	}
	for (retired *r = b->retired, *nx; r != NULL; r = nx) {
		nx = r->next;
		conf_bridge_free(r->cfg);
		free(r->fwds);
		free(r);
	}
	conf_bridge_free(b->cfg);
	free(b->fwds);
	free(b->by_pid);
	free(b->del_rng);
	free(b->echo);
	tpf_free(b->tp_sent, b->n_tp_sent);
	tpf_free(b->tp_gone, b->n_tp_gone);
	tpf_free(b->tp_load.v, b->tp_load.n);
	subs_gone_free(b);
	free(b->name);
	free(b->store_id);
	free(b->host_id);
	pthread_mutex_destroy(&b->mtx);
	pthread_cond_destroy(&b->cv);
	free(b);
}

static void bridge_release(bridge *b)
{
	if (atomic_fetch_sub(&b->refs, 1) == 1) {
		bridge_free(b);
	}
}

static bridge *bridge_new(nmq_bridges *set, const conf_bridge *cb)
{
	bridge *b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return NULL;
	}
	atomic_init(&b->refs, 1);
	pthread_mutex_init(&b->mtx, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->cv, &ca);
	pthread_condattr_destroy(&ca);
	b->set            = set;
	b->cfg            = conf_bridge_dup(cb);
	b->name           = strdup(cb->name);
	b->by_pid         = calloc(65536, sizeof(bentry *));
	b->next_pid       = 1;
	b->origin         = (UINT64_C(1) << 63) | ++set->next_origin;
	b->self.deliver   = self_deliver;
	b->self.hold      = self_hold;
	b->self.release   = self_release;
	b->store          = set->env.store;
	b->next_seq       = wall_us();
	b->state_since_ms = now_ms();
	char host[128]    = "localhost";
	(void)gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	size_t nl              = strlen(cb->name);
	b->store_id            = malloc(nl + 9);
	b->host_id             = malloc(nl + strlen(host) + 2);
	if (b->cfg == NULL || b->name == NULL || b->by_pid == NULL || b->store_id == NULL
	    || b->host_id == NULL) {
		bridge_free(b);
		return NULL;
	}
	snprintf(b->store_id, nl + 9, "$bridge/%s", cb->name);
	snprintf(b->host_id, nl + strlen(host) + 2, "%s-%s", cb->name, host);
	if (b->store != NULL) {
		b->disk_only = DISK_UNKNOWN; // counted by the first read
		b->del_rng   = malloc(2 * DEL_RANGES * sizeof(*b->del_rng));
		if (b->del_rng == NULL) {
			bridge_free(b);
			return NULL;
		}
	}
	b->fwds   = fwds_alloc(b, b->cfg);
	b->n_fwds = b->cfg->n_fwds;
	if (b->fwds == NULL) {
		bridge_free(b);
		return NULL;
	}
	return b;
}

static void bridge_run(bridge *b)
{
	rel_load_start(b); // the inbound QoS 2 ids (before the first link)
	pthread_mutex_lock(&b->mtx);
	refill_locked(b); // the first read counts what the cache holds
	pthread_mutex_unlock(&b->mtx);
	tp_load_start(b); // what this bridge had mirrored on its remote
	fwds_subscribe(b, b->fwds, b->n_fwds);
	// Before the link thread starts: its first copy of the local set
	// includes the sessions the broker walks when counting starts.
	pthread_mutex_lock(&b->set->tp_mtx);
	b->tp_next      = b->set->tp_head;
	b->set->tp_head = b;
	pthread_mutex_unlock(&b->set->tp_mtx);
	if (b->cfg->transparent) {
		broker_watch_filters(b->set->env.broker, tp_changed, b->set);
	}
	atomic_fetch_add(&b->refs, 1); // the thread's
	if (pthread_create(&b->thr, NULL, bridge_main, b) != 0) {
		atomic_fetch_sub(&b->refs, 1);
		log_error("bridge", "bridge=%s event=not_started reason=thread", b->name);
		return;
	}
	b->thr_started = true;
	log_info("bridge",
	    "bridge=%s server=%s forwards=%d subscriptions=%d cache=%s transparent=%d "
	    "event=started",
	    b->name, b->cfg->server, b->cfg->n_fwds, b->cfg->n_subs,
	    b->store != NULL ? "on" : "off", b->cfg->transparent ? 1 : 0);
}

// Stops b's link and removes its forwards; the caller drops its reference.
static void bridge_halt(bridge *b)
{
	pthread_mutex_lock(&b->set->tp_mtx);
	for (bridge **pp = &b->set->tp_head; *pp != NULL; pp = &(*pp)->tp_next) {
		if (*pp == b) {
			*pp = b->tp_next;
			break;
		}
	}
	pthread_mutex_unlock(&b->set->tp_mtx);
	fwds_unsubscribe(b, b->fwds, b->n_fwds);
	pthread_mutex_lock(&b->mtx);
	b->stop = true;
	atomic_store(&b->cancel, true);
	for (int i = 0; i < b->n_fwds; i++) {
		b->fwds[i].dead = true;
	}
	if (b->link != NULL) {
		conn_close(b->link->c);
	}
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mtx);
	if (b->thr_started) {
		pthread_join(b->thr, NULL);
		b->thr_started = false;
		bridge_release(b);
	}
	// Wait for a cache read in progress (it holds a reference and pumps).
	for (int i = 0; i < 5000; i++) {
		pthread_mutex_lock(&b->mtx);
		bool r = b->reading;
		pthread_mutex_unlock(&b->mtx);
		if (!r) {
			break;
		}
		usleep(1000);
	}
	pthread_mutex_lock(&b->mtx);
	flush_deletes_locked(b);
	pthread_mutex_unlock(&b->mtx);
	log_info("bridge", "bridge=%s event=stopped", b->name);
}

// Whether cfg's forwards have the local filters of b's, in the same order.
static bool fwds_same_filters(const bridge *b, const conf_bridge *cfg)
{
	if (cfg->n_fwds != b->n_fwds) {
		return false;
	}
	for (int i = 0; i < cfg->n_fwds; i++) {
		if (strcmp(cfg->fwds[i].local_topic, b->fwds[i].cfg->local_topic) != 0) {
			return false;
		}
	}
	return true;
}

// Applies a changed configuration to a running bridge, keeping its queue.
// A local message must not fall between the old forwards and the new ones
// (its publisher has its ack): when the filters are the same (a change of
// server, credentials, topic rewrite...), the forwards stay in the topic
// tree and only take the new settings; otherwise the new ones are put in
// the tree, not yet taking messages, before the old ones stop taking them
// and leave it. A message routed across that switch to an old and a new
// forward of the same filter may be queued twice (at least once).
static void bridge_update(bridge *b, const conf_bridge *cb)
{
	conf_bridge *ncfg = conf_bridge_dup(cb);
	bool         same = ncfg != NULL && fwds_same_filters(b, ncfg);
	bfwd        *nfw  = ncfg != NULL && !same ? fwds_alloc(b, ncfg) : NULL;
	retired     *r    = calloc(1, sizeof(*r));
	if (ncfg == NULL || (nfw == NULL && !same) || r == NULL) {
		log_error("bridge", "bridge=%s event=reload_failed reason=out_of_memory", b->name);
		if (ncfg != NULL) {
			conf_bridge_free(ncfg);
		}
		free(nfw);
		free(r);
		return;
	}
	if (!same) {
		for (int i = 0; i < ncfg->n_fwds; i++) {
			nfw[i].dead = true; // until the old ones stop, below
		}
		fwds_subscribe(b, nfw, ncfg->n_fwds);
	}
	pthread_mutex_lock(&b->mtx);
	subs_gone_add_locked(b, b->cfg, ncfg);
	r->cfg     = b->cfg;
	r->next    = b->retired;
	b->retired = r;
	b->cfg     = ncfg;
	bfwd *old  = b->fwds;
	int   nold = b->n_fwds;
	if (same) {
		for (int i = 0; i < ncfg->n_fwds; i++) {
			b->fwds[i].cfg = &ncfg->fwds[i];
		}
	} else {
		for (int i = 0; i < nold; i++) {
			old[i].dead = true;
		}
		for (int i = 0; i < ncfg->n_fwds; i++) {
			nfw[i].dead = false;
		}
		r->fwds   = old;
		b->fwds   = nfw;
		b->n_fwds = ncfg->n_fwds;
	}
	b->restart  = true;
	b->tp_dirty = true; // transparent switched off: unsubscribed on the next link
	if (b->link != NULL) {
		set_error_locked(b, "configuration changed");
		conn_close(b->link->c);
	}
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mtx);
	if (!same) {
		fwds_unsubscribe(b, old, nold);
	}
	if (ncfg->transparent) {
		broker_watch_filters(b->set->env.broker, tp_changed, b->set);
	}
	log_info("bridge", "bridge=%s event=reconfigured", b->name);
}

#ifdef NMQ_HAVE_STORE
// The cached forwards of bridges no longer in the configuration, found
// once at start (decisions/0034): dropped, logged at error with their
// count. The names configured then (enabled or not) are copied: the
// listing runs later, on the store thread, and also keeps the rows of
// the bridges running then (started since by a reload or the REST API).
typedef struct orphan_scan {
	nmq_bridges *set;
	nmq_store   *store;
	char       **cids; // "$bridge/<name>" of every configured bridge
	int          n;
} orphan_scan;

static void orphan_scan_free(orphan_scan *o)
{
	for (int i = 0; i < o->n; i++) {
		free(o->cids[i]);
	}
	free(o->cids);
	free(o);
}

static void orphan_row(void *arg, const char *cid, uint64_t rows, uint32_t ids, uint32_t filters)
{
	orphan_scan *o = arg;
	for (int i = 0; i < o->n; i++) {
		if (o->cids[i] != NULL && strcmp(o->cids[i], cid) == 0) {
			return;
		}
	}
	// A bridge started since (a reload or the REST API, while the store
	// thread was busy with what was queued before the listing) is
	// configured now: its rows, the old ones and those it has queued
	// since, are its backlog. Under the set's mtx, so that a bridge
	// started after this check queues its rows after the delete.
	pthread_mutex_lock(&o->set->mtx);
	for (bridge *b = o->set->head; b != NULL; b = b->next) {
		if (strcmp(b->store_id, cid) == 0) {
			pthread_mutex_unlock(&o->set->mtx);
			return;
		}
	}
	// The store thread runs this op after every one queued before it;
	// this delete goes after them too.
	nmq_err e = store_session_del(o->store, cid, NULL, NULL);
	pthread_mutex_unlock(&o->set->mtx);
	log_error("bridge",
	    "bridge=%s event=cache_dropped reason=not_configured rows=%" PRIu64
	    " qos2_ids=%u filters=%u%s%s",
	    cid + 8, rows, ids, filters,
	    e == NMQ_OK ? "" : " error=", e == NMQ_OK ? "" : nmq_strerror(e));
}

static void orphan_done(void *arg, nmq_err err)
{
	orphan_scan *o = arg;
	if (err != NMQ_OK) {
		log_warn("bridge", "event=cache_list_failed reason=%s", nmq_strerror(err));
	}
	nmq_bridges *set = o->set;
	orphan_scan_free(o);
	pthread_mutex_lock(&set->mtx);
	set->orphan_pending = false;
	pthread_mutex_unlock(&set->mtx);
}

static void orphan_scan_start(nmq_bridges *set, const nmq_conf *conf, nmq_store *store)
{
	orphan_scan *o = calloc(1, sizeof(*o));
	if (o == NULL) {
		return;
	}
	o->set   = set;
	o->store = store;
	o->cids  = calloc((size_t)conf->n_bridges + 1, sizeof(*o->cids));
	if (o->cids == NULL) {
		free(o);
		return;
	}
	for (int i = 0; i < conf->n_bridges; i++) {
		size_t l = strlen(conf->bridges[i].name) + 9;
		char  *c = malloc(l);
		if (c == NULL) {
			orphan_scan_free(o); // not checked this time: nothing dropped
			return;
		}
		snprintf(c, l, "$bridge/%s", conf->bridges[i].name);
		o->cids[o->n++] = c;
	}
	set->orphan_pending = true; // before the store thread may clear it
	nmq_err e           = store_bcache_list(store, orphan_row, orphan_done, o);
	if (e != NMQ_OK) {
		set->orphan_pending = false;
		log_warn("bridge", "event=cache_list_failed reason=%s", nmq_strerror(e));
		orphan_scan_free(o);
	}
}
#endif

nmq_bridges *bridges_start(const nmq_conf *conf, const bridge_env *env)
{
	nmq_bridges *set = calloc(1, sizeof(*set));
	if (set == NULL) {
		return NULL;
	}
	pthread_mutex_init(&set->mtx, NULL);
	pthread_mutex_init(&set->change_mtx, NULL);
	pthread_mutex_init(&set->tp_mtx, NULL);
	set->env = *env;
	atomic_store(&g_set, set);
	bridges_reconfigure(set, conf);
#ifdef NMQ_HAVE_STORE
	if (env->store != NULL) {
		store_bcache_set_gone(env->store, bridges_store_row_gone, NULL);
		store_bcache_set_expired(env->store, bridges_store_expired, NULL);
		orphan_scan_start(set, conf, env->store);
	}
#endif
	return set;
}

static void reconfigure_changing(nmq_bridges *set, const nmq_conf *conf);

void bridges_reconfigure(nmq_bridges *set, const nmq_conf *conf)
{
	pthread_mutex_lock(&set->change_mtx);
	reconfigure_changing(set, conf);
	pthread_mutex_unlock(&set->change_mtx);
}

// Starts the bridge cb describes (change_mtx held).
static void start_one_changing(nmq_bridges *set, const conf_bridge *cb)
{
	bridge *b = bridge_new(set, cb);
	if (b == NULL) {
		log_error("bridge", "bridge=%s event=not_started reason=out_of_memory", cb->name);
		return;
	}
	pthread_mutex_lock(&set->mtx);
	b->next   = set->head;
	set->head = b;
	pthread_mutex_unlock(&set->mtx);
	bridge_run(b);
}

static void reconfigure_changing(nmq_bridges *set, const nmq_conf *conf)
{
	// Removed or disabled: stopped.
	pthread_mutex_lock(&set->mtx);
	bridge **pp   = &set->head;
	bridge  *gone = NULL;
	while (*pp != NULL) {
		bridge            *b  = *pp;
		const conf_bridge *cb = conf_bridge_find(conf, b->name);
		if (cb == NULL || !cb->enable) {
			*pp     = b->next;
			b->next = gone;
			gone    = b;
			continue;
		}
		pp = &b->next;
	}
	pthread_mutex_unlock(&set->mtx);
	for (bridge *b = gone, *nx; b != NULL; b = nx) {
		nx = b->next;
		bridge_halt(b);
		clear_health(b);
		bridge_release(b);
	}
	for (int i = 0; i < conf->n_bridges; i++) {
		const conf_bridge *cb = &conf->bridges[i];
		if (!cb->enable) {
			continue;
		}
		pthread_mutex_lock(&set->mtx);
		bridge *b = set->head;
		while (b != NULL && strcmp(b->name, cb->name) != 0) {
			b = b->next;
		}
		pthread_mutex_unlock(&set->mtx);
		if (b != NULL) {
			if (!conf_bridge_equal(b->cfg, cb)) {
				bridge_update(b, cb);
			}
			continue;
		}
		start_one_changing(set, cb);
	}
}

void bridges_stop(nmq_bridges *set)
{
	if (set == NULL) {
		return;
	}
	atomic_store(&g_set, NULL);
	// A store callback that took the set before it was cleared ends
	// before the set goes (it holds no lock this waits for).
	while (atomic_load(&g_set_users) > 0) {
		usleep(100);
	}
	// No watcher call runs or starts once this returns.
	if (set->env.broker != NULL) {
		broker_watch_filters(set->env.broker, NULL, NULL);
	}
	pthread_mutex_lock(&set->mtx);
	bridge *head = set->head;
	set->head    = NULL;
	pthread_mutex_unlock(&set->mtx);
	for (bridge *b = head, *nx; b != NULL; b = nx) {
		nx = b->next;
		bridge_halt(b);
		bridge_release(b);
	}
	// The listing of the cache at start reads the set: wait for it (the
	// store thread runs it before it stops).
	for (int i = 0; i < 10000; i++) {
		pthread_mutex_lock(&set->mtx);
		bool pending = set->orphan_pending;
		pthread_mutex_unlock(&set->mtx);
		if (!pending) {
			break;
		}
		if (i == 9999) {
			log_warn("bridge", "event=cache_list_pending action=set_kept");
			return; // left allocated: the listing may still read it
		}
		usleep(1000);
	}
	pthread_mutex_destroy(&set->mtx);
	pthread_mutex_destroy(&set->change_mtx);
	pthread_mutex_destroy(&set->tp_mtx);
	free(set);
}

void bridges_store_evicted(void *arg, const char *client_id, uint64_t seq)
{
	(void)arg;
	nmq_bridges *set;
	bridge      *b = store_bridge_lock(client_id, &set);
	if (b == NULL) {
		return;
	}
	b->evicted++;
	b->dropped++;
	if (seq > b->mem_last_seq) {
		if (b->disk_only != DISK_UNKNOWN && b->disk_only > 0) {
			b->disk_only--;
		}
	} else {
		// Also in memory: gone there too unless it is on the wire.
		for (bentry *e = b->head; e != NULL && e->seq <= seq; e = e->next) {
			if (e->seq == seq && e->state == Q_QUEUED
			    && (e->pid == 0 || b->by_pid[e->pid] != e)) {
				entry_remove(b, e, false);
				break;
			}
		}
	}
	store_bridge_unlock(set, b);
}

#ifdef NMQ_HAVE_STORE
// The cache's question before an eviction (store_bcache_set_gone, store
// thread): whether the row seq of client_id is done with. A cached row
// older than the newest one in memory (mem_last_seq) whose entry is no
// longer in memory was acked, refused or dropped: its delete is batched
// (note_delete_locked) or queued, and evicting it loses nothing.
static bool bridges_store_row_gone(void *arg, const char *client_id, uint64_t seq)
{
	(void)arg;
	nmq_bridges *set;
	bridge      *b = store_bridge_lock(client_id, &set);
	if (b == NULL) {
		return false;
	}
	bool gone = false;
	if (seq <= b->mem_last_seq) {
		gone = true;
		// In seq order (memory-only entries, seq 0, in between).
		for (bentry *e = b->head; e != NULL && e->seq <= seq; e = e->next) {
			if (e->seq == seq) {
				gone = false;
				break;
			}
		}
	}
	store_bridge_unlock(set, b);
	return gone;
}
#endif

#ifdef NMQ_HAVE_STORE
// A cached row the store dropped because its message expired (its sweep of
// the rows that expire while the broker runs, or a read that reached it;
// store thread, after the commit): the forward leaves the backlog, counted
// in expired (and dropped) as one that expires in the queue. A row whose
// entry is on the wire (QoS 1 sent, awaiting its PUBACK) or already gone is
// not counted: the remote has it, or it was counted when it went.
static void bridges_store_expired(void *arg, const char *client_id, uint64_t seq)
{
	(void)arg;
	nmq_bridges *set;
	bridge      *b = store_bridge_lock(client_id, &set);
	if (b == NULL) {
		return;
	}
	bool counted = false;
	if (seq > b->mem_last_seq) {
		// On disk only (or not yet counted by the first read).
		if (b->disk_only != DISK_UNKNOWN && b->disk_only > 0) {
			b->disk_only--;
			if (b->disk_only == 0) {
				b->oldest_disk_ms = 0;
			}
		}
		counted = true;
	} else {
		for (bentry *e = b->head; e != NULL && e->seq <= seq; e = e->next) {
			if (e->seq == seq) {
				if (e->state == Q_QUEUED
				    && (e->pid == 0 || b->by_pid[e->pid] != e)) {
					entry_remove(b, e, false);
					counted = true;
				}
				break;
			}
		}
	}
	if (counted) {
		b->expired++;
		b->dropped++;
		refill_locked(b); // room in memory for what waits on disk
	}
	store_bridge_unlock(set, b);
}
#endif

size_t bridges_health_json(nmq_bridges *set, const char *name, char *buf, size_t cap)
{
	size_t n = 0;
	if (cap > 0) {
		buf[0] = '\0';
	}
	pthread_mutex_lock(&set->mtx);
	if (name == NULL) {
		n += (size_t)snprintf(buf, cap, "[");
	}
	bool found = false;
	for (bridge *b = set->head; b != NULL; b = b->next) {
		if (name != NULL && strcmp(name, b->name) != 0) {
			continue;
		}
		if (found && name == NULL) {
			n += (size_t)snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, ",");
		}
		found = true;
		pthread_mutex_lock(&b->mtx);
		int k = health_locked(b, n < cap ? buf + n : NULL, n < cap ? cap - n : 0);
		pthread_mutex_unlock(&b->mtx);
		n += k > 0 ? (size_t)k : 0;
	}
	if (name == NULL) {
		n += (size_t)snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, "]");
	}
	pthread_mutex_unlock(&set->mtx);
	return name != NULL && !found ? 0 : n;
}

int bridges_conf_copies(nmq_bridges *set, const char *name, conf_bridge ***out)
{
	conf_bridge **v   = NULL;
	int           n   = 0;
	int           cap = 0;
	bool          oom = false;
	pthread_mutex_lock(&set->mtx);
	for (bridge *b = set->head; b != NULL && !oom; b = b->next) {
		if (name != NULL && strcmp(name, b->name) != 0) {
			continue;
		}
		if (n == cap) {
			cap              = cap == 0 ? 4 : cap * 2;
			conf_bridge **nv = realloc(v, (size_t)cap * sizeof(*nv));
			if (nv == NULL) {
				oom = true;
				break;
			}
			v = nv;
		}
		pthread_mutex_lock(&b->mtx);
		conf_bridge *c = conf_bridge_dup(b->cfg);
		pthread_mutex_unlock(&b->mtx);
		if (c == NULL) {
			oom = true;
		} else {
			v[n++] = c;
		}
	}
	pthread_mutex_unlock(&set->mtx);
	if (oom) {
		for (int i = 0; i < n; i++) {
			conf_bridge_free(v[i]);
		}
		free(v);
		*out = NULL;
		return -1;
	}
	*out = v;
	return n;
}

// ------------------------------------------------------- runtime changes

// The bridge named name, held (NULL if none).
static bridge *find_held(nmq_bridges *set, const char *name)
{
	pthread_mutex_lock(&set->mtx);
	bridge *b = set->head;
	while (b != NULL && strcmp(b->name, name) != 0) {
		b = b->next;
	}
	if (b != NULL) {
		atomic_fetch_add(&b->refs, 1);
	}
	pthread_mutex_unlock(&set->mtx);
	return b;
}

// Unlinks the bridge named name from the set, stops it and drops the
// set's reference (change_mtx held). Returns false if there is none.
static bool remove_changing(nmq_bridges *set, const char *name)
{
	pthread_mutex_lock(&set->mtx);
	bridge **pp = &set->head;
	while (*pp != NULL && strcmp((*pp)->name, name) != 0) {
		pp = &(*pp)->next;
	}
	bridge *b = *pp;
	if (b != NULL) {
		*pp = b->next;
	}
	pthread_mutex_unlock(&set->mtx);
	if (b == NULL) {
		return false;
	}
	bridge_halt(b);
	clear_health(b);
	bridge_release(b);
	return true;
}

nmq_err bridges_put(nmq_bridges *set, const conf_bridge *cb, bool keep_password)
{
	nmq_err e = NMQ_OK;
	pthread_mutex_lock(&set->change_mtx);
	bridge *b = find_held(set, cb->name);
	if (!cb->enable) {
		if (b != NULL) {
			bridge_release(b);
			(void)remove_changing(set, cb->name);
		}
		pthread_mutex_unlock(&set->change_mtx);
		return NMQ_OK;
	}
	conf_bridge *nc = conf_bridge_dup(cb);
	if (nc == NULL) {
		e = NMQ_ENOMEM;
	} else if (keep_password) {
		free(nc->password);
		nc->password = NULL;
		if (b != NULL) {
			pthread_mutex_lock(&b->mtx);
			if (b->cfg->password != NULL) {
				nc->password = strdup(b->cfg->password);
				if (nc->password == NULL) {
					e = NMQ_ENOMEM;
				}
			}
			pthread_mutex_unlock(&b->mtx);
		}
	}
	if (e == NMQ_OK) {
		if (b == NULL) {
			start_one_changing(set, nc);
		} else if (!conf_bridge_equal(b->cfg, nc)) {
			bridge_update(b, nc);
		}
	}
	if (nc != NULL) {
		conf_bridge_free(nc);
	}
	if (b != NULL) {
		bridge_release(b);
	}
	pthread_mutex_unlock(&set->change_mtx);
	if (e == NMQ_OK) {
		log_info("bridge", "bridge=%s event=changed by=rest", cb->name);
	}
	return e;
}

nmq_err bridges_delete(nmq_bridges *set, const char *name)
{
	pthread_mutex_lock(&set->change_mtx);
	bool found = remove_changing(set, name);
	pthread_mutex_unlock(&set->change_mtx);
	if (found) {
		log_info("bridge", "bridge=%s event=deleted by=rest", name);
	}
	return found ? NMQ_OK : NMQ_ENOENT;
}

nmq_err bridges_switch(nmq_bridges *set, const char *name, bool on)
{
	bridge *b = find_held(set, name);
	if (b == NULL) {
		return NMQ_ENOENT;
	}
	pthread_mutex_lock(&b->mtx);
	bool changed    = b->switched_off == on;
	b->switched_off = !on;
	if (changed && on) {
		b->restart = true; // connect at once, without waiting for a backoff
	}
	if (!on && b->link != NULL) {
		set_error_locked(b, "switched off");
		conn_close(b->link->c);
	}
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mtx);
	if (changed) {
		log_info("bridge", "bridge=%s event=%s by=rest", name,
		    on ? "switched_on" : "switched_off");
	}
	bridge_release(b);
	return NMQ_OK;
}

// Replaces b's configuration by nc for a change that needs no reconnect
// (subscriptions): the forwards keep the one they point into, which is
// retired, not freed. mtx held; takes nc.
static bool swap_cfg_locked(bridge *b, conf_bridge *nc)
{
	retired *r = calloc(1, sizeof(*r));
	if (r == NULL) {
		conf_bridge_free(nc);
		return false;
	}
	r->cfg     = b->cfg;
	r->next    = b->retired;
	b->retired = r;
	b->cfg     = nc;
	return true;
}

// Copies the user properties of REST into codec pairs (borrowed strings).
static mqtt_user_prop *user_props_of(const char *const *kv, int n)
{
	if (n <= 0) {
		return NULL;
	}
	mqtt_user_prop *up = calloc((size_t)n, sizeof(*up));
	for (int i = 0; up != NULL && i < n; i++) {
		up[i].key.p     = (const uint8_t *)kv[2 * i];
		up[i].key.len   = (uint32_t)strlen(kv[2 * i]);
		up[i].value.p   = (const uint8_t *)kv[2 * i + 1];
		up[i].value.len = (uint32_t)strlen(kv[2 * i + 1]);
	}
	return up;
}

nmq_err bridges_subscribe(nmq_bridges *set, const char *name, const conf_bridge_sub *subs, int n,
    const char *const *user_props, int n_props)
{
	bridge *b = find_held(set, name);
	if (b == NULL) {
		return NMQ_ENOENT;
	}
	pthread_mutex_lock(&set->change_mtx);
	pthread_mutex_lock(&b->mtx);
	nmq_err          e  = NMQ_ENOMEM;
	conf_bridge     *nc = conf_bridge_dup(b->cfg);
	conf_bridge_sub *v  = nc != NULL ? calloc((size_t)(nc->n_subs + n), sizeof(*v)) : NULL;
	mqtt_user_prop  *up = user_props_of(user_props, n_props);
	if (v != NULL && (n_props == 0 || up != NULL)) {
		// Kept: the old ones whose remote filter is not given again.
		int k = 0;
		for (int i = 0; i < nc->n_subs; i++) {
			bool again = false;
			for (int j = 0; j < n; j++) {
				again
				    |= strcmp(nc->subs[i].remote_topic, subs[j].remote_topic) == 0;
			}
			if (again) {
				conf_bridge_sub_clear(&nc->subs[i]);
			} else {
				v[k++] = nc->subs[i];
			}
		}
		bool ok = true;
		for (int j = 0; j < n; j++) {
			ok &= conf_bridge_sub_copy(&v[k++], &subs[j]) == 0;
		}
		free(nc->subs);
		nc->subs   = v;
		nc->n_subs = k;
		v          = NULL;
		if (ok && swap_cfg_locked(b, nc)) {
			nc = NULL;
			e  = NMQ_OK;
			if (b->link != NULL && b->up && !b->link->closed) {
				send_subscribe_locked(
				    b, subs, n, RT_SUB_PID, up, (uint32_t)n_props);
			}
			b->tp_dirty = true; // a mirrored filter may now be configured
			pthread_cond_broadcast(&b->cv);
		}
	}
	pthread_mutex_unlock(&b->mtx);
	pthread_mutex_unlock(&set->change_mtx);
	free(v);
	free(up);
	if (nc != NULL) {
		conf_bridge_free(nc);
	}
	if (e == NMQ_OK) {
		log_info("bridge", "bridge=%s event=subscribed filters=%d by=rest", name, n);
	}
	bridge_release(b);
	return e;
}

nmq_err bridges_unsubscribe(nmq_bridges *set, const char *name, const char *const *filters, int n,
    const char *const *user_props, int n_props)
{
	bridge *b = find_held(set, name);
	if (b == NULL) {
		return NMQ_ENOENT;
	}
	pthread_mutex_lock(&set->change_mtx);
	pthread_mutex_lock(&b->mtx);
	nmq_err         e  = NMQ_ENOMEM;
	conf_bridge    *nc = conf_bridge_dup(b->cfg);
	mqtt_user_prop *up = user_props_of(user_props, n_props);
	if (nc != NULL && (n_props == 0 || up != NULL)) {
		int k = 0;
		for (int i = 0; i < nc->n_subs; i++) {
			bool gone = false;
			for (int j = 0; j < n; j++) {
				gone |= strcmp(nc->subs[i].remote_topic, filters[j]) == 0;
			}
			if (gone) {
				conf_bridge_sub_clear(&nc->subs[i]);
			} else {
				nc->subs[k++] = nc->subs[i];
			}
		}
		nc->n_subs = k;
		if (swap_cfg_locked(b, nc)) {
			nc = NULL;
			e  = NMQ_OK;
			if (b->link != NULL && b->up && !b->link->closed) {
				send_unsubscribe_locked(
				    b, filters, n, RT_SUB_PID, up, (uint32_t)n_props);
			}
			// A filter local clients hold is mirrored again (after the
			// UNSUBSCRIBE above); one that was mirrored is now configured.
			b->tp_dirty  = true;
			b->tp_resync = true;
			pthread_cond_broadcast(&b->cv);
		}
	}
	pthread_mutex_unlock(&b->mtx);
	pthread_mutex_unlock(&set->change_mtx);
	free(up);
	if (nc != NULL) {
		conf_bridge_free(nc);
	}
	if (e == NMQ_OK) {
		log_info("bridge", "bridge=%s event=unsubscribed filters=%d by=rest", name, n);
	}
	bridge_release(b);
	return e;
}
