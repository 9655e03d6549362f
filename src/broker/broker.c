// Routing: topic tree match, per-session merge of overlapping
// subscriptions, shared-subscription delivery, retained messages, wills and
// $SYS client status.
#include "src/broker/broker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "nng/transport/listener.h"
#include "src/auth/auth.h"
#include "src/log/log.h"

// One subscription of a session, kept for cleanup and introspection.
typedef struct sub_rec {
	char          *filter;
	size_t         len;
	proto_sub_opts opts;
} sub_rec;

// The application data of a session: its subscriptions.
typedef struct sess_subs {
	pthread_mutex_t mtx;
	sub_rec        *v;
	size_t          n;
	size_t          cap;
} sess_subs;

struct nmq_broker {
	topic_tree     *tree;
	retain_store   *retained;
	nmq_proto      *proto;
	pthread_mutex_t subs_mtx; // creation of sess_subs

	// Reloadable: swapped under auth_mtx, used through a held reference.
	pthread_mutex_t auth_mtx;
	auth_ctx       *auth;
	bool            allow_anonymous;
	bool            deny_disconnect;
	// An ACL with rules is in force; when none is, PUBLISH and SUBSCRIBE
	// skip the auth lock altogether (the common case, on the hot path).
	_Atomic bool     acl_active;
	_Atomic uint32_t max_subscriptions; // per client, 0 = no limit
};

// Takes a reference to the current authentication state, with the flags
// that go with it.
static auth_ctx *auth_get(nmq_broker *b, bool *anon, bool *deny_disconnect)
{
	pthread_mutex_lock(&b->auth_mtx);
	auth_ctx *a = auth_ctx_hold(b->auth);
	if (anon != NULL) {
		*anon = b->allow_anonymous;
	}
	if (deny_disconnect != NULL) {
		*deny_disconnect = b->deny_disconnect;
	}
	pthread_mutex_unlock(&b->auth_mtx);
	return a;
}

static void sess_hold(void *s)
{
	nmq_session_hold(s);
}

static void sess_release(void *s)
{
	nmq_session_release(s);
}

static bool sess_eligible(void *s)
{
	return nmq_session_online(s);
}

static const topic_tree_ops tree_ops = {
	.hold     = sess_hold,
	.release  = sess_release,
	.eligible = sess_eligible,
};

static void msg_hold(void *m)
{
	nmq_msg_hold(m);
}

static void msg_release(void *m)
{
	nmq_msg_release(m);
}

static const retain_ops ret_ops = {
	.hold    = msg_hold,
	.release = msg_release,
};

// Returns a new broker, or NULL.
nmq_broker *broker_alloc(const nmq_conf *conf)
{
	nmq_broker *b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return NULL;
	}
	b->tree     = topic_tree_alloc(&tree_ops);
	b->retained = retain_alloc(&ret_ops);
	if (b->tree == NULL || b->retained == NULL) {
		broker_free(b);
		return NULL;
	}
	pthread_mutex_init(&b->subs_mtx, NULL);
	pthread_mutex_init(&b->auth_mtx, NULL);
	char err[256];
	if (broker_reconfigure(b, conf, err, sizeof(err)) != 0) {
		log_error("auth", "%s", err);
		broker_free(b);
		return NULL;
	}
	return b;
}

void broker_set_proto(nmq_broker *b, nmq_proto *p)
{
	b->proto = p;
}

// Builds the authentication state of conf and swaps it in. Returns 0, or
// -1 with a message in err (the running state is kept).
int broker_reconfigure(nmq_broker *b, const nmq_conf *conf, char *err, size_t errlen)
{
	auth_ctx *a = auth_ctx_alloc(conf, err, errlen);
	if (a == NULL) {
		return -1;
	}
	pthread_mutex_lock(&b->auth_mtx);
	auth_ctx *old      = b->auth;
	b->auth            = a;
	b->allow_anonymous = conf->allow_anonymous;
	b->deny_disconnect = conf->auth_deny_action == CONF_DENY_DISCONNECT;
	b->acl_active      = acl_enabled(auth_ctx_acl(a));
	pthread_mutex_unlock(&b->auth_mtx);
	b->max_subscriptions = conf->max_subscriptions;
	if (old != NULL) {
		auth_ctx_release(old);
	}
	return 0;
}

