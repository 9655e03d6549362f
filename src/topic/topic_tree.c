// The subscription tree: a trie keyed by topic levels, split into shards
// that each carry their own reader-writer lock.
//
// Layout:
// - TT_SHARDS hashed shards plus one wildcard shard. A filter goes to the
//   shard of its first level (hashed), or to the wildcard shard when its
//   first level is '+' or '#'. Shared subscriptions are placed by their
//   real filter.
// - A node holds its exact-level children in a level_table (open
//   addressing, level_table.h) and its '+' and '#' children
//   in two dedicated pointers, so that a match does one table lookup and
//   two pointer tests per level.
// - Subscribers of a node (and members of a share group) are kept in a
//   "subset": parallel arrays of subscriber pointers and options, plus a
//   pointer-hash index once the set is large, so that insert and remove
//   stay O(1) on a filter that has 100k subscribers.
//
// Threading:
// - tt_shard: `lock` (through shard_rdlock/shard_wrlock) guards every node
//   reachable from `root`. `nsubs` is written under the exclusive lock and
//   read without it (to skip empty shards). `gen` is guarded by `tmtx`;
//   `wwait` is atomic.
// - tt_group: `rr` is the only field written under the read lock (atomic).
// - topic_tree: `nfilters` and `nsubs` are atomics written under a shard's
//   exclusive lock and read lock-free; `ops` is immutable.
#include "src/topic/topic_tree.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nng/codec/mqtt_codec.h"
#include "src/topic/level_table.h"

#define TT_SHARD_BITS         5
#define TT_SHARDS             (1u << TT_SHARD_BITS)
#define TT_WILD               TT_SHARDS // index of the wildcard shard
#define TT_INDEX_MIN          32 // a subset gets a pointer index from this capacity
#define TT_STACK_LOCAL        32 // match frames kept on the C stack
#define TT_WRITER_PATIENCE_NS 500000L // before a writer holds readers back

// Parallel arrays of subscribers and their options. `index` (optional; the
// search falls back to a linear scan without it) maps a pointer hash to
// slot + 1, 0 marking an empty entry; its capacity is `icap`.
typedef struct tt_subset {
	void          **subs;
	topic_sub_opts *opts;
	uint32_t       *index;
	uint32_t        n;
	uint32_t        cap;
	uint32_t        icap;
} tt_subset;

typedef struct tt_group {
	tt_subset        members;
	_Atomic uint32_t rr; // round-robin cursor, advanced under the read lock
	uint32_t         nlen;
	char             name[];
} tt_group;

typedef struct tt_node {
	struct tt_node *parent;
	level_table     kids; // exact-level children, keyed by `key`
	struct tt_node *plus; // the '+' child
	struct tt_node *hash; // the '#' child
	tt_group      **groups;
	tt_subset       subs;
	uint32_t        ngroups;
	uint32_t        gcap;
	level_key       key; // in the parent's table (scope NULL); `level` follows
	char            level[];
} tt_node;
LEVEL_KEY_CHECK(tt_node, key, level);

// A shard's lock is a reader-preferring pthread rwlock: readers never queue
// behind one another or behind a waiting writer, so publishers keep flowing
// during a subscribe storm. To keep writers from starving under a steady
// flow of readers, a writer that has waited TT_WRITER_PATIENCE_NS raises
// `wwait`: arriving readers then wait in a turnstile until a writer is
// done, and enter together. A writer thus waits at most its patience plus
// the readers already inside; a reader waits only when a writer starves.
// Without a starving writer, a reader pays one atomic load on top of the
// rwlock.
typedef struct tt_shard {
	alignas(64) pthread_rwlock_t lock;
	_Atomic uint32_t wwait; // starving writers, waiting for or holding `lock`
	pthread_mutex_t  tmtx; // turnstile
	pthread_cond_t   tcv;
	uint64_t         gen; // starving writers done, under tmtx
	tt_node         *root;
	_Atomic size_t   nsubs;
} tt_shard;

struct topic_tree {
	tt_shard       shards[TT_SHARDS + 1];
	topic_tree_ops ops;
	_Atomic size_t nfilters;
	_Atomic size_t nsubs;
};

typedef struct tt_frame {
	const tt_node *node;
	size_t         pos; // offset of the next topic level; > len when consumed
} tt_frame;

// Returns a 32-bit hash of a subscriber pointer.
static uint32_t ptr_hash(const void *p)
{
	uint64_t x = (uint64_t)(uintptr_t)p;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x;
}

