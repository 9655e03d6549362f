// The bridges' offline cache (store thread only): the rows of client ids
// under "$bridge/" live in a table of their own, one row per cached
// forward with the message inline, keyed by (bridge number, seq) in a
// WITHOUT ROWID table. No message row, no reference count, no rowid and
// no second index: deleting an acked run of forwards is one range
// DELETE on the primary key. See docs/decisions/0032-bridge-cache-table.md.
//
// The operations are the queue's (store_queue_put / _state / _del /
// _del_many / _del_ranges / _read with the bridge's client id): store.c
// routes them here by the client id, so that they are grouped, coalesced,
// back-pressured and acknowledged after commit like every other one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/log/log.h"
#include "src/store/store_bcache.h"
#include "src/store/store_int.h"

// packet_id holds the packet id in its low 16 bits and, above them (bits
// 16-47), the bridge's tag of the server whose PUBREC made a QoS 2 row
// RELEASED (store_queue_state_srv; 0: not known). Rows of files written
// before it was kept have 0 there. It rides on the state write of the
// PUBREC (no column, no migration, no second write), and a broker that
// does not know it reads the packet id right: it keeps the low 16 bits.
#define BC_PID(pid, srv) ((sqlite3_int64)(pid) | ((sqlite3_int64)(srv) << 16))

const char store_bcache_schema_sql[]
    = "CREATE TABLE bcache_ids(bid INTEGER PRIMARY KEY, cid TEXT NOT NULL UNIQUE);"
      "CREATE TABLE bcache(bid INTEGER NOT NULL, seq INTEGER NOT NULL, qos INTEGER NOT NULL,"
      " retain INTEGER NOT NULL, state INTEGER NOT NULL, packet_id INTEGER NOT NULL,"
      " topic TEXT NOT NULL, mqos INTEGER NOT NULL, mretain INTEGER NOT NULL,"
      " expiry_interval INTEGER NOT NULL, expiry_wall_ms INTEGER NOT NULL, props BLOB,"
      " payload BLOB, PRIMARY KEY(bid, seq)) WITHOUT ROWID;";

enum {
	BS_ID_GET,
	BS_ID_PUT,
	BS_PUT,
	BS_STATE,
	BS_DEL_RANGE,
	BS_READ,
	BS_PURGE,
	BS_OLDEST,
	BS_EXP_DUE,
	BS_EXP_NEXT,
	BS_COUNT_
};

static const char *const bs_sql[BS_COUNT_] = {
	[BS_ID_GET]    = "SELECT bid FROM bcache_ids WHERE cid = ?1",
	[BS_ID_PUT]    = "INSERT INTO bcache_ids(cid) VALUES (?1)",
	[BS_PUT]       = "INSERT INTO bcache(bid, seq, qos, retain, state, packet_id, topic, mqos,"
	                 " mretain, expiry_interval, expiry_wall_ms, props, payload)"
	                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
	[BS_STATE]     = "UPDATE bcache SET state = ?3, packet_id = ?4 WHERE bid = ?1 AND seq = ?2",
	[BS_DEL_RANGE] = "DELETE FROM bcache WHERE bid = ?1 AND seq BETWEEN ?2 AND ?3",
	[BS_READ]      = "SELECT seq, qos, retain, state, packet_id, topic, mqos, mretain,"
	                 " expiry_interval, expiry_wall_ms, props, payload FROM bcache"
	                 " WHERE bid = ?1 AND seq > ?2 ORDER BY seq",
	[BS_PURGE]     = "DELETE FROM bcache WHERE bid = ?1",
	[BS_OLDEST] = "SELECT b.bid, b.seq, i.cid FROM bcache b JOIN bcache_ids i ON i.bid = b.bid"
	              " WHERE b.state = 0 ORDER BY b.bid, b.seq LIMIT ?1",
	// (Both answered by the partial index bcache_expiry.)
	[BS_EXP_DUE] = "SELECT b.bid, b.seq, i.cid FROM bcache b JOIN bcache_ids i ON i.bid = b.bid"
	               " WHERE b.expiry_wall_ms != 0 AND b.expiry_wall_ms <= ?1 AND b.state = 0"
	               " LIMIT ?2",
	[BS_EXP_NEXT] = "SELECT expiry_wall_ms FROM bcache WHERE expiry_wall_ms != 0 AND state = 0"
	                " ORDER BY expiry_wall_ms LIMIT 1",
};

