// HTTP/1.1 message parsing (RFC 9110, RFC 9112). See http_parse.h.
#include "src/http/http_parse.h"

#include <string.h>

// RFC 9110 tchar: the characters of a token (method, header name).
static bool is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
		return true;
	}
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

// Field-value bytes: visible ASCII, space, tab and obs-text.
static bool is_vchar_ws(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if (c >= 'a' && c <= 'f') {
		return c - 'a' + 10;
	}
	if (c >= 'A' && c <= 'F') {
		return c - 'A' + 10;
	}
	return -1;
}

static unsigned char lower(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

bool http_str_ieq(http_str s, const char *lit)
{
	size_t n = strlen(lit);
	if (s.n != n) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (lower((unsigned char)s.p[i]) != lower((unsigned char)lit[i])) {
			return false;
		}
	}
	return true;
}

bool http_str_eq(http_str s, const char *lit)
{
	size_t n = strlen(lit);
	return s.n == n && (n == 0 || memcmp(s.p, lit, n) == 0);
}

const http_str *http_msg_header(const http_msg *m, const char *name)
{
	for (size_t i = 0; i < m->nheaders; i++) {
		if (http_str_ieq(m->headers[i].name, name)) {
			return &m->headers[i].value;
		}
	}
	return NULL;
}

// Finds the end of the line starting at buf[off]: returns the index of its
// '\n' and sets *content_end to the index after the line's content (before
// an optional '\r'), or returns -1 if there is no '\n' before len.
static long line_end(const char *buf, size_t len, size_t off, size_t *content_end)
{
	if (off >= len) {
		return -1;
	}
	const char *nl = memchr(buf + off, '\n', len - off);
	if (nl == NULL) {
		return -1;
	}
	size_t e     = (size_t)(nl - buf);
	*content_end = (e > off && buf[e - 1] == '\r') ? e - 1 : e;
	return (long)e;
}

// "HTTP/1.x" at p[0..8): returns x (0 or 1), -2 for another HTTP version,
// -1 if it is not an HTTP version at all.
static int parse_version(const char *p, size_t n)
{
	if (n != 8 || memcmp(p, "HTTP/", 5) != 0 || p[6] != '.' || p[5] < '0' || p[5] > '9'
	    || p[7] < '0' || p[7] > '9') {
		return -1;
	}
	if (p[5] != '1') {
		return -2;
	}
	return p[7] - '0';
}

// Parses one Content-Length value. Returns the length or -1.
static int64_t parse_length(http_str v)
{
	if (v.n == 0 || v.n > 18) {
		return -1;
	}
	int64_t n = 0;
	for (size_t i = 0; i < v.n; i++) {
		if (v.p[i] < '0' || v.p[i] > '9') {
			return -1;
		}
		n = n * 10 + (v.p[i] - '0');
	}
	return n;
}

// True if the comma-separated list v contains the token tok.
static bool list_has(http_str v, const char *tok)
{
	size_t i = 0;
	while (i < v.n) {
		while (i < v.n && (v.p[i] == ' ' || v.p[i] == '\t' || v.p[i] == ',')) {
			i++;
		}
		size_t s = i;
		while (i < v.n && v.p[i] != ',') {
			i++;
		}
		size_t e = i;
		while (e > s && (v.p[e - 1] == ' ' || v.p[e - 1] == '\t')) {
			e--;
		}
		http_str t = { v.p + s, e - s };
		if (e > s && http_str_ieq(t, tok)) {
			return true;
		}
	}
	return false;
}

