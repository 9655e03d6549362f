// Opening the durable store from the configuration; see store_conf.h.
#include "src/store/store_conf.h"

#include <string.h>

#include "src/log/log.h"

bool store_conf_wanted(const nmq_conf *conf)
{
	return conf->bridge_cache_enable;
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
	o.dir = conf->bridge_cache_path != NULL && conf->bridge_cache_path[0] != '\0'
	    ? conf->bridge_cache_path
	    : "/tmp";
	// A commit must survive a kill -9 of the broker; the cache is not
	// asked to survive a power cut (no fsync per group commit).
	o.durability = STORE_DURABLE_OS;
	o.flush_max  = conf->bridge_cache_flush > 0 ? conf->bridge_cache_flush : 100;
	o.max_queued = conf->bridge_cache_disk_size;
	// A burst while the link is down is written as fast as it arrives:
	// room for a full cache of puts waiting for the store thread (each
	// holds a message reference until it is written), so that a burst is
	// never refused for want of queue space.
	uint64_t pending = (uint64_t)conf->bridge_cache_disk_size * 2 + 1024;
	o.max_pending    = pending < 65536 ? 65536
	       : pending > (1u << 24)      ? (1u << 24)
	                                   : (uint32_t)pending;
	o.evicted        = evicted;
	o.evicted_arg    = evicted_arg;
	nmq_err e        = store_open(sp, &o, err, errlen);
	if (e == NMQ_OK) {
		log_info("store", "path=%s event=opened for=bridges.mqtt.cache max_queued=%u",
		    store_path(*sp), conf->bridge_cache_disk_size);
	}
	return e;
}
