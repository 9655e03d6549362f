#include "nng/transport/workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define WORKQ_DEFER_MAX 1024
#define WORKQ_EVENTS    128

typedef struct deferred {
	void (*fn)(void *arg);
	void *arg;
} deferred;

// One worker: its epoll set, its wake-up eventfd and its job list.
typedef struct worker {
	struct workq   *wq;
	pthread_t       thr;
	int             epfd;
	int             evfd;
	workq_io        wake; // marker for the eventfd in epoll data
	pthread_mutex_t mtx;
	workq_job      *head; // guarded by mtx
	workq_job      *tail;
	bool            woken; // an eventfd write is pending (mtx)
	bool            stop; // (mtx)
	// Deferred actions, this thread only: d collects them while `run` holds
	// the batch being run. Both grow on demand (64, 128, ... up to
	// WORKQ_DEFER_MAX entries), so an idle worker holds none.
	deferred *d;
	int       nd;
	int       cap;
	deferred *run;
	int       run_cap;
	uint8_t  *scratch; // WORKQ_SCRATCH bytes, this thread only
} worker;

static __thread worker *tls_worker;

struct workq {
	int         n;
	worker     *w;
	atomic_uint rr;
};

// Runs the deferred actions of the current worker until none are left.
static void run_deferred(worker *w)
{
	while (w->nd > 0) {
		// Swap the arrays: what the actions defer goes to the other one.
		deferred *batch = w->d;
		int       n     = w->nd;
		int       cap   = w->cap;
		w->d            = w->run;
		w->cap          = w->run_cap;
		w->nd           = 0;
		w->run          = batch;
		w->run_cap      = cap;
		for (int i = 0; i < n; i++) {
			batch[i].fn(batch[i].arg);
		}
	}
}

// Runs every job queued on w. Returns false when the worker must exit.
static bool run_jobs(worker *w)
{
	uint64_t v;
	(void)!read(w->evfd, &v, sizeof(v));
	pthread_mutex_lock(&w->mtx);
	workq_job *job = w->head;
	w->head        = NULL;
	w->tail        = NULL;
	w->woken       = false;
	bool stop      = w->stop;
	pthread_mutex_unlock(&w->mtx);
	// The deferred actions (connection flushes) run once after the whole
	// batch, as after an epoll batch: what several jobs queue for one
	// connection (the acks one group commit released) leaves in one gather
	// send. A batch that defers for many connections flushes between jobs
	// before the list can fill up (a full list would post the flush for
	// later instead).
	while (job != NULL) {
		workq_job *next = job->next;
		job->next       = NULL;
		job->fn(job);
		if (w->nd >= WORKQ_DEFER_MAX / 2) {
			run_deferred(w);
		}
		job = next;
	}
	run_deferred(w);
	if (!stop) {
		return true;
	}
	// Stop only once nothing more was posted meanwhile.
	pthread_mutex_lock(&w->mtx);
	bool empty = w->head == NULL;
	pthread_mutex_unlock(&w->mtx);
	return !empty;
}

// The worker thread body: wait for readiness or jobs, handle them.
static void *worker_main(void *arg)
{
	worker            *w = arg;
	struct epoll_event ev[WORKQ_EVENTS];
	uint8_t            scratch[WORKQ_SCRATCH];
	tls_worker = w;
	w->nd      = 0;
	w->scratch = scratch;
	(void)pthread_setname_np(pthread_self(), "nmq:worker");
	for (;;) {
		int  n    = epoll_wait(w->epfd, ev, WORKQ_EVENTS, -1);
		bool jobs = false;
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			break;
		}
		for (int i = 0; i < n; i++) {
			workq_io *io = ev[i].data.ptr;
			if (io == &w->wake) {
				jobs = true;
				continue;
			}
			io->fn(io, ev[i].events);
		}
		run_deferred(w);
		if (jobs && !run_jobs(w)) {
			break;
		}
	}
	tls_worker = NULL;
	free(w->d);
	free(w->run);
	w->d   = NULL;
	w->run = NULL;
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
	wq->w = calloc((size_t)n, sizeof(worker));
	if (wq->w == NULL) {
		free(wq);
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		worker *w = &wq->w[i];
		w->wq     = wq;
		w->epfd   = epoll_create1(EPOLL_CLOEXEC);
		w->evfd   = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		pthread_mutex_init(&w->mtx, NULL);
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &w->wake };
		if (w->epfd < 0 || w->evfd < 0
		    || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0
		    || pthread_create(&w->thr, NULL, worker_main, w) != 0) {
			if (w->epfd >= 0) {
				close(w->epfd);
			}
			if (w->evfd >= 0) {
				close(w->evfd);
			}
			pthread_mutex_destroy(&w->mtx);
			break;
		}
		wq->n++;
	}
	if (wq->n == 0) {
		free(wq->w);
		free(wq);
		return NULL;
	}
	return wq;
}

