// The HOCON reader: the subset of HOCON that nanomq.conf files use (see
// docs/config.md and docs/compatibility.md §1), read into a cJSON tree.
//
// Every node of the tree remembers where it came from (file, line, column),
// so that validation can say "file:line: key: reason". Unquoted scalars also
// keep their source text, so that a schema can read `password = 0123` as the
// string "0123" and an integer key can be read without going through a
// double.
//
// Values come out as: objects, arrays, strings (quoted or unquoted),
// numbers (an unquoted token that is exactly a JSON number), booleans
// (unquoted `true`/`false` only: `yes`/`no`/`on`/`off` stay strings and
// are converted by the schema where a boolean is expected) and null
// (unquoted `null`). Durations and sizes stay strings ("10s", "1MB").
//
// Bounds: a file is at most HOCON_MAX_FILE_SIZE bytes, objects and arrays
// nest at most HOCON_MAX_DEPTH deep, includes at most
// HOCON_MAX_INCLUDE_DEPTH deep and HOCON_MAX_FILES files in all, and a run
// reports at most HOCON_MAX_SYNTAX_ERRORS syntax errors before it stops.
//
// Threading: a hocon_doc belongs to one thread; the functions keep no
// global state, so different documents may be used on different threads.
#ifndef NMQ_HOCON_H
#define NMQ_HOCON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "src/conf/conf.h"

#define HOCON_MAX_FILE_SIZE     (4u << 20)
#define HOCON_MAX_DEPTH         64
#define HOCON_MAX_INCLUDE_DEPTH 8
#define HOCON_MAX_FILES         64
#define HOCON_MAX_SYNTAX_ERRORS 20

// Flags of a node's origin.
#define HOCON_LOC_UNQUOTED 0x1 // scalar written without quotes (raw text kept)
#define HOCON_LOC_LOOSE    0x2 // from the environment or a flat file: 1/0 are booleans

typedef struct hocon_doc hocon_doc;

// Returns a new, empty document (its root is an empty object), or NULL when
// memory runs out. The caller frees it with hocon_doc_free().
hocon_doc *hocon_doc_alloc(void);

// Frees the document, its tree and its location table. NULL is allowed.
void hocon_doc_free(hocon_doc *doc);

// Returns the root object of the document. The document owns it: it stays
// valid until hocon_doc_free() and must not be freed by the caller.
cJSON *hocon_doc_root(hocon_doc *doc);

// Returns the number of syntax errors found so far in this document.
int hocon_doc_syntax_errors(const hocon_doc *doc);

// Reads the file at path and merges its content into the root. Syntax
// errors are added to errs as "file:line:col: reason"; a file that cannot
// be read is reported as "path: cannot read: reason". Returns 0 when the
// file was read without a syntax error, -1 otherwise (what could be read
// stays in the tree).
int hocon_parse_file(hocon_doc *doc, const char *path, conf_errors *errs);

// Like hocon_parse_file() for text in memory (len bytes, need not be NUL
// terminated). name is used in messages; relative includes are resolved
// against dir, or the working directory when dir is NULL.
int hocon_parse_text(hocon_doc *doc, const char *text, size_t len, const char *name,
    const char *dir, conf_errors *errs);

// Registers an origin that is not a file ("environment variable X", "command
// line option --y") for hocon_set_path(). Returns its index, or -1 when
// memory runs out.
int hocon_origin_add(hocon_doc *doc, const char *name);

// Returns the name of origin (file) index i, or "?" for an unknown index.
const char *hocon_origin_name(const hocon_doc *doc, int i);

// Stores value at the dotted path below the root (each dot separates a
// segment; segments cannot contain dots), creating objects on the way and
// replacing what was there, and records origin/line for the new nodes. The
// document takes ownership of value in every case. Returns the stored node
// or NULL when memory runs out or the path is malformed.
cJSON *hocon_set_path(
    hocon_doc *doc, const char *path, cJSON *value, int origin, int line, unsigned flags);

// Returns the node at the dotted path below the root, or NULL.
cJSON *hocon_get_path(hocon_doc *doc, const char *path);

// Removes the node at the dotted path (it is kept alive until the document
// is freed, so pointers to it stay valid). Does nothing if there is none.
void hocon_remove_path(hocon_doc *doc, const char *path);

// Removes child, a member of parent (kept alive like above).
void hocon_remove_child(hocon_doc *doc, cJSON *parent, cJSON *child);

// Records the origin of node (for nodes a caller adds itself). Returns 0,
// or -1 when memory runs out.
int hocon_set_loc(hocon_doc *doc, const cJSON *node, int origin, int line, int col, unsigned flags,
    const char *raw);

// Looks up where node came from. Returns true and fills the non-NULL
// outputs when the node is known, false otherwise (outputs untouched).
bool hocon_loc(const hocon_doc *doc, const cJSON *node, const char **file, int *line, int *col,
    unsigned *flags);

// Returns the order in which node was created (reading order: a node read
// from an include comes between the nodes around the include), or -1 when
// the node is unknown.
long hocon_seq(const hocon_doc *doc, const cJSON *node);

// Returns the source text of an unquoted scalar node, or NULL for any other
// node. The document owns the string.
const char *hocon_raw(const hocon_doc *doc, const cJSON *node);

#endif // NMQ_HOCON_H
