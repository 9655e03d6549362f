// The durable store on SQLite: see store.h. This file holds the database
// (schema, opening and recovery of bad files), the operation queue and the
// store thread with its group commit; store_load.c reads the store back.
#include "src/store/store.h"

#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/log/log.h"
#include "src/store/store_int.h"

// The SQL of each prepared statement, indexed by enum store_stmt.
static const char *const stmt_sql[STMT_COUNT_] = {
	[STMT_MSG_REF] = "UPDATE msgs SET refs = refs + 1 WHERE id = ?1",
	[STMT_MSG_INSERT]
	= "INSERT INTO msgs(refs, topic, qos, retain, expiry_interval,"
	  " expiry_wall_ms, props, payload) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[STMT_MSG_UNREF]       = "UPDATE msgs SET refs = refs - 1 WHERE id = ?1",
	[STMT_MSG_GC]          = "DELETE FROM msgs WHERE id = ?1 AND refs <= 0",
	[STMT_MSG_ADD]         = "UPDATE msgs SET refs = refs + ?2 WHERE id = ?1 RETURNING refs",
	[STMT_MSG_DEL]         = "DELETE FROM msgs WHERE id = ?1",
	[STMT_MSG_DEL_LAST]    = "DELETE FROM msgs WHERE id = ?1 AND refs + ?2 <= 0",
	[STMT_MSG_DEL_RANGE]   = "DELETE FROM msgs WHERE id BETWEEN ?1 AND ?2 AND refs <= 1",
	[STMT_MSG_UNREF_RANGE] = "UPDATE msgs SET refs = refs - 1 WHERE id BETWEEN ?1 AND ?2",
	[STMT_SESSION_GET]     = "SELECT will_msg FROM sessions WHERE cid = ?1",
	[STMT_SESSION_PUT]     = "INSERT OR REPLACE INTO sessions(cid, username, expiry_s, proto,"
	                         " offline_wall_ms, will_msg, will_delay_s)"
	                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[STMT_SESSION_OFFLINE] = "UPDATE sessions SET offline_wall_ms = ?2 WHERE cid = ?1",
	[STMT_SESSION_DEL]     = "DELETE FROM sessions WHERE cid = ?1",
	[STMT_SUBS_DEL_ALL]    = "DELETE FROM subs WHERE cid = ?1",
	[STMT_REL_DEL_ALL]     = "DELETE FROM rel WHERE cid = ?1",
	[STMT_QUEUE_UNREF_ALL]
	= "UPDATE msgs SET refs = refs -"
	  " (SELECT COUNT(*) FROM queue q WHERE q.cid = ?1 AND q.msg_id = msgs.id)"
	  " WHERE id IN (SELECT msg_id FROM queue WHERE cid = ?1)",
	[STMT_QUEUE_GC_ALL]  = "DELETE FROM msgs WHERE refs <= 0 AND"
	                       " id IN (SELECT msg_id FROM queue WHERE cid = ?1)",
	[STMT_QUEUE_DEL_ALL] = "DELETE FROM queue WHERE cid = ?1",
	[STMT_SUB_PUT]       = "INSERT OR REPLACE INTO subs(cid, filter, options, sub_id)"
	                       " VALUES (?1, ?2, ?3, ?4)",
	[STMT_SUB_DEL]       = "DELETE FROM subs WHERE cid = ?1 AND filter = ?2",
	[STMT_QUEUE_PUT]     = "INSERT INTO queue(cid, seq, msg_id, qos, retain, state, packet_id,"
	                       " sub_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?8, ?6)",
	[STMT_QUEUE_STATE]
	= "UPDATE queue SET state = ?3, packet_id = ?4 WHERE cid = ?1 AND seq = ?2",
	[STMT_QUEUE_DEL] = "DELETE FROM queue WHERE cid = ?1 AND seq = ?2 RETURNING msg_id",
	[STMT_QUEUE_DEL_RANGE]
	= "DELETE FROM queue WHERE cid = ?1 AND seq BETWEEN ?2 AND ?3 RETURNING msg_id",
	[STMT_QUEUE_OLDEST] = "SELECT id, cid, seq, msg_id FROM queue WHERE state = 0 ORDER BY id"
	                      " LIMIT ?1",
	[STMT_QUEUE_DEL_ID] = "DELETE FROM queue WHERE id = ?1",
	[STMT_REL_PUT]      = "INSERT OR IGNORE INTO rel(cid, packet_id) VALUES (?1, ?2)",
	[STMT_REL_DEL]      = "DELETE FROM rel WHERE cid = ?1 AND packet_id = ?2",
	[STMT_RETAIN_GET]   = "SELECT msg_id FROM retained WHERE topic = ?1",
	[STMT_RETAIN_PUT]   = "INSERT OR REPLACE INTO retained(topic, msg_id) VALUES (?1, ?2)",
	[STMT_RETAIN_DEL]   = "DELETE FROM retained WHERE topic = ?1",
	[STMT_QUEUE_READ]   = "SELECT q.seq, q.qos, q.retain, q.state, q.packet_id, q.sub_ids,"
	                      " m.topic, m.qos, m.retain, m.expiry_interval, m.expiry_wall_ms,"
	                      " m.props, m.payload, q.msg_id"
	                      " FROM queue q JOIN msgs m ON m.id = q.msg_id"
	                      " WHERE q.cid = ?1 AND q.seq > ?2 ORDER BY q.seq LIMIT ?3",
	[STMT_BEGIN]        = "BEGIN IMMEDIATE",
	[STMT_COMMIT]       = "COMMIT",
	[STMT_ROLLBACK]     = "ROLLBACK",
};

static const char schema_sql[]
    = "CREATE TABLE msgs(id INTEGER PRIMARY KEY, refs INTEGER NOT NULL, topic TEXT NOT NULL,"
      " qos INTEGER NOT NULL, retain INTEGER NOT NULL, expiry_interval INTEGER NOT NULL,"
      " expiry_wall_ms INTEGER NOT NULL, props BLOB, payload BLOB);"
      "CREATE TABLE sessions(cid TEXT PRIMARY KEY, username TEXT, expiry_s INTEGER NOT NULL,"
      " proto INTEGER NOT NULL, offline_wall_ms INTEGER NOT NULL, will_msg INTEGER,"
      " will_delay_s INTEGER NOT NULL) WITHOUT ROWID;"
      "CREATE TABLE subs(cid TEXT NOT NULL, filter TEXT NOT NULL, options INTEGER NOT NULL,"
      " sub_id INTEGER NOT NULL, PRIMARY KEY(cid, filter)) WITHOUT ROWID;"
      "CREATE TABLE queue(id INTEGER PRIMARY KEY, cid TEXT NOT NULL, seq INTEGER NOT NULL,"
      " msg_id INTEGER NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL,"
      " state INTEGER NOT NULL, packet_id INTEGER NOT NULL, sub_ids BLOB, UNIQUE(cid, seq));"
      "CREATE TABLE rel(cid TEXT NOT NULL, packet_id INTEGER NOT NULL,"
      " PRIMARY KEY(cid, packet_id)) WITHOUT ROWID;"
      "CREATE TABLE retained(topic TEXT PRIMARY KEY, msg_id INTEGER NOT NULL) WITHOUT ROWID;";

// Indexes for store_load, so that a startup reads what it needs and not
// every queued row: the rows in flight (a row enters the index when its
// PUBLISH is sent, leaves it when acknowledged) and the messages that can
// expire. Partial, so that a queued row or a message without expiry costs
// nothing more to write. Created with the schema, and added to a file of
// the same schema version that lacks them (they change no row, so a file
// with them is still read by a build without them).
static const char index_sql[]
    = "CREATE INDEX IF NOT EXISTS queue_inflight ON queue(cid, seq) WHERE state != 0;"
      "CREATE INDEX IF NOT EXISTS msgs_expiry ON msgs(expiry_wall_ms)"
      " WHERE expiry_wall_ms != 0;"
      // The bridges' cached forwards that can expire, for the sweep of
      // those that do while the broker runs (store_bcache_expire).
      "CREATE INDEX IF NOT EXISTS bcache_expiry ON bcache(expiry_wall_ms)"
      " WHERE expiry_wall_ms != 0;"
      // The time the broker was last known alive (store_alive.c), and
      // the sessions stored online, which make the idle store write it.
      // Added to older files; a build without them ignores both.
      "CREATE TABLE IF NOT EXISTS alive(id INTEGER PRIMARY KEY, wall_ms INTEGER NOT NULL);"
      // (sessions_online, by offline time, was the first form of it.)
      "DROP INDEX IF EXISTS sessions_online;"
      "CREATE INDEX IF NOT EXISTS sessions_online_expiry ON sessions(expiry_s)"
      " WHERE offline_wall_ms = 0;";

// The tables a store of STORE_SCHEMA_VERSION must have.
static const char *const schema_tables[]
    = { "msgs", "sessions", "subs", "queue", "rel", "retained", "bcache_ids", "bcache" };
// The tables a file of the version before STORE_SCHEMA_BCACHE lacks.
#define SCHEMA_TABLES_BEFORE_BCACHE 6

uint64_t store_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

// ---------------------------------------------------------------------------
// Opening: directories, bad files, schema.

// Creates dir and its parents (mode 0700 for the ones created). Returns 0
// or an errno value.
static int mkdir_p(const char *dir)
{
	char   tmp[4096];
	size_t n = strlen(dir);
	if (n == 0 || n >= sizeof(tmp)) {
		return ENAMETOOLONG;
	}
	memcpy(tmp, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (tmp[i] == '/' || tmp[i] == '\0') {
			char c = tmp[i];
			tmp[i] = '\0';
			if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
				return errno;
			}
			tmp[i] = c;
		}
	}
	struct stat st;
	if (stat(dir, &st) != 0) {
		return errno;
	}
	return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// Counts what a readable but unusable database holds, for the log line
// that says what was lost; "unreadable" when it cannot be counted.
static void describe_loss(sqlite3 *db, char *out, size_t outlen)
{
	static const char *const what[] = { "sessions", "queue", "retained" };
	size_t                   off    = 0;
	out[0]                          = '\0';
	for (size_t i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
		char sql[64];
		snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", what[i]);
		sqlite3_stmt *st = NULL;
		long long     n  = -1;
		if (db != NULL && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK
		    && sqlite3_step(st) == SQLITE_ROW) {
			n = sqlite3_column_int64(st, 0);
		}
		sqlite3_finalize(st);
		if (n < 0) {
			snprintf(out, outlen, "its contents are unreadable");
			return;
		}
		if (i == 1) {
			// And the messages of offline segments (store_oseg.c), when
			// that table can be read (it may be the damaged part).
			st = NULL;
			if (sqlite3_prepare_v2(db,
			        "SELECT COALESCE(SUM(n), 0) FROM oseg WHERE n > 0", -1, &st, NULL)
			        == SQLITE_OK
			    && sqlite3_step(st) == SQLITE_ROW) {
				n += sqlite3_column_int64(st, 0);
			}
			sqlite3_finalize(st);
		}
		off += (size_t)snprintf(out + off, off < outlen ? outlen - off : 0, "%s%s=%lld",
		    i ? " " : "", i == 1 ? "queued_messages" : what[i], n);
	}
}

// Renames path (and its -wal and -shm files) to path.damaged-<UTC time>.
// Returns 0 or an errno value; fills moved_to.
static int move_aside(const char *path, char *moved_to, size_t len)
{
	time_t    t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	char stamp[32];
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(moved_to, len, "%s.damaged-%s", path, stamp);
	// Two damaged files within one second: add a counter.
	for (int i = 1; access(moved_to, F_OK) == 0 && i < 100; i++) {
		snprintf(moved_to, len, "%s.damaged-%s-%d", path, stamp, i);
	}
	if (rename(path, moved_to) != 0 && errno != ENOENT) {
		return errno;
	}
	static const char *const side[] = { "-wal", "-shm" };
	for (size_t i = 0; i < 2; i++) {
		char from[4200], to[4300];
		snprintf(from, sizeof(from), "%s%s", path, side[i]);
		snprintf(to, sizeof(to), "%s%s", moved_to, side[i]);
		if (rename(from, to) != 0 && errno != ENOENT) {
			return errno;
		}
	}
	return 0;
}

static int exec_int(sqlite3 *db, const char *sql, long long *out)
{
	sqlite3_stmt *st = NULL;
	int           rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*out = sqlite3_column_int64(st, 0);
			rc   = SQLITE_OK;
		}
	}
	sqlite3_finalize(st);
	return rc;
}

// The columns of table t in db ("name type notnull pk;" each, in order),
// and its kind ("table", "view", ...; empty when there is no such name).
// False when they cannot be read.
static bool table_shape(sqlite3 *db, const char *t, char *kind, size_t kl, char *cols, size_t cl)
{
	sqlite3_stmt *st = NULL;
	size_t        n  = 0;
	kind[0] = cols[0] = '\0';
	if (sqlite3_prepare_v2(db, "SELECT type FROM sqlite_schema WHERE name = ?1", -1, &st, NULL)
	    != SQLITE_OK) {
		return false;
	}
	sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		snprintf(kind, kl, "%s", (const char *)sqlite3_column_text(st, 0));
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		return false;
	}
	if (sqlite3_prepare_v2(db,
	        "SELECT name, upper(type), \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid",
	        -1, &st, NULL)
	    != SQLITE_OK) {
		return false;
	}
	sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < cl) {
		n += (size_t)snprintf(cols + n, cl - n, "%s %s %d %d;",
		    (const char *)sqlite3_column_text(st, 0),
		    (const char *)sqlite3_column_text(st, 1), sqlite3_column_int(st, 2),
		    sqlite3_column_int(st, 3));
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE && n < cl;
}