// Returns the offset just past the level starting at pos: the next '/' or len.
static size_t level_end(const char *s, size_t len, size_t pos)
{
	const char *p = memchr(s + pos, '/', len - pos);
	return p != NULL ? (size_t)(p - s) : len;
}

// Returns true if the level is exactly the one-character wildcard c.
static bool is_wild(const char *lvl, size_t len, char c)
{
	return len == 1 && lvl[0] == c;
}

bool topic_filter_match(const char *filter, size_t flen, const char *topic, size_t tlen)
{
	if (!mqtt_topic_filter_valid((const uint8_t *)filter, flen) || topic == NULL || tlen == 0) {
		return false;
	}
	if (topic[0] == '$' && (filter[0] == '+' || filter[0] == '#')) {
		return false;
	}
	size_t fp = 0;
	size_t tp = 0;
	for (;;) {
		size_t      fend = level_end(filter, flen, fp);
		const char *fl   = filter + fp;
		size_t      fll  = fend - fp;
		if (is_wild(fl, fll, '#')) {
			return true;
		}
		if (tp > tlen) {
			return false;
		}
		size_t tend = level_end(topic, tlen, tp);
		if (!is_wild(fl, fll, '+')) {
			if (fll != tend - tp || memcmp(fl, topic + tp, fll) != 0) {
				return false;
			}
		}
		fp = fend + 1;
		tp = tend + 1;
		if (fp > flen) {
			return tp > tlen;
		}
	}
}

// Validates a filter as received and splits off a "$share/<group>/"
// prefix (mqtt_share_split): *group is NULL for a plain filter. Returns
// false if the filter is not valid (mqtt_topic_filter_valid).
static bool filter_parse(const char *filter, size_t len, const char **group, size_t *glen,
    const char **real, size_t *rlen)
{
	mqtt_share sh;

	if (!mqtt_topic_filter_valid((const uint8_t *)filter, len)) {
		return false;
	}
	(void)mqtt_share_split((const uint8_t *)filter, len, &sh);
	*group = (const char *)sh.group;
	*glen  = sh.glen;
	*real  = (const char *)sh.filter;
	*rlen  = sh.flen;
	return true;
}

// ---------------------------------------------------------------------------
// Subsets.

// Returns the slot holding sub, or -1 if it is not in the set.
static int64_t subset_find(const tt_subset *ss, const void *sub)
{
	if (ss->index == NULL) {
		for (uint32_t i = 0; i < ss->n; i++) {
			if (ss->subs[i] == sub) {
				return i;
			}
		}
		return -1;
	}
	uint32_t mask = ss->icap - 1;
	for (uint32_t i = ptr_hash(sub) & mask;; i = (i + 1) & mask) {
		uint32_t e = ss->index[i];
		if (e == 0) {
			return -1;
		}
		if (ss->subs[e - 1] == sub) {
			return e - 1;
		}
	}
}

// Records slot in the index (which must exist and have room).
static void subset_index_put(tt_subset *ss, uint32_t slot)
{
	uint32_t mask = ss->icap - 1;
	uint32_t i    = ptr_hash(ss->subs[slot]) & mask;
	while (ss->index[i] != 0) {
		i = (i + 1) & mask;
	}
	ss->index[i] = slot + 1;
}

// Returns the index position that holds slot (which must be indexed).
static uint32_t subset_index_pos(const tt_subset *ss, uint32_t slot)
{
	uint32_t mask = ss->icap - 1;
	uint32_t i    = ptr_hash(ss->subs[slot]) & mask;
	while (ss->index[i] != slot + 1) {
		i = (i + 1) & mask;
	}
	return i;
}

// Removes the index entry of slot, shifting later entries of the probe run
// back so that no tombstone is needed.
static void subset_index_del(tt_subset *ss, uint32_t slot)
{
	uint32_t mask = ss->icap - 1;
	uint32_t i    = subset_index_pos(ss, slot);
	uint32_t j    = i;
	for (;;) {
		j = (j + 1) & mask;
		if (ss->index[j] == 0) {
			break;
		}
		uint32_t k = ptr_hash(ss->subs[ss->index[j] - 1]) & mask;
		// Leave entry j alone if its home k lies cyclically in (i, j].
		bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
		if (stays) {
			continue;
		}
		ss->index[i] = ss->index[j];
		i            = j;
	}
	ss->index[i] = 0;
}

// Rebuilds the index for the current capacity. An allocation failure only
// leaves the set without an index (searched linearly).
static void subset_reindex(tt_subset *ss)
{
	free(ss->index);
	ss->index = NULL;
	ss->icap  = 0;
	if (ss->cap < TT_INDEX_MIN) {
		return;
	}
	uint32_t icap = ss->cap * 2;
	ss->index     = calloc(icap, sizeof(uint32_t));
	if (ss->index == NULL) {
		return;
	}
	ss->icap = icap;
	for (uint32_t i = 0; i < ss->n; i++) {
		subset_index_put(ss, i);
	}
}

