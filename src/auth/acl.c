// The ACL engine (see acl.h).
#include "src/auth/acl.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nng/codec/mqtt_codec.h"
#include "src/topic/topic_tree.h"

// An address range: the first `prefix` bits of addr. IPv4 is kept as
// ::ffff:a.b.c.d with the prefix moved up by 96.
typedef struct acl_net {
	uint8_t addr[16];
	uint8_t prefix;
} acl_net;

typedef struct acl_subject {
	char    *username; // NULL: not constrained
	char    *clientid; // NULL: not constrained
	bool     username_any;
	bool     clientid_any;
	bool     has_nets; // ipaddrs given (maybe empty: matches nobody)
	acl_net *nets;
	size_t   n_nets;
} acl_subject;

typedef struct acl_topic {
	char  *text; // the filter, '@' removed, NUL-terminated
	size_t len;
	bool   literal; // '@': equality only
	bool   placeholder; // holds ${clientid} or ${username}
} acl_topic;

typedef struct acl_rule {
	int          permit; // ACL_ALLOW or ACL_DENY
	int          actions; // ACL_PUBLISH | ACL_SUBSCRIBE bits
	acl_subject  self;
	bool         has_and;
	bool         has_or;
	bool         has_topics;
	acl_subject *and_v;
	size_t       n_and;
	acl_subject *or_v;
	size_t       n_or;
	acl_topic   *topics;
	size_t       n_topics;
} acl_rule;

struct acl {
	acl_rule *rules;
	size_t    n;
	int       no_match;
	bool      enabled;
	uint64_t  gen;
};

static atomic_uint_fast64_t acl_next_gen = 1;

static const char PH_CLIENTID[] = "${clientid}";
static const char PH_USERNAME[] = "${username}";

// Writes "auth.acl.rules[i]: <reason>" into err (when err is not NULL).
static void set_err(char *err, size_t errlen, size_t rule, const char *fmt, ...)
{
	char    why[200];
	va_list ap;

	if (err == NULL || errlen == 0) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "auth.acl.rules[%zu]: %s", rule, why);
}

// Copies at most 48 bytes of s into buf (which holds 52), replacing control
// characters and quotes, and returns buf: for quoting input in messages.
static const char *shown(const char *s, char *buf)
{
	size_t i;

	for (i = 0; s[i] != '\0' && i < 48; i++) {
		unsigned char c = (unsigned char)s[i];
		buf[i]          = (c < 0x20 || c == 0x7f || c == '"') ? '?' : (char)c;
	}
	if (s[i] != '\0') {
		memcpy(buf + i, "...", 3);
		i += 3;
	}
	buf[i] = '\0';
	return buf;
}

// Parses an address with an optional "/len" into net. Returns 0, or -1
// when the text is not an IPv4 or IPv6 address or the length is out of
// range.
static int parse_net(const char *s, acl_net *net)
{
	char        buf[64];
	const char *slash = strchr(s, '/');
	size_t      n     = slash != NULL ? (size_t)(slash - s) : strlen(s);
	int         max;
	int         base = 0;
	long        len;

	if (n == 0 || n >= sizeof(buf)) {
		return -1;
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	memset(net->addr, 0, sizeof(net->addr));
	if (inet_pton(AF_INET, buf, net->addr + 12) == 1) {
		net->addr[10] = 0xff;
		net->addr[11] = 0xff;
		max           = 32;
		base          = 96;
	} else if (inet_pton(AF_INET6, buf, net->addr) == 1) {
		max = 128;
	} else {
		return -1;
	}
	len = max;
	if (slash != NULL) {
		const char *p = slash + 1;
		if (*p == '\0' || strlen(p) > 3) {
			return -1;
		}
		len = 0;
		for (; *p != '\0'; p++) {
			if (*p < '0' || *p > '9') {
				return -1;
			}
			len = len * 10 + (*p - '0');
		}
		if (len > max) {
			return -1;
		}
	}
	net->prefix = (uint8_t)(base + len);
	return 0;
}

// Parses a peer address as the transport prints it ("1.2.3.4:5678",
// "[::1]:5678", or without the port) into a 16-byte address (IPv4 mapped).
// Returns 0, or -1 when it is not an address.
static int parse_peer(const char *peer, uint8_t addr[16])
{
	char        buf[64];
	const char *s = peer;
	size_t      n;
	const char *colon;

	if (peer == NULL) {
		return -1;
	}
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL) {
			return -1;
		}
		s++;
		n = (size_t)(close - s);
	} else if ((colon = strchr(s, ':')) != NULL && strchr(colon + 1, ':') == NULL) {
		n = (size_t)(colon - s); // a.b.c.d:port
	} else {
		n = strlen(s);
	}
	if (n == 0 || n >= sizeof(buf)) {
		return -1;
	}
	memcpy(buf, s, n);
	buf[n]                 = '\0';
	buf[strcspn(buf, "%")] = '\0'; // fe80::1%eth0: drop the zone
	memset(addr, 0, 16);
	if (inet_pton(AF_INET, buf, addr + 12) == 1) {
		addr[10] = 0xff;
		addr[11] = 0xff;
		return 0;
	}
	return inet_pton(AF_INET6, buf, addr) == 1 ? 0 : -1;
}

