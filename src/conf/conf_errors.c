// The list of configuration problems (errors and warnings) that every part
// of the configuration layer reports into.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/conf/conf.h"

#define CONF_MSG_MAX 512

// Adds one message to the errors or warnings of errs; when the list is full
// or memory runs out, counts it as dropped. Control characters in the text
// are replaced by '?', so a message is always one line.
void conf_errors_add(conf_errors *errs, bool is_error, const char *fmt, ...)
{
	char    buf[CONF_MSG_MAX];
	va_list ap;
	int    *n    = is_error ? &errs->n_errors : &errs->n_warnings;
	char  **list = is_error ? errs->errors : errs->warnings;
	char   *msg;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	for (char *c = buf; *c != '\0'; c++) {
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			*c = '?';
		}
	}
	if (*n >= CONF_MAX_ERRORS || (msg = strdup(buf)) == NULL) {
		if (is_error) {
			errs->n_dropped_errors++;
		} else {
			errs->n_dropped_warnings++;
		}
		return;
	}
	list[(*n)++] = msg;
}

// Returns true when errs holds at least one error, stored or dropped.
bool conf_errors_failed(const conf_errors *errs)
{
	return errs->n_errors > 0 || errs->n_dropped_errors > 0;
}

// Frees every message of errs and zeroes it.
void conf_errors_free(conf_errors *errs)
{
	if (errs == NULL) {
		return;
	}
	for (int i = 0; i < errs->n_errors; i++) {
		free(errs->errors[i]);
	}
	for (int i = 0; i < errs->n_warnings; i++) {
		free(errs->warnings[i]);
	}
	memset(errs, 0, sizeof(*errs));
}
