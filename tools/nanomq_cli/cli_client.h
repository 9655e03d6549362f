// The `pub`, `sub` and `conn` commands of nanomq_cli, and the helpers that
// the commands share with `bench`: signal handling and thread start-up.
//
// Threading: cli_client_run() is called from main. It starts opts->threads
// loop threads, spreads the clients over them and returns once every client
// is closed.
#ifndef NMQ_CLIENT_CLI_CLIENT_H
#define NMQ_CLIENT_CLI_CLIENT_H

#include <signal.h>
#include <stdbool.h>

#include "tools/nanomq_cli/cli_opts.h"

// Runs a parsed pub/sub/conn command. Returns the process exit code: 0 on
// success, 1 if a client failed (refused, closed by the broker, not every
// message acknowledged) or the set-up failed.
int cli_client_run(cli_opts *o);

// Set by SIGINT/SIGTERM once cli_signals_install() ran.
extern volatile sig_atomic_t cli_interrupted;

// Installs SIGINT/SIGTERM handlers, ignores SIGPIPE and raises the open
// file limit to its hard maximum. Returns the new soft limit of open files.
long cli_signals_install(void);

// Blocks SIGINT/SIGTERM in the calling thread (call before starting loop
// threads, so that only main sees them) or unblocks them again.
void cli_signals_block(bool block);

// Sleeps for ms milliseconds (interrupted early by a signal); cannot fail.
void cli_sleep_ms(unsigned ms);

#endif // NMQ_CLIENT_CLI_CLIENT_H
