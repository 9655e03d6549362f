// The pure part of routing: from the topic tree's matches of one message
// to the deliveries it makes, with no socket, session or lock involved
// (broker.c matches, checks read access and queues; this decides).
//
// Rules (MQTT 5.0 3.3.4, 3.8.3.1, 3.3.1.3, 4.8.2; MQTT 3.1.1 3.3.5):
// - A subscriber's plain (non-shared) matches make one delivery: the
//   highest granted QoS of those matches, capped by the message's QoS;
//   every subscription identifier they carry; retain set when the message
//   is retained and one of them has Retain As Published.
// - A match with No Local is skipped when the subscriber is the publisher.
// - Every shared match (the group's pick, see topic_tree.h) is a delivery
//   of its own, with its own QoS, identifier and Retain As Published: a
//   session that is a member of a group and also subscribed plainly gets
//   both.
// - Matches marked alt (stand-ins the caller did not choose) are skipped.
//
// Threading: pure; any thread. The callbacks run on the calling thread,
// in no particular order of subscribers.
#ifndef NMQ_ROUTE_H
#define NMQ_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/topic/topic_tree.h"

// Most subscription identifiers one merged delivery carries; further
// ones are dropped (and counted in route_stats.ids_dropped).
#define ROUTE_MAX_IDS 32

typedef struct route_delivery {
	void           *sub;
	uint8_t         qos; // already capped by the message's QoS
	bool            retain; // the RETAIN flag to send
	bool            shared; // a shared-group pick
	uint32_t        n_ids;
	const uint32_t *ids; // valid during the callback only
} route_delivery;

typedef struct route_ops {
	// May be NULL (everyone admitted). Called once per subscriber that has
	// a match not marked alt, with all of its matches v[0..n) (alt ones
	// included) before any delivery to it; false: the subscriber gets
	// nothing. It may not change v.
	bool (*admit)(void *arg, const topic_match *v, size_t n);
	// Required: makes one delivery.
	void (*deliver)(void *arg, const route_delivery *d);
} route_ops;

typedef struct route_stats {
	size_t deliveries;
	size_t refused; // subscribers that admit() refused
	size_t ids_dropped; // identifiers beyond ROUTE_MAX_IDS
} route_stats;

// Delivers one message (QoS msg_qos, RETAIN msg_retain, published by the
// session `from`, NULL for none: a will, a $SYS message) to the matches in
// mv, per the rules above. Reorders mv (by subscriber) but neither
// releases nor removes entries. Fills *stats when stats is not NULL.
void route_deliver(topic_match_vec *mv, const void *from, uint8_t msg_qos, bool msg_retain,
    const route_ops *ops, void *arg, route_stats *stats);

#endif // NMQ_ROUTE_H
