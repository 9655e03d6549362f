// Variable byte integers, fixed-header framing, and names for logs.

#include "nng/codec/mqtt_codec_priv.h"

// Returns the number of bytes (1..4) of the variable byte integer at buf and
// stores its value; 0 if buf ends before the integer does; -1 if the integer
// is longer than four bytes or not in its shortest form (MQTT-1.5.5-1).
int mqtt_vbi_decode(const uint8_t *buf, size_t len, uint32_t *value)
{
	uint32_t v = 0;

	for (size_t i = 0; i < 4; i++) {
		if (i >= len) {
			return 0;
		}
		v |= (uint32_t)(buf[i] & 0x7F) << (7 * i);
		if ((buf[i] & 0x80) == 0) {
			if (i > 0 && buf[i] == 0) {
				return -1; // a trailing zero byte: not the shortest form
			}
			*value = v;
			return (int)i + 1;
		}
	}
	return -1;
}

// Returns the number of bytes needed to encode value (1..4), or 0 if value
// is above MQTT_VBI_MAX.
size_t mqtt_vbi_size(uint32_t value)
{
	if (value < 128u) {
		return 1;
	}
	if (value < 16384u) {
		return 2;
	}
	if (value < 2097152u) {
		return 3;
	}
	if (value <= MQTT_VBI_MAX) {
		return 4;
	}
	return 0;
}

// Writes value as a variable byte integer into buf (at least 4 bytes) and
// returns the bytes written, or 0 (writing nothing) if value is above
// MQTT_VBI_MAX.
size_t mqtt_vbi_encode(uint8_t *buf, uint32_t value)
{
	size_t n = 0;

	if (value > MQTT_VBI_MAX) {
		return 0;
	}
	do {
		uint8_t b = (uint8_t)(value & 0x7F);
		value >>= 7;
		if (value > 0) {
			b |= 0x80;
		}
		buf[n++] = b;
	} while (value > 0);
	return n;
}

// Returns MQTT_FRAME_OK with *remaining and *hdr_len set when buf holds a
// complete fixed header, MQTT_FRAME_NEED_MORE if it does not yet, or
// MQTT_FRAME_MALFORMED if the remaining length is not a valid variable byte
// integer.
int mqtt_frame_header(const uint8_t *buf, size_t len, uint32_t *remaining, uint8_t *hdr_len)
{
	uint32_t v;
	int      n;

	if (len < 2) {
		return MQTT_FRAME_NEED_MORE;
	}
	n = mqtt_vbi_decode(buf + 1, len - 1, &v);
	if (n < 0) {
		return MQTT_FRAME_MALFORMED;
	}
	if (n == 0) {
		return MQTT_FRAME_NEED_MORE;
	}
	*remaining = v;
	*hdr_len   = (uint8_t)(1 + n);
	return MQTT_FRAME_OK;
}

// Returns a static name for a packet type, "UNKNOWN" for anything else.
const char *mqtt_packet_name(uint8_t type)
{
	switch (type) {
	case MQTT_CONNECT:
		return "CONNECT";
	case MQTT_CONNACK:
		return "CONNACK";
	case MQTT_PUBLISH:
		return "PUBLISH";
	case MQTT_PUBACK:
		return "PUBACK";
	case MQTT_PUBREC:
		return "PUBREC";
	case MQTT_PUBREL:
		return "PUBREL";
	case MQTT_PUBCOMP:
		return "PUBCOMP";
	case MQTT_SUBSCRIBE:
		return "SUBSCRIBE";
	case MQTT_SUBACK:
		return "SUBACK";
	case MQTT_UNSUBSCRIBE:
		return "UNSUBSCRIBE";
	case MQTT_UNSUBACK:
		return "UNSUBACK";
	case MQTT_PINGREQ:
		return "PINGREQ";
	case MQTT_PINGRESP:
		return "PINGRESP";
	case MQTT_DISCONNECT:
		return "DISCONNECT";
	case MQTT_AUTH:
		return "AUTH";
	default:
		return "UNKNOWN";
	}
}

