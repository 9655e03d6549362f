// Messages queued for offline sessions, written as one row per session
// and group (store thread): see docs/decisions/0053-store-offline-segments.md.
//
// A QoS 1/2 message queued for a persistent session without a link
// (store_queue_put_sid, not _live) and for that session alone is not
// written as a message row and a queue row. The group collects such
// entries per client id and writes, before its COMMIT, one row of table
// oseg per client id: the entries with their messages inline, in one
// blob. The rows are appended (rowid order), so a group writes a few
// pages at the end of one b-tree instead of a message row and an index
// entry in every session's part of the queue's index.
//
// The queue table stays what every reader reads: before an operation that
// reads, updates or deletes a session's queue rows by SQL, that session's
// oldest segments (committed, then those of the running group) become
// queue and message rows, in seq order, in the operation's transaction,
// as far as it reaches: a backlog read, at least its rows; an update or
// delete, up to its seq; a session delete, all (store_oseg_expand_to).
// The rows of the running group's entries are noted as written
// (store_group_note_row), as queue rows would be.
//
// Which segments a client id has is kept in memory (row id, first seq and
// count per segment), changed only when the group commits: a rolled-back group
// leaves it as it was. At open, segments a crash or a kill left in the
// file become queue rows before anything reads (store_oseg_restore); a
// clean stop writes them all as queue rows, so that an older build reads
// the file whole.
//
// Eviction (disk_cache_size) takes the oldest queued message first,
// whether a queue row or a segment's entry: each segment records the
// highest queue row id when it was written (qmark), which orders it
// against the queue rows; an entry evicted from a segment is cut from the
// front of its blob.
//
// Blob: u32 OSEG_MAGIC, varint entry count, then per entry: varint seq,
// flags (QoS bits 0-1, retain bit 2, the message's QoS bits 3-4 and retain
// bit 5), varint n ids then n varints, varint expiry interval, varint
// expiry wall ms, then varint length and bytes of the topic, the
// properties and the payload.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/log/log.h"
#include "src/store/store_int.h"

#define OSEG_MAGIC   0x3147534fu // "OSG1"
#define OSEG_IDS_MAX 65535
// A segment row is cut after this many bytes of entries.
#define OSEG_ROW_BYTES 32768

const char store_oseg_schema_sql[]
    = "CREATE TABLE IF NOT EXISTS oseg(id INTEGER PRIMARY KEY, cid TEXT NOT NULL,"
      " sid INTEGER NOT NULL, qmark INTEGER NOT NULL, n INTEGER NOT NULL, ents BLOB NOT NULL);";

enum { OS_INS, OS_GET, OS_DEL, OS_CUT, OS_OLDEST, OS_QMAX, OS_QOLD, OS_COUNT_ };
static const char *const oseg_sql[OS_COUNT_] = {
	[OS_INS]    = "INSERT INTO oseg(cid, sid, qmark, n, ents) VALUES (?1, ?2, ?3, ?4, ?5)",
	[OS_GET]    = "SELECT sid, n, ents FROM oseg WHERE id = ?1",
	[OS_DEL]    = "DELETE FROM oseg WHERE id = ?1",
	[OS_CUT]    = "UPDATE oseg SET n = ?2, ents = ?3 WHERE id = ?1",
	[OS_OLDEST] = "SELECT id, cid, qmark, n, ents FROM oseg ORDER BY id LIMIT 1",
	[OS_QMAX]   = "SELECT max(id) FROM queue",
	[OS_QOLD]   = "SELECT id FROM queue WHERE state = 0 ORDER BY id LIMIT 1",
};

// One committed segment row: its id, the seq of its first entry and its
// entries.
typedef struct oref {
	int64_t  row;
	uint64_t first;
	uint32_t n;
} oref;

// A client id's committed segments, oldest first. gone: how many of the
// first were expanded or evicted by the running group (removed when it
// commits).
typedef struct oslot {
	char    *cid; // NULL: free
	uint64_t hash;
	oref    *ids;
	uint32_t n, cap, gone;
	bool     touched;
} oslot;

// The running group's entries for one client id (ops linked by
// oseg_next, in the order applied).
typedef struct obucket {
	const char *cid; // the ops' (valid until the group's ops are freed)
	uint64_t    hash;
	uint32_t    sid;
	uint32_t    n;
	store_op   *head, *tail;
} obucket;

// A segment row written by the running group, entered in the index when
// it commits (row 0: evicted meanwhile).
typedef struct oadd {
	const char *cid;
	uint64_t    hash;
	oref        ref; // row 0: evicted meanwhile
} oadd;

struct store_oseg {
	sqlite3_stmt *st[OS_COUNT_];
	// The index: open addressing, linear probing.
	oslot *slots;
	size_t nslots, used; // nslots a power of two (or 0)
	// The running group.
	obucket  *bk;
	size_t    nbk, bk_used;
	uint32_t *bk_list; // the buckets in use, in order of first use
	size_t    bk_list_cap;
	oadd     *adds;
	size_t    nadds, adds_cap;
	oslot   **touched;
	size_t    ntouched, touched_cap;
	uint64_t  wall, mono; // the group's clocks
	// Scratch: an encoded blob, decoded sub ids.
	uint8_t  *buf;
	size_t    buf_cap;
	uint32_t *ids;
	size_t    ids_cap;
	uint64_t  rows; // segment rows in the index (committed)
};

// ---------------------------------------------------------------------------
// Encoding and parsing.

static bool bytes_get(
    const uint8_t *p, size_t len, size_t *off, uint64_t max, const uint8_t **out, uint32_t *out_len)
{
	uint64_t n;
	if (!store_varint_get(p, len, off, &n) || n > max || n > len - *off) {
		return false;
	}
	*out     = p + *off;
	*out_len = (uint32_t)n;
	*off += (size_t)n;
	return true;
}

