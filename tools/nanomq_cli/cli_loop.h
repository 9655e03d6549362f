// One event loop per client thread: epoll (level-triggered) over
// non-blocking sockets, a binary heap of timers, a queue of deferred tasks
// run after each round of events, and an eventfd that other threads use to
// wake the loop.
//
// Threading: everything here except cli_loop_wake() and cli_loop_stop() is
// called only from the thread that runs the loop. Watches, timers and tasks
// are owned by the caller and must stay valid until they are removed or the
// loop has stopped; the loop never frees them.
#ifndef NMQ_CLIENT_CLI_LOOP_H
#define NMQ_CLIENT_CLI_LOOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cli_loop  cli_loop;
typedef struct cli_watch cli_watch;
typedef struct cli_timer cli_timer;
typedef struct cli_task  cli_task;

// A file descriptor registered with the loop. on_event gets the epoll
// event bits (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP).
struct cli_watch {
	int fd;
	void (*on_event)(cli_watch *w, uint32_t events);
};

// A one-shot timer; fn runs on the loop thread once `due` has passed.
struct cli_timer {
	uint64_t due; // CLOCK_MONOTONIC nanoseconds
	size_t   slot; // 1 + position in the heap, 0 when not armed
	void (*fn)(cli_timer *t);
};

// A deferred call: fn runs once, after the current round of events. A task
// posted while tasks run waits for the next round, so that one busy writer
// never starves the sockets.
struct cli_task {
	cli_task *next;
	bool      queued;
	void (*fn)(cli_task *t);
};

struct cli_loop {
	int         epfd;
	int         wakefd;
	cli_watch   wake_watch;
	cli_timer **heap;
	size_t      nheap;
	size_t      heapcap;
	cli_task   *tasks;
	cli_task  **tasks_tail;
	atomic_bool stopping;
	uint64_t    now; // time at the start of the current round
	// Read buffer shared by the connections of this loop (cli_conn).
	uint8_t *scratch;
	size_t   scratch_cap;
	// Called on the loop thread after another thread called cli_loop_wake().
	void (*on_wake)(cli_loop *l);
	void *arg; // for the owner
};

// Returns the current CLOCK_MONOTONIC time in nanoseconds.
uint64_t cli_now_ns(void);

// Prepares a loop. Returns 0, or -1 with a message in err.
int  cli_loop_init(cli_loop *l, char *err, size_t errlen);
void cli_loop_fini(cli_loop *l);

// Register, change or remove a watch. Return 0, or -1 with errno set.
int  cli_loop_add(cli_loop *l, cli_watch *w, uint32_t events);
int  cli_loop_mod(cli_loop *l, cli_watch *w, uint32_t events);
void cli_loop_del(cli_loop *l, cli_watch *w);

// Arms (or re-arms) t to fire at `due`; cancel is a no-op for an idle timer.
// Arming returns 0, or -1 if memory is short.
int  cli_loop_timer_arm(cli_loop *l, cli_timer *t, uint64_t due);
void cli_loop_timer_cancel(cli_loop *l, cli_timer *t);

// Queues t unless it is already queued.
void cli_loop_post(cli_loop *l, cli_task *t);

// Runs the loop until cli_loop_stop(). Returns 0, or -1 if epoll fails.
int cli_loop_run(cli_loop *l);

// Any thread: wake the loop (on_wake runs) / make cli_loop_run return.
void cli_loop_wake(cli_loop *l);
void cli_loop_stop(cli_loop *l);

#endif // NMQ_CLIENT_CLI_LOOP_H
