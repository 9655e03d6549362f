// The HOCON reader: a bounded recursive-descent parser that builds a cJSON
// tree and a side table of node origins. See hocon.h for the accepted
// language and the bounds.
//
// Two hash tables live beside the tree:
// - locs: node pointer -> (origin, line, column, flags, raw text);
// - kids: (object pointer, key) -> member, so that "later assignment
//   wins" and merging stay linear in the size of the input.
// Nodes replaced by a later assignment are not freed but moved to a
// graveyard array that lives as long as the document, so that no pointer in
// either table can ever dangle or be reused while the document exists.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/conf/ascii.h"
#include "src/conf/hocon.h"

typedef struct loc_entry {
	const cJSON *node; // NULL: empty slot
	int          origin;
	int          line;
	int          col;
	unsigned     flags;
	long         seq; // creation order
	char        *raw;
} loc_entry;

typedef struct kid_entry {
	const cJSON *parent; // NULL: empty slot; &kid_tomb: removed
	cJSON       *child; // child->string is the key
} kid_entry;

static const cJSON kid_tomb;

struct hocon_doc {
	cJSON     *root;
	cJSON     *graveyard; // array of replaced or removed nodes
	char     **origins;
	int        n_origins;
	int        cap_origins;
	loc_entry *locs;
	size_t     loc_cap; // power of two
	size_t     loc_n;
	kid_entry *kids;
	size_t     kid_cap; // power of two
	size_t     kid_n; // used slots, tombstones included
	long       seq;
	int        n_syntax;
	bool       stop; // too many errors, too deep, or out of memory
	int        n_files;
	char      *open[HOCON_MAX_INCLUDE_DEPTH + 2]; // real paths being read
	int        n_open;
};

typedef struct parser {
	hocon_doc   *doc;
	conf_errors *errs;
	const char  *text;
	const char  *p;
	const char  *end;
	const char  *bol; // beginning of the current line
	int          origin;
	int          line;
	const char  *dir; // for relative includes, NULL = working directory
	int          depth;
	int          incl;
} parser;

static int parse_object_body(parser *ps, cJSON *obj, int open_line, int open_col, bool closing);
static int parse_value(parser *ps, cJSON **out);

// ---------------------------------------------------------------------------
// Hash tables.

// Returns a hash of a pointer.
static size_t ptr_hash(const void *p)
{
	uint64_t h = (uint64_t)(uintptr_t)p;

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (size_t)h;
}

// Returns a hash of an (object, key) pair.
static size_t kid_hash(const cJSON *parent, const char *key)
{
	uint64_t h = 1469598103934665603ULL ^ (uint64_t)ptr_hash(parent);

	for (; *key != '\0'; key++) {
		h ^= (unsigned char)*key;
		h *= 1099511628211ULL;
	}
	return (size_t)(h ^ (h >> 29));
}

// Returns the slot of node in the location table (found or empty).
static loc_entry *loc_slot(loc_entry *tab, size_t cap, const cJSON *node)
{
	size_t i = ptr_hash(node) & (cap - 1);

	while (tab[i].node != NULL && tab[i].node != node) {
		i = (i + 1) & (cap - 1);
	}
	return &tab[i];
}

// Doubles the location table. Returns 0, or -1 when memory runs out.
static int loc_grow(hocon_doc *doc)
{
	size_t     cap = doc->loc_cap == 0 ? 256 : doc->loc_cap * 2;
	loc_entry *tab = calloc(cap, sizeof(*tab));

	if (tab == NULL) {
		return -1;
	}
	for (size_t i = 0; i < doc->loc_cap; i++) {
		if (doc->locs[i].node != NULL) {
			*loc_slot(tab, cap, doc->locs[i].node) = doc->locs[i];
		}
	}
	free(doc->locs);
	doc->locs    = tab;
	doc->loc_cap = cap;
	return 0;
}

// Records the origin of node, replacing an older record of the same
// pointer. Returns 0, or -1 when memory runs out.
int hocon_set_loc(hocon_doc *doc, const cJSON *node, int origin, int line, int col, unsigned flags,
    const char *raw)
{
	loc_entry *e;
	char      *copy = NULL;

	if (raw != NULL && (copy = strdup(raw)) == NULL) {
		return -1;
	}
	if ((doc->loc_n + 1) * 2 > doc->loc_cap && loc_grow(doc) != 0) {
		free(copy);
		return -1;
	}
	e = loc_slot(doc->locs, doc->loc_cap, node);
	if (e->node == NULL) {
		doc->loc_n++;
	} else {
		free(e->raw);
	}
	e->node   = node;
	e->origin = origin;
	e->line   = line;
	e->col    = col;
	e->flags  = flags;
	e->seq    = doc->seq++;
	e->raw    = copy;
	return 0;
}

// Returns the location record of node, or NULL.
static const loc_entry *loc_get(const hocon_doc *doc, const cJSON *node)
{
	const loc_entry *e;

	if (doc->loc_cap == 0 || node == NULL) {
		return NULL;
	}
	e = loc_slot(doc->locs, doc->loc_cap, node);
	return e->node == NULL ? NULL : e;
}

// Returns the member key of obj, or NULL.
static cJSON *kid_get(const hocon_doc *doc, const cJSON *obj, const char *key)
{
	size_t i;

	if (doc->kid_cap == 0) {
		return NULL;
	}
	i = kid_hash(obj, key) & (doc->kid_cap - 1);
	while (doc->kids[i].parent != NULL) {
		if (doc->kids[i].parent == obj && strcmp(doc->kids[i].child->string, key) == 0) {
			return doc->kids[i].child;
		}
		i = (i + 1) & (doc->kid_cap - 1);
	}
	return NULL;
}