// Appends sub to the set. Returns 0, or -1 if memory ran out (the set is
// then unchanged).
static int subset_add(tt_subset *ss, void *sub, const topic_sub_opts *opts)
{
	if (ss->n == ss->cap) {
		if (ss->cap >= UINT32_MAX / 4) {
			return -1;
		}
		uint32_t ncap = ss->cap != 0 ? ss->cap * 2 : 2;
		void   **s    = realloc(ss->subs, ncap * sizeof(*s));
		if (s == NULL) {
			return -1;
		}
		ss->subs          = s;
		topic_sub_opts *o = realloc(ss->opts, ncap * sizeof(*o));
		if (o == NULL) {
			return -1;
		}
		ss->opts = o;
		ss->cap  = ncap;
		subset_reindex(ss);
	}
	uint32_t slot  = ss->n++;
	ss->subs[slot] = sub;
	ss->opts[slot] = *opts;
	if (ss->index != NULL) {
		subset_index_put(ss, slot);
	}
	return 0;
}

// Removes the subscriber in slot, moving the last one into its place, and
// shrinks the arrays when they are mostly empty.
static void subset_del(tt_subset *ss, uint32_t slot)
{
	uint32_t last = ss->n - 1;
	if (ss->index != NULL) {
		subset_index_del(ss, slot);
		if (slot != last) {
			ss->index[subset_index_pos(ss, last)] = slot + 1;
		}
	}
	ss->subs[slot] = ss->subs[last];
	ss->opts[slot] = ss->opts[last];
	ss->n          = last;
	if (ss->n == 0) {
		free(ss->subs);
		free(ss->opts);
		free(ss->index);
		memset(ss, 0, sizeof(*ss));
		return;
	}
	if (ss->cap > 4 && ss->n <= ss->cap / 4) {
		uint32_t ncap = ss->cap / 2;
		void   **s    = realloc(ss->subs, ncap * sizeof(*s));
		if (s != NULL) {
			ss->subs = s;
		}
		topic_sub_opts *o = realloc(ss->opts, ncap * sizeof(*o));
		if (o != NULL) {
			ss->opts = o;
		}
		// A failed shrink keeps the larger block, which is still valid.
		ss->cap = ncap;
		subset_reindex(ss);
	}
}

static void subset_fini(tt_subset *ss)
{
	free(ss->subs);
	free(ss->opts);
	free(ss->index);
	memset(ss, 0, sizeof(*ss));
}

// ---------------------------------------------------------------------------
// Nodes and their child tables.

// Returns a new empty node for the level, or NULL on allocation failure.
static tt_node *node_alloc(tt_node *parent, const char *lvl, size_t len, uint32_t h)
{
	tt_node *n = calloc(1, sizeof(*n) + len + 1);
	if (n == NULL) {
		return NULL;
	}
	n->parent  = parent;
	n->key.h   = h;
	n->key.len = (uint32_t)len;
	if (len > 0) {
		memcpy(n->level, lvl, len);
	}
	return n;
}

static void node_free(tt_node *n)
{
	for (uint32_t i = 0; i < n->ngroups; i++) {
		subset_fini(&n->groups[i]->members);
		free(n->groups[i]);
	}
	free(n->groups);
	subset_fini(&n->subs);
	level_table_fini(&n->kids);
	free(n);
}

// Returns the exact-level child of n, or NULL.
static inline tt_node *kids_find(const tt_node *n, const char *lvl, size_t len, uint32_t h)
{
	level_key *k = level_table_find(&n->kids, NULL, lvl, len, h);
	return k != NULL ? LEVEL_ENTRY(k, tt_node, key) : NULL;
}

// Returns true if the node holds nothing and may be pruned.
static bool node_empty(const tt_node *n)
{
	return n->subs.n == 0 && n->ngroups == 0 && n->kids.n == 0 && n->plus == NULL
	    && n->hash == NULL;
}

// Returns the child of n for the filter level, creating it if needed, or
// NULL if memory ran out.
static tt_node *child_get(tt_node *n, const char *lvl, size_t len)
{
	if (is_wild(lvl, len, '+') || is_wild(lvl, len, '#')) {
		tt_node **slot = lvl[0] == '+' ? &n->plus : &n->hash;
		if (*slot == NULL) {
			*slot = node_alloc(n, lvl, len, 0);
		}
		return *slot;
	}
	uint32_t h = level_hash(NULL, lvl, len);
	tt_node *k = kids_find(n, lvl, len, h);
	if (k != NULL) {
		return k;
	}
	k = node_alloc(n, lvl, len, h);
	if (k == NULL) {
		return NULL;
	}
	if (level_table_add(&n->kids, &k->key) != NMQ_OK) {
		free(k);
		return NULL;
	}
	return k;
}

