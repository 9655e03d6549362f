#include "nng/transport/workq.h"

#include <pthread.h>
#include <stdlib.h>

#define WORKQ_DEFER_MAX 1024

typedef struct deferred {
	void (*fn)(void *arg);
	void *arg;
} deferred;

// Per-worker list of actions to run after the current job.
typedef struct worker_ctx {
	deferred d[WORKQ_DEFER_MAX];
	int      n;
} worker_ctx;

static __thread worker_ctx *tls_ctx;

struct workq {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	workq_job      *head;
	workq_job      *tail;
	bool            stop;
	int             n;
	pthread_t      *threads;
};

// Runs the deferred actions of the current worker.
static void run_deferred(worker_ctx *ctx)
{
	// An action may defer more work; run until the list is empty.
	while (ctx->n > 0) {
		int      n = ctx->n;
		deferred local[WORKQ_DEFER_MAX];
		for (int i = 0; i < n; i++) {
			local[i] = ctx->d[i];
		}
		ctx->n = 0;
		for (int i = 0; i < n; i++) {
			local[i].fn(local[i].arg);
		}
	}
}

// The worker thread body: pops jobs until the pool stops and is empty.
static void *worker_main(void *arg)
{
	workq     *wq = arg;
	worker_ctx ctx;
	ctx.n   = 0;
	tls_ctx = &ctx;
	pthread_mutex_lock(&wq->mtx);
	for (;;) {
		workq_job *job = wq->head;
		if (job == NULL) {
			if (wq->stop) {
				break;
			}
			pthread_cond_wait(&wq->cv, &wq->mtx);
			continue;
		}
		wq->head = job->next;
		if (wq->head == NULL) {
			wq->tail = NULL;
		}
		pthread_mutex_unlock(&wq->mtx);
		job->next = NULL;
		job->fn(job);
		run_deferred(&ctx);
		pthread_mutex_lock(&wq->mtx);
	}
	pthread_mutex_unlock(&wq->mtx);
	tls_ctx = NULL;
	return NULL;
}

// Returns a pool of n running workers, or NULL.
workq *workq_alloc(int n)
{
	workq *wq = calloc(1, sizeof(*wq));
	if (wq == NULL) {
		return NULL;
	}
	if (n < 1) {
		n = 1;
	}
	pthread_mutex_init(&wq->mtx, NULL);
	pthread_cond_init(&wq->cv, NULL);
	wq->threads = calloc((size_t)n, sizeof(pthread_t));
	if (wq->threads == NULL) {
		free(wq);
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		if (pthread_create(&wq->threads[i], NULL, worker_main, wq) != 0) {
			break;
		}
		wq->n++;
	}
	if (wq->n == 0) {
		free(wq->threads);
		free(wq);
		return NULL;
	}
	return wq;
}

// Drains and stops the pool.
void workq_free(workq *wq)
{
	if (wq == NULL) {
		return;
	}
	pthread_mutex_lock(&wq->mtx);
	wq->stop = true;
	pthread_cond_broadcast(&wq->cv);
	pthread_mutex_unlock(&wq->mtx);
	for (int i = 0; i < wq->n; i++) {
		pthread_join(wq->threads[i], NULL);
	}
	pthread_mutex_destroy(&wq->mtx);
	pthread_cond_destroy(&wq->cv);
	free(wq->threads);
	free(wq);
}

// Appends a job and wakes one worker.
void workq_post(workq *wq, workq_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&wq->mtx);
	if (wq->tail != NULL) {
		wq->tail->next = job;
	} else {
		wq->head = job;
	}
	wq->tail = job;
	pthread_cond_signal(&wq->cv);
	pthread_mutex_unlock(&wq->mtx);
}

// Returns the number of workers.
int workq_size(workq *wq)
{
	return wq->n;
}

// Queues fn(arg) to run after the current job; false if not on a worker or
// the list is full (the caller then runs it now).
bool workq_defer(void (*fn)(void *arg), void *arg)
{
	worker_ctx *ctx = tls_ctx;
	if (ctx == NULL || ctx->n >= WORKQ_DEFER_MAX) {
		return false;
	}
	ctx->d[ctx->n].fn  = fn;
	ctx->d[ctx->n].arg = arg;
	ctx->n++;
	return true;
}
