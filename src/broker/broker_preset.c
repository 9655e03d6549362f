// Preset sessions (preset.session); see broker_preset.h.
#include "src/broker/broker_preset.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "nng/core/log.h"

nmq_err broker_preset_sessions(nmq_broker *b, nmq_proto *p, const struct cJSON *presets)
{
	if (presets == NULL) {
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
	    "refused=%zu",
	    created, kept, subs, refused);
	return NMQ_OK;
}
