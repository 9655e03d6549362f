// Preset sessions (preset.session); see broker_preset.h.
#include "src/broker/broker_preset.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "nng/core/log.h"

// True when presets (the normal form, or NULL) names client_id.
static bool preset_configured(void *arg, const char *client_id)
{
	const cJSON *presets = arg;
	for (const cJSON *o = presets != NULL ? presets->child : NULL; o != NULL; o = o->next) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "clientid");
		if (cJSON_IsString(c) && strcmp(c->valuestring, client_id) == 0) {
			return true;
		}
	}
	return false;
}

nmq_err broker_preset_sessions(nmq_broker *b, nmq_proto *p, const struct cJSON *presets)
{
	// Those of an earlier configuration that no client took over.
	size_t removed = proto_sessions_end_presets(p, preset_configured, (void *)presets);
	if (presets == NULL) {
		if (removed > 0) {
			log_info("preset", "event=preset_sessions created=0 restored=0 removed=%zu",
			    removed);
		}
		return NMQ_OK;
	}
	size_t created = 0, kept = 0, subs = 0, refused = 0;
	for (const cJSON *o = presets->child; o != NULL; o = o->next) {
		const char  *cid = cJSON_GetObjectItemCaseSensitive(o, "clientid")->valuestring;
		bool         existed;
		nmq_session *s = proto_session_preset(p, cid, &existed);
		if (s == NULL) {
			log_error(
			    "preset", "client_id=%s event=preset_failed reason=out_of_memory", cid);
			return NMQ_ENOMEM;
		}
		if (existed) {
			// Restored from the store with the subscriptions its
			// client left it with: not subscribed again.
			log_info("preset", "client_id=%s event=preset_restored", cid);
			kept++;
			continue;
		}
		const cJSON *topics = cJSON_GetObjectItemCaseSensitive(o, "topics");
		for (const cJSON *t = topics != NULL ? topics->child : NULL; t != NULL;
		     t              = t->next) {
			const char *f = cJSON_GetObjectItemCaseSensitive(t, "filter")->valuestring;
			proto_sub_opts so;
			memset(&so, 0, sizeof(so));
			so.qos = (uint8_t)cJSON_GetObjectItemCaseSensitive(t, "qos")->valueint;
			so.retain_as_published
			    = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "rap"));
			so.retain_handling
			    = (uint8_t)cJSON_GetObjectItemCaseSensitive(t, "rh")->valueint;
			proto_who who = { cid, NULL, "", PROTO_ACL_NONE, false, 0, 0 };
			bool      dup;
			int rv = broker_proto_ops.subscribe(b, s, &who, f, strlen(f), &so, &dup);
			if ((rv & 0xFF) >= 0x80) {
				log_error("preset",
				    "client_id=%s filter=%s event=subscription_refused "
				    "reason=0x%02x",
				    cid, f, rv & 0xFF);
				refused++;
				continue;
			}
			subs++;
		}
		created++;
	}
	log_info("preset",
	    "event=preset_sessions created=%zu restored=%zu subscriptions=%zu "
	    "refused=%zu removed=%zu",
	    created, kept, subs, refused, removed);
	return NMQ_OK;
}