_Static_assert(BS_COUNT_ <= sizeof(((nmq_store *)0)->bstmts) / sizeof(sqlite3_stmt *),
    "room for the cache's statements");

// A bridge's number, as the store thread remembers it.
struct store_bid {
	char   *cid;
	int64_t bid;
};

// At open (before the store thread runs): the cached forwards whose
// message expiry passed while the broker was down are deleted now, so
// that they do not count toward the bound until a read comes to them;
// logged by bridge and counted (store_stats.expired). Returns how many
// rows the cache holds then, or -1 if it could not be counted. A failed
// delete is logged and leaves them for the reads to drop.
static long long expire_at_open(nmq_store *s)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	sqlite3_int64 now  = (sqlite3_int64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	long long     rows = -1, expired = 0;
	sqlite3_stmt *st = NULL;
	// One pass: the total and the expired.
	if (sqlite3_prepare_v2(s->db,
	        "SELECT COUNT(*), SUM(expiry_wall_ms != 0 AND expiry_wall_ms <= ?1) FROM bcache",
	        -1, &st, NULL)
	        == SQLITE_OK
	    && sqlite3_bind_int64(st, 1, now) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		rows    = sqlite3_column_int64(st, 0);
		expired = sqlite3_column_int64(st, 1); // NULL (no row): 0
	}
	sqlite3_finalize(st);
	if (rows < 0 || expired == 0) {
		return rows;
	}
	st = NULL;
	if (sqlite3_prepare_v2(s->db,
	        "SELECT i.cid, COUNT(*) FROM bcache b JOIN bcache_ids i ON i.bid = b.bid"
	        " WHERE b.expiry_wall_ms != 0 AND b.expiry_wall_ms <= ?1 GROUP BY b.bid",
	        -1, &st, NULL)
	    == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, now);
		while (sqlite3_step(st) == SQLITE_ROW) {
			log_info("store",
			    "path=%s client_id=%s event=cache_expired_at_open rows=%lld", s->path,
			    (const char *)sqlite3_column_text(st, 0),
			    (long long)sqlite3_column_int64(st, 1));
		}
	}
	sqlite3_finalize(st);
	st     = NULL;
	int rc = sqlite3_prepare_v2(s->db,
	    "DELETE FROM bcache WHERE expiry_wall_ms != 0 AND expiry_wall_ms <= ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, now);
		rc = sqlite3_step(st);
	}
	if (rc == SQLITE_DONE) {
		long long gone = sqlite3_changes(s->db);
		atomic_fetch_add(&s->expired, (uint64_t)gone);
		rows -= gone;
	} else {
		log_warn("store", "path=%s event=cache_expired_not_deleted rows=%lld error=\"%s\"",
		    s->path, expired, sqlite3_errmsg(s->db));
	}
	sqlite3_finalize(st);
	return rows;
}

// The earliest expiry of a cached row not in flight, into s->bexp_next
// (0: none, or unknown after an error: the next put with an expiry sets it).
static void next_expiry(nmq_store *s)
{
	sqlite3_stmt *st = store_stmt_fresh(s->bstmts[BS_EXP_NEXT]);
	s->bexp_next     = 0;
	if (sqlite3_step(st) == SQLITE_ROW) {
		s->bexp_next = (uint64_t)sqlite3_column_int64(st, 0);
	}
	sqlite3_reset(st);
}

int store_bcache_prepare(nmq_store *s)
{
	for (int i = 0; i < BS_COUNT_; i++) {
		if (sqlite3_prepare_v3(
		        s->db, bs_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->bstmts[i], NULL)
		    != SQLITE_OK) {
			return -1;
		}
	}
	long long n    = expire_at_open(s);
	s->bcache_rows = n > 0 ? (uint64_t)n : 0;
	next_expiry(s);
	return 0;
}

