// SQLite, loaded when a store is opened rather than at program start.
//
// Linked normally, libsqlite3 (and the libm it needs) would be mapped and
// relocated at every start, about 580 kB of resident memory on a broker
// whose configuration has no store. The store's sources call SQLite
// through the table below instead: the names sqlite3_* are redirected to
// it by macros, so the code reads as plain SQLite. store_sqlite_load()
// fills the table with dlopen()/dlsym() (main thread, before the first
// use; store_open calls it).
//
// Include only from src/store (store_int.h does).
#ifndef NMQ_STORE_SQLITE_H
#define NMQ_STORE_SQLITE_H

#include <sqlite3.h>
#include <stddef.h>

#include "nng/core/nmq_err.h"

#define STORE_SQLITE_FUNCS(X)                                                                      \
	X(bind_blob)                                                                               \
	X(bind_int)                                                                                \
	X(bind_int64)                                                                              \
	X(bind_text)                                                                               \
	X(busy_timeout)                                                                            \
	X(changes)                                                                                 \
	X(clear_bindings)                                                                          \
	X(close)                                                                                   \
	X(column_blob)                                                                             \
	X(column_bytes)                                                                            \
	X(column_int)                                                                              \
	X(column_int64)                                                                            \
	X(column_text)                                                                             \
	X(column_type)                                                                             \
	X(errmsg)                                                                                  \
	X(exec)                                                                                    \
	X(extended_errcode)                                                                        \
	X(extended_result_codes)                                                                   \
	X(finalize)                                                                                \
	X(get_autocommit)                                                                          \
	X(last_insert_rowid)                                                                       \
	X(open_v2)                                                                                 \
	X(prepare_v2)                                                                              \
	X(prepare_v3)                                                                              \
	X(reset)                                                                                   \
	X(step)                                                                                    \
	X(wal_checkpoint_v2)                                                                       \
	X(wal_hook)

typedef struct store_sqlite_api {
#define STORE_SQLITE_PTR(n) __typeof__(sqlite3_##n) *n;
	STORE_SQLITE_FUNCS(STORE_SQLITE_PTR)
#undef STORE_SQLITE_PTR
} store_sqlite_api;

extern store_sqlite_api store_sqlite;

// Loads libsqlite3.so.0 and its functions once. Returns NMQ_OK, or
// NMQ_ENOTSUP with the loader's message in err (the library or a function
// is missing). Main thread.
nmq_err store_sqlite_load(char *err, size_t errlen);

#define sqlite3_bind_blob             store_sqlite.bind_blob
#define sqlite3_bind_int              store_sqlite.bind_int
#define sqlite3_bind_int64            store_sqlite.bind_int64
#define sqlite3_bind_text             store_sqlite.bind_text
#define sqlite3_busy_timeout          store_sqlite.busy_timeout
#define sqlite3_changes               store_sqlite.changes
#define sqlite3_clear_bindings        store_sqlite.clear_bindings
#define sqlite3_close                 store_sqlite.close
#define sqlite3_column_blob           store_sqlite.column_blob
#define sqlite3_column_bytes          store_sqlite.column_bytes
#define sqlite3_column_int            store_sqlite.column_int
#define sqlite3_column_int64          store_sqlite.column_int64
#define sqlite3_column_text           store_sqlite.column_text
#define sqlite3_column_type           store_sqlite.column_type
#define sqlite3_errmsg                store_sqlite.errmsg
#define sqlite3_exec                  store_sqlite.exec
#define sqlite3_extended_errcode      store_sqlite.extended_errcode
#define sqlite3_extended_result_codes store_sqlite.extended_result_codes
#define sqlite3_finalize              store_sqlite.finalize
#define sqlite3_get_autocommit        store_sqlite.get_autocommit
#define sqlite3_last_insert_rowid     store_sqlite.last_insert_rowid
#define sqlite3_open_v2               store_sqlite.open_v2
#define sqlite3_prepare_v2            store_sqlite.prepare_v2
#define sqlite3_prepare_v3            store_sqlite.prepare_v3
#define sqlite3_reset                 store_sqlite.reset
#define sqlite3_step                  store_sqlite.step
#define sqlite3_wal_checkpoint_v2     store_sqlite.wal_checkpoint_v2
#define sqlite3_wal_hook              store_sqlite.wal_hook

#endif // NMQ_STORE_SQLITE_H