// Inserts (obj, child) into the member table of size cap.
static void kid_insert(kid_entry *tab, size_t cap, const cJSON *obj, cJSON *child)
{
	size_t i = kid_hash(obj, child->string) & (cap - 1);

	while (tab[i].parent != NULL) {
		i = (i + 1) & (cap - 1);
	}
	tab[i].parent = obj;
	tab[i].child  = child;
}

// Doubles the member table, dropping tombstones. Returns 0 or -1 (memory).
static int kid_grow(hocon_doc *doc)
{
	size_t     cap = doc->kid_cap == 0 ? 256 : doc->kid_cap * 2;
	kid_entry *tab = calloc(cap, sizeof(*tab));
	size_t     n   = 0;

	if (tab == NULL) {
		return -1;
	}
	for (size_t i = 0; i < doc->kid_cap; i++) {
		if (doc->kids[i].parent != NULL && doc->kids[i].parent != &kid_tomb) {
			kid_insert(tab, cap, doc->kids[i].parent, doc->kids[i].child);
			n++;
		}
	}
	free(doc->kids);
	doc->kids    = tab;
	doc->kid_cap = cap;
	doc->kid_n   = n;
	return 0;
}

// Marks the entry of (obj, key) as removed, if there is one.
static void kid_remove(hocon_doc *doc, const cJSON *obj, const char *key)
{
	size_t i;

	if (doc->kid_cap == 0) {
		return;
	}
	i = kid_hash(obj, key) & (doc->kid_cap - 1);
	while (doc->kids[i].parent != NULL) {
		if (doc->kids[i].parent == obj && strcmp(doc->kids[i].child->string, key) == 0) {
			doc->kids[i].parent = &kid_tomb;
			return;
		}
		i = (i + 1) & (doc->kid_cap - 1);
	}
}

// Moves node (already detached) to the graveyard.
static void bury(hocon_doc *doc, cJSON *node)
{
	cJSON_AddItemToArray(doc->graveyard, node);
}

// Stores item as member key of obj, replacing (and burying) an older member
// of that name. Returns item, or NULL when item is NULL or memory runs out
// (item is freed if it could not be attached).
static cJSON *obj_put(hocon_doc *doc, cJSON *obj, const char *key, cJSON *item)
{
	cJSON *old;

	if (item == NULL) {
		return NULL;
	}
	if ((old = kid_get(doc, obj, key)) != NULL) {
		kid_remove(doc, obj, key);
		cJSON_DetachItemViaPointer(obj, old);
		bury(doc, old);
	}
	if (!cJSON_AddItemToObject(obj, key, item)) {
		cJSON_Delete(item);
		return NULL;
	}
	if ((doc->kid_n + 1) * 2 > doc->kid_cap && kid_grow(doc) != 0) {
		return NULL;
	}
	kid_insert(doc->kids, doc->kid_cap, obj, item);
	doc->kid_n++;
	return item;
}

// ---------------------------------------------------------------------------
// Documents and origins.

// Returns a new empty document, or NULL when memory runs out.
hocon_doc *hocon_doc_alloc(void)
{
	hocon_doc *doc = calloc(1, sizeof(*doc));

	if (doc == NULL) {
		return NULL;
	}
	doc->root      = cJSON_CreateObject();
	doc->graveyard = cJSON_CreateArray();
	if (doc->root == NULL || doc->graveyard == NULL) {
		hocon_doc_free(doc);
		return NULL;
	}
	return doc;
}

// Frees the document and everything it owns.
void hocon_doc_free(hocon_doc *doc)
{
	if (doc == NULL) {
		return;
	}
	cJSON_Delete(doc->root);
	cJSON_Delete(doc->graveyard);
	for (int i = 0; i < doc->n_origins; i++) {
		free(doc->origins[i]);
	}
	free(doc->origins);
	for (size_t i = 0; i < doc->loc_cap; i++) {
		free(doc->locs[i].raw);
	}
	free(doc->locs);
	free(doc->kids);
	for (int i = 0; i < doc->n_open; i++) {
		free(doc->open[i]);
	}
	free(doc);
}

// Returns the root object; the document keeps ownership.
cJSON *hocon_doc_root(hocon_doc *doc)
{
	return doc->root;
}

// Returns the number of syntax errors reported so far.
int hocon_doc_syntax_errors(const hocon_doc *doc)
{
	return doc->n_syntax;
}

// Registers an origin name. Returns its index, or -1 when memory runs out.
int hocon_origin_add(hocon_doc *doc, const char *name)
{
	char *copy;

	if (doc->n_origins == doc->cap_origins) {
		int    cap = doc->cap_origins == 0 ? 8 : doc->cap_origins * 2;
		char **v   = realloc(doc->origins, (size_t)cap * sizeof(*v));

		if (v == NULL) {
			return -1;
		}
		doc->origins     = v;
		doc->cap_origins = cap;
	}
	if ((copy = strdup(name)) == NULL) {
		return -1;
	}
	doc->origins[doc->n_origins] = copy;
	return doc->n_origins++;
}

// Returns the name of origin i, or "?".
const char *hocon_origin_name(const hocon_doc *doc, int i)
{
	return i >= 0 && i < doc->n_origins ? doc->origins[i] : "?";
}

// Looks up the origin of node. Returns true when known.
bool hocon_loc(const hocon_doc *doc, const cJSON *node, const char **file, int *line, int *col,
    unsigned *flags)
{
	const loc_entry *e = loc_get(doc, node);

	if (e == NULL) {
		return false;
	}
	if (file != NULL) {
		*file = hocon_origin_name(doc, e->origin);
	}
	if (line != NULL) {
		*line = e->line;
	}
	if (col != NULL) {
		*col = e->col;
	}
	if (flags != NULL) {
		*flags = e->flags;
	}
	return true;
}

