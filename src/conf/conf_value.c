// Conversion of configuration text to typed values: booleans, integers,
// floats, words, sizes and durations, with range checks from the schema.
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// Largest value a size or duration may reach before it counts as overflow.
#define CONF_BIG 9007199254740992.0 // 2^53

// The whole part of 0 <= v < 2^64. With it this file makes no libm calls
// (floor, round and fmod are not always inlined), so that the daemon does
// not need libm.so (which costs ~320 kB of resident memory at startup).
static double whole(double v)
{
	return (double)(uint64_t)v;
}

// Splits s into a non-negative decimal mantissa and a unit word (white
// space allowed between them). Returns 0 with *v and the unit (possibly
// empty) in unit, or -1 when s is not of that form.
static int split_unit(const char *s, double *v, char *unit, size_t ulen)
{
	const char *p = s;
	char       *end;
	size_t      n = 0;

	if (!ascii_isdigit((unsigned char)*p)
	    && !(*p == '.' && ascii_isdigit((unsigned char)p[1]))) {
		return -1;
	}
	while (ascii_isdigit((unsigned char)*p) || *p == '.') {
		p++;
	}
	errno = 0;
	*v    = ascii_strtod(s, &end);
	if (end != p || errno != 0 || !isfinite(*v)) {
		return -1;
	}
	while (*p == ' ' || *p == '\t') {
		p++;
	}
	while (ascii_isalpha((unsigned char)*p)) {
		if (n + 1 >= ulen) {
			return -1;
		}
		unit[n++] = *p++;
	}
	unit[n] = '\0';
	return *p == '\0' ? 0 : -1;
}

// Parses a size into bytes. Returns 0, or -1 when s is not a size.
int conf_parse_size(const char *s, uint64_t *bytes)
{
	static const struct {
		const char *name;
		double      mult;
	} units[] = {
		{ "", 1 },
		{ "B", 1 },
		{ "KB", 1024.0 },
		{ "MB", 1024.0 * 1024 },
		{ "GB", 1024.0 * 1024 * 1024 },
	};
	char   unit[8];
	double v;

	if (split_unit(s, &v, unit, sizeof(unit)) != 0) {
		return -1;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ascii_ieq(unit, units[i].name)) {
			double b = v * units[i].mult;
			// No double lies strictly between 2^53 and 2^53 + 2, so this
			// is the same test as floor(b) > CONF_BIG.
			if (b > CONF_BIG) {
				return -1;
			}
			*bytes = (uint64_t)b;
			return 0;
		}
	}
	return -1;
}

// Parses a duration into milliseconds; a bare number counts bare_ms each.
// Returns 0, or -1 when s is not a duration or is not a whole number of
// milliseconds.
int conf_parse_duration(const char *s, uint64_t bare_ms, uint64_t *ms)
{
	static const struct {
		const char *name;
		double      mult;
	} units[] = {
		{ "ms", 1 },
		{ "s", 1000 },
		{ "m", 60000 },
		{ "h", 3600000 },
	};
	char   unit[8];
	double v;
	double mult = -1;

	if (split_unit(s, &v, unit, sizeof(unit)) != 0) {
		return -1;
	}
	if (unit[0] == '\0') {
		mult = (double)bare_ms;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && mult < 0; i++) {
		if (ascii_ieq(unit, units[i].name)) {
			mult = units[i].mult;
		}
	}
	if (mult < 0) {
		return -1;
	}
	v *= mult;
	if (v > CONF_BIG) {
		return -1;
	}
	// v >= 0: round half away from zero; v - whole(v) is exact.
	double r = whole(v);
	if (v - r >= 0.5) {
		r += 1;
	}
	if (v - r > 1e-6 || r - v > 1e-6) {
		return -1;
	}
	*ms = (uint64_t)r;
	return 0;
}

// Writes a number of bytes with the largest unit that divides it.
void conf_size_text(double v, char *buf, size_t len)
{
	static const char *units[] = { "B", "KB", "MB", "GB", "TB" };
	int                u       = 0;

	// fmod(v, 1024) == 0 without libm: v / 1024 is exact, and every finite
	// double from 2^52 up is a whole number.
	while (u < 4 && v >= 1024 && isfinite(v)
	    && (v / 1024 >= 4503599627370496.0 || v / 1024 == whole(v / 1024))) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.0f%s", v, units[u]);
}