long store_oseg_parse_ids(const uint8_t *p, size_t len, uint32_t **ids, size_t *ids_cap,
    int (*fn)(void *arg, const store_oent *e), void *arg)
{
	if (len < 4) {
		return -1;
	}
	uint32_t magic
	    = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	size_t   off = 4;
	uint64_t count;
	if (magic != OSEG_MAGIC || !store_varint_get(p, len, &off, &count) || count == 0
	    || count > len) {
		return -1;
	}
	for (uint64_t i = 0; i < count; i++) {
		store_oent e;
		uint64_t   v;
		memset(&e, 0, sizeof(e));
		if (!store_varint_get(p, len, &off, &v) || v > INT64_MAX) {
			return -1;
		}
		e.seq = v;
		if (off >= len) {
			return -1;
		}
		uint8_t f = p[off++];
		e.qos     = f & 3;
		e.retain  = (f >> 2) & 1;
		e.mqos    = (f >> 3) & 3;
		e.mretain = (f >> 5) & 1;
		if ((f >> 6) != 0 || e.qos == 0 || e.qos > 2 || e.mqos > 2) {
			return -1;
		}
		if (!store_varint_get(p, len, &off, &v) || v > OSEG_IDS_MAX) {
			return -1;
		}
		e.n_ids = (uint16_t)v;
		if (e.n_ids > *ids_cap) {
			uint32_t *nv = realloc(*ids, (size_t)e.n_ids * sizeof(uint32_t));
			if (nv == NULL) {
				return -1;
			}
			*ids     = nv;
			*ids_cap = e.n_ids;
		}
		for (uint16_t k = 0; k < e.n_ids; k++) {
			if (!store_varint_get(p, len, &off, &v) || v > UINT32_MAX) {
				return -1;
			}
			(*ids)[k] = (uint32_t)v;
		}
		e.ids = e.n_ids ? *ids : NULL;
		if (!store_varint_get(p, len, &off, &v) || v > UINT32_MAX) {
			return -1;
		}
		e.expiry_interval = (uint32_t)v;
		if (!store_varint_get(p, len, &off, &v) || v > INT64_MAX) {
			return -1;
		}
		e.expiry_wall = v;
		const uint8_t *t;
		if (!bytes_get(p, len, &off, UINT16_MAX, &t, &e.topic_len) || e.topic_len == 0
		    || memchr(t, '\0', e.topic_len) != NULL) {
			return -1;
		}
		e.topic = (const char *)t;
		if (!bytes_get(p, len, &off, INT32_MAX, &e.props, &e.props_len)
		    || !bytes_get(p, len, &off, INT32_MAX, &e.payload, &e.payload_len)) {
			return -1;
		}
		e.end = off;
		if (fn != NULL && fn(arg, &e) != 0) {
			return -1;
		}
	}
	return off == len ? (long)count : -1;
}

long store_oseg_parse(
    const uint8_t *p, size_t len, int (*fn)(void *arg, const store_oent *e), void *arg)
{
	uint32_t *ids = NULL;
	size_t    cap = 0;
	long      r   = store_oseg_parse_ids(p, len, &ids, &cap, fn, arg);
	free(ids);
	return r;
}

// A blob's header (magic, entry count) into hdr (9 bytes at most); its
// length.
static size_t hdr_put(uint8_t *hdr, uint64_t n)
{
	hdr[0] = (uint8_t)OSEG_MAGIC;
	hdr[1] = (uint8_t)(OSEG_MAGIC >> 8);
	hdr[2] = (uint8_t)(OSEG_MAGIC >> 16);
	hdr[3] = (uint8_t)(OSEG_MAGIC >> 24);
	return 4 + store_varint_put(hdr + 4, n);
}

// Binds entry e's message to an INSERT INTO msgs(refs, topic, qos,
// retain, expiry_interval, expiry_wall_ms, props, payload) VALUES (1,
// ?1 .. ?7) (the store's STMT_MSG_INSERT, and the restore's own).
static void bind_msg(sqlite3_stmt *st, const store_oent *e)
{
	sqlite3_bind_text(st, 1, e->topic, (int)e->topic_len, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, e->mqos);
	sqlite3_bind_int(st, 3, e->mretain);
	sqlite3_bind_int64(st, 4, e->expiry_interval);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)e->expiry_wall);
	sqlite3_bind_blob(st, 6, e->props, (int)e->props_len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, e->payload, (int)e->payload_len, SQLITE_STATIC);
}

static bool buf_fit(store_oseg *o, size_t need)
{
	if (need <= o->buf_cap) {
		return true;
	}
	size_t cap = o->buf_cap ? o->buf_cap : 4096;
	while (cap < need) {
		cap *= 2;
	}
	uint8_t *b = realloc(o->buf, cap);
	if (b == NULL) {
		return false;
	}
	o->buf     = b;
	o->buf_cap = cap;
	return true;
}

// Appends op's entry at o->buf + *len. False when out of memory.
static bool encode_op(store_oseg *o, size_t *len, const store_op *op)
{
	const nmq_msg *m   = op->msg;
	size_t         max = 10 + 1 + 5 + (size_t)op->n_sub_ids * 5 + 5 + 10 + 5 + m->topic_len + 5
	    + m->props_len + 5 + m->payload_len;
	if (!buf_fit(o, *len + max)) {
		return false;
	}
	uint8_t *p = o->buf + *len;
	size_t   n = store_varint_put(p, op->u64);
	p[n++]     = (uint8_t)((op->qos & 3) | (op->retain ? 4 : 0) | (m->qos & 3) << 3
            | (m->retain ? 32 : 0));
	n += store_varint_put(p + n, op->n_sub_ids);
	for (uint32_t i = 0; i < op->n_sub_ids; i++) {
		n += store_varint_put(p + n, op->sub_ids[i]);
	}
	uint64_t expiry_wall = 0;
	if (m->expiry_at_ms != 0) {
		expiry_wall = o->wall + (m->expiry_at_ms > o->mono ? m->expiry_at_ms - o->mono : 0);
	}
	n += store_varint_put(p + n, m->expiry_interval);
	n += store_varint_put(p + n, expiry_wall);
	n += store_varint_put(p + n, m->topic_len);
	memcpy(p + n, m->topic, m->topic_len);
	n += m->topic_len;
	n += store_varint_put(p + n, m->props_len);
	if (m->props_len) {
		memcpy(p + n, m->props, m->props_len);
	}
	n += m->props_len;
	n += store_varint_put(p + n, m->payload_len);
	if (m->payload_len) {
		memcpy(p + n, m->payload, m->payload_len);
	}
	n += m->payload_len;
	*len += n;
	return true;
}

