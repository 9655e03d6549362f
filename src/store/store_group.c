// Making one group commit cheap (store thread only): operations that
// cancel out inside the group are not written, and message reference
// counts are summed per message and written once per group. See
// docs/decisions/0020-store-group-coalescing.md.
//
// Why dropping operations is safe: a group is one transaction, so after
// any commit the database holds the state that applying every operation
// of the committed groups in order gives; a crash loses whole groups,
// never part of one. Within a group,
// - QUEUE_PUT then QUEUE_DEL of the same (client id, seq): the row would
//   not exist at the commit, so neither is written (nor its message row,
//   unless another row references it);
// - QUEUE_PUT then QUEUE_STATE: the row is inserted with that state;
// - QUEUE_STATE then QUEUE_STATE or QUEUE_DEL: only the later one counts.
// A SESSION_DEL or QUEUE_READ (which read or delete rows of a session
// by SQL) ends what can be paired: later operations are not paired with
// earlier ones.
// - QUEUE_DONE (sid, lo, hi): its session says no seq <= hi of it is
//   wanted any more (decisions/0026). It range-deletes the committed
//   rows, and every put, state update or delete of sid with a seq <= hi,
//   in this group or a later one, is not written: a done range may have
//   grown (while queued) past puts queued after it.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "src/store/store_int.h"

// One (client id, seq) key of the running group (a session's number
// instead of its client id when the operation has one: no string work) and the operation that
// holds its state so far (NULL after a pair cancelled out).
struct store_ckey {
	const char *cid;
	uint32_t    sid; // 0: keyed by cid
	uint64_t    seq;
	uint64_t    hash;
	uint32_t    gen; // entries of an older generation are free
	store_op   *op;
	uint32_t    idx; // the row of an OP_QUEUE_PUTM op, else UINT32_MAX
};

// One message row touched by the running group and the references it
// gained (> 0) or lost (< 0) since the group began.
struct store_rref {
	int64_t id;
	int64_t delta;
};

static uint64_t key_hash(const char *cid, uint32_t sid, uint64_t seq)
{
	if (sid != 0) {
		uint64_t h = ((uint64_t)sid << 40 ^ seq) * 0x9E3779B97F4A7C15ull;
		return h ^ (h >> 31);
	}
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)cid; *p != '\0'; p++) {
		h = (h ^ *p) * 1099511628211ull;
	}
	h ^= seq * 0x9E3779B97F4A7C15ull;
	return h ^ (h >> 29);
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 64;
	while (c < n) {
		c *= 2;
	}
	return c;
}

// Finds the entry of (cid, seq) in the current generation, or the free
// slot where it would go (*found false). NULL only if the table is full,
// which the sizing rules out.
static struct store_ckey *ckey_find(
    nmq_store *s, const char *cid, uint32_t sid, uint64_t seq, uint64_t h, bool *found)
{
	size_t             mask      = s->ckeys_cap - 1;
	struct store_ckey *free_slot = NULL;
	for (size_t i = h & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
		struct store_ckey *k = &s->ckeys[i];
		if (k->cid == NULL) {
			*found = false;
			return free_slot != NULL ? free_slot : k;
		}
		if (k->gen != s->ckeys_gen) {
			if (free_slot == NULL) {
				free_slot = k;
			}
			continue;
		}
		if (k->hash == h && k->seq == seq && k->sid == sid
		    && (sid != 0 || strcmp(k->cid, cid) == 0)) {
			*found = true;
			return k;
		}
	}
	*found = false;
	return free_slot;
}

