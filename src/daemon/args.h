// The `nanomq` command line (docs/compatibility.md §5): a verb (start, stop, restart,
// reload), the broker options that override the configuration, and the
// extensions --test, -h/--help and -v/--version.
//
// Contract:
// - cli_args_parse() is called once by the main thread. It never prints and
//   never exits: a problem comes back as one message in err.
// - The strings in args->cli point into argv (they are not copied), so argv
//   must outlive args; in main() it always does.
// - An option may be written "--name value", "--name=value", "-x value" or
//   "-xvalue". A value that starts with '-' must use the "=" or attached
//   form, so that a forgotten value is reported instead of swallowing the
//   next option.
#ifndef NMQ_CLI_ARGS_H
#define NMQ_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "nng/core/nmq_err.h"
#include "src/conf/conf.h"

enum cli_verb {
	CLI_VERB_NONE = 0, // only with --help or --version
	CLI_VERB_START,
	CLI_VERB_STOP,
	CLI_VERB_RESTART,
	CLI_VERB_RELOAD,
};

typedef struct cli_args {
	int      verb; // enum cli_verb
	bool     test; // --test: validate the configuration and exit
	bool     help; // -h, --help: print cli_usage() and exit 0
	bool     version; // -v, --version: print cli_version() and exit 0
	conf_cli cli; // overrides for conf_load()
} cli_args;

// Parses argv[1..argc) into *args (which it initialises, including
// conf_cli_init on args->cli). Returns NMQ_OK, or NMQ_EINVAL with a
// one-line message in err naming the offending option (unknown option,
// missing or invalid value, missing or unknown verb, too many --url).
nmq_err cli_args_parse(cli_args *args, int argc, char *const argv[], char *err, size_t errlen);

// Returns the name of a verb ("start", ...), or "" for CLI_VERB_NONE.
const char *cli_verb_name(int verb);

// Writes the help text (verbs, every option, environment) to f.
void cli_usage(FILE *f);

// Writes "nanomq <version>" and a newline to f.
void cli_version(FILE *f);

#endif // NMQ_CLI_ARGS_H