// ---------------------------------------------------------------------------
// The index and the group's buckets.

static uint64_t cid_hash(const char *cid)
{
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)cid; *p; p++) {
		h = (h ^ *p) * 1099511628211ull;
	}
	return h;
}

static oslot *slot_find(store_oseg *o, const char *cid, uint64_t h)
{
	if (o->nslots == 0) {
		return NULL;
	}
	size_t mask = o->nslots - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		oslot *sl = &o->slots[i];
		if (sl->cid == NULL) {
			return NULL;
		}
		if (sl->hash == h && strcmp(sl->cid, cid) == 0) {
			return sl;
		}
	}
}

static bool slots_grow(store_oseg *o)
{
	size_t n     = o->nslots ? o->nslots * 2 : 256;
	oslot *slots = calloc(n, sizeof(*slots));
	if (slots == NULL) {
		return false;
	}
	for (size_t i = 0; i < o->nslots; i++) {
		oslot *sl = &o->slots[i];
		if (sl->cid == NULL) {
			continue;
		}
		size_t j = (size_t)sl->hash & (n - 1);
		while (slots[j].cid != NULL) {
			j = (j + 1) & (n - 1);
		}
		slots[j] = *sl;
	}
	free(o->slots);
	o->slots  = slots;
	o->nslots = n;
	return true;
}

static oslot *slot_get(store_oseg *o, const char *cid, uint64_t h)
{
	oslot *sl = slot_find(o, cid, h);
	if (sl != NULL) {
		return sl;
	}
	if ((o->used + 1) * 4 > o->nslots * 3 && !slots_grow(o)) {
		return NULL;
	}
	char *c = strdup(cid);
	if (c == NULL) {
		return NULL;
	}
	size_t mask = o->nslots - 1;
	size_t i    = (size_t)h & mask;
	while (o->slots[i].cid != NULL) {
		i = (i + 1) & mask;
	}
	o->slots[i] = (oslot) { .cid = c, .hash = h };
	o->used++;
	return &o->slots[i];
}

// Removes an empty slot (backward-shift deletion).
static void slot_del(store_oseg *o, oslot *sl)
{
	free(sl->cid);
	free(sl->ids);
	size_t mask = o->nslots - 1;
	size_t i    = (size_t)(sl - o->slots);
	o->slots[i] = (oslot) { 0 };
	o->used--;
	for (size_t j = (i + 1) & mask; o->slots[j].cid != NULL; j = (j + 1) & mask) {
		size_t home = (size_t)o->slots[j].hash & mask;
		// Moves j to the hole at i if its home is not in (i, j].
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			o->slots[i] = o->slots[j];
			o->slots[j] = (oslot) { 0 };
			i           = j;
		}
	}
}

static bool touch(store_oseg *o, oslot *sl)
{
	if (sl->touched) {
		return true;
	}
	if (o->ntouched == o->touched_cap) {
		size_t  cap = o->touched_cap ? o->touched_cap * 2 : 64;
		oslot **v   = realloc(o->touched, cap * sizeof(*v));
		if (v == NULL) {
			return false;
		}
		o->touched     = v;
		o->touched_cap = cap;
	}
	o->touched[o->ntouched++] = sl;
	sl->touched               = true;
	return true;
}

static obucket *bucket_find(store_oseg *o, const char *cid, uint64_t h)
{
	if (o->nbk == 0) {
		return NULL;
	}
	size_t mask = o->nbk - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		obucket *b = &o->bk[i];
		if (b->cid == NULL) {
			return NULL;
		}
		if (b->hash == h && strcmp(b->cid, cid) == 0) {
			return b;
		}
	}
}

// The running group's bucket for cid, created if new; NULL when out of
// memory.
static obucket *bucket_get(store_oseg *o, const char *cid, uint64_t h, uint32_t sid)
{
	obucket *b = bucket_find(o, cid, h);
	if (b != NULL) {
		return b;
	}
	if ((o->bk_used + 1) * 3 > o->nbk * 2) {
		// Rebuilt larger, keeping the order of first use.
		size_t   n  = o->nbk ? o->nbk * 2 : 1024;
		obucket *bk = calloc(n, sizeof(*bk));
		if (bk == NULL) {
			return NULL;
		}
		for (size_t k = 0; k < o->bk_used; k++) {
			obucket *ob = &o->bk[o->bk_list[k]];
			size_t   j  = (size_t)ob->hash & (n - 1);
			while (bk[j].cid != NULL) {
				j = (j + 1) & (n - 1);
			}
			bk[j]         = *ob;
			o->bk_list[k] = (uint32_t)j;
		}
		free(o->bk);
		o->bk  = bk;
		o->nbk = n;
	}
	if (o->bk_used == o->bk_list_cap) {
		size_t    cap = o->bk_list_cap ? o->bk_list_cap * 2 : 1024;
		uint32_t *v   = realloc(o->bk_list, cap * sizeof(*v));
		if (v == NULL) {
			return NULL;
		}
		o->bk_list     = v;
		o->bk_list_cap = cap;
	}
	size_t mask = o->nbk - 1;
	size_t i    = (size_t)h & mask;
	while (o->bk[i].cid != NULL) {
		i = (i + 1) & mask;
	}
	o->bk[i]                 = (obucket) { .cid = cid, .hash = h, .sid = sid };
	o->bk_list[o->bk_used++] = (uint32_t)i;
	return &o->bk[i];
}