// Parses the header lines from buf[off] to the empty line that ends the
// head, and the framing they imply. Returns 0, or the status of the reject
// (bad is the status for malformed input: 400 for requests, 502 for
// responses; lim is the status for too many headers).
static int parse_headers(const char *buf, size_t len, size_t off, http_msg *m, int bad, int lim)
{
	bool has_te = false;
	for (;;) {
		size_t ce;
		long   e = line_end(buf, len, off, &ce);
		if (e < 0) {
			return bad; // cannot happen: the caller found the empty line
		}
		if (ce == off) {
			m->head_len = (size_t)e + 1;
			break;
		}
		if (buf[off] == ' ' || buf[off] == '\t') {
			return bad; // obsolete line folding
		}
		size_t i = off;
		while (i < ce && is_tchar((unsigned char)buf[i])) {
			i++;
		}
		if (i == off || i >= ce || buf[i] != ':') {
			return bad; // empty name, bad name byte, or space before ':'
		}
		http_header h;
		h.name.p = buf + off;
		h.name.n = i - off;
		i++;
		while (i < ce && (buf[i] == ' ' || buf[i] == '\t')) {
			i++;
		}
		size_t ve = ce;
		while (ve > i && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) {
			ve--;
		}
		for (size_t k = i; k < ve; k++) {
			if (!is_vchar_ws((unsigned char)buf[k])) {
				return bad; // NUL, bare CR or another control byte
			}
		}
		h.value.p = buf + i;
		h.value.n = ve - i;
		if (m->nheaders == HTTP_MAX_HEADERS) {
			return lim;
		}
		m->headers[m->nheaders++] = h;

		if (http_str_ieq(h.name, "content-length")) {
			int64_t n = parse_length(h.value);
			if (n < 0 || (m->content_length >= 0 && m->content_length != n)) {
				return bad;
			}
			m->content_length = n;
		} else if (http_str_ieq(h.name, "transfer-encoding")) {
			if (has_te || !http_str_ieq(h.value, "chunked")) {
				return bad == 400 ? 501 : bad;
			}
			has_te     = true;
			m->chunked = true;
		} else if (http_str_ieq(h.name, "connection")) {
			if (list_has(h.value, "close")) {
				m->keep_alive = false;
			} else if (list_has(h.value, "keep-alive")) {
				m->keep_alive = true;
			}
		}
		off = (size_t)e + 1;
	}
	if (m->chunked && m->content_length >= 0) {
		return bad; // request smuggling shape: refuse it
	}
	return 0;
}

// Looks for the empty line that ends a head starting at buf[off]. Returns
// HTTP_PARSE_OK if it is within buf[0..len) and within max_head bytes,
// HTTP_PARSE_INCOMPLETE if more bytes may complete it, HTTP_PARSE_ERROR if
// the head already exceeds max_head.
static http_parse_rc find_head_end(const char *buf, size_t len, size_t off, size_t max_head)
{
	size_t lim = len < max_head ? len : max_head;
	while (off < lim) {
		const char *nl = memchr(buf + off, '\n', lim - off);
		if (nl == NULL) {
			break;
		}
		size_t e = (size_t)(nl - buf);
		if (e == off || (e == off + 1 && buf[off] == '\r')) {
			return HTTP_PARSE_OK;
		}
		off = e + 1;
	}
	return len >= max_head ? HTTP_PARSE_ERROR : HTTP_PARSE_INCOMPLETE;
}

static void msg_init(http_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->content_length = -1;
}

http_parse_rc http_parse_request(
    const char *buf, size_t len, size_t max_head, http_msg *m, int *status)
{
	msg_init(m);
	*status    = 400;
	size_t off = 0;
	// RFC 9112 2.2: ignore at least one empty line before the request line.
	while (off < len && off < 4 && (buf[off] == '\r' || buf[off] == '\n')) {
		off++;
	}
	size_t        ce;
	long          e  = line_end(buf, len < max_head ? len : max_head, off, &ce);
	http_parse_rc rc = HTTP_PARSE_OK;
	if (e < 0) {
		if (len >= max_head) {
			*status = 414;
			return HTTP_PARSE_ERROR;
		}
		rc = HTTP_PARSE_INCOMPLETE; // still check what we have below
		ce = len;
	}
	// Request line: method SP target SP version.
	size_t i = off;
	while (i < ce && is_tchar((unsigned char)buf[i])) {
		i++;
	}
	if (i < ce && buf[i] != ' ') {
		return HTTP_PARSE_ERROR;
	}
	if (rc == HTTP_PARSE_INCOMPLETE) {
		return rc; // the method so far is fine
	}
	if (i == off || i >= ce) {
		return HTTP_PARSE_ERROR;
	}
	m->method.p = buf + off;
	m->method.n = i - off;
	size_t ts   = ++i;
	while (i < ce && (unsigned char)buf[i] > 0x20 && (unsigned char)buf[i] < 0x7f) {
		i++;
	}
	if (i == ts || i >= ce || buf[i] != ' ') {
		return HTTP_PARSE_ERROR;
	}
	m->target.p = buf + ts;
	m->target.n = i - ts;
	if (buf[ts] != '/' && !(m->target.n == 1 && buf[ts] == '*')) {
		return HTTP_PARSE_ERROR; // origin-form only (and OPTIONS *)
	}
	const char *q = memchr(m->target.p, '?', m->target.n);
	m->path.p     = m->target.p;
	m->path.n     = q != NULL ? (size_t)(q - m->target.p) : m->target.n;
	if (q != NULL) {
		m->query.p = q + 1;
		m->query.n = m->target.n - m->path.n - 1;
	}
	int v = parse_version(buf + i + 1, ce - i - 1);
	if (v < 0) {
		*status = v == -2 ? 505 : 400;
		return HTTP_PARSE_ERROR;
	}
	m->version_minor = v;
	m->keep_alive    = v >= 1;

	rc = find_head_end(buf, len, (size_t)e + 1, max_head);
	if (rc != HTTP_PARSE_OK) {
		*status = 431;
		return rc;
	}
	int st = parse_headers(buf, len, (size_t)e + 1, m, 400, 431);
	if (st != 0) {
		*status = st;
		return HTTP_PARSE_ERROR;
	}
	if (v >= 1 && http_msg_header(m, "host") == NULL) {
		return HTTP_PARSE_ERROR; // RFC 9112 3.2: Host is required in 1.1
	}
	*status = 0;
	return HTTP_PARSE_OK;
}

