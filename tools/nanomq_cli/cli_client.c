// The pub, sub and conn commands; see cli_client.h.
#include "tools/nanomq_cli/cli_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_interrupted = 0;

typedef struct client_thread client_thread;

// One client; owned by its thread once the thread runs.
typedef struct client {
	cli_conn       conn;
	client_thread *th;
	uint32_t       n;
	char           id[160];
	uint64_t       published; // messages queued
	uint64_t       next_due; // earliest time of the next publish
	size_t         line; // -l: next line to send
	cli_timer      tick; // -I pacing
	bool           connected;
	bool           finished; // disconnect requested on purpose
} client;

struct client_thread {
	cli_loop  loop;
	pthread_t tid;
	client   *clients;
	uint32_t  n;
	uint32_t  live; // clients not closed yet
	bool      stopping;
};

// State shared by the threads of one command. Written by main before the
// threads start, except the atomics and the guarded lines.
static struct {
	cli_opts       *o;
	cli_conn_cfg    cfg;
	client_thread  *threads;
	atomic_int      threads_live;
	atomic_bool     stop;
	atomic_int      failures;
	atomic_ullong   received;
	pthread_mutex_t lines_mu; // guards lines, nlines, lines_eof
	char          **lines;
	size_t         *lens;
	size_t          nlines;
	size_t          linecap;
	bool            lines_eof;
} g;

// Marks the end of a signal; async-signal-safe.
static void on_signal(int sig)
{
	(void)sig;
	cli_interrupted = 1;
}

// Returns the soft limit of open files after raising it to the hard limit.
long cli_signals_install(void)
{
	struct sigaction sa;
	struct rlimit    rl;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
			getrlimit(RLIMIT_NOFILE, &rl);
		}
		return (long)rl.rlim_cur;
	}
	return -1;
}

// Blocks or unblocks SIGINT/SIGTERM in the calling thread; cannot fail.
void cli_signals_block(bool block)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

// Sleeps ms milliseconds or until a signal arrives; cannot fail.
void cli_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

// Records a failed client and says why on stderr; cannot fail.
static void client_fail(client *cl, const char *what)
{
	atomic_fetch_add(&g.failures, 1);
	fprintf(stderr, "nanomq_cli: %s: %s\n", cl->id, what);
}

// Disconnects once nothing is in flight; returns true if it did.
static bool client_finish_if_idle(client *cl)
{
	if (cl->conn.inflight != 0 || cl->finished) {
		return cl->finished;
	}
	cl->finished = true;
	cli_conn_disconnect(&cl->conn);
	return true;
}

// Publishes stdin lines that this client has not sent yet; cannot fail.
static void client_pump_lines(client *cl)
{
	for (;;) {
		pthread_mutex_lock(&g.lines_mu);
		bool   eof    = g.lines_eof;
		size_t nlines = g.nlines;
		char  *line   = cl->line < nlines ? g.lines[cl->line] : NULL;
		size_t len    = cl->line < nlines ? g.lens[cl->line] : 0;
		pthread_mutex_unlock(&g.lines_mu);
		if (line == NULL) {
			if (eof) {
				client_finish_if_idle(cl);
			}
			return;
		}
		int rv = cli_conn_publish(&cl->conn, g.o->topics[0], strlen(g.o->topics[0]),
		    (const uint8_t *)line, len, (uint8_t)g.o->qos, g.o->retain, NULL, NULL, NULL);
		if (rv == CLI_CONN_EBUSY) {
			return;
		}
		if (rv != CLI_CONN_OK) {
			client_fail(cl, "cannot encode the PUBLISH (topic or size)");
			cli_conn_close(&cl->conn, "publish failed");
			return;
		}
		cl->line++;
		cl->published++;
	}
}

