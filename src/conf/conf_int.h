// Internal interfaces of the configuration layer (src/conf only): the
// schema table, value conversion, and the stages of conf_load().
#ifndef NMQ_CONF_INT_H
#define NMQ_CONF_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/conf/conf.h"
#include "src/conf/hocon.h"

#ifndef NMQ_PARALLEL_DEFAULT
#define NMQ_PARALLEL_DEFAULT 0
#endif
#ifndef NMQ_MSQ_LEN_DEFAULT
#define NMQ_MSQ_LEN_DEFAULT 2048
#endif

#define CONF_XSTR(x) CONF_STR(x)
#define CONF_STR(x)  #x

#define CONF_PID_FILE_DEFAULT "/tmp/nanomq/nanomq.pid"

// Value types of the schema (what the file may say).
enum conf_type {
	CONF_T_SECTION = 0, // an object holding more keys
	CONF_T_BOOL,
	CONF_T_INT,
	CONF_T_FLOAT,
	CONF_T_STR,
	CONF_T_ENUM, // one word of `words`, stored as its index
	CONF_T_SIZE, // bytes; B/KB/MB/GB suffixes
	CONF_T_DUR_S, // seconds; ms/s/m/h suffixes
	CONF_T_DUR_MS, // milliseconds; ms/s/m/h suffixes
	CONF_T_FLAGS, // a word or an array of words of `words`, stored as bits
	CONF_T_OBJECT, // checked by its own code (auth.password, auth.acl)
	CONF_T_ARRAY, // checked by its own code (auth.acl.rules)
};

// How a value is stored in the struct (C type at `off`).
enum conf_store {
	CONF_ST_NONE = 0, // not stored (not supported yet, or handled by code)
	CONF_ST_BOOL,
	CONF_ST_INT,
	CONF_ST_U32,
	CONF_ST_U64,
	CONF_ST_DOUBLE,
	CONF_ST_STR,
};

// Which struct `off` is relative to.
enum conf_base {
	CONF_BASE_CONF = 0, // nmq_conf
	CONF_BASE_LISTENER, // conf_listener
	CONF_BASE_BRIDGE, // conf_bridge
	CONF_BASE_BRIDGE_FWD, // conf_bridge_fwd
	CONF_BASE_BRIDGE_SUB, // conf_bridge_sub
};

enum conf_status {
	CONF_S_SUPPORTED = 0,
	CONF_S_NOEFFECT, // accepted and validated; has no effect
	CONF_S_NOT_YET, // recognised, not supported yet: warning, ignored
	CONF_S_UNSUPPORTED, // never planned: warning, ignored
};

#define CONF_F_MIN_EXCL    0x1 // min is exclusive
#define CONF_F_DUR_DEFAULT 0x2 // a duration here means the default, with a warning
#define CONF_F_MILLI_ALIAS 0x4 // through its alias, a value >= 100 is thousandths
#define CONF_F_SECRET      0x8 // never shown
#define CONF_F_BIND        0x10 // listener bind address
#define CONF_F_ENABLE      0x20 // listener enable switch
#define CONF_F_TLSFILE     0x40 // listener TLS setting (inherited, reloadable)
#define CONF_F_READABLE    0x80 // names a file that must be readable

// How the value of a legacy flat key (--old_conf) converts; the rest follows
// from the type of the key (a list of words for CONF_T_FLAGS).
enum conf_flat_how {
	CONF_FLAT_SAME = 0, // the value as written
	CONF_FLAT_KB, // a bare number is kilobytes
	CONF_FLAT_MILLI, // an integer in thousandths (1250 = 1.25)
	CONF_FLAT_LIST, // comma-separated words (implied by CONF_T_FLAGS)
};

typedef struct conf_key {
	const char *path; // dotted key path
	uint8_t     type; // enum conf_type
	uint8_t     store; // enum conf_store
	uint8_t     base; // enum conf_base
	uint8_t     status; // enum conf_status
	bool        reload; // applied by a reload (else needs a restart)
	unsigned    flags; // CONF_F_*
	const char *def; // default, written as in the file; NULL = none
	const char *def_doc; // default as shown in the docs, when def is not it
	double      min; // range, when min < max
	double      max;
	double      warn_below; // a warning below this value (when non-zero)
	const char *words; // enum / flags words, '|' separated
	const char *alias; // full path of an alias, or NULL
	size_t      off; // offsetof the field in its base struct
	const char *help; // one line
	// The other spellings of this key, each written only here:
	const char *env; // NANOMQ_* variable that sets it, or NULL
	const char *flat; // legacy flat key, or NULL; on a section, ending in
	                  // '.', a prefix that maps onto the section's keys
	uint8_t     flat_how; // enum conf_flat_how
	const char *flat_note; // shown in the flat table of the docs
	const char *opt; // long command-line option (without "--"), or NULL
	char        opt_letter; // short option, or 0
	const char *opt_arg; // placeholder in --help; NULL: from the type
	size_t      opt_field; // offsetof the field in conf_cli
} conf_key;