http_parse_rc http_parse_response(
    const char *buf, size_t len, size_t max_head, http_msg *m, int *status)
{
	msg_init(m);
	*status = 502;
	size_t ce;
	long   e = line_end(buf, len < max_head ? len : max_head, 0, &ce);
	if (e < 0) {
		if (len >= max_head) {
			return HTTP_PARSE_ERROR;
		}
		// Reject early if what we have cannot be a status line.
		size_t n = len < 5 ? len : 5;
		return memcmp(buf, "HTTP/", n) == 0 ? HTTP_PARSE_INCOMPLETE : HTTP_PARSE_ERROR;
	}
	// Status line: version SP 3DIGIT [SP reason].
	if (ce < 12 || buf[8] != ' ') {
		return HTTP_PARSE_ERROR;
	}
	int v = parse_version(buf, 8);
	if (v < 0) {
		return HTTP_PARSE_ERROR;
	}
	int code = 0;
	for (int k = 9; k < 12; k++) {
		if (buf[k] < '0' || buf[k] > '9') {
			return HTTP_PARSE_ERROR;
		}
		code = code * 10 + (buf[k] - '0');
	}
	if (code < 100 || (ce > 12 && buf[12] != ' ')) {
		return HTTP_PARSE_ERROR;
	}
	for (size_t k = 13; k < ce; k++) {
		if (!is_vchar_ws((unsigned char)buf[k])) {
			return HTTP_PARSE_ERROR;
		}
	}
	m->status        = code;
	m->reason.p      = buf + (ce > 12 ? 13 : 12);
	m->reason.n      = ce > 12 ? ce - 13 : 0;
	m->version_minor = v;
	m->keep_alive    = v >= 1;

	http_parse_rc rc = find_head_end(buf, len, (size_t)e + 1, max_head);
	if (rc != HTTP_PARSE_OK) {
		return rc;
	}
	if (parse_headers(buf, len, (size_t)e + 1, m, 502, 502) != 0) {
		return HTTP_PARSE_ERROR;
	}
	*status = 0;
	return HTTP_PARSE_OK;
}

