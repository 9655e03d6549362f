// The ACL engine: the `auth.acl` rules (docs/compatibility.md §2) turned into an
// immutable rule list, and the decision for one PUBLISH topic or one
// SUBSCRIBE filter of one client.
//
// Semantics:
// - Rules are tried in order; the first rule whose subject, action and
//   topics all match decides (permit allow or deny). When none matches,
//   the no_match default applies.
// - Subject: the rule's own username / clientid / ipaddrs fields must all
//   match (a field that is absent does not constrain). "and": every listed
//   object must match; "or": at least one must (an empty "or" matches no
//   client). Within one object the same fields are again all required.
//   username and clientid compare bytes exactly; "#" matches any client,
//   including one that sent no username. A list of ipaddrs matches when the
//   peer is any of them; each is an address or a CIDR range, IPv4 or IPv6
//   (an IPv4 rule also matches the same peer seen as ::ffff:a.b.c.d).
// - Action: "publish", "subscribe" or "pubsub" (both).
// - Topics: absent = every topic; an empty list = no topic. "${clientid}"
//   and "${username}" are replaced per client; a filter whose placeholder
//   value is missing (no username), empty, or holds '/', '+' or '#' never
//   matches, so a client id such as "#" cannot widen a rule. "@f" is the
//   literal filter f: it matches only a topic or requested filter equal to
//   f, byte for byte.
// - PUBLISH: a rule filter matches the topic name (MQTT rules: '+' one
//   level, '#' the rest, a leading wildcard never matches a topic that
//   starts with '$').
// - SUBSCRIBE: a rule filter must cover the requested filter, that is match
//   every topic the requested filter can match (acl_filter_covers). A
//   "$share/<group>/" prefix is removed from the requested filter first.
//   Note that a deny rule for "a/b" does not cover a request for "a/#";
//   that case is closed at delivery (below).
// - Delivery (read access): a message published on topic name t may be
//   delivered to a client only if subscribing to the exact filter t would
//   be allowed (acl_check_read). For a name, covering is plain matching; an
//   "@f" rule applies only when f equals t, so a literal rule holding a
//   wildcard never applies to a delivery. acl_filter_may_deny() tells, at
//   SUBSCRIBE time, whether any topic a filter matches could be refused,
//   so that a broker checks each delivery only for those subscriptions.
//
// Contract: an acl is immutable once built; any number of threads may call
// acl_check() on it at once. A reload builds a new acl and swaps a pointer;
// each acl carries a generation number so that decision caches (acl_cache.h)
// notice the swap. Nothing here logs, blocks or keeps global state besides
// the generation counter (an atomic).
#ifndef NMQ_AUTH_ACL_H
#define NMQ_AUTH_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON; // <cjson/cJSON.h>

enum acl_action {
	ACL_PUBLISH   = 1,
	ACL_SUBSCRIBE = 2,
};

enum acl_decision {
	ACL_ALLOW   = 0,
	ACL_DENY    = 1,
	ACL_NOMATCH = 2, // only from acl_match(): no rule matched
};

// Bounds applied when building: more rules, or more topics / addresses /
// and-or entries in one rule, are refused with an error.
#define ACL_MAX_RULES 65536
#define ACL_MAX_ITEMS 4096

// Who is asking. Strings are NUL-terminated and borrowed for the duration
// of the call. clientid must not be NULL; username is NULL when the client
// sent none; peer is the remote address as the transport prints it:
// "1.2.3.4", "1.2.3.4:5678", "::1", "[::1]:5678" (NULL or anything else
// matches no ipaddrs rule).
typedef struct acl_client {
	const char *clientid;
	const char *username;
	const char *peer;
} acl_client;

typedef struct acl acl;

// Builds an acl from the normalised auth.acl tree (nmq_conf.auth_acl:
// {"enable": bool, "rules": [...]}); a bare array of rules is accepted too,
// as are the un-normalised spellings "ipaddr" and a single string for
// "topics". no_match is ACL_ALLOW or ACL_DENY (nmq_conf.auth_no_match maps
// CONF_ACL_ALLOW to ACL_ALLOW). tree NULL gives an acl with no rules.
// Returns the acl, or NULL with a one-line reason naming the rule in err
// (err may be NULL) when a rule is malformed: permit missing or not
// allow/deny, unknown action, a subject field of the wrong type, a bad
// address or CIDR, an invalid topic filter, and/or nested, a bound
// exceeded, or memory exhausted. Unknown keys are ignored.
acl *acl_alloc(const struct cJSON *tree, int no_match, char *err, size_t errlen);

