// libFuzzer target for the configuration reader: parses the input as a
// HOCON file, walks the tree and its origin table, then loads it as a
// whole configuration (schema checks, listeners, auth) and compares the
// result with the defaults as a reload would. Any crash, leak, sanitizer
// report or unbounded message list is a bug.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/conf.h"
#include "src/conf/hocon.h"

// Stops the run with a message; libFuzzer records the input as a crash.
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_hocon: check failed: %s (%s:%d)\n", #cond, __FILE__, \
			    __LINE__);                                                             \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static volatile size_t sink;

// Visits every node below node, asking for its origin and raw text.
static void walk(hocon_doc *doc, const cJSON *node, int depth)
{
	const char *file;
	int         line;

	CHECK(depth <= HOCON_MAX_DEPTH + 1);
	for (const cJSON *c = node->child; c != NULL; c = c->next) {
		const char *raw = hocon_raw(doc, c);
		CHECK(hocon_loc(doc, c, &file, &line, NULL, NULL));
		CHECK(line >= 0);
		sink += strlen(file) + (raw != NULL ? strlen(raw) : 0);
		if (c->string != NULL) {
			sink += strlen(c->string);
		}
		if (cJSON_IsString(c)) {
			sink += strlen(c->valuestring);
		}
		walk(doc, c, depth + 1);
	}
}

// Checks the invariants of a message list.
static void check_errors(const conf_errors *errs)
{
	CHECK(errs->n_errors >= 0 && errs->n_errors <= CONF_MAX_ERRORS);
	CHECK(errs->n_warnings >= 0 && errs->n_warnings <= CONF_MAX_ERRORS);
	for (int i = 0; i < errs->n_errors; i++) {
		CHECK(strchr(errs->errors[i], '\n') == NULL);
	}
	for (int i = 0; i < errs->n_warnings; i++) {
		CHECK(strchr(errs->warnings[i], '\n') == NULL);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	hocon_doc   *doc = hocon_doc_alloc();
	conf_errors  errs;
	nmq_conf     conf;
	nmq_conf     defaults;
	conf_changes changes;
	int          rc;

	memset(&errs, 0, sizeof(errs));
	if (doc == NULL) {
		return 0;
	}
	rc = hocon_parse_text(doc, (const char *)data, size, "fuzz.conf", "/nonexistent", &errs);
	CHECK(rc == 0 || conf_errors_failed(&errs));
	CHECK(hocon_doc_syntax_errors(doc) <= HOCON_MAX_SYNTAX_ERRORS);
	walk(doc, hocon_doc_root(doc), 0);
	check_errors(&errs);
	hocon_doc_free(doc);
	conf_errors_free(&errs);

	rc = conf_load_text(&conf, (const char *)data, size, "fuzz.conf", "/nonexistent", &errs);
	check_errors(&errs);
	if (rc == 0) {
		CHECK(conf.n_listeners >= 0 && conf.n_listeners <= CONF_MAX_LISTENERS);
		for (int i = 0; i < conf.n_listeners; i++) {
			CHECK(conf.listeners[i].bind != NULL && conf.listeners[i].host != NULL);
			CHECK(conf.listeners[i].port >= 0 && conf.listeners[i].port <= 65535);
		}
		conf_defaults(&defaults);
		if (conf_diff(&defaults, &conf, &changes) == 0) {
			for (int i = 0; i < changes.n; i++) {
				sink += strlen(changes.v[i].key);
			}
			conf_changes_free(&changes);
		}
		conf_free(&defaults);
		conf_free(&conf);
	} else {
		CHECK(conf_errors_failed(&errs));
		CHECK(conf.listeners[0].name == NULL); // freed and zeroed
	}
	conf_errors_free(&errs);
	return 0;
}
