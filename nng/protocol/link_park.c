// Parking a packet of a connection until the application answers
// (decisions/0018 for CONNECT, decisions/0022 for PUBLISH and SUBSCRIBE):
// the packet is copied into the link's token, frames read meanwhile are
// held behind it, and a worker replays the packet with the answer, then
// the held frames in order. A parked CONNECT pauses reading at once; a
// parked PUBLISH or SUBSCRIBE keeps reading, answers PINGREQs at once
// (so that a slow answer does not look like a dead broker to the
// client's keepalive) and pauses reading only when PENDING_READ_PAUSE
// bytes are held.
//
// One token per link, made at its first park and kept until both the
// link and the last outstanding answer let go of it. Its mutex serializes
// the replay job with the receive path (link_pending_hold) and with the
// end of the connection (link_pending_cancel); at most one park is
// outstanding at a time, so an answer always belongs to the parked packet.
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/core/log.h"
#include "nng/protocol/link.h"
#include "nng/transport/listener.h"

// Most bytes of frames held back behind a parked packet.
#define PENDING_HELD_MAX (256 * 1024)
// Held bytes at which reading pauses behind a parked PUBLISH or SUBSCRIBE
// (one more read may still come in: well under PENDING_HELD_MAX).
#define PENDING_READ_PAUSE (64 * 1024)

enum { PARK_CONNECT = 1, PARK_PACKET = 2 };

struct proto_pending {
	pthread_mutex_t mtx;
	// The link's reference, plus one for each park whose answer is not
	// applied yet (the application's).
	atomic_int   refs;
	_Atomic bool busy; // a packet is parked: frames are held (mtx to set)
	bool         stopped; // a replay ended the connection
	bool         reparked; // mtx: a replay parked again
	nmq_link    *l; // mtx; NULL once the connection closed
	nmq_proto   *p;
	workq_job    job;
	atomic_int   answer; // the application's answer to the current park
	uint8_t      kind; // mtx: PARK_CONNECT or PARK_PACKET
	uint8_t     *frame; // mtx: copy of the parked packet
	size_t       len;
	int         *verdicts; // mtx: answers before this one (SUBSCRIBE filters)
	uint32_t     n_known; // how many; the answer is for filter n_known
	uint8_t     *held; // frames read meanwhile: [u32 length][bytes]...
	size_t       held_len;
	size_t       held_cap;
	// Set by a replay (same thread, mtx held) for a park made meanwhile.
	uint8_t *next_frame;
	size_t   next_len;
	int     *next_verdicts;
	uint32_t next_known;
	uint8_t  next_kind;
};

// The token whose replay runs on this thread (its mutex held), if any.
static _Thread_local proto_pending *tl_replay;
// The acl_ask call running on this thread: who it was handed, whose link.
static _Thread_local const proto_who *tl_ask_who;
static _Thread_local nmq_link        *tl_ask_link;

static void pending_release(proto_pending *t)
{
	if (atomic_fetch_sub(&t->refs, 1) != 1) {
		return;
	}
	pthread_mutex_destroy(&t->mtx);
	free(t->frame);
	free(t->verdicts);
	free(t->held);
	free(t->next_frame);
	free(t->next_verdicts);
	free(t);
}