// Frees the acl. NULL is allowed.
void acl_free(acl *a);

// Returns false when the tree said "enable": false (acl_check then allows
// everything), true otherwise.
bool acl_enabled(const acl *a);

// Returns the number of rules.
size_t acl_rule_count(const acl *a);

// Returns the generation of the acl: a number that no other acl built by
// this process shares (0 for NULL).
uint64_t acl_generation(const acl *a);

// Returns ACL_ALLOW or ACL_DENY from the first matching rule, or
// ACL_NOMATCH. action is ACL_PUBLISH (topic is a topic name) or
// ACL_SUBSCRIBE (topic is a filter, maybe "$share/g/..."). A disabled or
// NULL acl gives ACL_NOMATCH. topic is len bytes, not NUL-terminated; an
// empty or invalid topic, or an unknown action, gives ACL_DENY.
int acl_match(const acl *a, const acl_client *who, int action, const char *topic, size_t len);

// Returns ACL_ALLOW or ACL_DENY: acl_match() with no_match applied. A NULL
// or disabled acl allows everything.
int acl_check(const acl *a, const acl_client *who, int action, const char *topic, size_t len);

// Returns ACL_ALLOW or ACL_DENY: may who receive a message published on
// the topic name (len bytes)? This is acl_check(a, who, ACL_SUBSCRIBE, ...)
// for the topic taken as a filter without wildcards (no_match applied), but
// a "$share/" prefix is part of the name here, not a shared subscription.
// A NULL or disabled acl allows everything; an empty or invalid topic name
// (one holding '+', '#' or NUL) is denied.
int acl_check_read(const acl *a, const acl_client *who, const char *topic, size_t len);

// acl_check_read() without the no_match default: ACL_NOMATCH when no rule
// matches (and for a NULL or disabled acl).
int acl_match_read(const acl *a, const acl_client *who, const char *topic, size_t len);
// Returns false only when acl_check_read(a, who, t) is ACL_ALLOW for every
// topic name t that the filter (len bytes, maybe "$share/g/...", whose
// prefix is removed) matches; true when some such t could be denied, or
// when that cannot be ruled out cheaply (an invalid filter, memory
// exhausted, or a no_match deny that only a union of allow rules would
// avoid). The analysis walks the rules in order for this client (its
// subject, ${clientid} and ${username} substituted): a deny rule for
// subscribe with a topic that overlaps the filter gives true; an allow rule
// with a topic that covers the filter (acl_filter_covers), or with no
// topics, gives false; at the end no_match decides. A NULL or disabled acl
// gives false. Thread-safe, like acl_check(); O(rules x topics).
bool acl_filter_may_deny(const acl *a, const acl_client *who, const char *filter, size_t len);

// Returns true when some rule's subject tests the peer address (ipaddrs),
// that is when decisions for one client id and user name may change with
// the address the client connects from. false for NULL.
bool acl_uses_peer(const acl *a);

// Returns true when some topic name is matched by both filters x (xlen
// bytes) and y (ylen bytes), with the MQTT matching rules of
// topic_filter_match() ("a/#" matches "a"; a first-level wildcard never
// matches a name starting with '$'). Returns false when either filter is
// invalid. Neither may carry a $share prefix.
bool acl_filters_overlap(const char *x, size_t xlen, const char *y, size_t ylen);

// Returns true when every topic name that the filter req (rlen bytes)
// matches is also matched by the filter rule (flen bytes), following the
// MQTT matching rules ("#" is the same as "+/#", and a rule starting with a
// wildcard does not cover a request whose first level starts with '$').
// Returns false when either filter is invalid (empty, misplaced wildcard,
// NUL byte). Neither may carry a $share prefix.
bool acl_filter_covers(const char *rule, size_t flen, const char *req, size_t rlen);

#endif // NMQ_AUTH_ACL_H