// Returns the existing child of n for the filter level, or NULL.
static tt_node *child_find(const tt_node *n, const char *lvl, size_t len)
{
	if (is_wild(lvl, len, '+')) {
		return n->plus;
	}
	if (is_wild(lvl, len, '#')) {
		return n->hash;
	}
	return kids_find(n, lvl, len, level_hash(NULL, lvl, len));
}

// Frees empty nodes from n up to (not including) the root.
static void prune(tt_node *n)
{
	while (n->parent != NULL && node_empty(n)) {
		tt_node *p = n->parent;
		if (p->plus == n) {
			p->plus = NULL;
		} else if (p->hash == n) {
			p->hash = NULL;
		} else {
			level_table_del(&p->kids, &n->key);
		}
		node_free(n);
		n = p;
	}
}

// Detaches and returns one child of n, or NULL when it has none. Used only
// to tear a subtree down (n's table is no longer searchable afterwards).
static tt_node *take_child(tt_node *n)
{
	level_key *k = level_table_pop(&n->kids);
	if (k != NULL) {
		return LEVEL_ENTRY(k, tt_node, key);
	}
	tt_node *c = NULL;
	if (n->plus != NULL) {
		c       = n->plus;
		n->plus = NULL;
	} else if (n->hash != NULL) {
		c       = n->hash;
		n->hash = NULL;
	}
	return c;
}

// Frees the subtree rooted at n without recursion.
static void subtree_free(tt_node *n)
{
	tt_node *top = n->parent;
	while (n != top) {
		tt_node *c = take_child(n);
		if (c != NULL) {
			n = c;
			continue;
		}
		tt_node *p = n->parent;
		node_free(n);
		n = p;
	}
}

// Returns the group of n with this name, or NULL.
static tt_group *group_find(const tt_node *n, const char *name, size_t len)
{
	for (uint32_t i = 0; i < n->ngroups; i++) {
		tt_group *g = n->groups[i];
		if (g->nlen == len && memcmp(g->name, name, len) == 0) {
			return g;
		}
	}
	return NULL;
}

// Returns a new empty group attached to n, or NULL if memory ran out.
static tt_group *group_add(tt_node *n, const char *name, size_t len)
{
	if (n->ngroups == n->gcap) {
		uint32_t   ncap = n->gcap != 0 ? n->gcap * 2 : 1;
		tt_group **gs   = realloc(n->groups, ncap * sizeof(*gs));
		if (gs == NULL) {
			return NULL;
		}
		n->groups = gs;
		n->gcap   = ncap;
	}
	tt_group *g = calloc(1, sizeof(*g) + len + 1);
	if (g == NULL) {
		return NULL;
	}
	atomic_init(&g->rr, 0);
	g->nlen = (uint32_t)len;
	memcpy(g->name, name, len);
	n->groups[n->ngroups++] = g;
	return g;
}

// Detaches and frees an (empty) group of n.
static void group_del(tt_node *n, tt_group *g)
{
	for (uint32_t i = 0; i < n->ngroups; i++) {
		if (n->groups[i] == g) {
			n->groups[i] = n->groups[--n->ngroups];
			break;
		}
	}
	if (n->ngroups == 0) {
		free(n->groups);
		n->groups = NULL;
		n->gcap   = 0;
	}
	subset_fini(&g->members);
	free(g);
}

// ---------------------------------------------------------------------------
// Shard locks.

static void shard_rdlock(tt_shard *sh)
{
	if (atomic_load_explicit(&sh->wwait, memory_order_acquire) != 0) {
		pthread_mutex_lock(&sh->tmtx);
		uint64_t g = sh->gen;
		while (
		    atomic_load_explicit(&sh->wwait, memory_order_relaxed) != 0 && sh->gen == g) {
			pthread_cond_wait(&sh->tcv, &sh->tmtx);
		}
		pthread_mutex_unlock(&sh->tmtx);
	}
	pthread_rwlock_rdlock(&sh->lock);
}

static void shard_rdunlock(tt_shard *sh)
{
	pthread_rwlock_unlock(&sh->lock);
}

