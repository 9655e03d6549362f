// The hand-off between the transport and the protocol/application layers: a
// pool of worker threads (the PARALLEL work contexts) fed by one FIFO of
// intrusive jobs.
//
// Contract:
// - workq_post() may be called from any thread, including NNG callbacks and
//   the timer wheel; it never blocks beyond a short mutex hold and never
//   allocates (the job is embedded in its owner).
// - A job must not be posted again until its function has started running.
// - Job functions run on worker threads; they may block briefly (locks) but
//   not on I/O.
// - Per worker, a flush list collects connections whose output should be
//   sent once the current job ends (see conn_tx_kick_deferred).
#ifndef NMQ_WORKQ_H
#define NMQ_WORKQ_H

#include <stdbool.h>

typedef struct workq_job {
	struct workq_job *next;
	void (*fn)(struct workq_job *job);
} workq_job;

typedef struct workq workq;

// Starts n worker threads. Returns NULL on failure.
workq *workq_alloc(int n);
// Runs what is queued, stops and joins the threads, frees the pool.
void workq_free(workq *wq);
void workq_post(workq *wq, workq_job *job);
// Number of worker threads.
int workq_size(workq *wq);

// Called on a worker thread: registers fn(arg) to run when the current job
// returns (once per arg per job; duplicates are the caller's to avoid).
// Returns false when not on a worker thread (the caller then acts now).
bool workq_defer(void (*fn)(void *arg), void *arg);

#endif // NMQ_WORKQ_H