// Whether every table of ours that db has is a table with the columns
// this code writes (a file whose tables were changed by hand, or by
// another program that took the same names, cannot have its statements
// prepared: it would stop the broker from starting). Tables added to
// older files at open (alive, held, oseg; the bridges' cache when migrating)
// may be missing; the others were checked to be there.
static bool shape_ok(sqlite3 *db)
{
	sqlite3      *ref = NULL;
	sqlite3_stmt *st  = NULL;
	bool          ok  = false;
	if (sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL)
	        != SQLITE_OK
	    || sqlite3_exec(ref, schema_sql, NULL, NULL, NULL) != SQLITE_OK
	    || sqlite3_exec(ref, store_bcache_schema_sql, NULL, NULL, NULL) != SQLITE_OK
	    || sqlite3_exec(ref, index_sql, NULL, NULL, NULL) != SQLITE_OK
	    || sqlite3_exec(ref, store_hold_schema_sql, NULL, NULL, NULL) != SQLITE_OK
	    || sqlite3_exec(ref, store_oseg_schema_sql, NULL, NULL, NULL) != SQLITE_OK
	    || sqlite3_prepare_v2(
	           ref, "SELECT name FROM sqlite_schema WHERE type = 'table'", -1, &st, NULL)
	        != SQLITE_OK) {
		goto out;
	}
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(st, 0);
		char        k1[16], k2[16], c1[1024], c2[1024];
		if (!table_shape(ref, t, k1, sizeof(k1), c1, sizeof(c1))
		    || !table_shape(db, t, k2, sizeof(k2), c2, sizeof(c2))) {
			goto out;
		}
		if (k2[0] != '\0' && (strcmp(k2, "table") != 0 || strcmp(c1, c2) != 0)) {
			goto out;
		}
	}
	ok = rc == SQLITE_DONE;
out:
	sqlite3_finalize(st);
	sqlite3_close(ref);
	return ok;
}

// Checks that db is a store this code can use. Returns NULL if it is (or
// if it is a new, empty file), otherwise why not.
static const char *check_db(sqlite3 *db, bool *fresh, bool *migrate)
{
	long long app = 0, ver = 0, tables = 0;
	*fresh   = false;
	*migrate = false;
	// The first read of the header: garbage and zeroed files fail here.
	if (exec_int(db, "PRAGMA application_id", &app) != SQLITE_OK
	    || exec_int(db, "PRAGMA user_version", &ver) != SQLITE_OK
	    || exec_int(db, "SELECT COUNT(*) FROM sqlite_schema", &tables) != SQLITE_OK) {
		return "not a database";
	}
	if (app == 0 && ver == 0 && tables == 0) {
		*fresh = true;
		return NULL;
	}
	if (app != STORE_APP_ID) {
		return "a database of another program";
	}
	size_t n_tables = sizeof(schema_tables) / sizeof(schema_tables[0]);
	if (ver == STORE_SCHEMA_BCACHE - 1) {
		// Readable once its bridges' rows moved (store_bcache_migrate).
		*migrate = true;
		n_tables = SCHEMA_TABLES_BEFORE_BCACHE;
	} else if (ver != STORE_SCHEMA_VERSION) {
		return ver > STORE_SCHEMA_VERSION ? "a newer schema version"
		                                  : "an unknown schema version";
	}
	for (size_t i = 0; i < n_tables; i++) {
		char sql[128];
		snprintf(sql, sizeof(sql),
		    "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = '%s'",
		    schema_tables[i]);
		long long n = 0;
		if (exec_int(db, sql, &n) != SQLITE_OK || n != 1) {
			return "missing tables";
		}
	}
	if (!shape_ok(db)) {
		return "tables of another shape";
	}
	// Truncated and partly overwritten files pass the header checks.
	sqlite3_stmt *st  = NULL;
	const char   *bad = NULL;
	if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK) {
		bad = "damaged";
	} else {
		int rc = sqlite3_step(st);
		if (rc != SQLITE_ROW
		    || strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
			bad = "damaged";
		}
	}
	sqlite3_finalize(st);
	return bad;
}

static int apply_pragmas(sqlite3 *db, store_durability d)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
	    "PRAGMA journal_mode = WAL;"
	    "PRAGMA synchronous = %s;"
	    // SQLite's own checkpoint every ~4 MB of WAL while the file is
	    // opened and loaded; from then on the store thread checkpoints
	    // every STORE_CKPT_FRAMES, after a group (store_checkpoint). The
	    // WAL file is cut back to 32 MB after a checkpoint (it is reused
	    // rather than grown again), so it stays bounded on flash.
	    "PRAGMA wal_autocheckpoint = 1000;"
	    "PRAGMA journal_size_limit = 33554432;"
	    // A small page cache: the store is written far more than read.
	    "PRAGMA cache_size = -1024;"
	    "PRAGMA temp_store = MEMORY;",
	    d == STORE_DURABLE_FSYNC ? "FULL" : "NORMAL");
	return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

static int create_schema(sqlite3 *db)
{
	char sql[128];
	int  rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, store_bcache_schema_sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK) {
		snprintf(sql, sizeof(sql), "PRAGMA application_id = %d; PRAGMA user_version = %d;",
		    STORE_APP_ID, STORE_SCHEMA_VERSION);
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	} else {
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	}
	return rc;
}

// True when the directory of path cannot be written (read-only file
// system, no permission): then neither a database nor its WAL can be
// written there, and a file that fails cannot be moved aside.
static bool dir_unwritable(const char *path)
{
	char        dir[4200];
	const char *slash = strrchr(path, '/');
	if (slash == NULL) {
		snprintf(dir, sizeof(dir), ".");
	} else {
		snprintf(
		    dir, sizeof(dir), "%.*s", (int)(slash - path > 0 ? slash - path : 1), path);
	}
	return access(dir, W_OK) != 0 && (errno == EROFS || errno == EACCES || errno == EPERM);
}

// The first of the database, its WAL and its shared-memory file that
// exists and cannot be written (another user's file, a mode without
// write permission), or NULL. SQLite would open such a database read-only
// without a word, and the first write (at startup, restoring it) would
// fail: the broker refused to start with "not an error".
static const char *file_unwritable(const char *path, char *buf, size_t len)
{
	static const char *const sfx[] = { "", "-wal", "-shm" };
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(buf, len, "%s%s", path, sfx[i]);
		if (access(buf, W_OK) != 0
		    && (errno == EROFS || errno == EACCES || errno == EPERM)) {
			return buf;
		}
	}
	return NULL;
}

// What a crash left in db beside the queue (the held rows of
// store_hold.c, the offline segments of store_oseg.c) becomes queue rows
// (restore: the rows, or -1, -2, -3 as below). When that fails (an index
// that no longer matches its table, which the quick_check does not see,
// is the likely cause) the indexes are rebuilt and it is tried again; when
// it fails still, table's rows are dropped, logged at error with how many
// (count_sql) and what they held (lost), so that the rest of the store is
// kept. Returns 0, -1 if even that fails (the file is then moved aside),
// -2 when another process holds the file locked past the busy timeout, or
// -3 when the disk has no room for the writes: in both, nothing more was
// changed, and the broker does not start (the cause is likely passing;
// the file is good).
static int left_restored(sqlite3 *db, const char *path, long (*restore)(sqlite3 *, const char *),
    const char *table, const char *count_sql, const char *event, const char *lost)
{
	long r = restore(db, path);
	if (r >= 0 || r == -2 || r == -3) {
		return r >= 0 ? 0 : (int)r;
	}
	int rc = sqlite3_exec(db, "REINDEX", NULL, NULL, NULL);
	log_error("store", "path=%s event=indexes_rebuilt reason=%s_restore_failed result=%s", path,
	    table, rc == SQLITE_OK ? "ok" : sqlite3_errmsg(db));
	if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) {
		return -2;
	}
	if (rc == SQLITE_OK && (r = restore(db, path)) >= 0) {
		return 0;
	}
	if (r == -2 || r == -3) {
		return (int)r;
	}
	long long n = 0;
	char      del[64];
	exec_int(db, count_sql, &n);
	snprintf(del, sizeof(del), "DELETE FROM %s", table);
	rc = sqlite3_exec(db, del, NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED ? -2 : -1;
	}
	log_error("store", "path=%s event=%s rows=%lld reason=damaged: %s", path, event, n, lost);
	return 0;
}

// A write-ahead log whose header is not one (damaged by hand or by the
// disk): SQLite would take it for an empty log and write over it, so that
// what was committed since the last checkpoint would be gone without a
// word. It is moved aside (path-wal.damaged-<UTC time>) and logged at
// error with its size. A log too short for a header, or with a good
// one, is SQLite's to check (torn frames after a power cut are dropped by
// their checksums, as they should be: they were not acknowledged).
static void check_wal(const char *path)
{
	char wal[4200];
	snprintf(wal, sizeof(wal), "%s-wal", path);
	FILE *f = fopen(wal, "rb");
	if (f == NULL) {
		return;
	}
	uint8_t     h[4];
	struct stat st;
	bool        ok = fstat(fileno(f), &st) != 0 || st.st_size < 32
	    || (fread(h, 1, sizeof(h), f) == sizeof(h) && h[0] == 0x37 && h[1] == 0x7f
	        && h[2] == 0x06 && (h[3] == 0x82 || h[3] == 0x83));
	fclose(f);
	if (ok) {
		return;
	}
	time_t    t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	char stamp[32], to[4300];
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(to, sizeof(to), "%s.damaged-%s", wal, stamp);
	int e = rename(wal, to) == 0 ? 0 : errno;
	log_error("store",
	    "path=%s event=wal_damaged bytes=%lld moved_to=%s lost=\"what was committed since the "
	    "last checkpoint\"%s%s",
	    path, (long long)st.st_size, e == 0 ? to : "none",
	    e == 0 ? "" : " error=", e == 0 ? "" : strerror(e));
}

// A write-ahead log left beside a database file that is missing or empty
// (deleted or truncated to nothing by hand): SQLite takes such a log for
// a stale one and deletes it without a word, with everything committed
// since the last checkpoint (up to decisions/0047's 32 MB of it). Both
// are moved aside (path.damaged-<UTC time>, with -wal and -shm) and the
// loss logged at error, as for any damaged file; returns true then.
static bool check_lone_wal(nmq_store *s)
{
	char        wal[4200];
	struct stat db_st, wal_st;
	snprintf(wal, sizeof(wal), "%s-wal", s->path);
	bool db_empty = stat(s->path, &db_st) != 0 ? errno == ENOENT : db_st.st_size == 0;
	if (!db_empty || stat(wal, &wal_st) != 0 || wal_st.st_size <= 32) {
		return false;
	}
	char moved[4300];
	int  e = move_aside(s->path, moved, sizeof(moved));
	log_error("store",
	    "path=%s event=recovered reason=\"the database file is missing or empty but its "
	    "write-ahead log holds %lld bytes\" moved_to=%s lost=\"what was committed since the "
	    "last checkpoint, and everything before it\"%s%s: starting with an empty store",
	    s->path, (long long)wal_st.st_size, e == 0 ? moved : "none",
	    e == 0 ? "" : " error=", e == 0 ? "" : strerror(e));
	s->recovered = true;
	return true;
}

