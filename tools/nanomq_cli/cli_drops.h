// `nanomq_cli drops`: reads the broker's drop log ("why was my message
// dropped?", docs/compatibility.md §10) from its REST API, GET
// /api/v4/drops, and prints the JSON reply on stdout.
//
// Threading: main thread only; one blocking HTTP/1.1 request with a 10 s
// send and receive timeout.
#ifndef NMQ_CLIENT_CLI_DROPS_H
#define NMQ_CLIENT_CLI_DROPS_H

// argv[0] is "drops". Returns the exit code: 0 when the API answered 200,
// 1 when it answered otherwise (the reply goes to stderr) or could not be
// reached, 2 on a usage error.
int cli_drops_main(int argc, char **argv);

#endif // NMQ_CLIENT_CLI_DROPS_H
