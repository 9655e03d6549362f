// UTF-8 well-formedness and topic name / topic filter validation.

#include "nng/codec/mqtt_codec_priv.h"

// Returns true if s[0..len) is well-formed UTF-8 (RFC 3629) without U+0000;
// RFC 3629 already excludes surrogates, overlong forms and code points above
// U+10FFFF. Fails (returns false) on the first offending byte.
bool mqtt_utf8_valid(const uint8_t *s, size_t len)
{
	size_t i = 0;

	if (len > 0 && s == NULL) {
		return false;
	}
	while (i < len) {
		uint8_t c = s[i];
		size_t  n;
		uint8_t lo = 0x80, hi = 0xBF; // allowed range of the second byte

		if (c == 0) {
			return false;
		}
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF) {
			n = 1;
		} else if (c == 0xE0) {
			n  = 2;
			lo = 0xA0; // no overlong three-byte forms
		} else if (c == 0xED) {
			n  = 2;
			hi = 0x9F; // no surrogates
		} else if (c >= 0xE1 && c <= 0xEF) {
			n = 2;
		} else if (c == 0xF0) {
			n  = 3;
			lo = 0x90; // no overlong four-byte forms
		} else if (c >= 0xF1 && c <= 0xF3) {
			n = 3;
		} else if (c == 0xF4) {
			n  = 3;
			hi = 0x8F; // nothing above U+10FFFF
		} else {
			return false; // continuation byte, 0xC0, 0xC1 or 0xF5..0xFF
		}
		if (len - i - 1 < n) {
			return false;
		}
		if (s[i + 1] < lo || s[i + 1] > hi) {
			return false;
		}
		for (size_t k = 2; k <= n; k++) {
			if ((s[i + k] & 0xC0) != 0x80) {
				return false;
			}
		}
		i += n + 1;
	}
	return true;
}

// Returns true if s is a valid PUBLISH topic name: one to 65535 bytes of
// valid UTF-8 without '+' or '#'. Returns false otherwise.
bool mqtt_topic_name_valid(const uint8_t *s, size_t len)
{
	if (len == 0 || len > 0xFFFF || s == NULL) {
		return false;
	}
	if (memchr(s, '+', len) != NULL || memchr(s, '#', len) != NULL) {
		return false;
	}
	return mqtt_utf8_valid(s, len);
}

// Splits "$share/<group>/<filter>" (see the header). The inner filter is
// not validated here.
mqtt_share_kind mqtt_share_split(const uint8_t *s, size_t len, mqtt_share *out)
{
	static const char pfx[] = "$share/";
	const size_t      plen  = sizeof(pfx) - 1;

	if (s == NULL || len < plen || memcmp(s, pfx, plen) != 0) {
		if (out != NULL) {
			*out = (mqtt_share) { NULL, 0, s, len };
		}
		return MQTT_SHARE_NONE;
	}
	const uint8_t *group = s + plen;
	size_t         rest  = len - plen;
	const uint8_t *slash = memchr(group, '/', rest);
	if (slash == NULL || slash == group) {
		return MQTT_SHARE_MALFORMED;
	}
	size_t glen = (size_t)(slash - group);
	if (memchr(group, '+', glen) != NULL || memchr(group, '#', glen) != NULL) {
		return MQTT_SHARE_MALFORMED;
	}
	if (rest - glen - 1 == 0) {
		return MQTT_SHARE_MALFORMED;
	}
	if (out != NULL) {
		*out = (mqtt_share) { group, glen, slash + 1, rest - glen - 1 };
	}
	return MQTT_SHARE_OK;
}

// Returns true if s[0..len) is a structurally valid non-shared filter: '+'
// fills its whole level and '#' fills the last level. Returns false
// otherwise, including for an empty filter.
static bool filter_levels_valid(const uint8_t *s, size_t len)
{
	if (len == 0) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		bool level_start = (i == 0 || s[i - 1] == '/');
		bool level_end   = (i + 1 == len || s[i + 1] == '/');
		if (s[i] == '+') {
			if (!level_start || !level_end) {
				return false;
			}
		} else if (s[i] == '#') {
			if (!level_start || i + 1 != len) {
				return false;
			}
		}
	}
	return true;
}

// Returns true if s is a valid SUBSCRIBE/UNSUBSCRIBE topic filter (see the
// header for the rules, including "$share/<group>/<filter>"), false
// otherwise.
bool mqtt_topic_filter_valid(const uint8_t *s, size_t len)
{
	mqtt_share sh;

	if (len == 0 || len > 0xFFFF || s == NULL || !mqtt_utf8_valid(s, len)) {
		return false;
	}
	// Strip every "$share/<group>/" so that what a caller gets from
	// mqtt_share_split() is itself a valid filter.
	for (;;) {
		mqtt_share_kind k = mqtt_share_split(s, len, &sh);
		if (k == MQTT_SHARE_MALFORMED) {
			return false;
		}
		if (k == MQTT_SHARE_NONE) {
			return filter_levels_valid(s, len);
		}
		s   = sh.filter;
		len = sh.flen;
	}
}