// Returns the creation order of node, or -1 when it is unknown.
long hocon_seq(const hocon_doc *doc, const cJSON *node)
{
	const loc_entry *e = loc_get(doc, node);

	return e == NULL ? -1 : e->seq;
}

// Returns the source text of an unquoted scalar, or NULL.
const char *hocon_raw(const hocon_doc *doc, const cJSON *node)
{
	const loc_entry *e = loc_get(doc, node);

	return e == NULL ? NULL : e->raw;
}

// ---------------------------------------------------------------------------
// Path helpers for callers that add values (environment, command line).

// Records origin/line for node and every descendant that has no origin yet.
// Returns 0, or -1 when memory runs out.
static int set_loc_tree(
    hocon_doc *doc, const cJSON *node, int origin, int line, unsigned flags, int depth)
{
	if (depth > HOCON_MAX_DEPTH) {
		return 0;
	}
	if (loc_get(doc, node) == NULL
	    && hocon_set_loc(doc, node, origin, line, 0, flags, NULL) != 0) {
		return -1;
	}
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		if (set_loc_tree(doc, c, origin, line, flags, depth + 1) != 0) {
			return -1;
		}
	}
	return 0;
}

// Splits the next segment of a dotted path into seg (size segsz). Returns a
// pointer past the segment (and its dot), or NULL when the segment is empty
// or too long.
static const char *path_segment(const char *path, char *seg, size_t segsz)
{
	size_t n = ascii_cspn(path, ".");

	if (n == 0 || n >= segsz) {
		return NULL;
	}
	memcpy(seg, path, n);
	seg[n] = '\0';
	return path[n] == '.' ? path + n + 1 : path + n;
}

// Stores value at a dotted path below the root. Returns the stored node,
// or NULL (value freed) on a malformed path or when memory runs out.
cJSON *hocon_set_path(
    hocon_doc *doc, const char *path, cJSON *value, int origin, int line, unsigned flags)
{
	char        seg[256];
	cJSON      *obj = doc->root;
	const char *p   = path;

	if (value == NULL) {
		return NULL;
	}
	for (;;) {
		if ((p = path_segment(p, seg, sizeof(seg))) == NULL) {
			cJSON_Delete(value);
			return NULL;
		}
		if (*p == '\0') {
			break;
		}
		cJSON *child = kid_get(doc, obj, seg);
		if (child == NULL || !cJSON_IsObject(child)) {
			if ((child = obj_put(doc, obj, seg, cJSON_CreateObject())) == NULL
			    || hocon_set_loc(doc, child, origin, line, 0, flags, NULL) != 0) {
				cJSON_Delete(value);
				return NULL;
			}
		}
		obj = child;
	}
	if (obj_put(doc, obj, seg, value) == NULL) {
		return NULL;
	}
	if (set_loc_tree(doc, value, origin, line, flags, 0) != 0) {
		return NULL;
	}
	return value;
}

// Returns the node at a dotted path, or NULL.
cJSON *hocon_get_path(hocon_doc *doc, const char *path)
{
	char        seg[256];
	cJSON      *node = doc->root;
	const char *p    = path;

	while (*p != '\0') {
		if ((p = path_segment(p, seg, sizeof(seg))) == NULL || !cJSON_IsObject(node)) {
			return NULL;
		}
		if ((node = kid_get(doc, node, seg)) == NULL) {
			return NULL;
		}
	}
	return node;
}

// Removes the node at a dotted path (kept alive in the graveyard).
void hocon_remove_path(hocon_doc *doc, const char *path)
{
	cJSON      *node = hocon_get_path(doc, path);
	const char *dot  = strrchr(path, '.');
	cJSON      *parent;
	char        ppath[512];

	if (node == NULL) {
		return;
	}
	if (dot == NULL) {
		parent = doc->root;
	} else {
		size_t n = (size_t)(dot - path);
		if (n >= sizeof(ppath)) {
			return;
		}
		memcpy(ppath, path, n);
		ppath[n] = '\0';
		parent   = hocon_get_path(doc, ppath);
	}
	if (parent != NULL) {
		hocon_remove_child(doc, parent, node);
	}
}

// Detaches child from parent and keeps it alive until the document is
// freed.
void hocon_remove_child(hocon_doc *doc, cJSON *parent, cJSON *child)
{
	if (child->string != NULL) {
		kid_remove(doc, parent, child->string);
	}
	cJSON_DetachItemViaPointer(parent, child);
	bury(doc, child);
}

// ---------------------------------------------------------------------------
// Lexical helpers.

// Returns the current column (1-based).
static int colno(const parser *ps)
{
	return (int)(ps->p - ps->bol) + 1;
}

// Returns true at the end of the input.
static bool at_end(const parser *ps)
{
	return ps->p >= ps->end;
}

