// The `listeners` section: unnamed and named listeners of each kind (tcp,
// ssl, ws, wss), TLS key inheritance from `listeners.ssl`, bind address
// parsing, and file order.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// The TLS keys, in a fixed order (index into conf_listener fields).
enum {
	TLS_KEYFILE = 0,
	TLS_CERTFILE,
	TLS_CACERTFILE,
	TLS_KEY_PASSWORD,
	TLS_VERIFY_PEER,
	TLS_FAIL_IF_NO_PEER_CERT,
	TLS_GROUPS,
	TLS_CIPHERS,
	TLS_N,
};

static const char *tls_names[TLS_N] = { "keyfile", "certfile", "cacertfile", "key_password",
	"verify_peer", "fail_if_no_peer_cert", "groups", "ciphers" };

static conf_tls_params_check_fn tls_params_check;

// Installs the check of `groups` and `ciphers`; see conf.h.
void conf_set_tls_params_check(conf_tls_params_check_fn fn)
{
	tls_params_check = fn;
}

static const char *kind_names[] = { "tcp", "ssl", "ws", "wss" };

// A listener being built: its fields and where each TLS key came from.
typedef struct lbuild {
	conf_listener l;
	const cJSON  *src[TLS_N]; // node that set each TLS key, NULL = not set
	long          seq;
} lbuild;

// Returns "tcp", "ssl", "ws", "wss", or "?".
const char *conf_listener_kind_name(int kind)
{
	return kind >= 0 && kind < 4 ? kind_names[kind] : "?";
}

// Frees the strings of l and zeroes it.
void conf_listener_free(conf_listener *l)
{
	free(l->name);
	free(l->bind);
	free(l->host);
	free(l->path);
	free(l->keyfile);
	free(l->certfile);
	free(l->cacertfile);
	free(l->key_password);
	free(l->groups);
	free(l->ciphers);
	memset(l, 0, sizeof(*l));
}

// Returns the kind named name, or -1.
static int kind_of(const char *name)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(kind_names[i], name) == 0) {
			return i;
		}
	}
	return -1;
}

// Returns the index of a TLS key name, or -1.
static int tls_index(const char *name)
{
	for (int i = 0; i < TLS_N; i++) {
		if (strcmp(tls_names[i], name) == 0) {
			return i;
		}
	}
	return -1;
}

// Returns true for the TLS kinds.
static bool is_tls(int kind)
{
	return kind == CONF_LISTENER_SSL || kind == CONF_LISTENER_WSS;
}

// Copies TLS key i from one listener to another. Returns 0 or -1 (memory).
static int tls_copy(conf_listener *dst, const conf_listener *src, int i)
{
	char **sd = NULL;
	char  *ss = NULL;

	switch (i) {
	case TLS_KEYFILE:
		sd = &dst->keyfile;
		ss = src->keyfile;
		break;
	case TLS_CERTFILE:
		sd = &dst->certfile;
		ss = src->certfile;
		break;
	case TLS_CACERTFILE:
		sd = &dst->cacertfile;
		ss = src->cacertfile;
		break;
	case TLS_KEY_PASSWORD:
		sd = &dst->key_password;
		ss = src->key_password;
		break;
	case TLS_GROUPS:
		sd = &dst->groups;
		ss = src->groups;
		break;
	case TLS_CIPHERS:
		sd = &dst->ciphers;
		ss = src->ciphers;
		break;
	case TLS_VERIFY_PEER:
		dst->verify_peer = src->verify_peer;
		return 0;
	default:
		dst->fail_if_no_peer_cert = src->fail_if_no_peer_cert;
		return 0;
	}
	free(*sd);
	*sd = NULL;
	if (ss != NULL && (*sd = strdup(ss)) == NULL) {
		return -1;
	}
	return 0;
}

