// The worker pool (the PARALLEL work contexts). Each worker is an event
// loop: it waits on its own epoll set for (a) I/O readiness of the plain
// TCP sockets it owns and (b) jobs posted to it, and runs both. Work for
// one connection therefore stays on one thread, and a write that the
// kernel accepts at once needs no hand-off at all.
//
// Contract:
// - workq_post()/workq_post_to() may be called from any thread, including
//   NNG callbacks and the timer wheel; they never block beyond a short
//   mutex hold and never allocate (the job is embedded in its owner).
// - A job must not be posted again until its function has started running.
// - Job functions and I/O handlers run on worker threads; they may block
//   briefly (locks) but never on I/O.
// - Per worker, a deferred list collects actions (e.g. flushing a
//   connection) that run once the current batch is handled: the epoll
//   events of one wake-up, or all the jobs taken from the queue at once
//   (earlier only when the list is half full).
// - An I/O handler registered on a worker runs only on that worker, so a
//   job posted to the same worker never runs concurrently with it.
#ifndef NMQ_WORKQ_H
#define NMQ_WORKQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/core/nmq_err.h"

typedef struct workq_job {
	struct workq_job *next;
	void (*fn)(struct workq_job *job);
} workq_job;

// An I/O readiness handler, embedded in its owner. events are EPOLL* bits.
typedef struct workq_io {
	void (*fn)(struct workq_io *io, uint32_t events);
} workq_io;

typedef struct workq workq;

// Starts n worker threads. Returns NULL on failure.
workq *workq_alloc(int n);
// Runs what is queued, stops and joins the threads, frees the pool. Every
// registered descriptor must have been removed first.
void workq_free(workq *wq);
// Posts to a worker chosen round-robin.
void workq_post(workq *wq, workq_job *job);
// Posts to worker `w` (0 <= w < workq_size()).
void workq_post_to(workq *wq, int w, workq_job *job);
// Number of worker threads.
int workq_size(workq *wq);
// Picks a worker round-robin (for assigning a new connection).
int workq_pick(workq *wq);

// Registers, changes or removes fd on worker w's epoll set. Return NMQ_OK,
// or the error of epoll_ctl() (nmq_err_from_errno; errno is left set):
// NMQ_ENOMEM, NMQ_EEXIST (already registered), NMQ_ENOENT (not
// registered), NMQ_EIO.
nmq_err workq_io_add(workq *wq, int w, int fd, workq_io *io, uint32_t events);
nmq_err workq_io_mod(workq *wq, int w, int fd, workq_io *io, uint32_t events);
nmq_err workq_io_del(workq *wq, int w, int fd);

// Returns the calling worker's scratch buffer (WORKQ_SCRATCH bytes) and its
// size in *len; NULL when not on a worker. Valid until the caller returns
// to the event loop.
#define WORKQ_SCRATCH (64 * 1024)
uint8_t *workq_scratch(size_t *len);

// Called on a worker thread: registers fn(arg) to run when the current job
// batch or event batch is done (duplicates are the caller's to avoid). Returns
// false when not on a worker thread (the caller then acts now).
bool workq_defer(void (*fn)(void *arg), void *arg);

#endif // NMQ_WORKQ_H