void broker_free(nmq_broker *b)
{
	if (b == NULL) {
		return;
	}
	if (b->tree != NULL) {
		topic_tree_free(b->tree);
	}
	if (b->retained != NULL) {
		retain_free(b->retained);
	}
	if (b->auth != NULL) {
		auth_ctx_release(b->auth);
	}
	pthread_mutex_destroy(&b->subs_mtx);
	pthread_mutex_destroy(&b->auth_mtx);
	free(b);
}

topic_tree *broker_topic_tree(nmq_broker *b)
{
	return b->tree;
}

retain_store *broker_retain(nmq_broker *b)
{
	return b->retained;
}

// Fills protocol limits from the mqtt section.
void broker_limits_from_conf(const nmq_conf *conf, proto_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->max_packet_size        = conf->max_packet_size;
	lim->client_max_packet_size = conf->client_max_packet_size;
	lim->max_mqueue_len         = conf->max_mqueue_len;
	lim->max_inflight_window    = conf->max_inflight_window;
	lim->max_awaiting_rel       = conf->max_awaiting_rel;
	lim->await_rel_timeout_s    = conf->await_rel_timeout_s;
	lim->retry_interval_s       = conf->retry_interval_s;
	lim->keepalive_multiplier   = conf->keepalive_multiplier;
	lim->max_topic_alias
	    = (uint16_t)(conf->max_topic_alias > 65535 ? 65535 : conf->max_topic_alias);
	lim->connect_timeout_ms = 10000;
	lim->max_connections    = conf->max_connections;
	lim->max_keepalive      = conf->max_keepalive;
	lim->max_topic_length   = conf->max_topic_length;
	lim->max_topic_levels   = conf->max_topic_levels;
}

// Authentication: the password list and auth.allow_anonymous
// (compat.md 2.6).
static uint8_t b_authenticate(void *app, const proto_client_info *info)
{
	nmq_broker *b = app;
	bool        anon;
	char        cn[256];
	if (info->conn != NULL && !listener_conn_authorized(info->conn, cn, sizeof(cn))) {
		// A TLS listener with verify_peer and no verified certificate.
		log_info("auth", "client_id=%s peer=%s event=refused reason=tls_peer_not_verified",
		    info->client_id, info->peer);
		return MQTT_RC_NOT_AUTHORIZED;
	}
	if (info->conn != NULL && listener_conn_over_limit(info->conn)) {
		// listeners.<name>.max_connections reached.
		atomic_fetch_add(&proto_metrics_get(b->proto)->refused_connections, 1);
		log_info("auth",
		    "client_id=%s peer=%s event=refused reason=listener_max_connections",
		    info->client_id, info->peer);
		return MQTT_RC_QUOTA_EXCEEDED;
	}
	auth_ctx *a  = auth_get(b, &anon, NULL);
	uint8_t   rc = auth_connect_check(a, (const char *)info->username,
            info->username != NULL ? info->username_len : 0, (const char *)info->password,
            info->password != NULL ? info->password_len : 0, anon);
	auth_ctx_release(a);
	if (rc != 0) {
		log_info("auth", "client_id=%s peer=%s event=refused reason=0x%02x",
		    info->client_id, info->peer, rc);
	}
	return rc;
}