static void buckets_clear(store_oseg *o)
{
	for (size_t k = 0; k < o->bk_used; k++) {
		o->bk[o->bk_list[k]] = (obucket) { 0 };
	}
	o->bk_used = 0;
}

// ---------------------------------------------------------------------------
// Set-up.

int store_oseg_prepare(nmq_store *s)
{
	store_oseg *o = calloc(1, sizeof(*o));
	if (o == NULL) {
		return -1;
	}
	for (int i = 0; i < OS_COUNT_; i++) {
		if (sqlite3_prepare_v3(
		        s->db, oseg_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &o->st[i], NULL)
		    != SQLITE_OK) {
			for (int k = 0; k < i; k++) {
				sqlite3_finalize(o->st[k]);
			}
			free(o);
			return -1;
		}
	}
	s->oseg = o;
	return 0;
}

void store_oseg_finalize(nmq_store *s)
{
	store_oseg *o = s->oseg;
	if (o == NULL) {
		return;
	}
	for (int i = 0; i < OS_COUNT_; i++) {
		sqlite3_finalize(o->st[i]);
	}
	for (size_t i = 0; i < o->nslots; i++) {
		free(o->slots[i].cid);
		free(o->slots[i].ids);
	}
	free(o->slots);
	free(o->bk);
	free(o->bk_list);
	free(o->adds);
	free(o->touched);
	free(o->buf);
	free(o->ids);
	free(o);
	s->oseg = NULL;
}

bool store_oseg_any(const nmq_store *s)
{
	return s->oseg != NULL && s->oseg->used > 0;
}

// ---------------------------------------------------------------------------
// The group.

void store_oseg_group_start(nmq_store *s, uint64_t wall, uint64_t mono)
{
	if (s->oseg != NULL) {
		s->oseg->wall = wall;
		s->oseg->mono = mono;
	}
}

bool store_oseg_take(nmq_store *s, store_op *op)
{
	store_oseg *o = s->oseg;
	if (o == NULL || s->oseg_final || s->opts.no_segments || op->live || op->state != 0
	    || op->pid != 0 || op->sid == 0 || op->msg == NULL || (op->qos != 1 && op->qos != 2)
	    || op->n_sub_ids > OSEG_IDS_MAX) {
		return false;
	}
	uint64_t h = cid_hash(op->s1);
	obucket *b = bucket_get(o, op->s1, h, op->sid);
	if (b == NULL) {
		return false; // out of memory: written as rows
	}
	if (b->n == 0) {
		// (Emptied by an expansion: the session may have been deleted
		// and a new one of the client id begun in the same group. Its
		// entries are written with its own number; with the old one,
		// their expansion noted rows for a session gone, whose entry of
		// the group's done table was then never freed.)
		b->sid = op->sid;
	}
	op->oseg_next = NULL;
	if (b->tail != NULL) {
		b->tail->oseg_next = op;
	} else {
		b->head = op;
	}
	b->tail = op;
	b->n++;
	s->queued_rows++;
	store_group_note_row(s, op->sid, op->u64, true);
	return true;
}

typedef struct expand_ctx {
	nmq_store  *s;
	const char *cid;
	uint32_t    sid;
	long        rows;
	bool        sqlerr;
} expand_ctx;

static int expand_ent(void *arg, const store_oent *e)
{
	expand_ctx   *x  = arg;
	sqlite3_stmt *st = store_stmt(x->s, STMT_MSG_INSERT);
	bind_msg(st, e);
	if (store_step_done(st) != SQLITE_DONE) {
		x->sqlerr = true;
		return -1;
	}
	int64_t id = sqlite3_last_insert_rowid(x->s->db);
	if (store_hold_row(x->s, x->cid, x->sid, e->seq, id, e->qos, e->retain, e->ids, e->n_ids)
	    != 0) {
		x->sqlerr = true;
		return -1;
	}
	x->rows++;
	return 0;
}

// Segment row of cid becomes queue rows (its entries were counted in
// queued_rows as entries; store_hold_row counts them again as rows).
static int expand_row(nmq_store *s, const char *cid, int64_t row)
{
	store_oseg   *o  = s->oseg;
	sqlite3_stmt *st = o->st[OS_GET];
	sqlite3_bind_int64(st, 1, row);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		sqlite3_reset(st);
		log_error("store", "path=%s client_id=%s event=segment_missing row=%lld", s->path,
		    cid, (long long)row);
		return 0;
	}
	if (rc != SQLITE_ROW) {
		sqlite3_reset(st);
		return -1;
	}
	expand_ctx x = { .s = s, .cid = cid, .sid = (uint32_t)sqlite3_column_int64(st, 0) };
	int64_t    n = sqlite3_column_int64(st, 1);
	// (The blob is read from the statement's row: the inserts below use
	// other statements and do not move this one.)
	const uint8_t *p   = sqlite3_column_blob(st, 2);
	size_t         len = (size_t)sqlite3_column_bytes(st, 2);
	long           r
	    = p != NULL ? store_oseg_parse_ids(p, len, &o->ids, &o->ids_cap, expand_ent, &x) : -1;
	sqlite3_reset(st);
	if (x.sqlerr) {
		return -1;
	}
	if (r < 0) {
		log_error("store",
		    "path=%s client_id=%s event=segment_damaged row=%lld messages=%lld "
		    "restored=%ld "
		    "action=rest_dropped",
		    s->path, cid, (long long)row, (long long)n, x.rows);
	}
	s->queued_rows -= n > 0 && (uint64_t)n <= s->queued_rows ? (uint64_t)n : 0;
	st = o->st[OS_DEL];
	sqlite3_bind_int64(st, 1, row);
	return store_step_done(st) == SQLITE_DONE ? 0 : -1;
}

