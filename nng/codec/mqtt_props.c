// MQTT 5.0 properties: decoding with per-packet validation, encoding,
// sizing, and iterators over the repeatable ones.

#include "nng/codec/mqtt_codec_priv.h"

// Wire data types of the property values.
enum ptype {
	PT_NONE = 0,
	PT_BYTE,
	PT_U16,
	PT_U32,
	PT_VBI,
	PT_UTF8,
	PT_BIN,
	PT_PAIR,
};

static const uint8_t prop_type[64] = {
	[MQTT_PROP_PAYLOAD_FORMAT]     = PT_BYTE,
	[MQTT_PROP_MESSAGE_EXPIRY]     = PT_U32,
	[MQTT_PROP_CONTENT_TYPE]       = PT_UTF8,
	[MQTT_PROP_RESPONSE_TOPIC]     = PT_UTF8,
	[MQTT_PROP_CORRELATION_DATA]   = PT_BIN,
	[MQTT_PROP_SUBSCRIPTION_ID]    = PT_VBI,
	[MQTT_PROP_SESSION_EXPIRY]     = PT_U32,
	[MQTT_PROP_ASSIGNED_CLIENT_ID] = PT_UTF8,
	[MQTT_PROP_SERVER_KEEP_ALIVE]  = PT_U16,
	[MQTT_PROP_AUTH_METHOD]        = PT_UTF8,
	[MQTT_PROP_AUTH_DATA]          = PT_BIN,
	[MQTT_PROP_REQUEST_PROBLEM]    = PT_BYTE,
	[MQTT_PROP_WILL_DELAY]         = PT_U32,
	[MQTT_PROP_REQUEST_RESPONSE]   = PT_BYTE,
	[MQTT_PROP_RESPONSE_INFO]      = PT_UTF8,
	[MQTT_PROP_SERVER_REFERENCE]   = PT_UTF8,
	[MQTT_PROP_REASON_STRING]      = PT_UTF8,
	[MQTT_PROP_RECEIVE_MAXIMUM]    = PT_U16,
	[MQTT_PROP_TOPIC_ALIAS_MAX]    = PT_U16,
	[MQTT_PROP_TOPIC_ALIAS]        = PT_U16,
	[MQTT_PROP_MAXIMUM_QOS]        = PT_BYTE,
	[MQTT_PROP_RETAIN_AVAILABLE]   = PT_BYTE,
	[MQTT_PROP_USER_PROPERTY]      = PT_PAIR,
	[MQTT_PROP_MAX_PACKET_SIZE]    = PT_U32,
	[MQTT_PROP_WILDCARD_SUB_AVAIL] = PT_BYTE,
	[MQTT_PROP_SUB_ID_AVAIL]       = PT_BYTE,
	[MQTT_PROP_SHARED_SUB_AVAIL]   = PT_BYTE,
};

#define B(id) MQTT_PBIT(MQTT_PROP_##id)

