// DISCONNECT from the client: the session expiry it may set (v5), the will
// it discards when graceful, and the end of the connection.
#include "nng/protocol/link.h"

// Handles DISCONNECT from the client.
int handle_disconnect(nmq_link *l, const mqtt_packet *pk)
{
	nmq_session *s = l->session;
	if (l->ver == MQTT_PROTO_V5) {
		const mqtt_disconnect *d = &pk->u.disconnect;
		if (d->props.present & MQTT_PBIT(MQTT_PROP_SESSION_EXPIRY)) {
			if (l->session_zero_expiry && d->props.session_expiry != 0) {
				// [MQTT-3.14.2-2]
				link_fail(l, MQTT_RC_PROTOCOL_ERROR);
				return -1;
			}
			session_set_expiry(s, l, d->props.session_expiry);
		}
		l->graceful = d->reason == MQTT_RC_SUCCESS;
	} else {
		l->graceful = true;
	}
	if (l->graceful && l->will != NULL) {
		// [MQTT-3.1.2-10]: the will is discarded.
		nmq_msg_release(l->will);
		l->will = NULL;
	}
	// Detach now, not when the close completes: a client that reconnects
	// at once must find a non-persistent session already gone.
	link_detach(l);
	conn_close(l->conn);
	return -1;
}