// Asks the ACL; returns true if allowed. *disconnect says whether a denial
// ends the connection (auth.deny_action).
static bool acl_allows(nmq_broker *b, const proto_who *who, int action, const char *topic,
    size_t len, bool *disconnect)
{
	if (!b->acl_active) {
		*disconnect = false;
		return true;
	}
	auth_ctx  *a = auth_get(b, NULL, disconnect);
	acl_client c = { who->client_id, who->username, who->peer };
	int        d = acl_check(auth_ctx_acl(a), &c, action, topic, len);
	auth_ctx_release(a);
	if (d != ACL_ALLOW) {
		log_info_rl("acl", "client_id=%s peer=%s action=%s topic=%.*s event=denied",
		    who->client_id, who->peer, action == ACL_PUBLISH ? "publish" : "subscribe",
		    (int)(len > 200 ? 200 : len), topic);
		return false;
	}
	return true;
}

// Orders matches by subscriber so that one session's matches are adjacent.
static int match_cmp(const void *a, const void *b)
{
	const topic_match *x = a;
	const topic_match *y = b;
	if (x->sub != y->sub) {
		return x->sub < y->sub ? -1 : 1;
	}
	return (int)x->shared - (int)y->shared;
}

// Delivers msg to the matches of one session (non-shared entries merged:
// the highest QoS, every subscription identifier, RAP from any) and to
// each shared match separately.
static void deliver_group(nmq_session *from, nmq_msg *msg, topic_match *v, size_t n)
{
	nmq_session *s    = v[0].sub;
	bool         self = from != NULL && from == s;
	int          qos  = -1;
	bool         rap  = false;
	uint32_t     ids[4];
	uint32_t     nids = 0;
	for (size_t i = 0; i < n; i++) {
		const topic_sub_opts *o = &v[i].opts;
		if (v[i].shared) {
			uint8_t  q  = o->qos < msg->qos ? o->qos : msg->qos;
			uint32_t id = o->sub_id;
			nmq_session_deliver(
			    s, msg, q, o->retain_as_published && msg->retain, &id, id != 0 ? 1 : 0);
			continue;
		}
		if (self && o->no_local) {
			continue; // [MQTT-3.8.3-3]
		}
		if ((int)o->qos > qos) {
			qos = o->qos;
		}
		rap = rap || o->retain_as_published;
		if (o->sub_id != 0 && nids < 4) {
			ids[nids++] = o->sub_id;
		}
	}
	if (qos < 0) {
		return;
	}
	uint8_t q = (uint8_t)qos < msg->qos ? (uint8_t)qos : msg->qos;
	nmq_session_deliver(s, msg, q, rap && msg->retain, ids, nids);
}

// Each worker reuses one match vector (no allocation per publish); a
// thread-specific key frees it when the worker exits.
static pthread_key_t  matches_key;
static pthread_once_t matches_once = PTHREAD_ONCE_INIT;

static void matches_free(void *arg)
{
	topic_match_vec *mv = arg;
	topic_match_vec_fini(mv, &tree_ops);
	free(mv);
}

static void matches_key_init(void)
{
	pthread_key_create(&matches_key, matches_free);
}

// Returns this thread's match vector, or NULL when out of memory.
static topic_match_vec *thread_matches(void)
{
	pthread_once(&matches_once, matches_key_init);
	topic_match_vec *mv = pthread_getspecific(matches_key);
	if (mv == NULL) {
		mv = malloc(sizeof(*mv));
		if (mv == NULL) {
			return NULL;
		}
		topic_match_vec_init(mv);
		pthread_setspecific(matches_key, mv);
	}
	return mv;
}

