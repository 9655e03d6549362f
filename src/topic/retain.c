// The retained-message store: a trie by topic level under one rwlock.
//
// Layout:
// - Every node links its children in a doubly linked sibling list, used by
//   '+' and '#', which must visit all of them anyway.
// - Exact lookups go through one level_table (level_table.h, shared with
//   the subscription tree) for the whole store, keyed by (parent node,
//   level): a topic name costs one probe per level whatever the fan-out of
//   the tree.
// - Empty nodes (no message, no child) are pruned as soon as they appear.
//
// Threading: `lock` guards every field but `nmsgs`, which is an atomic
// written under the exclusive lock and read lock-free. `ops` is immutable.
#include "src/topic/retain.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "src/topic/level_table.h"

#define RT_STACK_LOCAL 32

typedef struct rt_node {
	struct rt_node *parent;
	struct rt_node *first; // first child
	struct rt_node *next; // next sibling
	struct rt_node *prev; // previous sibling
	void           *msg; // retained message (a reference), or NULL
	level_key       key; // the edge (parent, level) in the store's table
	char            level[];
} rt_node;
LEVEL_KEY_CHECK(rt_node, key, level);

struct retain_store {
	pthread_rwlock_t lock;
	retain_ops       ops;
	rt_node         *root;
	level_table      edges; // every node but the root, by (parent, level)
	_Atomic size_t   nmsgs;
};

// A match frame: match `node` against the filter from `pos` (RT_EXACT),
// or match `node` and its later siblings at `pos` (RT_SIBS, for '+'), or
// collect `node`, its later siblings and all their descendants (RT_TREE,
// for '#').
enum { RT_EXACT, RT_SIBS, RT_TREE };
typedef struct rt_frame {
	const rt_node *node;
	size_t         pos;
	int            kind;
} rt_frame;

// Returns the child of parent with this level (h = level_hash(parent,
// lvl, len)), or NULL.
static inline rt_node *edge_find(
    const retain_store *rs, const rt_node *parent, const char *lvl, size_t len, uint32_t h)
{
	level_key *k = level_table_find(&rs->edges, parent, lvl, len, h);
	return k != NULL ? LEVEL_ENTRY(k, rt_node, key) : NULL;
}

// Returns a new node (not linked anywhere), or NULL on allocation failure.
static rt_node *node_alloc(rt_node *parent, const char *lvl, size_t len, uint32_t h)
{
	rt_node *n = calloc(1, sizeof(*n) + len + 1);
	if (n == NULL) {
		return NULL;
	}
	n->parent    = parent;
	n->key.scope = parent;
	n->key.h     = h;
	n->key.len   = (uint32_t)len;
	if (len > 0) {
		memcpy(n->level, lvl, len);
	}
	return n;
}

// Returns the child of p for the level, creating it if needed, or NULL if
// memory ran out.
static rt_node *child_get(retain_store *rs, rt_node *p, const char *lvl, size_t len)
{
	uint32_t h = level_hash(p, lvl, len);
	rt_node *n = edge_find(rs, p, lvl, len, h);
	if (n != NULL) {
		return n;
	}
	n = node_alloc(p, lvl, len, h);
	if (n == NULL) {
		return NULL;
	}
	if (level_table_add(&rs->edges, &n->key) != NMQ_OK) {
		free(n);
		return NULL;
	}
	n->next = p->first;
	if (p->first != NULL) {
		p->first->prev = n;
	}
	p->first = n;
	return n;
}

// Frees empty nodes from n up to (not including) the root.
static void prune(retain_store *rs, rt_node *n)
{
	while (n->parent != NULL && n->msg == NULL && n->first == NULL) {
		rt_node *p = n->parent;
		if (n->prev != NULL) {
			n->prev->next = n->next;
		} else {
			p->first = n->next;
		}
		if (n->next != NULL) {
			n->next->prev = n->prev;
		}
		level_table_del(&rs->edges, &n->key);
		free(n);
		n = p;
	}
}

// Returns the offset just past the level starting at pos: the next '/' or len.
static size_t level_end(const char *s, size_t len, size_t pos)
{
	const char *p = memchr(s + pos, '/', len - pos);
	return p != NULL ? (size_t)(p - s) : len;
}

retain_store *retain_alloc(const retain_ops *ops)
{
	if (ops == NULL || ops->hold == NULL || ops->release == NULL) {
		return NULL;
	}
	retain_store *rs = calloc(1, sizeof(*rs));
	if (rs == NULL) {
		return NULL;
	}
	rs->ops  = *ops;
	rs->root = node_alloc(NULL, "", 0, 0);
	if (rs->root == NULL) {
		goto fail;
	}
	if (pthread_rwlock_init(&rs->lock, NULL) != 0) {
		goto fail;
	}
	atomic_init(&rs->nmsgs, 0);
	return rs;

fail:
	free(rs->root);
	free(rs);
	return NULL;
}

void retain_free(retain_store *rs)
{
	if (rs == NULL) {
		return;
	}
	// Tear down without recursion: descend through first children,
	// detaching each from its parent, and free on the way back up.
	rt_node *n = rs->root;
	while (n != NULL) {
		rt_node *c = n->first;
		if (c != NULL) {
			n->first = c->next;
			n        = c;
			continue;
		}
		rt_node *p = n->parent;
		if (n->msg != NULL) {
			rs->ops.release(n->msg);
		}
		free(n);
		n = p;
	}
	level_table_fini(&rs->edges);
	pthread_rwlock_destroy(&rs->lock);
	free(rs);
}