int store_oseg_expand_to(nmq_store *s, const char *cid, uint64_t max_seq, uint32_t min_rows)
{
	store_oseg *o = s->oseg;
	if (o == NULL || cid == NULL || (o->used == 0 && o->bk_used == 0)) {
		return 0;
	}
	uint64_t h    = cid_hash(cid);
	oslot   *sl   = slot_find(o, cid, h);
	uint64_t rows = 0; // entries made rows by this call
	// Oldest first, so that the session's queue rows always hold its
	// older seqs and its segments the newer ones.
	if (sl != NULL && sl->gone < sl->n) {
		if (!touch(o, sl)) {
			return -1;
		}
		for (; sl->gone < sl->n && (sl->ids[sl->gone].first <= max_seq || rows < min_rows);
		     sl->gone++) {
			if (expand_row(s, sl->cid, sl->ids[sl->gone].row) != 0) {
				return -1;
			}
			rows += sl->ids[sl->gone].n;
		}
		if (sl->gone < sl->n) {
			return 0; // (the running group's are newer still)
		}
	}
	obucket *b = bucket_find(o, cid, h);
	if (b != NULL && b->n > 0 && (b->head->u64 <= max_seq || rows < min_rows)) {
		for (store_op *op = b->head; op != NULL; op = op->oseg_next) {
			s->queued_rows--;
			int64_t id = store_msg_ref(s, op->msg, o->wall, o->mono);
			if (id == 0
			    || store_hold_row(s, op->s1, op->sid, op->u64, id, op->qos, op->retain,
			           op->sub_ids, (uint16_t)op->n_sub_ids)
			        != 0) {
				return -1;
			}
		}
		b->head = b->tail = NULL;
		b->n              = 0;
	}
	return 0;
}

int store_oseg_expand(nmq_store *s, const char *cid)
{
	return store_oseg_expand_to(s, cid, UINT64_MAX, 0);
}

// The next (oldest) segment row of a slot with some left.
static int64_t slot_next(const oslot *sl)
{
	return sl->ids[sl->gone].row;
}

static void heap_down(oslot **h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && slot_next(h[l]) < slot_next(h[m])) {
			m = l;
		}
		if (l + 1 < n && slot_next(h[l + 1]) < slot_next(h[m])) {
			m = l + 1;
		}
		if (m == i) {
			return;
		}
		oslot *t = h[i];
		h[i]     = h[m];
		h[m]     = t;
		i        = m;
	}
}

int store_oseg_expand_all(nmq_store *s, uint32_t max_rows)
{
	store_oseg *o = s->oseg;
	if (o == NULL) {
		return 0;
	}
	// The oldest max_rows committed segment rows, in the order they were
	// written (row id) whatever their client id (a heap of the slots by
	// their next row: a slot's rows are in increasing order): the queue
	// rows they become are then in the order of their messages' age,
	// which eviction (the lowest queue row id first) takes as oldest
	// first. Slot by slot (in the index's hash order), a session could
	// have its newest messages evicted before another's older ones after
	// the restart. (Slots do not move during the group: slot_get and
	// slot_del run after it.)
	size_t nh = 0;
	for (size_t i = 0; i < o->nslots; i++) {
		nh += o->slots[i].cid != NULL && o->slots[i].gone < o->slots[i].n;
	}
	if (nh > 0) {
		oslot **h = malloc(nh * sizeof(*h));
		if (h == NULL) {
			return -1;
		}
		size_t k = 0;
		for (size_t i = 0; i < o->nslots; i++) {
			if (o->slots[i].cid != NULL && o->slots[i].gone < o->slots[i].n) {
				h[k++] = &o->slots[i];
			}
		}
		for (size_t i = nh / 2; i-- > 0;) {
			heap_down(h, nh, i);
		}
		for (uint32_t done = 0; nh > 0 && done < max_rows; done++) {
			oslot *sl = h[0];
			if (!touch(o, sl) || expand_row(s, sl->cid, slot_next(sl)) != 0) {
				free(h);
				return -1;
			}
			if (++sl->gone == sl->n) {
				h[0] = h[--nh];
			}
			heap_down(h, nh, 0);
		}
		free(h);
	}
	for (size_t k = 0; k < o->bk_used; k++) {
		obucket *b = &o->bk[o->bk_list[k]];
		if (b->n > 0 && store_oseg_expand(s, b->cid) != 0) {
			return -1;
		}
	}
	return 0;
}

uint64_t store_oseg_rows(const nmq_store *s)
{
	return s->oseg != NULL ? s->oseg->rows : 0;
}

// Writes o->buf[9..len) as a segment of b with n entries (the header is
// put in front of them) and notes the row for the index. 0 or -1.
static int write_seg(
    nmq_store *s, obucket *b, int64_t qmark, size_t len, uint32_t n, uint64_t first)
{
	store_oseg *o = s->oseg;
	if (o->nadds == o->adds_cap) {
		size_t cap = o->adds_cap ? o->adds_cap * 2 : 1024;
		oadd  *v   = realloc(o->adds, cap * sizeof(*v));
		if (v == NULL) {
			return -1;
		}
		o->adds     = v;
		o->adds_cap = cap;
	}
	// The count's varint is at most 5 bytes: the header ends where the
	// entries begin.
	uint8_t hdr[9];
	size_t  hn    = hdr_put(hdr, n);
	size_t  start = 9 - hn;
	memcpy(o->buf + start, hdr, hn);
	sqlite3_stmt *st = o->st[OS_INS];
	sqlite3_bind_text(st, 1, b->cid, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, b->sid);
	sqlite3_bind_int64(st, 3, qmark);
	sqlite3_bind_int64(st, 4, n);
	sqlite3_bind_blob(st, 5, o->buf + start, (int)(len - start), SQLITE_STATIC);
	if (store_step_done(st) != SQLITE_DONE) {
		return -1;
	}
	o->adds[o->nadds++] = (oadd) {
		.cid  = b->cid,
		.hash = b->hash,
		.ref  = { .row = sqlite3_last_insert_rowid(s->db), .first = first, .n = n },
	};
	return 0;
}