// Parks the packet (frame, len) of l; see link.h.
proto_pending *link_park(nmq_link *l, bool connect, const uint8_t *frame, size_t len,
    const int *verdicts, uint32_t n_known)
{
	proto_pending *t = l->pending;
	if (t == NULL) {
		t = calloc(1, sizeof(*t));
		if (t == NULL) {
			proto_count_alloc_failure(l->p, "park");
			return NULL;
		}
		t->l = l;
		t->p = l->p;
		pthread_mutex_init(&t->mtx, NULL);
		atomic_init(&t->refs, 1); // the link's
		atomic_init(&t->busy, false);
		__atomic_store_n(&l->pending, t, __ATOMIC_RELEASE);
	}
	uint8_t *f = malloc(len > 0 ? len : 1);
	int     *v = n_known > 0 ? malloc(n_known * sizeof(int)) : NULL;
	if (f == NULL || (n_known > 0 && v == NULL)) {
		free(f);
		free(v);
		proto_count_alloc_failure(l->p, "park");
		return NULL;
	}
	memcpy(f, frame, len);
	if (n_known > 0) {
		memcpy(v, verdicts, n_known * sizeof(int));
	}
	bool in_replay = tl_replay == t;
	if (!in_replay) {
		pthread_mutex_lock(&t->mtx);
	}
	if (in_replay) {
		// Applied when the replay ends (it still reads t->frame).
		free(t->next_frame);
		free(t->next_verdicts);
		t->next_frame    = f;
		t->next_len      = len;
		t->next_verdicts = v;
		t->next_known    = n_known;
		t->next_kind     = connect ? PARK_CONNECT : PARK_PACKET;
		t->reparked      = true;
	} else {
		free(t->frame);
		free(t->verdicts);
		t->frame    = f;
		t->len      = len;
		t->verdicts = v;
		t->n_known  = n_known;
		t->kind     = connect ? PARK_CONNECT : PARK_PACKET;
	}
	atomic_fetch_add(&t->refs, 1); // the application's
	atomic_store(&t->busy, true);
	// A CONNECT pauses reading before the application can answer (the
	// replay resumes it); behind a PUBLISH or SUBSCRIBE reading goes on,
	// and link_pending_hold pauses it when too much is held.
	if (connect) {
		link_rx_pause(l, LINK_RXP_PARK, true);
	}
	if (!in_replay) {
		pthread_mutex_unlock(&t->mtx);
	}
	return t;
}

// Whether a DISCONNECT is among the frames held behind the parked packet.
static bool held_has_disconnect(const proto_pending *t)
{
	for (size_t off = 0; off + 4 <= t->held_len;) {
		uint32_t n;
		memcpy(&n, t->held + off, 4);
		if (n > 0 && (t->held[off + 4] >> 4) == MQTT_DISCONNECT) {
			return true;
		}
		off += 4 + (size_t)n;
	}
	return false;
}

// Replays the parked packet with its answer, then the held frames, on a
// worker.
static void pending_job(workq_job *job)
{
	proto_pending *t = (proto_pending *)((char *)job - offsetof(proto_pending, job));
	pthread_mutex_lock(&t->mtx);
	tl_replay     = t;
	nmq_link *l   = t->l;
	size_t    off = 0;
	if (l != NULL) {
		int answer = atomic_load(&t->answer);
		int r;
		if (t->kind == PARK_CONNECT) {
			r = link_connect_run(l, t->frame, t->len, answer);
		} else {
			r = link_replay(l, t->frame, t->len, t->verdicts, t->n_known, answer);
		}
		while (r == 0 && !t->reparked && off + 4 <= t->held_len) {
			uint32_t n;
			memcpy(&n, t->held + off, 4);
			r = link_dispatch(l, t->held + off + 4, n);
			off += 4 + (size_t)n;
		}
		t->stopped = r != 0;
	}
	if (t->reparked && !t->stopped && l != NULL) {
		// A packet replayed here parked again: it becomes the parked
		// one, and the frames after it stay held.
		free(t->frame);
		free(t->verdicts);
		t->frame         = t->next_frame;
		t->len           = t->next_len;
		t->verdicts      = t->next_verdicts;
		t->n_known       = t->next_known;
		t->kind          = t->next_kind;
		t->next_frame    = NULL;
		t->next_verdicts = NULL;
		if (off > 0) {
			memmove(t->held, t->held + off, t->held_len - off);
			t->held_len -= off;
		}
		if (t->kind == PARK_PACKET && t->held_len < PENDING_READ_PAUSE
		    && !held_has_disconnect(t)) {
			// Behind a CONNECT reading was paused: a packet parked by its
			// replay lets it go on (PINGREQs answered meanwhile). Not
			// while a DISCONNECT is still held: the end of the stream
			// that follows it must not be read before it is handled
			// (link_pending_hold).
			link_rx_pause(l, LINK_RXP_PARK, false);
		}
	} else {
		bool resume = l != NULL && !t->stopped;
		free(t->held);
		t->held     = NULL;
		t->held_len = 0;
		t->held_cap = 0;
		atomic_store(&t->busy, false);
		if (resume) {
			// The wait was the broker's: the keepalive counts from now.
			atomic_store_explicit(&l->last_rx_ms, nmq_clock_ms(), memory_order_relaxed);
			link_rx_pause(l, LINK_RXP_PARK, false);
		}
	}
	t->reparked = false;
	tl_replay   = NULL;
	pthread_mutex_unlock(&t->mtx);
	pending_release(t); // the application's, for the park just answered
}