// Allowed property identifiers per context (MQTT 5.0 table 2-4).
static const uint64_t prop_allowed[] = {
	[MQTT_PCTX_CONNECT] = B(SESSION_EXPIRY) | B(AUTH_METHOD) | B(AUTH_DATA) | B(REQUEST_PROBLEM)
	    | B(REQUEST_RESPONSE) | B(RECEIVE_MAXIMUM) | B(TOPIC_ALIAS_MAX) | B(USER_PROPERTY)
	    | B(MAX_PACKET_SIZE),
	[MQTT_PCTX_WILL] = B(PAYLOAD_FORMAT) | B(MESSAGE_EXPIRY) | B(CONTENT_TYPE)
	    | B(RESPONSE_TOPIC) | B(CORRELATION_DATA) | B(WILL_DELAY) | B(USER_PROPERTY),
	[MQTT_PCTX_CONNACK] = B(SESSION_EXPIRY) | B(ASSIGNED_CLIENT_ID) | B(SERVER_KEEP_ALIVE)
	    | B(AUTH_METHOD) | B(AUTH_DATA) | B(RESPONSE_INFO) | B(SERVER_REFERENCE)
	    | B(REASON_STRING) | B(RECEIVE_MAXIMUM) | B(TOPIC_ALIAS_MAX) | B(MAXIMUM_QOS)
	    | B(RETAIN_AVAILABLE) | B(USER_PROPERTY) | B(MAX_PACKET_SIZE) | B(WILDCARD_SUB_AVAIL)
	    | B(SUB_ID_AVAIL) | B(SHARED_SUB_AVAIL),
	[MQTT_PCTX_PUBLISH] = B(PAYLOAD_FORMAT) | B(MESSAGE_EXPIRY) | B(CONTENT_TYPE)
	    | B(RESPONSE_TOPIC) | B(CORRELATION_DATA) | B(SUBSCRIPTION_ID) | B(TOPIC_ALIAS)
	    | B(USER_PROPERTY),
	[MQTT_PCTX_ACK]         = B(REASON_STRING) | B(USER_PROPERTY),
	[MQTT_PCTX_SUBSCRIBE]   = B(SUBSCRIPTION_ID) | B(USER_PROPERTY),
	[MQTT_PCTX_SUBACK]      = B(REASON_STRING) | B(USER_PROPERTY),
	[MQTT_PCTX_UNSUBSCRIBE] = B(USER_PROPERTY),
	[MQTT_PCTX_UNSUBACK]    = B(REASON_STRING) | B(USER_PROPERTY),
	[MQTT_PCTX_DISCONNECT]
	= B(SESSION_EXPIRY) | B(SERVER_REFERENCE) | B(REASON_STRING) | B(USER_PROPERTY),
	[MQTT_PCTX_AUTH] = B(AUTH_METHOD) | B(AUTH_DATA) | B(REASON_STRING) | B(USER_PROPERTY),
	[MQTT_PCTX_ANY]  = B(PAYLOAD_FORMAT) | B(MESSAGE_EXPIRY) | B(CONTENT_TYPE)
	    | B(RESPONSE_TOPIC) | B(CORRELATION_DATA) | B(SUBSCRIPTION_ID) | B(SESSION_EXPIRY)
	    | B(ASSIGNED_CLIENT_ID) | B(SERVER_KEEP_ALIVE) | B(AUTH_METHOD) | B(AUTH_DATA)
	    | B(REQUEST_PROBLEM) | B(WILL_DELAY) | B(REQUEST_RESPONSE) | B(RESPONSE_INFO)
	    | B(SERVER_REFERENCE) | B(REASON_STRING) | B(RECEIVE_MAXIMUM) | B(TOPIC_ALIAS_MAX)
	    | B(TOPIC_ALIAS) | B(MAXIMUM_QOS) | B(RETAIN_AVAILABLE) | B(USER_PROPERTY)
	    | B(MAX_PACKET_SIZE) | B(WILDCARD_SUB_AVAIL) | B(SUB_ID_AVAIL) | B(SHARED_SUB_AVAIL),
};

// The repeatable identifiers: they never count as single-valued present bits
// when encoding.
#define REPEATABLE_BITS (B(USER_PROPERTY) | B(SUBSCRIPTION_ID))

// Returns 0 if a numeric property value is in range, or
// MQTT_RC_PROTOCOL_ERROR for a value out of range.
static int prop_value_check(uint32_t id, uint32_t v)
{
	switch (id) {
	case MQTT_PROP_PAYLOAD_FORMAT:
	case MQTT_PROP_REQUEST_PROBLEM:
	case MQTT_PROP_REQUEST_RESPONSE:
	case MQTT_PROP_MAXIMUM_QOS:
	case MQTT_PROP_RETAIN_AVAILABLE:
	case MQTT_PROP_WILDCARD_SUB_AVAIL:
	case MQTT_PROP_SUB_ID_AVAIL:
	case MQTT_PROP_SHARED_SUB_AVAIL:
		return v > 1 ? MQTT_RC_PROTOCOL_ERROR : 0;
	case MQTT_PROP_RECEIVE_MAXIMUM:
	case MQTT_PROP_MAX_PACKET_SIZE:
	case MQTT_PROP_TOPIC_ALIAS:
	case MQTT_PROP_SUBSCRIPTION_ID:
		return v == 0 ? MQTT_RC_PROTOCOL_ERROR : 0;
	default:
		return 0;
	}
}

