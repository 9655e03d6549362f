// Opening the durable store from the configuration; see store_conf.h.
#include "src/store/store_conf.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "src/log/log.h"

// The smallest cap of a group commit, in operations.
#define STORE_GROUP_MIN 65536u

bool store_conf_persist(const nmq_conf *conf)
{
	return conf->sqlite_enable;
}

bool store_conf_wanted(const nmq_conf *conf)
{
	return conf->sqlite_enable || conf->bridge_cache_enable;
}

// Warns about the bridges.mqtt.cache values that differ from the sqlite
// section's, which applies to both.
static void cache_settings_ignored(const nmq_conf *conf, const char *dir)
{
	const char *cp = conf->bridge_cache_path != NULL ? conf->bridge_cache_path : "";
	size_t      cl = strlen(cp), dl = strlen(dir);
	while (cl > 1 && cp[cl - 1] == '/') {
		cl--;
	}
	while (dl > 1 && dir[dl - 1] == '/') {
		dl--;
	}
	if (cl > 0 && (cl != dl || strncmp(cp, dir, cl) != 0)) {
		log_warn("store",
		    "key=bridges.mqtt.cache.mounted_file_path value=%s event=ignored "
		    "reason=\"the cache is kept in the sqlite section's database\" dir=%s",
		    cp, dir);
	}
	if (conf->bridge_cache_disk_size != conf->sqlite_disk_cache_size) {
		log_warn("store",
		    "key=bridges.mqtt.cache.disk_cache_size value=%u event=ignored "
		    "reason=\"sqlite.disk_cache_size bounds the cache too\" bound=%llu",
		    conf->bridge_cache_disk_size, (unsigned long long)conf->sqlite_disk_cache_size);
	}
}

nmq_err store_conf_open(nmq_store **sp, const nmq_conf                    *conf,
    void (*evicted)(void *arg, const char *client_id, uint64_t seq), void *evicted_arg, char *err,
    size_t errlen)
{
	*sp = NULL;
	if (!store_conf_wanted(conf)) {
		return NMQ_OK;
	}
	store_opts o;
	memset(&o, 0, sizeof(o));
	if (conf->sqlite_enable) {
		o.dir        = conf->sqlite_path != NULL && conf->sqlite_path[0] != '\0'
		           ? conf->sqlite_path
		           : ".";
		o.durability = conf->sqlite_durability == CONF_SQLITE_OS ? STORE_DURABLE_OS
		                                                         : STORE_DURABLE_FSYNC;
		o.flush_max  = conf->sqlite_flush_mem_threshold;
		o.max_queued = conf->sqlite_disk_cache_size;
		if (conf->bridge_cache_enable) {
			// One database: the bridges' cache is kept in the sqlite
			// section's, under its settings (docs/bridge.md).
			cache_settings_ignored(conf, o.dir);
		}
	} else {
		o.dir = conf->bridge_cache_path != NULL && conf->bridge_cache_path[0] != '\0'
		    ? conf->bridge_cache_path
		    : "/tmp";
		// A commit must survive a kill -9 of the broker; the cache alone
		// is not asked to survive a power cut (no fsync per group commit).
		o.durability = STORE_DURABLE_OS;
		o.flush_max  = conf->bridge_cache_flush;
		o.max_queued = conf->bridge_cache_disk_size;
	}
	// A group commit takes everything waiting when the previous commit
	// ends (decisions/0020): flush_mem_threshold only raises the cap.
	if (o.flush_max < STORE_GROUP_MIN) {
		o.flush_max = STORE_GROUP_MIN;
	}
	// A burst of puts (an offline backlog, a bridge's link down) is
	// written as fast as it arrives: room for a full cache of them
	// waiting for the store thread (each holds a message reference until
	// it is written), so that a burst is not refused for want of queue
	// space.
	uint64_t bound   = conf->sqlite_disk_cache_size > conf->bridge_cache_disk_size
	      ? conf->sqlite_disk_cache_size
	      : conf->bridge_cache_disk_size;
	uint64_t pending = bound * 2 + 1024;
	o.max_pending    = pending < 65536 ? 65536
	       : pending > (1u << 24)      ? (1u << 24)
	                                   : (uint32_t)pending;
	if (conf->sqlite_enable && conf->sqlite_max_pending > 0) {
		o.max_pending = conf->sqlite_max_pending;
	}
	o.evicted     = evicted;
	o.evicted_arg = evicted_arg;
	nmq_err e     = store_open(sp, &o, err, errlen);
	if (e == NMQ_OK) {
		log_info("store",
		    "path=%s event=opened for=%s%s%s durability=%s flush_max=%u max_queued=%llu",
		    store_path(*sp), conf->sqlite_enable ? "sqlite" : "",
		    conf->sqlite_enable && conf->bridge_cache_enable ? "," : "",
		    conf->bridge_cache_enable ? "bridges.mqtt.cache" : "",
		    o.durability == STORE_DURABLE_FSYNC ? "fsync" : "os", o.flush_max,
		    (unsigned long long)o.max_queued);
	}
	return e;
}

typedef struct drain_wait {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	bool            done;
} drain_wait;

static void drain_done(void *arg, nmq_err err)
{
	drain_wait *w = arg;
	(void)err;
	pthread_mutex_lock(&w->mtx);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mtx);
}

void store_conf_drain(nmq_store *st)
{
	drain_wait w;
	pthread_mutex_init(&w.mtx, NULL);
	pthread_cond_init(&w.cv, NULL);
	w.done = false;
	if (store_sync(st, drain_done, &w) == NMQ_OK) {
		pthread_mutex_lock(&w.mtx);
		while (!w.done) {
			pthread_cond_wait(&w.cv, &w.mtx);
		}
		pthread_mutex_unlock(&w.mtx);
	}
	pthread_mutex_destroy(&w.mtx);
	pthread_cond_destroy(&w.cv);
}
