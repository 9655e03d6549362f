// "Alive at": the last wall-clock time the store knows the broker was
// running, so that a session whose client was connected when the broker
// died (stored online, offline_wall_ms = 0) is counted as offline since
// about then at the next load, not since the restart (docs/persistence.md,
// decisions/0031).
//
// One row (table alive, id 1) holds it. A group commit that happens anyway
// rewrites it when the stored time is STORE_ALIVE_STEP_MS old or more
// (with traffic: at most one extra row update a second, in a transaction
// that is written anyway). While at least one stored session with a
// finite expiry is online, an idle store thread commits it by itself
// every tenth of the shortest such expiry, but not more often than every
// STORE_ALIVE_IDLE_MS nor less than every STORE_ALIVE_IDLE_MAX_MS; with
// none online (sessions that never expire, as 3.1.1 persistent sessions,
// need no death time) it never wakes for it, so an idle broker writes
// nothing. The death time is thus known to within about
// STORE_ALIVE_STEP_MS under traffic and the idle interval when idle (plus
// the time a commit takes): a session online at a crash is counted as
// offline up to that much too early, at most a tenth of its expiry for
// expiries of 50 s and more.
//
// Store thread only, except store_alive_load (main thread, at load).
#include <errno.h>
#include <time.h>

#include "src/log/log.h"
#include "src/store/store_int.h"

static int alive_prepare(nmq_store *s)
{
	if (s->alive_put == NULL
	    && sqlite3_prepare_v3(s->db, "INSERT OR REPLACE INTO alive(id, wall_ms) VALUES (1, ?1)",
	           -1, SQLITE_PREPARE_PERSISTENT, &s->alive_put, NULL)
	        != SQLITE_OK) {
		return -1;
	}
	if (s->alive_online_q == NULL
	    && sqlite3_prepare_v3(s->db,
	           "SELECT MIN(expiry_s) FROM sessions WHERE offline_wall_ms = 0"
	           " AND expiry_s < 4294967295",
	           -1, SQLITE_PREPARE_PERSISTENT, &s->alive_online_q, NULL)
	        != SQLITE_OK) {
		return -1;
	}
	return 0;
}

// Writes wall into the alive row (inside the open transaction).
static int alive_write(nmq_store *s, uint64_t wall)
{
	if (alive_prepare(s) != 0) {
		return -1;
	}
	sqlite3_reset(s->alive_put);
	sqlite3_bind_int64(s->alive_put, 1, (sqlite3_int64)wall);
	int rc = sqlite3_step(s->alive_put);
	sqlite3_reset(s->alive_put);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	s->alive_mono = store_mono_ms();
	return 0;
}

int store_alive_in_group(nmq_store *s, uint64_t wall)
{
	uint32_t step = s->opts.alive_idle_ms && s->opts.alive_idle_ms < STORE_ALIVE_STEP_MS
	    ? s->opts.alive_idle_ms
	    : STORE_ALIVE_STEP_MS;
	if (s->alive_mono != 0 && store_mono_ms() - s->alive_mono < step) {
		return 0;
	}
	return alive_write(s, wall);
}

void store_alive_after_group(nmq_store *s)
{
	if (!s->alive_recheck) {
		return;
	}
	s->alive_recheck = false;
	if (alive_prepare(s) != 0) {
		return;
	}
	sqlite3_reset(s->alive_online_q);
	// Answered by the partial index sessions_online_expiry.
	if (sqlite3_step(s->alive_online_q) == SQLITE_ROW) {
		if (sqlite3_column_type(s->alive_online_q, 0) == SQLITE_NULL) {
			s->alive_idle_ms = 0;
		} else {
			uint64_t tenth = (uint64_t)sqlite3_column_int64(s->alive_online_q, 0) * 100;
			s->alive_idle_ms = tenth < STORE_ALIVE_IDLE_MS ? STORE_ALIVE_IDLE_MS
			    : tenth > STORE_ALIVE_IDLE_MAX_MS          ? STORE_ALIVE_IDLE_MAX_MS
			                                               : (uint32_t)tenth;
		}
	}
	sqlite3_reset(s->alive_online_q);
}

bool store_alive_wait(nmq_store *s, uint64_t also_due)
{
	uint64_t due = 0;
	if (s->alive_idle_ms != 0) {
		due = s->alive_mono
		    + (s->opts.alive_idle_ms ? s->opts.alive_idle_ms : s->alive_idle_ms);
		if (store_mono_ms() >= due) {
			return true;
		}
	}
	if (also_due != 0 && (due == 0 || also_due < due)) {
		due = also_due;
	}
	if (due == 0) {
		pthread_cond_wait(&s->cv, &s->mtx);
		return false;
	}
	// The condition variable runs on CLOCK_MONOTONIC (store_open).
	(void)nmq_cond_wait_until(&s->cv, &s->mtx, due);
	return false;
}

void store_alive_idle(nmq_store *s)
{
	bool ok = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	ok      = ok && alive_write(s, store_wall_ms()) == 0;
	ok      = ok && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
	if (!ok) {
		log_warn_rl("store", "path=%s event=alive_write_failed error=\"%s\"", s->path,
		    sqlite3_errmsg(s->db));
		if (!sqlite3_get_autocommit(s->db)) {
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		}
		// Not again before the next interval.
		s->alive_mono = store_mono_ms();
	}
}

long store_alive_load(nmq_store *s, uint64_t *alive_wall)
{
	*alive_wall      = 0;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, "SELECT wall_ms FROM alive WHERE id = 1", -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*alive_wall = (uint64_t)sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		return -1;
	}
	if (*alive_wall == 0) {
		return 0; // a file from before the alive row: online rows stay as they are
	}
	if (sqlite3_prepare_v2(s->db,
	        "UPDATE sessions SET offline_wall_ms = ?1 WHERE offline_wall_ms = 0", -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)*alive_wall);
	rc     = sqlite3_step(st);
	long n = rc == SQLITE_DONE ? (long)sqlite3_changes(s->db) : -1;
	sqlite3_finalize(st);
	return n;
}