// Returns true for horizontal white space.
static bool is_ws(int c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

// Reports a syntax error at line:col. Stops the parse after too many.
static void perr(parser *ps, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void perr(parser *ps, int line, int col, const char *fmt, ...)
{
	char    buf[320];
	va_list ap;

	if (ps->doc->stop) {
		return; // already at the limit, or out of memory
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	conf_errors_add(
	    ps->errs, true, "%s:%d:%d: %s", hocon_origin_name(ps->doc, ps->origin), line, col, buf);
	if (++ps->doc->n_syntax >= HOCON_MAX_SYNTAX_ERRORS) {
		ps->doc->stop = true; // the rest of the input is not read
	}
}

// Reports that memory ran out and stops the parse.
static void oom(parser *ps)
{
	if (!ps->doc->stop) {
		conf_errors_add(ps->errs, true, "%s:%d: out of memory",
		    hocon_origin_name(ps->doc, ps->origin), ps->line);
		ps->doc->n_syntax++;
	}
	ps->doc->stop = true;
}

// Describes the byte at the current position for a message.
static const char *describe(const parser *ps, char *buf, size_t len)
{
	unsigned char c;

	if (at_end(ps)) {
		return "end of file";
	}
	c = (unsigned char)*ps->p;
	if (c == '\n') {
		return "end of line";
	}
	if (c > 0x20 && c < 0x7f) {
		snprintf(buf, len, "'%c'", c);
	} else {
		snprintf(buf, len, "byte 0x%02x", c);
	}
	return buf;
}

// Moves one byte forward, counting lines.
static void advance(parser *ps)
{
	if (*ps->p == '\n') {
		ps->line++;
		ps->bol = ps->p + 1;
	}
	ps->p++;
}

// Returns true when a comment starts here. In strict mode (where a value
// may start) it must be at the start of a line or after white space.
static bool comment_here(const parser *ps, bool strict)
{
	const char *p = ps->p;

	if (p >= ps->end) {
		return false;
	}
	if (*p != '#' && !(*p == '/' && p + 1 < ps->end && p[1] == '/')) {
		return false;
	}
	return !strict || p == ps->bol || is_ws((unsigned char)p[-1]);
}

// Skips white space and comments (and new lines when nl is true).
static void skip(parser *ps, bool nl, bool strict)
{
	while (!at_end(ps)) {
		int c = (unsigned char)*ps->p;
		if (is_ws(c)) {
			ps->p++;
		} else if (c == '\n' && nl) {
			advance(ps);
		} else if (comment_here(ps, strict)) {
			while (!at_end(ps) && *ps->p != '\n') {
				ps->p++;
			}
		} else {
			break;
		}
	}
}

// Skips to the end of the line, or to a closing bracket, after an error.
static void resync(parser *ps, char close)
{
	while (!at_end(ps) && *ps->p != '\n' && *ps->p != '}' && *ps->p != close) {
		ps->p++;
	}
}

// Appends c to a growing buffer. Returns 0 or -1 (memory).
static int buf_put(char **buf, size_t *n, size_t *cap, char c)
{
	if (*n + 1 >= *cap) {
		size_t nc = *cap * 2;
		char  *nb = realloc(*buf, nc);
		if (nb == NULL) {
			return -1;
		}
		*buf = nb;
		*cap = nc;
	}
	(*buf)[(*n)++] = c;
	return 0;
}

// Reads 4 hex digits at p. Returns the value, or -1.
static long hex4(const char *p, const char *end)
{
	long v = 0;

	if (end - p < 4) {
		return -1;
	}
	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)p[i];
		v <<= 4;
		if (c >= '0' && c <= '9') {
			v |= c - '0';
		} else if (c >= 'a' && c <= 'f') {
			v |= c - 'a' + 10;
		} else if (c >= 'A' && c <= 'F') {
			v |= c - 'A' + 10;
		} else {
			return -1;
		}
	}
	return v;
}

// Appends code point cp as UTF-8. Returns 0 or -1 (memory).
static int put_utf8(char **buf, size_t *n, size_t *cap, unsigned long cp)
{
	char   tmp[4];
	size_t len;

	if (cp < 0x80) {
		tmp[0] = (char)cp;
		len    = 1;
	} else if (cp < 0x800) {
		tmp[0] = (char)(0xc0 | (cp >> 6));
		tmp[1] = (char)(0x80 | (cp & 0x3f));
		len    = 2;
	} else if (cp < 0x10000) {
		tmp[0] = (char)(0xe0 | (cp >> 12));
		tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[2] = (char)(0x80 | (cp & 0x3f));
		len    = 3;
	} else {
		tmp[0] = (char)(0xf0 | (cp >> 18));
		tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[3] = (char)(0x80 | (cp & 0x3f));
		len    = 4;
	}
	for (size_t i = 0; i < len; i++) {
		if (buf_put(buf, n, cap, tmp[i]) != 0) {
			return -1;
		}
	}
	return 0;
}

// Reads a quoted string at the current '"' into a new NUL-terminated
// buffer. Returns 0, or -1 after reporting an error (or running out of
// memory). The position is left after the closing quote on success.
static int parse_quoted(parser *ps, char **out)
{
	int    line = ps->line;
	int    col  = colno(ps);
	size_t n    = 0;
	size_t cap  = 32;
	char  *buf  = malloc(cap);

	if (buf == NULL) {
		oom(ps);
		return -1;
	}
	ps->p++;
	for (;;) {
		unsigned char c;
		if (at_end(ps) || *ps->p == '\n') {
			perr(ps, line, col, "string is not closed before the end of the %s",
			    at_end(ps) ? "file" : "line");
			goto fail;
		}
		c = (unsigned char)*ps->p;
		if (c == '"') {
			ps->p++;
			break;
		}
		if (c == '\\') {
			int  ecol = colno(ps);
			char e    = ps->p + 1 < ps->end ? ps->p[1] : '\0';
			char v    = 0;
			switch (e) {
			case '"':
			case '\\':
			case '/':
				v = e;
				break;
			case 'b':
				v = '\b';
				break;
			case 'f':
				v = '\f';
				break;
			case 'n':
				v = '\n';
				break;
			case 'r':
				v = '\r';
				break;
			case 't':
				v = '\t';
				break;
			case 'u': {
				long cp  = hex4(ps->p + 2, ps->end);
				int  adv = 6;
				if (cp < 0) {
					perr(ps, ps->line, ecol,
					    "\\u must be followed by 4 hex digits");
					goto fail;
				}
				if (cp >= 0xdc00 && cp <= 0xdfff) {
					perr(ps, ps->line, ecol,
					    "unpaired UTF-16 surrogate in \\u escape");
					goto fail;
				}
				if (cp >= 0xd800 && cp <= 0xdbff) {
					long lo = -1;
					if (ps->end - ps->p >= 12 && ps->p[6] == '\\'
					    && ps->p[7] == 'u') {
						lo = hex4(ps->p + 8, ps->end);
					}
					if (lo < 0xdc00 || lo > 0xdfff) {
						perr(ps, ps->line, ecol,
						    "unpaired UTF-16 surrogate in \\u escape");
						goto fail;
					}
					cp  = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
					adv = 12;
				}
				if (cp == 0) {
					perr(ps, ps->line, ecol,
					    "\\u0000 is not allowed in a string");
					goto fail;
				}
				if (put_utf8(&buf, &n, &cap, (unsigned long)cp) != 0) {
					oom(ps);
					goto fail;
				}
				ps->p += adv;
				continue;
			}
			default:
				perr(ps, ps->line, ecol, "invalid escape sequence in a string");
				goto fail;
			}
			if (buf_put(&buf, &n, &cap, v) != 0) {
				oom(ps);
				goto fail;
			}
			ps->p += 2;
			continue;
		}
		if (c < 0x20 && c != '\t') {
			perr(ps, ps->line, colno(ps), "control character (0x%02x) in a string", c);
			goto fail;
		}
		if (buf_put(&buf, &n, &cap, (char)c) != 0) {
			oom(ps);
			goto fail;
		}
		ps->p++;
	}
	buf[n] = '\0';
	*out   = buf;
	return 0;

fail:
	free(buf);
	return -1;
}

// Returns true when s is exactly a JSON number (no leading zeros).
static bool is_number(const char *s)
{
	const char *p = s;

	if (*p == '-') {
		p++;
	}
	if (*p < '0' || *p > '9') {
		return false;
	}
	if (*p == '0' && p[1] >= '0' && p[1] <= '9') {
		return false;
	}
	while (*p >= '0' && *p <= '9') {
		p++;
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9') {
			return false;
		}
		while (*p >= '0' && *p <= '9') {
			p++;
		}
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-') {
			p++;
		}
		if (*p < '0' || *p > '9') {
			return false;
		}
		while (*p >= '0' && *p <= '9') {
			p++;
		}
	}
	return *p == '\0';
}