// Posts the replay with answer (any thread, once per park).
static void pending_answer(proto_pending *t, int answer)
{
	atomic_store(&t->answer, answer);
	t->job.fn = pending_job;
	workq_post(t->p->wq, &t->job);
}

void proto_connect_resume(proto_pending *t, int rc)
{
	if ((rc & 0xFF) == PROTO_AUTH_PENDING) {
		rc = MQTT_RC_SERVER_UNAVAILABLE;
	}
	pending_answer(t, rc);
}

void proto_acl_resume(proto_pending *t, int verdict)
{
	if (verdict == PROTO_AUTH_PENDING || (verdict != PROTO_ACL_ALLOW && verdict < 0x80)) {
		verdict = MQTT_RC_UNSPECIFIED;
	}
	pending_answer(t, verdict);
}

// Holds a frame behind a parked packet; see link.h.
int link_pending_hold(nmq_link *l, const uint8_t *frame, size_t len)
{
	proto_pending *t = l->pending;
	if (!atomic_load(&t->busy)) {
		return t->stopped ? -1 : 0;
	}
	pthread_mutex_lock(&t->mtx);
	if (!atomic_load(&t->busy)) {
		pthread_mutex_unlock(&t->mtx);
		return t->stopped ? -1 : 0;
	}
	if (t->kind == PARK_PACKET && len == 2 && frame[0] == (MQTT_PINGREQ << 4)
	    && frame[1] == 0) {
		// A PINGREQ changes nothing that the parked packet or the frames
		// held behind it could depend on: answered now, it keeps the
		// client from taking a slow answer for a dead broker. (A
		// malformed one is held, and fails in its turn.)
		mqtt_packet r;
		memset(&r, 0, sizeof(r));
		r.type = MQTT_PINGRESP;
		link_reply(l, &r);
		pthread_mutex_unlock(&t->mtx);
		return 1;
	}
	size_t need = t->held_len + 4 + len;
	if (need > PENDING_HELD_MAX || len > UINT32_MAX) {
		pthread_mutex_unlock(&t->mtx);
		log_info("conn", "peer=%s reason=too_much_while_waiting held=%zu",
		    conn_peer(l->conn), t->held_len);
		conn_close(l->conn);
		return -1;
	}
	if (need > t->held_cap) {
		size_t   cap = need < 4096 ? 4096 : need * 2;
		uint8_t *b   = realloc(t->held, cap);
		if (b == NULL) {
			pthread_mutex_unlock(&t->mtx);
			proto_count_alloc_failure(l->p, "held_frame");
			conn_close(l->conn);
			return -1;
		}
		t->held     = b;
		t->held_cap = cap;
	}
	uint32_t n = (uint32_t)len;
	memcpy(t->held + t->held_len, &n, 4);
	memcpy(t->held + t->held_len + 4, frame, len);
	t->held_len = need;
	// Reading behind a PUBLISH or SUBSCRIBE pauses once enough is held, and
	// at a DISCONNECT: what follows it is the end of the stream, and an end
	// read now would close the connection before the parked packet and the
	// DISCONNECT are handled (mosquitto_pub -q 0 sends PUBLISH,
	// DISCONNECT and closes at once). The replay resumes it.
	if (t->kind == PARK_PACKET
	    && (need >= PENDING_READ_PAUSE || (frame[0] >> 4) == MQTT_DISCONNECT)) {
		link_rx_pause(l, LINK_RXP_PARK, true);
	}
	pthread_mutex_unlock(&t->mtx);
	return 1;
}

