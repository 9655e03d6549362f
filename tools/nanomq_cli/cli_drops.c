// `nanomq_cli drops`; see cli_drops.h.
#include "tools/nanomq_cli/cli_drops.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <mbedtls/base64.h>

// Largest reply read; the ring's JSON for 1,000 events fits many times.
#define DROPS_REPLY_MAX (64u << 20)

static void drops_usage(FILE *out)
{
	fputs("Usage: nanomq_cli drops [options]\n"
	      "Prints the broker's recent drops and refusals and the counters per\n"
	      "reason (GET /api/v4/drops of the REST API, http_server section).\n"
	      "  -h, --host HOST       REST API address (default 127.0.0.1)\n"
	      "  -p, --port PORT       REST API port (default 8081)\n"
	      "  -u, --username USER   Basic authentication user\n"
	      "  -P, --password PASS   Basic authentication password\n"
	      "  -n, --limit N         events to show, newest first (default 100)\n"
	      "      --help            this text\n",
	    out);
}

// Connects to host:port (blocking, 10 s timeouts). Returns the socket or -1
// with a message on stderr.
static int drops_connect(const char *host, const char *port)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family   = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int gai           = getaddrinfo(host, port, &hints, &res);
	if (gai != 0) {
		fprintf(stderr, "nanomq_cli: %s: %s\n", host, gai_strerror(gai));
		return -1;
	}
	int fd = -1;
	for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
		if (fd < 0) {
			continue;
		}
		struct timeval tv = { .tv_sec = 10 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
			break;
		}
		close(fd);
		fd = -1;
	}
	if (fd < 0) {
		fprintf(stderr, "nanomq_cli: cannot connect to %s:%s: %s\n", host, port,
		    strerror(errno));
	}
	freeaddrinfo(res);
	return fd;
}

int cli_drops_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "host", required_argument, NULL, 'h' },
		{ "port", required_argument, NULL, 'p' },
		{ "username", required_argument, NULL, 'u' },
		{ "password", required_argument, NULL, 'P' },
		{ "limit", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	const char *host = "127.0.0.1", *port = "8081", *user = NULL, *pass = "";
	long        limit = 100;
	int         c;
	char       *end;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h:p:u:P:n:", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			host = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 'u':
			user = optarg;
			break;
		case 'P':
			pass = optarg;
			break;
		case 'n':
			limit = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || limit < 0 || limit > 1000000) {
				fprintf(stderr, "nanomq_cli: --limit: expected 0 .. 1000000\n");
				return 2;
			}
			break;
		case 'H':
			drops_usage(stdout);
			return 0;
		default:
			drops_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nanomq_cli: drops: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	// The request: Basic credentials when a user is given.
	char auth[512] = "";
	if (user != NULL) {
		char   cred[256];
		size_t olen = 0;
		int    n    = snprintf(cred, sizeof(cred), "%s:%s", user, pass);
		char   b64[360];
		if (n < 0 || (size_t)n >= sizeof(cred)
		    || mbedtls_base64_encode((unsigned char *)b64, sizeof(b64), &olen,
		           (const unsigned char *)cred, (size_t)n)
		        != 0) {
			fprintf(stderr, "nanomq_cli: user name and password too long\n");
			return 2;
		}
		snprintf(auth, sizeof(auth), "Authorization: Basic %.*s\r\n", (int)olen, b64);
	}
	char req[1024];
	int  rl = snprintf(req, sizeof(req),
	     "GET /api/v4/drops?limit=%ld HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n",
	     limit, host, auth);
	if (rl < 0 || (size_t)rl >= sizeof(req)) {
		fprintf(stderr, "nanomq_cli: host name too long\n");
		return 2;
	}
	int fd = drops_connect(host, port);
	if (fd < 0) {
		return 1;
	}
	for (size_t off = 0; off < (size_t)rl;) {
		ssize_t w = send(fd, req + off, (size_t)rl - off, MSG_NOSIGNAL);
		if (w <= 0) {
			fprintf(stderr, "nanomq_cli: send: %s\n", strerror(errno));
			close(fd);
			return 1;
		}
		off += (size_t)w;
	}
	// The reply: read to the end (Connection: close).
	size_t len = 0, cap = 65536;
	char  *buf = malloc(cap + 1);
	for (;;) {
		if (buf == NULL) {
			fprintf(stderr, "nanomq_cli: out of memory\n");
			close(fd);
			return 1;
		}
		ssize_t r = recv(fd, buf + len, cap - len, 0);
		if (r == 0) {
			break;
		}
		if (r < 0) {
			fprintf(stderr, "nanomq_cli: receive: %s\n",
			    errno == EAGAIN ? "timed out" : strerror(errno));
			free(buf);
			close(fd);
			return 1;
		}
		len += (size_t)r;
		if (len == cap) {
			if (cap >= DROPS_REPLY_MAX) {
				fprintf(stderr, "nanomq_cli: reply too large\n");
				free(buf);
				close(fd);
				return 1;
			}
			cap *= 2;
			char *nb = realloc(buf, cap + 1);
			if (nb == NULL) {
				free(buf);
			}
			buf = nb;
		}
	}
	close(fd);
	buf[len]   = '\0';
	int   code = 0;
	char *body = strstr(buf, "\r\n\r\n");
	if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || body == NULL) {
		fprintf(stderr, "nanomq_cli: not an HTTP reply from %s:%s\n", host, port);
		free(buf);
		return 1;
	}
	body += 4;
	FILE *out = code == 200 ? stdout : stderr;
	if (code != 200) {
		fprintf(stderr, "nanomq_cli: the REST API answered %d: ", code);
	}
	fputs(body, out);
	if (len > 0 && buf[len - 1] != '\n') {
		fputc('\n', out);
	}
	free(buf);
	return code == 200 ? 0 : 1;
}