// Reads an unquoted value: up to the end of the line, ',', '}', ']' or a
// comment, without trailing white space. Returns 0 with *out set, or -1.
static int parse_unquoted(parser *ps, cJSON **out)
{
	int         line  = ps->line;
	int         col   = colno(ps);
	const char *start = ps->p;
	const char *last  = ps->p;
	char       *text;
	cJSON      *v;

	while (!at_end(ps)) {
		int c = (unsigned char)*ps->p;
		if (c == '\n' || c == ',' || c == '}' || c == ']') {
			break;
		}
		if (is_ws(c)) {
			ps->p++;
			continue;
		}
		if (comment_here(ps, true)) {
			break;
		}
		if (c == '"') {
			perr(ps, ps->line, colno(ps),
			    "unexpected '\"' inside an unquoted value (quote the whole value)");
			return -1;
		}
		if (c < 0x20 || c == 0x7f) {
			perr(ps, ps->line, colno(ps), "control character (0x%02x) in a value", c);
			return -1;
		}
		ps->p++;
		last = ps->p;
	}
	if ((text = strndup(start, (size_t)(last - start))) == NULL) {
		oom(ps);
		return -1;
	}
	if (strcmp(text, "true") == 0) {
		v = cJSON_CreateTrue();
	} else if (strcmp(text, "false") == 0) {
		v = cJSON_CreateFalse();
	} else if (strcmp(text, "null") == 0) {
		v = cJSON_CreateNull();
	} else if (is_number(text)) {
		v = cJSON_CreateNumber(ascii_strtod(text, NULL));
	} else {
		v = cJSON_CreateString(text);
	}
	if (v == NULL
	    || hocon_set_loc(ps->doc, v, ps->origin, line, col, HOCON_LOC_UNQUOTED, text) != 0) {
		cJSON_Delete(v);
		free(text);
		oom(ps);
		return -1;
	}
	free(text);
	*out = v;
	return 0;
}

// Reads the elements of an array after its '['. Returns 0 when the array
// was closed, -1 when the input ended first. Element errors are reported
// and skipped.
static int parse_array(parser *ps, cJSON *arr, int open_line, int open_col)
{
	char d[16];
	int  rc = 0;

	if (++ps->depth > HOCON_MAX_DEPTH) {
		perr(ps, open_line, open_col, "values nested deeper than %d levels",
		    HOCON_MAX_DEPTH);
		ps->doc->stop = true;
		ps->depth--;
		return -1;
	}
	for (;;) {
		cJSON *v = NULL;
		if (ps->doc->stop) {
			rc = -1;
			break;
		}
		skip(ps, true, true);
		if (at_end(ps)) {
			perr(ps, open_line, open_col,
			    "'[' is not closed before the end of the file");
			rc = -1;
			break;
		}
		if (*ps->p == ']') {
			ps->p++;
			break;
		}
		if (*ps->p == ',') {
			perr(ps, ps->line, colno(ps), "unexpected ',' (missing array element)");
			ps->p++;
			continue;
		}
		if (*ps->p == '}') {
			perr(ps, ps->line, colno(ps), "unexpected '}' inside an array");
			ps->p++;
			continue;
		}
		if (parse_value(ps, &v) != 0) {
			if (v != NULL) {
				cJSON_AddItemToArray(arr, v);
			}
			resync(ps, ']');
			if (!at_end(ps) && *ps->p == '}') {
				ps->p++;
			}
			continue;
		}
		cJSON_AddItemToArray(arr, v);
		skip(ps, false, false);
		if (at_end(ps)) {
			continue;
		}
		if (*ps->p == ',') {
			ps->p++;
		} else if (*ps->p != '\n' && *ps->p != ']') {
			perr(ps, ps->line, colno(ps),
			    "expected ',' or ']' after an array element, found %s",
			    describe(ps, d, sizeof(d)));
			resync(ps, ']');
			if (!at_end(ps) && *ps->p == '}') {
				ps->p++;
			}
		}
	}
	ps->depth--;
	return rc;
}