// The connection closed; see link.h.
void link_pending_cancel(nmq_link *l)
{
	proto_pending *t = l->pending;
	if (t == NULL) {
		return;
	}
	pthread_mutex_lock(&t->mtx);
	t->l = NULL;
	pthread_mutex_unlock(&t->mtx);
	l->pending = NULL;
	pending_release(t); // the link's
}

// What acl_ask may park: the packet being handled and the answers for
// its topics before the one asked about.
typedef struct acl_defer_ctx {
	nmq_link      *l;
	const int     *verdicts;
	uint32_t       idx;
	proto_pending *t;
} acl_defer_ctx;

proto_pending *proto_acl_defer(void *defer_ctx)
{
	acl_defer_ctx *d = defer_ctx;
	if (d == NULL || d->t != NULL || d->l->cur_frame == NULL) {
		return NULL;
	}
	d->t = link_park(d->l, false, d->l->cur_frame, d->l->cur_len, d->verdicts, d->idx);
	return d->t;
}

int link_acl_ask(nmq_link *l, const proto_who *who, uint8_t access, const char *topic, size_t len,
    const int *verdicts, uint32_t idx)
{
	nmq_proto *p = l->p;
	if (p->ops->acl_ask == NULL) {
		return PROTO_ACL_NONE;
	}
	acl_defer_ctx d = { l, verdicts, idx, NULL };
	tl_ask_who      = who;
	tl_ask_link     = l;
	int v           = p->ops->acl_ask(p->app, who, access, topic, len, &d);
	tl_ask_who      = NULL;
	tl_ask_link     = NULL;
	if (v == PROTO_AUTH_PENDING) {
		// Not parked (out of memory): refused, as an unanswered ask is.
		return d.t != NULL ? PROTO_AUTH_PENDING : MQTT_RC_UNSPECIFIED;
	}
	if (d.t != NULL) {
		// Parked but answered at once: an application error; the answer
		// will come through proto_acl_resume all the same.
		log_warn_rl("conn", "event=acl_ask_parked_and_answered");
		return PROTO_AUTH_PENDING;
	}
	return v;
}

// The verified TLS client certificate of who's connection; see proto.h.
void proto_who_tls_peer(
    const proto_who *who, char *cn, size_t cn_len, char *subject, size_t subject_len)
{
	// The handshake's record of the connection, read in place (no copy
	// of it per ask; a plain socket answers at once).
	const tls_peer *p = NULL;
	cn[0]             = '\0';
	subject[0]        = '\0';
	if (who == NULL || who != tl_ask_who || tl_ask_link == NULL
	    || (p = listener_conn_peer_ref(tl_ask_link->conn)) == NULL || !p->handshake_done
	    || !p->verified) {
		return;
	}
	snprintf(cn, cn_len, "%s", p->cn);
	snprintf(subject, subject_len, "%s", p->subject);
}

int link_replay(nmq_link *l, const uint8_t *frame, size_t len, const int *verdicts,
    uint32_t n_known, int answer)
{
	mqtt_packet pk;
	if (mqtt_decode(frame, len, l->ver, &pk) != 0) {
		link_fail(l, MQTT_RC_UNSPECIFIED); // it decoded when parked
		return -1;
	}
	int *v = malloc(((size_t)n_known + 1) * sizeof(int));
	if (v == NULL) {
		proto_count_alloc_failure(l->p, "replay");
		link_fail(l, MQTT_RC_UNSPECIFIED);
		return -1;
	}
	if (n_known > 0) {
		memcpy(v, verdicts, n_known * sizeof(int));
	}
	v[n_known]        = answer;
	const uint8_t *pf = l->cur_frame;
	size_t         pl = l->cur_len;
	l->cur_frame      = frame;
	l->cur_len        = len;
	int r             = pk.type == MQTT_PUBLISH ? handle_publish(l, &pk, v)
	                : pk.type == MQTT_SUBSCRIBE ? handle_subscribe(l, &pk, v, n_known + 1)
	                                            : 0;
	l->cur_frame      = pf;
	l->cur_len        = pl;
	free(v);
	return r;
}
