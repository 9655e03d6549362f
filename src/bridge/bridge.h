// MQTT bridges (bridges.mqtt.<name>): the broker as an MQTT 3.1.1 / 5.0
// client of a remote broker, with store-and-forward. docs/bridge.md says
// what is guaranteed; docs/architecture.md where it sits.
//
// Each bridge has:
// - forwards (local -> remote): every forward is a subscriber in the
//   broker's topic tree (broker_sink). A delivery only queues the message
//   on the bridge, under the bridge's mutex, and returns: a publisher never
//   waits on the link.
// - subscriptions (remote -> local): SUBSCRIBEd on every connect; what the
//   remote sends is published locally as by a client (the ACL's publish
//   check applies to the bridge's client id and user name).
// - a link thread of its own that connects (TCP or TLS, with a deadline),
//   sends CONNECT, watches keepalive and stalls, and reconnects forever
//   with exponential backoff and jitter, through `server` and then
//   `hybrid_servers` in turn. Once connected, the connection is served by
//   the workers' event loops like any client's.
// - a send queue: QoS 1/2 forwards stay queued until the remote acks them
//   (PUBACK, PUBCOMP); in memory up to max_send_queue_len and, when the
//   offline cache is configured, written through to the durable store
//   (pseudo client id "$bridge/<name>"), from which the memory queue is
//   refilled in order. After every CONNACK, unacked messages are resent
//   (DUP) and the backlog is sent at once, oldest first, within the
//   remote's Receive Maximum.
//
// Loop guard: messages received from the remote are marked with the
// bridge's origin; a forward never sends such a message back. v5
// subscriptions use No Local (nolocal, default true).
//
// Threads: bridges_start, bridges_reconfigure and bridges_stop run on the
// main thread; bridges_health_json and the runtime changes (bridges_put
// ... bridges_unsubscribe) on any thread.
#ifndef NMQ_BRIDGE_H
#define NMQ_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/transport/conn.h"
#include "src/broker/broker.h"
#include "src/conf/conf.h"

typedef struct nmq_bridges nmq_bridges;
struct nmq_store;

typedef struct bridge_env {
	nmq_broker       *broker;
	const conn_env   *cenv; // the workers and frame limits of connections
	struct nmq_store *store; // the offline cache; NULL: memory only
} bridge_env;

// Starts the enabled bridges of conf. Returns the set (possibly empty), or
// NULL when out of memory.
nmq_bridges *bridges_start(const nmq_conf *conf, const bridge_env *env);
// Applies conf's bridges: a bridge removed stops (its cached messages stay
// in the store for when it comes back), one added starts, one changed
// restarts its link with the new settings and keeps its queue.
void bridges_reconfigure(nmq_bridges *bs, const nmq_conf *conf);
// Stops every link and frees the set. Queued messages not in the cache are
// lost (and logged with their count).
void bridges_stop(nmq_bridges *bs);

// Runtime changes (the REST API), on any thread but a bridge's own; they
// are serialised with each other and with bridges_reconfigure, and are
// not written to the configuration file (a reload applies the file
// again). Each returns NMQ_OK, NMQ_ENOENT (no bridge of that name) or
// NMQ_ENOMEM.
//
// Adds the bridge cb describes, or changes the one of that name as a
// reload would (its link reconnects, its queue is kept); with
// keep_password the running bridge's password is kept. A cb that is not
// enabled stops and removes it.
nmq_err bridges_put(nmq_bridges *bs, const conf_bridge *cb, bool keep_password);
// Stops and removes a bridge (its cached messages stay in the store).
nmq_err bridges_delete(nmq_bridges *bs, const char *name);
// Takes a bridge's link down (on false) or up again; its forwards keep
// queueing meanwhile (QoS 0 is dropped, as while the link is down).
nmq_err bridges_switch(nmq_bridges *bs, const char *name, bool on);
// Adds subscriptions (remote to local) to a bridge, replacing any with the
// same remote_topic, and subscribes them on the remote now if the link is
// up (and after every reconnect). user_props: n_props key/value pairs for
// a v5 SUBSCRIBE (may be 0).
nmq_err bridges_subscribe(nmq_bridges *bs, const char *name, const conf_bridge_sub *subs, int n,
    const char *const *user_props, int n_props);
// Removes the subscriptions of these remote filters and unsubscribes them
// on the remote now if the link is up.
nmq_err bridges_unsubscribe(nmq_bridges *bs, const char *name, const char *const *filters, int n,
    const char *const *user_props, int n_props);

// The store's eviction callback (store_opts.evicted): counts a cached
// message dropped because the cache was full. arg is ignored.
void bridges_store_evicted(void *arg, const char *client_id, uint64_t seq);

// Writes the health of the bridge named name (every bridge when NULL: a
// JSON array) as JSON into buf; returns the length it needs (as snprintf),
// or 0 when there is no such bridge. Fields: docs/bridge.md.
size_t bridges_health_json(nmq_bridges *bs, const char *name, char *buf, size_t cap);
// Copies of the running settings of the bridge named name (every bridge
// when NULL), in the set's order, as PUT /bridges last left them: *out
// gets an array of n copies (free each with conf_bridge_free, then the
// array). Returns n (0: none, *out NULL), or -1 when out of memory.
int bridges_conf_copies(nmq_bridges *bs, const char *name, conf_bridge ***out);

#endif // NMQ_BRIDGE_H