int store_oseg_end_group(nmq_store *s)
{
	store_oseg *o = s->oseg;
	if (o == NULL || o->bk_used == 0) {
		return 0;
	}
	int64_t qmark = 0;
	bool    any   = false;
	for (size_t k = 0; k < o->bk_used; k++) {
		obucket *b = &o->bk[o->bk_list[k]];
		if (b->n == 0) {
			continue;
		}
		if (!any) {
			sqlite3_stmt *q = o->st[OS_QMAX];
			int           r = sqlite3_step(q);
			qmark           = r == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
			sqlite3_reset(q);
			if (r != SQLITE_ROW) {
				return -1;
			}
			any = true;
		}
		// Entries after a 9-byte room for the header; a segment is cut
		// at OSEG_ROW_BYTES, so that rows stay small (read whole when
		// expanded) and so does the buffer.
		size_t   len   = 9;
		uint32_t n     = 0;
		uint64_t first = b->head->u64;
		if (!buf_fit(o, len)) {
			return -1;
		}
		for (store_op *op = b->head; op != NULL; op = op->oseg_next) {
			if (!encode_op(o, &len, op)) {
				return -1;
			}
			n++;
			if (len >= OSEG_ROW_BYTES && op->oseg_next != NULL) {
				if (write_seg(s, b, qmark, len, n, first) != 0) {
					return -1;
				}
				len   = 9;
				n     = 0;
				first = op->oseg_next->u64;
			}
		}
		if (write_seg(s, b, qmark, len, n, first) != 0) {
			return -1;
		}
	}
	// A buffer grown for one large message is not kept.
	if (o->buf_cap > 4 * OSEG_ROW_BYTES) {
		free(o->buf);
		o->buf     = NULL;
		o->buf_cap = 0;
	}
	return 0;
}

void store_oseg_after_group(nmq_store *s, bool ok)
{
	store_oseg *o = s->oseg;
	if (o == NULL) {
		return;
	}
	for (size_t i = 0; i < o->ntouched; i++) {
		oslot *sl   = o->touched[i];
		sl->touched = false;
		if (ok && sl->gone > 0) {
			memmove(
			    sl->ids, sl->ids + sl->gone, (size_t)(sl->n - sl->gone) * sizeof(oref));
			o->rows -= sl->gone;
			sl->n -= sl->gone;
		}
		sl->gone = 0;
	}
	o->ntouched = 0;
	// (Emptied slots are removed after: deleting moves slots.)
	if (ok) {
		for (size_t i = 0; i < o->nadds; i++) {
			oadd *a = &o->adds[i];
			if (a->ref.row == 0) {
				continue;
			}
			oslot *sl = slot_get(o, a->cid, a->hash);
			if (sl != NULL && sl->n == sl->cap) {
				uint32_t cap = sl->cap ? sl->cap * 2 : 4;
				oref    *v   = realloc(sl->ids, (size_t)cap * sizeof(*v));
				if (v == NULL) {
					sl = NULL;
				} else {
					sl->ids = v;
					sl->cap = cap;
				}
			}
			if (sl == NULL) {
				// Out of memory: the row stays in the file and is restored
				// at the next start, after what the session reads meanwhile.
				log_error("store",
				    "path=%s client_id=%s event=segment_unindexed row=%lld "
				    "reason=out_of_memory",
				    s->path, a->cid, (long long)a->ref.row);
				continue;
			}
			sl->ids[sl->n++] = a->ref;
			o->rows++;
		}
		for (size_t i = 0; i < o->nslots;) {
			oslot *sl = &o->slots[i];
			if (sl->cid != NULL && sl->n == 0) {
				slot_del(o, sl); // may move a later slot here: look again
				continue;
			}
			i++;
		}
	}
	o->nadds = 0;
	buckets_clear(o);
}

// ---------------------------------------------------------------------------
// Eviction.

typedef struct evict_ctx {
	nmq_store  *s;
	const char *cid;
	uint64_t    k, i;
	size_t      cut; // offset of the first entry kept
	bool        oom;
} evict_ctx;

static int evict_ent(void *arg, const store_oent *e)
{
	evict_ctx *x = arg;
	if (x->i < x->k) {
		if (store_evict_note(x->s, x->cid, e->seq) != 0) {
			x->oom = true;
		}
		x->i++;
		x->cut = e->end;
	}
	return 0;
}