// Opens path, moving a bad file aside once. Returns the handle or NULL
// with err filled (*unwritable: because its directory, or the file, cannot
// be written).
static sqlite3 *open_db(nmq_store *s, char *err, size_t errlen, bool *unwritable)
{
	*unwritable = false;
	if (dir_unwritable(s->path)) {
		*unwritable = true;
		snprintf(err, errlen,
		    "store: %s: its directory cannot be written (read-only file system or no "
		    "permission)",
		    s->path);
		return NULL;
	}
	char        fbuf[4200];
	const char *f = file_unwritable(s->path, fbuf, sizeof(fbuf));
	if (f != NULL) {
		*unwritable = true;
		snprintf(
		    err, errlen, "store: %s: the file cannot be written (%s)", f, strerror(errno));
		return NULL;
	}
	check_wal(s->path);
	store_wal_check_frames(s->path);
	check_lone_wal(s);
	for (int attempt = 0; attempt < 2; attempt++) {
		sqlite3 *db = NULL;
		// A new file (also after a bad one was moved aside) is the broker
		// user's alone, where SQLite would make it 0644 less the umask: it
		// holds other people's messages. Its WAL and shared-memory files
		// take the database file's mode. An existing file keeps the mode
		// its owner gave it.
		int nfd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (nfd >= 0) {
			close(nfd);
		}
		// NOMUTEX: one thread at a time uses the connection (the main
		// thread until the store thread starts taking operations, which
		// come only after store_load; then the store thread alone).
		int         rc      = sqlite3_open_v2(s->path, &db,
		                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
		const char *bad     = NULL;
		bool        fresh   = false;
		bool        migrate = false;
		if (rc != SQLITE_OK) {
			bad = "cannot be opened";
		} else {
			sqlite3_extended_result_codes(db, 1);
			sqlite3_busy_timeout(db, 5000);
			bad = check_db(db, &fresh, &migrate);
		}
		if (bad == NULL) {
			rc = apply_pragmas(db, s->opts.durability);
			if (rc == SQLITE_OK && fresh) {
				rc = create_schema(db);
			}
			if (rc == SQLITE_OK && migrate
			    && store_bcache_migrate(db, STORE_SCHEMA_BCACHE) != 0) {
				// The migration rolled back: the file is still a good
				// store of the older version, and the cause is likely
				// passing (a full disk, a lock held by another
				// process). It is kept as it is, not moved aside: the
				// broker does not start until it can be migrated.
				snprintf(err, errlen,
				    "store: %s: the file of schema version 1 could not be migrated "
				    "to version %d "
				    "(the cause is logged as event=migration_failed); it is left "
				    "unchanged",
				    s->path, STORE_SCHEMA_VERSION);
				sqlite3_close(db);
				return NULL;
			}
			if (rc == SQLITE_OK) {
				rc = sqlite3_exec(db, index_sql, NULL, NULL, NULL);
			}
			if (rc == SQLITE_OK) {
				rc = sqlite3_exec(db, store_hold_schema_sql, NULL, NULL, NULL);
			}
			if (rc == SQLITE_OK) {
				rc = sqlite3_exec(db, store_oseg_schema_sql, NULL, NULL, NULL);
			}
			// Rows held back by the last group before a crash
			// (store_hold.c) become queue rows before anything reads.
			int held = rc == SQLITE_OK && !fresh
			    ? left_restored(db, s->path, store_hold_expand, "held",
			        "SELECT COUNT(*) FROM held", "held_rows_dropped",
			        "the QoS 1 deliveries they held for connected persistent sessions "
			        "at the crash are lost")
			    : 0;
			// And so do the segments of messages queued for offline
			// sessions (store_oseg.c) that a crash or kill left (rows:
			// the messages they held).
			if (held == 0 && rc == SQLITE_OK && !fresh) {
				held = left_restored(db, s->path, store_oseg_restore, "oseg",
				    "SELECT COALESCE(SUM(n), 0) FROM oseg", "segments_dropped",
				    "the messages they held for offline persistent sessions are "
				    "lost");
			}
			if (held == -2) {
				snprintf(err, errlen,
				    "store: %s: another process holds the file locked; the rows "
				    "held "
				    "back before a crash could not be restored (it is left "
				    "unchanged)",
				    s->path);
				sqlite3_close(db);
				return NULL;
			}
			if (held == -3) {
				snprintf(err, errlen,
				    "store: %s: the disk is full or refused a write; the rows held "
				    "back before a crash could not be restored (the file is left "
				    "unchanged: start again once there is room)",
				    s->path);
				sqlite3_close(db);
				return NULL;
			}
			if (held == -1) {
				bad = "damaged";
				rc  = SQLITE_CORRUPT;
			}
			if (rc == SQLITE_OK) {
				return db;
			}
			if (bad == NULL) {
				bad = "cannot be initialised";
			}
		}
		// A full disk (or a write refused: a file size limit, no room
		// for the WAL's shared memory) is not damage: the file is good,
		// and moving it aside would lose what it holds. It is left as
		// it is and the broker does not start until there is room.
		int xcode = rc != SQLITE_OK ? rc : db != NULL ? sqlite3_extended_errcode(db) : 0;
		if (db != NULL && store_no_room(xcode)) {
			snprintf(err, errlen,
			    "store: %s: the disk is full or refused a write (%s); the file is left "
			    "unchanged: start again once there is room",
			    s->path, sqlite3_errmsg(db));
			sqlite3_close(db);
			return NULL;
		}
		char loss[160];
		describe_loss(fresh ? NULL : db, loss, sizeof(loss));
		const char *why = db != NULL ? sqlite3_errmsg(db) : "out of memory";
		if (attempt == 1 || (rc != SQLITE_OK && access(s->path, F_OK) != 0)) {
			// Nothing to move aside, or a new file failed too.
			snprintf(err, errlen, "store: %s: %s (%s)", s->path, bad, why);
			sqlite3_close(db);
			return NULL;
		}
		sqlite3_close(db);
		char moved[4300];
		int  e = move_aside(s->path, moved, sizeof(moved));
		if (e != 0) {
			snprintf(err, errlen, "store: %s is %s and cannot be moved aside: %s",
			    s->path, bad, strerror(e));
			return NULL;
		}
		log_error("store",
		    "path=%s event=recovered reason=\"%s\" moved_to=%s lost=\"%s\": starting with "
		    "an "
		    "empty store",
		    s->path, bad, moved, loss);
		s->recovered = true;
	}
	return NULL;
}

// ---------------------------------------------------------------------------
// Operations and the queue.

// The pool of operations. A routed message costs up to three operations
// per persistent subscriber: allocating each with calloc on a worker and
// freeing it on the store thread cost as much CPU as applying it. Pooled
// operations have room for STORE_OP_INLINE bytes (sub ids and strings);
// each thread takes them from a cache of its own (refilled under the
// store's mutex, up to POOL_TAKE at a time) and the store thread gives
// them back in bulk after each group, keeping at most POOL_KEEP free ones
// (more are freed). Every pooled operation is on the store's all_ops list,
// so that store_close frees those still cached by some thread.
#define POOL_TAKE 256
#define POOL_KEEP 16384
// What a burst leaves is given back once the store thread has been idle
// for STORE_TRIM_IDLE_MS after a group of STORE_TRIM_GROUP rows or more
// (operations' weight, op_weight): free pooled operations beyond POOL_IDLE_KEEP, the group's tables
// beyond STORE_TRIM_TABLE slots, and the allocator's free pages
// (malloc_trim: the objects kept by pools and free lists are scattered
// over the heap the burst grew, and would pin most of its pages).
#define STORE_TRIM_IDLE_MS 1000
#define STORE_TRIM_GROUP   4096
#define STORE_TRIM_TABLE   16384
#define POOL_IDLE_KEEP     1024

static _Atomic uint64_t store_uids = 1;

static __thread struct {
	nmq_store *s;
	uint64_t   uid; // s->uid when the cache was filled (s may be a new store)
	store_op  *head;
} tl_pool;

// Frees a pooled op (under s->mtx): off the all_ops list.
static void pool_unlink(nmq_store *s, store_op *op)
{
	if (op->all_prev != NULL) {
		op->all_prev->all_next = op->all_next;
	} else {
		s->all_ops = op->all_next;
	}
	if (op->all_next != NULL) {
		op->all_next->all_prev = op->all_prev;
	}
	free(op);
}

// An operation with `extra` bytes behind it, zeroed up to `data`; NULL
// when out of memory.
static store_op *op_get(nmq_store *s, size_t extra)
{
	if (extra > STORE_OP_INLINE) {
		store_op *op = calloc(1, sizeof(*op) + extra);
		return op;
	}
	if (tl_pool.s != s || tl_pool.uid != s->uid) {
		// Another store's cache (its ops are freed with it): left behind.
		tl_pool.s    = s;
		tl_pool.uid  = s->uid;
		tl_pool.head = NULL;
	}
	if (tl_pool.head == NULL) {
		pthread_mutex_lock(&s->mtx);
		store_op *h = s->free_ops;
		if (h != NULL) {
			s->free_ops = h->chain_next;
			s->free_n -= h->chain_n;
			tl_pool.head = h;
		}
		pthread_mutex_unlock(&s->mtx);
	}
	store_op *op = tl_pool.head;
	if (op != NULL) {
		tl_pool.head = op->next;
		store_op *ap = op->all_prev, *an = op->all_next;
		memset(op, 0, offsetof(store_op, data));
		op->all_prev = ap;
		op->all_next = an;
		op->pooled   = true;
		return op;
	}
	op = calloc(1, sizeof(*op) + STORE_OP_INLINE);
	if (op == NULL) {
		return NULL;
	}
	op->pooled = true;
	pthread_mutex_lock(&s->mtx);
	op->all_next = s->all_ops;
	if (s->all_ops != NULL) {
		s->all_ops->all_prev = op;
	}
	s->all_ops = op;
	pthread_mutex_unlock(&s->mtx);
	return op;
}

// Gives op back on a thread that submitted it (refused, or failed after
// close): to that thread's cache.
static void op_drop_data(store_op *op)
{
	nmq_msg_release(op->msg);
	op->msg = NULL;
	free(op->ents);
	free(op->arena);
	op->ents  = NULL;
	op->arena = NULL;
}

static void op_free(nmq_store *s, store_op *op)
{
	op_drop_data(op);
	if (!op->pooled) {
		free(op);
		return;
	}
	if (tl_pool.s != s || tl_pool.uid != s->uid) {
		tl_pool.s    = s;
		tl_pool.uid  = s->uid;
		tl_pool.head = NULL;
	}
	op->next     = tl_pool.head;
	tl_pool.head = op;
}

// The store thread gives a finished group's operations back: chains
// (each at most POOL_TAKE, linked by next, count in its head) linked by
// chain_next, n operations in all.
static void pool_put_chains(nmq_store *s, store_op *chains, uint32_t n)
{
	if (chains == NULL) {
		return;
	}
	store_op *last = chains;
	while (last->chain_next != NULL) {
		last = last->chain_next;
	}
	pthread_mutex_lock(&s->mtx);
	last->chain_next = s->free_ops;
	s->free_ops      = chains;
	s->free_n += n;
	while (s->free_n > POOL_KEEP) {
		store_op *c = s->free_ops;
		s->free_ops = c->chain_next;
		s->free_n -= c->chain_n;
		for (store_op *op = c, *nx; op != NULL; op = nx) {
			nx = op->next;
			pool_unlink(s, op);
		}
	}
	pthread_mutex_unlock(&s->mtx);
}

// An operation with room for two strings and n sub ids.
static store_op *op_new(
    nmq_store *s, uint8_t kind, const char *s1, const char *s2, const uint32_t *ids, uint32_t n_ids)
{
	size_t    l1 = s1 ? strlen(s1) + 1 : 0, l2 = s2 ? strlen(s2) + 1 : 0;
	size_t    idb = (size_t)n_ids * sizeof(uint32_t);
	store_op *op  = op_get(s, idb + l1 + l2);
	if (op == NULL) {
		return NULL;
	}
	op->kind    = kind;
	char *p     = (char *)op->data;
	op->sub_ids = n_ids ? (uint32_t *)(void *)p : NULL;
	if (n_ids) {
		memcpy(p, ids, idb);
	}
	op->n_sub_ids = n_ids;
	p += idb;
	if (s1) {
		op->s1 = memcpy(p, s1, l1);
		p += l1;
	}
	if (s2) {
		op->s2 = memcpy(p, s2, l2);
	}
	return op;
}

// Most done ranges listed for the store thread's peek (store_group_peek).
#define STORE_PDONE_MAX 8192

// Room for barriers beyond 2 * max_pending (see op_submit).
#define STORE_SYNC_EXTRA 4096

struct batch_after {
	void (*fn)(void *arg);
	void *arg;
};
#define BATCH_AFTER_INLINE 32

// The calling thread's open store_batch (see store.h): its operations,
// queued to the store only at store_batch_end.
static __thread struct {
	nmq_store *s; // NULL: none open
	store_op  *head, *tail;
	uint32_t   n;
	uint32_t   marks; // op_marks of its operations
	unsigned   depth;
	bool       failed; // store_batch_after ran out of memory: fail it all
	// store_batch_after: n_after of them, in after_in up to
	// BATCH_AFTER_INLINE, else in after_heap (freed at the batch's end:
	// nothing stays allocated for a thread that exits)
	uint32_t            n_after, cap_after;
	struct batch_after  after_in[BATCH_AFTER_INLINE];
	struct batch_after *after_heap;
} tl_batch;

store_after store_batch_after(nmq_store *s, void (*fn)(void *arg), void *arg)
{
	if (tl_batch.depth == 0 || tl_batch.s != s) {
		return STORE_AFTER_NONE;
	}
	if (tl_batch.failed) {
		return STORE_AFTER_FAILED;
	}
	struct batch_after *v
	    = tl_batch.after_heap != NULL ? tl_batch.after_heap : tl_batch.after_in;
	uint32_t cap = tl_batch.after_heap != NULL ? tl_batch.cap_after : BATCH_AFTER_INLINE;
	if (tl_batch.n_after == cap) {
		uint32_t            ncap = cap * 2;
		struct batch_after *nv   = NULL;
		unsigned            oom  = atomic_load(&s->test_after_oom);
		if (oom > 0) {
			atomic_store(&s->test_after_oom, oom - 1);
		} else {
			nv = malloc((size_t)ncap * sizeof(*nv));
		}
		if (nv == NULL) {
			// The caller cannot learn when its operation is queued, so
			// none of the batch is (decisions/0039: a read or barrier
			// must never overtake it): failed at its end.
			tl_batch.failed = true;
			return STORE_AFTER_FAILED;
		}
		memcpy(nv, v, (size_t)cap * sizeof(*nv));
		free(tl_batch.after_heap);
		tl_batch.after_heap = nv;
		tl_batch.cap_after  = ncap;
		v                   = nv;
	}
	v[tl_batch.n_after++] = (struct batch_after) { fn, arg };
	return STORE_AFTER_SET;
}

// Runs (and forgets) what store_batch_after registered for the batch that
// just ended.
static void batch_after_run(void)
{
	uint32_t n = tl_batch.n_after;
	if (n == 0) {
		return;
	}
	struct batch_after *heap = tl_batch.after_heap;
	struct batch_after *v    = heap != NULL ? heap : tl_batch.after_in;
	tl_batch.n_after         = 0;
	tl_batch.after_heap      = NULL;
	tl_batch.cap_after       = 0;
	if (heap == NULL) {
		// fn may open (and end) another batch: run from a copy.
		struct batch_after copy[BATCH_AFTER_INLINE];
		memcpy(copy, v, (size_t)n * sizeof(*v));
		v = copy;
		for (uint32_t i = 0; i < n; i++) {
			v[i].fn(v[i].arg);
		}
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		v[i].fn(v[i].arg);
	}
	free(heap);
}

// The rows of a multi-put grow by doubling; once its store_batch is
// complete they stay as they are until the store thread has written them
// (under a flood, tens of thousands of publishes at once), so the room
// beyond them is given back: a message routed to 100 sessions kept 6 kB
// of rows (128 of 32 bytes, a 2 kB arena) for 4.4 kB used.
static void putm_fit(store_op *op)
{
	for (; op != NULL; op = op->next) {
		if (op->kind != OP_QUEUE_PUTM) {
			continue;
		}
		if (op->ents_cap > 16 && op->ents_cap > op->u32) {
			store_qent *v = realloc(op->ents, (size_t)op->u32 * sizeof(*v));
			if (v != NULL) {
				op->ents     = v;
				op->ents_cap = op->u32;
			}
		}
		if (op->arena_cap > 256 && op->arena_cap > op->arena_len) {
			char *a = realloc(op->arena, op->arena_len);
			if (a != NULL) {
				op->arena     = a;
				op->arena_cap = op->arena_len;
			}
		}
	}
}

void store_batch_begin(nmq_store *s)
{
	if (tl_batch.depth++ == 0) {
		tl_batch.s    = s;
		tl_batch.head = tl_batch.tail = NULL;
		tl_batch.n                    = 0;
		tl_batch.marks                = 0;
		tl_batch.failed               = false;
	}
}

void store_batch_end(nmq_store *s)
{
	if (tl_batch.depth == 0 || --tl_batch.depth > 0) {
		return;
	}
	s          = tl_batch.s; // the batch's store: nothing is left stranded
	tl_batch.s = NULL;
	if (tl_batch.head == NULL) {
		batch_after_run();
		return;
	}
	tl_batch.tail->more = false;
	putm_fit(tl_batch.head);
	pthread_mutex_lock(&s->mtx);
	if (s->exited || tl_batch.failed) {
		// Closed meanwhile, or failed (store_batch_after): fail them as
		// the store's thread would.
		nmq_err err = s->exited ? NMQ_ECLOSED : NMQ_ENOMEM;
		pthread_mutex_unlock(&s->mtx);
		if (tl_batch.failed) {
			atomic_fetch_add(&s->failed, tl_batch.n);
		}
		for (store_op *op = tl_batch.head, *nx; op != NULL; op = nx) {
			nx = op->next;
			if (op->done != NULL) {
				op->done(op->arg, err);
			}
			op_free(s, op);
		}
		tl_batch.head = tl_batch.tail = NULL;
		tl_batch.n                    = 0;
		tl_batch.marks                = 0;
		batch_after_run();
		return;
	}
	// Admitted one by one at submit time (with what the batch already
	// held counted): queued now whatever the level, even when stopping,
	// since the thread drains everything queued before it ends.
	if (s->tail) {
		s->tail->next = tl_batch.head;
	} else {
		s->head = tl_batch.head;
	}
	s->tail = tl_batch.tail;
	s->pending += tl_batch.n;
	s->mark_ops += tl_batch.marks;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	tl_batch.head = tl_batch.tail = NULL;
	tl_batch.n                    = 0;
	tl_batch.marks                = 0;
	batch_after_run();
}

// Whether op is one store_group_coalesce must see before the others.
static inline uint32_t op_marks(const store_op *op)
{
	return op->kind == OP_QUEUE_DONE || (op->kind == OP_SESSION_DEL && op->sid != 0);
}

// Queues op (ownership passes on NMQ_OK; freed otherwise).
static nmq_err op_submit(nmq_store *s, store_op *op, store_done_fn done, void *arg)
{
	if (op == NULL) {
		return NMQ_ENOMEM;
	}
	op->done  = done;
	op->arg   = arg;
	bool in_b = tl_batch.s == s;
	if (in_b && tl_batch.failed) {
		// store_batch_after failed it: nothing more goes in.
		op_free(s, op);
		return NMQ_ENOMEM;
	}
	if (in_b) {
		// Admitted without the mutex (the level may be a few operations
		// stale: the bound is one of memory, not of correctness); queued
		// with the rest at store_batch_end.
		uint64_t level = atomic_load_explicit(&s->pending, memory_order_relaxed)
		    + (uint64_t)tl_batch.n;
		if (atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
			op_free(s, op);
			return NMQ_ECLOSED;
		}
		if (level >= s->opts.max_pending
		    && (op->kind != OP_SYNC
		        || level >= 2 * (uint64_t)s->opts.max_pending + STORE_SYNC_EXTRA)) {
			op_free(s, op);
			return NMQ_ELIMIT;
		}
		op->more = true;
		tl_batch.marks += op_marks(op);
		if (tl_batch.tail) {
			tl_batch.tail->next = op;
		} else {
			tl_batch.head = op;
		}
		tl_batch.tail = op;
		tl_batch.n++;
		return NMQ_OK;
	}
	pthread_mutex_lock(&s->mtx);
	if (s->stopping) {
		pthread_mutex_unlock(&s->mtx);
		op_free(s, op);
		return NMQ_ECLOSED;
	}
	// A barrier holds no data and orders the acks of writes already
	// queued (or of a refusal): it has room of its own, for the frames a
	// publisher's last read held after the store became congested.
	uint64_t level = s->pending;
	if (level >= s->opts.max_pending
	    && (op->kind != OP_SYNC
	        || level >= 2 * (uint64_t)s->opts.max_pending + STORE_SYNC_EXTRA)) {
		pthread_mutex_unlock(&s->mtx);
		op_free(s, op);
		return NMQ_ELIMIT;
	}
	if (s->tail) {
		s->tail->next = op;
	} else {
		s->head = op;
	}
	s->tail = op;
	s->pending++;
	s->mark_ops += op_marks(op);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	return NMQ_OK;
}

nmq_err store_session_put(nmq_store *s, const store_session *rec, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_SESSION_PUT, rec->client_id, rec->username, NULL, 0);
	if (op != NULL) {
		op->has_s2 = rec->username != NULL;
		op->u32    = rec->expiry_s;
		op->u32b   = rec->will_delay_s;
		op->u64    = rec->offline_wall_ms;
		op->qos    = rec->proto_ver;
		if (rec->will_msg != NULL) {
			nmq_msg_hold(rec->will_msg);
			op->msg = rec->will_msg;
		}
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_session_del_sid(
    nmq_store *s, const char *client_id, uint32_t sid, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_SESSION_DEL, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->sid = sid;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_session_del(nmq_store *s, const char *client_id, store_done_fn done, void *arg)
{
	return store_session_del_sid(s, client_id, 0, done, arg);
}

nmq_err store_queue_done_sid(nmq_store *s, const char *client_id, uint32_t sid, uint64_t lo,
    uint64_t hi, void **slot_op, uint64_t *slot_gen)
{
	if (sid == 0 || hi < lo) {
		return NMQ_EINVAL;
	}
	if (tl_batch.s != s && *slot_op != NULL) {
		pthread_mutex_lock(&s->mtx);
		store_op *op = *slot_op;
		if (*slot_gen == s->take_gen && op->kind == OP_QUEUE_DONE && op->sid == sid
		    && op->u64b + 1 == lo) {
			// Not taken yet: the range grows in place.
			op->u64b = hi;
			if (op->u32 < s->pdone_len && s->pdone[op->u32].sid == sid) {
				s->pdone[op->u32].hi = hi;
				atomic_fetch_add_explicit(&s->pdone_gen, 1, memory_order_release);
			}
			pthread_mutex_unlock(&s->mtx);
			return NMQ_OK;
		}
		pthread_mutex_unlock(&s->mtx);
	}
	*slot_op     = NULL;
	store_op *op = op_new(s, OP_QUEUE_DONE, client_id, NULL, NULL, 0);
	if (op == NULL) {
		return NMQ_ENOMEM;
	}
	op->sid  = sid;
	op->u64  = lo;
	op->u64b = hi;
	if (tl_batch.s == s) {
		return op_submit(s, op, NULL, NULL);
	}
	// As op_submit, remembering where it went.
	pthread_mutex_lock(&s->mtx);
	if (s->stopping || s->pending >= s->opts.max_pending) {
		bool closed = s->stopping;
		pthread_mutex_unlock(&s->mtx);
		op_free(s, op);
		return closed ? NMQ_ECLOSED : NMQ_ELIMIT;
	}
	if (s->tail) {
		s->tail->next = op;
	} else {
		s->head = op;
	}
	s->tail = op;
	s->pending++;
	s->mark_ops++;
	// Seen by the store thread while it applies the groups before this
	// operation's (store_group_peek); without an entry (out of memory)
	// only its own group knows the range.
	// The list is emptied only when the store thread takes the whole
	// queue; under a backlog longer than flush_max that does not happen,
	// so it is bounded (the peek walks it under the lock the workers
	// queue with): past STORE_PDONE_MAX, ranges are seen by their own
	// group only, as without memory.
	op->u32 = UINT32_MAX;
	if (s->pdone_len == s->pdone_cap && s->pdone_cap < STORE_PDONE_MAX) {
		uint32_t            cap = s->pdone_cap ? s->pdone_cap * 2 : 256;
		struct store_pdone *v   = realloc(s->pdone, (size_t)cap * sizeof(*v));
		if (v != NULL) {
			s->pdone     = v;
			s->pdone_cap = cap;
		}
	}
	if (s->pdone_len < s->pdone_cap) {
		op->u32                  = s->pdone_len;
		s->pdone[s->pdone_len++] = (struct store_pdone) { sid, hi };
		atomic_fetch_add_explicit(&s->pdone_gen, 1, memory_order_release);
	}
	*slot_op  = op;
	*slot_gen = s->take_gen;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	return NMQ_OK;
}

nmq_err store_session_offline(
    nmq_store *s, const char *client_id, uint64_t wall_ms, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_SESSION_OFFLINE, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->u64 = wall_ms;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_sub_put(nmq_store *s, const store_sub *sub, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_SUB_PUT, sub->client_id, sub->filter, NULL, 0);
	if (op != NULL) {
		op->qos = sub->options;
		op->u32 = sub->sub_id;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_sub_del(
    nmq_store *s, const char *client_id, const char *filter, store_done_fn done, void *arg)
{
	return op_submit(s, op_new(s, OP_SUB_DEL, client_id, filter, NULL, 0), done, arg);
}

uint32_t store_sid_new(nmq_store *s)
{
	uint32_t sid;
	do {
		sid = atomic_fetch_add_explicit(&s->next_sid, 1, memory_order_relaxed);
	} while (sid == 0);
	return sid;
}

// Appends n bytes at a 4-byte aligned offset of op's arena; returns the
// offset, or UINT32_MAX when out of memory.
static uint32_t arena_add(store_op *op, const void *p, size_t n)
{
	size_t off = ((size_t)op->arena_len + 3u) & ~(size_t)3u;
	if (off + n > op->arena_cap) {
		size_t cap = op->arena_cap ? (size_t)op->arena_cap * 2 : 256;
		while (cap < off + n) {
			cap *= 2;
		}
		if (cap > UINT32_MAX) {
			return UINT32_MAX;
		}
		char *a = realloc(op->arena, cap);
		if (a == NULL) {
			return UINT32_MAX;
		}
		op->arena     = a;
		op->arena_cap = (uint32_t)cap;
	}
	memcpy(op->arena + off, p, n);
	op->arena_len = (uint32_t)(off + n);
	return (uint32_t)off;
}

// Adds a queue row to op (an OP_QUEUE_PUTM). Returns false when out of
// memory (op unchanged).
static bool putm_add(store_op *op, const char *client_id, uint32_t sid, uint64_t seq, uint8_t qos,
    bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids, bool live)
{
	if (op->u32 == op->ents_cap) {
		uint32_t    cap = op->ents_cap ? op->ents_cap * 2 : 16;
		store_qent *v   = realloc(op->ents, (size_t)cap * sizeof(*v));
		if (v == NULL) {
			return false;
		}
		op->ents     = v;
		op->ents_cap = cap;
	}
	uint32_t len = op->arena_len;
	uint32_t c   = arena_add(op, client_id, strlen(client_id) + 1);
	uint32_t ids = n_sub_ids ? arena_add(op, sub_ids, (size_t)n_sub_ids * sizeof(uint32_t)) : 0;
	if (c == UINT32_MAX || ids == UINT32_MAX || n_sub_ids > UINT16_MAX) {
		op->arena_len = len;
		return false;
	}
	op->ents[op->u32++] = (store_qent) {
		.seq     = seq,
		.sid     = sid,
		.cid_off = c,
		.ids_off = ids,
		.n_ids   = (uint16_t)n_sub_ids,
		.qos     = qos,
		.retain  = retain,
		.live    = live,
	};
	return true;
}

// Inside a store_batch, consecutive puts of one message (what routing it
// to many sessions writes) become one OP_QUEUE_PUTM: one operation and
// one hold of the message per PUBLISH instead of one per session. Each
// row is admitted as an operation of its own. Returns NMQ_OK, an error,
// or NMQ_EBUSY when the put is to be an operation of its own.
static nmq_err put_batched(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids, bool live)
{
	store_op *t = tl_batch.tail;
	if (t == NULL || t->msg != msg || (t->kind != OP_QUEUE_PUTM && t->kind != OP_QUEUE_PUT)
	    || t->done != NULL) {
		return NMQ_EBUSY;
	}
	uint64_t level
	    = atomic_load_explicit(&s->pending, memory_order_relaxed) + (uint64_t)tl_batch.n;
	if (atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
		return NMQ_ECLOSED;
	}
	if (level >= s->opts.max_pending) {
		return NMQ_ELIMIT;
	}
	if (t->kind == OP_QUEUE_PUT) {
		// The second row of this message: the put becomes a multi-put.
		if (!putm_add(t, t->s1, t->sid, t->u64, t->qos, t->retain, t->sub_ids, t->n_sub_ids,
		        t->live)) {
			free(t->ents);
			free(t->arena);
			t->ents = NULL, t->arena = NULL, t->u32 = 0, t->ents_cap = 0;
			t->arena_len = t->arena_cap = 0;
			return NMQ_EBUSY;
		}
		t->kind = OP_QUEUE_PUTM;
	}
	if (!putm_add(t, client_id, sid, seq, qos, retain, sub_ids, n_sub_ids, live)) {
		return NMQ_EBUSY;
	}
	tl_batch.n++;
	return NMQ_OK;
}

static nmq_err queue_put(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids,
    store_done_fn done, void *arg, bool live)
{
	if (tl_batch.s == s && done == NULL) {
		nmq_err e = put_batched(
		    s, client_id, sid, seq, msg, qos, retain, sub_ids, n_sub_ids, live);
		if (e != NMQ_EBUSY) {
			return e;
		}
	}
	store_op *op = op_new(s, OP_QUEUE_PUT, client_id, NULL, sub_ids, n_sub_ids);
	if (op != NULL) {
		nmq_msg_hold(msg);
		op->msg    = msg;
		op->sid    = sid;
		op->u64    = seq;
		op->qos    = qos;
		op->retain = retain;
		op->live   = live;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_queue_put_sid(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids,
    store_done_fn done, void *arg)
{
	return queue_put(
	    s, client_id, sid, seq, msg, qos, retain, sub_ids, n_sub_ids, done, arg, false);
}

nmq_err store_queue_put_live(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    nmq_msg *msg, uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids)
{
	return queue_put(
	    s, client_id, sid, seq, msg, qos, retain, sub_ids, n_sub_ids, NULL, NULL, true);
}

nmq_err store_queue_put(nmq_store *s, const char *client_id, uint64_t seq, nmq_msg *msg,
    uint8_t qos, bool retain, const uint32_t *sub_ids, uint32_t n_sub_ids, store_done_fn done,
    void *arg)
{
	return store_queue_put_sid(
	    s, client_id, 0, seq, msg, qos, retain, sub_ids, n_sub_ids, done, arg);
}

// A queue row's state (and, for a bridge's cached forward, the server of
// its PUBREC).
static nmq_err queue_state_op(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    uint8_t state, uint16_t packet_id, uint32_t server, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_QUEUE_STATE, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->sid   = sid;
		op->u64   = seq;
		op->state = state;
		op->pid   = packet_id;
		op->srv   = server;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_queue_state_sid(nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq,
    uint8_t state, uint16_t packet_id, store_done_fn done, void *arg)
{
	return queue_state_op(s, client_id, sid, seq, state, packet_id, 0, done, arg);
}

nmq_err store_queue_state(nmq_store *s, const char *client_id, uint64_t seq, uint8_t state,
    uint16_t packet_id, store_done_fn done, void *arg)
{
	return queue_state_op(s, client_id, 0, seq, state, packet_id, 0, done, arg);
}

nmq_err store_queue_state_srv(nmq_store *s, const char *client_id, uint64_t seq, uint8_t state,
    uint16_t packet_id, uint32_t server, store_done_fn done, void *arg)
{
	return queue_state_op(s, client_id, 0, seq, state, packet_id, server, done, arg);
}

nmq_err store_queue_del_sid(
    nmq_store *s, const char *client_id, uint32_t sid, uint64_t seq, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_QUEUE_DEL, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->sid = sid;
		op->u64 = seq;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_queue_del(
    nmq_store *s, const char *client_id, uint64_t seq, store_done_fn done, void *arg)
{
	return store_queue_del_sid(s, client_id, 0, seq, done, arg);
}

nmq_err store_queue_del_many(nmq_store *s, const char *client_id, const uint64_t *seqs, uint32_t n,
    store_done_fn done, void *arg)
{
	size_t    l1 = strlen(client_id) + 1;
	store_op *op = op_get(s, (size_t)n * sizeof(uint64_t) + l1);
	if (op != NULL) {
		op->kind = OP_QUEUE_DEL_MANY;
		op->u32  = n;
		memcpy(op->data, seqs, (size_t)n * sizeof(uint64_t));
		op->s1 = memcpy((char *)(op->data + n), client_id, l1);
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_queue_del_ranges(nmq_store *s, const char *client_id, const uint64_t *lohi,
    uint32_t n, store_done_fn done, void *arg)
{
	size_t    l1 = strlen(client_id) + 1;
	store_op *op = op_get(s, (size_t)n * 2 * sizeof(uint64_t) + l1);
	if (op != NULL) {
		op->kind = OP_QUEUE_DEL_RANGES;
		op->u32  = n;
		memcpy(op->data, lohi, (size_t)n * 2 * sizeof(uint64_t));
		op->s1 = memcpy((char *)(op->data + 2 * (size_t)n), client_id, l1);
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_rel_put(
    nmq_store *s, const char *client_id, uint16_t packet_id, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_REL_PUT, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->pid = packet_id;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_rel_del(
    nmq_store *s, const char *client_id, uint16_t packet_id, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_REL_DEL, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->pid = packet_id;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_retain_put(
    nmq_store *s, const char *topic, nmq_msg *msg, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_RETAIN_PUT, topic, NULL, NULL, 0);
	if (op != NULL && msg != NULL) {
		nmq_msg_hold(msg);
		op->msg = msg;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_subs_read(nmq_store *s, const char              *client_id,
    void (*fn)(void *arg, const store_sub *sub), store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_SUBS_READ, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->sub_fn = fn;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_rels_read(nmq_store *s, const char            *client_id,
    void (*fn)(void *arg, uint16_t packet_id), store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_RELS_READ, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->rel_fn = fn;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_sync(nmq_store *s, store_done_fn done, void *arg)
{
	// Inside a store_batch whose last operation has no completion of its
	// own (a publish's queue rows, before the ack's barrier): the barrier
	// rides on it, in the same group, at the same place in the order of
	// completions, and costs no operation of its own (a waiting QoS 1 ack
	// under a flood was one pooled operation, some 290 bytes, each).
	if (tl_batch.s == s && !tl_batch.failed && tl_batch.tail != NULL
	    && tl_batch.tail->done == NULL) {
		if (atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
			return NMQ_ECLOSED;
		}
		tl_batch.tail->done    = done;
		tl_batch.tail->arg     = arg;
		tl_batch.tail->barrier = true;
		return NMQ_OK;
	}
	return op_submit(s, op_new(s, OP_SYNC, NULL, NULL, NULL, 0), done, arg);
}

uint64_t store_sync_mark(nmq_store *s)
{
	return atomic_load_explicit(&s->take_gen, memory_order_acquire);
}

nmq_err store_sync_since(nmq_store *s, uint64_t mark, store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_SYNC, NULL, NULL, NULL, 0);
	if (op != NULL) {
		op->since = true;
		op->u64   = mark;
	}
	return op_submit(s, op, done, arg);
}

nmq_err store_queue_read(nmq_store *s, const char *client_id, uint64_t after_seq, uint32_t max,
    void (*fn)(void *arg, const store_qmsg *q), store_done_fn done, void *arg)
{
	store_op *op = op_new(s, OP_QUEUE_READ, client_id, NULL, NULL, 0);
	if (op != NULL) {
		op->u64     = after_seq;
		op->u32     = max;
		op->read_fn = fn;
	}
	return op_submit(s, op, done, arg);
}

// ---------------------------------------------------------------------------
// The store thread.

// Returns the prepared statement i, reset and with its bindings cleared.
sqlite3_stmt *store_stmt(nmq_store *s, enum store_stmt i)
{
	return store_stmt_fresh(s->stmts[i]);
}

sqlite3_stmt *store_stmt_fresh(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return st;
}

int store_step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc;
}

// Takes one reference to the row of m, inserting it if it has none (or if
// the row it had was deleted since). Inside a group the count is only
// summed (store_group_ref) and written once at the end of the group.
// Returns the row id, or 0 on error.
static int64_t msg_ref(nmq_store *s, nmq_msg *m, uint64_t now_wall, uint64_t now_mono)
{
	if (m->store_id != 0) {
		int64_t id = (int64_t)m->store_id;
		if (s->in_group && store_group_ref(s, id, 1) == 1) {
			return id; // touched by this group: the row exists
		}
		sqlite3_stmt *st = store_stmt(s, STMT_MSG_REF);
		sqlite3_bind_int64(st, 1, (sqlite3_int64)m->store_id);
		if (store_step_done(st) != SQLITE_DONE) {
			return 0;
		}
		if (sqlite3_changes(s->db) == 1) {
			if (s->in_group) {
				store_group_ref(s, id, -1); // counted by the UPDATE
			}
			return id;
		}
		if (s->in_group) {
			store_group_ref(s, id, -1); // no such row: undo the +1
		}
	}
	sqlite3_stmt *st          = store_stmt(s, STMT_MSG_INSERT);
	uint64_t      expiry_wall = 0;
	if (m->expiry_at_ms != 0) {
		expiry_wall
		    = now_wall + (m->expiry_at_ms > now_mono ? m->expiry_at_ms - now_mono : 0);
	}
	sqlite3_bind_text(st, 1, m->topic, m->topic_len, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, m->qos);
	sqlite3_bind_int(st, 3, m->retain);
	sqlite3_bind_int64(st, 4, m->expiry_interval);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)expiry_wall);
	sqlite3_bind_blob(st, 6, m->props, (int)m->props_len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, m->payload, (int)m->payload_len, SQLITE_STATIC);
	if (store_step_done(st) != SQLITE_DONE) {
		return 0;
	}
	// Not entered in the group's reference table: most rows get one
	// reference; a second one goes through the UPDATE above once, and
	// the sum from then on.
	int64_t id = sqlite3_last_insert_rowid(s->db);
	// Remember the row for later references; undone if the batch fails.
	if (s->batch_msgs_len == s->batch_msgs_cap) {
		size_t    cap = s->batch_msgs_cap ? s->batch_msgs_cap * 2 : 64;
		nmq_msg **v   = realloc(s->batch_msgs, cap * sizeof(*v));
		if (v == NULL) {
			return id; // the row is right; only the reuse is lost
		}
		s->batch_msgs     = v;
		s->batch_msgs_cap = cap;
	}
	m->store_id                        = (uint64_t)id;
	s->batch_msgs[s->batch_msgs_len++] = m;
	return id;
}

int64_t store_msg_ref(nmq_store *s, nmq_msg *m, uint64_t now_wall, uint64_t now_mono)
{
	return msg_ref(s, m, now_wall, now_mono);
}

// Drops one reference to message row id, deleting the row with the last
// (inside a group: at the end of the group).
static int msg_unref(nmq_store *s, int64_t id)
{
	if (s->in_group) {
		int r = store_group_ref(s, id, -1);
		if (r < 0) {
			// The group's table is full: write what it holds, go on.
			if (store_group_flush_refs(s) != 0) {
				return -1;
			}
			r = store_group_ref(s, id, -1);
		}
		if (r >= 0) {
			return 0;
		}
	}
	sqlite3_stmt *st = store_stmt(s, STMT_MSG_UNREF);
	sqlite3_bind_int64(st, 1, id);
	if (store_step_done(st) != SQLITE_DONE) {
		return -1;
	}
	st = store_stmt(s, STMT_MSG_GC);
	sqlite3_bind_int64(st, 1, id);
	return store_step_done(st) == SQLITE_DONE ? 0 : -1;
}

// Deletes the queue row (cid, seq) if it exists, and its message's
// reference. Returns 0 or -1.
static int queue_del_one(nmq_store *s, const char *cid, uint64_t seq)
{
	sqlite3_stmt *st = store_stmt(s, STMT_QUEUE_DEL);
	sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
	int64_t id = 0;
	int     rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		id = sqlite3_column_int64(st, 0);
		rc = sqlite3_step(st);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	if (id != 0) {
		s->queued_rows--;
		return msg_unref(s, id);
	}
	return 0;
}

// Deletes the queue rows of cid with seq in [lo, hi] (every seq of the
// range was asked for: a seq not stored is skipped), and their messages'
// references. Returns 0 or -1.
static int queue_del_range(nmq_store *s, const char *cid, uint64_t lo, uint64_t hi)
{
	sqlite3_stmt *st = store_stmt(s, STMT_QUEUE_DEL_RANGE);
	sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)lo);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)hi);
	int rc;
	int ret = 0;
	// The rows are deleted by the first step (RETURNING): the references
	// can be dropped while the statement hands back their message ids.
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		s->queued_rows--;
		if (ret == 0 && msg_unref(s, sqlite3_column_int64(st, 0)) != 0) {
			ret = -1;
		}
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? ret : -1;
}

// Deletes a session's queue, subscriptions and QoS 2 state, not its row.
int store_session_purge_state(nmq_store *s, const char *cid)
{
	static const enum store_stmt steps[] = { STMT_QUEUE_UNREF_ALL, STMT_QUEUE_GC_ALL,
		STMT_QUEUE_DEL_ALL, STMT_SUBS_DEL_ALL, STMT_REL_DEL_ALL };
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		sqlite3_stmt *st = store_stmt(s, steps[i]);
		sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
		if (store_step_done(st) != SQLITE_DONE) {
			return -1;
		}
		if (steps[i] == STMT_QUEUE_DEL_ALL) {
			s->queued_rows -= (uint64_t)sqlite3_changes(s->db);
		}
	}
	return 0;
}

// Deletes a session's queue, subscriptions, QoS 2 state and row (with its
// will). Used by OP_SESSION_DEL and by expiry at load.
int store_session_purge(nmq_store *s, const char *cid)
{
	if (store_session_purge_state(s, cid) != 0) {
		return -1;
	}
	sqlite3_stmt *st = store_stmt(s, STMT_SESSION_GET);
	sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
	int64_t will = 0;
	int     rc   = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		will = sqlite3_column_int64(st, 0);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		return -1;
	}
	if (will != 0 && msg_unref(s, will) != 0) {
		return -1;
	}
	st = store_stmt(s, STMT_SESSION_DEL);
	sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
	return store_step_done(st) == SQLITE_DONE ? 0 : -1;
}

// Replaces the retained message of topic (msg NULL: clears it).
static int retain_set(nmq_store *s, const char *topic, nmq_msg *msg, uint64_t wall, uint64_t mono)
{
	sqlite3_stmt *st = store_stmt(s, STMT_RETAIN_GET);
	sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
	int64_t old = 0;
	int     rc  = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		old = sqlite3_column_int64(st, 0);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		return -1;
	}
	if (old != 0 && msg_unref(s, old) != 0) {
		return -1;
	}
	if (msg == NULL) {
		st = store_stmt(s, STMT_RETAIN_DEL);
		sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	}
	int64_t id = msg_ref(s, msg, wall, mono);
	if (id == 0) {
		return -1;
	}
	st = store_stmt(s, STMT_RETAIN_PUT);
	sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, id);
	return store_step_done(st) == SQLITE_DONE ? 0 : -1;
}

// Writes the queue row (cid, seq) of message msg_id, noted for the
// coalescing of done ranges (store_group_note_row). Returns 0, 1 when the
// seq was stored already (the first row is kept, msg_id's reference given
// back), or -1 on error.
static int queue_row_put(nmq_store *s, const char *cid, uint32_t sid, uint64_t seq, int64_t msg_id,
    uint8_t qos, bool retain, const void *ids, uint32_t n_ids, uint8_t state, uint16_t pid)
{
	store_group_note_row(s, sid, seq, true);
	sqlite3_stmt *st = store_stmt(s, STMT_QUEUE_PUT);
	sqlite3_bind_text(st, 1, cid, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
	sqlite3_bind_int64(st, 3, msg_id);
	sqlite3_bind_int(st, 4, qos);
	sqlite3_bind_int(st, 5, retain);
	if (n_ids) {
		sqlite3_bind_blob(st, 6, ids, (int)(n_ids * sizeof(uint32_t)), SQLITE_STATIC);
	}
	sqlite3_bind_int(st, 7, state);
	sqlite3_bind_int(st, 8, pid);
	int rc = store_step_done(st);
	if (rc == SQLITE_DONE) {
		s->queued_rows++;
		return 0;
	}
	if ((rc & 0xff) == SQLITE_CONSTRAINT) {
		return msg_unref(s, msg_id) == 0 ? 1 : -1;
	}
	return -1;
}

int store_hold_row(nmq_store *s, const char *cid, uint32_t sid, uint64_t seq, int64_t msg_id,
    uint8_t qos, bool retain, const uint32_t *ids, uint16_t n_ids)
{
	// (A seq stored twice keeps the first.)
	return queue_row_put(s, cid, sid, seq, msg_id, qos, retain, ids, n_ids, 0, 0) < 0 ? -1 : 0;
}

int store_hold_unref(nmq_store *s, int64_t msg_id)
{
	return msg_unref(s, msg_id);
}

// Applies one operation inside the open transaction. Returns 0, 1 if only
// this operation failed (a constraint: it is answered NMQ_EINVAL and the
// batch goes on), or -1 if the transaction must be rolled back.
// The offline segments (store_oseg.c) of op's client id that op reads or
// changes become queue rows first.
static int oseg_expand_for(nmq_store *s, store_op *op)
{
	uint64_t max_seq = 0;
	switch (op->kind) {
	case OP_QUEUE_READ:
		return store_oseg_expand_to(s, op->s1, 0, op->u32 != 0 ? op->u32 : UINT32_MAX);
	case OP_QUEUE_STATE:
	case OP_QUEUE_DEL:
		max_seq = op->u64;
		break;
	case OP_QUEUE_DEL_RANGES:
		for (uint32_t i = 0; i < op->u32; i++) {
			max_seq = op->data[2 * i + 1] > max_seq ? op->data[2 * i + 1] : max_seq;
		}
		break;
	case OP_QUEUE_DEL_MANY:
		for (uint32_t i = 0; i < op->u32; i++) {
			max_seq = op->data[i] > max_seq ? op->data[i] : max_seq;
		}
		break;
	default: // a session deleted: all of them
		max_seq = UINT64_MAX;
		break;
	}
	return store_oseg_expand_to(s, op->s1, max_seq, 0);
}

static int op_apply(nmq_store *s, store_op *op, uint64_t wall, uint64_t mono)
{
	sqlite3_stmt *st;
	int           rc;
	if (op->skip) {
		return 0;
	}
	switch (op->kind) {
	case OP_QUEUE_STATE:
	case OP_QUEUE_DEL:
	case OP_QUEUE_DEL_MANY:
	case OP_QUEUE_DEL_RANGES:
	case OP_QUEUE_READ:
	case OP_SESSION_DEL:
		// They read or delete rows by SQL: the rows held back so far in
		// this group are written first (store_hold.c).
		if (store_hold_flush_all(s) != 0) {
			return -1;
		}
		// And the session's offline segments (store_oseg.c), as far as
		// the operation reaches: a read, enough for its rows; an update
		// or delete by seq, up to its highest seq (the session's older
		// seqs are queue rows, the newer ones segments).
		if (oseg_expand_for(s, op) != 0) {
			return -1;
		}
		break;
	default:
		break;
	}
	switch (op->kind) {
	case OP_SESSION_PUT: {
		// Keep the row's will reference right: drop the old one first.
		st = store_stmt(s, STMT_SESSION_GET);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		int64_t old = 0;
		rc          = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			old = sqlite3_column_int64(st, 0);
		}
		sqlite3_reset(st);
		if ((rc != SQLITE_ROW && rc != SQLITE_DONE)
		    || (old != 0 && msg_unref(s, old) != 0)) {
			return -1;
		}
		int64_t will = 0;
		if (op->msg != NULL && (will = msg_ref(s, op->msg, wall, mono)) == 0) {
			return -1;
		}
		st = store_stmt(s, STMT_SESSION_PUT);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		if (op->has_s2) {
			sqlite3_bind_text(st, 2, op->s2, -1, SQLITE_STATIC);
		}
		sqlite3_bind_int64(st, 3, op->u32);
		sqlite3_bind_int(st, 4, op->qos);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)op->u64);
		if (will != 0) {
			sqlite3_bind_int64(st, 6, will);
		}
		sqlite3_bind_int64(st, 7, op->u32b);
		store_alive_session_op(s);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	}
	case OP_SESSION_DEL:
		store_alive_session_op(s);
		if (store_is_bcache(op->s1) && store_bcache_purge(s, op->s1) != 0) {
			return -1;
		}
		// The purge counts references by SQL: write the group's first.
		if (store_group_flush_refs(s) != 0) {
			return -1;
		}
		return store_session_purge(s, op->s1);
	case OP_SESSION_OFFLINE:
		store_alive_session_op(s);
		st = store_stmt(s, STMT_SESSION_OFFLINE);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)op->u64);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	case OP_SUB_PUT:
		st = store_stmt(s, STMT_SUB_PUT);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, op->s2, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 3, op->qos);
		sqlite3_bind_int64(st, 4, op->u32);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	case OP_SUB_DEL:
		st = store_stmt(s, STMT_SUB_DEL);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, op->s2, -1, SQLITE_STATIC);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	case OP_QUEUE_PUT: {
		if (op->sid != 0) {
			store_group_peek(s);
			if ((op->skip = store_group_is_done(s, op->sid, op->u64))) {
				return 0; // acked since the group was taken
			}
		}
		if (store_is_bcache(op->s1)) {
			return store_bcache_put(s, op->s1, op->u64, op->msg, op->qos, op->retain,
			    op->state, op->pid, op->srv, wall, mono);
		}
		if (store_oseg_take(s, op)) {
			return 0; // written with its session's segment at the group's end
		}
		int64_t id = msg_ref(s, op->msg, wall, mono);
		if (id == 0) {
			return -1;
		}
		// A state update of the same group folded in (store_group.c); a
		// seq stored twice keeps the first and fails only this operation.
		return queue_row_put(s, op->s1, op->sid, op->u64, id, op->qos, op->retain,
		    op->sub_ids, op->n_sub_ids, op->state, op->pid);
	}
	case OP_QUEUE_PUTM:
		// Rows whose subscriber acked them since the group was taken are
		// not written either (store_group_peek).
		store_group_peek(s);
		for (uint32_t i = 0; i < op->u32; i++) {
			store_qent *q = &op->ents[i];
			if (q->skip || (q->skip = store_group_is_done(s, q->sid, q->seq))) {
				continue;
			}
			if (store_is_bcache(op->arena + q->cid_off)) {
				if (store_bcache_put(s, op->arena + q->cid_off, q->seq, op->msg,
				        q->qos, q->retain, q->state, q->pid, q->srv, wall, mono)
				    < 0) {
					return -1;
				}
				continue;
			}
			int64_t id = msg_ref(s, op->msg, wall, mono);
			if (id == 0) {
				return -1;
			}
			if (op->u32 >= STORE_HOLD_MIN_ROWS
			    && store_hold_eligible(
			        q->live, q->sid, q->qos, q->state, op->arena + q->cid_off)
			    && store_hold_add(s, op->arena + q->cid_off, q->sid, q->seq, id, q->qos,
			           q->retain, (const uint32_t *)(void *)(op->arena + q->ids_off),
			           q->n_ids)
			        == 0) {
				continue; // written by the next group unless acked by then
			}
			if (queue_row_put(s, op->arena + q->cid_off, q->sid, q->seq, id, q->qos,
			        q->retain, op->arena + q->ids_off, q->n_ids, q->state, q->pid)
			    < 0) {
				return -1; // (a seq stored twice keeps the first)
			}
		}
		return 0;
	case OP_QUEUE_STATE:
		if (store_is_bcache(op->s1)) {
			return store_bcache_state(s, op->s1, op->u64, op->state, op->pid, op->srv);
		}
		st = store_stmt(s, STMT_QUEUE_STATE);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)op->u64);
		sqlite3_bind_int(st, 3, op->state);
		sqlite3_bind_int(st, 4, op->pid);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	case OP_QUEUE_DEL:
		if (store_is_bcache(op->s1)) {
			return store_bcache_del_range(s, op->s1, op->u64, op->u64);
		}
		return queue_del_one(s, op->s1, op->u64);
	case OP_QUEUE_DEL_RANGES:
		for (uint32_t i = 0; i < op->u32; i++) {
			uint64_t lo = op->data[2 * i], hi = op->data[2 * i + 1];
			if (hi < lo) {
				continue;
			}
			if ((store_is_bcache(op->s1) ? store_bcache_del_range(s, op->s1, lo, hi)
			                             : queue_del_range(s, op->s1, lo, hi))
			    != 0) {
				return -1;
			}
		}
		return 0;
	case OP_QUEUE_DONE:
		store_hold_note_done(s, op->s1, op->u64b);
		if (store_group_range_empty(s, op->sid, op->u64)) {
			return 0; // no row of it can be there (only held ones, dropped)
		}
		// (Acks are of what the session read: queue rows; a segment it
		// covers all the same is made rows first.)
		if (store_oseg_expand_to(s, op->s1, op->u64b, 0) != 0) {
			return -1;
		}
		return queue_del_range(s, op->s1, op->u64, op->u64b);
	case OP_QUEUE_DEL_MANY:
		// Runs of consecutive seqs (a bridge's acks come in order) go in
		// one statement each; a seq coalesced away (0) ends a run.
		for (uint32_t i = 0; i < op->u32;) {
			uint32_t j = i + 1;
			if (op->data[i] == 0) {
				i = j;
				continue;
			}
			while (j < op->u32 && op->data[j] == op->data[j - 1] + 1) {
				j++;
			}
			int r;
			if (store_is_bcache(op->s1)) {
				r = store_bcache_del_range(s, op->s1, op->data[i], op->data[j - 1]);
			} else {
				r = j - i == 1
				    ? queue_del_one(s, op->s1, op->data[i])
				    : queue_del_range(s, op->s1, op->data[i], op->data[j - 1]);
			}
			if (r != 0) {
				return -1;
			}
			i = j;
		}
		return 0;
	case OP_REL_PUT:
	case OP_REL_DEL:
		st = store_stmt(s, op->kind == OP_REL_PUT ? STMT_REL_PUT : STMT_REL_DEL);
		sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 2, op->pid);
		return store_step_done(st) == SQLITE_DONE ? 0 : -1;
	case OP_RETAIN_PUT:
		return retain_set(s, op->s1, op->msg, wall, mono);
	case OP_QUEUE_READ:
		if (store_group_flush_refs(s) != 0) {
			return -1;
		}
		if (store_is_bcache(op->s1)) {
			return store_bcache_read(s, op, wall, mono);
		}
		return store_queue_read_apply(s, op, wall, mono);
	case OP_SUBS_READ:
		return store_subs_read_apply(s, op);
	case OP_RELS_READ:
		return store_rels_read_apply(s, op);
	case OP_SYNC:
	default:
		return 0;
	}
}

