// Reading the durable store back: everything at startup (store_load), and
// one session's queue on demand (OP_QUEUE_READ on the store thread).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "src/log/log.h"
#include "src/store/store_int.h"

// Whether props (plen bytes, the body of a v5 PUBLISH property block, as
// the broker stores it) is one a client can be sent: the bytes come from a
// file, which may have been damaged in a way SQLite does not see (a byte
// changed inside a row). Checked as the decoder checks a received PUBLISH.
static bool props_ok(const uint8_t *props, size_t plen)
{
	if (plen > (size_t)MQTT_VBI_MAX - 16) {
		return false;
	}
	uint8_t  local[512];
	size_t   len = 1 + 4 + 3 + 4 + plen;
	uint8_t *f   = len <= sizeof(local) ? local : malloc(len);
	if (f == NULL) {
		return true; // (not checked: the message goes as it is)
	}
	// A QoS 0 PUBLISH on topic "t" with these properties and no payload.
	uint8_t body[8];
	size_t  bl = 0;
	body[bl++] = 0;
	body[bl++] = 1;
	body[bl++] = 't';
	bl += mqtt_vbi_encode(body + bl, (uint32_t)plen);
	size_t n = 0;
	f[n++]   = (uint8_t)(MQTT_PUBLISH << 4);
	n += mqtt_vbi_encode(f + n, (uint32_t)(bl + plen));
	memcpy(f + n, body, bl);
	memcpy(f + n + bl, props, plen);
	n += bl + plen;
	mqtt_packet pkt;
	bool        ok = mqtt_decode(f, n, MQTT_PROTO_V5, &pkt) == 0;
	if (f != local) {
		free(f);
	}
	return ok;
}

// Builds a message from the columns topic, qos, retain, expiry_interval,
// expiry_wall_ms, props, payload starting at col. Returns NULL when out of
// memory. Properties that a client could not parse (a damaged row) are
// left out, logged at error; a message whose topic is not a valid topic
// name is returned expired.
nmq_msg *store_msg_from_row(sqlite3_stmt *st, int col, int64_t id, uint64_t wall, uint64_t mono)
{
	const char *topic = (const char *)sqlite3_column_text(st, col);
	int         tlen  = sqlite3_column_bytes(st, col);
	const void *props = sqlite3_column_blob(st, col + 5);
	int         plen  = sqlite3_column_bytes(st, col + 5);
	if (plen > 0 && !props_ok(props, (size_t)plen)) {
		log_error("store",
		    "event=message_properties_damaged msg_id=%lld bytes=%d "
		    "action=dropped_properties",
		    (long long)id, plen);
		plen = 0;
	}
	const void *pay = sqlite3_column_blob(st, col + 6);
	int         len = sqlite3_column_bytes(st, col + 6);
	nmq_msg    *m = nmq_msg_alloc(topic ? topic : "", (size_t)tlen, (size_t)plen, (size_t)len);
	if (m == NULL) {
		return NULL;
	}
	if (plen > 0) {
		memcpy(m->props, props, (size_t)plen);
	}
	if (len > 0) {
		memcpy(m->payload, pay, (size_t)len);
	}
	m->qos             = (uint8_t)sqlite3_column_int(st, col + 1);
	m->retain          = sqlite3_column_int(st, col + 2) != 0;
	m->expiry_interval = (uint32_t)sqlite3_column_int64(st, col + 3);
	uint64_t exp_wall  = (uint64_t)sqlite3_column_int64(st, col + 4);
	if (exp_wall != 0) {
		uint64_t left = exp_wall > wall ? exp_wall - wall : 0;
		// The wall clock set back since the row was written (a gateway
		// without a battery-backed clock, started before NTP): the
		// message does not live longer than its own interval from now,
		// nor tell a client it has more left than that.
		if (m->expiry_interval != 0 && left > (uint64_t)m->expiry_interval * 1000) {
			left = (uint64_t)m->expiry_interval * 1000;
		}
		m->expiry_at_ms = mono + left;
	}
	m->store_id = (uint64_t)id;
	if (tlen <= 0 || !mqtt_topic_name_valid((const uint8_t *)topic, (size_t)tlen)) {
		// Not a topic a client may be sent (a damaged row): expired long
		// ago, so that every path drops it as it drops an expired message
		// (its stored row deleted with it) instead of sending it.
		log_error("store",
		    "event=message_topic_damaged msg_id=%lld bytes=%d action=dropped",
		    (long long)id, tlen);
		m->expiry_at_ms = 1;
	}
	return m;
}