int64_t store_oseg_oldest_queued(nmq_store *s)
{
	sqlite3_stmt *st = s->oseg->st[OS_QOLD];
	int           rc = sqlite3_step(st);
	int64_t       id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	sqlite3_reset(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? id : -1;
}

bool store_oseg_has_rows(const nmq_store *s)
{
	return s->oseg != NULL && (s->oseg->rows > 0 || s->oseg->nadds > 0);
}

// The running group no longer has segment row `row` of cid (evicted
// whole): the index forgets it when the group commits.
static void forget_row(store_oseg *o, const char *cid, int64_t row)
{
	oslot *sl = slot_find(o, cid, cid_hash(cid));
	if (sl != NULL && sl->gone < sl->n && sl->ids[sl->gone].row == row && touch(o, sl)) {
		sl->gone++;
		return;
	}
	for (size_t i = 0; i < o->nadds; i++) {
		if (o->adds[i].ref.row == row) {
			o->adds[i].ref.row = 0;
			return;
		}
	}
}

int64_t store_oseg_evict(nmq_store *s, uint64_t n, int64_t oldest_q)
{
	store_oseg   *o  = s->oseg;
	sqlite3_stmt *st = o->st[OS_OLDEST];
	int           rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		sqlite3_reset(st);
		return rc == SQLITE_DONE ? 0 : -1;
	}
	int64_t row   = sqlite3_column_int64(st, 0);
	int64_t qmark = sqlite3_column_int64(st, 2);
	int64_t cnt   = sqlite3_column_int64(st, 3);
	if (oldest_q != 0 && qmark >= oldest_q) {
		sqlite3_reset(st);
		return 0; // a queued row is older
	}
	const unsigned char *c   = sqlite3_column_text(st, 1);
	char                *cid = strdup(c != NULL ? (const char *)c : "");
	if (cid == NULL) {
		sqlite3_reset(st);
		return -1;
	}
	const uint8_t *p   = sqlite3_column_blob(st, 4);
	size_t         len = (size_t)sqlite3_column_bytes(st, 4);
	evict_ctx      x   = { .s = s, .cid = cid, .k = n };
	long r = p != NULL ? store_oseg_parse_ids(p, len, &o->ids, &o->ids_cap, evict_ent, &x) : -1;
	bool whole  = r < 0 || cnt <= 0 || n >= (uint64_t)cnt || x.cut >= len;
	size_t rlen = 0;
	if (!whole) {
		// What is kept: a new count, then the entries after the cut.
		uint8_t hdr[16];
		size_t  hn = hdr_put(hdr, (uint64_t)cnt - x.i);
		if (!buf_fit(o, hn + (len - x.cut))) {
			x.oom = true;
		} else {
			memcpy(o->buf, hdr, hn);
			memcpy(o->buf + hn, p + x.cut, len - x.cut);
			rlen = hn + (len - x.cut);
		}
	}
	sqlite3_reset(st);
	if (x.oom) {
		free(cid);
		return -1;
	}
	int64_t gone = whole ? (cnt > 0 ? cnt : 1) : (int64_t)x.i;
	if (r < 0) {
		log_error("store",
		    "path=%s client_id=%s event=segment_damaged row=%lld messages=%lld "
		    "action=evicted",
		    s->path, cid, (long long)row, (long long)cnt);
	}
	if (whole) {
		st = o->st[OS_DEL];
		sqlite3_bind_int64(st, 1, row);
		rc = store_step_done(st);
		forget_row(o, cid, row);
	} else {
		st = o->st[OS_CUT];
		sqlite3_bind_int64(st, 1, row);
		sqlite3_bind_int64(st, 2, cnt - (int64_t)x.i);
		sqlite3_bind_blob(st, 3, o->buf, (int)rlen, SQLITE_STATIC);
		rc = store_step_done(st);
	}
	free(cid);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	uint64_t g = cnt > 0 ? (uint64_t)gone : 0;
	s->queued_rows -= g <= s->queued_rows ? g : s->queued_rows;
	return gone;
}

// ---------------------------------------------------------------------------
// At open.

typedef struct restore_ctx {
	sqlite3      *db;
	sqlite3_stmt *msg, *q, *gc;
	const char   *cid;
	long          rows, dup;
	bool          sqlerr;
} restore_ctx;

static int restore_ent(void *arg, const store_oent *e)
{
	restore_ctx *x = arg;
	bind_msg(x->msg, e);
	int rc = sqlite3_step(x->msg);
	sqlite3_reset(x->msg);
	if (rc != SQLITE_DONE) {
		x->sqlerr = true;
		return -1;
	}
	int64_t id = sqlite3_last_insert_rowid(x->db);
	sqlite3_bind_text(x->q, 1, x->cid, -1, SQLITE_STATIC);
	sqlite3_bind_int64(x->q, 2, (sqlite3_int64)e->seq);
	sqlite3_bind_int64(x->q, 3, id);
	sqlite3_bind_int(x->q, 4, e->qos);
	sqlite3_bind_int(x->q, 5, e->retain);
	if (e->n_ids) {
		sqlite3_bind_blob(
		    x->q, 6, e->ids, (int)(e->n_ids * sizeof(uint32_t)), SQLITE_STATIC);
	} else {
		sqlite3_bind_blob(x->q, 6, NULL, 0, SQLITE_STATIC);
	}
	rc = sqlite3_step(x->q);
	sqlite3_reset(x->q);
	if (rc != SQLITE_DONE) {
		x->sqlerr = true;
		return -1;
	}
	if (sqlite3_changes(x->db) == 0) {
		// That seq is queued already: the first one stays.
		sqlite3_bind_int64(x->gc, 1, id);
		rc = sqlite3_step(x->gc);
		sqlite3_reset(x->gc);
		if (rc != SQLITE_DONE) {
			x->sqlerr = true;
			return -1;
		}
		x->dup++;
		return 0;
	}
	x->rows++;
	return 0;
}

typedef struct rseg {
	int64_t id;
	char   *cid;
} rseg;

// Every restored row is committed in transactions of about this many,
// each followed by a checkpoint: the WAL stays bounded however much the
// crash left.
#define RESTORE_CHUNK 65536