// Takes the exclusive lock. Returns true if the writer had to raise the
// turnstile (pass the result to shard_wrunlock).
static bool shard_wrlock(tt_shard *sh)
{
	struct timespec ts;

	if (pthread_rwlock_trywrlock(&sh->lock) == 0) {
		return false;
	}
	// CLOCK_REALTIME because that is what sanitizers intercept; a clock
	// step only lengthens or shortens the patience.
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += TT_WRITER_PATIENCE_NS;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (pthread_rwlock_timedwrlock(&sh->lock, &ts) == 0) {
		return false;
	}
	atomic_fetch_add_explicit(&sh->wwait, 1, memory_order_acq_rel);
	pthread_rwlock_wrlock(&sh->lock);
	return true;
}

static void shard_wrunlock(tt_shard *sh, bool gated)
{
	pthread_rwlock_unlock(&sh->lock);
	if (!gated) {
		return;
	}
	pthread_mutex_lock(&sh->tmtx);
	atomic_fetch_sub_explicit(&sh->wwait, 1, memory_order_acq_rel);
	sh->gen++;
	pthread_cond_broadcast(&sh->tcv);
	pthread_mutex_unlock(&sh->tmtx);
}

// Initialises the locks of a shard. Returns 0, or -1 with nothing to undo.
static int shard_init(tt_shard *sh)
{
	atomic_init(&sh->wwait, 0);
	atomic_init(&sh->nsubs, 0);
	sh->gen = 0;
	if (pthread_rwlock_init(&sh->lock, NULL) != 0) {
		return -1;
	}
	if (pthread_mutex_init(&sh->tmtx, NULL) != 0) {
		pthread_rwlock_destroy(&sh->lock);
		return -1;
	}
	if (pthread_cond_init(&sh->tcv, NULL) != 0) {
		pthread_mutex_destroy(&sh->tmtx);
		pthread_rwlock_destroy(&sh->lock);
		return -1;
	}
	return 0;
}

static void shard_fini(tt_shard *sh)
{
	pthread_cond_destroy(&sh->tcv);
	pthread_mutex_destroy(&sh->tmtx);
	pthread_rwlock_destroy(&sh->lock);
}

// ---------------------------------------------------------------------------
// The tree.

// Returns the shard index for a real (non-shared) filter or topic name.
static uint32_t shard_of(const char *s, size_t len, bool filter)
{
	size_t end = level_end(s, len, 0);
	if (filter && (is_wild(s, end, '+') || is_wild(s, end, '#'))) {
		return TT_WILD;
	}
	return level_hash(NULL, s, end) >> (32 - TT_SHARD_BITS);
}

topic_tree *topic_tree_alloc(const topic_tree_ops *ops)
{
	if (ops == NULL || ops->hold == NULL || ops->release == NULL) {
		return NULL;
	}
	size_t      size = (sizeof(topic_tree) + 63) & ~(size_t)63;
	topic_tree *t    = aligned_alloc(64, size);
	if (t == NULL) {
		return NULL;
	}
	memset(t, 0, sizeof(*t));
	t->ops = *ops;
	atomic_init(&t->nfilters, 0);
	atomic_init(&t->nsubs, 0);
	uint32_t i;
	for (i = 0; i <= TT_SHARDS; i++) {
		tt_shard *s = &t->shards[i];
		s->root     = node_alloc(NULL, "", 0, 0);
		if (s->root == NULL) {
			goto fail;
		}
		if (shard_init(s) != 0) {
			free(s->root);
			goto fail;
		}
	}
	return t;

fail:
	while (i-- > 0) {
		shard_fini(&t->shards[i]);
		free(t->shards[i].root);
	}
	free(t);
	return NULL;
}

void topic_tree_free(topic_tree *t)
{
	if (t == NULL) {
		return;
	}
	for (uint32_t i = 0; i <= TT_SHARDS; i++) {
		subtree_free(t->shards[i].root);
		shard_fini(&t->shards[i]);
	}
	free(t);
}