int store_group_begin(nmq_store *s, size_t n_ops)
{
	// The pairs' table at a load of at most 2/3 (linear probing), the
	// reference counts' at most 1/2 (store_group_ref). A group is at most
	// flush_max rows and the rest of its last store_batch, so a group of
	// just over a power of two does not get a table of twice the size.
	size_t want  = pow2_at_least(n_ops + n_ops / 2);
	size_t rwant = pow2_at_least(n_ops * 2);
	// Clear what the last group used (not the whole table).
	for (size_t i = 0; i < s->ckeys_len; i++) {
		s->ckeys[s->ckeys_used[i]].cid = NULL;
	}
	s->ckeys_len = 0;
	unsigned oom = atomic_load(&s->test_group_oom);
	if (oom > 0) {
		atomic_store(&s->test_group_oom, oom - 1);
		return -1;
	}
	if (want > s->ckeys_cap) {
		struct store_ckey *v = malloc(want * sizeof(*v));
		uint32_t          *u = malloc(want * sizeof(*u));
		if (v == NULL || u == NULL) {
			free(v);
			free(u);
			return -1;
		}
		memset(v, 0, want * sizeof(*v));
		free(s->ckeys);
		free(s->ckeys_used);
		s->ckeys      = v;
		s->ckeys_used = u;
		s->ckeys_cap  = want;
	}
	s->ckeys_gen = 1;
	if (rwant > s->rrefs_cap) {
		struct store_rref *v = realloc(s->rrefs, rwant * sizeof(*v));
		uint32_t          *u = realloc(s->rrefs_used, rwant * sizeof(*u));
		if (v != NULL) {
			s->rrefs = v;
		}
		if (u != NULL) {
			s->rrefs_used = u;
		}
		if (v == NULL || u == NULL) {
			return -1;
		}
		s->rrefs_cap = rwant;
		memset(s->rrefs, 0, rwant * sizeof(*s->rrefs));
	}
	s->rrefs_len = 0;
	return 0;
}

// Takes slot k of the table for the key (cid, sid, seq), held by row idx
// of op (an OP_QUEUE_PUTM) or by op itself (idx UINT32_MAX).
static void ckey_take(nmq_store *s, struct store_ckey *k, const char *cid, uint32_t sid,
    uint64_t seq, uint64_t h, store_op *op, uint32_t idx)
{
	if (k->cid == NULL) {
		s->ckeys_used[s->ckeys_len++] = (uint32_t)(k - s->ckeys);
	}
	*k = (struct store_ckey) { cid, sid, seq, h, s->ckeys_gen, op, idx };
}

static inline bool key_is_put(const struct store_ckey *k)
{
	return k->op->kind == OP_QUEUE_PUT || k->op->kind == OP_QUEUE_PUTM;
}

// Marks what holds the key's state as not to be written.
static inline void key_skip(struct store_ckey *k)
{
	if (k->op->kind == OP_QUEUE_PUTM) {
		k->op->ents[k->idx].skip = true;
	} else {
		k->op->skip = true;
	}
}

// One put, state update or removal of (cid, sid, seq): op itself, or row
// idx of an OP_QUEUE_PUTM (kind OP_QUEUE_PUT).
static void pair_one(nmq_store *s, store_op *op, uint32_t idx, uint8_t kind, const char *cid,
    uint32_t sid, uint64_t seq)
{
	bool               found;
	uint64_t           h = key_hash(cid, sid, seq);
	struct store_ckey *k = ckey_find(s, cid, sid, seq, h, &found);
	if (k == NULL) {
		return;
	}
	if (!found) {
		if (kind != OP_QUEUE_DEL) {
			ckey_take(s, k, cid, sid, seq, h, op, idx);
		}
		return;
	}
	if (k->op == NULL) {
		// The key's earlier operations cancelled out.
		if (kind != OP_QUEUE_DEL) {
			k->op  = op;
			k->idx = idx;
		}
		return;
	}
	switch (kind) {
	case OP_QUEUE_PUT:
		// A second put of a stored seq fails at apply (the first is
		// kept): left as it is.
		break;
	case OP_QUEUE_STATE:
		if (k->op->kind == OP_QUEUE_PUTM) {
			k->op->ents[k->idx].state = op->state;
			k->op->ents[k->idx].pid   = op->pid;
			k->op->ents[k->idx].srv   = op->srv;
			op->skip                  = true;
		} else if (k->op->kind == OP_QUEUE_PUT) {
			k->op->state = op->state;
			k->op->pid   = op->pid;
			k->op->srv   = op->srv;
			op->skip     = true;
		} else {
			k->op->skip = true; // an earlier state, overwritten
			k->op       = op;
			k->idx      = idx;
		}
		break;
	case OP_QUEUE_DEL:
		key_skip(k);
		if (key_is_put(k)) {
			op->skip = true; // the row never reaches the file
		}
		k->op = NULL;
		break;
	default:
		break;
	}
}