// Publishes the message as often and as fast as -L and -I allow; cannot
// fail.
static void client_pump(client *cl)
{
	const cli_opts *o = g.o;

	if (!cl->connected || cl->finished || cl->th->stopping) {
		return;
	}
	if (o->stdin_lines) {
		client_pump_lines(cl);
		return;
	}
	for (;;) {
		if (o->limit > 0 && cl->published >= o->limit) {
			client_finish_if_idle(cl);
			return;
		}
		uint64_t now = cl->th->loop.now;
		if (o->interval_ms > 0 && cl->published > 0 && now < cl->next_due) {
			cli_loop_timer_arm(&cl->th->loop, &cl->tick, cl->next_due);
			return;
		}
		int rv = cli_conn_publish(&cl->conn, o->topics[0], strlen(o->topics[0]),
		    (const uint8_t *)o->message, o->message_len, (uint8_t)o->qos, o->retain, NULL,
		    NULL, NULL);
		if (rv == CLI_CONN_EBUSY) {
			return;
		}
		if (rv != CLI_CONN_OK) {
			client_fail(cl, "cannot encode the PUBLISH (topic or size)");
			cli_conn_close(&cl->conn, "publish failed");
			return;
		}
		cl->published++;
		cl->next_due = now + (uint64_t)o->interval_ms * 1000000ull;
	}
}

// Timer: the next publish is due.
static void client_tick(cli_timer *t)
{
	client *cl = (client *)((char *)t - offsetof(client, tick));
	client_pump(cl);
}

// Starts publishing or subscribing once the broker accepted the client.
static void client_on_connack(cli_conn *c, const mqtt_connack *ack)
{
	client *cl = c->arg;

	if (ack->reason != 0) {
		return; // on_close reports it
	}
	cl->connected = true;
	if (g.o->verbose) {
		char tls[160];
		cli_tls_describe(c->tls, tls, sizeof(tls));
		fprintf(stderr, "%s: connected (MQTT %s%s%s)\n", cl->id,
		    g.o->version == 5       ? "5.0"
		        : g.o->version == 4 ? "3.1.1"
		                            : "3.1",
		    tls[0] ? ", " : "", tls);
	}
	if (g.o->verb == CLI_SUB) {
		mqtt_sub_opts so = { .qos = (uint8_t)g.o->qos };
		if (cli_conn_subscribe(c, g.o->topics, g.o->ntopics, &so, 0) != CLI_CONN_OK) {
			client_fail(cl, "cannot encode the SUBSCRIBE (check the filters)");
			cl->finished = true;
			cli_conn_close(c, "subscribe failed");
		}
		return;
	}
	if (g.o->verb == CLI_PUB) {
		client_pump(cl);
	}
}

// Reports refused subscriptions; closes the client if all were refused.
static void client_on_suback(cli_conn *c, const mqtt_suback *ack)
{
	client  *cl      = c->arg;
	uint32_t refused = 0;

	for (uint32_t i = 0; i < ack->count; i++) {
		if (ack->codes[i] >= 0x80) {
			refused++;
			fprintf(stderr, "nanomq_cli: %s: subscription to '%s' refused (0x%02x)\n",
			    cl->id, i < g.o->ntopics ? g.o->topics[i] : "?", ack->codes[i]);
		} else if (g.o->verbose) {
			fprintf(stderr, "%s: subscribed to '%s' (granted QoS %u)\n", cl->id,
			    i < g.o->ntopics ? g.o->topics[i] : "?", ack->codes[i]);
		}
	}
	if (refused == ack->count) {
		client_fail(cl, "every subscription was refused");
		cl->finished = true;
		cli_conn_disconnect(c);
	}
}

// Prints one received message as "<topic>: <payload>"; cannot fail.
static void client_on_message(cli_conn *c, const mqtt_publish *p)
{
	uint64_t limit = g.o->limit;
	uint64_t n     = atomic_fetch_add(&g.received, 1);

	(void)c;
	if (limit > 0 && n >= limit) {
		return;
	}
	flockfile(stdout);
	fwrite(p->topic.p, 1, p->topic.len, stdout);
	fputs(": ", stdout);
	fwrite(p->payload.p, 1, p->payload.len, stdout);
	if (g.o->verbose) {
		fprintf(stdout, "  (qos %u%s)", p->qos, p->retain ? ", retained" : "");
	}
	fputc('\n', stdout);
	fflush(stdout);
	funlockfile(stdout);
	if (limit > 0 && n + 1 >= limit) {
		atomic_store(&g.stop, true);
	}
}

// A QoS 1/2 publish completed; reports refusals and publishes more.
static void client_on_acked(cli_conn *c, uint16_t id, uint8_t reason)
{
	client *cl = c->arg;
	if (reason >= 0x80) {
		char why[96];
		snprintf(why, sizeof(why), "publish refused: %s (0x%02x)", mqtt_reason_name(reason),
		    reason);
		client_fail(cl, why);
	}
	if (cl->finished || cl->th->stopping) {
		return;
	}
	if (c->inflight == 0 && g.o->limit > 0 && cl->published >= g.o->limit) {
		client_finish_if_idle(cl);
	}
}