// Reads one value at the current position into *out. Returns 0, or -1
// after reporting an error; *out may be set (a partly read object or
// array) even on -1, and then belongs to the caller.
static int parse_value(parser *ps, cJSON **out)
{
	int   line = ps->line;
	int   col  = colno(ps);
	char  d[16];
	char *s;

	*out = NULL;
	if (at_end(ps) || *ps->p == '\n' || *ps->p == ',' || *ps->p == '}' || *ps->p == ']'
	    || comment_here(ps, true)) {
		perr(ps, line, col, "missing value (found %s)", describe(ps, d, sizeof(d)));
		return -1;
	}
	if (*ps->p == '{' || *ps->p == '[') {
		bool   obj = *ps->p == '{';
		cJSON *v   = obj ? cJSON_CreateObject() : cJSON_CreateArray();
		if (v == NULL || hocon_set_loc(ps->doc, v, ps->origin, line, col, 0, NULL) != 0) {
			cJSON_Delete(v);
			oom(ps);
			return -1;
		}
		*out = v;
		ps->p++;
		return obj ? parse_object_body(ps, v, line, col, true)
		           : parse_array(ps, v, line, col);
	}
	if (*ps->p == '"') {
		cJSON *v;
		if (parse_quoted(ps, &s) != 0) {
			return -1;
		}
		v = cJSON_CreateString(s);
		free(s);
		if (v == NULL || hocon_set_loc(ps->doc, v, ps->origin, line, col, 0, NULL) != 0) {
			cJSON_Delete(v);
			oom(ps);
			return -1;
		}
		*out = v;
		return 0;
	}
	return parse_unquoted(ps, out);
}

// Returns true for a byte that may appear in an unquoted key.
static bool key_char(const parser *ps)
{
	int c = (unsigned char)*ps->p;

	if (c <= 0x20 || c == 0x7f || strchr("=:{}[],.\"#", c) != NULL) {
		return false;
	}
	return !(c == '/' && ps->p + 1 < ps->end && ps->p[1] == '/');
}

// Frees n key segments.
static void free_segs(char **segs, int n)
{
	for (int i = 0; i < n; i++) {
		free(segs[i]);
	}
}

// Reads a key path (segments separated by '.', each quoted or not).
// Returns 0 with the segments in segs (caller frees), or -1.
static int parse_key(parser *ps, char **segs, int *nseg)
{
	char d[16];

	*nseg = 0;
	for (;;) {
		char *seg = NULL;
		if (!at_end(ps) && *ps->p == '"') {
			if (parse_quoted(ps, &seg) != 0) {
				goto fail;
			}
		} else {
			const char *s = ps->p;
			while (!at_end(ps) && key_char(ps)) {
				ps->p++;
			}
			if (ps->p == s) {
				perr(ps, ps->line, colno(ps), "expected a key, found %s",
				    describe(ps, d, sizeof(d)));
				goto fail;
			}
			if ((seg = strndup(s, (size_t)(ps->p - s))) == NULL) {
				oom(ps);
				goto fail;
			}
		}
		if (*nseg >= HOCON_MAX_DEPTH) {
			free(seg);
			perr(
			    ps, ps->line, colno(ps), "key has more than %d parts", HOCON_MAX_DEPTH);
			goto fail;
		}
		segs[(*nseg)++] = seg;
		if (at_end(ps) || *ps->p != '.') {
			return 0;
		}
		ps->p++;
	}

fail:
	free_segs(segs, *nseg);
	*nseg = 0;
	return -1;
}

// Walks from obj through the first n-1 segments, creating (or replacing
// non-objects by) objects. Returns the parent of the last segment, or NULL
// when memory runs out.
static cJSON *walk(parser *ps, cJSON *obj, char **segs, int n, int line, int col)
{
	for (int i = 0; i < n - 1; i++) {
		cJSON *child = kid_get(ps->doc, obj, segs[i]);
		if (child == NULL || !cJSON_IsObject(child)) {
			child = obj_put(ps->doc, obj, segs[i], cJSON_CreateObject());
			if (child == NULL
			    || hocon_set_loc(ps->doc, child, ps->origin, line, col, 0, NULL) != 0) {
				oom(ps);
				return NULL;
			}
		}
		obj = child;
	}
	return obj;
}

// Returns the directory part of path as a new string ("." when none), or
// NULL when memory runs out.
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (slash == NULL) {
		return strdup(".");
	}
	if (slash == path) {
		return strdup("/");
	}
	return strndup(path, (size_t)(slash - path));
}

// Reads a whole regular file of at most HOCON_MAX_FILE_SIZE bytes. Returns
// 0 with a malloc'ed buffer in *text, or -1 with a reason in why.
static int read_file(const char *path, char **text, size_t *len, char *why, size_t whylen)
{
	struct stat st;
	int         fd = open(path, O_RDONLY | O_CLOEXEC);
	char       *buf;
	size_t      n = 0;

	if (fd < 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "not a regular file");
		close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size > HOCON_MAX_FILE_SIZE) {
		snprintf(why, whylen, "larger than %u bytes", HOCON_MAX_FILE_SIZE);
		close(fd);
		return -1;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		snprintf(why, whylen, "out of memory");
		close(fd);
		return -1;
	}
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			snprintf(why, whylen, "%s",
			    r < 0 ? strerror(errno) : "file shrank while reading");
			free(buf);
			close(fd);
			return -1;
		}
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	*text  = buf;
	*len   = n;
	return 0;
}