// Writes the allowed range of k as text ("" when k has no range).
void conf_range_text(const conf_key *k, char *buf, size_t len)
{
	char        lo[32];
	char        hi[32];
	const char *unit = k->type == CONF_T_DUR_S ? "s" : k->type == CONF_T_DUR_MS ? "ms" : "";

	buf[0] = '\0';
	if (!(k->min < k->max)) {
		return;
	}
	if (k->type == CONF_T_SIZE) {
		conf_size_text(k->min, lo, sizeof(lo));
		conf_size_text(k->max, hi, sizeof(hi));
	} else {
		snprintf(lo, sizeof(lo), "%.15g%s", k->min, unit);
		snprintf(hi, sizeof(hi), "%.15g%s", k->max, unit);
	}
	snprintf(buf, len, "%s%s .. %s", (k->flags & CONF_F_MIN_EXCL) ? "> " : "", lo, hi);
}

// Checks v (written text) against the range of k. Returns 0, or -1 with a
// reason.
static int check_range(const conf_key *k, double v, const char *text, char *why, size_t whylen)
{
	char r[96];

	if (!(k->min < k->max)) {
		return 0;
	}
	if (((k->flags & CONF_F_MIN_EXCL) ? v <= k->min : v < k->min) || v > k->max) {
		conf_range_text(k, r, sizeof(r));
		snprintf(why, whylen, "%.64s is out of range (allowed: %s)", text, r);
		return -1;
	}
	return 0;
}

// Looks word up in a '|' separated list (case-insensitive). Returns its
// index, or -1.
static int word_index(const char *words, const char *word, size_t wlen)
{
	int i = 0;

	for (const char *w = words; *w != '\0'; i++) {
		size_t n = ascii_cspn(w, "|");
		if (n == wlen && ascii_ieqn(w, word, n)) {
			return i;
		}
		w += n + (w[n] == '|');
	}
	return -1;
}

// Writes the words of k as "a, b, c".
static void words_msg(const conf_key *k, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (const char *w = k->words; *w != '\0' && n + 4 < len;) {
		size_t wl = ascii_cspn(w, "|");
		n += (size_t)snprintf(buf + n, len - n, "%s%.*s", n > 0 ? ", " : "", (int)wl, w);
		w += wl + (w[wl] == '|');
	}
}

// Parses a boolean word. Returns 0 or -1.
static int parse_bool(const char *s, bool loose, bool *b)
{
	static const char *yes[] = { "true", "yes", "on" };
	static const char *no[]  = { "false", "no", "off" };

	for (size_t i = 0; i < 3; i++) {
		if (ascii_ieq(s, yes[i])) {
			*b = true;
			return 0;
		}
		if (ascii_ieq(s, no[i])) {
			*b = false;
			return 0;
		}
	}
	if (loose && (strcmp(s, "1") == 0 || strcmp(s, "0") == 0)) {
		*b = s[0] == '1';
		return 0;
	}
	return -1;
}