// Stores a decoded numeric value into its field of *p.
static void prop_set_num(mqtt_props *p, uint32_t id, uint32_t v)
{
	switch (id) {
	case MQTT_PROP_PAYLOAD_FORMAT:
		p->payload_format = (uint8_t)v;
		break;
	case MQTT_PROP_MESSAGE_EXPIRY:
		p->message_expiry = v;
		break;
	case MQTT_PROP_SUBSCRIPTION_ID:
		if (p->n_sub_ids == 0) {
			p->subscription_id = v;
		}
		p->n_sub_ids++;
		break;
	case MQTT_PROP_SESSION_EXPIRY:
		p->session_expiry = v;
		break;
	case MQTT_PROP_SERVER_KEEP_ALIVE:
		p->server_keep_alive = (uint16_t)v;
		break;
	case MQTT_PROP_REQUEST_PROBLEM:
		p->request_problem_info = (uint8_t)v;
		break;
	case MQTT_PROP_WILL_DELAY:
		p->will_delay = v;
		break;
	case MQTT_PROP_REQUEST_RESPONSE:
		p->request_response_info = (uint8_t)v;
		break;
	case MQTT_PROP_RECEIVE_MAXIMUM:
		p->receive_maximum = (uint16_t)v;
		break;
	case MQTT_PROP_TOPIC_ALIAS_MAX:
		p->topic_alias_maximum = (uint16_t)v;
		break;
	case MQTT_PROP_TOPIC_ALIAS:
		p->topic_alias = (uint16_t)v;
		break;
	case MQTT_PROP_MAXIMUM_QOS:
		p->maximum_qos = (uint8_t)v;
		break;
	case MQTT_PROP_RETAIN_AVAILABLE:
		p->retain_available = (uint8_t)v;
		break;
	case MQTT_PROP_MAX_PACKET_SIZE:
		p->maximum_packet_size = v;
		break;
	case MQTT_PROP_WILDCARD_SUB_AVAIL:
		p->wildcard_sub_available = (uint8_t)v;
		break;
	case MQTT_PROP_SUB_ID_AVAIL:
		p->sub_id_available = (uint8_t)v;
		break;
	case MQTT_PROP_SHARED_SUB_AVAIL:
		p->shared_sub_available = (uint8_t)v;
		break;
	default:
		break;
	}
}

// Returns a pointer to the mqtt_bytes field of a string or binary property,
// or NULL for other identifiers. The const and non-const callers share it.
static mqtt_bytes *prop_bytes_field(mqtt_props *p, uint32_t id)
{
	switch (id) {
	case MQTT_PROP_CONTENT_TYPE:
		return &p->content_type;
	case MQTT_PROP_RESPONSE_TOPIC:
		return &p->response_topic;
	case MQTT_PROP_CORRELATION_DATA:
		return &p->correlation_data;
	case MQTT_PROP_ASSIGNED_CLIENT_ID:
		return &p->assigned_client_id;
	case MQTT_PROP_AUTH_METHOD:
		return &p->auth_method;
	case MQTT_PROP_AUTH_DATA:
		return &p->auth_data;
	case MQTT_PROP_RESPONSE_INFO:
		return &p->response_info;
	case MQTT_PROP_SERVER_REFERENCE:
		return &p->server_reference;
	case MQTT_PROP_REASON_STRING:
		return &p->reason_string;
	default:
		return NULL;
	}
}

// Returns the numeric value of a single-valued numeric property of *p.
static uint32_t prop_get_num(const mqtt_props *p, uint32_t id)
{
	switch (id) {
	case MQTT_PROP_PAYLOAD_FORMAT:
		return p->payload_format;
	case MQTT_PROP_MESSAGE_EXPIRY:
		return p->message_expiry;
	case MQTT_PROP_SESSION_EXPIRY:
		return p->session_expiry;
	case MQTT_PROP_SERVER_KEEP_ALIVE:
		return p->server_keep_alive;
	case MQTT_PROP_REQUEST_PROBLEM:
		return p->request_problem_info;
	case MQTT_PROP_WILL_DELAY:
		return p->will_delay;
	case MQTT_PROP_REQUEST_RESPONSE:
		return p->request_response_info;
	case MQTT_PROP_RECEIVE_MAXIMUM:
		return p->receive_maximum;
	case MQTT_PROP_TOPIC_ALIAS_MAX:
		return p->topic_alias_maximum;
	case MQTT_PROP_TOPIC_ALIAS:
		return p->topic_alias;
	case MQTT_PROP_MAXIMUM_QOS:
		return p->maximum_qos;
	case MQTT_PROP_RETAIN_AVAILABLE:
		return p->retain_available;
	case MQTT_PROP_MAX_PACKET_SIZE:
		return p->maximum_packet_size;
	case MQTT_PROP_WILDCARD_SUB_AVAIL:
		return p->wildcard_sub_available;
	case MQTT_PROP_SUB_ID_AVAIL:
		return p->sub_id_available;
	case MQTT_PROP_SHARED_SUB_AVAIL:
		return p->shared_sub_available;
	default:
		return 0;
	}
}

