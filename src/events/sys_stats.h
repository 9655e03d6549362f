// Broker statistics published under $SYS/broker/ (the topics Mosquitto
// users already scrape: uptime, version, clients, messages, load averages,
// bytes, subscriptions, retained messages, heap), retained, every
// mqtt.sys_interval seconds (docs/compatibility.md §9).
//
// Threads: one thread of its own ("nmq:sys", asleep while the interval is
// 0); it reads lock-free counters (proto_metrics,
// the transport's byte totals, the topic tree and the retained store's
// counts) and publishes through broker_publish(), which queues to the
// subscribers and leaves the writing to the workers. sys_stats_start,
// sys_stats_set_interval and sys_stats_stop are called by the main thread.
#ifndef NMQ_SYS_STATS_H
#define NMQ_SYS_STATS_H

#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "src/broker/broker.h"

typedef struct sys_stats sys_stats;

// Starts publishing every interval_s seconds (0: not now; a later
// sys_stats_set_interval may turn it on). *out is set on NMQ_OK; NMQ_ENOMEM
// when the state or the thread cannot be had (logged).
nmq_err sys_stats_start(nmq_broker *b, nmq_proto *p, uint32_t interval_s, sys_stats **out);
// Changes the period (a reload); 0 stops publishing. The next publication
// is one new period from now.
void sys_stats_set_interval(sys_stats *s, uint32_t interval_s);
// Stops the thread and frees s (NULL is fine).
void sys_stats_stop(sys_stats *s);

// The moving average of a per-minute rate over `period_s`, updated with a
// new sample `rate` (events per minute) observed over `elapsed_s` seconds:
// the exponential decay Mosquitto uses for its load topics. Pure; exposed
// for the unit test.
double sys_stats_load_update(double avg, double rate, double elapsed_s, double period_s);

#endif // NMQ_SYS_STATS_H