// Converts text to the type of k. Returns 0 with *out, or -1 with why.
int conf_value_parse(
    const conf_key *k, const char *text, bool loose, conf_val *out, char *why, size_t whylen)
{
	char     list[160];
	char    *end;
	uint64_t u;

	memset(out, 0, sizeof(*out));
	switch (k->type) {
	case CONF_T_BOOL:
		if (parse_bool(text, loose, &out->b) != 0) {
			snprintf(
			    why, whylen, "expected a boolean (true or false), got \"%.64s\"", text);
			return -1;
		}
		return 0;
	case CONF_T_INT:
		errno = 0;
		if (!ascii_isdigit((unsigned char)text[0])
		    && !(text[0] == '-' && ascii_isdigit((unsigned char)text[1]))) {
			snprintf(why, whylen, "expected an integer, got \"%.64s\"", text);
			return -1;
		}
		out->i = ascii_strtoll(text, &end);
		if (*end != '\0') {
			snprintf(why, whylen, "expected an integer, got \"%.64s\"", text);
			return -1;
		}
		if (errno == ERANGE) {
			snprintf(why, whylen, "%.64s is out of range", text);
			return -1;
		}
		return check_range(k, (double)out->i, text, why, whylen);
	case CONF_T_FLOAT:
		errno  = 0;
		out->d = ascii_strtod(text, &end);
		if (end == text || *end != '\0' || ascii_isspace((unsigned char)text[0])
		    || errno == ERANGE || !isfinite(out->d)) {
			snprintf(why, whylen, "expected a number, got \"%.64s\"", text);
			return -1;
		}
		return check_range(k, out->d, text, why, whylen);
	case CONF_T_STR:
		if ((out->s = strdup(text)) == NULL) {
			snprintf(why, whylen, "out of memory");
			return -1;
		}
		return 0;
	case CONF_T_ENUM:
		if ((out->i = word_index(k->words, text, strlen(text))) < 0) {
			words_msg(k, list, sizeof(list));
			snprintf(why, whylen, "unknown value \"%.64s\" (expected one of: %s)", text,
			    list);
			return -1;
		}
		return 0;
	case CONF_T_FLAGS:
		out->i = 0;
		for (const char *w = text;;) {
			size_t n = ascii_cspn(w, ",");
			size_t b = 0;
			int    idx;
			while (b < n && ascii_isspace((unsigned char)w[b])) {
				b++;
			}
			while (n > b && ascii_isspace((unsigned char)w[n - 1])) {
				n--;
			}
			if ((idx = word_index(k->words, w + b, n - b)) < 0) {
				words_msg(k, list, sizeof(list));
				snprintf(why, whylen,
				    "unknown value \"%.*s\" (expected any of: %s)",
				    (int)(n - b > 64 ? 64 : n - b), w + b, list);
				return -1;
			}
			out->i |= (int64_t)1 << idx;
			w += ascii_cspn(w, ",");
			if (*w == '\0') {
				break;
			}
			w++;
		}
		return 0;
	case CONF_T_SIZE:
		if (text[0] == '-') {
			snprintf(why, whylen, "a size must not be negative, got \"%.64s\"", text);
			return -1;
		}
		if (conf_parse_size(text, &u) != 0) {
			snprintf(why, whylen,
			    "expected a size such as 512KB or 10MB, got \"%.64s\"", text);
			return -1;
		}
		out->u = u;
		return check_range(k, (double)u, text, why, whylen);
	case CONF_T_DUR_S:
	case CONF_T_DUR_MS:
		if (text[0] == '-') {
			snprintf(
			    why, whylen, "a duration must not be negative, got \"%.64s\"", text);
			return -1;
		}
		if (conf_parse_duration(text, k->type == CONF_T_DUR_S ? 1000 : 1, &u) != 0) {
			snprintf(why, whylen,
			    "expected a duration such as 30s or 500ms, got \"%.64s\"", text);
			return -1;
		}
		if (k->type == CONF_T_DUR_S) {
			if (u % 1000 != 0) {
				snprintf(why, whylen, "\"%.64s\" is not a whole number of seconds",
				    text);
				return -1;
			}
			u /= 1000;
		}
		out->u = u;
		return check_range(k, (double)u, text, why, whylen);
	default:
		snprintf(
		    why, whylen, "expected %s", k->type == CONF_T_ARRAY ? "an array" : "an object");
		return -1;
	}
}

// Stores v into the field of k inside base.
void conf_value_store(const conf_key *k, void *base, conf_val *v)
{
	char   *dst = (char *)base + k->off;
	int64_t iv = (k->type == CONF_T_SIZE || k->type == CONF_T_DUR_S || k->type == CONF_T_DUR_MS)
	    ? (int64_t)v->u
	    : v->i;

	switch (k->store) {
	case CONF_ST_BOOL:
		*(bool *)dst = v->b;
		break;
	case CONF_ST_INT:
		*(int *)dst = (int)iv;
		break;
	case CONF_ST_U32:
		*(uint32_t *)dst = (uint32_t)iv;
		break;
	case CONF_ST_U64:
		*(uint64_t *)dst = (uint64_t)iv;
		break;
	case CONF_ST_DOUBLE:
		*(double *)dst = v->d;
		break;
	case CONF_ST_STR:
		free(*(char **)dst);
		*(char **)dst = v->s;
		v->s          = NULL;
		break;
	default:
		break;
	}
	free(v->s);
	v->s = NULL;
}