// The highest seq of session sid done with (OP_QUEUE_DONE), kept across
// groups: open addressing by sid, deleted with backward shifts.
// With it, what the store thread wrote of sid this run (see
// store_group_note_row): the lowest seq of it written or held (floor, 0:
// none) and the highest written as a queue row (row_hi).
struct store_done {
	uint32_t sid; // 0: free
	uint64_t hi;
	uint64_t floor, row_hi;
};

static size_t done_home(const nmq_store *s, uint32_t sid)
{
	return ((uint64_t)sid * 0x9E3779B97F4A7C15ull >> 20) & (s->dones_cap - 1);
}

static size_t done_slot(const nmq_store *s, uint32_t sid)
{
	size_t mask = s->dones_cap - 1;
	size_t i    = done_home(s, sid);
	while (s->dones[i].sid != 0 && s->dones[i].sid != sid) {
		i = (i + 1) & mask;
	}
	return i;
}

// The seqs of sid at or below the returned one are done with (0: none).
static uint64_t done_hi(const nmq_store *s, uint32_t sid)
{
	if (sid == 0 || s->dones_len == 0) {
		return 0;
	}
	return s->dones[done_slot(s, sid)].hi;
}

// sid's entry, added if missing (NULL when out of memory).
static struct store_done *done_get(nmq_store *s, uint32_t sid)
{
	if ((s->dones_len + 1) * 2 > s->dones_cap) {
		size_t             cap = s->dones_cap ? s->dones_cap * 2 : 256;
		struct store_done *old = s->dones, *v = calloc(cap, sizeof(*v));
		if (v == NULL) {
			return NULL; // later puts of the range are then written, and stay
		}
		size_t n     = s->dones_cap;
		s->dones     = v;
		s->dones_cap = cap;
		for (size_t i = 0; i < n; i++) {
			if (old[i].sid != 0) {
				s->dones[done_slot(s, old[i].sid)] = old[i];
			}
		}
		free(old);
	}
	struct store_done *d = &s->dones[done_slot(s, sid)];
	if (d->sid == 0) {
		*d = (struct store_done) { .sid = sid };
		s->dones_len++;
	}
	return d;
}

static void done_set(nmq_store *s, uint32_t sid, uint64_t hi)
{
	struct store_done *d = done_get(s, sid);
	if (d != NULL && hi > d->hi) {
		d->hi = hi;
	}
}

void store_group_note_row(nmq_store *s, uint32_t sid, uint64_t seq, bool written)
{
	if (sid == 0) {
		return;
	}
	struct store_done *d = done_get(s, sid);
	if (d == NULL) {
		return;
	}
	if (d->floor == 0 || seq < d->floor) {
		d->floor = seq;
	}
	if (written && seq > d->row_hi) {
		d->row_hi = seq;
	}
}

bool store_group_range_empty(const nmq_store *s, uint32_t sid, uint64_t lo)
{
	if (sid == 0 || s->dones_len == 0) {
		return false;
	}
	const struct store_done *d = &s->dones[done_slot(s, sid)];
	return d->sid == sid && d->floor != 0 && lo >= d->floor && lo > d->row_hi;
}

static void done_forget(nmq_store *s, uint32_t sid)
{
	if (sid == 0 || s->dones_len == 0) {
		return;
	}
	size_t mask = s->dones_cap - 1;
	size_t i    = done_slot(s, sid);
	if (s->dones[i].sid == 0) {
		return;
	}
	s->dones[i].sid = 0;
	s->dones_len--;
	// Backward shift: entries after the hole that probed past it move up.
	for (size_t j = (i + 1) & mask; s->dones[j].sid != 0; j = (j + 1) & mask) {
		size_t home = done_home(s, s->dones[j].sid);
		if (((j - home) & mask) >= ((j - i) & mask)) {
			s->dones[i]     = s->dones[j];
			s->dones[j].sid = 0;
			i               = j;
		}
	}
}

