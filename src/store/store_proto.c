// The protocol layer's store interface on the SQLite store; see
// store_proto.h.
#include "src/store/store_proto.h"

#include <stdlib.h>

#include "src/store/store.h"

static nmq_err sp_session_put(void *st, const proto_store_session *r)
{
	store_session rec = {
		.client_id       = r->client_id,
		.username        = r->username,
		.expiry_s        = r->expiry_s,
		.proto_ver       = r->proto_ver,
		.offline_wall_ms = r->offline_wall_ms,
		.will_msg        = r->will,
		.will_delay_s    = r->will_delay_s,
	};
	return store_session_put(st, &rec, NULL, NULL);
}

static nmq_err sp_session_del(void *st, const char *client_id, uint32_t sid)
{
	return store_session_del_sid(st, client_id, sid, NULL, NULL);
}

static uint32_t sp_sid_new(void *st)
{
	return store_sid_new(st);
}

static nmq_err sp_queue_put(void *st, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids)
{
	return store_queue_put_sid(
	    st, client_id, sid, seq, msg, qos, retain, sub_ids, n_sub_ids, NULL, NULL);
}

static nmq_err sp_queue_put_live(void *st, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids)
{
	return store_queue_put_live(st, client_id, sid, seq, msg, qos, retain, sub_ids, n_sub_ids);
}

static nmq_err sp_queue_state(
    void *st, const char *client_id, uint32_t sid, uint64_t seq, uint8_t state, uint16_t packet_id)
{
	return store_queue_state_sid(st, client_id, sid, seq, state, packet_id, NULL, NULL);
}

static nmq_err sp_queue_del(void *st, const char *client_id, uint32_t sid, uint64_t seq)
{
	return store_queue_del_sid(st, client_id, sid, seq, NULL, NULL);
}

static nmq_err sp_queue_done(void *st, const char *client_id, uint32_t sid, uint64_t lo,
    uint64_t hi, void **slot_op, uint64_t *slot_gen)
{
	return store_queue_done_sid(st, client_id, sid, lo, hi, slot_op, slot_gen);
}

static nmq_err sp_rel_put(void *st, const char *client_id, uint16_t packet_id)
{
	return store_rel_put(st, client_id, packet_id, NULL, NULL);
}

static nmq_err sp_rel_del(void *st, const char *client_id, uint16_t packet_id)
{
	return store_rel_del(st, client_id, packet_id, NULL, NULL);
}

static nmq_err sp_sync(void *st, proto_store_done_fn done, void *arg)
{
	return store_sync(st, done, arg);
}

static uint64_t sp_sync_mark(void *st)
{
	return store_sync_mark(st);
}

static nmq_err sp_sync_since(void *st, uint64_t mark, proto_store_done_fn done, void *arg)
{
	return store_sync_since(st, mark, done, arg);
}

// A read in flight: the protocol layer's callbacks.
typedef struct sp_read {
	void (*row)(void *arg, const proto_store_row *r);
	proto_store_done_fn done;
	void               *arg;
} sp_read;

static void sp_read_row(void *arg, const store_qmsg *q)
{
	sp_read        *rd = arg;
	proto_store_row r  = {
		 .seq       = q->seq,
		 .msg       = q->msg,
		 .qos       = q->qos,
		 .retain    = q->retain,
		 .state     = q->state,
		 .packet_id = q->packet_id,
		 .sub_ids   = q->sub_ids,
		 .n_sub_ids = q->n_sub_ids,
	};
	rd->row(rd->arg, &r);
}

static void sp_read_done(void *arg, nmq_err err)
{
	sp_read *rd = arg;
	rd->done(rd->arg, err);
	free(rd);
}

static nmq_err sp_queue_read(void *st, const char *client_id, uint64_t after_seq, uint32_t max,
    void (*row)(void *arg, const proto_store_row *r), proto_store_done_fn done, void *arg)
{
	sp_read *rd = malloc(sizeof(*rd));
	if (rd == NULL) {
		return NMQ_ENOMEM;
	}
	rd->row   = row;
	rd->done  = done;
	rd->arg   = arg;
	nmq_err e = store_queue_read(st, client_id, after_seq, max, sp_read_row, sp_read_done, rd);
	if (e != NMQ_OK) {
		free(rd);
	}
	return e;
}

static void sp_backlog(void *st, uint32_t *pending, uint32_t *max)
{
	store_backlog(st, pending, max);
}

static void sp_batch(void *st, bool begin)
{
	if (begin) {
		store_batch_begin(st);
	} else {
		store_batch_end(st);
	}
}

static int sp_after_batch(void *st, void (*fn)(void *arg), void *arg)
{
	switch (store_batch_after(st, fn, arg)) {
	case STORE_AFTER_SET:
		return PROTO_AFTER_SET;
	case STORE_AFTER_FAILED:
		return PROTO_AFTER_FAILED;
	case STORE_AFTER_NONE:
		break;
	}
	return PROTO_AFTER_NONE;
}

const proto_store_ops store_proto_ops = {
	.session_put    = sp_session_put,
	.session_del    = sp_session_del,
	.sid_new        = sp_sid_new,
	.queue_put      = sp_queue_put,
	.queue_put_live = sp_queue_put_live,
	.queue_state    = sp_queue_state,
	.queue_del      = sp_queue_del,
	.queue_done     = sp_queue_done,
	.rel_put        = sp_rel_put,
	.rel_del        = sp_rel_del,
	.sync           = sp_sync,
	.sync_mark      = sp_sync_mark,
	.sync_since     = sp_sync_since,
	.queue_read     = sp_queue_read,
	.backlog        = sp_backlog,
	.batch          = sp_batch,
	.after_batch    = sp_after_batch,
};