// Returns a static name for an MQTT 5 reason code, "Unknown reason code"
// for values the specification does not define.
const char *mqtt_reason_name(uint8_t reason)
{
	switch (reason) {
	case MQTT_RC_SUCCESS:
		return "Success";
	case MQTT_RC_GRANTED_QOS1:
		return "Granted QoS 1";
	case MQTT_RC_GRANTED_QOS2:
		return "Granted QoS 2";
	case MQTT_RC_DISCONNECT_WITH_WILL:
		return "Disconnect with Will Message";
	case MQTT_RC_NO_MATCHING_SUBSCRIBERS:
		return "No matching subscribers";
	case MQTT_RC_NO_SUBSCRIPTION_EXISTED:
		return "No subscription existed";
	case MQTT_RC_CONTINUE_AUTH:
		return "Continue authentication";
	case MQTT_RC_REAUTHENTICATE:
		return "Re-authenticate";
	case MQTT_RC_UNSPECIFIED:
		return "Unspecified error";
	case MQTT_RC_MALFORMED:
		return "Malformed Packet";
	case MQTT_RC_PROTOCOL_ERROR:
		return "Protocol Error";
	case MQTT_RC_IMPL_SPECIFIC:
		return "Implementation specific error";
	case MQTT_RC_UNSUPPORTED_VERSION:
		return "Unsupported Protocol Version";
	case MQTT_RC_CLIENT_ID_INVALID:
		return "Client Identifier not valid";
	case MQTT_RC_BAD_USER_OR_PASSWORD:
		return "Bad User Name or Password";
	case MQTT_RC_NOT_AUTHORIZED:
		return "Not authorized";
	case MQTT_RC_SERVER_UNAVAILABLE:
		return "Server unavailable";
	case MQTT_RC_SERVER_BUSY:
		return "Server busy";
	case MQTT_RC_BANNED:
		return "Banned";
	case MQTT_RC_SERVER_SHUTTING_DOWN:
		return "Server shutting down";
	case MQTT_RC_BAD_AUTH_METHOD:
		return "Bad authentication method";
	case MQTT_RC_KEEP_ALIVE_TIMEOUT:
		return "Keep Alive timeout";
	case MQTT_RC_SESSION_TAKEN_OVER:
		return "Session taken over";
	case MQTT_RC_TOPIC_FILTER_INVALID:
		return "Topic Filter invalid";
	case MQTT_RC_TOPIC_NAME_INVALID:
		return "Topic Name invalid";
	case MQTT_RC_PACKET_ID_IN_USE:
		return "Packet Identifier in use";
	case MQTT_RC_PACKET_ID_NOT_FOUND:
		return "Packet Identifier not found";
	case MQTT_RC_RECEIVE_MAX_EXCEEDED:
		return "Receive Maximum exceeded";
	case MQTT_RC_TOPIC_ALIAS_INVALID:
		return "Topic Alias invalid";
	case MQTT_RC_PACKET_TOO_LARGE:
		return "Packet too large";
	case MQTT_RC_MESSAGE_RATE_TOO_HIGH:
		return "Message rate too high";
	case MQTT_RC_QUOTA_EXCEEDED:
		return "Quota exceeded";
	case MQTT_RC_ADMIN_ACTION:
		return "Administrative action";
	case MQTT_RC_PAYLOAD_FORMAT_INVALID:
		return "Payload format invalid";
	case MQTT_RC_RETAIN_NOT_SUPPORTED:
		return "Retain not supported";
	case MQTT_RC_QOS_NOT_SUPPORTED:
		return "QoS not supported";
	case MQTT_RC_USE_ANOTHER_SERVER:
		return "Use another server";
	case MQTT_RC_SERVER_MOVED:
		return "Server moved";
	case MQTT_RC_SHARED_SUB_NOT_SUPPORTED:
		return "Shared Subscriptions not supported";
	case MQTT_RC_CONNECTION_RATE_EXCEEDED:
		return "Connection rate exceeded";
	case MQTT_RC_MAX_CONNECT_TIME:
		return "Maximum connect time";
	case MQTT_RC_SUB_ID_NOT_SUPPORTED:
		return "Subscription Identifiers not supported";
	case MQTT_RC_WILDCARD_SUB_NOT_SUPPORTED:
		return "Wildcard Subscriptions not supported";
	default:
		return "Unknown reason code";
	}
}