void store_bcache_finalize(nmq_store *s)
{
	for (int i = 0; i < BS_COUNT_; i++) {
		sqlite3_finalize(s->bstmts[i]);
		s->bstmts[i] = NULL;
	}
	store_bcache_forget(s);
	free(s->bids);
	s->bids     = NULL;
	s->bids_cap = 0;
	store_bcache_expired_report(s, false);
	free(s->bexps);
	s->bexps    = NULL;
	s->bexp_cap = 0;
}

void store_bcache_forget(nmq_store *s)
{
	for (size_t i = 0; i < s->bids_len; i++) {
		free(s->bids[i].cid);
	}
	s->bids_len = 0;
}

static sqlite3_stmt *bs(nmq_store *s, int i)
{
	return store_stmt_fresh(s->bstmts[i]);
}

// The number of bridge cid: 0 when it has none (and create is false), -1
// on error. Remembered by the store thread (forgotten after a rollback,
// which may have undone the row).
static int64_t bid_of(nmq_store *s, const char *cid, bool create)
{
	for (size_t i = 0; i < s->bids_len; i++) {
		if (strcmp(s->bids[i].cid, cid) == 0) {
			return s->bids[i].bid;
		}
	}
	sqlite3_stmt *st = bs(s, BS_ID_GET);
	sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
	int64_t bid = 0;
	int     rc  = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		bid = sqlite3_column_int64(st, 0);
		rc  = SQLITE_DONE;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	if (bid == 0) {
		if (!create) {
			return 0;
		}
		st = bs(s, BS_ID_PUT);
		sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
		if (store_step_done(st) != SQLITE_DONE) {
			return -1;
		}
		bid = sqlite3_last_insert_rowid(s->db);
	}
	if (s->bids_len == s->bids_cap) {
		size_t            cap = s->bids_cap ? s->bids_cap * 2 : 8;
		struct store_bid *v   = realloc(s->bids, cap * sizeof(*v));
		if (v == NULL) {
			return bid; // looked up again next time
		}
		s->bids     = v;
		s->bids_cap = cap;
	}
	char *c = strdup(cid);
	if (c != NULL) {
		s->bids[s->bids_len++] = (struct store_bid) { c, bid };
	}
	return bid;
}

int store_bcache_put(nmq_store *s, const char *cid, uint64_t seq, const nmq_msg *m, uint8_t qos,
    bool retain, uint8_t state, uint16_t pid, uint32_t srv, uint64_t wall, uint64_t mono)
{
	int64_t bid = bid_of(s, cid, true);
	if (bid <= 0) {
		return -1;
	}
	uint64_t expiry_wall = 0;
	if (m->expiry_at_ms != 0) {
		expiry_wall = wall + (m->expiry_at_ms > mono ? m->expiry_at_ms - mono : 0);
	}
	sqlite3_stmt *st = bs(s, BS_PUT);
	sqlite3_bind_int64(st, 1, bid);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
	sqlite3_bind_int(st, 3, qos);
	sqlite3_bind_int(st, 4, retain);
	sqlite3_bind_int(st, 5, state);
	sqlite3_bind_int64(st, 6, BC_PID(pid, srv));
	sqlite3_bind_text(st, 7, m->topic, m->topic_len, SQLITE_STATIC);
	sqlite3_bind_int(st, 8, m->qos);
	sqlite3_bind_int(st, 9, m->retain);
	sqlite3_bind_int64(st, 10, m->expiry_interval);
	sqlite3_bind_int64(st, 11, (sqlite3_int64)expiry_wall);
	sqlite3_bind_blob(st, 12, m->props, (int)m->props_len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 13, m->payload, (int)m->payload_len, SQLITE_STATIC);
	int rc = store_step_done(st);
	if (rc == SQLITE_DONE) {
		s->queued_rows++;
		s->bcache_rows++;
		if (expiry_wall != 0 && (s->bexp_next == 0 || expiry_wall < s->bexp_next)) {
			s->bexp_next = expiry_wall;
		}
		return 0;
	}
	// A seq stored twice keeps the first.
	return (rc & 0xff) == SQLITE_CONSTRAINT ? 1 : -1;
}