// Returns true when addr lies in net.
static bool net_contains(const acl_net *net, const uint8_t addr[16])
{
	size_t full = net->prefix / 8;
	int    rest = net->prefix % 8;

	if (memcmp(net->addr, addr, full) != 0) {
		return false;
	}
	if (rest == 0) {
		return true;
	}
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (net->addr[full] & mask) == (addr[full] & mask);
}

// Frees what a subject owns.
static void subject_fini(acl_subject *s)
{
	free(s->username);
	free(s->clientid);
	free(s->nets);
}

// Frees what a rule owns.
static void rule_fini(acl_rule *r)
{
	subject_fini(&r->self);
	for (size_t i = 0; i < r->n_and; i++) {
		subject_fini(&r->and_v[i]);
	}
	for (size_t i = 0; i < r->n_or; i++) {
		subject_fini(&r->or_v[i]);
	}
	free(r->and_v);
	free(r->or_v);
	for (size_t i = 0; i < r->n_topics; i++) {
		free(r->topics[i].text);
	}
	free(r->topics);
}

// Returns the number of elements of an array node (1 for a non-array).
static size_t count_items(const cJSON *node)
{
	size_t n = 0;

	if (!cJSON_IsArray(node)) {
		return 1;
	}
	for (const cJSON *e = node->child; e != NULL; e = e->next) {
		n++;
	}
	return n;
}

// Appends the addresses of node (a string or an array of strings) to s.
// Returns 0, or -1 with err set.
static int add_nets(acl_subject *s, const cJSON *node, size_t ri, char *err, size_t errlen)
{
	size_t       n = count_items(node);
	const cJSON *e = cJSON_IsArray(node) ? node->child : node;
	acl_net     *v;
	char         b[52];

	if (s->n_nets + n > ACL_MAX_ITEMS) {
		set_err(err, errlen, ri, "more than %d addresses", ACL_MAX_ITEMS);
		return -1;
	}
	s->has_nets = true;
	if (n == 0) {
		return 0;
	}
	if ((v = realloc(s->nets, (s->n_nets + n) * sizeof(*v))) == NULL) {
		set_err(err, errlen, ri, "out of memory");
		return -1;
	}
	s->nets = v;
	for (; e != NULL; e = cJSON_IsArray(node) ? e->next : NULL) {
		if (!cJSON_IsString(e) || e->valuestring == NULL) {
			set_err(err, errlen, ri, "ipaddrs: expected address strings");
			return -1;
		}
		if (parse_net(e->valuestring, &s->nets[s->n_nets]) != 0) {
			set_err(err, errlen, ri, "\"%s\" is not an IP address or CIDR range",
			    shown(e->valuestring, b));
			return -1;
		}
		s->n_nets++;
	}
	return 0;
}

// Copies the string field key of node into *dst (setting *any for "#").
// Returns 0 (also when the field is absent), or -1 with err set.
static int string_field(
    const cJSON *node, const char *key, char **dst, bool *any, size_t ri, char *err, size_t errlen)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(node, key);

	if (f == NULL) {
		return 0;
	}
	if (!cJSON_IsString(f) || f->valuestring == NULL) {
		set_err(err, errlen, ri, "%s: expected a string", key);
		return -1;
	}
	if ((*dst = strdup(f->valuestring)) == NULL) {
		set_err(err, errlen, ri, "out of memory");
		return -1;
	}
	*any = strcmp(*dst, "#") == 0;
	return 0;
}