static int parse_buffer(hocon_doc *doc, conf_errors *errs, const char *text, size_t len,
    const char *name, const char *dir, cJSON *obj, int incl, int depth);

// Returns true at `include "..."`.
static bool at_include(const parser *ps)
{
	const char *q = ps->p + 7;

	if (ps->end - ps->p < 9 || memcmp(ps->p, "include", 7) != 0 || !is_ws((unsigned char)*q)) {
		return false;
	}
	while (q < ps->end && is_ws((unsigned char)*q)) {
		q++;
	}
	return q < ps->end && *q == '"';
}

// Reads `include "path"` and merges that file into obj. Returns 0 (also
// when the file could not be read: that is reported, no resync needed), or
// -1 on a syntax error in the directive itself.
static int parse_include(parser *ps, cJSON *obj)
{
	int    line = ps->line;
	int    col  = colno(ps);
	char  *name = NULL;
	char  *path = NULL;
	char  *real = NULL;
	char  *text = NULL;
	char  *dir  = NULL;
	size_t len;
	char   why[128];

	ps->p += 7;
	skip(ps, false, false);
	if (parse_quoted(ps, &name) != 0) {
		return -1;
	}
	if (name[0] == '/') {
		path = strdup(name);
	} else {
		const char *base = ps->dir != NULL ? ps->dir : ".";
		size_t      n    = strlen(base) + strlen(name) + 2;
		if ((path = malloc(n)) != NULL) {
			snprintf(path, n, "%s/%s", base, name);
		}
	}
	if (path == NULL) {
		oom(ps);
		goto done;
	}
	if (ps->incl + 1 > HOCON_MAX_INCLUDE_DEPTH) {
		perr(ps, line, col, "includes nested deeper than %d levels",
		    HOCON_MAX_INCLUDE_DEPTH);
		goto done;
	}
	if (ps->doc->n_files >= HOCON_MAX_FILES) {
		perr(ps, line, col, "more than %d files included", HOCON_MAX_FILES);
		goto done;
	}
	if ((real = realpath(path, NULL)) == NULL) {
		perr(ps, line, col, "cannot read include \"%s\": %s", path, strerror(errno));
		goto done;
	}
	for (int i = 0; i < ps->doc->n_open; i++) {
		if (strcmp(ps->doc->open[i], real) == 0) {
			perr(ps, line, col, "include cycle: \"%s\" is already being read", path);
			goto done;
		}
	}
	if (read_file(real, &text, &len, why, sizeof(why)) != 0) {
		perr(ps, line, col, "cannot read include \"%s\": %s", path, why);
		goto done;
	}
	if ((dir = dir_of(path)) == NULL) {
		oom(ps);
		goto done;
	}
	ps->doc->open[ps->doc->n_open++] = real;
	real                             = NULL;
	parse_buffer(ps->doc, ps->errs, text, len, path, dir, obj, ps->incl + 1, ps->depth - 1);
	free(ps->doc->open[--ps->doc->n_open]);

done:
	free(name);
	free(path);
	free(real);
	free(text);
	free(dir);
	return 0;
}

// Reads one member (`key = value`, `key { ... }`, `include "f"`) into obj.
// Returns 0, or -1 when the caller must resync.
static int parse_member(parser *ps, cJSON *obj)
{
	char  *segs[HOCON_MAX_DEPTH];
	int    n;
	int    line = ps->line;
	int    col  = colno(ps);
	int    rc   = 0;
	bool   sep  = false;
	cJSON *parent;
	char   d[16];

	if (at_include(ps)) {
		return parse_include(ps, obj);
	}
	if (parse_key(ps, segs, &n) != 0) {
		return -1;
	}
	if (ps->depth + n > HOCON_MAX_DEPTH) {
		perr(ps, line, col, "values nested deeper than %d levels", HOCON_MAX_DEPTH);
		ps->doc->stop = true;
		free_segs(segs, n);
		return -1;
	}
	skip(ps, false, false);
	if (!at_end(ps) && (*ps->p == '=' || *ps->p == ':')) {
		ps->p++;
		sep = true;
		skip(ps, false, true);
	}
	if (!at_end(ps) && *ps->p == '{') {
		int    ol = ps->line;
		int    oc = colno(ps);
		cJSON *target;
		ps->p++;
		if ((parent = walk(ps, obj, segs, n, line, col)) == NULL) {
			rc = -1;
			goto done;
		}
		target = kid_get(ps->doc, parent, segs[n - 1]);
		if (target == NULL || !cJSON_IsObject(target)) {
			target = obj_put(ps->doc, parent, segs[n - 1], cJSON_CreateObject());
			if (target == NULL
			    || hocon_set_loc(ps->doc, target, ps->origin, line, col, 0, NULL)
			        != 0) {
				oom(ps);
				rc = -1;
				goto done;
			}
		}
		ps->depth += n - 1;
		parse_object_body(ps, target, ol, oc, true);
		ps->depth -= n - 1;
	} else if (!sep) {
		perr(ps, ps->line, colno(ps),
		    "expected '=', ':' or '{' after key \"%.64s\", found %s", segs[n - 1],
		    describe(ps, d, sizeof(d)));
		rc = -1;
	} else {
		cJSON *v = NULL;
		ps->depth += n - 1;
		rc = parse_value(ps, &v);
		ps->depth -= n - 1;
		if (v != NULL) {
			if ((parent = walk(ps, obj, segs, n, line, col)) == NULL
			    || obj_put(ps->doc, parent, segs[n - 1], v) == NULL) {
				if (parent == NULL) {
					cJSON_Delete(v);
				}
				oom(ps);
				rc = -1;
			}
		}
	}

done:
	free_segs(segs, n);
	return rc;
}