int store_bcache_state(
    nmq_store *s, const char *cid, uint64_t seq, uint8_t state, uint16_t pid, uint32_t srv)
{
	int64_t bid = bid_of(s, cid, false);
	if (bid <= 0) {
		return (int)bid;
	}
	sqlite3_stmt *st = bs(s, BS_STATE);
	sqlite3_bind_int64(st, 1, bid);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
	sqlite3_bind_int(st, 3, state);
	sqlite3_bind_int64(st, 4, BC_PID(pid, srv));
	return store_step_done(st) == SQLITE_DONE ? 0 : -1;
}

static int del_range_bid(nmq_store *s, int64_t bid, uint64_t lo, uint64_t hi)
{
	sqlite3_stmt *st = bs(s, BS_DEL_RANGE);
	sqlite3_bind_int64(st, 1, bid);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)lo);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)hi);
	if (store_step_done(st) != SQLITE_DONE) {
		return -1;
	}
	uint64_t n = (uint64_t)sqlite3_changes(s->db);
	s->queued_rows -= n <= s->queued_rows ? n : s->queued_rows;
	s->bcache_rows -= n <= s->bcache_rows ? n : s->bcache_rows;
	return 0;
}

int store_bcache_del_range(nmq_store *s, const char *cid, uint64_t lo, uint64_t hi)
{
	int64_t bid = bid_of(s, cid, false);
	if (bid <= 0) {
		return (int)bid; // no row of this bridge was ever stored
	}
	return del_range_bid(s, bid, lo, hi);
}

int store_bcache_purge(nmq_store *s, const char *cid)
{
	int64_t bid = bid_of(s, cid, false);
	if (bid <= 0) {
		return (int)bid;
	}
	sqlite3_stmt *st = bs(s, BS_PURGE);
	sqlite3_bind_int64(st, 1, bid);
	if (store_step_done(st) != SQLITE_DONE) {
		return -1;
	}
	uint64_t n = (uint64_t)sqlite3_changes(s->db);
	s->queued_rows -= n <= s->queued_rows ? n : s->queued_rows;
	s->bcache_rows -= n <= s->bcache_rows ? n : s->bcache_rows;
	return 0;
}

// The listing of store_bcache_list is a read of LIST_CID, a client id no
// bridge has (a bridge's name holds no '/'; an empty name is allowed and
// is "$bridge/"): one callback per bridge with rows, its cache row count
// in seq, its inbound QoS 2 ids in packet_id (at most 65,535) and its
// mirrored filters in n_sub_ids. A bridge with no cache row but ids or
// filters (rel and subs rows of its client id) is listed too.
#define LIST_CID "$bridge//"