// Fills s from the subject fields of node. When only_subject is set, any
// other key is an error (for the objects of and/or). Returns 0, or -1 with
// err set.
static int parse_subject(
    acl_subject *s, const cJSON *node, bool only_subject, size_t ri, char *err, size_t errlen)
{
	if (string_field(node, "username", &s->username, &s->username_any, ri, err, errlen) != 0
	    || string_field(node, "clientid", &s->clientid, &s->clientid_any, ri, err, errlen)
	        != 0) {
		return -1;
	}
	for (const cJSON *f = node->child; f != NULL; f = f->next) {
		const char *k = f->string != NULL ? f->string : "";
		if (strcmp(k, "ipaddr") == 0 || strcmp(k, "ipaddrs") == 0) {
			if (add_nets(s, f, ri, err, errlen) != 0) {
				return -1;
			}
		} else if (only_subject && strcmp(k, "username") != 0
		    && strcmp(k, "clientid") != 0) {
			char b[52];
			set_err(err, errlen, ri,
			    "\"%s\": only username, clientid and ipaddrs may appear in and/or",
			    shown(k, b));
			return -1;
		}
	}
	return 0;
}

// Fills *v / *n from an and/or list. Returns 0, or -1 with err set.
static int parse_group(const cJSON *node, const char *key, acl_subject **v, size_t *n, size_t ri,
    char *err, size_t errlen)
{
	size_t cnt;

	if (!cJSON_IsArray(node)) {
		set_err(err, errlen, ri, "%s: expected an array of objects", key);
		return -1;
	}
	if ((cnt = count_items(node)) > ACL_MAX_ITEMS) {
		set_err(err, errlen, ri, "%s: more than %d entries", key, ACL_MAX_ITEMS);
		return -1;
	}
	if (cnt == 0) {
		return 0;
	}
	if ((*v = calloc(cnt, sizeof(**v))) == NULL) {
		set_err(err, errlen, ri, "out of memory");
		return -1;
	}
	for (const cJSON *e = node->child; e != NULL; e = e->next) {
		if (!cJSON_IsObject(e)) {
			set_err(err, errlen, ri, "%s: expected an array of objects", key);
			return -1;
		}
		(*n)++;
		if (parse_subject(&(*v)[*n - 1], e, true, ri, err, errlen) != 0) {
			return -1;
		}
	}
	return 0;
}

// Fills one topic entry from the text s. Returns 0, or -1 with err set.
static int parse_topic(acl_topic *t, const char *s, size_t ri, char *err, size_t errlen)
{
	char   b[52];
	size_t len = strlen(s);

	t->literal = s[0] == '@';
	if (t->literal) {
		s++;
		len--;
	}
	if (len == 0 || len > 65535
	    || (!t->literal && !mqtt_topic_filter_valid((const uint8_t *)s, len))) {
		set_err(err, errlen, ri, "\"%s\" is not a valid topic filter", shown(s, b));
		return -1;
	}
	if ((t->text = strdup(s)) == NULL) {
		set_err(err, errlen, ri, "out of memory");
		return -1;
	}
	t->len         = len;
	t->placeholder = strstr(s, PH_CLIENTID) != NULL || strstr(s, PH_USERNAME) != NULL;
	return 0;
}

// Fills the topics of r from node (a string or an array of strings).
// Returns 0, or -1 with err set.
static int parse_topics(acl_rule *r, const cJSON *node, size_t ri, char *err, size_t errlen)
{
	size_t       n = count_items(node);
	const cJSON *e = cJSON_IsArray(node) ? node->child : node;

	r->has_topics = true;
	if (n > ACL_MAX_ITEMS) {
		set_err(err, errlen, ri, "topics: more than %d entries", ACL_MAX_ITEMS);
		return -1;
	}
	if (n == 0) {
		return 0;
	}
	if ((r->topics = calloc(n, sizeof(*r->topics))) == NULL) {
		set_err(err, errlen, ri, "out of memory");
		return -1;
	}
	for (; e != NULL; e = cJSON_IsArray(node) ? e->next : NULL) {
		if (!cJSON_IsString(e) || e->valuestring == NULL) {
			set_err(err, errlen, ri, "topics: expected topic filter strings");
			return -1;
		}
		if (parse_topic(&r->topics[r->n_topics], e->valuestring, ri, err, errlen) != 0) {
			return -1;
		}
		r->n_topics++;
	}
	return 0;
}