static int exec(nmq_store *s, const char *sql)
{
	return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

// Runs sql with ?1 bound to v (when has_v). Returns 0 or -1.
static int exec_bound(nmq_store *s, const char *sql, bool has_v, uint64_t v)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
		return -1;
	}
	if (has_v) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)v);
	}
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

// Drops the references counted in the temporary table gone_m (msg_id,
// n) from their messages, deleting those left without any, and empties
// it. Set-based: a restart after a long outage may find a million queue
// rows expired, which row by row took tens of seconds.
static int unref_gone(nmq_store *s)
{
	return exec(s,
	    "UPDATE msgs SET refs = refs - (SELECT n FROM temp.gone_m g WHERE g.msg_id = msgs.id)"
	    " WHERE id IN (SELECT msg_id FROM temp.gone_m);"
	    "DELETE FROM msgs WHERE refs <= 0 AND id IN (SELECT msg_id FROM temp.gone_m);"
	    "DELETE FROM temp.gone_m;");
}

// Queue rows of a client id that has no session row (the row deleted or
// damaged by hand, or a session whose record never committed): no session
// reads them, and a new session of that client id, numbering its queue
// from 1, would find its seqs taken and its own messages refused as
// duplicates (acked to their publishers, then lost). They are deleted
// with their messages' references, logged at error with how many. (A
// bridge's rows, '$bridge/...', are the bridges'.) 0 or -1.
#define ORPHAN_WHERE                                                                               \
	" FROM queue AS q WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.cid = q.cid)"         \
	" AND NOT (q.cid >= '$bridge/' AND q.cid < '$bridge0')"
static int drop_orphans(nmq_store *s)
{
	sqlite3_stmt *st = NULL;
	long long     n  = 0;
	if (sqlite3_prepare_v2(s->db, "SELECT COUNT(*)" ORPHAN_WHERE, -1, &st, NULL) != SQLITE_OK) {
		return -1;
	}
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		n = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW) {
		return -1;
	}
	if (n == 0) {
		return 0;
	}
	if (exec(s,
	        "CREATE TEMP TABLE IF NOT EXISTS gone_m(msg_id INTEGER PRIMARY KEY, n INTEGER NOT "
	        "NULL);"
	        "DELETE FROM temp.gone_m;"
	        "INSERT INTO temp.gone_m SELECT q.msg_id, COUNT(*)" ORPHAN_WHERE
	        " GROUP BY q.msg_id")
	        != 0
	    || unref_gone(s) != 0 || exec(s, "DELETE" ORPHAN_WHERE) != 0) {
		return -1;
	}
	s->queued_rows -= (uint64_t)n <= s->queued_rows ? (uint64_t)n : s->queued_rows;
	log_error("store",
	    "path=%s event=orphan_rows_dropped rows=%lld reason=no_session: queued messages of "
	    "client ids with no stored session (its row deleted or damaged) are deleted",
	    s->path, n);
	return 0;
}

// The wills of the sessions drop_expired found expired, handed to the
// caller of store_load after everything else. Such a session's record
// stays (with its will, nothing else) until the caller deletes it in the
// store group of the will's own writes; load_rows skips it (sorted: a
// copy of cids in strcmp order).
typedef struct expired_wills {
	char    **cids;
	nmq_msg **msgs;
	size_t    n, cap;
	char    **sorted;
} expired_wills;

static void wills_free(expired_wills *w)
{
	for (size_t i = 0; i < w->n; i++) {
		free(w->cids[i]);
		nmq_msg_release(w->msgs[i]);
	}
	free(w->cids);
	free(w->msgs);
	free(w->sorted);
	memset(w, 0, sizeof(*w));
}

