// nanomq_cli: `pub`, `sub`, `conn`, `drops`, and with BUILD_BENCH `bench`.
#include <stdio.h>
#include <string.h>

#include "tools/nanomq_cli/cli_client.h"
#include "tools/nanomq_cli/cli_drops.h"
#include "tools/nanomq_cli/cli_opts.h"
#ifdef NMQ_BUILD_BENCH
#include "tools/nanomq_cli/bench.h"
#endif

// Returns the exit code: 0 on success, 1 on failure, 2 on a usage error.
int main(int argc, char **argv)
{
	cli_opts o;
	char     err[256];
	bool     bench = false;
	int      rc;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0
	    || strcmp(argv[1], "help") == 0) {
		cli_opts_usage(stdout, false, 0);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
#ifdef NMQ_VERSION
		printf("nanomq_cli %s\n", NMQ_VERSION);
#else
		printf("nanomq_cli\n");
#endif
		return 0;
	}
	argv++;
	argc--;
	if (strcmp(argv[0], "drops") == 0) {
		return cli_drops_main(argc, argv);
	}
	if (strcmp(argv[0], "bench") == 0) {
#ifdef NMQ_BUILD_BENCH
		bench = true;
		argv++;
		argc--;
#else
		fprintf(stderr,
		    "nanomq_cli: bench is not built in (configure with -DBUILD_BENCH=ON)\n");
		return 2;
#endif
	}
	memset(&o, 0, sizeof(o));
	rc = cli_opts_parse(&o, bench, argc, argv, err, sizeof(err));
	if (rc != 0) {
		if (rc < 0) {
			fprintf(stderr, "nanomq_cli: %s\n", err);
		}
		cli_opts_fini(&o);
		return rc < 0 ? 2 : 0;
	}
#ifdef NMQ_BUILD_BENCH
	if (bench) {
		rc = bench_run(&o);
		cli_opts_fini(&o);
		return rc;
	}
#endif
	rc = cli_client_run(&o);
	cli_opts_fini(&o);
	return rc;
}