// Fills r from the rule object node. Returns 0, or -1 with err set.
static int parse_rule(acl_rule *r, const cJSON *node, size_t ri, char *err, size_t errlen)
{
	const cJSON *f;
	char         b[52];

	if (!cJSON_IsObject(node)) {
		set_err(err, errlen, ri, "expected an object");
		return -1;
	}
	f = cJSON_GetObjectItemCaseSensitive(node, "permit");
	if (f == NULL) {
		set_err(err, errlen, ri, "permit (allow or deny) is required");
		return -1;
	}
	if (cJSON_IsString(f) && strcmp(f->valuestring, "allow") == 0) {
		r->permit = ACL_ALLOW;
	} else if (cJSON_IsString(f) && strcmp(f->valuestring, "deny") == 0) {
		r->permit = ACL_DENY;
	} else {
		set_err(err, errlen, ri, "permit: expected allow or deny, got \"%s\"",
		    cJSON_IsString(f) ? shown(f->valuestring, b) : "(not a string)");
		return -1;
	}
	f          = cJSON_GetObjectItemCaseSensitive(node, "action");
	r->actions = ACL_PUBLISH | ACL_SUBSCRIBE;
	if (f != NULL) {
		if (cJSON_IsString(f) && strcmp(f->valuestring, "publish") == 0) {
			r->actions = ACL_PUBLISH;
		} else if (cJSON_IsString(f) && strcmp(f->valuestring, "subscribe") == 0) {
			r->actions = ACL_SUBSCRIBE;
		} else if (!cJSON_IsString(f) || strcmp(f->valuestring, "pubsub") != 0) {
			set_err(err, errlen, ri,
			    "action: expected publish, subscribe or pubsub, got \"%s\"",
			    cJSON_IsString(f) ? shown(f->valuestring, b) : "(not a string)");
			return -1;
		}
	}
	if (parse_subject(&r->self, node, false, ri, err, errlen) != 0) {
		return -1;
	}
	if ((f = cJSON_GetObjectItemCaseSensitive(node, "and")) != NULL) {
		r->has_and = true;
		if (parse_group(f, "and", &r->and_v, &r->n_and, ri, err, errlen) != 0) {
			return -1;
		}
	}
	if ((f = cJSON_GetObjectItemCaseSensitive(node, "or")) != NULL) {
		r->has_or = true;
		if (parse_group(f, "or", &r->or_v, &r->n_or, ri, err, errlen) != 0) {
			return -1;
		}
	}
	if ((f = cJSON_GetObjectItemCaseSensitive(node, "topics")) != NULL
	    && parse_topics(r, f, ri, err, errlen) != 0) {
		return -1;
	}
	return 0;
}

// Builds an acl from the auth.acl tree. Returns it, or NULL with err set.
acl *acl_alloc(const cJSON *tree, int no_match, char *err, size_t errlen)
{
	acl         *a     = calloc(1, sizeof(*a));
	const cJSON *rules = tree;
	size_t       n;

	if (err != NULL && errlen > 0) {
		err[0] = '\0';
	}
	if (a == NULL) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen, "auth.acl: out of memory");
		}
		return NULL;
	}
	a->enabled  = true;
	a->no_match = no_match == ACL_DENY ? ACL_DENY : ACL_ALLOW;
	a->gen      = atomic_fetch_add(&acl_next_gen, 1);
	if (cJSON_IsObject(tree)) {
		const cJSON *en = cJSON_GetObjectItemCaseSensitive(tree, "enable");
		a->enabled      = !cJSON_IsFalse(en);
		rules           = cJSON_GetObjectItemCaseSensitive(tree, "rules");
	}
	if (rules == NULL) {
		return a;
	}
	if (!cJSON_IsArray(rules)) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen, "auth.acl.rules: expected an array of rules");
		}
		goto fail;
	}
	if ((n = count_items(rules)) > ACL_MAX_RULES) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen, "auth.acl.rules: more than %d rules", ACL_MAX_RULES);
		}
		goto fail;
	}
	if (n > 0 && (a->rules = calloc(n, sizeof(*a->rules))) == NULL) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen, "auth.acl: out of memory");
		}
		goto fail;
	}
	for (const cJSON *r = rules->child; r != NULL; r = r->next) {
		a->n++;
		if (parse_rule(&a->rules[a->n - 1], r, a->n - 1, err, errlen) != 0) {
			goto fail;
		}
	}
	return a;

fail:
	acl_free(a);
	return NULL;
}

// Frees the acl. NULL is allowed.
void acl_free(acl *a)
{
	if (a == NULL) {
		return;
	}
	for (size_t i = 0; i < a->n; i++) {
		rule_fini(&a->rules[i]);
	}
	free(a->rules);
	free(a);
}

// Returns whether the acl is enabled.
bool acl_enabled(const acl *a)
{
	return a != NULL && a->enabled;
}

// Returns the number of rules.
size_t acl_rule_count(const acl *a)
{
	return a != NULL ? a->n : 0;
}

// Returns the generation of the acl.
uint64_t acl_generation(const acl *a)
{
	return a != NULL ? a->gen : 0;
}

