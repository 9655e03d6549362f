// Locale-free ASCII helpers for the configuration and the command line, in
// place of <ctype.h>, strcasecmp(), strncasecmp(), strcspn(), strstr(),
// strtoll() and (for short decimals) strtod() on the startup path.
// Configuration words are ASCII whatever the locale, and each of those libc
// functions lives apart from the rest of what the broker calls (the C
// locale's case tables, SSE4.2 and EVEX variants, strtod's power tables):
// the kernel maps a shared library in 64 KiB windows around every page
// touched, so each call made at startup kept another 64 KiB of libc
// resident.
#ifndef NMQ_CONF_ASCII_H
#define NMQ_CONF_ASCII_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline bool ascii_isdigit(int c)
{
	return c >= '0' && c <= '9';
}

static inline bool ascii_isalpha(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static inline bool ascii_isalnum(int c)
{
	return ascii_isdigit(c) || ascii_isalpha(c);
}

static inline bool ascii_isxdigit(int c)
{
	return ascii_isdigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Space, tab, newline, vertical tab, form feed, carriage return: isspace()
// in the C locale.
static inline bool ascii_isspace(int c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

// Returns c in lower case if it is an ASCII capital, else c.
static inline int ascii_lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

// Returns true when a and b are equal ignoring ASCII case.
static inline bool ascii_ieq(const char *a, const char *b)
{
	for (;; a++, b++) {
		int ca = ascii_lower((unsigned char)*a);
		if (ca != ascii_lower((unsigned char)*b)) {
			return false;
		}
		if (ca == '\0') {
			return true;
		}
	}
}

// Returns true when the first n characters of a and b (fewer if both end
// together) are equal ignoring ASCII case, as strncasecmp() == 0.
static inline bool ascii_ieqn(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int ca = ascii_lower((unsigned char)a[i]);
		if (ca != ascii_lower((unsigned char)b[i])) {
			return false;
		}
		if (ca == '\0') {
			return true;
		}
	}
	return true;
}

// Returns the length of the leading part of s that holds none of the
// characters of reject, as strcspn().
static inline size_t ascii_cspn(const char *s, const char *reject)
{
	size_t n = 0;
	for (; s[n] != '\0'; n++) {
		for (const char *r = reject; *r != '\0'; r++) {
			if (s[n] == *r) {
				return n;
			}
		}
	}
	return n;
}

// Returns the first occurrence of needle (not empty) in s, or NULL, as
// strstr().
static inline const char *ascii_strstr(const char *s, const char *needle)
{
	for (; *s != '\0'; s++) {
		size_t i = 0;
		while (needle[i] != '\0' && s[i] == needle[i]) {
			i++;
		}
		if (needle[i] == '\0') {
			return s;
		}
	}
	return NULL;
}

// strtoll(s, end, 10): leading white space, an optional sign, decimal
// digits; on overflow LLONG_MAX or LLONG_MIN with errno = ERANGE; *end is
// s when there is no digit.
static inline long long ascii_strtoll(const char *s, char **end)
{
	const char        *p   = s;
	bool               neg = false;
	bool               big = false;
	unsigned long long v   = 0;

	while (ascii_isspace((unsigned char)*p)) {
		p++;
	}
	if (*p == '+' || *p == '-') {
		neg = *p == '-';
		p++;
	}
	if (!ascii_isdigit((unsigned char)*p)) {
		if (end != NULL) {
			*end = (char *)s;
		}
		return 0;
	}
	for (; ascii_isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (ULLONG_MAX - d) / 10) {
			big = true;
		} else {
			v = v * 10 + d;
		}
	}
	if (end != NULL) {
		*end = (char *)p;
	}
	unsigned long long limit = neg ? (unsigned long long)LLONG_MAX + 1 : LLONG_MAX;
	if (big || v > limit) {
		errno = ERANGE;
		return neg ? LLONG_MIN : LLONG_MAX;
	}
	return neg ? -(long long)(v - 1) - 1 : (long long)v;
}

// strtod() with a fast path for what configuration files hold nearly
// always: an optionally signed decimal number, with or without a fraction,
// of at most 15 digits in all. Its digits form an integer m < 2^53 and its
// fraction has k <= 15 digits, so m and 10^k are exact doubles and m / 10^k
// is one correctly rounded division, the same double strtod() returns.
// Anything else (exponents, hex, inf, nan, leading blanks, more digits)
// goes to strtod(), so the result and *end are always strtod()'s. errno is
// only set by strtod().
static inline double ascii_strtod(const char *s, char **end)
{
	static const double p10[]  = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
		 1e12, 1e13, 1e14, 1e15 };
	const char         *p      = s;
	bool                neg    = false;
	uint64_t            m      = 0;
	int                 digits = 0;
	int                 frac   = 0;

	if (*p == '+' || *p == '-') {
		neg = *p == '-';
		p++;
	}
	for (; ascii_isdigit((unsigned char)*p); p++, digits++) {
		m = m * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		for (p++; ascii_isdigit((unsigned char)*p); p++, digits++, frac++) {
			m = m * 10 + (uint64_t)(*p - '0');
		}
	}
	if (digits == 0 || digits > 15 || *p == 'e' || *p == 'E' || *p == 'x' || *p == 'X') {
		return strtod(s, end);
	}
	if (end != NULL) {
		*end = (char *)p;
	}
	double v = (double)m / p10[frac];
	return neg ? -v : v;
}

#endif // NMQ_CONF_ASCII_H