nmq_err retain_set(retain_store *rs, const char *topic, size_t len, void *msg)
{
	void   *old = NULL;
	nmq_err rv  = NMQ_OK;

	if (!mqtt_topic_name_valid((const uint8_t *)topic, len)) {
		if (msg != NULL) {
			rs->ops.release(msg);
		}
		return NMQ_EINVAL;
	}
	pthread_rwlock_wrlock(&rs->lock);
	rt_node *n   = rs->root;
	size_t   pos = 0;
	for (;;) {
		size_t   end = level_end(topic, len, pos);
		size_t   l   = end - pos;
		rt_node *c;
		if (msg != NULL) {
			c = child_get(rs, n, topic + pos, l);
			if (c == NULL) {
				prune(rs, n);
				old = msg; // released below, as the contract says
				rv  = NMQ_ENOMEM;
				goto out;
			}
		} else {
			c = edge_find(rs, n, topic + pos, l, level_hash(n, topic + pos, l));
			if (c == NULL) {
				goto out; // nothing retained there
			}
		}
		n = c;
		if (end == len) {
			break;
		}
		pos = end + 1;
	}
	old    = n->msg;
	n->msg = msg;
	if (old == NULL && msg != NULL) {
		atomic_fetch_add_explicit(&rs->nmsgs, 1, memory_order_relaxed);
	} else if (old != NULL && msg == NULL) {
		atomic_fetch_sub_explicit(&rs->nmsgs, 1, memory_order_relaxed);
		prune(rs, n);
	}

out:
	pthread_rwlock_unlock(&rs->lock);
	if (old != NULL) {
		rs->ops.release(old);
	}
	return rv;
}

// Appends a held message to the result. Returns 0, or -1 if memory ran out
// (nothing held then).
static int collect(const retain_store *rs, void ***v, size_t *n, size_t *cap, void *msg)
{
	if (*n == *cap) {
		size_t ncap = *cap != 0 ? *cap * 2 : 16;
		void **nv   = realloc(*v, ncap * sizeof(*nv));
		if (nv == NULL) {
			return -1;
		}
		*v   = nv;
		*cap = ncap;
	}
	rs->ops.hold(msg);
	(*v)[(*n)++] = msg;
	return 0;
}

nmq_err retain_match(retain_store *rs, const char *filter, size_t len,
    void (*cb)(void *arg, void *msg), void *arg, size_t *count)
{
	if (count != NULL) {
		*count = 0;
	}
	if (!mqtt_topic_filter_valid((const uint8_t *)filter, len)) {
		return NMQ_OK;
	}
	rt_frame  local[RT_STACK_LOCAL];
	rt_frame *stk = local;
	size_t    cap = RT_STACK_LOCAL;
	size_t    sp  = 0;
	void    **v   = NULL;
	size_t    n   = 0;
	size_t    vc  = 0;
	int       rv  = 0;

	pthread_rwlock_rdlock(&rs->lock);
	const rt_node *root = rs->root;
	stk[sp++]           = (rt_frame) { root, 0, RT_EXACT };
	while (sp > 0) {
		rt_frame f = stk[--sp];
		// Every case below pushes at most two frames.
		if (sp + 2 > cap) {
			rt_frame *ns = stk == local ? malloc(2 * cap * sizeof(*ns))
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
		const rt_node *nd = f.node;
		if (f.kind == RT_SIBS || f.kind == RT_TREE) {
			if (nd->next != NULL) {
				stk[sp++] = (rt_frame) { nd->next, f.pos, f.kind };
			}
			// A first-level wildcard skips topics starting with '$'.
			if (nd->parent == root && nd->key.len > 0 && nd->level[0] == '$') {
				continue;
			}
			if (f.kind == RT_SIBS) {
				stk[sp++] = (rt_frame) { nd, f.pos, RT_EXACT };
				continue;
			}
			if (nd->msg != NULL && collect(rs, &v, &n, &vc, nd->msg) != 0) {
				rv = -1;
				break;
			}
			if (nd->first != NULL) {
				stk[sp++] = (rt_frame) { nd->first, 0, RT_TREE };
			}
			continue;
		}
		if (f.pos > len) {
			if (nd->msg != NULL && collect(rs, &v, &n, &vc, nd->msg) != 0) {
				rv = -1;
				break;
			}
			continue;
		}
		size_t      end = level_end(filter, len, f.pos);
		const char *lvl = filter + f.pos;
		size_t      l   = end - f.pos;
		if (l == 1 && lvl[0] == '#') {
			// Zero levels: the parent itself ("a/#" matches "a").
			if (nd != root && nd->msg != NULL
			    && collect(rs, &v, &n, &vc, nd->msg) != 0) {
				rv = -1;
				break;
			}
			if (nd->first != NULL) {
				stk[sp++] = (rt_frame) { nd->first, 0, RT_TREE };
			}
		} else if (l == 1 && lvl[0] == '+') {
			if (nd->first != NULL) {
				stk[sp++] = (rt_frame) { nd->first, end + 1, RT_SIBS };
			}
		} else {
			const rt_node *c = edge_find(rs, nd, lvl, l, level_hash(nd, lvl, l));
			if (c != NULL) {
				stk[sp++] = (rt_frame) { c, end + 1, RT_EXACT };
			}
		}
	}
	pthread_rwlock_unlock(&rs->lock);
	if (stk != local) {
		free(stk);
	}
	if (rv != 0) {
		for (size_t i = 0; i < n; i++) {
			rs->ops.release(v[i]);
		}
		free(v);
		return NMQ_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		cb(arg, v[i]);
	}
	free(v);
	if (count != NULL) {
		*count = n;
	}
	return NMQ_OK;
}

size_t retain_count(retain_store *rs)
{
	return atomic_load_explicit(&rs->nmsgs, memory_order_relaxed);
}