// Counts the levels of a valid filter, not counting a final "#". Sets
// *open when the filter ends with "#".
static size_t filter_shape(const char *f, size_t len, bool *open)
{
	size_t levels = 1;

	for (size_t i = 0; i < len; i++) {
		levels += f[i] == '/';
	}
	*open = f[len - 1] == '#';
	return *open ? levels - 1 : levels;
}

// Replaces the filters "#" and "/#" by their equivalents "+/#" and "/+/#",
// so that the levels before a final '#' never stand for the empty topic
// alone (an empty topic does not exist).
static void normalise(const char **f, size_t *len)
{
	if (*len == 1 && (*f)[0] == '#') {
		*f   = "+/#";
		*len = 3;
	} else if (*len == 2 && memcmp(*f, "/#", 2) == 0) {
		*f   = "/+/#";
		*len = 4;
	}
}

// Returns whether rule covers req (see acl.h).
bool acl_filter_covers(const char *rule, size_t flen, const char *req, size_t rlen)
{
	bool   ropen;
	bool   qopen;
	size_t rn;
	size_t qn;
	size_t rp = 0;
	size_t qp = 0;

	if (!mqtt_topic_filter_valid((const uint8_t *)rule, flen)
	    || !mqtt_topic_filter_valid((const uint8_t *)req, rlen)) {
		return false;
	}
	// A topic is never empty, so "#" matches exactly what "+/#" matches,
	// and "/#" what "/+/#" matches (the topic "" they add is not one).
	normalise(&rule, &flen);
	normalise(&req, &rlen);
	rn = filter_shape(rule, flen, &ropen);
	qn = filter_shape(req, rlen, &qopen);
	// Level counts: a closed rule accepts exactly rn levels, an open one
	// rn or more; the request must not reach outside that.
	if (ropen ? qn < rn : (qopen || qn != rn)) {
		return false;
	}
	for (size_t i = 0; i < rn; i++) {
		const char *re = memchr(rule + rp, '/', flen - rp);
		const char *qe = memchr(req + qp, '/', rlen - qp);
		size_t      rl = (re != NULL ? (size_t)(re - rule) : flen) - rp;
		size_t      ql = (qe != NULL ? (size_t)(qe - req) : rlen) - qp;

		if (rl == 1 && rule[rp] == '+') {
			// A first-level wildcard never matches a '$' topic.
			if (i == 0 && ql > 0 && req[qp] == '$') {
				return false;
			}
		} else if (rl != ql || memcmp(rule + rp, req + qp, rl) != 0) {
			return false; // also when the request has '+' here
		}
		rp += rl + 1;
		qp += ql + 1;
	}
	return true;
}

// Returns true when v is usable as a placeholder value: not NULL, not
// empty, and free of '/', '+' and '#'.
static bool placeholder_value_ok(const char *v)
{
	return v != NULL && v[0] != '\0' && strpbrk(v, "/+#") == NULL;
}

// A growable buffer for substituted filters, starting on the stack.
typedef struct subst_buf {
	char  *p;
	size_t cap;
	char   local[256];
} subst_buf;

// Makes room for need bytes. Returns 0, or -1 when memory runs out.
static int subst_reserve(subst_buf *b, size_t need)
{
	char *np;

	if (need <= b->cap) {
		return 0;
	}
	if (need < b->cap * 2) {
		need = b->cap * 2;
	}
	if (b->p == b->local) {
		if ((np = malloc(need)) != NULL) {
			memcpy(np, b->local, sizeof(b->local));
		}
	} else {
		np = realloc(b->p, need);
	}
	if (np == NULL) {
		return -1;
	}
	b->p   = np;
	b->cap = need;
	return 0;
}

// Writes t with its placeholders replaced into b. Returns the length, -1
// when a placeholder has no usable value (the filter then matches
// nothing), or -2 when memory runs out.
static long substitute(const acl_topic *t, const acl_client *who, subst_buf *b)
{
	size_t out = 0;
	size_t i   = 0;

	while (i < t->len) {
		const char *v  = NULL;
		size_t      vl = 0;
		size_t      skip;
		if (t->text[i] == '$' && strncmp(t->text + i, PH_CLIENTID, 11) == 0) {
			v    = who->clientid;
			skip = 11;
		} else if (t->text[i] == '$' && strncmp(t->text + i, PH_USERNAME, 11) == 0) {
			v    = who->username;
			skip = 11;
		} else {
			if (subst_reserve(b, out + 1) != 0) {
				return -2;
			}
			b->p[out++] = t->text[i++];
			continue;
		}
		if (!placeholder_value_ok(v)) {
			return -1;
		}
		vl = strlen(v);
		// Past this length the literal text alone is longer than any
		// topic (65535 bytes), so the filter could match nothing.
		if (vl > 65535 || out + vl > t->len + 65536) {
			return -1;
		}
		if (subst_reserve(b, out + vl) != 0) {
			return -2;
		}
		memcpy(b->p + out, v, vl);
		out += vl;
		i += skip;
	}
	return (long)out;
}