static int list_bridges(nmq_store *s, store_op *op)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db,
	        "SELECT cid, SUM(r), SUM(q), SUM(f) FROM ("
	        " SELECT i.cid AS cid, COUNT(*) AS r, 0 AS q, 0 AS f FROM bcache b"
	        "  JOIN bcache_ids i ON i.bid = b.bid GROUP BY b.bid"
	        " UNION ALL SELECT cid, 0, COUNT(*), 0 FROM rel"
	        "  WHERE cid >= '$bridge/' AND cid < '$bridge0' GROUP BY cid"
	        " UNION ALL SELECT cid, 0, 0, COUNT(*) FROM subs"
	        "  WHERE cid >= '$bridge/' AND cid < '$bridge0' GROUP BY cid"
	        ") GROUP BY cid",
	        -1, &st, NULL)
	    != SQLITE_OK) {
		sqlite3_finalize(st);
		return -1;
	}
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 ids = sqlite3_column_int64(st, 2);
		store_qmsg    q   = {
			     .client_id = (const char *)sqlite3_column_text(st, 0),
			     .seq       = (uint64_t)sqlite3_column_int64(st, 1),
			     .packet_id = (uint16_t)(ids > 65535 ? 65535 : ids),
			     .n_sub_ids = (uint32_t)sqlite3_column_int64(st, 3),
		};
		if (q.client_id != NULL && op->read_fn != NULL) {
			op->read_fn(op->arg, &q);
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

typedef struct list_ctx {
	void (*fn)(void *arg, const char *client_id, uint64_t rows, uint32_t ids, uint32_t filters);
	store_done_fn done;
	void         *arg;
} list_ctx;

static void list_row(void *arg, const store_qmsg *q)
{
	list_ctx *c = arg;
	c->fn(c->arg, q->client_id, q->seq, q->packet_id, q->n_sub_ids);
}

static void list_done(void *arg, nmq_err err)
{
	list_ctx *c = arg;
	if (c->done != NULL) {
		c->done(c->arg, err);
	}
	free(c);
}

nmq_err store_bcache_list(nmq_store *s,
    void (*fn)(void *arg, const char *client_id, uint64_t rows, uint32_t ids, uint32_t filters),
    store_done_fn done, void *arg)
{
	list_ctx *c = malloc(sizeof(*c));
	if (c == NULL) {
		return NMQ_ENOMEM;
	}
	*c        = (list_ctx) { fn, done, arg };
	nmq_err e = store_queue_read(s, LIST_CID, 0, 0, list_row, list_done, c);
	if (e != NMQ_OK) {
		free(c);
	}
	return e;
}

// Records a row dropped as expired in the running group, for
// store_bcache_expired_report. 0, or -1 when out of memory.
static int note_expired(nmq_store *s, const char *cid, uint64_t seq)
{
	if (s->bexp_len == s->bexp_cap) {
		size_t       c = s->bexp_cap ? s->bexp_cap * 2 : 16;
		store_evict *v = realloc(s->bexps, c * sizeof(*v));
		if (v == NULL) {
			return -1;
		}
		s->bexps    = v;
		s->bexp_cap = c;
	}
	store_evict *e = &s->bexps[s->bexp_len++];
	memset(e, 0, sizeof(*e));
	e->seq = seq;
	snprintf(e->cid, sizeof(e->cid), "%s", cid);
	e->cid_full = strlen(cid) < sizeof(e->cid) ? NULL : strdup(cid);
	return 0;
}

int store_bcache_read(nmq_store *s, store_op *op, uint64_t wall, uint64_t mono)
{
	if (strcmp(op->s1, LIST_CID) == 0) {
		return list_bridges(s, op);
	}
	int64_t bid = bid_of(s, op->s1, false);
	if (bid <= 0) {
		return (int)bid; // nothing cached
	}
	sqlite3_stmt *st = bs(s, BS_READ);
	sqlite3_bind_int64(st, 1, bid);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)op->u64);
	// No SQL LIMIT: the read stops after the rows it gives, not counting
	// the expired ones it passes (a bridge takes a short read for the end
	// of its cache, and forgot the rows behind an expired one: acked,
	// then never sent).
	uint64_t *gone  = NULL;
	size_t    ngone = 0, cap = 0;
	uint32_t  given = 0;
	int       rc    = SQLITE_DONE;
	while ((op->u32 == 0 || given < op->u32) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t seq      = (uint64_t)sqlite3_column_int64(st, 0);
		uint64_t exp_wall = (uint64_t)sqlite3_column_int64(st, 9);
		if (exp_wall != 0 && exp_wall <= wall) {
			// Expired while cached: deleted after the read.
			if (ngone == cap) {
				cap          = cap ? cap * 2 : 16;
				uint64_t *nv = realloc(gone, cap * sizeof(*nv));
				if (nv == NULL) {
					rc = SQLITE_NOMEM;
					break;
				}
				gone = nv;
			}
			gone[ngone++] = seq;
			continue;
		}
		nmq_msg *m = store_msg_from_row(st, 5, 0, wall, mono);
		if (m == NULL) {
			rc = SQLITE_NOMEM;
			break;
		}
		uint64_t   pk = (uint64_t)sqlite3_column_int64(st, 4);
		store_qmsg q  = {
			 .client_id = op->s1,
			 .seq       = seq,
			 .msg       = m,
			 .qos       = (uint8_t)sqlite3_column_int(st, 1),
			 .retain    = sqlite3_column_int(st, 2) != 0,
			 .state     = (uint8_t)sqlite3_column_int(st, 3),
			 .packet_id = (uint16_t)(pk & 0xffff),
			 .server    = (uint32_t)(pk >> 16),
		};
		if (op->read_fn != NULL) {
			op->read_fn(op->arg, &q);
		}
		nmq_msg_release(m);
		given++;
	}
	if (op->u32 != 0 && given == op->u32) {
		rc = SQLITE_DONE; // as many as asked for
	}
	sqlite3_reset(st);
	int ret = rc == SQLITE_DONE ? 0 : -1;
	for (size_t i = 0; ret == 0 && i < ngone; i++) {
		ret = del_range_bid(s, bid, gone[i], gone[i]);
		if (ret == 0 && note_expired(s, op->s1, gone[i]) != 0) {
			atomic_fetch_add(&s->expired, 1); // counted, not reported
		}
	}
	free(gone);
	return ret;
}