static int cmp_cid(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

// Sorts a copy of w's client ids for wills_has. Returns false when out of
// memory.
static bool wills_sort(expired_wills *w)
{
	if (w->n == 0) {
		return true;
	}
	if ((w->sorted = malloc(w->n * sizeof(*w->sorted))) == NULL) {
		return false;
	}
	memcpy(w->sorted, w->cids, w->n * sizeof(*w->sorted));
	qsort(w->sorted, w->n, sizeof(*w->sorted), cmp_cid);
	return true;
}

// Whether cid is the record of an expired session whose will is pending.
static bool wills_has(const expired_wills *w, const char *cid)
{
	return w->sorted != NULL && cid != NULL
	    && bsearch(&cid, w->sorted, w->n, sizeof(*w->sorted), cmp_cid) != NULL;
}

// Keeps the will of session cid (the row's message columns at 1, its id
// at 8) unless its own Message Expiry passed. Returns false when out of
// memory.
static bool wills_add(
    expired_wills *w, sqlite3_stmt *st, const char *cid, uint64_t now, uint64_t mono)
{
	if (sqlite3_column_type(st, 8) == SQLITE_NULL) {
		return true;
	}
	uint64_t exp_wall = (uint64_t)sqlite3_column_int64(st, 5);
	if (exp_wall != 0 && exp_wall <= now) {
		return true;
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 8;
		char **nc  = realloc(w->cids, cap * sizeof(*nc));
		if (nc == NULL) {
			return false;
		}
		w->cids      = nc;
		nmq_msg **nm = realloc(w->msgs, cap * sizeof(*nm));
		if (nm == NULL) {
			return false;
		}
		w->msgs = nm;
		w->cap  = cap;
	}
	nmq_msg *m = store_msg_from_row(st, 1, sqlite3_column_int64(st, 8), now, mono);
	char    *c = strdup(cid);
	if (m == NULL || c == NULL) {
		nmq_msg_release(m);
		free(c);
		return false;
	}
	m->store_id     = 0; // its row goes with the session
	w->cids[w->n]   = c;
	w->msgs[w->n++] = m;
	return true;
}

// Deletes what expired while the broker was down: sessions past their
// expiry (with all their state; those with a will to publish keep their
// record, with the will, for the caller to delete as it publishes it; the
// wills into *wills) and queued or retained messages past their Message
// Expiry (wills NULL: the caller wants no will; every expired record goes
// whole). Returns 0 or -1.
static int drop_expired(nmq_store *s, uint64_t now, uint64_t mono, expired_wills *wills)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db,
	        "SELECT s.cid, m.topic, m.qos, m.retain, m.expiry_interval, m.expiry_wall_ms,"
	        " m.props, m.payload, s.will_msg FROM sessions s"
	        " LEFT JOIN msgs m ON m.id = s.will_msg"
	        " WHERE s.offline_wall_ms > 0 AND s.expiry_s < 4294967295"
	        " AND s.offline_wall_ms + s.expiry_s * 1000 <= ?1",
	        -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)now);
	char **cids = NULL;
	bool  *keep = NULL; // the record stays for its will
	size_t n = 0, cap = 0;
	int    rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			cap       = cap ? cap * 2 : 16;
			char **nv = realloc(cids, cap * sizeof(*nv));
			if (nv == NULL) {
				rc = SQLITE_NOMEM;
				break;
			}
			cids     = nv;
			bool *nk = realloc(keep, cap * sizeof(*nk));
			if (nk == NULL) {
				rc = SQLITE_NOMEM;
				break;
			}
			keep = nk;
		}
		if ((cids[n] = strdup((const char *)sqlite3_column_text(st, 0))) == NULL) {
			rc = SQLITE_NOMEM;
			break;
		}
		n++;
		keep[n - 1] = false;
		if (wills != NULL) {
			size_t had = wills->n;
			if (!wills_add(wills, st, cids[n - 1], now, mono)) {
				rc = SQLITE_NOMEM;
				break;
			}
			keep[n - 1] = wills->n > had;
		}
	}
	sqlite3_finalize(st);
	int ret = rc == SQLITE_DONE ? 0 : -1;
	// What store_session_purge(_state) does for one session, for all of
	// them at once (a gateway down for a day may find 100,000 sessions
	// expired): their queues (with the references of their messages),
	// subscriptions and QoS 2 state, and the rows of those whose will is
	// not published now (with the will's reference).
	if (ret == 0 && n > 0) {
		ret               = exec(s,
		                  "CREATE TEMP TABLE IF NOT EXISTS gone_s(cid TEXT PRIMARY KEY, keep INTEGER NOT "
		                                "NULL);"
		                                "CREATE TEMP TABLE IF NOT EXISTS gone_m(msg_id INTEGER PRIMARY KEY, n INTEGER "
		                                "NOT "
		                                "NULL);"
		                                "DELETE FROM temp.gone_s; DELETE FROM temp.gone_m;");
		sqlite3_stmt *ins = NULL;
		if (ret == 0
		    && sqlite3_prepare_v2(s->db,
		           "INSERT OR IGNORE INTO temp.gone_s VALUES (?1, ?2)", -1, &ins, NULL)
		        != SQLITE_OK) {
			ret = -1;
		}
		for (size_t i = 0; ret == 0 && i < n; i++) {
			sqlite3_bind_text(ins, 1, cids[i], -1, SQLITE_STATIC);
			sqlite3_bind_int(ins, 2, keep[i] ? 1 : 0);
			if (sqlite3_step(ins) != SQLITE_DONE) {
				ret = -1;
			}
			sqlite3_reset(ins);
		}
		sqlite3_finalize(ins);
		if (ret == 0) {
			ret = exec(s,
			    "INSERT INTO temp.gone_m SELECT msg_id, COUNT(*) FROM ("
			    " SELECT msg_id FROM queue WHERE cid IN (SELECT cid FROM temp.gone_s)"
			    " UNION ALL SELECT will_msg FROM sessions WHERE will_msg IS NOT NULL"
			    " AND cid IN (SELECT cid FROM temp.gone_s WHERE keep = 0))"
			    " GROUP BY msg_id");
		}
		if (ret == 0) {
			ret = unref_gone(s);
		}
		if (ret == 0) {
			ret = exec(
			    s, "DELETE FROM queue WHERE cid IN (SELECT cid FROM temp.gone_s)");
		}
		if (ret == 0) {
			s->queued_rows -= (uint64_t)sqlite3_changes(s->db);
			ret = exec(s,
			    "DELETE FROM subs WHERE cid IN (SELECT cid FROM temp.gone_s);"
			    "DELETE FROM rel WHERE cid IN (SELECT cid FROM temp.gone_s);"
			    "DELETE FROM sessions WHERE cid IN"
			    " (SELECT cid FROM temp.gone_s WHERE keep = 0);"
			    "DELETE FROM temp.gone_s;");
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (ret == 0) {
			log_info("store", "client_id=%s event=session_expired_offline", cids[i]);
		}
		free(cids[i]);
	}
	free(cids);
	free(keep);
	if (ret != 0 || (wills != NULL && !wills_sort(wills))) {
		return -1;
	}
	atomic_fetch_add(&s->expired, n);

	// Anything expired at all? (The msgs_expiry index answers; the scans
	// below are for when something did.)
	long long any = 0;
	if (sqlite3_prepare_v2(s->db,
	        "SELECT COUNT(*) FROM (SELECT 1 FROM msgs WHERE expiry_wall_ms != 0"
	        " AND expiry_wall_ms <= ?1 LIMIT 1)",
	        -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)now);
	if (sqlite3_step(st) == SQLITE_ROW) {
		any = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	if (any == 0) {
		return 0;
	}

	// The queue rows of the expired messages, and their references.
	if (exec(s,
	        "CREATE TEMP TABLE IF NOT EXISTS gone_m(msg_id INTEGER PRIMARY KEY, n INTEGER NOT "
	        "NULL);"
	        "DELETE FROM temp.gone_m;")
	        != 0
	    || exec_bound(s,
	           "INSERT INTO temp.gone_m SELECT q.msg_id, COUNT(*) FROM queue q"
	           " JOIN msgs m ON m.id = q.msg_id"
	           " WHERE m.expiry_wall_ms != 0 AND m.expiry_wall_ms <= ?1 GROUP BY q.msg_id",
	           true, now)
	        != 0) {
		return -1;
	}
	long long     np  = 0;
	sqlite3_stmt *cnt = NULL;
	if (sqlite3_prepare_v2(s->db, "SELECT COALESCE(SUM(n), 0) FROM temp.gone_m", -1, &cnt, NULL)
	        != SQLITE_OK
	    || sqlite3_step(cnt) != SQLITE_ROW) {
		sqlite3_finalize(cnt);
		return -1;
	}
	np = sqlite3_column_int64(cnt, 0);
	sqlite3_finalize(cnt);
	if (exec(s, "DELETE FROM queue WHERE msg_id IN (SELECT msg_id FROM temp.gone_m)") != 0) {
		return -1;
	}
	s->queued_rows -= (uint64_t)sqlite3_changes(s->db);
	if (unref_gone(s) != 0) {
		return -1;
	}
	atomic_fetch_add(&s->expired, (uint64_t)np);

	// Retained messages past their expiry.
	if (sqlite3_prepare_v2(s->db,
	        "SELECT r.topic, r.msg_id FROM retained r JOIN msgs m ON m.id = r.msg_id"
	        " WHERE m.expiry_wall_ms != 0 AND m.expiry_wall_ms <= ?1",
	        -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)now);
	long nr = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		nr++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		return -1;
	}
	if (nr > 0) {
		char sql[512];
		snprintf(sql, sizeof(sql),
		    "CREATE TEMP TABLE gone AS SELECT r.topic, r.msg_id FROM retained r JOIN msgs m"
		    " ON m.id = r.msg_id WHERE m.expiry_wall_ms != 0 AND m.expiry_wall_ms <= %llu;"
		    "DELETE FROM retained WHERE topic IN (SELECT topic FROM gone);"
		    "UPDATE msgs SET refs = refs - (SELECT COUNT(*) FROM gone g WHERE g.msg_id ="
		    " msgs.id) WHERE id IN (SELECT msg_id FROM gone);"
		    "DELETE FROM msgs WHERE refs <= 0 AND id IN (SELECT msg_id FROM gone);"
		    "DROP TABLE gone;",
		    (unsigned long long)now);
		if (exec(s, sql) != 0) {
			return -1;
		}
		atomic_fetch_add(&s->expired, (uint64_t)nr);
	}
	return 0;
}