// Reads the TLS keys among the scalar members of obj into b (kind decides
// which schema entries apply; name is shown in messages).
static void parse_tls(conf_ctx *ctx, int kind, const char *name, const cJSON *obj, lbuild *b)
{
	char skey[96];
	char dkey[400];

	for (const cJSON *c = obj->child; c != NULL; c = c->next) {
		const conf_key *k;
		int             i = tls_index(c->string);
		if (i < 0 || cJSON_IsObject(c) || cJSON_IsNull(c)) {
			continue;
		}
		snprintf(skey, sizeof(skey), "listeners.%s.%s", kind_names[kind], tls_names[i]);
		snprintf(dkey, sizeof(dkey), "listeners.%s.%s", name, tls_names[i]);
		if ((k = conf_schema_find(skey, NULL)) == NULL) {
			continue;
		}
		if (conf_apply_key(ctx, k, dkey, c, &b->l, false) == 0) {
			b->src[i] = c;
		}
	}
}

// Returns true when s is a valid host name or IPv4 address text.
static bool host_ok(const char *s, size_t n, bool v6)
{
	if (n == 0 || n > 253) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (v6 ? !(ascii_isalnum(c) || c == ':' || c == '.' || c == '%')
		       : !(ascii_isalnum(c) || c == '.' || c == '-' || c == '_')) {
			return false;
		}
	}
	return true;
}

// Parses a bind address for a listener of kind into l->host/port/path and
// rewrites l->bind without its scheme. Returns 0, or -1 with a reason.
static int parse_bind(int kind, conf_listener *l, char *why, size_t whylen)
{
	static const char *schemes[4][5] = {
		{ "nmq-tcp", "tcp", "mqtt-tcp", NULL },
		{ "tls+nmq-tcp", "tls+tcp", "nmq-tls", "tls", NULL },
		{ "nmq-ws", "ws", NULL },
		{ "nmq-wss", "wss", NULL },
	};
	const char *s   = l->bind;
	const char *sep = ascii_strstr(s, "://");
	const char *host;
	size_t      hlen;
	const char *p;
	long        port   = 0;
	int         digits = 0;
	bool        v6     = false;
	char       *norm;
	size_t      nlen;

	if (sep != NULL) {
		bool ok = false;
		for (int i = 0; schemes[kind][i] != NULL; i++) {
			if (strlen(schemes[kind][i]) == (size_t)(sep - s)
			    && strncmp(schemes[kind][i], s, (size_t)(sep - s)) == 0) {
				ok = true;
			}
		}
		if (!ok) {
			snprintf(why, whylen, "scheme \"%.*s://\" does not fit a %s listener",
			    (int)(sep - s > 32 ? 32 : sep - s), s, kind_names[kind]);
			return -1;
		}
		s = sep + 3;
	}
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL) {
			snprintf(why, whylen, "missing ']' after the IPv6 address");
			return -1;
		}
		host = s + 1;
		hlen = (size_t)(close - host);
		v6   = true;
		p    = close + 1;
	} else {
		host = s;
		hlen = ascii_cspn(s, ":/");
		p    = s + hlen;
	}
	if (*p != ':') {
		snprintf(why, whylen, "expected host:port, got \"%.64s\"", l->bind);
		return -1;
	}
	p++;
	while (ascii_isdigit((unsigned char)*p) && digits < 6) {
		port = port * 10 + (*p - '0');
		p++;
		digits++;
	}
	if (digits == 0 || digits > 5 || port > 65535) {
		snprintf(why, whylen, "%s in \"%.64s\"",
		    *p == ':' && !v6 ? "IPv6 addresses are written in brackets, e.g. [::]:1883"
		                     : "expected a port number 0..65535",
		    l->bind);
		return -1;
	}
	if (hlen == 0 && !v6) {
		host = "0.0.0.0";
		hlen = 7;
	}
	if (!host_ok(host, hlen, v6)) {
		snprintf(why, whylen, "invalid host \"%.*s\"", (int)(hlen > 64 ? 64 : hlen), host);
		return -1;
	}
	if (kind == CONF_LISTENER_WS || kind == CONF_LISTENER_WSS) {
		if (*p != '/') {
			snprintf(
			    why, whylen, "a WebSocket bind needs a path, e.g. 0.0.0.0:8083/mqtt");
			return -1;
		}
		for (const char *q = p; *q != '\0'; q++) {
			if ((unsigned char)*q <= 0x20 || *q == 0x7f) {
				snprintf(why, whylen, "invalid character in the path");
				return -1;
			}
		}
	} else if (*p != '\0') {
		snprintf(why, whylen, "unexpected \"%.32s\" after the port (a %s bind has no path)",
		    p, kind_names[kind]);
		return -1;
	}
	nlen = hlen + strlen(p) + 16;
	if ((norm = malloc(nlen)) == NULL || (l->host = strndup(host, hlen)) == NULL
	    || (*p != '\0' && (l->path = strdup(p)) == NULL)) {
		free(norm);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	snprintf(norm, nlen, v6 ? "[%.*s]:%ld%s" : "%.*s:%ld%s", (int)hlen, host, port, p);
	free(l->bind);
	l->bind = norm;
	l->port = (int)port;
	return 0;
}