// Routes one message; see proto.h.
static int b_route(void *app, nmq_session *from, const proto_who *who, nmq_msg *msg)
{
	nmq_broker *b = app;
	bool        disconnect;
	if (who != NULL
	    && !acl_allows(b, who, ACL_PUBLISH, msg->topic, msg->topic_len, &disconnect)) {
		proto_metrics *m = proto_metrics_get(b->proto);
		atomic_fetch_add(&m->msgs_dropped, 1);
		atomic_fetch_add(&m->drop_acl, 1);
		return MQTT_RC_NOT_AUTHORIZED | (disconnect ? PROTO_RC_DISCONNECT : 0);
	}
	if (msg->retain) {
		if (msg->payload_len == 0) {
			retain_set(b->retained, msg->topic, msg->topic_len, NULL);
		} else {
			nmq_msg_hold(msg);
			retain_set(b->retained, msg->topic, msg->topic_len, msg);
		}
	}
	topic_match_vec *mv = thread_matches();
	if (mv == NULL) {
		return MQTT_RC_UNSPECIFIED;
	}
	topic_tree_match(b->tree, msg->topic, msg->topic_len, mv);
	if (mv->n > 1) {
		qsort(mv->v, mv->n, sizeof(topic_match), match_cmp);
	}
	size_t i = 0;
	while (i < mv->n) {
		size_t j = i + 1;
		while (j < mv->n && mv->v[j].sub == mv->v[i].sub) {
			j++;
		}
		deliver_group(from, msg, &mv->v[i], j - i);
		i = j;
	}
	topic_match_vec_clear(mv, &tree_ops);
	return 0;
}

// Returns the session's subscription record list, creating it.
static sess_subs *subs_of(nmq_broker *b, nmq_session *s)
{
	void **slot = nmq_session_app_data(s);
	pthread_mutex_lock(&b->subs_mtx);
	sess_subs *ss = *slot;
	if (ss == NULL) {
		ss = calloc(1, sizeof(*ss));
		if (ss != NULL) {
			pthread_mutex_init(&ss->mtx, NULL);
			*slot = ss;
		}
	}
	pthread_mutex_unlock(&b->subs_mtx);
	return ss;
}

// Adds or replaces one subscription.
static int b_subscribe(void *app, nmq_session *s, const proto_who *who, const char *filter,
    size_t len, const proto_sub_opts *opts, bool *existed)
{
	nmq_broker *b = app;
	bool        disconnect;
	if (!acl_allows(b, who, ACL_SUBSCRIBE, filter, len, &disconnect)) {
		return MQTT_RC_NOT_AUTHORIZED | (disconnect ? PROTO_RC_DISCONNECT : 0);
	}
	sess_subs *ss = subs_of(b, s);
	if (ss == NULL) {
		return MQTT_RC_UNSPECIFIED;
	}
	topic_sub_opts to;
	to.qos                 = opts->qos;
	to.no_local            = opts->no_local;
	to.retain_as_published = opts->retain_as_published;
	to.retain_handling     = opts->retain_handling;
	to.sub_id              = opts->sub_id;
	pthread_mutex_lock(&ss->mtx);
	size_t i;
	for (i = 0; i < ss->n; i++) {
		if (ss->v[i].len == len && memcmp(ss->v[i].filter, filter, len) == 0) {
			break;
		}
	}
	uint32_t max = b->max_subscriptions;
	if (i == ss->n && max > 0 && ss->n >= max) {
		// mqtt.max_subscriptions: a new filter beyond the limit.
		pthread_mutex_unlock(&ss->mtx);
		atomic_fetch_add(&proto_metrics_get(b->proto)->refused_subscriptions, 1);
		return MQTT_RC_QUOTA_EXCEEDED;
	}
	if (i == ss->n) {
		// Room for the record first, so that a failure leaves no trace.
		if (ss->n == ss->cap) {
			size_t   ncap = ss->cap ? ss->cap * 2 : 4;
			sub_rec *nv   = realloc(ss->v, ncap * sizeof(*nv));
			if (nv == NULL) {
				pthread_mutex_unlock(&ss->mtx);
				return MQTT_RC_UNSPECIFIED;
			}
			ss->v   = nv;
			ss->cap = ncap;
		}
		ss->v[i].filter = strndup(filter, len);
		if (ss->v[i].filter == NULL) {
			pthread_mutex_unlock(&ss->mtx);
			return MQTT_RC_UNSPECIFIED;
		}
		ss->v[i].len = len;
	}
	if (topic_tree_insert(b->tree, filter, len, s, &to, existed) != 0) {
		if (i == ss->n) {
			free(ss->v[i].filter);
		}
		pthread_mutex_unlock(&ss->mtx);
		return MQTT_RC_TOPIC_FILTER_INVALID;
	}
	ss->v[i].opts = *opts;
	if (i == ss->n) {
		ss->n++;
	}
	pthread_mutex_unlock(&ss->mtx);
	return opts->qos;
}