void store_bcache_set_gone(nmq_store *s, store_bcache_gone_fn fn, void *arg)
{
	atomic_store(&s->bgone_arg, arg);
	atomic_store(&s->bgone, fn);
}

void store_bcache_set_expired(nmq_store *s, store_bcache_expired_fn fn, void *arg)
{
	atomic_store(&s->bexpired_arg, arg);
	atomic_store(&s->bexpired, fn);
}

// Rows that expire while the broker runs (decisions/0034): without this
// they stayed until a read or an eviction reached them, counting in the
// bridges' backlog and in disk_cache_size. The store thread knows the
// earliest expiry of a row not in flight (s->bexp_next: from the index at
// open and after each sweep, lowered by every put); from then on, at most
// once a second (inside a group that runs anyway, or in a transaction of
// its own when idle), it deletes up to STORE_BCACHE_EXPIRE_MAX of the
// expired rows through the partial index bcache_expiry. Rows in flight
// (QoS 2 SENT or RELEASED) are left to their flow.
bool store_bcache_expire_due(nmq_store *s, uint64_t *wake)
{
	if (wake != NULL) {
		*wake = 0;
	}
	if (s->bexp_next == 0) {
		return false;
	}
	uint64_t mono = store_mono_ms(), wall = store_wall_ms();
	uint64_t tick = s->bexp_mono != 0 ? s->bexp_mono + STORE_BCACHE_EXPIRE_TICK_MS : 0;
	if (wall >= s->bexp_next && mono >= tick) {
		return true;
	}
	if (wake != NULL) {
		uint64_t at = wall >= s->bexp_next ? mono : mono + (s->bexp_next - wall);
		*wake       = at > tick ? at : tick;
		if (*wake == 0) {
			*wake = 1;
		}
	}
	return false;
}

int store_bcache_expire(nmq_store *s, uint64_t wall)
{
	s->bexp_mono     = store_mono_ms();
	sqlite3_stmt *st = bs(s, BS_EXP_DUE);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)wall);
	sqlite3_bind_int64(st, 2, STORE_BCACHE_EXPIRE_MAX);
	int      rc;
	size_t   first = s->bexp_len, nb = 0, cap = 0;
	int64_t *bids = NULL;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *cid = (const char *)sqlite3_column_text(st, 2);
		if (nb == cap) {
			cap         = cap ? cap * 2 : 64;
			int64_t *nv = realloc(bids, cap * sizeof(*nv));
			if (nv == NULL) {
				break;
			}
			bids = nv;
		}
		if (note_expired(s, cid != NULL ? cid : "", (uint64_t)sqlite3_column_int64(st, 1))
		    != 0) {
			break;
		}
		bids[nb++] = sqlite3_column_int64(st, 0);
	}
	sqlite3_reset(st);
	int ret = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
	for (size_t i = 0; ret == 0 && i < nb; i++) {
		uint64_t seq = s->bexps[first + i].seq;
		ret          = del_range_bid(s, bids[i], seq, seq);
	}
	free(bids);
	if (ret == 0) {
		next_expiry(s);
	}
	return ret;
}

