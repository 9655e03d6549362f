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

static void h_http_auth(void *arg, const http_req *req, http_resp *r)
{
	(void)req;
	http_authn_stats st;
	http_authn_get_stats(arg, &st);
	r->status       = 200;
	r->content_type = "application/json";
	http_resp_printf(r,
	    "{\"code\":0,\"data\":{\"enabled\":%s,\"allowed\":%llu,\"denied\":%llu,"
	    "\"failed\":%llu,\"cache_hits\":%llu}}",
	    arg != NULL ? "true" : "false", (unsigned long long)st.allowed,
	    (unsigned long long)st.denied, (unsigned long long)st.failed,
	    (unsigned long long)st.cache_hits);
}

nmq_err events_rest_http_auth_route(http_server *hs, http_authn *ha)
{
	return http_server_route(hs, "GET", "/api/v4/http_auth", h_http_auth, ha);
}