typedef struct retained_ctx {
	nmq_session          *s;
	const proto_sub_opts *opts;
	uint64_t              now;
} retained_ctx;

// Delivers one retained message to a new subscriber (retain flag set).
static void retained_cb(void *arg, void *m)
{
	retained_ctx *ctx = arg;
	nmq_msg      *msg = m;
	if (msg->expiry_at_ms == 0 || nmq_msg_remaining(msg, ctx->now) > 0) {
		uint8_t  q  = ctx->opts->qos < msg->qos ? ctx->opts->qos : msg->qos;
		uint32_t id = ctx->opts->sub_id;
		nmq_session_deliver(ctx->s, msg, q, true, &id, id != 0 ? 1 : 0);
	}
	nmq_msg_release(msg);
}

// After SUBACK: retained messages per Retain Handling [MQTT-3.3.1-9..11];
// none for shared subscriptions [MQTT-4.8.2-?].
static void b_subscribed(void *app, nmq_session *s, const char *filter, size_t len,
    const proto_sub_opts *opts, bool existed)
{
	nmq_broker *b = app;
	if (len > 7 && memcmp(filter, "$share/", 7) == 0) {
		return;
	}
	if (opts->retain_handling == 2 || (opts->retain_handling == 1 && existed)) {
		return;
	}
	retained_ctx ctx = { s, opts, nmq_clock_ms() };
	retain_match(b->retained, filter, len, retained_cb, &ctx);
}

// Removes one subscription; 0x11 if there was none.
static uint8_t b_unsubscribe(void *app, nmq_session *s, const char *filter, size_t len)
{
	nmq_broker *b  = app;
	sess_subs  *ss = subs_of(b, s);
	if (ss == NULL) {
		return MQTT_RC_UNSPECIFIED;
	}
	uint8_t rc = MQTT_RC_NO_SUBSCRIPTION_EXISTED;
	pthread_mutex_lock(&ss->mtx);
	for (size_t i = 0; i < ss->n; i++) {
		if (ss->v[i].len == len && memcmp(ss->v[i].filter, filter, len) == 0) {
			topic_tree_remove(b->tree, filter, len, s);
			free(ss->v[i].filter);
			ss->v[i] = ss->v[--ss->n];
			rc       = 0;
			break;
		}
	}
	pthread_mutex_unlock(&ss->mtx);
	return rc;
}

// Drops every subscription of an ending session.
static void b_session_end(void *app, nmq_session *s)
{
	nmq_broker *b    = app;
	void      **slot = nmq_session_app_data(s);
	pthread_mutex_lock(&b->subs_mtx);
	sess_subs *ss = *slot;
	*slot         = NULL;
	pthread_mutex_unlock(&b->subs_mtx);
	if (ss == NULL) {
		return;
	}
	pthread_mutex_lock(&ss->mtx);
	for (size_t i = 0; i < ss->n; i++) {
		topic_tree_remove(b->tree, ss->v[i].filter, ss->v[i].len, s);
		free(ss->v[i].filter);
	}
	pthread_mutex_unlock(&ss->mtx);
	pthread_mutex_destroy(&ss->mtx);
	free(ss->v);
	free(ss);
}

// Appends s to buf as a JSON string with escapes; returns the new length.
static size_t json_str(char *buf, size_t cap, size_t n, const char *s)
{
	if (n < cap) {
		buf[n] = '"';
	}
	n++;
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		char          esc[8];
		const char   *e = NULL;
		if (ch == '"') {
			e = "\\\"";
		} else if (ch == '\\') {
			e = "\\\\";
		} else if (ch < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", ch);
			e = esc;
		}
		if (e != NULL) {
			for (; *e != '\0'; e++, n++) {
				if (n < cap) {
					buf[n] = *e;
				}
			}
		} else {
			if (n < cap) {
				buf[n] = (char)ch;
			}
			n++;
		}
	}
	if (n < cap) {
		buf[n] = '"';
	}
	return n + 1;
}