// Deletes up to n of the sessions' oldest queued (not yet sent) rows.
// Records them for the evicted callback after the commit.
int store_evict_note(nmq_store *s, const char *cid, uint64_t seq)
{
	if (s->evict_len == s->evict_cap) {
		size_t       cap = s->evict_cap ? s->evict_cap * 2 : 16;
		store_evict *v   = realloc(s->evicts, cap * sizeof(*v));
		if (v == NULL) {
			return -1;
		}
		s->evicts    = v;
		s->evict_cap = cap;
	}
	store_evict *e = &s->evicts[s->evict_len++];
	memset(e, 0, sizeof(*e));
	cid        = cid != NULL ? cid : "";
	size_t len = strlen(cid);
	if (len < sizeof(e->cid)) {
		memcpy(e->cid, cid, len + 1);
	} else if ((e->cid_full = strdup(cid)) == NULL) {
		memcpy(e->cid, cid, sizeof(e->cid) - 1); // cut (zeroed above)
	}
	e->seq = seq;
	return 0;
}

static int evict_queue(nmq_store *s, uint64_t n)
{
	size_t        first = s->evict_len;
	sqlite3_stmt *st    = store_stmt(s, STMT_QUEUE_OLDEST);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)n);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (store_evict_note(s, (const char *)sqlite3_column_text(st, 1),
		        (uint64_t)sqlite3_column_int64(st, 2))
		    != 0) {
			break;
		}
		store_evict *e = &s->evicts[s->evict_len - 1];
		e->row         = sqlite3_column_int64(st, 0);
		e->msg_id      = sqlite3_column_int64(st, 3);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		return -1;
	}
	for (size_t i = first; i < s->evict_len; i++) {
		st = store_stmt(s, STMT_QUEUE_DEL_ID);
		sqlite3_bind_int64(st, 1, s->evicts[i].row);
		if (store_step_done(st) != SQLITE_DONE || msg_unref(s, s->evicts[i].msg_id) != 0) {
			return -1;
		}
		s->queued_rows--;
	}
	return 0;
}

