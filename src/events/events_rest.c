// REST endpoints of src/events; see events_rest.h.
#include "src/events/events_rest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/core/droplog.h"

#define DROPS_DEFAULT_LIMIT 100

// Reads ?limit=N: N in 0..1000000, else -1 (a bad value).
static long query_limit(const http_req *req)
{
	const char *q = req->query.p;
	size_t      n = req->query.n;
	for (size_t i = 0; q != NULL && i < n;) {
		size_t end = i;
		while (end < n && q[end] != '&') {
			end++;
		}
		if (end - i > 6 && memcmp(q + i, "limit=", 6) == 0) {
			long v = 0;
			if (end - i - 6 > 7) {
				return -1;
			}
			for (size_t k = i + 6; k < end; k++) {
				if (q[k] < '0' || q[k] > '9') {
					return -1;
				}
				v = v * 10 + (q[k] - '0');
			}
			return v <= 1000000 ? v : -1;
		}
		i = end + 1;
	}
	return DROPS_DEFAULT_LIMIT;
}

static void h_drops(void *arg, const http_req *req, http_resp *r)
{
	(void)arg;
	long limit = query_limit(req);
	if (limit < 0) {
		http_resp_error(r, 400, REST_PARAM_ERROR, "limit: expected 0..1000000");
		return;
	}
	char *j = droplog_json((size_t)limit);
	if (j == NULL) {
		http_resp_error(r, 500, REST_UNKNOWN_ERROR, "out of memory");
		return;
	}
	r->status       = 200;
	r->content_type = "application/json";
	http_resp_append(r, j, strlen(j));
	free(j);
}

static void h_webhook(void *arg, const http_req *req, http_resp *r)
{
	(void)req;
	webhook_stats st;
	webhook_get_stats(arg, &st);
	r->status       = 200;
	r->content_type = "application/json";
	http_resp_printf(r,
	    "{\"code\":0,\"data\":{\"enabled\":%s,\"sent\":%llu,\"failed\":%llu,"
	    "\"dropped\":%llu,\"retried\":%llu,\"queued\":%llu}}",
	    arg != NULL ? "true" : "false", (unsigned long long)st.sent,
	    (unsigned long long)st.failed, (unsigned long long)st.dropped,
	    (unsigned long long)st.retried, (unsigned long long)st.queued);
}

nmq_err events_rest_routes(http_server *hs, webhook *w)
{
	nmq_err e = http_server_route(hs, "GET", "/api/v4/drops", h_drops, NULL);
	if (e == NMQ_OK) {
		e = http_server_route(hs, "GET", "/api/v4/webhook", h_webhook, w);
	}
	return e;
}

static const char *const ha_kind_key[HA_NKINDS] = { "auth_req", "super_req", "acl_req" };
static const char *const ha_stat_key[HA_NSTATS]
    = { "allowed", "denied", "timeouts", "errors", "cache_hits" };

// GET /api/v4/http_auth: the auth_req counters at the top level (failed =
// timeouts + errors), and every kind's under its name.
static void h_http_auth(void *arg, const http_req *req, http_resp *r)
{
	(void)req;
	http_authn_stats st;
	http_authn_get_stats(arg, &st);
	const uint64_t *a = st.n[HA_AUTH];
	r->status         = 200;
	r->content_type   = "application/json";
	http_resp_printf(r,
	    "{\"code\":0,\"data\":{\"enabled\":%s,\"allowed\":%llu,\"denied\":%llu,"
	    "\"failed\":%llu,\"cache_hits\":%llu",
	    arg != NULL ? "true" : "false", (unsigned long long)a[HA_ALLOWED],
	    (unsigned long long)a[HA_DENIED], (unsigned long long)(a[HA_TIMEOUTS] + a[HA_ERRORS]),
	    (unsigned long long)a[HA_CACHE_HITS]);
	for (int k = 0; k < HA_NKINDS; k++) {
		http_resp_printf(
		    r, ",\"%s\":{\"enabled\":%s", ha_kind_key[k], st.on[k] ? "true" : "false");
		for (int i = 0; i < HA_NSTATS; i++) {
			http_resp_printf(
			    r, ",\"%s\":%llu", ha_stat_key[i], (unsigned long long)st.n[k][i]);
		}
		http_resp_printf(r, "}");
	}
	http_resp_printf(r, "}}");
}