// Decodes a property block for context ctx. Returns 0, MQTT_RC_MALFORMED
// (truncated block, unknown identifier, identifier not allowed in ctx, bad
// UTF-8), MQTT_RC_PROTOCOL_ERROR (a single-valued property repeated, value
// out of range, authentication data without a method, a wildcard in the
// response topic, Topic Alias 0).
int mqtt_props_decode_ctx(mqtt_rd *r, int ctx, mqtt_props *out)
{
	uint32_t plen;
	mqtt_rd  pr;
	uint64_t allowed = prop_allowed[ctx];

	memset(out, 0, sizeof(*out));
	if (!rd_vbi(r, &plen) || plen > rd_left(r)) {
		return MQTT_RC_MALFORMED;
	}
	pr.p         = r->p;
	pr.end       = r->p + plen;
	out->raw.p   = r->p;
	out->raw.len = plen;
	r->p += plen;

	while (rd_left(&pr) > 0) {
		uint32_t   id, v = 0;
		uint8_t    b;
		uint16_t   s;
		mqtt_bytes bytes, val;
		int        rc;
		bool       repeatable;

		if (!rd_vbi(&pr, &id) || id >= 64 || prop_type[id] == PT_NONE
		    || (allowed & MQTT_PBIT(id)) == 0) {
			return MQTT_RC_MALFORMED;
		}
		repeatable = id == MQTT_PROP_USER_PROPERTY
		    || (id == MQTT_PROP_SUBSCRIPTION_ID && ctx == MQTT_PCTX_PUBLISH);
		if (!repeatable && (out->present & MQTT_PBIT(id)) != 0) {
			return MQTT_RC_PROTOCOL_ERROR;
		}
		out->present |= MQTT_PBIT(id);
		switch (prop_type[id]) {
		case PT_BYTE:
			if (!rd_u8(&pr, &b)) {
				return MQTT_RC_MALFORMED;
			}
			v = b;
			break;
		case PT_U16:
			if (!rd_u16(&pr, &s)) {
				return MQTT_RC_MALFORMED;
			}
			v = s;
			break;
		case PT_U32:
			if (!rd_u32(&pr, &v)) {
				return MQTT_RC_MALFORMED;
			}
			break;
		case PT_VBI:
			if (!rd_vbi(&pr, &v)) {
				return MQTT_RC_MALFORMED;
			}
			break;
		case PT_UTF8:
			if (!rd_utf8(&pr, &bytes)) {
				return MQTT_RC_MALFORMED;
			}
			*prop_bytes_field(out, id) = bytes;
			continue;
		case PT_BIN:
			if (!rd_bin(&pr, &bytes)) {
				return MQTT_RC_MALFORMED;
			}
			*prop_bytes_field(out, id) = bytes;
			continue;
		case PT_PAIR:
			if (!rd_utf8(&pr, &bytes) || !rd_utf8(&pr, &val)) {
				return MQTT_RC_MALFORMED;
			}
			out->n_user_props++;
			continue;
		default:
			return MQTT_RC_MALFORMED;
		}
		if ((rc = prop_value_check(id, v)) != 0) {
			return rc;
		}
		prop_set_num(out, id, v);
	}

	if ((out->present & B(AUTH_DATA)) != 0 && (out->present & B(AUTH_METHOD)) == 0) {
		return MQTT_RC_PROTOCOL_ERROR;
	}
	if ((out->present & B(RESPONSE_TOPIC)) != 0
	    && !mqtt_topic_name_valid(out->response_topic.p, out->response_topic.len)) {
		return MQTT_RC_PROTOCOL_ERROR;
	}
	return 0;
}