extern const conf_key conf_schema[];
extern const size_t   conf_schema_len;

// Returns the schema entry whose path (or alias) is path, or NULL. When
// via_alias is not NULL it says whether the alias matched.
const conf_key *conf_schema_find(const char *path, bool *via_alias);
// Returns true when some schema path starts with path followed by a dot.
bool conf_schema_is_prefix(const char *path);

// A converted value.
typedef struct conf_val {
	bool     b;
	int64_t  i;
	uint64_t u;
	double   d;
	char    *s; // malloc'ed, for CONF_T_STR
} conf_val;

// Converts text to the type of k into *out. loose accepts 1/0 as booleans.
// Returns 0, or -1 with the reason in why.
int conf_value_parse(
    const conf_key *k, const char *text, bool loose, conf_val *out, char *why, size_t whylen);
// Stores v into the field of k in base (strings: ownership moves, the old
// string is freed).
void conf_value_store(const conf_key *k, void *base, conf_val *v);
// Writes the allowed range of k ("1 .. 65535", "1B .. 256MB", "> 0.5 .. 10")
// into buf, or "" when k has no range.
void conf_range_text(const conf_key *k, char *buf, size_t len);
// Writes a byte count with the largest unit that divides it ("10MB").
void conf_size_text(double v, char *buf, size_t len);
// Parses a size ("10MB", "512", "1.5KB") into bytes. Returns 0 or -1.
int conf_parse_size(const char *s, uint64_t *bytes);
// Parses a duration ("10s", "500ms", "2m", "1h"; a bare number is in
// bare_ms milliseconds) into milliseconds. Returns 0 or -1.
int conf_parse_duration(const char *s, uint64_t bare_ms, uint64_t *ms);

// The state of one validation run over a document.
typedef struct conf_ctx {
	hocon_doc   *doc;
	conf_errors *errs;
	nmq_conf    *conf;
	bool        *set; // per schema entry: given in the tree
} conf_ctx;

// Reports a problem with key (located at node) as "file:line: key: reason".
void conf_key_msg(conf_ctx *ctx, bool is_error, const cJSON *node, const char *key, const char *fmt,
    ...) __attribute__((format(printf, 5, 6)));

// Returns the text of a scalar node (string, number, boolean) in buf or
// the doc, or NULL for objects, arrays and null.
const char *conf_node_text(conf_ctx *ctx, const cJSON *node, char *buf, size_t len);

// Converts node for k and stores it in base (nmq_conf or conf_listener).
// key is the path shown in messages. Returns 0 when stored, 1 when accepted
// without storing, -1 after reporting an error.
int conf_apply_key(conf_ctx *ctx, const conf_key *k, const char *key, const cJSON *node, void *base,
    bool via_alias);

// Validates the tree of doc and fills conf (which holds defaults). Returns
// 0, or -1 when an error was added to errs.
int conf_check_tree(hocon_doc *doc, nmq_conf *conf, conf_errors *errs);

// Listener and auth parts of the check (conf_listener.c, conf_auth.c).
void conf_check_listeners(conf_ctx *ctx, const cJSON *listeners);
void conf_check_password(conf_ctx *ctx, const cJSON *node);
void conf_check_acl(conf_ctx *ctx, const cJSON *node);
// webhook.headers and webhook.events (conf_webhook.c), and the section's
// cross-key checks after the walk (section: its node, for messages).
void conf_check_webhook_headers(conf_ctx *ctx, const cJSON *node);
// auth.http_auth: validated into nmq_conf.auth_http (conf_http_auth.c).
void conf_check_http_auth(conf_ctx *ctx, const cJSON *node);
void conf_check_webhook_events(conf_ctx *ctx, const cJSON *node);
void conf_check_webhook_after(conf_ctx *ctx, const cJSON *section);
void conf_listener_free(conf_listener *l);
// preset.session: validated into nmq_conf.preset_sessions (conf_preset.c).
void conf_check_preset_sessions(conf_ctx *ctx, const cJSON *node);
// The bridges.mqtt section (conf_bridge.c).
void conf_check_bridges(conf_ctx *ctx, const cJSON *node);
void conf_bridges_free(nmq_conf *conf);

// Overlays (conf_env.c): NANOMQ_* variables and the command line, written
// into the tree before it is checked. Problems go to errs.
void conf_env_apply(hocon_doc *doc, nmq_conf *conf, conf_errors *errs);
void conf_cli_apply(hocon_doc *doc, const conf_cli *cli, conf_errors *errs);
// Writes the environment variable table as Markdown. Returns 0 or -1.
int conf_env_markdown(FILE *out);

// Reads a legacy flat file (conf_old.c) into the tree. Returns 0, or -1
// when it could not be read or had errors.
int conf_old_read(hocon_doc *doc, const char *path, conf_errors *errs);
// Writes the flat key table as Markdown. Returns 0 or -1.
int conf_old_markdown(FILE *out);

#endif // NMQ_CONF_INT_H