// A map from message row to the message built for it, so that a message
// queued for many sessions is one allocation after a load too.
typedef struct msg_cache {
	int64_t  *ids;
	nmq_msg **msgs;
	size_t    cap, len;
} msg_cache;

static nmq_msg *cache_get(msg_cache *c, int64_t id)
{
	if (c->cap == 0) {
		return NULL;
	}
	for (size_t i = (size_t)id * 0x9E3779B97F4A7C15ull & (c->cap - 1); c->ids[i] != 0;
	     i        = (i + 1) & (c->cap - 1)) {
		if (c->ids[i] == id) {
			return c->msgs[i];
		}
	}
	return NULL;
}

// Takes over the caller's reference to m. Returns false (the caller keeps
// it) when out of memory: only the sharing is lost.
static bool cache_put(msg_cache *c, int64_t id, nmq_msg *m)
{
	if ((c->len + 1) * 2 > c->cap) {
		size_t    cap  = c->cap ? c->cap * 2 : 256;
		int64_t  *ids  = calloc(cap, sizeof(*ids));
		nmq_msg **msgs = calloc(cap, sizeof(*msgs));
		if (ids == NULL || msgs == NULL) {
			free(ids);
			free(msgs);
			return false;
		}
		for (size_t i = 0; i < c->cap; i++) {
			if (c->ids[i] != 0) {
				size_t j = (size_t)c->ids[i] * 0x9E3779B97F4A7C15ull & (cap - 1);
				while (ids[j] != 0) {
					j = (j + 1) & (cap - 1);
				}
				ids[j]  = c->ids[i];
				msgs[j] = c->msgs[i];
			}
		}
		free(c->ids);
		free(c->msgs);
		c->ids  = ids;
		c->msgs = msgs;
		c->cap  = cap;
	}
	size_t i = (size_t)id * 0x9E3779B97F4A7C15ull & (c->cap - 1);
	while (c->ids[i] != 0) {
		i = (i + 1) & (c->cap - 1);
	}
	c->ids[i]  = id;
	c->msgs[i] = m;
	c->len++;
	return true;
}