// Initialises it to walk the property block props->raw.
void mqtt_prop_iter_init(mqtt_prop_iter *it, const mqtt_props *props)
{
	it->p   = props->raw.p;
	it->end = props->raw.p == NULL ? NULL : props->raw.p + props->raw.len;
}

// Advances it to the next property with identifier want and stores the
// value in *num (VBI/integers) or *a and *b (pair). Returns false at the end
// of the block or if the block is malformed (the iterator then stays at its
// end).
static bool prop_iter_next(
    mqtt_prop_iter *it, uint32_t want, uint32_t *num, mqtt_bytes *a, mqtt_bytes *b)
{
	mqtt_rd r = { it->p, it->end };

	if (it->p == NULL) {
		return false;
	}
	while (rd_left(&r) > 0) {
		uint32_t   id, v = 0;
		uint8_t    u8;
		uint16_t   u16;
		mqtt_bytes x, y;
		bool       ok;

		if (!rd_vbi(&r, &id) || id >= 64) {
			break;
		}
		switch (prop_type[id]) {
		case PT_BYTE:
			ok = rd_u8(&r, &u8);
			v  = u8;
			break;
		case PT_U16:
			ok = rd_u16(&r, &u16);
			v  = u16;
			break;
		case PT_U32:
			ok = rd_u32(&r, &v);
			break;
		case PT_VBI:
			ok = rd_vbi(&r, &v);
			break;
		case PT_UTF8:
		case PT_BIN:
			ok = rd_bin(&r, &x);
			break;
		case PT_PAIR:
			ok = rd_bin(&r, &x) && rd_bin(&r, &y);
			break;
		default:
			ok = false;
			break;
		}
		if (!ok) {
			break;
		}
		if (id == want) {
			it->p = r.p;
			if (num != NULL) {
				*num = v;
			}
			if (a != NULL) {
				*a = x;
				*b = y;
			}
			return true;
		}
	}
	it->p = it->end;
	return false;
}

// Returns true and stores the next user property's key and value, or false
// when none remain.
bool mqtt_prop_iter_next_user(mqtt_prop_iter *it, mqtt_bytes *key, mqtt_bytes *value)
{
	return prop_iter_next(it, MQTT_PROP_USER_PROPERTY, NULL, key, value);
}

// Returns true and stores the next subscription identifier, or false when
// none remain.
bool mqtt_prop_iter_next_sub_id(mqtt_prop_iter *it, uint32_t *id)
{
	return prop_iter_next(it, MQTT_PROP_SUBSCRIPTION_ID, id, NULL, NULL);
}