// Lazily parsed peer address of one check.
typedef struct peer_state {
	int     state; // 0 not parsed, 1 parsed, -1 not an address
	uint8_t addr[16];
} peer_state;

// Returns true when the subject s matches who.
static bool subject_match(const acl_subject *s, const acl_client *who, peer_state *ps)
{
	if (s->username != NULL && !s->username_any
	    && (who->username == NULL || strcmp(s->username, who->username) != 0)) {
		return false;
	}
	if (s->clientid != NULL && !s->clientid_any
	    && (who->clientid == NULL || strcmp(s->clientid, who->clientid) != 0)) {
		return false;
	}
	if (s->has_nets) {
		if (ps->state == 0) {
			ps->state = parse_peer(who->peer, ps->addr) == 0 ? 1 : -1;
		}
		if (ps->state < 0) {
			return false;
		}
		for (size_t i = 0; i < s->n_nets; i++) {
			if (net_contains(&s->nets[i], ps->addr)) {
				return true;
			}
		}
		return false;
	}
	return true;
}

// Returns true when the rule's subject parts all match who.
static bool rule_subject_match(const acl_rule *r, const acl_client *who, peer_state *ps)
{
	if (!subject_match(&r->self, who, ps)) {
		return false;
	}
	for (size_t i = 0; r->has_and && i < r->n_and; i++) {
		if (!subject_match(&r->and_v[i], who, ps)) {
			return false;
		}
	}
	if (r->has_or) {
		for (size_t i = 0; i < r->n_or; i++) {
			if (subject_match(&r->or_v[i], who, ps)) {
				return true;
			}
		}
		return false;
	}
	return true;
}

// Returns 1 when filter f (flen bytes, literal or not) matches the topic or
// request, 0 when not.
static int filter_applies(
    const char *f, size_t flen, bool literal, int action, const char *topic, size_t len)
{
	if (literal) {
		return flen == len && memcmp(f, topic, len) == 0;
	}
	if (action == ACL_PUBLISH) {
		return topic_filter_match(f, flen, topic, len);
	}
	return acl_filter_covers(f, flen, topic, len);
}

// Returns 1 when one of the rule's topics applies, 0 when none does, -1
// when memory runs out.
static int rule_topic_match(const acl_rule *r, const acl_client *who, int action, const char *topic,
    size_t len, subst_buf *b)
{
	if (!r->has_topics) {
		return 1;
	}
	for (size_t i = 0; i < r->n_topics; i++) {
		const acl_topic *t = &r->topics[i];
		if (!t->placeholder) {
			if (filter_applies(t->text, t->len, t->literal, action, topic, len)) {
				return 1;
			}
			continue;
		}
		long n = substitute(t, who, b);
		if (n == -2) {
			return -1;
		}
		if (n > 0 && filter_applies(b->p, (size_t)n, t->literal, action, topic, len)) {
			return 1;
		}
	}
	return 0;
}

// Validates a filter as requested (mqtt_topic_filter_valid) and strips a
// "$share/<group>/" prefix in place. Returns false if it is not valid.
static bool strip_share(const char **filter, size_t *len)
{
	mqtt_share sh;

	if (!mqtt_topic_filter_valid((const uint8_t *)*filter, *len)) {
		return false;
	}
	(void)mqtt_share_split((const uint8_t *)*filter, *len, &sh);
	*filter = (const char *)sh.filter;
	*len    = sh.flen;
	return true;
}

// Returns the decision of the first rule of a that matches the validated
// topic (or filter, without $share prefix) for action, or ACL_NOMATCH.
static int first_match(
    const acl *a, const acl_client *who, int action, const char *topic, size_t len)
{
	peer_state ps = { 0 };
	subst_buf  b;
	int        rv = ACL_NOMATCH;

	b.p   = b.local;
	b.cap = sizeof(b.local);
	for (size_t i = 0; i < a->n; i++) {
		const acl_rule *r = &a->rules[i];
		int             m;
		if ((r->actions & action) == 0 || !rule_subject_match(r, who, &ps)) {
			continue;
		}
		if ((m = rule_topic_match(r, who, action, topic, len, &b)) < 0) {
			rv = ACL_DENY; // out of memory: fail closed
			break;
		}
		if (m > 0) {
			rv = r->permit;
			break;
		}
	}
	if (b.p != b.local) {
		free(b.p);
	}
	return rv;
}