long store_oseg_restore(sqlite3 *db, const char *path)
{
	sqlite3_stmt *sel = NULL, *get = NULL, *del = NULL;
	int           any = 0;
	if (sqlite3_prepare_v2(db, "SELECT EXISTS (SELECT 1 FROM oseg)", -1, &sel, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	any = sqlite3_step(sel) == SQLITE_ROW ? sqlite3_column_int(sel, 0) : -1;
	sqlite3_finalize(sel);
	sel = NULL;
	if (any <= 0) {
		return any;
	}
	// The segments in the order they were written (row id), whatever
	// their client id: the queue rows they become are then in the order
	// of their messages' age (each session's in seq order), which
	// eviction at disk_cache_size (the lowest queue row id first) takes
	// as oldest first. (Restored client id by client id, a session whose
	// id sorts first had its newest messages evicted before another
	// session's older ones.)
	rseg  *segs  = NULL;
	size_t nsegs = 0, cap = 0;
	int    rc = sqlite3_prepare_v2(db, "SELECT id, cid FROM oseg ORDER BY id", -1, &sel, NULL);
	while (rc == SQLITE_OK && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		if (nsegs == cap) {
			size_t nc = cap ? cap * 2 : 1024;
			rseg  *v  = realloc(segs, nc * sizeof(*v));
			if (v == NULL) {
				rc = SQLITE_NOMEM;
				break;
			}
			segs = v;
			cap  = nc;
		}
		const unsigned char *c = sqlite3_column_text(sel, 1);
		segs[nsegs].id         = sqlite3_column_int64(sel, 0);
		segs[nsegs].cid        = strdup(c != NULL ? (const char *)c : "");
		if (segs[nsegs].cid == NULL) {
			rc = SQLITE_NOMEM;
			break;
		}
		nsegs++;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(sel);
	sel = NULL;
	if (rc == SQLITE_DONE) {
		rc = SQLITE_OK;
	}
	restore_ctx x    = { .db = db };
	uint32_t   *ids  = NULL;
	size_t      icap = 0;
	long        bad = 0, lost = 0, since = 0;
	bool        open = false;
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(
		    db, "SELECT n, ents FROM oseg WHERE id = ?1", -1, &get, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(db, "DELETE FROM oseg WHERE id = ?1", -1, &del, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(db,
		    "INSERT INTO msgs(refs, topic, qos, retain, expiry_interval, expiry_wall_ms, "
		    "props,"
		    " payload) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7)",
		    -1, &x.msg, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(db,
		    "INSERT OR IGNORE INTO queue(cid, seq, msg_id, qos, retain, state, packet_id,"
		    " sub_ids) VALUES (?1, ?2, ?3, ?4, ?5, 0, 0, ?6)",
		    -1, &x.q, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(db, "DELETE FROM msgs WHERE id = ?1", -1, &x.gc, NULL);
	}
	if (rc == SQLITE_OK) {
		rc   = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
		open = rc == SQLITE_OK;
	}
	for (size_t i = 0; rc == SQLITE_OK && i < nsegs; i++) {
		sqlite3_bind_int64(get, 1, segs[i].id);
		rc = sqlite3_step(get);
		if (rc != SQLITE_ROW) {
			sqlite3_reset(get);
			rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
			continue;
		}
		int64_t        n      = sqlite3_column_int64(get, 0);
		const uint8_t *p      = sqlite3_column_blob(get, 1);
		size_t         len    = (size_t)sqlite3_column_bytes(get, 1);
		long           before = x.rows + x.dup;
		x.cid                 = segs[i].cid;
		long r                = segs[i].cid[0] != '\0' && p != NULL
		                   ? store_oseg_parse_ids(p, len, &ids, &icap, restore_ent, &x)
		                   : -1;
		sqlite3_reset(get);
		if (x.sqlerr) {
			rc = sqlite3_extended_errcode(db) & 0xff;
			rc = rc == SQLITE_OK ? SQLITE_ERROR : rc;
			break;
		}
		if (r < 0) {
			// A damaged segment: the entries before the damage are
			// restored, the rest is lost (logged with how many).
			long got = x.rows + x.dup - before;
			bad++;
			lost += n > got ? (long)(n - got) : 0;
			log_error("store",
			    "path=%s client_id=%s event=segment_damaged row=%lld messages=%lld "
			    "restored=%ld action=rest_dropped",
			    path, segs[i].cid, (long long)segs[i].id, (long long)n, got);
		}
		sqlite3_bind_int64(del, 1, segs[i].id);
		rc = sqlite3_step(del);
		sqlite3_reset(del);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
		since += n > 0 ? (long)n : 1;
		if (rc == SQLITE_OK && since >= RESTORE_CHUNK) {
			since = 0;
			rc    = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
			open  = false;
			if (rc == SQLITE_OK) {
				sqlite3_wal_checkpoint_v2(
				    db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
				rc   = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
				open = rc == SQLITE_OK;
			}
		}
	}
	char why[256] = "";
	int  code     = 0;
	if (rc != SQLITE_OK) {
		snprintf(why, sizeof(why), "%s", sqlite3_errmsg(db));
		code = sqlite3_extended_errcode(db);
	}
	sqlite3_finalize(get);
	sqlite3_finalize(del);
	sqlite3_finalize(x.msg);
	sqlite3_finalize(x.q);
	sqlite3_finalize(x.gc);
	free(ids);
	for (size_t i = 0; i < nsegs; i++) {
		free(segs[i].cid);
	}
	free(segs);
	if (rc == SQLITE_OK && open) {
		rc   = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
		open = rc != SQLITE_OK;
		if (rc != SQLITE_OK) {
			snprintf(why, sizeof(why), "%s", sqlite3_errmsg(db));
			code = sqlite3_extended_errcode(db);
		}
	}
	if (rc != SQLITE_OK) {
		// (What earlier chunks committed stays: each segment became its
		// rows in the transaction that deleted it.)
		log_error("store", "path=%s event=segments_restore_failed error=\"%s\"", path, why);
		if (open) {
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		}
		int c = code & 0xff, r0 = rc & 0xff;
		if (c == SQLITE_BUSY || c == SQLITE_LOCKED || r0 == SQLITE_BUSY
		    || r0 == SQLITE_LOCKED) {
			return -2;
		}
		return store_no_room(rc) || store_no_room(code) ? -3 : -1;
	}
	log_info("store",
	    "path=%s event=segments_restored segments=%zu rows=%ld already_queued=%ld damaged=%ld "
	    "lost=%ld",
	    path, nsegs, x.rows, x.dup, bad, lost);
	return x.rows;
}