void store_bcache_expire_idle(nmq_store *s)
{
	uint64_t rows = s->queued_rows, brows = s->bcache_rows;
	bool     ok = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	ok          = ok && store_bcache_expire(s, store_wall_ms()) == 0;
	ok          = ok && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
	if (!ok) {
		log_warn_rl("store", "path=%s event=cache_expiry_failed error=\"%s\"", s->path,
		    sqlite3_errmsg(s->db));
		if (!sqlite3_get_autocommit(s->db)) {
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		}
		s->queued_rows = rows;
		s->bcache_rows = brows;
		s->bexp_mono   = store_mono_ms(); // not again before the next tick
	}
	atomic_store(&s->queued_rows_pub, s->queued_rows);
	store_bcache_expired_report(s, ok);
}

void store_bcache_expired_report(nmq_store *s, bool ok)
{
	if (s->bexp_len == 0) {
		return;
	}
	uint64_t now = store_wall_ms();
	if (!ok && (s->bexp_next == 0 || s->bexp_next > now)) {
		s->bexp_next = now; // rolled back: the rows are there again
	}
	store_bcache_expired_fn fn  = atomic_load(&s->bexpired);
	void                   *arg = atomic_load(&s->bexpired_arg);
	for (size_t i = 0; i < s->bexp_len; i++) {
		store_evict *e = &s->bexps[i];
		if (ok) {
			atomic_fetch_add(&s->expired, 1);
			if (fn != NULL) {
				fn(arg, e->cid_full ? e->cid_full : e->cid, e->seq);
			}
		}
		free(e->cid_full);
	}
	if (ok) {
		log_info_rl("store", "path=%s event=cache_expired rows=%zu", s->path, s->bexp_len);
	}
	s->bexp_len = 0;
}

// Evicts n rows, oldest first (bridge by bridge, lowest seq first), not in
// flight (state 0). A row the bridge is done with (acked, its delete not
// applied yet: the bridge deletes in batches, within a second) is deleted
// as the delete would, not counted nor reported as evicted: it frees the
// room without losing a forward.
int64_t store_bcache_evict(nmq_store *s, uint64_t n)
{
	if (n == 0 || s->bcache_rows == 0) {
		return 0;
	}
	store_bcache_gone_fn gone     = atomic_load(&s->bgone);
	void                *gone_arg = atomic_load(&s->bgone_arg);
	size_t               first    = s->evict_len;
	sqlite3_stmt        *st       = bs(s, BS_OLDEST);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)n);
	int      rc;
	int64_t *bids = NULL;
	struct {
		int64_t  bid;
		uint64_t seq;
	} *done   = NULL; // rows done with
	size_t nb = 0, cap = 0, nd = 0, dcap = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *cid = (const char *)sqlite3_column_text(st, 2);
		uint64_t    seq = (uint64_t)sqlite3_column_int64(st, 1);
		int64_t     bid = sqlite3_column_int64(st, 0);
		if (gone != NULL && cid != NULL && gone(gone_arg, cid, seq)) {
			if (nd == dcap) {
				size_t c = dcap ? dcap * 2 : 16;
				void  *v = realloc(done, c * sizeof(*done));
				if (v == NULL) {
					break;
				}
				done = v;
				dcap = c;
			}
			done[nd].bid   = bid;
			done[nd++].seq = seq;
			continue;
		}
		if (s->evict_len == s->evict_cap) {
			size_t       c = s->evict_cap ? s->evict_cap * 2 : 16;
			store_evict *v = realloc(s->evicts, c * sizeof(*v));
			if (v == NULL) {
				break;
			}
			s->evicts    = v;
			s->evict_cap = c;
		}
		if (nb == cap) {
			cap         = cap ? cap * 2 : 16;
			int64_t *nv = realloc(bids, cap * sizeof(*nv));
			if (nv == NULL) {
				break;
			}
			bids = nv;
		}
		bids[nb++]     = bid;
		store_evict *e = &s->evicts[s->evict_len++];
		e->row         = 0;
		e->msg_id      = 0;
		e->seq         = seq;
		snprintf(e->cid, sizeof(e->cid), "%s", cid ? cid : "");
		e->cid_full = (size_t)sqlite3_column_bytes(st, 2) < sizeof(e->cid) || cid == NULL
		    ? NULL
		    : strdup(cid);
	}
	sqlite3_reset(st);
	int64_t ret = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
	for (size_t i = 0; ret >= 0 && i < nd; i++) {
		if (del_range_bid(s, done[i].bid, done[i].seq, done[i].seq) != 0) {
			ret = -1;
		} else {
			ret++;
		}
	}
	for (size_t i = 0; ret >= 0 && i < nb; i++) {
		uint64_t seq = s->evicts[first + i].seq;
		if (del_range_bid(s, bids[i], seq, seq) != 0) {
			ret = -1;
		} else {
			ret++;
		}
	}
	free(bids);
	free(done);
	return ret;
}