// Returns the decision of the first matching rule, or ACL_NOMATCH.
int acl_match(const acl *a, const acl_client *who, int action, const char *topic, size_t len)
{
	acl_client nobody = { "", NULL, NULL };

	if (a == NULL || !a->enabled) {
		return ACL_NOMATCH;
	}
	if (who == NULL) {
		who = &nobody;
	}
	if (topic == NULL || len == 0) {
		return ACL_DENY;
	}
	if (action == ACL_PUBLISH) {
		if (!mqtt_topic_name_valid((const uint8_t *)topic, len)) {
			return ACL_DENY;
		}
	} else if (action == ACL_SUBSCRIBE) {
		if (!strip_share(&topic, &len)) {
			return ACL_DENY;
		}
	} else {
		return ACL_DENY;
	}
	return first_match(a, who, action, topic, len);
}

// Returns ACL_ALLOW or ACL_DENY for one action of who.
int acl_check(const acl *a, const acl_client *who, int action, const char *topic, size_t len)
{
	int rv;

	if (a == NULL || !a->enabled) {
		return ACL_ALLOW;
	}
	rv = acl_match(a, who, action, topic, len);
	return rv == ACL_NOMATCH ? a->no_match : rv;
}

// Returns ACL_ALLOW or ACL_DENY: subscribe access of who to the exact
// topic name.
int acl_check_read(const acl *a, const acl_client *who, const char *topic, size_t len)
{
	acl_client nobody = { "", NULL, NULL };
	int        rv;

	if (a == NULL || !a->enabled) {
		return ACL_ALLOW;
	}
	if (who == NULL) {
		who = &nobody;
	}
	if (topic == NULL || len == 0 || !mqtt_topic_name_valid((const uint8_t *)topic, len)) {
		return ACL_DENY;
	}
	// A name is a filter without wildcards: acl_filter_covers() of a rule
	// over it is topic_filter_match(), and an "@" rule must equal it.
	rv = first_match(a, who, ACL_SUBSCRIBE, topic, len);
	return rv == ACL_NOMATCH ? a->no_match : rv;
}

// acl_check_read without no_match (see acl.h).
int acl_match_read(const acl *a, const acl_client *who, const char *topic, size_t len)
{
	acl_client nobody = { "", NULL, NULL };

	if (a == NULL || !a->enabled) {
		return ACL_NOMATCH;
	}
	if (who == NULL) {
		who = &nobody;
	}
	if (topic == NULL || len == 0 || !mqtt_topic_name_valid((const uint8_t *)topic, len)) {
		return ACL_DENY;
	}
	return first_match(a, who, ACL_SUBSCRIBE, topic, len);
}

// Returns whether some topic name matches both filters (see acl.h).
bool acl_filters_overlap(const char *x, size_t xlen, const char *y, size_t ylen)
{
	size_t xp     = 0;
	size_t yp     = 0;
	bool   empty0 = false; // the first level can only be empty

	if (!mqtt_topic_filter_valid((const uint8_t *)x, xlen)
	    || !mqtt_topic_filter_valid((const uint8_t *)y, ylen)) {
		return false;
	}
	for (size_t level = 0;; level++) {
		bool        xend = xp > xlen; // every level consumed
		bool        yend = yp > ylen;
		const char *xe   = xend ? NULL : memchr(x + xp, '/', xlen - xp);
		const char *ye   = yend ? NULL : memchr(y + yp, '/', ylen - yp);
		size_t      xl   = xend ? 0 : (xe != NULL ? (size_t)(xe - x) : xlen) - xp;
		size_t      yl   = yend ? 0 : (ye != NULL ? (size_t)(ye - y) : ylen) - yp;
		bool        xh   = !xend && xl == 1 && x[xp] == '#';
		bool        yh   = !yend && yl == 1 && y[yp] == '#';
		bool        xw   = xh || (!xend && xl == 1 && x[xp] == '+');
		bool        yw   = yh || (!yend && yl == 1 && y[yp] == '+');

		// A first-level wildcard never matches a name starting with '$';
		// a literal first level starting with '$' only such names.
		if (level == 0
		    && ((xw && !yw && yl > 0 && y[yp] == '$')
		        || (yw && !xw && xl > 0 && x[xp] == '$'))) {
			return false;
		}
		if (xh || yh) {
			// '#' takes the rest, including nothing ("a/#" matches "a"),
			// but a name is never empty: "/#" and "+" share only "".
			return !(level == 1 && empty0 && (xend || yend));
		}
		if (xend || yend) {
			return xend && yend;
		}
		if (!xw && !yw && (xl != yl || memcmp(x + xp, y + yp, xl) != 0)) {
			return false;
		}
		if (level == 0) {
			empty0 = (!xw && xl == 0) || (!yw && yl == 0);
		}
		xp += xl + 1;
		yp += yl + 1;
	}
}

