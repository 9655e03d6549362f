// What the command channel's client (ipc.c) and server (ipc_server.c)
// share: address kinds, the clock and the verb syntax.
#ifndef NMQ_CLI_IPC_INT_H
#define NMQ_CLI_IPC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

// Returns true when url names an ipc:// (unix domain socket) address.
static inline bool ipc_is_unix(const char *url)
{
	return strncmp(url, "ipc://", 6) == 0;
}

// Returns milliseconds of CLOCK_MONOTONIC.
static inline long long ipc_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Returns true when verb is a non-empty word of [a-z_-] of sane length.
static inline bool ipc_verb_valid(const char *verb, size_t len)
{
	if (len == 0 || len > 64) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		char c = verb[i];
		if (!((c >= 'a' && c <= 'z') || c == '_' || c == '-')) {
			return false;
		}
	}
	return true;
}

#endif // NMQ_CLI_IPC_INT_H