// The state of the listeners check.
typedef struct lstate {
	lbuild       out[CONF_MAX_LISTENERS];
	int          n;
	bool         overflow;
	lbuild       tmpl_ssl; // TLS keys of listeners.ssl
	lbuild       tmpl_wss; // TLS keys of listeners.wss
	const cJSON *checked[3 * CONF_MAX_LISTENERS + 8];
	int          n_checked;
} lstate;

// Checks that the file named by TLS key i of b can be read, once per node.
static void check_file(
    conf_ctx *ctx, lstate *st, const char *name, lbuild *b, int i, const char *file)
{
	char key[400];

	if (file == NULL || b->src[i] == NULL) {
		return;
	}
	for (int j = 0; j < st->n_checked; j++) {
		if (st->checked[j] == b->src[i]) {
			return;
		}
	}
	if (st->n_checked < (int)(sizeof(st->checked) / sizeof(st->checked[0]))) {
		st->checked[st->n_checked++] = b->src[i];
	}
	struct stat sb;
	if (access(file, R_OK) != 0) {
		int e = errno;
		snprintf(key, sizeof(key), "listeners.%s.%s", name, tls_names[i]);
		conf_key_msg(
		    ctx, true, b->src[i], key, "cannot read \"%.200s\": %s", file, strerror(e));
	} else if (stat(file, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		snprintf(key, sizeof(key), "listeners.%s.%s", name, tls_names[i]);
		conf_key_msg(ctx, true, b->src[i], key, "\"%.200s\" is not a regular file", file);
	}
}

// Builds one listener of kind from obj (the kind object itself for the
// unnamed listener, whose object members are skipped) and adds it when
// enabled.
static void build(
    conf_ctx *ctx, lstate *st, int kind, const char *name, const cJSON *obj, bool unnamed)
{
	lbuild       b;
	char         skey[96];
	char         dkey[400];
	char         why[200];
	bool         enable   = true;
	bool         bad      = false;
	const cJSON *bind_src = NULL;

	memset(&b, 0, sizeof(b));
	b.l.kind = kind;
	b.seq    = hocon_seq(ctx->doc, obj);
	for (const cJSON *c = obj->child; c != NULL; c = c->next) {
		const conf_key *k;
		snprintf(dkey, sizeof(dkey), "listeners.%s.%.200s", name, c->string);
		if (unnamed && cJSON_IsObject(c)) {
			continue;
		}
		if (cJSON_IsNull(c)) {
			continue;
		}
		snprintf(skey, sizeof(skey), "listeners.%s.%.60s", kind_names[kind], c->string);
		if ((k = conf_schema_find(skey, NULL)) == NULL) {
			conf_key_msg(ctx, false, c, dkey, "unknown key; ignored");
			continue;
		}
		if (k->flags & CONF_F_TLSFILE) {
			continue; // read by parse_tls
		}
		if (k->flags & CONF_F_ENABLE) {
			char        buf[64];
			conf_val    v;
			unsigned    fl   = 0;
			const char *text = conf_node_text(ctx, c, buf, sizeof(buf));
			hocon_loc(ctx->doc, c, NULL, NULL, NULL, &fl);
			if (text == NULL) {
				conf_key_msg(ctx, true, c, dkey, "expected a boolean, got %s",
				    cJSON_IsArray(c) ? "an array" : "an object");
				bad = true;
			} else if (conf_value_parse(
			               k, text, (fl & HOCON_LOC_LOOSE) != 0, &v, why, sizeof(why))
			    != 0) {
				conf_key_msg(ctx, true, c, dkey, "%s", why);
				bad = true;
			} else {
				enable = v.b;
			}
			continue;
		}
		if (conf_apply_key(ctx, k, dkey, c, &b.l, false) < 0) {
			bad = true;
		} else if (k->flags & CONF_F_BIND) {
			bind_src = c;
		}
	}

	if (is_tls(kind)) {
		// Own keys first (the unnamed listener's own keys are its
		// template), then listeners.<kind>, then listeners.ssl.
		lbuild *chain[2];
		chain[0] = kind == CONF_LISTENER_SSL ? &st->tmpl_ssl : &st->tmpl_wss;
		chain[1] = kind == CONF_LISTENER_SSL ? NULL : &st->tmpl_ssl;
		if (!unnamed) {
			parse_tls(ctx, kind, name, obj, &b);
		}
		for (int i = 0; i < TLS_N; i++) {
			for (int j = 0; j < 2 && b.src[i] == NULL; j++) {
				if (chain[j] != NULL && chain[j]->src[i] != NULL) {
					if (tls_copy(&b.l, &chain[j]->l, i) != 0) {
						conf_key_msg(ctx, true, obj, name, "out of memory");
						bad = true;
					}
					b.src[i] = chain[j]->src[i];
				}
			}
		}
	}

	if (!enable || bad) {
		conf_listener_free(&b.l);
		return;
	}
	if (b.l.bind == NULL) {
		snprintf(skey, sizeof(skey), "listeners.%s.bind", kind_names[kind]);
		b.l.bind = strdup(conf_schema_find(skey, NULL)->def);
	}
	snprintf(dkey, sizeof(dkey), "listeners.%s.bind", name);
	if (b.l.bind == NULL || parse_bind(kind, &b.l, why, sizeof(why)) != 0) {
		conf_key_msg(ctx, true, bind_src != NULL ? bind_src : obj, dkey, "%s",
		    b.l.bind == NULL ? "out of memory" : why);
		conf_listener_free(&b.l);
		return;
	}
	if (is_tls(kind)) {
		const char *req[2] = { "keyfile", "certfile" };
		for (int i = 0; i < 2; i++) {
			if (b.src[i] == NULL) {
				snprintf(dkey, sizeof(dkey), "listeners.%s.%s", name, req[i]);
				conf_key_msg(ctx, true, obj, dkey, "required for a TLS listener");
				bad = true;
			}
		}
		check_file(ctx, st, name, &b, TLS_KEYFILE, b.l.keyfile);
		check_file(ctx, st, name, &b, TLS_CERTFILE, b.l.certfile);
		check_file(ctx, st, name, &b, TLS_CACERTFILE, b.l.cacertfile);
		for (int i = TLS_GROUPS; i <= TLS_CIPHERS && tls_params_check != NULL; i++) {
			if (b.src[i] == NULL
			    || tls_params_check(i == TLS_GROUPS ? b.l.groups : NULL,
			           i == TLS_CIPHERS ? b.l.ciphers : NULL, why, sizeof(why))
			        == 0) {
				continue;
			}
			snprintf(dkey, sizeof(dkey), "listeners.%s.%s", name, tls_names[i]);
			conf_key_msg(ctx, true, b.src[i], dkey, "%s", why);
			bad = true;
		}
	}
	for (int i = 0; i < st->n && !bad; i++) {
		const conf_listener *o = &st->out[i].l;
		if (o->port == b.l.port && o->port != 0 && strcmp(o->host, b.l.host) == 0) {
			snprintf(dkey, sizeof(dkey), "listeners.%s.bind", name);
			conf_key_msg(ctx, true, bind_src != NULL ? bind_src : obj, dkey,
			    "address %s:%d is already used by listeners.%s", b.l.host, b.l.port,
			    o->name);
			bad = true;
		}
	}
	if (!bad && st->n == CONF_MAX_LISTENERS) {
		if (!st->overflow) {
			conf_key_msg(ctx, true, obj, "listeners", "more than %d listeners",
			    CONF_MAX_LISTENERS);
		}
		st->overflow = true;
		bad          = true;
	}
	if (!bad && (b.l.name = strdup(name)) == NULL) {
		conf_key_msg(ctx, true, obj, "listeners", "out of memory");
		bad = true;
	}
	if (bad) {
		conf_listener_free(&b.l);
		return;
	}
	st->out[st->n++] = b;
}

// Checks the listeners section and fills ctx->conf->listeners in file
// order.
void conf_check_listeners(conf_ctx *ctx, const cJSON *listeners)
{
	lstate      *st;
	const cJSON *ssl;
	const cJSON *wss;
	char         name[400];
	char         key[400];

	if (!cJSON_IsObject(listeners)) {
		conf_key_msg(ctx, true, listeners, "listeners", "expected an object, got %s",
		    cJSON_IsArray(listeners) ? "an array" : "a value");
		return;
	}
	if ((st = calloc(1, sizeof(*st))) == NULL) {
		conf_key_msg(ctx, true, listeners, "listeners", "out of memory");
		return;
	}
	ssl = cJSON_GetObjectItemCaseSensitive(listeners, "ssl");
	wss = cJSON_GetObjectItemCaseSensitive(listeners, "wss");
	if (cJSON_IsObject(ssl)) {
		parse_tls(ctx, CONF_LISTENER_SSL, "ssl", ssl, &st->tmpl_ssl);
	}
	if (cJSON_IsObject(wss)) {
		parse_tls(ctx, CONF_LISTENER_WSS, "wss", wss, &st->tmpl_wss);
	}

	for (const cJSON *kc = listeners->child; kc != NULL; kc = kc->next) {
		const conf_key *k;
		int             kind;
		bool            scalars = false;

		snprintf(key, sizeof(key), "listeners.%.200s", kc->string);
		if (cJSON_IsNull(kc)) {
			continue;
		}
		if ((k = conf_schema_find(key, NULL)) == NULL || (kind = kind_of(kc->string)) < 0) {
			if (k != NULL && k->status == CONF_S_UNSUPPORTED) {
				conf_key_msg(ctx, false, kc, key,
				    "section `%s` is not supported by this broker; ignored", key);
			} else {
				conf_key_msg(ctx, false, kc, key, "unknown key; ignored");
			}
			continue;
		}
		if (!cJSON_IsObject(kc)) {
			conf_key_msg(ctx, true, kc, key, "expected an object, got %s",
			    cJSON_IsArray(kc) ? "an array" : "a value");
			continue;
		}
		for (const cJSON *c = kc->child; c != NULL; c = c->next) {
			if (!cJSON_IsObject(c)) {
				scalars = true;
			}
		}
		if (scalars || kc->child == NULL) {
			build(ctx, st, kind, kind_names[kind], kc, true);
		}
		for (const cJSON *c = kc->child; c != NULL; c = c->next) {
			if (!cJSON_IsObject(c)) {
				continue;
			}
			snprintf(
			    key, sizeof(key), "listeners.%s.%.60s", kind_names[kind], c->string);
			if (conf_schema_find(key, NULL) != NULL) {
				conf_key_msg(ctx, true, c, key, "expected a value, got an object");
				continue;
			}
			snprintf(name, sizeof(name), "%s.%.200s", kind_names[kind], c->string);
			build(ctx, st, kind, name, c, false);
		}
	}

	// File order: insertion sort by creation sequence (at most 16).
	for (int i = 1; i < st->n; i++) {
		lbuild tmp = st->out[i];
		int    j   = i;
		while (j > 0 && st->out[j - 1].seq > tmp.seq) {
			st->out[j] = st->out[j - 1];
			j--;
		}
		st->out[j] = tmp;
	}
	for (int i = 0; i < ctx->conf->n_listeners; i++) {
		conf_listener_free(&ctx->conf->listeners[i]);
	}
	for (int i = 0; i < st->n; i++) {
		ctx->conf->listeners[i] = st->out[i].l;
	}
	ctx->conf->n_listeners = st->n;
	conf_listener_free(&st->tmpl_ssl.l);
	conf_listener_free(&st->tmpl_wss.l);
	free(st);
}
