// The pure part of routing: merge and split of one message's matches into
// deliveries. See route.h.
#include "src/broker/route.h"

#include <stdlib.h>

// Orders matches by subscriber so that one subscriber's matches are
// adjacent (plain ones first).
static int match_cmp(const void *a, const void *b)
{
	const topic_match *x = a;
	const topic_match *y = b;
	if (x->sub != y->sub) {
		return (uintptr_t)x->sub < (uintptr_t)y->sub ? -1 : 1;
	}
	return (int)x->shared - (int)y->shared;
}

static uint8_t qos_cap(uint8_t granted, uint8_t msg_qos)
{
	return granted < msg_qos ? granted : msg_qos;
}

// Delivers to one subscriber, whose matches are v[0..n).
static void deliver_one(const topic_match *v, size_t n, bool self, uint8_t msg_qos, bool msg_retain,
    const route_ops *ops, void *arg, route_stats *st)
{
	uint32_t ids[ROUTE_MAX_IDS];
	uint32_t n_ids = 0;
	int      qos   = -1;
	bool     rap   = false;

	for (size_t i = 0; i < n; i++) {
		const topic_sub_opts *o = &v[i].opts;
		if (v[i].alt) {
			continue;
		}
		if (v[i].shared) {
			uint32_t       id = o->sub_id;
			route_delivery d  = { v[i].sub, qos_cap(o->qos, msg_qos),
				 o->retain_as_published && msg_retain, true, id != 0 ? 1 : 0, &id };
			ops->deliver(arg, &d);
			st->deliveries++;
			continue;
		}
		if (self && o->no_local) {
			continue; // [MQTT-3.8.3-3]
		}
		if ((int)o->qos > qos) {
			qos = o->qos;
		}
		rap = rap || o->retain_as_published;
		if (o->sub_id != 0) {
			if (n_ids < ROUTE_MAX_IDS) {
				ids[n_ids++] = o->sub_id;
			} else {
				st->ids_dropped++;
			}
		}
	}
	if (qos < 0) {
		return;
	}
	route_delivery d
	    = { v[0].sub, qos_cap((uint8_t)qos, msg_qos), rap && msg_retain, false, n_ids, ids };
	ops->deliver(arg, &d);
	st->deliveries++;
}

void route_deliver(topic_match_vec *mv, const void *from, uint8_t msg_qos, bool msg_retain,
    const route_ops *ops, void *arg, route_stats *stats)
{
	route_stats st = { 0 };

	if (mv->n > 1) {
		qsort(mv->v, mv->n, sizeof(topic_match), match_cmp);
	}
	size_t i = 0;
	while (i < mv->n) {
		size_t j = i + 1;
		while (j < mv->n && mv->v[j].sub == mv->v[i].sub) {
			j++;
		}
		const topic_match *v      = &mv->v[i];
		bool               wanted = false;
		for (size_t k = 0; k < j - i && !wanted; k++) {
			wanted = !v[k].alt;
		}
		if (!wanted) {
			// Only stand-ins the caller did not choose: nothing to ask.
		} else if (ops->admit != NULL && !ops->admit(arg, v, j - i)) {
			st.refused++;
		} else {
			bool self = from != NULL && from == v[0].sub;
			deliver_one(v, j - i, self, msg_qos, msg_retain, ops, arg, &st);
		}
		i = j;
	}
	if (stats != NULL) {
		*stats = st;
	}
}