// The counters for /metrics and /prometheus (rest_env.counters).
size_t events_rest_http_auth_counters(void *arg, rest_counter *v, size_t cap)
{
	static const char *const labels[HA_NKINDS][HA_NSTATS] = {
		{ "req=\"auth_req\",result=\"allowed\"", "req=\"auth_req\",result=\"denied\"",
		    "req=\"auth_req\",result=\"timeout\"", "req=\"auth_req\",result=\"error\"",
		    "req=\"auth_req\",result=\"cache_hit\"" },
		{ "req=\"super_req\",result=\"allowed\"", "req=\"super_req\",result=\"denied\"",
		    "req=\"super_req\",result=\"timeout\"", "req=\"super_req\",result=\"error\"",
		    "req=\"super_req\",result=\"cache_hit\"" },
		{ "req=\"acl_req\",result=\"allowed\"", "req=\"acl_req\",result=\"denied\"",
		    "req=\"acl_req\",result=\"timeout\"", "req=\"acl_req\",result=\"error\"",
		    "req=\"acl_req\",result=\"cache_hit\"" },
	};
	static const char *const keys[HA_NKINDS][HA_NSTATS] = {
		{ "auth_req_allowed", "auth_req_denied", "auth_req_timeouts", "auth_req_errors",
		    "auth_req_cache_hits" },
		{ "super_req_allowed", "super_req_denied", "super_req_timeouts", "super_req_errors",
		    "super_req_cache_hits" },
		{ "acl_req_allowed", "acl_req_denied", "acl_req_timeouts", "acl_req_errors",
		    "acl_req_cache_hits" },
	};
	http_authn_stats st;
	http_authn_get_stats(arg, &st);
	size_t n = 0;
	for (int k = 0; k < HA_NKINDS; k++) {
		for (int i = 0; i < HA_NSTATS && n < cap; i++) {
			v[n].name   = "http_auth_requests";
			v[n].help   = n == 0 ? "HTTP authentication callouts by request and result "
			                       "(cache_hit: answered without a request)."
			                     : NULL;
			v[n].labels = labels[k][i];
			v[n].group  = "http_auth";
			v[n].key    = keys[k][i];
			v[n].value  = st.n[k][i];
			n++;
		}
	}
	return n;
}

// The webhook counters (rest_env.counters; arg: the webhook, NULL: all
// zero).
size_t events_rest_webhook_counters(void *arg, rest_counter *v, size_t cap)
{
	webhook_stats st;
	memset(&st, 0, sizeof(st));
	if (arg != NULL) {
		webhook_get_stats(arg, &st);
	}
	const struct {
		const char *labels, *key;
		uint64_t    value;
	} c[] = {
		{ "result=\"sent\"", "sent", st.sent },
		{ "result=\"failed\"", "failed", st.failed },
		{ "result=\"dropped\"", "dropped", st.dropped },
		{ "result=\"retried\"", "retried", st.retried },
	};
	size_t n = 0;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]) && n < cap; i++, n++) {
		v[n].name   = "webhook_requests";
		v[n].help   = i == 0
		      ? "Webhook events by outcome: sent (2xx), failed (given up after "
		        "the retries), dropped (not queued, or unsent at exit), "
		        "retried (retries scheduled)."
		      : NULL;
		v[n].labels = c[i].labels;
		v[n].group  = "webhook";
		v[n].key    = c[i].key;
		v[n].value  = c[i].value;
	}
	if (n < cap) {
		v[n].name  = "webhook_queued";
		v[n].help  = "Webhook events waiting or in flight now.";
		v[n].type  = "gauge";
		v[n].group = "webhook";
		v[n].key   = "queued";
		v[n].value = st.queued;
		n++;
	}
	return n;
}

nmq_err events_rest_http_auth_route(http_server *hs, http_authn *ha)
{
	return http_server_route(hs, "GET", "/api/v4/http_auth", h_http_auth, ha);
}
