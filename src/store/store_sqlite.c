// Loading SQLite on demand; see store_sqlite.h.
#include "src/store/store_sqlite.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>

store_sqlite_api store_sqlite;

static bool loaded;

nmq_err store_sqlite_load(char *err, size_t errlen)
{
	if (loaded) {
		return NMQ_OK;
	}
	// RTLD_LOCAL: nothing else resolves against it by accident.
	void *h = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(err, errlen, "cannot load SQLite (libsqlite3.so.0): %s", dlerror());
		return NMQ_ENOTSUP;
	}
	store_sqlite_api api;
#define STORE_SQLITE_SYM(n)                                                                        \
	if ((*(void **)&api.n = dlsym(h, "sqlite3_" #n)) == NULL) {                                \
		snprintf(err, errlen, "SQLite (libsqlite3.so.0) lacks sqlite3_%s", #n);            \
		dlclose(h);                                                                        \
		return NMQ_ENOTSUP;                                                                \
	}
	STORE_SQLITE_FUNCS(STORE_SQLITE_SYM)
#undef STORE_SQLITE_SYM
	// No memory statistics: they take a global mutex at every allocation
	// of the store thread. Only possible before SQLite initialises
	// (SQLITE_MISUSE afterwards, harmless: the statistics stay on).
	int (*config)(int, ...) = NULL;
	*(void **)&config       = dlsym(h, "sqlite3_config");
	if (config != NULL) {
		(void)config(SQLITE_CONFIG_MEMSTATUS, 0);
	}
	store_sqlite = api;
	loaded       = true;
	return NMQ_OK;
}