nmq_err topic_tree_insert(topic_tree *t, const char *filter, size_t len, void *sub,
    const topic_sub_opts *opts, bool *existed)
{
	static const topic_sub_opts zero = { 0 };
	const char                 *group;
	size_t                      glen;
	const char                 *real;
	size_t                      rlen;

	if (existed != NULL) {
		*existed = false;
	}
	if (opts == NULL) {
		opts = &zero;
	}
	if (!filter_parse(filter, len, &group, &glen, &real, &rlen)) {
		return NMQ_EINVAL;
	}

	tt_shard *sh    = &t->shards[shard_of(real, rlen, true)];
	bool      gated = shard_wrlock(sh);
	tt_node  *n     = sh->root;
	size_t    pos   = 0;
	for (;;) {
		size_t   end = level_end(real, rlen, pos);
		tt_node *c   = child_get(n, real + pos, end - pos);
		if (c == NULL) {
			goto fail;
		}
		n = c;
		if (end == rlen) {
			break;
		}
		pos = end + 1;
	}

	tt_subset *ss;
	tt_group  *g = NULL;
	if (group != NULL) {
		g = group_find(n, group, glen);
		if (g == NULL) {
			g = group_add(n, group, glen);
			if (g == NULL) {
				goto fail;
			}
		}
		ss = &g->members;
	} else {
		ss = &n->subs;
	}
	int64_t slot = subset_find(ss, sub);
	if (slot >= 0) {
		ss->opts[slot] = *opts;
		if (existed != NULL) {
			*existed = true;
		}
	} else {
		if (subset_add(ss, sub, opts) != 0) {
			if (g != NULL && g->members.n == 0) {
				group_del(n, g);
			}
			goto fail;
		}
		if (ss->n == 1) {
			atomic_fetch_add_explicit(&t->nfilters, 1, memory_order_relaxed);
		}
		atomic_fetch_add_explicit(&t->nsubs, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&sh->nsubs, 1, memory_order_release);
	}
	shard_wrunlock(sh, gated);
	return NMQ_OK;

fail:
	prune(n);
	shard_wrunlock(sh, gated);
	return NMQ_ENOMEM;
}

nmq_err topic_tree_remove(topic_tree *t, const char *filter, size_t len, void *sub)
{
	const char *group;
	size_t      glen;
	const char *real;
	size_t      rlen;

	if (!filter_parse(filter, len, &group, &glen, &real, &rlen)) {
		return NMQ_EINVAL;
	}

	tt_shard *sh    = &t->shards[shard_of(real, rlen, true)];
	nmq_err   rv    = NMQ_ENOENT;
	bool      gated = shard_wrlock(sh);
	tt_node  *n     = sh->root;
	size_t    pos   = 0;
	for (;;) {
		size_t end = level_end(real, rlen, pos);
		n          = child_find(n, real + pos, end - pos);
		if (n == NULL) {
			goto out;
		}
		if (end == rlen) {
			break;
		}
		pos = end + 1;
	}

	tt_group  *g  = NULL;
	tt_subset *ss = &n->subs;
	if (group != NULL) {
		g = group_find(n, group, glen);
		if (g == NULL) {
			goto out;
		}
		ss = &g->members;
	}
	int64_t slot = subset_find(ss, sub);
	if (slot < 0) {
		goto out;
	}
	subset_del(ss, (uint32_t)slot);
	if (ss->n == 0) {
		atomic_fetch_sub_explicit(&t->nfilters, 1, memory_order_relaxed);
		if (g != NULL) {
			group_del(n, g);
		}
	}
	atomic_fetch_sub_explicit(&t->nsubs, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&sh->nsubs, 1, memory_order_relaxed);
	prune(n);
	rv = NMQ_OK;

out:
	shard_wrunlock(sh, gated);
	return rv;
}

// Appends one held result. Returns 0, or -1 if memory ran out (nothing is
// held then).
static int vec_push(
    const topic_tree *t, topic_match_vec *out, void *sub, const topic_sub_opts *opts, bool shared)
{
	if (out->n == out->cap) {
		size_t       ncap = out->cap != 0 ? out->cap * 2 : 16;
		topic_match *v    = realloc(out->v, ncap * sizeof(*v));
		if (v == NULL) {
			return -1;
		}
		out->v   = v;
		out->cap = ncap;
	}
	t->ops.hold(sub);
	topic_match *m = &out->v[out->n++];
	m->sub         = sub;
	m->opts        = *opts;
	m->shared      = shared;
	m->n_alt       = 0;
	m->alt         = false;
	return 0;
}

// Returns the member of g to deliver to: round robin from the group's
// cursor, skipping ineligible members; the cursor's own pick if none is
// eligible. After a skip the cursor is moved past the member picked, so
// that the member following an ineligible one is not favoured.
// Sets *eligible to whether the member picked is eligible (true without an
// eligible op).
static uint32_t group_pick(const topic_tree *t, tt_group *g, bool *eligible)
{
	uint32_t n     = g->members.n;
	uint32_t start = atomic_fetch_add_explicit(&g->rr, 1, memory_order_relaxed) % n;
	*eligible      = true;
	if (t->ops.eligible == NULL) {
		return start;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t m = (start + i) % n;
		if (t->ops.eligible(g->members.subs[m])) {
			if (i > 0) {
				atomic_fetch_add_explicit(&g->rr, i, memory_order_relaxed);
			}
			return m;
		}
	}
	*eligible = false;
	return start;
}