// The write buffer or window has room again.
static void client_on_writable(cli_conn *c)
{
	client *cl = c->arg;
	if (g.o->verb == CLI_PUB) {
		client_pump(cl);
	}
}

// Counts the client as gone; the thread stops with its last client.
static void client_on_close(cli_conn *c, const char *why)
{
	client        *cl = c->arg;
	client_thread *th = cl->th;

	cli_loop_timer_cancel(&th->loop, &cl->tick);
	if (!cl->finished && !th->stopping) {
		client_fail(cl, why);
	} else if (g.o->verb == CLI_PUB && c->inflight != 0) {
		client_fail(cl, "closed with messages unacknowledged");
	} else if (g.o->verbose) {
		fprintf(stderr, "%s: %s\n", cl->id, why);
	}
	if (--th->live == 0) {
		cli_loop_stop(&th->loop);
	}
}

static const cli_conn_ops client_ops = {
	.on_connack  = client_on_connack,
	.on_suback   = client_on_suback,
	.on_message  = client_on_message,
	.on_acked    = client_on_acked,
	.on_writable = client_on_writable,
	.on_close    = client_on_close,
};

// Wake-up from main: new stdin lines, or the order to stop.
static void client_thread_wake(cli_loop *l)
{
	client_thread *th = l->arg;

	if (atomic_load(&g.stop) && !th->stopping) {
		th->stopping = true;
		for (uint32_t i = 0; i < th->n; i++) {
			cli_conn_disconnect(&th->clients[i].conn);
		}
		return;
	}
	if (g.o->stdin_lines) {
		for (uint32_t i = 0; i < th->n; i++) {
			client_pump(&th->clients[i]);
		}
	}
}

// Thread body: connects its clients and runs the loop until all are
// closed. Returns NULL.
static void *client_thread_main(void *arg)
{
	client_thread *th = arg;
	char           err[256];

	th->loop.now = cli_now_ns();
	for (uint32_t i = 0; i < th->n; i++) {
		client *cl = &th->clients[i];
		if (cli_conn_start(&cl->conn, cl->id, err, sizeof(err)) != 0) {
			client_fail(cl, err);
			th->live--;
		}
	}
	if (th->live > 0) {
		cli_loop_run(&th->loop);
	}
	for (uint32_t i = 0; i < th->n; i++) {
		cli_conn_fini(&th->clients[i].conn);
	}
	atomic_fetch_sub(&g.threads_live, 1);
	return NULL;
}

// Appends one stdin line for the publishers. Returns 0, or -1 if memory is
// short.
static int lines_push(char *line, size_t len)
{
	pthread_mutex_lock(&g.lines_mu);
	if (g.nlines == g.linecap) {
		size_t  cap = g.linecap ? g.linecap * 2 : 64;
		char  **l   = realloc(g.lines, cap * sizeof(*l));
		size_t *n   = l ? realloc(g.lens, cap * sizeof(*n)) : NULL;
		if (l != NULL) {
			g.lines = l;
		}
		if (n == NULL) {
			pthread_mutex_unlock(&g.lines_mu);
			return -1;
		}
		g.lens    = n;
		g.linecap = cap;
	}
	g.lines[g.nlines] = line;
	g.lens[g.nlines]  = len;
	g.nlines++;
	pthread_mutex_unlock(&g.lines_mu);
	return 0;
}

// Wakes every loop thread; cannot fail.
static void wake_all(void)
{
	for (uint32_t t = 0; t < g.o->threads; t++) {
		cli_loop_wake(&g.threads[t].loop);
	}
}

