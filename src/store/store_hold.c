// Queue rows held back (store thread): see
// docs/decisions/0045-store-held-rows.md.
//
// A QoS 1 message queued for a persistent session whose client is
// connected goes out at once, and its ack usually comes back one or two
// group commits later: written as a queue row in the group that holds
// it, the row is deleted again by a later group's done range. Instead, a
// group writes such rows as entries of one "held" row (one blob per
// group, no index), and keeps them in memory as a generation. A later
// group drops a generation whose entries are all done with
// (store_group_is_done: acked, or otherwise gone from their session),
// and writes as queue rows the entries still wanted of one held for
// STORE_HOLD_AGE_MS (or when more than STORE_HOLD_MAX are held),
// deleting its held row in the same transaction. What a commit makes
// durable is the same: after a crash, the held rows still in the file
// become queue rows before anything reads the queue (store_hold_expand).
// Before an operation that reads or deletes a session's rows by SQL,
// every entry held is written as a row (or dropped, done with), so that
// it sees them where it would have.
//
// A group that applies done ranges while entries are held also writes
// them (client id, highest seq) in a held row of done records, deleted
// once no generation older than it is left: after a crash, entries their
// session was done with do not come back.
//
// The blob (little endian, every length checked when read from a file):
//   u32 HOLD_MAGIC, varint n_cids, n_cids x (varint len, client id),
//   then entries: varint cid index, varint seq, varint zigzag delta of
//   the message row id from the previous entry's, u8 flags (QoS in bits
//   0-1, retain bit 2, subscription ids bit 3) and, with ids, varint n
//   then n varints. Done records: u32 HOLD_DMAGIC, then (varint len,
//   client id, varint highest seq) each.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/log/log.h"
#include "src/store/store_int.h"

const char store_hold_schema_sql[]
    = "CREATE TABLE IF NOT EXISTS held(id INTEGER PRIMARY KEY, ents BLOB NOT NULL);";

enum { HS_PUT, HS_DEL, HS_COUNT_ };
static const char *const hold_sql[HS_COUNT_] = {
	[HS_PUT] = "INSERT INTO held(ents) VALUES (?1)",
	[HS_DEL] = "DELETE FROM held WHERE id = ?1",
};

#define HOLD_MAGIC   0x32444C48u // "HLD2"
#define HOLD_DMAGIC  0x44444C48u // "HLDD"
#define HOLD_IDS     0x08
#define HOLD_RETAIN  0x04
#define HOLD_IDS_MAX 65535

// ---------------------------------------------------------------------------
// Encoding.

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static void magic_put(uint8_t *p, uint32_t m)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(m >> (8 * i));
	}
}