// Appends the stand-ins of pick m of g (see topic_tree_match_stamped) and
// sets the pick's n_alt; the pick is out->v[at]. Returns 0 or -1 if memory
// ran out.
static int emit_alts(const topic_tree *t, const tt_group *g, uint32_t m, bool eligible,
    topic_match_vec *out, size_t at, uint32_t stamp)
{
	uint32_t n     = g->members.n;
	uint8_t  n_alt = 0;
	for (uint32_t i = 1; i < n && n_alt < TOPIC_MATCH_MAX_ALTS; i++) {
		uint32_t k = (m + i) % n;
		if (eligible && t->ops.eligible != NULL && !t->ops.eligible(g->members.subs[k])) {
			continue;
		}
		if (vec_push(t, out, g->members.subs[k], &g->members.opts[k], true) != 0) {
			return -1;
		}
		out->v[out->n - 1].alt = true;
		out->v[at].n_alt       = ++n_alt;
		if (g->members.opts[k].stamp == stamp) {
			break; // this one surely qualifies
		}
	}
	return 0;
}

// Appends the subscriptions of node n. Returns 0 or -1 if memory ran out.
static int emit(const topic_tree *t, const tt_node *n, topic_match_vec *out, uint32_t stamp)
{
	for (uint32_t i = 0; i < n->subs.n; i++) {
		if (vec_push(t, out, n->subs.subs[i], &n->subs.opts[i], false) != 0) {
			return -1;
		}
	}
	for (uint32_t i = 0; i < n->ngroups; i++) {
		tt_group *g = n->groups[i];
		bool      eligible;
		uint32_t  m = group_pick(t, g, &eligible);
		if (vec_push(t, out, g->members.subs[m], &g->members.opts[m], true) != 0) {
			return -1;
		}
		if (stamp != 0 && g->members.opts[m].stamp != stamp
		    && emit_alts(t, g, m, eligible, out, out->n - 1, stamp) != 0) {
			return -1;
		}
	}
	return 0;
}

// Matches the topic against one shard, depth first with an explicit stack.
// Returns 0 or -1 if memory ran out.
static int shard_match(const topic_tree *t, tt_shard *sh, const char *topic, size_t len,
    topic_match_vec *out, uint32_t stamp)
{
	if (atomic_load_explicit(&sh->nsubs, memory_order_acquire) == 0) {
		return 0;
	}
	tt_frame  local[TT_STACK_LOCAL];
	tt_frame *stk = local;
	size_t    cap = TT_STACK_LOCAL;
	size_t    sp  = 0;
	int       rv  = 0;

	shard_rdlock(sh);
	stk[sp++] = (tt_frame) { sh->root, 0 };
	while (sp > 0) {
		tt_frame f = stk[--sp];
		if (f.node->hash != NULL && emit(t, f.node->hash, out, stamp) != 0) {
			rv = -1;
			break;
		}
		if (f.pos > len) {
			if (emit(t, f.node, out, stamp) != 0) {
				rv = -1;
				break;
			}
			continue;
		}
		size_t   end = level_end(topic, len, f.pos);
		size_t   l   = end - f.pos;
		tt_node *k
		    = kids_find(f.node, topic + f.pos, l, level_hash(NULL, topic + f.pos, l));
		if (sp + 2 > cap) {
			tt_frame *ns = stk == local ? malloc(2 * cap * sizeof(*ns))
			                            : realloc(stk, 2 * cap * sizeof(*ns));
			if (ns == NULL) {
				rv = -1;
				break;
			}
			if (stk == local) {
				memcpy(ns, local, sizeof(local));
			}
			stk = ns;
			cap *= 2;
		}
		if (k != NULL) {
			stk[sp++] = (tt_frame) { k, end + 1 };
		}
		if (f.node->plus != NULL) {
			stk[sp++] = (tt_frame) { f.node->plus, end + 1 };
		}
	}
	shard_rdunlock(sh);
	if (stk != local) {
		free(stk);
	}
	return rv;
}

nmq_err topic_tree_match_stamped(
    topic_tree *t, const char *topic, size_t len, topic_match_vec *out, uint32_t stamp)
{
	if (topic == NULL || len == 0) {
		return NMQ_OK;
	}
	if (shard_match(t, &t->shards[shard_of(topic, len, false)], topic, len, out, stamp) != 0) {
		return NMQ_ENOMEM;
	}
	if (topic[0] == '$') {
		return NMQ_OK;
	}
	if (shard_match(t, &t->shards[TT_WILD], topic, len, out, stamp) != 0) {
		return NMQ_ENOMEM;
	}
	return NMQ_OK;
}