// n of the sessions' oldest queued messages go: queue rows and entries of
// offline segments (store_oseg.c), oldest first (a segment is ordered
// against the queue rows by the highest queue row id when it was written).
static int evict_sessions(nmq_store *s, uint64_t n)
{
	if (!store_oseg_has_rows(s)) {
		return evict_queue(s, n);
	}
	while (n > 0) {
		int64_t oldest_q = store_oseg_oldest_queued(s);
		if (oldest_q < 0) {
			return -1;
		}
		int64_t k = store_oseg_evict(s, n, oldest_q);
		if (k < 0) {
			return -1;
		}
		if (k > 0) {
			n -= (uint64_t)k < n ? (uint64_t)k : n;
			continue;
		}
		if (oldest_q == 0) {
			break; // nothing queued at all
		}
		// Queue rows older than the oldest segment: a few at a time.
		uint64_t before = s->queued_rows;
		if (evict_queue(s, n < 64 ? n : 64) != 0) {
			return -1;
		}
		uint64_t got = before - s->queued_rows;
		if (got == 0) {
			break;
		}
		n -= got < n ? got : n;
	}
	return 0;
}

// Past max_queued: the oldest queued rows go, first from whichever of the
// sessions' queue and the bridges' cache holds more rows, then from the
// other (decisions/0032).
static int evict(nmq_store *s)
{
	if (s->opts.max_queued == 0 || s->queued_rows <= s->opts.max_queued) {
		return 0;
	}
	bool bridges_first = s->bcache_rows * 2 >= s->queued_rows;
	for (int pass = 0; pass < 2 && s->queued_rows > s->opts.max_queued; pass++) {
		uint64_t n = s->queued_rows - s->opts.max_queued;
		if ((pass == 0) == bridges_first) {
			if (store_bcache_evict(s, n) < 0) {
				return -1;
			}
		} else if (evict_sessions(s, n) != 0) {
			return -1;
		}
	}
	return 0;
}