// Wakes worker w (caller holds w->mtx).
static void wake_locked(worker *w)
{
	if (!w->woken) {
		uint64_t one = 1;
		w->woken     = true;
		(void)!write(w->evfd, &one, sizeof(one));
	}
}

// Drains and stops the pool.
void workq_free(workq *wq)
{
	if (wq == NULL) {
		return;
	}
	for (int i = 0; i < wq->n; i++) {
		worker *w = &wq->w[i];
		pthread_mutex_lock(&w->mtx);
		w->stop = true;
		wake_locked(w);
		pthread_mutex_unlock(&w->mtx);
	}
	for (int i = 0; i < wq->n; i++) {
		worker *w = &wq->w[i];
		pthread_join(w->thr, NULL);
		close(w->epfd);
		close(w->evfd);
		pthread_mutex_destroy(&w->mtx);
	}
	free(wq->w);
	free(wq);
}

// Appends a job to worker `i` and wakes it.
void workq_post_to(workq *wq, int i, workq_job *job)
{
	worker *w = &wq->w[i];
	job->next = NULL;
	pthread_mutex_lock(&w->mtx);
	if (w->tail != NULL) {
		w->tail->next = job;
	} else {
		w->head = job;
	}
	w->tail = job;
	wake_locked(w);
	pthread_mutex_unlock(&w->mtx);
}

int workq_pick(workq *wq)
{
	return (int)(atomic_fetch_add_explicit(&wq->rr, 1, memory_order_relaxed) % (unsigned)wq->n);
}

void workq_post(workq *wq, workq_job *job)
{
	workq_post_to(wq, workq_pick(wq), job);
}

int workq_size(workq *wq)
{
	return wq->n;
}

nmq_err workq_io_add(workq *wq, int w, int fd, workq_io *io, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = io };
	return epoll_ctl(wq->w[w].epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? NMQ_OK
	                                                             : nmq_err_from_errno(errno);
}

nmq_err workq_io_mod(workq *wq, int w, int fd, workq_io *io, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = io };
	return epoll_ctl(wq->w[w].epfd, EPOLL_CTL_MOD, fd, &ev) == 0 ? NMQ_OK
	                                                             : nmq_err_from_errno(errno);
}

nmq_err workq_io_del(workq *wq, int w, int fd)
{
	struct epoll_event ev = { 0 };
	return epoll_ctl(wq->w[w].epfd, EPOLL_CTL_DEL, fd, &ev) == 0 ? NMQ_OK
	                                                             : nmq_err_from_errno(errno);
}

// Queues fn(arg) to run after the current job or event batch; false if not
// on a worker or the list is full (the caller then runs it now).
bool workq_defer(void (*fn)(void *arg), void *arg)
{
	worker *w = tls_worker;
	if (w == NULL) {
		return false;
	}
	if (w->nd == w->cap) {
		if (w->cap >= WORKQ_DEFER_MAX) {
			return false;
		}
		int       cap = w->cap > 0 ? w->cap * 2 : 64;
		deferred *d   = realloc(w->d, (size_t)cap * sizeof(*d));
		if (d == NULL) {
			return false;
		}
		w->d   = d;
		w->cap = cap;
	}
	w->d[w->nd].fn  = fn;
	w->d[w->nd].arg = arg;
	w->nd++;
	return true;
}

uint8_t *workq_scratch(size_t *len)
{
	worker *w = tls_worker;
	if (w == NULL) {
		*len = 0;
		return NULL;
	}
	*len = WORKQ_SCRATCH;
	return w->scratch;
}