static void cache_free(msg_cache *c)
{
	for (size_t i = 0; i < c->cap; i++) {
		if (c->ids[i] != 0) {
			nmq_msg_release(c->msgs[i]);
		}
	}
	free(c->ids);
	free(c->msgs);
}

// Fills q from a row of STMT_QUEUE_READ-shaped columns: seq, qos, retain,
// state, packet_id, sub_ids, then the message's columns at 6, its id at 13.
static void qmsg_from_row(sqlite3_stmt *st, const char *cid, nmq_msg *m, store_qmsg *q)
{
	q->client_id = cid;
	q->seq       = (uint64_t)sqlite3_column_int64(st, 0);
	q->qos       = (uint8_t)sqlite3_column_int(st, 1);
	q->retain    = sqlite3_column_int(st, 2) != 0;
	q->state     = (uint8_t)sqlite3_column_int(st, 3);
	q->packet_id = (uint16_t)sqlite3_column_int(st, 4);
	q->n_sub_ids = (uint32_t)((size_t)sqlite3_column_bytes(st, 5) / sizeof(uint32_t));
	q->sub_ids   = q->n_sub_ids ? sqlite3_column_blob(st, 5) : NULL;
	q->msg       = m;
}

#define LOAD_QUEUE_COLS                                                                            \
	"SELECT q.seq, q.qos, q.retain, q.state, q.packet_id, q.sub_ids, m.topic, m.qos, "         \
	"m.retain,"                                                                                \
	" m.expiry_interval, m.expiry_wall_ms, m.props, m.payload, q.msg_id, q.cid"                \
	" FROM queue q JOIN msgs m ON m.id = q.msg_id"