// A statement of a group found the file damaged (SQLITE_CORRUPT). The
// usual cause that passes the quick_check at open is an index that no
// longer matches its table (a byte changed in an index page): every
// group that touches those rows would fail again, for the rest of the
// run and the next ones. The indexes are rebuilt from the tables
// (REINDEX); when a damaged table holds two queue rows of one session and
// seq, which its unique index cannot take, the later of them goes
// first. At most once a minute (a damaged table b-tree is not repaired
// so, and each try reads every table). The failed group's operations
// were answered as failed, as with any failed commit: its clients send
// again.
static void store_repair_indexes(nmq_store *s)
{
	uint64_t now = store_mono_ms();
	if (s->reindexed_mono_ms != 0 && now - s->reindexed_mono_ms < 60000) {
		return;
	}
	s->reindexed_mono_ms = now;
	long long dups       = 0;
	int       rc         = sqlite3_exec(s->db, "REINDEX", NULL, NULL, NULL);
	if ((rc & 0xff) == SQLITE_CONSTRAINT) {
		rc = sqlite3_exec(s->db,
		    "DELETE FROM queue WHERE id IN (SELECT id FROM queue NOT INDEXED WHERE id NOT "
		    "IN"
		    " (SELECT MIN(id) FROM queue NOT INDEXED GROUP BY cid, seq))",
		    NULL, NULL, NULL);
		if (rc == SQLITE_OK) {
			dups = sqlite3_changes(s->db);
			rc   = sqlite3_exec(s->db, "REINDEX", NULL, NULL, NULL);
		}
	}
	if (rc == SQLITE_OK) {
		log_error("store",
		    "path=%s event=indexes_rebuilt reason=damaged duplicate_rows_deleted=%lld",
		    s->path, dups);
	} else {
		log_error("store", "path=%s event=indexes_rebuild_failed error=\"%s\"", s->path,
		    sqlite3_errmsg(s->db));
	}
}