// The blob's magic number (0 when too short for one).
static uint32_t magic_of(const uint8_t *p, size_t len)
{
	return len < 4
	    ? 0
	    : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Grows a byte buffer to hold n more. False when out of memory.
static bool grow(uint8_t **p, size_t *cap, size_t len, size_t n)
{
	if (len + n <= *cap) {
		return true;
	}
	size_t c = *cap ? *cap : 4096;
	while (c < len + n) {
		c *= 2;
	}
	uint8_t *v = realloc(*p, c);
	if (v == NULL) {
		return false;
	}
	*p   = v;
	*cap = c;
	return true;
}

// One entry as read: cid index, seq, message row id, QoS, retain and the
// subscription ids (as varints at ids, n_ids of them).
typedef struct hent {
	uint64_t       cid;
	uint64_t       seq;
	int64_t        msg_id;
	uint8_t        qos;
	bool           retain;
	uint32_t       n_ids;
	const uint8_t *ids;
} hent;

// Reads the entry at *off of p[0..len) (msg: the previous entry's row id,
// updated). False if malformed.
static bool ent_read(
    const uint8_t *p, size_t len, size_t *off, uint64_t n_cids, int64_t *msg, hent *e)
{
	uint64_t d, v;
	if (!store_varint_get(p, len, off, &e->cid) || e->cid >= n_cids
	    || !store_varint_get(p, len, off, &e->seq) || e->seq > INT64_MAX
	    || !store_varint_get(p, len, off, &d) || *off >= len) {
		return false;
	}
	int64_t delta = unzigzag(d);
	if ((delta > 0 && *msg > INT64_MAX - delta) || (delta < 0 && *msg < INT64_MIN - delta)) {
		return false;
	}
	e->msg_id     = *msg + delta;
	*msg          = e->msg_id;
	uint8_t flags = p[(*off)++];
	if (e->msg_id <= 0 || (flags & 0x03) == 0 || (flags & 0x03) == 3 || (flags & 0xF0) != 0) {
		return false;
	}
	e->qos    = flags & 0x03;
	e->retain = (flags & HOLD_RETAIN) != 0;
	e->n_ids  = 0;
	e->ids    = NULL;
	if (flags & HOLD_IDS) {
		if (!store_varint_get(p, len, off, &v) || v == 0 || v > HOLD_IDS_MAX) {
			return false;
		}
		e->n_ids = (uint32_t)v;
		e->ids   = p + *off;
		for (uint32_t i = 0; i < e->n_ids; i++) {
			if (!store_varint_get(p, len, off, &v) || v > UINT32_MAX) {
				return false;
			}
		}
	}
	return true;
}

// Decodes e's subscription ids into ids (room for e->n_ids).
static void ent_ids(const hent *e, uint32_t *ids)
{
	size_t off = 0;
	for (uint32_t i = 0; i < e->n_ids; i++) {
		uint64_t v = 0;
		store_varint_get(e->ids, SIZE_MAX, &off, &v); // checked by ent_read
		ids[i] = (uint32_t)v;
	}
}

// Reads the header and client id table: *ents = offset of the first
// entry, cids[i] / lens[i] (allocated, n_cids) where each id is. False if
// malformed or out of memory.
static bool head_read(
    const uint8_t *p, size_t len, size_t *ents, uint64_t *n_cids, uint32_t **cids, uint16_t **lens)
{
	size_t off = 4;
	*cids      = NULL;
	*lens      = NULL;
	if (magic_of(p, len) != HOLD_MAGIC || !store_varint_get(p, len, &off, n_cids)
	    || *n_cids == 0 || *n_cids > len) {
		return false;
	}
	*cids = malloc(*n_cids * sizeof(**cids));
	*lens = malloc(*n_cids * sizeof(**lens));
	if (*cids == NULL || *lens == NULL) {
		goto bad;
	}
	for (uint64_t i = 0; i < *n_cids; i++) {
		uint64_t l;
		if (!store_varint_get(p, len, &off, &l) || l == 0 || l > UINT16_MAX || l > len - off
		    || memchr(p + off, '\0', l) != NULL) {
			goto bad;
		}
		(*cids)[i] = (uint32_t)off;
		(*lens)[i] = (uint16_t)l;
		off += l;
	}
	*ents = off;
	return true;
bad:
	free(*cids);
	free(*lens);
	*cids = NULL;
	*lens = NULL;
	return false;
}

long store_hold_parse(
    const uint8_t *p, size_t len, int (*fn)(void *arg, const store_hent *e), void *arg)
{
	size_t    off;
	uint64_t  n_cids;
	uint32_t *cids;
	uint16_t *lens;
	if (!head_read(p, len, &off, &n_cids, &cids, &lens)) {
		return -1;
	}
	long      n   = 0;
	int64_t   msg = 0;
	uint32_t *ids = NULL;
	while (off < len) {
		hent e;
		if (!ent_read(p, len, &off, n_cids, &msg, &e)) {
			n = -1;
			break;
		}
		if (e.n_ids > 0) {
			uint32_t *v = realloc(ids, (size_t)e.n_ids * sizeof(*ids));
			if (v == NULL) {
				n = -1;
				break;
			}
			ids = v;
			ent_ids(&e, ids);
		}
		store_hent x = {
			.msg_id  = e.msg_id,
			.seq     = e.seq,
			.qos     = e.qos,
			.retain  = e.retain,
			.n_ids   = (uint16_t)e.n_ids,
			.cid_len = lens[e.cid],
			.cid     = (const char *)p + cids[e.cid],
			.ids     = ids,
		};
		n++;
		if (fn != NULL && fn(arg, &x) != 0) {
			n = -1;
			break;
		}
	}
	free(ids);
	free(cids);
	free(lens);
	return n;
}

long store_hold_parse_dones(const uint8_t *p, size_t                            len,
    int (*fn)(void *arg, const char *cid, uint16_t cid_len, uint64_t hi), void *arg)
{
	if (magic_of(p, len) != HOLD_DMAGIC) {
		return -1;
	}
	long n = 0;
	for (size_t off = 4; off < len;) {
		uint64_t l, hi;
		if (!store_varint_get(p, len, &off, &l) || l == 0 || l > UINT16_MAX || l > len - off
		    || memchr(p + off, '\0', l) != NULL) {
			return -1;
		}
		const char *cid = (const char *)p + off;
		off += l;
		if (!store_varint_get(p, len, &off, &hi)) {
			return -1;
		}
		n++;
		if (fn != NULL && fn(arg, cid, (uint16_t)l, hi) != 0) {
			return -1;
		}
	}
	return n;
}

// ---------------------------------------------------------------------------
// The running group's entries (store_hcur) and the committed generations.

int store_hold_prepare(nmq_store *s)
{
	for (int i = 0; i < HS_COUNT_; i++) {
		if (sqlite3_prepare_v3(
		        s->db, hold_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->hstmts[i], NULL)
		    != SQLITE_OK) {
			return -1;
		}
	}
	return 0;
}

static void gen_free(store_hgen *g)
{
	free(g->p);
	free(g->sids);
	free(g->cid_at);
	free(g->cid_len);
	free(g);
}

// Empties the running group's entries (buffers kept).
static void cur_reset(store_hcur *c)
{
	c->ents_len = 0;
	c->cids_len = 0;
	c->n        = 0;
	c->n_cids   = 0;
	c->last_msg = 0;
	if (c->slots != NULL) {
		memset(c->slots, 0, c->slots_cap * sizeof(*c->slots));
	}
}

void store_hold_finalize(nmq_store *s)
{
	for (int i = 0; i < HS_COUNT_; i++) {
		sqlite3_finalize(s->hstmts[i]);
		s->hstmts[i] = NULL;
	}
	store_hcur *c = &s->hold_cur;
	free(c->ents);
	free(c->cids);
	free(c->slots);
	free(c->sids);
	free(c->cid_at);
	free(c->cid_len);
	memset(c, 0, sizeof(*c));
	for (store_hgen *g = s->hold_gens, *nx; g != NULL; g = nx) {
		nx = g->next;
		gen_free(g);
	}
	s->hold_gens  = NULL;
	s->hold_total = 0;
	for (store_hdgen *d = s->hold_dgens, *nx; d != NULL; d = nx) {
		nx = d->next;
		free(d);
	}
	s->hold_dgens = NULL;
	free(s->hold_dpending);
	s->hold_dpending = NULL;
	free(s->hold_dp);
	s->hold_dp   = NULL;
	s->hold_dlen = s->hold_dcap = 0;
}

void store_hold_note_done(nmq_store *s, const char *cid, uint64_t hi)
{
	if (s->hold_gens == NULL && s->hold_cur.n == 0) {
		return; // nothing held that it could cover
	}
	size_t cl = strlen(cid);
	if (cl == 0 || cl > UINT16_MAX
	    || !grow(&s->hold_dp, &s->hold_dcap, s->hold_dlen, cl + 24)) {
		return;
	}
	if (s->hold_dlen == 0) {
		magic_put(s->hold_dp, HOLD_DMAGIC);
		s->hold_dlen = 4;
	}
	s->hold_dlen += store_varint_put(s->hold_dp + s->hold_dlen, cl);
	memcpy(s->hold_dp + s->hold_dlen, cid, cl);
	s->hold_dlen += cl;
	s->hold_dlen += store_varint_put(s->hold_dp + s->hold_dlen, hi);
}

// The index of sid's client id in the running group's table, added if
// new. UINT32_MAX when out of memory.
static uint32_t cur_cid(store_hcur *c, uint32_t sid, const char *cid, size_t cl)
{
	if ((c->n_cids + 1) * 2 > c->slots_cap) {
		size_t    cap = c->slots_cap ? c->slots_cap * 2 : 1024;
		uint32_t *v   = calloc(cap, sizeof(*v));
		uint32_t *ns  = realloc(c->sids, cap / 2 * sizeof(*ns));
		if (ns != NULL) {
			c->sids = ns;
		}
		uint32_t *na = ns ? realloc(c->cid_at, cap / 2 * sizeof(*na)) : NULL;
		if (na != NULL) {
			c->cid_at = na;
		}
		uint16_t *nl = na ? realloc(c->cid_len, cap / 2 * sizeof(*nl)) : NULL;
		if (nl != NULL) {
			c->cid_len = nl;
		}
		if (v == NULL || nl == NULL) {
			free(v);
			return UINT32_MAX;
		}
		for (uint32_t i = 0; i < c->n_cids; i++) {
			size_t h = ((uint64_t)c->sids[i] * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
			while (v[h] != 0) {
				h = (h + 1) & (cap - 1);
			}
			v[h] = i + 1;
		}
		free(c->slots);
		c->slots     = v;
		c->slots_cap = cap;
	}
	size_t mask = c->slots_cap - 1;
	size_t h    = ((uint64_t)sid * 0x9E3779B97F4A7C15ull >> 20) & mask;
	while (c->slots[h] != 0) {
		uint32_t i = c->slots[h] - 1;
		if (c->sids[i] == sid) {
			return i;
		}
		h = (h + 1) & mask;
	}
	if (!grow(&c->cids, &c->cids_cap, c->cids_len, cl + 10)) {
		return UINT32_MAX;
	}
	uint32_t i = c->n_cids++;
	c->cids_len += store_varint_put(c->cids + c->cids_len, cl);
	c->sids[i]    = sid;
	c->cid_at[i]  = (uint32_t)c->cids_len;
	c->cid_len[i] = (uint16_t)cl;
	memcpy(c->cids + c->cids_len, cid, cl);
	c->cids_len += cl;
	c->slots[h] = i + 1;
	return i;
}

int store_hold_add(nmq_store *s, const char *cid, uint32_t sid, uint64_t seq, int64_t msg_id,
    uint8_t qos, bool retain, const uint32_t *ids, uint16_t n_ids)
{
	store_hcur *c  = &s->hold_cur;
	size_t      cl = strlen(cid);
	if (cl == 0 || cl > UINT16_MAX || qos < 1 || qos > 2 || msg_id <= 0
	    || c->ents_len > (size_t)INT32_MAX / 2 || c->cids_len > (size_t)INT32_MAX / 2) {
		return -1;
	}
	uint32_t idx = cur_cid(c, sid, cid, cl);
	store_group_note_row(s, sid, seq, false);
	if (idx == UINT32_MAX
	    || !grow(&c->ents, &c->ents_cap, c->ents_len, 40 + (size_t)n_ids * 5)) {
		return -1;
	}
	uint8_t *q = c->ents + c->ents_len;
	size_t   n = store_varint_put(q, idx);
	n += store_varint_put(q + n, seq);
	n += store_varint_put(q + n, zigzag(msg_id - c->last_msg));
	q[n++] = (uint8_t)(qos | (retain ? HOLD_RETAIN : 0) | (n_ids ? HOLD_IDS : 0));
	if (n_ids) {
		n += store_varint_put(q + n, n_ids);
		for (uint16_t i = 0; i < n_ids; i++) {
			n += store_varint_put(q + n, ids[i]);
		}
	}
	c->ents_len += n;
	c->last_msg = msg_id;
	c->n++;
	return 0;
}

// Inserts a held row of blob p; *row its id. 0 or -1.
static int held_put(nmq_store *s, const uint8_t *p, size_t len, int64_t *row)
{
	sqlite3_stmt *st = s->hstmts[HS_PUT];
	sqlite3_bind_blob(st, 1, p, (int)len, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	*row = sqlite3_last_insert_rowid(s->db);
	return 0;
}

// Deletes held row row. 0 or -1.
static int held_del(nmq_store *s, int64_t row)
{
	sqlite3_stmt *st = s->hstmts[HS_DEL];
	sqlite3_bind_int64(st, 1, row);
	return store_step_done(st) == SQLITE_DONE ? 0 : -1;
}

// What a run over held entries did.
typedef struct hold_run {
	long written, dropped;
} hold_run;

// Writes the queue row of one entry (client id cid of cl bytes, session
// sid), or drops its message reference when its session is done with it.
static int write_one(
    nmq_store *s, hold_run *r, const hent *e, uint32_t sid, const char *cid, size_t cl)
{
	if (store_group_is_done(s, sid, e->seq)) {
		r->dropped++;
		return store_hold_unref(s, e->msg_id);
	}
	char      name[256];
	char     *big = NULL;
	uint32_t  ids_local[16];
	uint32_t *ids = ids_local;
	if (cl >= sizeof(name) && (big = malloc(cl + 1)) == NULL) {
		return -1;
	}
	char *c = big != NULL ? big : name;
	memcpy(c, cid, cl);
	c[cl] = '\0';
	if (e->n_ids > 16 && (ids = malloc((size_t)e->n_ids * sizeof(*ids))) == NULL) {
		free(big);
		return -1;
	}
	ent_ids(e, ids);
	int rc = store_hold_row(
	    s, c, sid, e->seq, e->msg_id, e->qos, e->retain, ids, (uint16_t)e->n_ids);
	if (ids != ids_local) {
		free(ids);
	}
	free(big);
	if (rc == 0) {
		r->written++;
	}
	return rc;
}

// Writes the rows of the entries in p[off..len) not done with and drops
// the references of the others: the client id table by index is sids,
// cid_at (offset in base), cid_len (a generation's, or the running
// group's). 0 or -1.
static int flush_ents(nmq_store *s, const uint8_t *p, size_t off, size_t len, uint32_t n_cids,
    const uint32_t *sids, const uint8_t *base, const uint32_t *cid_at, const uint16_t *cid_len)
{
	hold_run r   = { 0, 0 };
	int64_t  msg = 0;
	while (off < len) {
		hent e;
		if (!ent_read(p, len, &off, n_cids, &msg, &e)
		    || write_one(s, &r, &e, sids[e.cid], (const char *)base + cid_at[e.cid],
		           cid_len[e.cid])
		        != 0) {
			return -1;
		}
	}
	s->held_written += (uint64_t)r.written;
	s->held_dropped += (uint64_t)r.dropped;
	return 0;
}

static int gen_flush(nmq_store *s, store_hgen *g)
{
	return flush_ents(
	    s, g->p, g->ents_off, g->len, g->n_cids, g->sids, g->p, g->cid_at, g->cid_len);
}

// Whether every entry of g is done with. g->cursor is the first entry not
// known to be (done is for good while the session lives, and deleting a
// session writes everything held first).
static bool gen_all_done(nmq_store *s, store_hgen *g)
{
	while (g->cursor < g->len) {
		size_t  off = g->cursor;
		int64_t msg = g->cursor_msg;
		hent    e;
		if (!ent_read(g->p, g->len, &off, g->n_cids, &msg, &e)
		    || !store_group_is_done(s, g->sids[e.cid], e.seq)) {
			return false;
		}
		g->cursor     = off;
		g->cursor_msg = msg;
	}
	return true;
}

// Retires g in the running group: its rows written (flush) or, all done
// with, only its message references dropped; its held row deleted.
static int gen_retire(nmq_store *s, store_hgen *g, bool flush)
{
	if (flush) {
		if (gen_flush(s, g) != 0) {
			return -1;
		}
	} else {
		int64_t msg = 0;
		for (size_t off = g->ents_off; off < g->len;) {
			hent e;
			if (!ent_read(g->p, g->len, &off, g->n_cids, &msg, &e)
			    || store_hold_unref(s, e.msg_id) != 0) {
				return -1;
			}
		}
		s->held_dropped += g->n;
	}
	if (held_del(s, g->row) != 0) {
		return -1;
	}
	g->retired = true;
	s->hold_total -= g->n;
	return 0;
}

// Deletes the done records that no generation left can need: those of a
// group no older than the oldest generation still held. 0 or -1.
static int dgens_retire(nmq_store *s)
{
	uint64_t min_live = UINT64_MAX;
	for (store_hgen *g = s->hold_gens; g != NULL; g = g->next) {
		if (!g->retired && g->groupno < min_live) {
			min_live = g->groupno;
		}
	}
	for (store_hdgen *d = s->hold_dgens; d != NULL; d = d->next) {
		if (d->retired || d->groupno > min_live) {
			continue;
		}
		if (held_del(s, d->row) != 0) {
			return -1;
		}
		d->retired = true;
	}
	return 0;
}

int store_hold_group_start(nmq_store *s)
{
	if (s->hold_gens == NULL && s->hold_dgens == NULL) {
		return 0;
	}
	if (s->hold_final) {
		return store_hold_flush_all(s);
	}
	store_group_peek(s);
	uint64_t now = store_mono_ms();
	for (store_hgen *g = s->hold_gens; g != NULL; g = g->next) {
		if (gen_all_done(s, g)) {
			if (gen_retire(s, g, false) != 0) {
				return -1;
			}
		} else if (now - g->born >= STORE_HOLD_AGE_MS || s->hold_total > STORE_HOLD_MAX) {
			if (gen_retire(s, g, true) != 0) {
				return -1;
			}
		}
	}
	return dgens_retire(s);
}

int store_hold_flush_all(nmq_store *s)
{
	store_hcur *c = &s->hold_cur;
	if (s->hold_gens == NULL && c->n == 0) {
		return 0;
	}
	store_group_peek(s);
	for (store_hgen *g = s->hold_gens; g != NULL; g = g->next) {
		if (!g->retired && gen_retire(s, g, true) != 0) {
			return -1;
		}
	}
	if (dgens_retire(s) != 0) {
		return -1;
	}
	if (c->n > 0) {
		if (flush_ents(s, c->ents, 0, c->ents_len, c->n_cids, c->sids, c->cids, c->cid_at,
		        c->cid_len)
		    != 0) {
			return -1;
		}
		cur_reset(c);
	}
	return 0;
}

// Writes the running group's done records, if a generation may need
// them. 0 or -1.
static int dones_end_group(nmq_store *s)
{
	bool live = s->hold_cur.n > 0;
	for (store_hgen *g = s->hold_gens; g != NULL && !live; g = g->next) {
		live = !g->retired;
	}
	if (s->hold_dlen <= 4 || !live) {
		return 0;
	}
	store_hdgen *d = calloc(1, sizeof(*d));
	if (d == NULL) {
		return 0; // (best effort: acked entries may come back after a crash)
	}
	if (held_put(s, s->hold_dp, s->hold_dlen, &d->row) != 0) {
		free(d);
		return -1;
	}
	s->hold_dpending = d;
	return 0;
}

int store_hold_end_group(nmq_store *s)
{
	store_hcur *c = &s->hold_cur;
	if (dones_end_group(s) != 0) {
		return -1;
	}
	if (c->n == 0) {
		return 0;
	}
	// The generation's record and blob first: without memory for them,
	// the entries are written as rows now instead.
	uint8_t     hdr[16];
	size_t      hl = 4;
	store_hgen *g  = calloc(1, sizeof(*g));
	magic_put(hdr, HOLD_MAGIC);
	hl += store_varint_put(hdr + 4, c->n_cids);
	size_t len = hl + c->cids_len + c->ents_len;
	if (g != NULL) {
		g->p       = malloc(len);
		g->sids    = malloc((size_t)c->n_cids * sizeof(*g->sids));
		g->cid_at  = malloc((size_t)c->n_cids * sizeof(*g->cid_at));
		g->cid_len = malloc((size_t)c->n_cids * sizeof(*g->cid_len));
	}
	if (g == NULL || g->p == NULL || g->sids == NULL || g->cid_at == NULL
	    || g->cid_len == NULL) {
		if (g != NULL) {
			gen_free(g);
		}
		return store_hold_flush_all(s);
	}
	memcpy(g->p, hdr, hl);
	memcpy(g->p + hl, c->cids, c->cids_len);
	memcpy(g->p + hl + c->cids_len, c->ents, c->ents_len);
	memcpy(g->sids, c->sids, (size_t)c->n_cids * sizeof(*g->sids));
	memcpy(g->cid_len, c->cid_len, (size_t)c->n_cids * sizeof(*g->cid_len));
	for (uint32_t i = 0; i < c->n_cids; i++) {
		g->cid_at[i] = c->cid_at[i] + (uint32_t)hl;
	}
	g->len      = len;
	g->ents_off = hl + c->cids_len;
	g->n        = c->n;
	g->n_cids   = c->n_cids;
	g->cursor   = g->ents_off;
	if (held_put(s, g->p, g->len, &g->row) != 0) {
		gen_free(g);
		return -1;
	}
	s->hold_pending = g;
	return 0;
}

void store_hold_after_group(nmq_store *s, bool ok)
{
	cur_reset(&s->hold_cur);
	s->hold_dlen = 0;
	if (!ok) {
		for (store_hdgen *d = s->hold_dgens; d != NULL; d = d->next) {
			d->retired = false;
		}
		free(s->hold_dpending);
		s->hold_dpending = NULL;
		// Nothing of the group is stored: its entries went with its
		// operations (answered as failed), and the generations it
		// retired are still in the file.
		for (store_hgen *g = s->hold_gens; g != NULL; g = g->next) {
			if (g->retired) {
				g->retired = false;
				s->hold_total += g->n;
			}
		}
		if (s->hold_pending != NULL) {
			gen_free(s->hold_pending);
			s->hold_pending = NULL;
		}
		return;
	}
	store_hgen **pp   = &s->hold_gens;
	store_hgen  *last = NULL;
	while (*pp != NULL) {
		store_hgen *g = *pp;
		if (!g->retired) {
			last = g;
			pp   = &g->next;
			continue;
		}
		*pp = g->next;
		gen_free(g);
	}
	uint64_t      no = ++s->hold_groupno;
	store_hdgen **dp = &s->hold_dgens;
	store_hdgen  *dl = NULL;
	while (*dp != NULL) {
		store_hdgen *d = *dp;
		if (!d->retired) {
			dl = d;
			dp = &d->next;
			continue;
		}
		*dp = d->next;
		free(d);
	}
	if (s->hold_dpending != NULL) {
		s->hold_dpending->groupno = no;
		if (dl != NULL) {
			dl->next = s->hold_dpending;
		} else {
			s->hold_dgens = s->hold_dpending;
		}
		s->hold_dpending = NULL;
	}
	store_hgen *g = s->hold_pending;
	if (g != NULL) {
		g->groupno = no;
		g->born    = store_mono_ms();
		s->hold_total += g->n;
		s->hold_pending = NULL;
		if (last != NULL) {
			last->next = g;
		} else {
			s->hold_gens = g;
		}
	}
}

bool store_hold_wait(nmq_store *s)
{
	uint64_t due = s->hold_gens->born + STORE_HOLD_AGE_MS, now = store_mono_ms();
	if (now >= due) {
		return true;
	}
	(void)nmq_cond_wait_until(&s->cv, &s->mtx, due);
	return s->head == NULL && !s->stopping && store_mono_ms() >= due;
}

bool store_hold_pending(const nmq_store *s)
{
	return s->hold_gens != NULL;
}

// At open (main thread): held rows left by a crash become queue rows.

// The done records found at open, sorted by client id.
typedef struct done_rec {
	const char *cid; // in done_buf
	uint16_t    len;
	uint64_t    hi;
} done_rec;

typedef struct expand_run {
	sqlite3      *db;
	sqlite3_stmt *ins, *unref, *gc, *has;
	long          rows, dropped, acked;
	bool          sqlerr; // a statement failed (not a damaged entry)
	done_rec     *dones;
	size_t        n_dones, cap_dones;
	char         *done_buf;
	size_t        done_len, done_cap;
} expand_run;

static int cmp_done(const void *a, const void *b)
{
	const done_rec *x = a, *y = b;
	size_t          n = x->len < y->len ? x->len : y->len;
	int             c = memcmp(x->cid, y->cid, n);
	return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

static int collect_done(void *arg, const char *cid, uint16_t len, uint64_t hi)
{
	expand_run *r = arg;
	if (r->n_dones == r->cap_dones) {
		size_t    cap = r->cap_dones ? r->cap_dones * 2 : 64;
		done_rec *v   = realloc(r->dones, cap * sizeof(*v));
		if (v == NULL) {
			return -1;
		}
		r->dones     = v;
		r->cap_dones = cap;
	}
	if (!grow((uint8_t **)&r->done_buf, &r->done_cap, r->done_len, len)) {
		return -1;
	}
	memcpy(r->done_buf + r->done_len, cid, len);
	// (an offset until the buffer stops moving: fixed up before sorting)
	r->dones[r->n_dones++] = (done_rec) { (const char *)(uintptr_t)r->done_len, len, hi };
	r->done_len += len;
	return 0;
}

// The highest seq of cid done with, by the records found (0: none).
static uint64_t done_of(const expand_run *r, const char *cid, uint16_t len)
{
	done_rec key = { cid, len, 0 };
	size_t   lo = 0, hi = r->n_dones;
	uint64_t best = 0;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int    c   = cmp_done(&r->dones[mid], &key);
		if (c < 0) {
			lo = mid + 1;
		} else if (c > 0) {
			hi = mid;
		} else {
			// Equal ones sit together: the highest of them.
			size_t i = mid;
			while (i > 0 && cmp_done(&r->dones[i - 1], &key) == 0) {
				i--;
			}
			for (; i < r->n_dones && cmp_done(&r->dones[i], &key) == 0; i++) {
				best = r->dones[i].hi > best ? r->dones[i].hi : best;
			}
			return best;
		}
	}
	return 0;
}

static int expand_entry(expand_run *r, const store_hent *e);

static int expand_one(void *arg, const store_hent *e)
{
	expand_run *r   = arg;
	int         ret = expand_entry(r, e);
	r->sqlerr |= ret != 0;
	return ret;
}

static int expand_entry(expand_run *r, const store_hent *e)
{
	if (r->n_dones > 0 && e->seq <= done_of(r, e->cid, e->cid_len)) {
		// Done with before the crash: only its reference goes.
		r->acked++;
		sqlite3_bind_int64(r->unref, 1, e->msg_id);
		int rc = sqlite3_step(r->unref);
		sqlite3_reset(r->unref);
		if (rc != SQLITE_DONE) {
			return -1;
		}
		sqlite3_bind_int64(r->gc, 1, e->msg_id);
		rc = sqlite3_step(r->gc);
		sqlite3_reset(r->gc);
		return rc == SQLITE_DONE ? 0 : -1;
	}
	sqlite3_bind_int64(r->has, 1, e->msg_id);
	int rc = sqlite3_step(r->has);
	sqlite3_reset(r->has);
	if (rc == SQLITE_DONE) {
		r->dropped++; // no such message (a damaged file): nothing to queue
		return 0;
	}
	if (rc != SQLITE_ROW) {
		return -1;
	}
	sqlite3_bind_text(r->ins, 1, e->cid, e->cid_len, SQLITE_STATIC);
	sqlite3_bind_int64(r->ins, 2, (sqlite3_int64)e->seq);
	sqlite3_bind_int64(r->ins, 3, e->msg_id);
	sqlite3_bind_int(r->ins, 4, e->qos);
	sqlite3_bind_int(r->ins, 5, e->retain);
	if (e->n_ids > 0) {
		sqlite3_bind_blob(
		    r->ins, 6, e->ids, (int)(e->n_ids * sizeof(uint32_t)), SQLITE_STATIC);
	}
	rc = sqlite3_step(r->ins);
	sqlite3_reset(r->ins);
	sqlite3_clear_bindings(r->ins);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	if (sqlite3_changes(r->db) == 1) {
		r->rows++;
		return 0;
	}
	// The seq is queued already: give back the entry's reference.
	r->dropped++;
	sqlite3_bind_int64(r->unref, 1, e->msg_id);
	rc = sqlite3_step(r->unref);
	sqlite3_reset(r->unref);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	sqlite3_bind_int64(r->gc, 1, e->msg_id);
	rc = sqlite3_step(r->gc);
	sqlite3_reset(r->gc);
	return rc == SQLITE_DONE ? 0 : -1;
}

long store_hold_expand(sqlite3 *db, const char *path)
{
	expand_run    r   = { .db = db };
	sqlite3_stmt *sel = NULL;
	long          bad = 0, blobs = 0;
	// Most opens find none (a clean stop leaves none): nothing to lock.
	int any = 0;
	if (sqlite3_prepare_v2(db, "SELECT EXISTS (SELECT 1 FROM held)", -1, &sel, NULL)
	    == SQLITE_OK) {
		if (sqlite3_step(sel) == SQLITE_ROW) {
			any = sqlite3_column_int(sel, 0);
		} else {
			any = -1;
		}
	} else {
		any = -1;
	}
	sqlite3_finalize(sel);
	sel = NULL;
	if (any == 0) {
		return 0;
	}
	int  rc   = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	bool open = rc == SQLITE_OK;
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(
		    db, "SELECT id, ents FROM held ORDER BY id", -1, &sel, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(db,
		    "INSERT OR IGNORE INTO queue(cid, seq, msg_id, qos, retain, state, packet_id,"
		    " sub_ids) VALUES (?1, ?2, ?3, ?4, ?5, 0, 0, ?6)",
		    -1, &r.ins, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(
		    db, "UPDATE msgs SET refs = refs - 1 WHERE id = ?1", -1, &r.unref, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(
		    db, "DELETE FROM msgs WHERE id = ?1 AND refs <= 0", -1, &r.gc, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(db, "SELECT 1 FROM msgs WHERE id = ?1", -1, &r.has, NULL);
	}
	// First the done records, then the entries they may cover.
	while (rc == SQLITE_OK && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		const uint8_t *p   = sqlite3_column_blob(sel, 1);
		int            len = sqlite3_column_bytes(sel, 1);
		if (p == NULL || len <= 0 || magic_of(p, (size_t)len) != HOLD_DMAGIC) {
			rc = SQLITE_OK;
			continue;
		}
		size_t before = r.n_dones, before_len = r.done_len;
		if (store_hold_parse_dones(p, (size_t)len, collect_done, &r) < 0) {
			// Damaged: none of its records is used (entries they cover
			// come back: at least once).
			r.n_dones  = before;
			r.done_len = before_len;
			bad++;
			log_error("store",
			    "path=%s event=held_row_damaged row=%lld bytes=%d action=dropped", path,
			    (long long)sqlite3_column_int64(sel, 0), len);
		}
		rc = SQLITE_OK;
	}
	if (rc == SQLITE_DONE) {
		for (size_t i = 0; i < r.n_dones; i++) {
			r.dones[i].cid = r.done_buf + (uintptr_t)r.dones[i].cid;
		}
		if (r.n_dones > 1) {
			qsort(r.dones, r.n_dones, sizeof(*r.dones), cmp_done);
		}
		sqlite3_reset(sel);
		rc = SQLITE_OK;
	}
	while (rc == SQLITE_OK && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		const uint8_t *p   = sqlite3_column_blob(sel, 1);
		int            len = sqlite3_column_bytes(sel, 1);
		if (p != NULL && len > 0 && magic_of(p, (size_t)len) == HOLD_DMAGIC) {
			rc = SQLITE_OK;
			continue;
		}
		blobs++;
		if (p == NULL || len <= 0 || store_hold_parse(p, (size_t)len, expand_one, &r) < 0) {
			if (r.sqlerr) {
				rc = SQLITE_ERROR;
				break;
			}
			// A damaged entry (the blob checks itself): what was written
			// before it stays, the rest of the row is lost.
			bad++;
			log_error("store",
			    "path=%s event=held_row_damaged row=%lld bytes=%d action=dropped", path,
			    (long long)sqlite3_column_int64(sel, 0), len);
		}
		rc = SQLITE_OK;
	}
	if (rc == SQLITE_DONE) {
		sqlite3_reset(sel);
		rc = sqlite3_exec(db, "DELETE FROM held", NULL, NULL, NULL);
	}
	// (The message before the finalizing below resets it.)
	char why[256] = "";
	bool busy     = false;
	bool no_room  = false;
	if (rc != SQLITE_OK) {
		snprintf(why, sizeof(why), "%s", sqlite3_errmsg(db));
		int xcode = sqlite3_extended_errcode(db);
		int code  = xcode & 0xff;
		busy      = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED
		    || code == SQLITE_BUSY || code == SQLITE_LOCKED;
		no_room = store_no_room(rc) || store_no_room(xcode);
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(r.ins);
	sqlite3_finalize(r.unref);
	sqlite3_finalize(r.gc);
	sqlite3_finalize(r.has);
	free(r.dones);
	free(r.done_buf);
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			snprintf(why, sizeof(why), "%s", sqlite3_errmsg(db));
			busy    = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
			no_room = store_no_room(rc) || store_no_room(sqlite3_extended_errcode(db));
		}
	}
	if (rc != SQLITE_OK) {
		log_error("store", "path=%s event=held_restore_failed error=\"%s\"", path, why);
		if (open) {
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		}
		return busy ? -2 : no_room ? -3 : -1;
	}
	if (blobs > 0) {
		log_info("store",
		    "path=%s event=held_restored groups=%ld rows=%ld acked=%ld already_queued=%ld "
		    "damaged=%ld",
		    path, blobs, r.rows, r.acked, r.dropped, bad);
	}
	return r.rows;
}