// The largest range whose seqs are paired one by one: a longer one is
// only range-deleted (a put of the group inside it is written, then
// deleted: the same commit, at a higher cost).
#define PAIR_RANGE_MAX 4096

void store_group_pair_ranges(nmq_store *s, store_op *op)
{
	// As OP_QUEUE_DEL, seq by seq: a put or state update of the group
	// before it is not written (the range still runs: one statement).
	if (s->ckeys_len == 0) {
		return; // nothing before it in the group to pair with
	}
	for (uint32_t r = 0; r < op->u32; r++) {
		uint64_t lo = op->data[2 * r], hi = op->data[2 * r + 1];
		if (hi < lo || hi - lo >= PAIR_RANGE_MAX) {
			continue;
		}
		for (uint64_t seq = lo;; seq++) {
			bool               found;
			struct store_ckey *k
			    = ckey_find(s, op->s1, 0, seq, key_hash(op->s1, 0, seq), &found);
			if (k != NULL && found && k->op != NULL) {
				key_skip(k);
				k->op = NULL;
			}
			if (seq == hi) {
				break;
			}
		}
	}
}

// What the group's OP_QUEUE_DONE say (a range may have grown past puts
// queued after it, even into a later group: those puts are dropped
// wherever they are), and the sessions deleted.
static void note_marks(nmq_store *s, store_op *batch)
{
	for (store_op *op = batch; op != NULL; op = op->next) {
		if (op->kind == OP_QUEUE_DONE) {
			done_set(s, op->sid, op->u64b);
		} else if (op->kind == OP_SESSION_DEL) {
			done_forget(s, op->sid);
		}
	}
}

bool store_group_is_done(const nmq_store *s, uint32_t sid, uint64_t seq)
{
	return sid != 0 && seq <= done_hi(s, sid);
}

void store_group_dones_only(nmq_store *s, store_op *batch, bool marks)
{
	if (marks) {
		note_marks(s, batch);
	}
	if (s->dones_len == 0) {
		return;
	}
	for (store_op *op = batch; op != NULL; op = op->next) {
		if (op->kind == OP_QUEUE_PUTM) {
			for (uint32_t i = 0; i < op->u32; i++) {
				store_qent *q = &op->ents[i];
				q->skip |= store_group_is_done(s, q->sid, q->seq);
			}
		} else if (op->kind == OP_QUEUE_PUT || op->kind == OP_QUEUE_STATE
		    || op->kind == OP_QUEUE_DEL) {
			op->skip |= store_group_is_done(s, op->sid, op->u64);
		}
	}
}

// Why this is safe: such a range covers only seqs its session no longer
// wants (each acked by its subscriber, or dropped), the same promise its
// operation makes when it reaches a group; a put of such a seq that is
// not written leaves the committed state as if the range had been in
// the put's group (the put and its removal cancel out, decisions/0020).
void store_group_peek(nmq_store *s)
{
	uint32_t gen = atomic_load_explicit(&s->pdone_gen, memory_order_acquire);
	if (gen == s->pdone_seen) {
		return;
	}
	pthread_mutex_lock(&s->mtx);
	s->pdone_seen = atomic_load_explicit(&s->pdone_gen, memory_order_relaxed);
	for (uint32_t i = 0; i < s->pdone_len; i++) {
		done_set(s, s->pdone[i].sid, s->pdone[i].hi);
	}
	pthread_mutex_unlock(&s->mtx);
}

// Whether the group holds an operation that can cancel or fold an
// earlier put (a state update or a delete by seq).
static bool group_pairs(const store_op *batch)
{
	for (const store_op *op = batch; op != NULL; op = op->next) {
		switch (op->kind) {
		case OP_QUEUE_STATE:
		case OP_QUEUE_DEL:
		case OP_QUEUE_DEL_MANY:
		case OP_QUEUE_DEL_RANGES:
			return true;
		default:
			break;
		}
	}
	return false;
}

