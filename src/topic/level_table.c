// The topic-level hash table of the subscription tree and the retained
// store; see level_table.h for the contract.
#include "src/topic/level_table.h"

#include <stdbool.h>
#include <stdlib.h>

#define LT_MIN_CAP 4u
#define LT_MAX_CAP (1u << 30)

// Stores k in an array of capacity cap (a power of two, with room).
static void slots_put(level_key **slots, uint32_t cap, level_key *k)
{
	uint32_t mask = cap - 1;
	uint32_t i    = k->h & mask;
	while (slots[i] != NULL) {
		i = (i + 1) & mask;
	}
	slots[i] = k;
}

// Moves every key into an array of capacity ncap. Returns NMQ_OK, or
// NMQ_ENOMEM with the old array kept.
static nmq_err resize(level_table *t, uint32_t ncap)
{
	level_key **ns = calloc(ncap, sizeof(*ns));
	if (ns == NULL) {
		return NMQ_ENOMEM;
	}
	for (uint32_t i = 0; i < t->cap; i++) {
		if (t->slots[i] != NULL) {
			slots_put(ns, ncap, t->slots[i]);
		}
	}
	free(t->slots);
	t->slots = ns;
	t->cap   = ncap;
	return NMQ_OK;
}

nmq_err level_table_add(level_table *t, level_key *k)
{
	if ((uint64_t)(t->n + 1) * 4 > (uint64_t)t->cap * 3) {
		if (t->cap >= LT_MAX_CAP) {
			return NMQ_ENOMEM;
		}
		nmq_err e = resize(t, t->cap != 0 ? t->cap * 2 : LT_MIN_CAP);
		if (e != NMQ_OK) {
			return e;
		}
	}
	slots_put(t->slots, t->cap, k);
	t->n++;
	return NMQ_OK;
}

void level_table_del(level_table *t, level_key *k)
{
	uint32_t mask = t->cap - 1;
	uint32_t i    = k->h & mask;
	while (t->slots[i] != k) {
		i = (i + 1) & mask;
	}
	// Backward shift: move later entries of the probe run into the hole
	// unless their home lies cyclically in (i, j].
	uint32_t j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (t->slots[j] == NULL) {
			break;
		}
		uint32_t home  = t->slots[j]->h & mask;
		bool     stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
		if (stays) {
			continue;
		}
		t->slots[i] = t->slots[j];
		i           = j;
	}
	t->slots[i] = NULL;
	t->n--;
	if (t->n == 0) {
		level_table_fini(t);
	} else if (t->cap > LT_MIN_CAP && t->n < t->cap / 8) {
		(void)resize(t, t->cap / 2); // failure keeps the larger array
	}
}

level_key *level_table_pop(level_table *t)
{
	// cap serves as a cursor from the end of the array.
	while (t->cap > 0) {
		level_key *k = t->slots[--t->cap];
		if (k != NULL) {
			t->slots[t->cap] = NULL;
			t->n--;
			return k;
		}
	}
	return NULL;
}

void level_table_fini(level_table *t)
{
	free(t->slots);
	level_table_init(t);
}
