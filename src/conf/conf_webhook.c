// The structured parts of the `webhook` section: the extra headers and the
// list of events, checked here and kept as cJSON trees in nmq_conf (see
// conf.h for their shape), and the cross-key checks of the section.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// The events a webhook can send (docs/webhooks.md), in the order of the
// bits of src/events/webhook.c.
static const char *const event_names[] = {
	"on_client_connect",
	"on_client_connack",
	"on_client_connected",
	"on_client_disconnected",
	"on_client_subscribe",
	"on_client_unsubscribe",
	"on_session_subscribed",
	"on_session_unsubscribed",
	"on_session_terminated",
	"on_message_publish",
	"on_message_delivered",
	"on_message_acked",
};

// True if s may be an HTTP header name (an RFC 9110 token).
static bool header_name_ok(const char *s)
{
	if (*s == '\0') {
		return false;
	}
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch <= 0x20 || ch >= 0x7F || strchr("\"(),/:;<=>?@[\\]{}", ch) != NULL) {
			return false;
		}
	}
	return true;
}

void conf_check_webhook_headers(conf_ctx *ctx, const cJSON *node)
{
	char key[320];
	char buf[64];
	if (!cJSON_IsObject(node)) {
		conf_key_msg(
		    ctx, true, node, "webhook.headers", "expected an object of name = value pairs");
		return;
	}
	cJSON *out = cJSON_CreateObject();
	if (out == NULL) {
		conf_key_msg(ctx, true, node, "webhook.headers", "out of memory");
		return;
	}
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		snprintf(key, sizeof(key), "webhook.headers.%.200s", c->string);
		const char *text = conf_node_text(ctx, c, buf, sizeof(buf));
		if (text == NULL) {
			conf_key_msg(ctx, true, c, key, "expected a string");
			continue;
		}
		if (!header_name_ok(c->string)) {
			conf_key_msg(ctx, true, c, key, "not a valid HTTP header name");
			continue;
		}
		if (strpbrk(text, "\r\n") != NULL) {
			conf_key_msg(ctx, true, c, key, "a header value cannot hold a line break");
			continue;
		}
		if (ascii_ieq(c->string, "content-length") || ascii_ieq(c->string, "host")
		    || ascii_ieq(c->string, "transfer-encoding")
		    || ascii_ieq(c->string, "connection")) {
			conf_key_msg(ctx, true, c, key, "set by the broker; cannot be configured");
			continue;
		}
		if (cJSON_AddStringToObject(out, c->string, text) == NULL) {
			conf_key_msg(ctx, true, c, key, "out of memory");
			break;
		}
	}
	cJSON_Delete(ctx->conf->webhook_headers);
	ctx->conf->webhook_headers = out;
}

// True if f is a valid MQTT topic filter.
static bool filter_ok(const char *f)
{
	size_t n = strlen(f);
	if (n == 0 || n > 65535) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		bool start = i == 0 || f[i - 1] == '/';
		bool end   = i + 1 == n || f[i + 1] == '/';
		if (f[i] == '#' && !(start && i + 1 == n)) {
			return false;
		}
		if (f[i] == '+' && !(start && end)) {
			return false;
		}
	}
	return true;
}

void conf_check_webhook_events(conf_ctx *ctx, const cJSON *node)
{
	char key[64];
	if (!cJSON_IsArray(node)) {
		conf_key_msg(ctx, true, node, "webhook.events",
		    "expected an array of {event = \"on_...\", topic = \"filter\"}");
		return;
	}
	cJSON *out = cJSON_CreateArray();
	if (out == NULL) {
		conf_key_msg(ctx, true, node, "webhook.events", "out of memory");
		return;
	}
	int i = 0;
	for (const cJSON *c = node->child; c != NULL; c = c->next, i++) {
		snprintf(key, sizeof(key), "webhook.events[%d]", i);
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(c, "event");
		const cJSON *tp = cJSON_GetObjectItemCaseSensitive(c, "topic");
		if (!cJSON_IsObject(c) || !cJSON_IsString(ev)) {
			conf_key_msg(
			    ctx, true, c, key, "expected {event = \"on_...\"[, topic = ...]}");
			continue;
		}
		bool known = false;
		for (size_t k = 0; k < sizeof(event_names) / sizeof(event_names[0]); k++) {
			known = known || strcmp(ev->valuestring, event_names[k]) == 0;
		}
		if (!known) {
			conf_key_msg(
			    ctx, true, ev, key, "unknown event \"%.64s\"", ev->valuestring);
			continue;
		}
		for (const cJSON *f = c->child; f != NULL; f = f->next) {
			if (strcmp(f->string, "event") != 0 && strcmp(f->string, "topic") != 0) {
				conf_key_msg(ctx, false, f, key, "unknown key \"%.64s\"; ignored",
				    f->string);
			}
		}
		if (tp != NULL && (!cJSON_IsString(tp) || !filter_ok(tp->valuestring))) {
			conf_key_msg(ctx, true, tp, key, "topic: not a valid topic filter");
			continue;
		}
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || cJSON_AddStringToObject(o, "event", ev->valuestring) == NULL
		    || (tp != NULL
		        && cJSON_AddStringToObject(o, "topic", tp->valuestring) == NULL)) {
			cJSON_Delete(o);
			conf_key_msg(ctx, true, c, key, "out of memory");
			break;
		}
		cJSON_AddItemToArray(out, o);
	}
	cJSON_Delete(ctx->conf->webhook_events);
	ctx->conf->webhook_events = out;
}

void conf_check_webhook_after(conf_ctx *ctx, const cJSON *section)
{
	nmq_conf *c = ctx->conf;
	if (!c->webhook_present || !c->webhook_enable) {
		return;
	}
	if (c->webhook_url == NULL) {
		conf_key_msg(ctx, true, section, "webhook.url", "required when webhook is enabled");
		return;
	}
	bool https = strncmp(c->webhook_url, "https://", 8) == 0;
	if ((!https && strncmp(c->webhook_url, "http://", 7) != 0)
	    || c->webhook_url[https ? 8 : 7] == '\0') {
		conf_key_msg(
		    ctx, true, section, "webhook.url", "expected http[s]://host[:port]/path");
	}
	if ((c->webhook_ssl_certfile == NULL) != (c->webhook_ssl_keyfile == NULL)) {
		conf_key_msg(ctx, true, section, "webhook.ssl", "certfile and keyfile go together");
	}
}
