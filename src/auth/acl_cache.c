// The per-client ACL decision cache (see acl_cache.h).
#include "src/auth/acl_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct cache_entry {
	uint64_t expires; // now_ms after which the entry is stale
	char    *topic; // NULL: free slot
	uint16_t len;
	uint8_t  action;
	uint8_t  decision;
} cache_entry;

struct acl_cache {
	cache_entry *v;
	size_t       max;
	size_t       used; // slots filled so far
	size_t       next; // slot replaced next once full (oldest first)
	uint32_t     ttl_ms;
	uint64_t     gen; // acl generation the entries came from
};

// Returns a new cache, or NULL.
acl_cache *acl_cache_alloc(size_t max_size, uint32_t ttl_ms)
{
	acl_cache *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		return NULL;
	}
	if (ttl_ms == 0) {
		max_size = 0;
	}
	if (max_size > 0 && (c->v = calloc(max_size, sizeof(*c->v))) == NULL) {
		free(c);
		return NULL;
	}
	c->max    = max_size;
	c->ttl_ms = ttl_ms;
	return c;
}

// Empties the cache.
void acl_cache_flush(acl_cache *c)
{
	if (c == NULL) {
		return;
	}
	for (size_t i = 0; i < c->used; i++) {
		free(c->v[i].topic);
		c->v[i].topic = NULL;
	}
	c->used = 0;
	c->next = 0;
}

// Frees the cache. NULL is allowed.
void acl_cache_free(acl_cache *c)
{
	if (c == NULL) {
		return;
	}
	acl_cache_flush(c);
	free(c->v);
	free(c);
}

// Returns the number of entries held.
size_t acl_cache_size(const acl_cache *c)
{
	return c != NULL ? c->used : 0;
}

// Stores a decision, replacing the oldest entry once the cache is full.
static void store(
    acl_cache *c, int action, const char *topic, size_t len, int decision, uint64_t now_ms)
{
	cache_entry *e;
	char        *copy = malloc(len);

	if (copy == NULL) {
		return;
	}
	memcpy(copy, topic, len);
	if (c->used < c->max) {
		e = &c->v[c->used++];
	} else {
		e       = &c->v[c->next];
		c->next = (c->next + 1) % c->max;
		free(e->topic);
	}
	e->topic    = copy;
	e->len      = (uint16_t)len;
	e->action   = (uint8_t)action;
	e->decision = (uint8_t)decision;
	e->expires  = now_ms + c->ttl_ms;
}

// Returns the decision for (action, topic), cached or computed.
int acl_cache_check(acl_cache *c, const acl *a, const acl_client *who, int action,
    const char *topic, size_t len, uint64_t now_ms)
{
	int rv;

	if (c == NULL || c->max == 0 || len > ACL_CACHE_TOPIC_MAX || topic == NULL || len == 0) {
		return acl_check(a, who, action, topic, len);
	}
	if (c->gen != acl_generation(a)) {
		acl_cache_flush(c);
		c->gen = acl_generation(a);
	}
	for (size_t i = 0; i < c->used; i++) {
		cache_entry *e = &c->v[i];
		if (e->action == action && e->len == len && memcmp(e->topic, topic, len) == 0) {
			if (now_ms < e->expires) {
				return e->decision;
			}
			rv          = acl_check(a, who, action, topic, len);
			e->decision = (uint8_t)rv;
			e->expires  = now_ms + c->ttl_ms;
			return rv;
		}
	}
	rv = acl_check(a, who, action, topic, len);
	store(c, action, topic, len, rv, now_ms);
	return rv;
}