static const char load_queue_sql[] = LOAD_QUEUE_COLS " ORDER BY q.cid, q.seq";
// Only the messages in flight (sent, awaiting their ack): the queued ones
// stay on disk for store_queue_read.
static const char load_inflight_sql[] = LOAD_QUEUE_COLS " WHERE q.state != 0 ORDER BY q.cid, q.seq";

static int load_rows(nmq_store *s, const store_load_ops *ops, void *arg, uint64_t wall,
    uint64_t mono, const expired_wills *wills)
{
	sqlite3_stmt *st = NULL;
	int           rc = SQLITE_DONE;
	if (ops->session != NULL) {
		if (sqlite3_prepare_v2(s->db,
		        "SELECT s.cid, s.username, s.expiry_s, s.proto, s.offline_wall_ms,"
		        " s.will_delay_s, m.topic, m.qos, m.retain, m.expiry_interval,"
		        " m.expiry_wall_ms, m.props, m.payload, s.will_msg,"
		        " (SELECT MAX(q.seq) FROM queue q WHERE q.cid = s.cid)"
		        " FROM sessions s LEFT JOIN msgs m ON m.id = s.will_msg",
		        -1, &st, NULL)
		    != SQLITE_OK) {
			return -1;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			if (wills_has(wills, (const char *)sqlite3_column_text(st, 0))) {
				continue; // ended: only its will is left (expired_will)
			}
			store_session rec = {
				.client_id       = (const char *)sqlite3_column_text(st, 0),
				.username        = (const char *)sqlite3_column_text(st, 1),
				.expiry_s        = (uint32_t)sqlite3_column_int64(st, 2),
				.proto_ver       = (uint8_t)sqlite3_column_int(st, 3),
				.offline_wall_ms = (uint64_t)sqlite3_column_int64(st, 4),
				.will_delay_s    = (uint32_t)sqlite3_column_int64(st, 5),
				.queue_max_seq   = (uint64_t)sqlite3_column_int64(st, 14),
			};
			if (sqlite3_column_type(st, 13) != SQLITE_NULL) {
				rec.will_msg = store_msg_from_row(
				    st, 6, sqlite3_column_int64(st, 13), wall, mono);
				if (rec.will_msg == NULL) {
					rc = SQLITE_NOMEM;
					break;
				}
			}
			ops->session(arg, &rec);
			nmq_msg_release(rec.will_msg);
		}
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			return -1;
		}
	}
	if (ops->sub != NULL) {
		if (sqlite3_prepare_v2(
		        s->db, "SELECT cid, filter, options, sub_id FROM subs", -1, &st, NULL)
		    != SQLITE_OK) {
			return -1;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			store_sub sub = {
				.client_id = (const char *)sqlite3_column_text(st, 0),
				.filter    = (const char *)sqlite3_column_text(st, 1),
				.options   = (uint8_t)sqlite3_column_int(st, 2),
				.sub_id    = (uint32_t)sqlite3_column_int64(st, 3),
			};
			ops->sub(arg, &sub);
		}
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			return -1;
		}
	}
	if (ops->rel != NULL) {
		if (sqlite3_prepare_v2(s->db, "SELECT cid, packet_id FROM rel", -1, &st, NULL)
		    != SQLITE_OK) {
			return -1;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			ops->rel(arg, (const char *)sqlite3_column_text(st, 0),
			    (uint16_t)sqlite3_column_int(st, 1));
		}
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			return -1;
		}
	}
	if (ops->qmsg != NULL) {
		msg_cache cache = { 0 };
		if (sqlite3_prepare_v2(s->db,
		        ops->qmsg_inflight_only ? load_inflight_sql : load_queue_sql, -1, &st, NULL)
		    != SQLITE_OK) {
			return -1;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			int64_t  id    = sqlite3_column_int64(st, 13);
			nmq_msg *m     = cache_get(&cache, id);
			bool     owned = false;
			if (m == NULL) {
				if ((m = store_msg_from_row(st, 6, id, wall, mono)) == NULL) {
					rc = SQLITE_NOMEM;
					break;
				}
				owned = !cache_put(&cache, id, m);
			}
			store_qmsg q;
			qmsg_from_row(st, (const char *)sqlite3_column_text(st, 14), m, &q);
			ops->qmsg(arg, &q);
			if (owned) {
				nmq_msg_release(m);
			}
		}
		sqlite3_finalize(st);
		cache_free(&cache);
		if (rc != SQLITE_DONE) {
			return -1;
		}
	}
	if (ops->retained != NULL) {
		if (sqlite3_prepare_v2(s->db,
		        "SELECT m.topic, m.qos, m.retain, m.expiry_interval, m.expiry_wall_ms, "
		        "m.props,"
		        " m.payload, r.msg_id FROM retained r JOIN msgs m ON m.id = r.msg_id",
		        -1, &st, NULL)
		    != SQLITE_OK) {
			return -1;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			nmq_msg *m
			    = store_msg_from_row(st, 0, sqlite3_column_int64(st, 7), wall, mono);
			if (m == NULL) {
				rc = SQLITE_NOMEM;
				break;
			}
			ops->retained(arg, m);
			nmq_msg_release(m);
		}
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			return -1;
		}
	}
	return 0;
}

