// The per-thread event loop of nanomq_cli; see cli_loop.h.
#include "tools/nanomq_cli/cli_loop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define LOOP_MAX_EVENTS 256

// Returns CLOCK_MONOTONIC in nanoseconds.
uint64_t cli_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Drains the eventfd and calls the owner's wake hook; it cannot fail.
static void loop_wake_event(cli_watch *w, uint32_t events)
{
	cli_loop *l = (cli_loop *)((char *)w - offsetof(cli_loop, wake_watch));
	uint64_t  v;
	(void)events;
	while (read(w->fd, &v, sizeof(v)) > 0) { }
	if (l->on_wake != NULL) {
		l->on_wake(l);
	}
}

// Returns 0 with the loop ready, or -1 with a message in err.
int cli_loop_init(cli_loop *l, char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	l->wakefd     = -1;
	l->tasks_tail = &l->tasks;
	l->epfd       = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		snprintf(err, errlen, "epoll_create1: %s", strerror(errno));
		return -1;
	}
	l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->wakefd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		close(l->epfd);
		l->epfd = -1;
		return -1;
	}
	l->wake_watch.fd       = l->wakefd;
	l->wake_watch.on_event = loop_wake_event;
	if (cli_loop_add(l, &l->wake_watch, EPOLLIN) != 0) {
		snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
		close(l->wakefd);
		close(l->epfd);
		l->epfd = l->wakefd = -1;
		return -1;
	}
	atomic_init(&l->stopping, false);
	l->now = cli_now_ns();
	return 0;
}

// Releases the loop's descriptors and heap; it cannot fail.
void cli_loop_fini(cli_loop *l)
{
	if (l->epfd >= 0) {
		close(l->epfd);
	}
	if (l->wakefd >= 0) {
		close(l->wakefd);
	}
	free(l->heap);
	free(l->scratch);
	l->heap    = NULL;
	l->scratch = NULL;
	l->epfd = l->wakefd = -1;
}

// Returns 0, or -1 with errno set by epoll_ctl.
int cli_loop_add(cli_loop *l, cli_watch *w, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };
	return epoll_ctl(l->epfd, EPOLL_CTL_ADD, w->fd, &ev);
}

// Returns 0, or -1 with errno set by epoll_ctl.
int cli_loop_mod(cli_loop *l, cli_watch *w, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };
	return epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev);
}

// Removes a watch; errors (already closed) are ignored.
void cli_loop_del(cli_loop *l, cli_watch *w)
{
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
}

// Puts t at heap position i and records it.
static void heap_set(cli_loop *l, size_t i, cli_timer *t)
{
	l->heap[i] = t;
	t->slot    = i + 1;
}

// Moves the timer at i up until its parent is due earlier.
static void heap_up(cli_loop *l, size_t i)
{
	cli_timer *t = l->heap[i];
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (l->heap[p]->due <= t->due) {
			break;
		}
		heap_set(l, i, l->heap[p]);
		i = p;
	}
	heap_set(l, i, t);
}

// Moves the timer at i down until its children are due later.
static void heap_down(cli_loop *l, size_t i)
{
	cli_timer *t = l->heap[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= l->nheap) {
			break;
		}
		if (c + 1 < l->nheap && l->heap[c + 1]->due < l->heap[c]->due) {
			c++;
		}
		if (t->due <= l->heap[c]->due) {
			break;
		}
		heap_set(l, i, l->heap[c]);
		i = c;
	}
	heap_set(l, i, t);
}

// Returns 0 with t armed, or -1 if the heap cannot grow.
int cli_loop_timer_arm(cli_loop *l, cli_timer *t, uint64_t due)
{
	if (t->slot != 0) {
		size_t   i   = t->slot - 1;
		uint64_t old = t->due;
		t->due       = due;
		if (due < old) {
			heap_up(l, i);
		} else {
			heap_down(l, i);
		}
		return 0;
	}
	if (l->nheap == l->heapcap) {
		size_t      cap = l->heapcap ? l->heapcap * 2 : 64;
		cli_timer **h   = realloc(l->heap, cap * sizeof(*h));
		if (h == NULL) {
			return -1;
		}
		l->heap    = h;
		l->heapcap = cap;
	}
	t->due = due;
	l->nheap++;
	heap_set(l, l->nheap - 1, t);
	heap_up(l, l->nheap - 1);
	return 0;
}

// Disarms t if it is armed; it cannot fail.
void cli_loop_timer_cancel(cli_loop *l, cli_timer *t)
{
	if (t->slot == 0) {
		return;
	}
	size_t i = t->slot - 1;
	t->slot  = 0;
	l->nheap--;
	if (i == l->nheap) {
		return;
	}
	cli_timer *last = l->heap[l->nheap];
	heap_set(l, i, last);
	if (i > 0 && last->due < l->heap[(i - 1) / 2]->due) {
		heap_up(l, i);
	} else {
		heap_down(l, i);
	}
}

// Queues t for the next task round; it cannot fail.
void cli_loop_post(cli_loop *l, cli_task *t)
{
	if (t->queued) {
		return;
	}
	t->queued      = true;
	t->next        = NULL;
	*l->tasks_tail = t;
	l->tasks_tail  = &t->next;
}

// Runs the tasks queued before this call; it cannot fail.
static void loop_run_tasks(cli_loop *l)
{
	cli_task *t   = l->tasks;
	l->tasks      = NULL;
	l->tasks_tail = &l->tasks;
	while (t != NULL) {
		cli_task *next = t->next;
		t->queued      = false;
		t->fn(t);
		t = next;
	}
}

// Fires every timer that is due; it cannot fail.
static void loop_run_timers(cli_loop *l)
{
	while (l->nheap > 0 && l->heap[0]->due <= l->now) {
		cli_timer *t = l->heap[0];
		cli_loop_timer_cancel(l, t);
		t->fn(t);
	}
}

// Returns 0 once cli_loop_stop() was called, or -1 if epoll_wait fails.
int cli_loop_run(cli_loop *l)
{
	struct epoll_event evs[LOOP_MAX_EVENTS];

	while (!atomic_load_explicit(&l->stopping, memory_order_acquire)) {
		int timeout = -1;
		l->now      = cli_now_ns();
		if (l->tasks != NULL) {
			timeout = 0;
		} else if (l->nheap > 0) {
			uint64_t due = l->heap[0]->due;
			if (due <= l->now) {
				timeout = 0;
			} else {
				uint64_t ms = (due - l->now + 999999) / 1000000;
				timeout     = ms > 1000 ? 1000 : (int)ms;
			}
		}
		int n = epoll_wait(l->epfd, evs, LOOP_MAX_EVENTS, timeout);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -1;
		}
		l->now = cli_now_ns();
		for (int i = 0; i < n; i++) {
			cli_watch *w = evs[i].data.ptr;
			w->on_event(w, evs[i].events);
		}
		loop_run_timers(l);
		loop_run_tasks(l);
	}
	return 0;
}

// Wakes the loop from any thread; it cannot fail.
void cli_loop_wake(cli_loop *l)
{
	uint64_t one = 1;
	ssize_t  rv  = write(l->wakefd, &one, sizeof(one));
	(void)rv;
}

// Makes cli_loop_run() return soon; callable from any thread.
void cli_loop_stop(cli_loop *l)
{
	atomic_store_explicit(&l->stopping, true, memory_order_release);
	cli_loop_wake(l);
}