// Publishes $SYS/brokers/client_status/<clientid> (compat.md 5.4).
static void b_client_status(void *app, nmq_session *s, bool online, uint8_t reason,
    const char *peer, uint16_t keepalive, bool clean_start)
{
	nmq_broker    *b   = app;
	const char    *cid = nmq_session_client_id(s);
	struct timeval tv;
	gettimeofday(&tv, NULL);
	unsigned long long ts
	    = (unsigned long long)tv.tv_sec * 1000 + (unsigned long long)tv.tv_usec / 1000;
	char peer_host[80];
	snprintf(peer_host, sizeof(peer_host), "%s", peer);
	char *colon = strrchr(peer_host, ':');
	if (colon != NULL) {
		*colon = '\0';
	}
	char *host = peer_host;
	if (host[0] == '[') {
		host++;
		char *rb = strchr(host, ']');
		if (rb != NULL) {
			*rb = '\0';
		}
	}
	// Two passes: measure, then write.
	char  *buf = NULL;
	size_t cap = 0;
	for (int pass = 0; pass < 2; pass++) {
		size_t n = 0;
		char   tmp[128];
#define PUT(str)                                                                                   \
	do {                                                                                       \
		const char *p_ = (str);                                                            \
		for (; *p_ != '\0'; p_++, n++)                                                     \
			if (n < cap)                                                               \
				buf[n] = *p_;                                                      \
	} while (0)
		if (online) {
			PUT("{\"status\":\"online\",\"username\":\"\",\"ts\":");
			snprintf(tmp, sizeof(tmp), "%llu", ts);
			PUT(tmp);
			PUT(",\"proto_name\":\"MQTT\",\"keepalive\":");
			snprintf(tmp, sizeof(tmp), "%u", keepalive);
			PUT(tmp);
			snprintf(tmp, sizeof(tmp),
			    ",\"return_code\":\"%x\",\"proto_ver\":%u,\"client_id\":", reason,
			    nmq_session_proto(s));
			PUT(tmp);
			n = json_str(buf, cap, n, cid);
			snprintf(
			    tmp, sizeof(tmp), ",\"clean_start\":%d,\"IPv4\":", clean_start ? 1 : 0);
			PUT(tmp);
			n = json_str(buf, cap, n, host);
			PUT("}");
		} else {
			PUT("{\"status\":\"offline\",\"username\":\"\",\"ts\":");
			snprintf(tmp, sizeof(tmp), "%llu", ts);
			PUT(tmp);
			snprintf(
			    tmp, sizeof(tmp), ",\"reason_code\":\"%x\",\"client_id\":", reason);
			PUT(tmp);
			n = json_str(buf, cap, n, cid);
			PUT(",\"IPv4\":");
			n = json_str(buf, cap, n, host);
			PUT("}");
		}
#undef PUT
		if (pass == 0) {
			cap = n;
			buf = malloc(cap + 1);
			if (buf == NULL) {
				return;
			}
		}
	}
	char topic[300];
	int  tl = snprintf(topic, sizeof(topic), "$SYS/brokers/client_status/%s", cid);
	if (tl <= 0 || (size_t)tl >= sizeof(topic)) {
		free(buf);
		return;
	}
	nmq_msg *m = nmq_msg_alloc(topic, (size_t)tl, 0, cap);
	if (m != NULL) {
		memcpy(m->payload, buf, cap);
		m->qos = 0;
		b_route(b, NULL, NULL, m);
		nmq_msg_release(m);
	}
	free(buf);
}

const proto_app_ops broker_proto_ops = {
	.authenticate  = b_authenticate,
	.route         = b_route,
	.subscribe     = b_subscribe,
	.subscribed    = b_subscribed,
	.unsubscribe   = b_unsubscribe,
	.session_end   = b_session_end,
	.client_status = b_client_status,
};