void store_group_coalesce(nmq_store *s, store_op *batch, bool marks)
{
	if (!group_pairs(batch)) {
		// Only puts (a flood into offline sessions): nothing to pair,
		// the done ranges still apply.
		store_group_dones_only(s, batch, marks);
		return;
	}
	if (marks) {
		note_marks(s, batch);
	}
	for (store_op *op = batch; op != NULL; op = op->next) {
		switch (op->kind) {
		case OP_SESSION_DEL:
		case OP_QUEUE_READ:
			// Rows of a session are read or deleted by SQL here: nothing
			// before is paired with anything after.
			s->ckeys_gen++;
			break;
		case OP_QUEUE_DEL_MANY:
			// As OP_QUEUE_DEL, seq by seq; a seq whose put is in the
			// group becomes 0 (nothing to delete).
			for (uint32_t i = 0; i < op->u32; i++) {
				bool               found;
				struct store_ckey *k = ckey_find(s, op->s1, 0, op->data[i],
				    key_hash(op->s1, 0, op->data[i]), &found);
				if (k == NULL || !found || k->op == NULL) {
					continue;
				}
				key_skip(k);
				if (key_is_put(k)) {
					op->data[i] = 0;
				}
				k->op = NULL;
			}
			break;
		case OP_QUEUE_DEL_RANGES:
			store_group_pair_ranges(s, op);
			break;
		case OP_QUEUE_PUTM:
			for (uint32_t i = 0; i < op->u32; i++) {
				store_qent *q = &op->ents[i];
				if (q->sid != 0 && q->seq <= done_hi(s, q->sid)) {
					q->skip = true; // done with before it is written
					continue;
				}
				pair_one(
				    s, op, i, OP_QUEUE_PUT, op->arena + q->cid_off, q->sid, q->seq);
			}
			break;
		case OP_QUEUE_PUT:
		case OP_QUEUE_STATE:
		case OP_QUEUE_DEL:
			if (op->sid != 0 && op->u64 <= done_hi(s, op->sid)) {
				op->skip = true; // the row is (or will be) range-deleted
				break;
			}
			pair_one(s, op, UINT32_MAX, op->kind, op->s1, op->sid, op->u64);
			break;
		default:
			break;
		}
	}
}

static struct store_rref *rref_slot(nmq_store *s, int64_t id, bool *found)
{
	size_t mask = s->rrefs_cap - 1;
	size_t i    = ((uint64_t)id * 0x9E3779B97F4A7C15ull >> 17) & mask;
	for (size_t n = 0; n <= mask; i = (i + 1) & mask, n++) {
		struct store_rref *r = &s->rrefs[i];
		if (r->id == id) {
			*found = true;
			return r;
		}
		if (r->id == 0) {
			*found = false;
			return r;
		}
	}
	*found = false;
	return NULL;
}

// Records delta references for row id. Returns 1 when the row was already
// touched by this group (it exists: rows are deleted only at the flush),
// 0 when it is new to the group, -1 if the table is full.
int store_group_ref(nmq_store *s, int64_t id, int64_t delta)
{
	bool               found;
	struct store_rref *r = rref_slot(s, id, &found);
	if (r == NULL || (!found && s->rrefs_len * 2 >= s->rrefs_cap)) {
		return -1;
	}
	if (found) {
		r->delta += delta;
		return 1;
	}
	r->id                         = id;
	r->delta                      = delta;
	s->rrefs_used[s->rrefs_len++] = (uint32_t)(r - s->rrefs);
	return 0;
}