// One pass over a chunked body. With out == NULL it only validates and
// measures; otherwise it copies the chunk data to out (which may alias buf:
// the write position never passes the read position).
static http_parse_rc chunked_pass(
    const char *buf, size_t len, size_t max_body, char *out, size_t *body_len, size_t *consumed)
{
	size_t off = 0;
	size_t n   = 0;
	for (;;) {
		// chunk-size [; ext] CRLF
		size_t   i    = off;
		uint64_t size = 0;
		while (i < len && hexval((unsigned char)buf[i]) >= 0) {
			if (i - off >= 15) {
				return HTTP_PARSE_ERROR;
			}
			size = size * 16 + (uint64_t)hexval((unsigned char)buf[i]);
			i++;
		}
		if (i == len) {
			return i - off > 15 ? HTTP_PARSE_ERROR : HTTP_PARSE_INCOMPLETE;
		}
		if (i == off) {
			return HTTP_PARSE_ERROR;
		}
		size_t ce;
		long   e = line_end(buf, len, i, &ce);
		if (e < 0) {
			return (len - i > 4096) ? HTTP_PARSE_ERROR : HTTP_PARSE_INCOMPLETE;
		}
		if ((size_t)e - i > 4096
		    || (ce > i && buf[i] != ';' && buf[i] != ' ' && buf[i] != '\t')) {
			return HTTP_PARSE_ERROR;
		}
		for (size_t k = i; k < ce; k++) {
			if (!is_vchar_ws((unsigned char)buf[k])) {
				return HTTP_PARSE_ERROR;
			}
		}
		off = (size_t)e + 1;
		if (size == 0) {
			break;
		}
		if (size > max_body - n) {
			return HTTP_PARSE_ERROR;
		}
		if (len - off < size + 1) {
			return HTTP_PARSE_INCOMPLETE;
		}
		if (out != NULL) {
			memmove(out + n, buf + off, (size_t)size);
		}
		n += (size_t)size;
		off += (size_t)size;
		// CRLF after the data (LF alone tolerated).
		if (buf[off] == '\r') {
			if (len - off < 2) {
				return HTTP_PARSE_INCOMPLETE;
			}
			off++;
		}
		if (buf[off] != '\n') {
			return HTTP_PARSE_ERROR;
		}
		off++;
	}
	// Trailer fields, then the empty line.
	size_t lines = 0;
	for (;;) {
		size_t ce;
		long   e = line_end(buf, len, off, &ce);
		if (e < 0) {
			return (len - off > 8192) ? HTTP_PARSE_ERROR : HTTP_PARSE_INCOMPLETE;
		}
		if (ce == off) {
			off = (size_t)e + 1;
			break;
		}
		if (++lines > HTTP_MAX_HEADERS || (size_t)e - off > 8192) {
			return HTTP_PARSE_ERROR;
		}
		off = (size_t)e + 1;
	}
	*body_len = n;
	*consumed = off;
	return HTTP_PARSE_OK;
}

http_parse_rc http_chunked_decode(
    char *buf, size_t len, size_t max_body, size_t *body_len, size_t *consumed)
{
	size_t        n, used;
	http_parse_rc rc = chunked_pass(buf, len, max_body, NULL, &n, &used);
	if (rc != HTTP_PARSE_OK) {
		return rc;
	}
	(void)chunked_pass(buf, len, max_body, buf, &n, &used);
	*body_len = n;
	*consumed = used;
	return HTTP_PARSE_OK;
}

long http_pct_decode(const char *in, size_t n, char *out, size_t cap, bool plus_space)
{
	size_t o = 0;
	if (cap == 0) {
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c == '%') {
			if (n - i < 3) {
				return -1;
			}
			int hi = hexval((unsigned char)in[i + 1]);
			int lo = hexval((unsigned char)in[i + 2]);
			if (hi < 0 || lo < 0) {
				return -1;
			}
			c = (unsigned char)(hi * 16 + lo);
			if (c == 0) {
				return -1;
			}
			i += 2;
		} else if (c == '+' && plus_space) {
			c = ' ';
		} else if (c == 0) {
			return -1;
		}
		if (o + 1 >= cap) {
			return -1;
		}
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return (long)o;
}

bool http_query_next(http_str query, size_t *pos, http_str *key, http_str *value)
{
	size_t i = *pos;
	while (i < query.n) {
		size_t s = i;
		while (i < query.n && query.p[i] != '&') {
			i++;
		}
		size_t e = i;
		if (i < query.n) {
			i++; // skip '&'
		}
		if (e == s) {
			continue;
		}
		const char *eq = memchr(query.p + s, '=', e - s);
		key->p         = query.p + s;
		key->n         = eq != NULL ? (size_t)(eq - key->p) : e - s;
		value->p       = eq != NULL ? eq + 1 : query.p + e;
		value->n       = eq != NULL ? (size_t)(query.p + e - value->p) : 0;
		*pos           = i;
		return true;
	}
	*pos = i;
	return false;
}

int http_query_get(http_str query, const char *key, char *out, size_t cap)
{
	size_t   pos = 0;
	http_str k, v;
	char     kbuf[64];
	while (http_query_next(query, &pos, &k, &v)) {
		long kn = http_pct_decode(k.p, k.n, kbuf, sizeof(kbuf), true);
		if (kn < 0) {
			return -1;
		}
		if (strcmp(kbuf, key) != 0) {
			continue;
		}
		return http_pct_decode(v.p, v.n, out, cap, true) < 0 ? -1 : 1;
	}
	return 0;
}