nmq_err store_load(nmq_store *s, uint64_t now_wall_ms, const store_load_ops *ops, void *arg)
{
	// The store thread is idle (nothing was queued yet), but take its
	// place formally: wait for it to be idle and keep it so.
	pthread_mutex_lock(&s->mtx);
	bool idle = s->head == NULL;
	pthread_mutex_unlock(&s->mtx);
	if (!idle) {
		log_error("store", "store_load called after operations were queued");
		return NMQ_EINVAL;
	}
	uint64_t      mono     = store_mono_ms();
	expired_wills wills    = { 0 };
	uint64_t      alive    = 0;
	long          n_on     = 0;
	char          why[256] = "";
	if (exec(s, "BEGIN IMMEDIATE") != 0) {
		goto fail;
	}
	// Sessions whose client was connected when the broker stopped went
	// offline then: since the last time the store knew it was alive.
	// (The reason is kept before the ROLLBACK, whose own message would
	// replace it: a COMMIT that failed on a full disk was rolled back.)
	if ((n_on = store_alive_load(s, &alive)) < 0
	    || drop_expired(s, now_wall_ms, mono, ops->expired_will != NULL ? &wills : NULL) != 0
	    || drop_orphans(s) != 0 || exec(s, "COMMIT") != 0) {
		snprintf(why, sizeof(why), "%s%s", sqlite3_errmsg(s->db),
		    store_no_room(sqlite3_extended_errcode(s->db))
		        ? "; the file is left unchanged: start again once there is room"
		        : "");
		exec(s, "ROLLBACK");
		goto fail;
	}
	if (n_on > 0) {
		log_info("store",
		    "path=%s event=online_at_stop sessions=%ld alive_wall_ms=%llu down_ms=%lld",
		    s->path, n_on, (unsigned long long)alive,
		    (long long)now_wall_ms - (long long)alive);
	}
	atomic_store(&s->queued_rows_pub, s->queued_rows);
	if (load_rows(s, ops, arg, now_wall_ms, mono, &wills) != 0) {
		goto fail;
	}
	for (size_t i = 0; i < wills.n; i++) {
		ops->expired_will(arg, wills.cids[i], wills.msgs[i]);
	}
	wills_free(&wills);
	return NMQ_OK;
fail:
	wills_free(&wills);
	log_error("store", "path=%s event=load_failed error=\"%s\"", s->path,
	    why[0] != '\0' ? why : sqlite3_errmsg(s->db));
	return NMQ_EIO;
}