// Reads members into obj until the closing '}' (closing) or the end of the
// input (root). Returns 0, or -1 when a '{' was left open. Member errors
// are reported and skipped.
static int parse_object_body(parser *ps, cJSON *obj, int open_line, int open_col, bool closing)
{
	char d[16];
	int  rc = 0;

	if (++ps->depth > HOCON_MAX_DEPTH) {
		perr(ps, open_line, open_col, "values nested deeper than %d levels",
		    HOCON_MAX_DEPTH);
		ps->doc->stop = true;
		ps->depth--;
		return -1;
	}
	for (;;) {
		int c;
		if (ps->doc->stop) {
			rc = -1;
			break;
		}
		skip(ps, true, false);
		if (at_end(ps)) {
			if (closing) {
				perr(ps, open_line, open_col,
				    "'{' is not closed before the end of the file");
				rc = -1;
			}
			break;
		}
		c = (unsigned char)*ps->p;
		if (c == '}') {
			ps->p++;
			if (closing) {
				break;
			}
			perr(ps, ps->line, colno(ps) - 1, "unexpected '}' (no '{' is open)");
			continue;
		}
		if (c == ',' || c == ']' || c == '[') {
			perr(ps, ps->line, colno(ps), "unexpected '%c'", c);
			ps->p++;
			continue;
		}
		if (parse_member(ps, obj) != 0) {
			resync(ps, '\n');
			continue;
		}
		skip(ps, false, false);
		if (at_end(ps)) {
			continue;
		}
		c = (unsigned char)*ps->p;
		if (c == ',') {
			ps->p++;
		} else if (c != '\n' && c != '}') {
			perr(ps, ps->line, colno(ps),
			    "expected ',' or a new line after a value, found %s",
			    describe(ps, d, sizeof(d)));
			resync(ps, '\n');
		}
	}
	ps->depth--;
	return rc;
}

// Parses text as one file (name, dir for its includes) into obj. Returns 0
// when no syntax error was found in it or its includes, -1 otherwise.
static int parse_buffer(hocon_doc *doc, conf_errors *errs, const char *text, size_t len,
    const char *name, const char *dir, cJSON *obj, int incl, int depth)
{
	parser      ps;
	int         before = doc->n_syntax;
	int         origin = hocon_origin_add(doc, name);
	const char *nul;

	if (origin < 0) {
		conf_errors_add(errs, true, "%s: out of memory", name);
		doc->n_syntax++;
		doc->stop = true;
		return -1;
	}
	doc->n_files++;
	memset(&ps, 0, sizeof(ps));
	ps.doc    = doc;
	ps.errs   = errs;
	ps.text   = text;
	ps.p      = text;
	ps.end    = text + len;
	ps.bol    = text;
	ps.origin = origin;
	ps.line   = 1;
	ps.dir    = dir;
	ps.depth  = depth;
	ps.incl   = incl;

	if ((nul = memchr(text, '\0', len)) != NULL) {
		while (ps.p < nul) {
			advance(&ps);
		}
		perr(&ps, ps.line, colno(&ps), "NUL byte in the file");
		return -1;
	}
	if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
		ps.p += 3;
		ps.bol = ps.p;
	}
	skip(&ps, true, false);
	if (!at_end(&ps) && *ps.p == '{') {
		int ol = ps.line;
		int oc = colno(&ps);
		ps.p++;
		if (parse_object_body(&ps, obj, ol, oc, true) == 0) {
			skip(&ps, true, false);
			if (!at_end(&ps) && !doc->stop) {
				perr(&ps, ps.line, colno(&ps),
				    "unexpected text after the closing '}'");
			}
		}
	} else {
		parse_object_body(&ps, obj, 0, 0, false);
	}
	return doc->n_syntax == before ? 0 : -1;
}

// Reads the file at path into the document.
int hocon_parse_file(hocon_doc *doc, const char *path, conf_errors *errs)
{
	char  *text = NULL;
	char  *dir;
	char  *real;
	size_t len;
	char   why[128];
	int    rc;

	if (doc->n_open > 0 || doc->stop) {
		return -1;
	}
	if (read_file(path, &text, &len, why, sizeof(why)) != 0) {
		conf_errors_add(errs, true, "%s: cannot read: %s", path, why);
		return -1;
	}
	dir  = dir_of(path);
	real = realpath(path, NULL);
	if (dir == NULL || real == NULL) {
		conf_errors_add(errs, true, "%s: cannot read: %s", path,
		    dir == NULL ? "out of memory" : strerror(errno));
		free(dir);
		free(real);
		free(text);
		return -1;
	}
	doc->open[doc->n_open++] = real;
	rc                       = parse_buffer(doc, errs, text, len, path, dir, doc->root, 0, 0);
	free(doc->open[--doc->n_open]);
	free(dir);
	free(text);
	return rc;
}

// Reads text from memory into the document.
int hocon_parse_text(hocon_doc *doc, const char *text, size_t len, const char *name,
    const char *dir, conf_errors *errs)
{
	if (doc->stop) {
		return -1;
	}
	if (len > HOCON_MAX_FILE_SIZE) {
		conf_errors_add(errs, true, "%s: larger than %u bytes", name, HOCON_MAX_FILE_SIZE);
		return -1;
	}
	return parse_buffer(doc, errs, text, len, name, dir, doc->root, 0, 0);
}
