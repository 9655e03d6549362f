// The broker application: authentication, access control (including the
// read check of each delivery), routing through the topic tree, retained
// messages and $SYS client status, on top of the protocol layer.
//
// Threads: the proto_app_ops callbacks run on worker threads (see proto.h).
// broker_alloc/broker_free run on the main thread.
#ifndef NMQ_BROKER_H
#define NMQ_BROKER_H

#include "nng/core/nmq_err.h"
#include "nng/protocol/proto.h"
#include "src/conf/conf.h"
#include "src/topic/retain.h"
#include "src/topic/topic_tree.h"

typedef struct nmq_broker nmq_broker;

// The protocol ops implemented by the broker, to pass to proto_alloc with
// the broker as `app`.
extern const proto_app_ops broker_proto_ops;

// Creates the routing state. Returns NULL on failure.
nmq_broker *broker_alloc(const nmq_conf *conf);
// Binds the protocol layer (after proto_alloc with this broker as app).
void broker_set_proto(nmq_broker *b, nmq_proto *p);
// Applies the reloadable settings of conf (passwords, ACL,
// allow_anonymous, deny_action) at once. Returns NMQ_OK, or NMQ_EINVAL with
// a message in err (a password or ACL file that cannot be read or parsed,
// or out of memory), in which case nothing changed. With an ACL in force it then
// re-decides, session by session, which subscriptions need a read check
// per delivery (O(subscriptions x rules), on the calling thread); until a
// session is done, every delivery to it is checked.
nmq_err broker_reconfigure(nmq_broker *b, const nmq_conf *conf, char *err, size_t errlen);
void    broker_free(nmq_broker *b);

// Limits for the protocol layer from a configuration.
void broker_limits_from_conf(const nmq_conf *conf, proto_limits *lim);

// What the broker reports to an observer (the webhooks, src/events), one
// type per webhook event, in this order.
typedef enum broker_event_type {
	BEV_CLIENT_CONNECT = 0, // a CONNECT arrived (before authentication)
	BEV_CLIENT_CONNACK, // authentication answered; rc: 0 or the reason
	BEV_CLIENT_CONNECTED,
	BEV_CLIENT_DISCONNECTED, // rc: the reason code (0 = normal)
	BEV_CLIENT_SUBSCRIBE, // a SUBSCRIBE filter, before any check
	BEV_CLIENT_UNSUBSCRIBE,
	BEV_SESSION_SUBSCRIBED, // the subscription was granted
	BEV_SESSION_UNSUBSCRIBED, // a subscription was removed
	BEV_SESSION_TERMINATED, // the session's state was discarded
	BEV_MESSAGE_PUBLISH, // a client's PUBLISH, after the ACL
	BEV_MESSAGE_DELIVERED, // a message went out to a subscriber
	BEV_MESSAGE_ACKED, // a subscriber acknowledged it (PUBACK, PUBREC)
	BEV_COUNT
} broker_event_type;

// One event; every pointer is valid during the callback only. Strings are
// NUL-terminated; username is NULL when there is none.
typedef struct broker_event {
	broker_event_type type;
	const char       *client_id;
	const char       *username;
	const char       *topic; // topic or filter; NULL for client events
	size_t            topic_len;
	nmq_msg          *msg; // BEV_MESSAGE_*: the message (hold it to keep it)
	uint8_t           qos;
	uint8_t           proto_ver;
	uint8_t           rc;
	uint16_t          keepalive;
} broker_event;

// Called on the thread where the event happens (a worker, mostly): must be
// quick and must not block (queue and return).
typedef void (*broker_event_fn)(void *arg, const broker_event *ev);

// Sets the observer and the events it wants (bit 1 << type). Main thread,
// after broker_set_proto and before any client connects; fn may be NULL
// (none). The message events run with the subscriber's session lock held.
void broker_set_observer(nmq_broker *b, broker_event_fn fn, void *arg, uint32_t mask);

// An external authenticator (auth.http_auth): asked about a CONNECT whose
// user name is not in the password list (clients without a user name are
// left to allow_anonymous). It runs on the worker and must not block: it
// answers at once (0 or an MQTT 5 reason code) or parks the CONNECT with
// proto_connect_defer(info) and returns PROTO_AUTH_PENDING.
typedef uint8_t (*broker_authn_fn)(void *arg, const proto_client_info *info);
// Sets it (fn NULL: none). Main thread, before any client connects.
void broker_set_authenticator(nmq_broker *b, broker_authn_fn fn, void *arg);

// An external ACL (auth.http_auth.acl_req): asked on the worker about a
// PUBLISH topic or a SUBSCRIBE filter (access PROTO_ACCESS_*) of a client
// that is not a superuser, when no rule of auth.acl matches it. Must not
// block: it answers at once (PROTO_ACL_ALLOW or a refusing reason code) or
// parks the packet with proto_acl_defer(defer_ctx) and returns
// PROTO_AUTH_PENDING.
typedef int (*broker_acl_fn)(void *arg, const proto_who *who, uint8_t access, const char *topic,
    size_t len, void *defer_ctx);
// Sets it (fn NULL: none). Main thread, before any client connects.
void broker_set_acl_checker(nmq_broker *b, broker_acl_fn fn, void *arg);

// Routes a message the broker itself publishes ($SYS statistics): no
// publisher, no ACL check; retained if msg->retain. Any thread; the
// reference is borrowed.
void broker_publish(nmq_broker *b, nmq_msg *msg);