nmq_err topic_tree_match(topic_tree *t, const char *topic, size_t len, topic_match_vec *out)
{
	return topic_tree_match_stamped(t, topic, len, out, 0);
}

size_t topic_tree_filter_count(topic_tree *t)
{
	return atomic_load_explicit(&t->nfilters, memory_order_relaxed);
}

size_t topic_tree_sub_count(topic_tree *t)
{
	return atomic_load_explicit(&t->nsubs, memory_order_relaxed);
}

typedef struct tt_walk_frame {
	const tt_node *node;
	int            depth;
} tt_walk_frame;

// Walks one shard under its read lock. scratch/scap carry the subscriber
// buffer across shards. Returns -1 if memory for the walk stack ran out
// (the walk of this shard stops there), else 0.
static int shard_walk(tt_shard *sh, topic_tree_walk_cb cb, void *arg, void ***scratch, size_t *scap)
{
	tt_walk_frame *stk = NULL;
	size_t         cap = 0;
	size_t         sp  = 0;
	int            rv  = 0;

	shard_rdlock(sh);
	const tt_node *r     = sh->root;
	int            depth = 1;
	for (;;) {
		// Push the children of r: the root first, then each node visited.
		size_t need = sp + r->kids.n + 2;
		if (need > cap) {
			size_t         ncap = need * 2;
			tt_walk_frame *ns   = realloc(stk, ncap * sizeof(*ns));
			if (ns == NULL) {
				rv = -1;
				break;
			}
			stk = ns;
			cap = ncap;
		}
		for (uint32_t i = 0; i < r->kids.cap; i++) {
			if (r->kids.slots[i] != NULL) {
				stk[sp++]
				    = (tt_walk_frame) { LEVEL_ENTRY(r->kids.slots[i], tt_node, key),
					      depth };
			}
		}
		if (r->plus != NULL) {
			stk[sp++] = (tt_walk_frame) { r->plus, depth };
		}
		if (r->hash != NULL) {
			stk[sp++] = (tt_walk_frame) { r->hash, depth };
		}
		if (sp == 0) {
			break;
		}
		sp--;
		const tt_node *n  = stk[sp].node;
		int            d  = stk[sp].depth;
		void *const   *ss = (void *const *)n->subs.subs;
		size_t         ns = n->subs.n;
		if (n->ngroups > 0) {
			size_t total = ns;
			for (uint32_t i = 0; i < n->ngroups; i++) {
				total += n->groups[i]->members.n;
			}
			if (total > *scap) {
				void **b = realloc(*scratch, total * sizeof(*b));
				if (b != NULL) {
					*scratch = b;
					*scap    = total;
				}
			}
			// Without memory for the copy, only the plain subscribers
			// are reported.
			if (total <= *scap) {
				void **b = *scratch;
				if (ns > 0) {
					memcpy(b, n->subs.subs, ns * sizeof(*b));
				}
				for (uint32_t i = 0; i < n->ngroups; i++) {
					tt_subset *m = &n->groups[i]->members;
					memcpy(b + ns, m->subs, m->n * sizeof(*b));
					ns += m->n;
				}
				ss = (void *const *)b;
			}
		}
		size_t nc = n->kids.n + (n->plus != NULL) + (n->hash != NULL);
		cb(arg, n->level, n->key.len, d, nc, ss, ns);
		r     = n;
		depth = d + 1;
	}
	shard_rdunlock(sh);
	free(stk);
	return rv;
}

void topic_tree_walk(topic_tree *t, topic_tree_walk_cb cb, void *arg)
{
	void **scratch = NULL;
	size_t scap    = 0;
	for (uint32_t i = 0; i <= TT_SHARDS; i++) {
		(void)shard_walk(&t->shards[i], cb, arg, &scratch, &scap);
	}
	free(scratch);
}

void topic_match_vec_init(topic_match_vec *mv)
{
	mv->v   = NULL;
	mv->n   = 0;
	mv->cap = 0;
}

void topic_match_vec_clear(topic_match_vec *mv, const topic_tree_ops *ops)
{
	if (ops != NULL && ops->release != NULL) {
		for (size_t i = 0; i < mv->n; i++) {
			ops->release(mv->v[i].sub);
		}
	}
	mv->n = 0;
}

void topic_match_vec_fini(topic_match_vec *mv, const topic_tree_ops *ops)
{
	topic_match_vec_clear(mv, ops);
	free(mv->v);
	topic_match_vec_init(mv);
}