int store_bcache_migrate(sqlite3 *db, int to_version)
{
	// The bridges' rows of the queue (client ids "$bridge/..."; '0'
	// follows '/') move to the cache table, message inline, in seq order
	// of each bridge (the key), with their state; the message rows lose
	// those references. One transaction: all of it or nothing.
	static const char sql[]
	    = "INSERT INTO bcache_ids(cid) SELECT DISTINCT cid FROM queue"
	      " WHERE cid >= '$bridge/' AND cid < '$bridge0' ORDER BY cid;"
	      "INSERT INTO bcache(bid, seq, qos, retain, state, packet_id, topic, mqos, mretain,"
	      " expiry_interval, expiry_wall_ms, props, payload)"
	      " SELECT i.bid, q.seq, q.qos, q.retain, q.state, q.packet_id, m.topic, m.qos,"
	      " m.retain, m.expiry_interval, m.expiry_wall_ms, m.props, m.payload"
	      " FROM queue q JOIN bcache_ids i ON i.cid = q.cid JOIN msgs m ON m.id = q.msg_id;"
	      "UPDATE msgs SET refs = refs - (SELECT COUNT(*) FROM queue q WHERE q.msg_id = msgs.id"
	      " AND q.cid >= '$bridge/' AND q.cid < '$bridge0')"
	      " WHERE id IN (SELECT msg_id FROM queue WHERE cid >= '$bridge/' AND cid < "
	      "'$bridge0');"
	      "DELETE FROM msgs WHERE refs <= 0 AND id IN (SELECT msg_id FROM queue"
	      " WHERE cid >= '$bridge/' AND cid < '$bridge0');"
	      "DELETE FROM queue WHERE cid >= '$bridge/' AND cid < '$bridge0';";
	char ver[64];
	snprintf(ver, sizeof(ver), "PRAGMA user_version = %d;", to_version);
	int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, store_bcache_schema_sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	}
	long long moved = 0;
	if (rc == SQLITE_OK) {
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM bcache", -1, &st, NULL)
		        == SQLITE_OK
		    && sqlite3_step(st) == SQLITE_ROW) {
			moved = sqlite3_column_int64(st, 0);
		}
		sqlite3_finalize(st);
		rc = sqlite3_exec(db, ver, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	}
	if (rc != SQLITE_OK) {
		log_error("store", "event=migration_failed to_version=%d error=\"%s\"", to_version,
		    sqlite3_errmsg(db));
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return -1;
	}
	log_info("store", "event=migrated to_version=%d bridge_cache_rows=%lld", to_version, moved);
	return 0;
}