// How the topics of one rule relate to the topics a filter matches.
enum { REL_NONE, REL_SOME, REL_ALL };

// Returns REL_ALL when a topic of r matches every name the filter matches,
// REL_SOME when one may match some of them, REL_NONE when none can match
// any, or -1 when memory runs out. As acl_check_read() applies them: "@f"
// matches the name f only, and a placeholder without a usable value
// matches nothing.
static int rule_filter_relation(
    const acl_rule *r, const acl_client *who, const char *filter, size_t len, subst_buf *b)
{
	int rel = REL_NONE;

	if (!r->has_topics) {
		return REL_ALL;
	}
	for (size_t i = 0; i < r->n_topics; i++) {
		const acl_topic *t  = &r->topics[i];
		const char      *f  = t->text;
		size_t           fl = t->len;
		if (t->placeholder) {
			long n = substitute(t, who, b);
			if (n == -2) {
				return -1;
			}
			if (n <= 0) {
				continue;
			}
			f  = b->p;
			fl = (size_t)n;
		}
		if (t->literal) {
			if (!mqtt_topic_name_valid((const uint8_t *)f, fl)
			    || !topic_filter_match(filter, len, f, fl)) {
				continue;
			}
			if (fl == len && memcmp(f, filter, len) == 0) {
				return REL_ALL; // the filter is that one name
			}
			rel = REL_SOME;
		} else if (acl_filter_covers(f, fl, filter, len)) {
			return REL_ALL;
		} else if (acl_filters_overlap(f, fl, filter, len)) {
			rel = REL_SOME;
		}
	}
	return rel;
}

// Returns whether some name the filter matches could be denied to who.
bool acl_filter_may_deny(const acl *a, const acl_client *who, const char *filter, size_t len)
{
	peer_state ps     = { 0 };
	acl_client nobody = { "", NULL, NULL };
	subst_buf  b;
	bool       rv;

	if (a == NULL || !a->enabled) {
		return false;
	}
	if (who == NULL) {
		who = &nobody;
	}
	if (filter == NULL || len == 0) {
		return true;
	}
	if (!strip_share(&filter, &len)) {
		return true;
	}
	// Names no rule decides fall through to no_match. Rules are taken in
	// order: a name meets a deny rule only if no earlier rule matched it,
	// so an overlapping deny is a possible denial, and an allow rule that
	// takes every name of the filter ends the question.
	rv    = a->no_match == ACL_DENY;
	b.p   = b.local;
	b.cap = sizeof(b.local);
	for (size_t i = 0; i < a->n; i++) {
		const acl_rule *r = &a->rules[i];
		int             rel;
		if ((r->actions & ACL_SUBSCRIBE) == 0 || !rule_subject_match(r, who, &ps)) {
			continue;
		}
		if ((rel = rule_filter_relation(r, who, filter, len, &b)) < 0) {
			rv = true; // out of memory: assume the worst
			break;
		}
		if (rel == REL_NONE) {
			continue;
		}
		if (r->permit == ACL_DENY) {
			rv = true;
			break;
		}
		if (rel == REL_ALL) {
			rv = false;
			break;
		}
	}
	if (b.p != b.local) {
		free(b.p);
	}
	return rv;
}

// Returns whether a subject tests the peer address.
static bool subject_uses_peer(const acl_subject *s)
{
	return s->has_nets;
}

// Returns whether some rule tests the peer address.
bool acl_uses_peer(const acl *a)
{
	if (a == NULL) {
		return false;
	}
	for (size_t i = 0; i < a->n; i++) {
		const acl_rule *r = &a->rules[i];
		if (subject_uses_peer(&r->self)) {
			return true;
		}
		for (size_t j = 0; j < r->n_and; j++) {
			if (subject_uses_peer(&r->and_v[j])) {
				return true;
			}
		}
		for (size_t j = 0; j < r->n_or; j++) {
			if (subject_uses_peer(&r->or_v[j])) {
				return true;
			}
		}
	}
	return false;
}