static void evicts_clear(nmq_store *s, bool report)
{
	for (size_t i = 0; i < s->evict_len; i++) {
		store_evict *e   = &s->evicts[i];
		const char  *cid = e->cid_full ? e->cid_full : e->cid;
		if (report) {
			uint64_t n = atomic_fetch_add(&s->evicted, 1) + 1;
			log_warn_rl("store",
			    "client_id=%s seq=%llu event=evicted reason=disk_cache_size limit=%llu "
			    "evicted_total=%llu",
			    cid, (unsigned long long)e->seq, (unsigned long long)s->opts.max_queued,
			    (unsigned long long)n);
			if (s->opts.evicted != NULL) {
				s->opts.evicted(s->opts.evicted_arg, cid, e->seq);
			}
		}
		free(e->cid_full);
	}
	s->evict_len = 0;
}

// The checkpoint (the WAL's pages copied into the database file, which
// is fsynced) runs every STORE_CKPT_FRAMES pages of WAL (32 MB), not every
// 1,000 as SQLite's automatic one would: the index leaves of every
// session that gets a row are rewritten at each commit (decisions/0047),
// and a checkpoint copies each page once however many commits rewrote it,
// so it copies fewer bytes the more commits it spans. It is not run inside
// a COMMIT either, as SQLite's is, but after the group's operations are
// answered: the acks of the group that fills the WAL do not wait for it.
// What a commit made durable does not depend on it (the WAL is fsynced at
// the COMMIT). The hook, called by SQLite after each commit on the
// store's connection, notes the WAL's length; it checkpoints at once only
// past twice the interval (commits that no group end follows: the load,
// the idle alive writes). opts.ckpt_frames sets the interval (tests).
#define STORE_CKPT_FRAMES 8000

// Offline segment rows (store_oseg.c) written as queue rows by one group
// of a clean stop: up to about 64 MB of messages, then a checkpoint.
#define STORE_OSEG_STOP_ROWS 2048

static int wal_checkpoint(nmq_store *s, sqlite3 *db, const char *name)
{
	int log = 0, done = 0;
	int rc = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
	if (rc == SQLITE_OK && done == log) {
		s->wal_frames = 0;
	}
	return rc;
}

static int store_wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
	nmq_store *s  = arg;
	s->wal_frames = frames;
	if (frames >= 2 * (int)s->opts.ckpt_frames) {
		wal_checkpoint(s, db, name);
	}
	return SQLITE_OK;
}

// After a group: the checkpoint, when the WAL has grown past the
// interval. The store's connection is normally the file's only one, so
// it copies the whole WAL and the next commit starts the WAL over (a
// reader of another process may hold some back: then the next group
// tries again, as SQLite's own checkpoint would).
static void store_checkpoint(nmq_store *s)
{
	if (s->wal_frames >= (int)s->opts.ckpt_frames
	    && wal_checkpoint(s, s->db, NULL) != SQLITE_OK) {
		log_warn_rl("store", "path=%s event=checkpoint_failed error=\"%s\"", s->path,
		    sqlite3_errmsg(s->db));
	}
}

// Applies a batch of nb operations in one transaction and answers every
// operation.
static void run_batch(nmq_store *s, store_op *batch, size_t nb, bool marks)
{
	uint64_t wall = store_wall_ms(), mono = store_mono_ms();
	uint64_t rows_before = s->queued_rows, brows_before = s->bcache_rows;
	// Operations that cancel out inside the group are not written; the
	// reference counts of message rows are written once, at the end.
	if (store_group_begin(s, nb) == 0) {
		store_group_coalesce(s, batch, marks);
		s->in_group = true;
	} else {
		// Out of memory: nothing is paired, but the done ranges are
		// recorded still (a put of a seq done with, here or in a later
		// group, would otherwise be written and stay).
		store_group_dones_only(s, batch, marks);
	}
	int      rc    = store_step_done(store_stmt(s, STMT_BEGIN));
	bool     ok    = rc == SQLITE_DONE;
	size_t   n     = 0;
	uint64_t nskip = 0;
	// The cache's rows that expired, first: a read in this group does not
	// see them (store_bcache_expire_due: at most once a second).
	if (ok && store_bcache_expire_due(s, NULL)) {
		ok = store_bcache_expire(s, wall) == 0;
	}
	// The rows held back by earlier groups: dropped once acked, written
	// when too old (store_hold.c).
	if (ok) {
		ok = store_hold_group_start(s) == 0;
	}
	store_oseg_group_start(s, wall, mono);
	if (ok && s->oseg_final) {
		ok = store_oseg_expand_all(s, STORE_OSEG_STOP_ROWS) == 0;
	}
	for (store_op *op = batch; ok && op != NULL; op = op->next, n++) {
		int r = op_apply(s, op, wall, mono);
		if (r < 0) {
			ok = false;
		}
		op->result = r == 0 ? NMQ_OK : NMQ_EINVAL;
		// (After: applying may skip what was acked meanwhile.)
		if (op->kind == OP_QUEUE_PUTM) {
			for (uint32_t i = 0; i < op->u32; i++) {
				nskip += op->ents[i].skip;
			}
		} else {
			nskip += op->skip;
		}
	}
	if (ok) {
		ok = store_oseg_end_group(s) == 0;
	}
	if (ok) {
		ok = evict(s) == 0;
	}
	if (ok) {
		ok = store_group_flush_refs(s) == 0;
	}
	if (ok) {
		ok = store_hold_end_group(s) == 0;
	}
	if (ok) {
		ok = store_alive_in_group(s, wall) == 0;
	}
	unsigned tfail = atomic_load(&s->test_group_fail);
	if (ok && tfail > 0
	    && atomic_compare_exchange_strong(&s->test_group_fail, &tfail, tfail - 1)) {
		ok = false;
	}
	if (ok) {
		ok = store_step_done(store_stmt(s, STMT_COMMIT)) == SQLITE_DONE;
	}
	bool corrupt = false;
	if (!ok) {
		s->fail_take = s->take_gen;
		corrupt      = (sqlite3_extended_errcode(s->db) & 0xff) == SQLITE_CORRUPT;
		log_error("store", "path=%s event=commit_failed ops=%zu error=\"%s\"", s->path, n,
		    sqlite3_errmsg(s->db));
		if (!sqlite3_get_autocommit(s->db)) {
			store_step_done(store_stmt(s, STMT_ROLLBACK));
		}
		s->in_group = false;
		store_group_forget(s);
		// Nothing of the batch is stored: forget the rows it created.
		for (size_t i = 0; i < s->batch_msgs_len; i++) {
			s->batch_msgs[i]->store_id = 0;
		}
		s->queued_rows = rows_before;
		s->bcache_rows = brows_before;
		store_bcache_forget(s); // a bridge's number may have been rolled back
	}
	s->in_group       = false;
	s->batch_msgs_len = 0;
	store_hold_after_group(s, ok);
	store_oseg_after_group(s, ok);
	if (corrupt) {
		store_repair_indexes(s);
	}
	evicts_clear(s, ok);
	store_bcache_expired_report(s, ok);
	atomic_store(&s->queued_rows_pub, s->queued_rows);
	// Counters first: a completion may be what a reader of them waits for.
	if (ok) {
		atomic_fetch_add(&s->commits, 1);
		atomic_fetch_add(&s->ops, nb);
		atomic_fetch_add(&s->coalesced, nskip);
	} else {
		atomic_fetch_add(&s->failed, nb);
	}
	// Back to the pool in chains of at most POOL_TAKE, one per refill.
	store_op *chains = NULL, *cur = NULL;
	uint32_t  pn = 0;
	while (batch != NULL) {
		store_op *op = batch;
		batch        = op->next;
		if (op->done != NULL) {
			nmq_err err = !ok ? NMQ_EIO : op->barrier ? NMQ_OK : op->result;
			if (op->since && s->fail_take > op->u64) {
				err = NMQ_EIO;
			}
			op->done(op->arg, err);
		}
		op_drop_data(op);
		if (!op->pooled) {
			free(op);
			continue;
		}
		if (cur == NULL || cur->chain_n == POOL_TAKE) {
			if (cur != NULL) {
				cur->chain_next = chains;
				chains          = cur;
			}
			op->next    = NULL;
			op->chain_n = 1;
			cur         = op;
		} else {
			op->next       = cur;
			op->chain_n    = cur->chain_n + 1;
			op->chain_next = NULL;
			cur            = op;
		}
		pn++;
	}
	if (cur != NULL) {
		cur->chain_next = chains;
		chains          = cur;
	}
	pool_put_chains(s, chains, pn);
	store_alive_after_group(s);
	store_checkpoint(s);
}