// Writes (or counts) the property contents without the length VBI. Sets
// w->err if a property is not allowed in ctx, a value is out of range, or
// a repeatable property list cannot be produced.
static void props_write_body(mqtt_wr *w, int ctx, const mqtt_props *p)
{
	uint64_t allowed = prop_allowed[ctx];
	uint64_t single  = p->present & ~REPEATABLE_BITS;

	if ((single & ~allowed) != 0) {
		w->err = true;
		return;
	}
	if ((single & B(AUTH_DATA)) != 0 && (single & B(AUTH_METHOD)) == 0) {
		w->err = true;
		return;
	}
	for (uint32_t id = 1; id < 64; id++) {
		if ((single & MQTT_PBIT(id)) == 0) {
			continue;
		}
		uint32_t v = prop_get_num(p, id);
		switch (prop_type[id]) {
		case PT_BYTE:
		case PT_U16:
		case PT_U32:
			if (prop_value_check(id, v) != 0) {
				w->err = true;
				return;
			}
			wr_u8(w, (uint8_t)id);
			if (prop_type[id] == PT_BYTE) {
				wr_u8(w, (uint8_t)v);
			} else if (prop_type[id] == PT_U16) {
				wr_u16(w, (uint16_t)v);
			} else {
				wr_u32(w, v);
			}
			break;
		case PT_UTF8:
		case PT_BIN:
			wr_u8(w, (uint8_t)id);
			wr_bin(w, *prop_bytes_field((mqtt_props *)p, id));
			break;
		default:
			w->err = true;
			return;
		}
	}

	// Subscription identifiers: from sub_ids, else (bit set) from raw or the
	// single subscription_id field.
	if (p->sub_ids != NULL ? p->n_sub_ids > 0 : (p->present & B(SUBSCRIPTION_ID)) != 0) {
		uint32_t n = p->n_sub_ids;
		if ((allowed & B(SUBSCRIPTION_ID)) == 0) {
			w->err = true;
			return;
		}
		if (p->sub_ids == NULL && n == 0) {
			n = 1; // only the present bit: the single subscription_id
		}
		if (ctx == MQTT_PCTX_SUBSCRIBE && n > 1) {
			w->err = true;
			return;
		}
		if (p->sub_ids != NULL) {
			for (uint32_t i = 0; i < n; i++) {
				if (p->sub_ids[i] == 0) {
					w->err = true;
					return;
				}
				wr_u8(w, MQTT_PROP_SUBSCRIPTION_ID);
				wr_vbi(w, p->sub_ids[i]);
			}
		} else if (p->n_sub_ids == 0) {
			if (p->subscription_id == 0) {
				w->err = true;
				return;
			}
			wr_u8(w, MQTT_PROP_SUBSCRIPTION_ID);
			wr_vbi(w, p->subscription_id);
		} else {
			mqtt_prop_iter it;
			uint32_t       id;
			mqtt_prop_iter_init(&it, p);
			for (uint32_t i = 0; i < n; i++) {
				if (!mqtt_prop_iter_next_sub_id(&it, &id) || id == 0) {
					w->err = true;
					return;
				}
				wr_u8(w, MQTT_PROP_SUBSCRIPTION_ID);
				wr_vbi(w, id);
			}
		}
	}

	// User properties: from user_props, else (bit set) from raw.
	if (p->n_user_props > 0
	    && (p->user_props != NULL || (p->present & B(USER_PROPERTY)) != 0)) {
		if ((allowed & B(USER_PROPERTY)) == 0) {
			w->err = true;
			return;
		}
		if (p->user_props != NULL) {
			for (uint32_t i = 0; i < p->n_user_props; i++) {
				wr_u8(w, MQTT_PROP_USER_PROPERTY);
				wr_bin(w, p->user_props[i].key);
				wr_bin(w, p->user_props[i].value);
			}
		} else {
			mqtt_prop_iter it;
			mqtt_bytes     k, v;
			mqtt_prop_iter_init(&it, p);
			for (uint32_t i = 0; i < p->n_user_props; i++) {
				if (!mqtt_prop_iter_next_user(&it, &k, &v)) {
					w->err = true;
					return;
				}
				wr_u8(w, MQTT_PROP_USER_PROPERTY);
				wr_bin(w, k);
				wr_bin(w, v);
			}
		}
	}
}

// Writes (or counts) the property block for ctx: length VBI, then contents.
// Sets w->err on invalid input or overflow.
void mqtt_props_write_ctx(mqtt_wr *w, int ctx, const mqtt_props *props)
{
	mqtt_wr count = { NULL, 0, 0, false };

	props_write_body(&count, ctx, props);
	if (count.err || count.n > MQTT_VBI_MAX) {
		w->err = true;
		return;
	}
	wr_vbi(w, (uint32_t)count.n);
	props_write_body(w, ctx, props);
}

// Returns the size of the property contents (without the length VBI), or 0
// if the properties are invalid; 0 is also the size of an empty block.
size_t mqtt_props_size(const mqtt_props *props)
{
	mqtt_wr w = { NULL, 0, 0, false };

	props_write_body(&w, MQTT_PCTX_ANY, props);
	return w.err ? 0 : w.n;
}

// Returns the bytes written (length VBI and contents, at least 1), or 0 if
// the block does not fit in cap or the properties are invalid.
size_t mqtt_props_encode(uint8_t *buf, size_t cap, const mqtt_props *props)
{
	mqtt_wr w = { buf, cap, 0, false };

	if (buf == NULL) {
		return 0;
	}
	mqtt_props_write_ctx(&w, MQTT_PCTX_ANY, props);
	return w.err ? 0 : w.n;
}