// Binds the durable store (main thread, before any listener opens; see
// broker_store.h): from then on the subscriptions of persistent sessions
// and retained messages are written to it.
typedef struct nmq_store nmq_store;
void                     broker_set_store(nmq_broker *b, nmq_store *st);

topic_tree   *broker_topic_tree(nmq_broker *b);
retain_store *broker_retain(nmq_broker *b);

// The filters local sessions hold, for transparent bridges: once a watcher
// is set, the broker counts the local subscriptions of each filter (a
// shared "$share/<g>/<f>" counts as <f>; filters starting with '$' are not
// counted; bridges' sinks are not sessions and never count) and calls fn
// whenever the set changes: a filter appears or goes, or its highest QoS
// changes. fn runs on the subscriber's worker with broker locks held: it
// must only note the change and wake its own thread (it may take a leaf
// lock of its own, never call into the broker). The first watcher makes
// the broker count the sessions that already exist (restored ones
// included), walking them on the calling thread; counting then stays on
// (a subscription costs a hash look-up under one mutex, a publish nothing).
// fn NULL removes the watcher: once this returns, fn is not running and
// will not be called. Any thread but a worker; not with a lock fn takes.
typedef void (*broker_filters_fn)(void *arg);
void broker_watch_filters(nmq_broker *b, broker_filters_fn fn, void *arg);
// Calls cb for every counted filter with its highest local QoS (under the
// count's lock: cb must copy and must not call into the broker). Returns
// how many. Any thread holding no lock that fn takes.
size_t broker_filters_each(
    nmq_broker *b, void (*cb)(void *arg, const char *filter, size_t len, uint8_t qos), void *arg);

// Deliveries skipped because the ACL denies the subscriber read access to
// the message's topic (one per message and subscriber refused, shared
// subscription members included). Lock-free read.
long broker_acl_deliveries_denied(nmq_broker *b);

// A subscriber that is not a session (a bridge's forwards): its filters
// sit in the topic tree like a client's, so a message costs it what it
// costs one subscriber. The broker keeps no reference of its own: the
// owner unsubscribes every filter before it frees the sink, and keeps it
// alive while hold() references are out (the tree holds a matched sink
// until the delivery returns).
typedef struct broker_sink broker_sink;
struct broker_sink {
	// One delivery, on the publisher's worker thread: must not block (it
	// queues and returns). qos is min(granted, published); msg is
	// borrowed (hold it to keep it).
	void (*deliver)(broker_sink *s, nmq_msg *msg, uint8_t qos, bool retain);
	void (*hold)(broker_sink *s);
	void (*release)(broker_sink *s);
};

// Adds (or replaces) a filter of sink s. no_local: messages the sink
// itself published (broker_sink_publish) are not delivered to it. Returns
// NMQ_OK, NMQ_EINVAL for an invalid or shared filter, NMQ_ENOMEM.
nmq_err broker_sink_subscribe(
    nmq_broker *b, broker_sink *s, const char *filter, uint8_t qos, bool no_local);
// Removes a filter of s. Returns NMQ_OK or NMQ_ENOENT.
nmq_err broker_sink_unsubscribe(nmq_broker *b, broker_sink *s, const char *filter);
// Publishes msg locally on behalf of s, as a client would: the ACL's
// publish check for who, retained messages, routing (the reference is
// borrowed). Returns 0 or an MQTT 5 reason code (0x87 refused by the ACL).
// Any thread but a tree callback.
int broker_sink_publish(nmq_broker *b, broker_sink *s, const proto_who *who, nmq_msg *msg);

// ---- Introspection and control for the REST API (src/http); any thread
// but a worker's (each call takes locks briefly, never across I/O).

// One subscription of a session, as the REST API lists it.
typedef struct broker_sub_info {
	char   *filter; // as subscribed, "$share/<g>/<f>" included
	uint8_t qos;
} broker_sub_info;

// Copies the subscriptions of s under its record's lock. Returns the number
// in *out (free with broker_subs_free), 0 with *out NULL if it has none, or
// 0 with *err = NMQ_ENOMEM.
size_t broker_session_subs(nmq_broker *b, nmq_session *s, broker_sub_info **out, nmq_err *err);
void   broker_subs_free(broker_sub_info *v, size_t n);

// Publishes msg (borrowed) into the broker as `who` (the ACL's publish
// check applies, denials are counted as drops), and counts it as
// received. Returns 0 or the MQTT 5 reason code of a refusal (0x87).
int broker_publish_as(nmq_broker *b, const proto_who *who, nmq_msg *msg);
// Adds a subscription to s as if its client had sent SUBSCRIBE (ACL,
// limits, retained messages). Returns the granted QoS or a reason code
// (>= 0x80).
int broker_subscribe(
    nmq_broker *b, nmq_session *s, const proto_who *who, const char *filter, uint8_t qos);
// auth.allow_anonymous at runtime (POST /api/v4/reload); a reload of the
// file sets it again.
bool broker_allow_anonymous(nmq_broker *b);
void broker_set_allow_anonymous(nmq_broker *b, bool allow);
// For topic_tree_walk() callbacks on broker_topic_tree(): the client id of
// a subscriber, or NULL when it is not a session (a bridge's forward).
const char *broker_subscriber_client_id(void *sub);
// Removes one subscription of s. Returns 0 or 0x11 (none existed).
int broker_unsubscribe(nmq_broker *b, nmq_session *s, const char *filter);

#endif // NMQ_BROKER_H