static int cmp_id(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

// Runs a statement on the message rows [lo, hi]. Returns the rows it
// changed, or -1.
static int64_t range_step(nmq_store *s, enum store_stmt i, int64_t lo, int64_t hi)
{
	sqlite3_stmt *st = store_stmt(s, i);
	sqlite3_bind_int64(st, 1, lo);
	sqlite3_bind_int64(st, 2, hi);
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? (int64_t)sqlite3_changes(s->db) : -1;
}

// The rows that lose exactly one reference and whose ids follow each
// other (a drained backlog's messages were stored one after another): one
// DELETE per run of ids for those left without reference, and an UPDATE
// only when the run held rows still referenced. Their entries are marked
// done (delta 0). Returns 0 or -1.
static int flush_runs(nmq_store *s)
{
	int64_t *ids = malloc(s->rrefs_len * sizeof(*ids));
	size_t   n   = 0;
	if (ids == NULL) {
		return 0; // row by row instead
	}
	for (size_t i = 0; i < s->rrefs_len; i++) {
		struct store_rref *r = &s->rrefs[s->rrefs_used[i]];
		if (r->delta == -1) {
			ids[n++] = r->id;
		}
	}
	qsort(ids, n, sizeof(*ids), cmp_id);
	int ret = 0;
	for (size_t i = 0; ret == 0 && i < n;) {
		size_t j = i + 1;
		while (j < n && ids[j] == ids[j - 1] + 1) {
			j++;
		}
		if (j - i >= 2) {
			int64_t del = range_step(s, STMT_MSG_DEL_RANGE, ids[i], ids[j - 1]);
			if (del < 0
			    || (del < (int64_t)(j - i)
			        && range_step(s, STMT_MSG_UNREF_RANGE, ids[i], ids[j - 1]) < 0)) {
				ret = -1;
			}
			for (size_t k = i; k < j; k++) {
				bool found;
				rref_slot(s, ids[k], &found)->delta = 0;
			}
		}
		i = j;
	}
	free(ids);
	return ret;
}

int store_group_flush_refs(nmq_store *s)
{
	int ret = s->rrefs_len >= 2 ? flush_runs(s) : 0;
	for (size_t i = 0; i < s->rrefs_len; i++) {
		struct store_rref *r = &s->rrefs[s->rrefs_used[i]];
		if (ret == 0 && r->delta < 0) {
			// Most rows lose their last reference: one DELETE, and the
			// UPDATE only if the row is still referenced.
			sqlite3_stmt *st = store_stmt(s, STMT_MSG_DEL_LAST);
			sqlite3_bind_int64(st, 1, r->id);
			sqlite3_bind_int64(st, 2, r->delta);
			int rc = sqlite3_step(st);
			sqlite3_reset(st);
			if (rc != SQLITE_DONE) {
				ret = -1;
			} else if (sqlite3_changes(s->db) == 1) {
				r->delta = 0;
			}
		}
		if (ret == 0 && r->delta != 0) {
			sqlite3_stmt *st = store_stmt(s, STMT_MSG_ADD);
			sqlite3_bind_int64(st, 1, r->id);
			sqlite3_bind_int64(st, 2, r->delta);
			int64_t refs = 1;
			int     rc   = sqlite3_step(st);
			if (rc == SQLITE_ROW) {
				refs = sqlite3_column_int64(st, 0);
				rc   = sqlite3_step(st);
			}
			sqlite3_reset(st);
			if (rc != SQLITE_DONE) {
				ret = -1;
			} else if (refs <= 0) {
				st = store_stmt(s, STMT_MSG_DEL);
				sqlite3_bind_int64(st, 1, r->id);
				rc = sqlite3_step(st);
				sqlite3_reset(st);
				if (rc != SQLITE_DONE) {
					ret = -1;
				}
			}
		}
		r->id    = 0;
		r->delta = 0;
	}
	s->rrefs_len = 0;
	return ret;
}

void store_group_shrink(nmq_store *s, size_t keep)
{
	if (s->ckeys_cap > keep) {
		free(s->ckeys);
		free(s->ckeys_used);
		s->ckeys      = NULL;
		s->ckeys_used = NULL;
		s->ckeys_cap  = 0;
		s->ckeys_len  = 0;
	}
	if (s->rrefs_cap > keep) {
		free(s->rrefs);
		free(s->rrefs_used);
		s->rrefs      = NULL;
		s->rrefs_used = NULL;
		s->rrefs_cap  = 0;
		s->rrefs_len  = 0;
	}
}

void store_group_forget(nmq_store *s)
{
	for (size_t i = 0; i < s->rrefs_len; i++) {
		s->rrefs[s->rrefs_used[i]] = (struct store_rref) { 0, 0 };
	}
	s->rrefs_len = 0;
}