// The idle store thread gives back what a burst left (see STORE_TRIM_*).
static void store_trim(nmq_store *s)
{
	store_op *drop = NULL;
	pthread_mutex_lock(&s->mtx);
	while (s->free_n > POOL_IDLE_KEEP && s->free_ops != NULL) {
		store_op *c = s->free_ops;
		s->free_ops = c->chain_next;
		s->free_n -= c->chain_n;
		for (store_op *op = c, *nx; op != NULL; op = nx) {
			nx = op->next;
			// Off the all_ops list under the lock, freed after it.
			if (op->all_prev != NULL) {
				op->all_prev->all_next = op->all_next;
			} else {
				s->all_ops = op->all_next;
			}
			if (op->all_next != NULL) {
				op->all_next->all_prev = op->all_prev;
			}
			op->next = drop;
			drop     = op;
		}
	}
	pthread_mutex_unlock(&s->mtx);
	while (drop != NULL) {
		store_op *nx = drop->next;
		free(drop);
		drop = nx;
	}
	store_group_shrink(s, STORE_TRIM_TABLE);
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

// Under load, the store thread waits before it takes the next group, up
// to STORE_GROUP_GAP_MS after the previous group began, while the rest of
// the broker moves messages fast (decisions/0056). A commit costs about
// the same however many operations it carries (an fsync, and the pages at
// the tables' ends that every group rewrites), and the store thread used
// to take the next group as soon as the last one was committed: with a
// fast disk, a flood was committed in groups a few milliseconds apart, and
// the commits took a third of the broker's CPU (on a virtual machine each
// fsync is a few exits to the host). Larger groups also pair off more rows
// unwritten (a delivery and its PUBACK in the same group).
//
// Waiting is only worth it while work keeps coming. When the senders wait
// for the acks this group will give (publishers with one message in
// flight), the broker falls idle and a wait only slows them down. So the
// thread waits in steps of STORE_GAP_STEP_US and stops after a step in
// which the broker received and sent fewer than STORE_GAP_STEP_MSGS
// messages, about 500,000 a second (store_set_activity). Below that rate
// what keeps coming during a wait is mostly the senders' answers to the
// acks just given, and 100 publishers with one message in flight each
// lost a third of their rate on two cores with a threshold of 8; the
// fan-out floods that gain from the wait move millions a second. (The
// process's CPU clock would not do as the measure: it sees the time of a
// thread running on another core only at the scheduler's tick, every few
// milliseconds.) Without an activity count (a store used alone) it does
// not wait. After a group of fewer than STORE_GAP_MIN_OPS operations (a
// light load) it does not wait at all, nor after a group whose commit took
// longer than the gap (a slow disk); a close ends the wait at the next
// step. The steps are plain sleeps: on the condition variable the workers
// signal with each batch they queue, the thread would be woken by each of
// them.
#define STORE_GROUP_GAP_MS  5
#define STORE_GAP_MIN_OPS   64
#define STORE_GAP_STEP_US   500
#define STORE_GAP_STEP_MSGS 256

static uint64_t store_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void store_group_pace(nmq_store *s)
{
	if (s->group_last_n < STORE_GAP_MIN_OPS || s->opts.group_gap_ms == UINT32_MAX
	    || s->activity == NULL) {
		return;
	}
	uint64_t due  = s->group_start_us + (uint64_t)s->opts.group_gap_ms * 1000;
	uint64_t now  = store_mono_us();
	uint64_t seen = s->activity(s->activity_arg);
	while (!s->stopping && now < due) {
		uint64_t until     = now + STORE_GAP_STEP_US < due ? now + STORE_GAP_STEP_US : due;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)(until - now) * 1000 };
		pthread_mutex_unlock(&s->mtx);
		(void)nanosleep(&ts, NULL);
		pthread_mutex_lock(&s->mtx);
		now = store_mono_us();
		if (s->activity == NULL) {
			return; // store_set_activity(NULL) meanwhile
		}
		if (now >= until) {
			uint64_t a = s->activity(s->activity_arg);
			if (a - seen < STORE_GAP_STEP_MSGS) {
				return; // the traffic fell below the rate: waiting would slow it
			}
			seen = a;
		}
	}
}

void store_set_activity(nmq_store *s, uint64_t (*fn)(void *arg), void *arg)
{
	pthread_mutex_lock(&s->mtx);
	s->activity     = fn;
	s->activity_arg = arg;
	pthread_mutex_unlock(&s->mtx);
}

// What op counts against max_pending and flush_max.
static inline uint32_t op_weight(const store_op *op)
{
	return op->kind == OP_QUEUE_PUTM ? op->u32 : 1;
}

static void *store_thread(void *arg)
{
	nmq_store *s = arg;
	pthread_setname_np(pthread_self(), "nmq:store");
	pthread_mutex_lock(&s->mtx);
	for (;;) {
		while (s->head == NULL && !s->stopping) {
			uint64_t exp_wake = 0;
			if (store_bcache_expire_due(s, &exp_wake)) {
				pthread_mutex_unlock(&s->mtx);
				store_bcache_expire_idle(s);
				pthread_mutex_lock(&s->mtx);
				continue;
			}
			if (store_hold_pending(s)) {
				// Rows held back: retired by a group of their own once
				// old enough, if no work comes first (store_hold.c).
				if (store_hold_wait(s)) {
					pthread_mutex_unlock(&s->mtx);
					run_batch(s, NULL, 0, false);
					pthread_mutex_lock(&s->mtx);
				}
				continue;
			}
			if (s->trim_due != 0) {
				if (store_mono_ms() >= s->trim_due) {
					s->trim_due = 0;
					pthread_mutex_unlock(&s->mtx);
					store_trim(s);
					pthread_mutex_lock(&s->mtx);
					continue;
				}
				if (exp_wake == 0 || s->trim_due < exp_wake) {
					exp_wake = s->trim_due;
				}
			}
			if (store_alive_wait(s, exp_wake)) {
				pthread_mutex_unlock(&s->mtx);
				store_alive_idle(s);
				pthread_mutex_lock(&s->mtx);
			}
		}
		if (s->head == NULL) {
			// Stopping: every row held back is written now (an older
			// build would not read the held rows).
			// So are the offline segments (store_oseg.c), a bounded
			// number per group, so that the WAL is checkpointed between
			// them; a group that makes no progress (a failed commit: the
			// rest stays in the file, restored at the next open) ends it.
			if (store_hold_pending(s) || store_oseg_any(s)) {
				s->hold_final = true;
				s->oseg_final = true;
				pthread_mutex_unlock(&s->mtx);
				uint64_t before;
				do {
					before = store_oseg_rows(s);
					run_batch(s, NULL, 0, false);
				} while (store_oseg_any(s) && store_oseg_rows(s) < before);
				pthread_mutex_lock(&s->mtx);
			}
			break;
		}
		store_group_pace(s);
		s->group_start_us = store_mono_us();
		// Everything waiting, up to flush_max: one transaction, one sync.
		// (The whole list without walking it, under the lock the workers
		// queue with, when it fits.)
		store_op *batch = s->head, *last = s->tail;
		uint32_t  n     = s->pending;
		bool      marks = s->mark_ops > 0;
		if (n > s->opts.flush_max) {
			last = s->head;
			n    = op_weight(last);
			// Never between the operations of one store_batch.
			while (last->next != NULL && (n < s->opts.flush_max || last->more)) {
				last = last->next;
				n += op_weight(last);
			}
		}
		if (last == s->tail) {
			s->mark_ops  = 0; // all taken
			s->pdone_len = 0; // their ranges are in the group now
		}
		s->take_gen++; // what was queued before is no longer extended
		s->head    = last->next;
		last->next = NULL;
		if (s->head == NULL) {
			s->tail = NULL;
		}
		s->pending -= n;
		pthread_mutex_unlock(&s->mtx);
		run_batch(s, batch, n, marks);
		pthread_mutex_lock(&s->mtx);
		s->group_last_n = n;
		if (n >= STORE_TRIM_GROUP) {
			s->trim_due = store_mono_ms() + STORE_TRIM_IDLE_MS;
		}
	}
	s->exited = true;
	pthread_mutex_unlock(&s->mtx);
	return NULL;
}

// ---------------------------------------------------------------------------
// Open and close.

#ifdef __GLIBC__
// glibc raises its mmap and trim thresholds each time a chunk it mapped is
// freed (up to 32 MB and 64 MB): after the first burst had freed the
// group's tables, the free tops of the workers' arenas, tens of MB after
// a flood, were neither unmapped nor trimmed any more, and malloc_trim
// does not trim an arena's top but the main one's. Fixed thresholds keep
// the group's tables mapped (given back whole when freed) and the free
// tops at most 1 MB per arena, so that store_trim gives a burst back
// every time, not only the first (docs/benchmarks.md).
static void malloc_tune(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, 1 << 20);
	(void)mallopt(M_TRIM_THRESHOLD, 1 << 20);
}
static pthread_once_t malloc_tune_once = PTHREAD_ONCE_INIT;
#endif

nmq_err store_open(nmq_store **sp, const store_opts *opts, char *err, size_t errlen)
{
#ifdef __GLIBC__
	(void)pthread_once(&malloc_tune_once, malloc_tune);
#endif
	*sp = NULL;
	if (store_sqlite_load(err, errlen) != NMQ_OK) {
		return NMQ_ENOTSUP;
	}
	nmq_store *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "store: out of memory");
		return NMQ_ENOMEM;
	}
	s->opts     = *opts;
	s->uid      = atomic_fetch_add(&store_uids, 1);
	s->next_sid = 1;
	if (s->opts.flush_max == 0) {
		s->opts.flush_max = 1;
	}
	if (s->opts.max_pending == 0) {
		s->opts.max_pending = 65536;
	}
	if (s->opts.group_gap_ms == 0) {
		s->opts.group_gap_ms = STORE_GROUP_GAP_MS;
	}
	if (s->opts.ckpt_frames == 0 || s->opts.ckpt_frames > INT32_MAX / 2) {
		s->opts.ckpt_frames = STORE_CKPT_FRAMES;
	}
	const char *dir  = opts->dir && opts->dir[0] ? opts->dir : ".";
	const char *file = opts->file && opts->file[0] ? opts->file : "nanomq.db";
	int         e    = mkdir_p(dir);
	if (e != 0) {
		snprintf(err, errlen, "store: directory %s: %s", dir, strerror(e));
		free(s);
		return e == EROFS || e == EACCES || e == EPERM ? NMQ_EACCES : NMQ_EIO;
	}
	snprintf(s->path, sizeof(s->path), "%s/%s", dir, file);
	bool unwritable;
	s->db = open_db(s, err, errlen, &unwritable);
	if (s->db == NULL) {
		free(s);
		return unwritable ? NMQ_EACCES : NMQ_EIO;
	}
	// In place of SQLite's automatic checkpoint (store_checkpoint).
	sqlite3_wal_hook(s->db, store_wal_hook, s);
	for (int i = 0; i < STMT_COUNT_; i++) {
		if (sqlite3_prepare_v3(
		        s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->stmts[i], NULL)
		    != SQLITE_OK) {
			snprintf(err, errlen, "store: %s: %s", s->path, sqlite3_errmsg(s->db));
			store_db_close(s);
			free(s);
			return NMQ_EIO;
		}
	}
	if (store_bcache_prepare(s) != 0 || store_hold_prepare(s) != 0
	    || store_oseg_prepare(s) != 0) {
		snprintf(err, errlen, "store: %s: %s", s->path, sqlite3_errmsg(s->db));
		store_db_close(s);
		free(s);
		return NMQ_EIO;
	}
	long long rows = 0;
	exec_int(s->db, "SELECT COUNT(*) FROM queue", &rows);
	rows += (long long)s->bcache_rows;
	s->queued_rows = (uint64_t)rows;
	atomic_store(&s->queued_rows_pub, s->queued_rows);
	pthread_mutex_init(&s->mtx, NULL);
	// On the monotonic clock: the idle alive write waits with a deadline.
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&s->thread, NULL, store_thread, s) != 0) {
		snprintf(err, errlen, "store: cannot start its thread");
		store_db_close(s);
		pthread_mutex_destroy(&s->mtx);
		pthread_cond_destroy(&s->cv);
		free(s);
		return NMQ_EIO;
	}
	log_info("store", "path=%s event=opened durability=%s queued_messages=%llu%s", s->path,
	    opts->durability == STORE_DURABLE_FSYNC ? "fsync" : "os", (unsigned long long)rows,
	    s->recovered ? " recovered=true" : "");
	*sp = s;
	return NMQ_OK;
}

void store_db_close(nmq_store *s)
{
	sqlite3_finalize(s->alive_put);
	sqlite3_finalize(s->alive_online_q);
	s->alive_put      = NULL;
	s->alive_online_q = NULL;
	store_bcache_finalize(s);
	store_hold_finalize(s);
	store_oseg_finalize(s);
	for (int i = 0; i < STMT_COUNT_; i++) {
		sqlite3_finalize(s->stmts[i]);
		s->stmts[i] = NULL;
	}
	// The last connection to close checkpoints and removes the WAL.
	sqlite3_close(s->db);
	s->db = NULL;
}

void store_close(nmq_store *s)
{
	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->mtx);
	s->stopping = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	pthread_join(s->thread, NULL);
	log_info("store",
	    "path=%s event=closed commits=%llu held_rows_written=%llu held_rows_dropped=%llu",
	    s->path, (unsigned long long)atomic_load(&s->commits),
	    (unsigned long long)s->held_written, (unsigned long long)s->held_dropped);
	store_db_close(s);
	pthread_mutex_destroy(&s->mtx);
	pthread_cond_destroy(&s->cv);
	for (store_op *op = s->all_ops, *nx; op != NULL; op = nx) {
		nx = op->all_next;
		free(op);
	}
	free(s->batch_msgs);
	free(s->evicts);
	free(s->ckeys);
	free(s->ckeys_used);
	free(s->rrefs);
	free(s->rrefs_used);
	free(s->dones);
	free(s->pdone);
	free(s);
}

void store_stats_get(nmq_store *s, store_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->commits     = atomic_load(&s->commits);
	out->ops         = atomic_load(&s->ops);
	out->failed      = atomic_load(&s->failed);
	out->coalesced   = atomic_load(&s->coalesced);
	out->evicted     = atomic_load(&s->evicted);
	out->expired     = atomic_load(&s->expired);
	out->queued_rows = atomic_load(&s->queued_rows_pub);
	pthread_mutex_lock(&s->mtx);
	out->pending = s->pending;
	pthread_mutex_unlock(&s->mtx);
	out->recovered = s->recovered;
}

void store_backlog(nmq_store *s, uint32_t *pending, uint32_t *max)
{
	pthread_mutex_lock(&s->mtx);
	*pending = s->pending;
	pthread_mutex_unlock(&s->mtx);
	*max = s->opts.max_pending;
}

const char *store_path(const nmq_store *s)
{
	return s->path;
}

void store_test_group_oom(nmq_store *s, unsigned n)
{
	atomic_store(&s->test_group_oom, n);
}

void store_test_after_oom(nmq_store *s, unsigned n)
{
	atomic_store(&s->test_after_oom, n);
}

void store_test_group_fail(nmq_store *s, unsigned n)
{
	atomic_store(&s->test_group_fail, n);
}
