// The per-thread pool of first output blocks; see conn_int.h (the fast
// paths are inline there).
//
// Threads: each thread has its own lists (no lock); a block may be given
// back on another thread than the one that took it. A thread's blocks are
// freed when it exits (pthread key destructor).
#include <pthread.h>
#include <stdlib.h>

#include "nng/transport/conn_int.h"

__thread pool_blk *conn_pool_arenas;
__thread pool_blk *conn_pool_segs;
__thread int       conn_pool_n_arenas;
__thread int       conn_pool_n_segs;
__thread bool      conn_pool_registered;

static pthread_key_t  pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

// Returns a new block; see conn_int.h.
void *conn_pool_new(bool segs)
{
	return malloc(segs ? POOL_SEGS * sizeof(tx_seg) : POOL_ARENA);
}

// Frees this thread's pooled blocks; runs when a thread that used the pool
// exits.
static void pool_drain(void *unused)
{
	(void)unused;
	while (conn_pool_arenas != NULL) {
		pool_blk *b      = conn_pool_arenas;
		conn_pool_arenas = b->next;
		free(b);
	}
	while (conn_pool_segs != NULL) {
		pool_blk *b    = conn_pool_segs;
		conn_pool_segs = b->next;
		free(b);
	}
	conn_pool_n_arenas = 0;
	conn_pool_n_segs   = 0;
}

static void pool_key_init(void)
{
	pthread_key_create(&pool_key, pool_drain);
}

// Registers the thread, then pools or frees p; see conn_int.h.
void conn_pool_put_slow(void *p, bool segs)
{
	int *n = segs ? &conn_pool_n_segs : &conn_pool_n_arenas;
	if (!conn_pool_registered) {
		// Make sure the blocks are freed when this thread exits.
		pthread_once(&pool_once, pool_key_init);
		pthread_setspecific(pool_key, (void *)1);
		conn_pool_registered = true;
	}
	if (*n >= POOL_MAX) {
		free(p);
		return;
	}
	pool_blk **head = segs ? &conn_pool_segs : &conn_pool_arenas;
	pool_blk  *b    = p;
	b->next         = *head;
	*head           = b;
	(*n)++;
}