// One read of up to op->u32 rows: those not expired are given to
// op->read_fn (*got), the expired ones deleted (*expired).
static int queue_read_pass(
    nmq_store *s, store_op *op, uint64_t wall, uint64_t mono, long *got, long *expired)
{
	sqlite3_stmt *st = store_stmt(s, STMT_QUEUE_READ);
	sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)op->u64);
	sqlite3_bind_int64(st, 3, op->u32 ? (sqlite3_int64)op->u32 : -1);
	int64_t *gone  = NULL;
	size_t   ngone = 0, cap = 0;
	int      rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t  id       = sqlite3_column_int64(st, 13);
		uint64_t exp_wall = (uint64_t)sqlite3_column_int64(st, 10);
		if (exp_wall != 0 && exp_wall <= wall) {
			// Expired while stored: delete after the read.
			if (ngone == cap) {
				cap         = cap ? cap * 2 : 16;
				int64_t *nv = realloc(gone, cap * 2 * sizeof(*nv));
				if (nv == NULL) {
					rc = SQLITE_NOMEM;
					break;
				}
				gone = nv;
			}
			gone[2 * ngone]     = (int64_t)sqlite3_column_int64(st, 0); // seq
			gone[2 * ngone + 1] = id;
			ngone++;
			continue;
		}
		nmq_msg *m = store_msg_from_row(st, 6, id, wall, mono);
		if (m == NULL) {
			rc = SQLITE_NOMEM;
			break;
		}
		store_qmsg q;
		qmsg_from_row(st, op->s1, m, &q);
		if (op->read_fn != NULL) {
			op->read_fn(op->arg, &q);
		}
		nmq_msg_release(m);
		(*got)++;
	}
	sqlite3_reset(st);
	int ret = rc == SQLITE_DONE ? 0 : -1;
	for (size_t i = 0; ret == 0 && i < ngone; i++) {
		sqlite3_stmt *d = store_stmt(s, STMT_QUEUE_DEL);
		sqlite3_bind_text(d, 1, op->s1, -1, SQLITE_STATIC);
		sqlite3_bind_int64(d, 2, gone[2 * i]);
		int r = sqlite3_step(d);
		while (r == SQLITE_ROW) {
			r = sqlite3_step(d);
		}
		sqlite3_reset(d);
		if (r != SQLITE_DONE) {
			ret = -1;
			break;
		}
		s->queued_rows--;
		sqlite3_stmt *u = store_stmt(s, STMT_MSG_UNREF);
		sqlite3_bind_int64(u, 1, gone[2 * i + 1]);
		sqlite3_stmt *g = NULL;
		if (sqlite3_step(u) != SQLITE_DONE) {
			ret = -1;
		}
		sqlite3_reset(u);
		g = store_stmt(s, STMT_MSG_GC);
		sqlite3_bind_int64(g, 1, gone[2 * i + 1]);
		if (ret == 0 && sqlite3_step(g) != SQLITE_DONE) {
			ret = -1;
		}
		sqlite3_reset(g);
		atomic_fetch_add(&s->expired, 1);
		(*expired)++;
	}
	free(gone);
	return ret;
}

int store_queue_read_apply(nmq_store *s, store_op *op, uint64_t wall, uint64_t mono)
{
	for (;;) {
		long got = 0, expired = 0;
		if (queue_read_pass(s, op, wall, mono, &got, &expired) != 0) {
			return -1;
		}
		// A read that found only expired messages (deleted now) is read
		// again: its reader takes an empty read for the end of the
		// backlog, and what follows them would have stayed on disk,
		// undelivered. (The next of the session's offline segments
		// become rows first, as for the first pass: store_oseg.c.)
		if (got > 0 || expired == 0) {
			return 0;
		}
		if (store_oseg_expand_to(s, op->s1, 0, op->u32 != 0 ? op->u32 : UINT32_MAX) != 0) {
			return -1;
		}
	}
}

int store_subs_read_apply(nmq_store *s, store_op *op)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(
	        s->db, "SELECT filter, options, sub_id FROM subs WHERE cid = ?1", -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		store_sub sub = {
			.client_id = op->s1,
			.filter    = (const char *)sqlite3_column_text(st, 0),
			.options   = (uint8_t)sqlite3_column_int(st, 1),
			.sub_id    = (uint32_t)sqlite3_column_int64(st, 2),
		};
		if (sub.filter != NULL && op->sub_fn != NULL) {
			op->sub_fn(op->arg, &sub);
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int store_rels_read_apply(nmq_store *s, store_op *op)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, "SELECT packet_id FROM rel WHERE cid = ?1", -1, &st, NULL)
	    != SQLITE_OK) {
		return -1;
	}
	sqlite3_bind_text(st, 1, op->s1, -1, SQLITE_STATIC);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (op->rel_fn != NULL) {
			op->rel_fn(op->arg, (uint16_t)sqlite3_column_int(st, 0));
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}
