// `nanomq_cli bench pub|sub|conn|pubsub`: the project's load generator.
//
// Clients are spread round-robin over opts->threads loop threads (epoll,
// non-blocking sockets, thousands of connections per thread). main() drives
// the phases (connect subscribers, connect publishers, run, stop
// publishing, drain, disconnect) through an atomic phase number and each
// loop's eventfd, samples the clocks and /proc, then prints the report.
// Only built when NMQ_BUILD_BENCH is defined.
#ifndef NMQ_CLIENT_BENCH_H
#define NMQ_CLIENT_BENCH_H

#include "tools/nanomq_cli/cli_opts.h"

// Runs a parsed bench command (or --selftest). Returns the exit code: 0 if
// the run completed (even with losses: they are in the report), 1 if no
// client could connect or the set-up failed, and for --selftest 0 only if
// every check passed.
int bench_run(cli_opts *o);

#endif // NMQ_CLIENT_BENCH_H