// Returns the exit code of the command.
int cli_client_run(cli_opts *o)
{
	char     err[256];
	uint32_t nthreads = o->threads > o->clients ? o->clients : o->threads;
	int      rc       = 1;

	memset(&g, 0, sizeof(g));
	g.o        = o;
	o->threads = nthreads;
	pthread_mutex_init(&g.lines_mu, NULL);
	if (cli_opts_conn_cfg(o, &g.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "nanomq_cli: %s\n", err);
		return 1;
	}
	cli_signals_install();
	g.threads = calloc(nthreads, sizeof(*g.threads));
	if (g.threads == NULL) {
		fprintf(stderr, "nanomq_cli: out of memory\n");
		return 1;
	}
	uint32_t started = 0;
	for (uint32_t t = 0; t < nthreads; t++) {
		client_thread *th = &g.threads[t];
		uint32_t       lo = (uint32_t)((uint64_t)o->clients * t / nthreads);
		uint32_t       hi = (uint32_t)((uint64_t)o->clients * (t + 1) / nthreads);
		if (cli_loop_init(&th->loop, err, sizeof(err)) != 0) {
			fprintf(stderr, "nanomq_cli: %s\n", err);
			goto fail;
		}
		th->loop.arg     = th;
		th->loop.on_wake = client_thread_wake;
		th->n            = hi - lo;
		th->live         = th->n;
		th->clients      = calloc(th->n, sizeof(*th->clients));
		if (th->clients == NULL) {
			fprintf(stderr, "nanomq_cli: out of memory\n");
			goto fail;
		}
		for (uint32_t i = 0; i < th->n; i++) {
			client *cl  = &th->clients[i];
			cl->th      = th;
			cl->n       = lo + i;
			cl->tick.fn = client_tick;
			if (o->client_id != NULL && o->clients == 1) {
				snprintf(cl->id, sizeof(cl->id), "%s", o->client_id);
			} else if (o->client_id != NULL) {
				snprintf(cl->id, sizeof(cl->id), "%s-%u", o->client_id, cl->n);
			} else {
				snprintf(cl->id, sizeof(cl->id), "nanomq-cli-%x-%u",
				    (unsigned)getpid(), cl->n);
			}
			cli_conn_init(&cl->conn, &th->loop, &g.cfg, &client_ops, cl);
		}
	}
	cli_signals_block(true);
	for (uint32_t t = 0; t < nthreads; t++) {
		atomic_fetch_add(&g.threads_live, 1);
		if (pthread_create(&g.threads[t].tid, NULL, client_thread_main, &g.threads[t])
		    != 0) {
			atomic_fetch_sub(&g.threads_live, 1);
			fprintf(stderr, "nanomq_cli: cannot start a thread\n");
			atomic_store(&g.stop, true);
			break;
		}
		started++;
	}
	cli_signals_block(false);

	// Main: feed stdin lines, watch for signals, --duration and -L.
	uint64_t deadline = o->duration_s > 0 ? cli_now_ns() + (uint64_t)(o->duration_s * 1e9) : 0;
	bool     stopped  = false;
	if (o->verb == CLI_PUB && o->stdin_lines) {
		char   *line = NULL;
		size_t  cap  = 0;
		ssize_t n;
		while (!cli_interrupted && (n = getline(&line, &cap, stdin)) >= 0) {
			if (n > 0 && line[n - 1] == '\n') {
				line[--n] = '\0';
			}
			if (lines_push(line, (size_t)n) != 0) {
				fprintf(stderr, "nanomq_cli: out of memory\n");
				break;
			}
			line = NULL;
			cap  = 0;
			wake_all();
		}
		free(line);
		pthread_mutex_lock(&g.lines_mu);
		g.lines_eof = true;
		pthread_mutex_unlock(&g.lines_mu);
		wake_all();
	}
	while (atomic_load(&g.threads_live) > 0) {
		if (!stopped
		    && (cli_interrupted || atomic_load(&g.stop)
		        || (deadline != 0 && cli_now_ns() >= deadline))) {
			stopped = true;
			atomic_store(&g.stop, true);
			wake_all();
		}
		cli_sleep_ms(20);
	}
	for (uint32_t t = 0; t < started; t++) {
		pthread_join(g.threads[t].tid, NULL);
	}
	rc = atomic_load(&g.failures) == 0 ? 0 : 1;
	if (o->verb == CLI_SUB && o->limit > 0 && atomic_load(&g.received) < o->limit
	    && !cli_interrupted && deadline == 0) {
		rc = 1;
	}
fail:
	for (uint32_t t = 0; t < nthreads; t++) {
		if (g.threads[t].loop.epfd > 0) {
			cli_loop_fini(&g.threads[t].loop);
		}
		free(g.threads[t].clients);
	}
	free(g.threads);
	for (size_t i = 0; i < g.nlines; i++) {
		free(g.lines[i]);
	}
	free(g.lines);
	free(g.lens);
	pthread_mutex_destroy(&g.lines_mu);
	cli_opts_conn_cfg_fini(&g.cfg);
	return rc;
}
