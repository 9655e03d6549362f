// nanomq: the broker daemon's entry point. Parses the command line, loads
// and validates the configuration, then either controls a running broker
// (stop, reload) or runs one: pid file, daemonize (before any NNG call),
// logging, the timer wheel, the worker pool, the protocol layer, the
// broker, the listeners, the command channel; then the main thread waits
// for signals.
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "nng/core/bridge_id.h"
#include "nng/core/droplog.h"
#include "nng/core/msg.h"
#include "nng/protocol/proto.h"
#include "nng/transport/listener.h"
#include "nng/transport/tls_pem.h"
#include "src/auth/auth_passwd.h"
#include "src/bridge/bridge.h"
#include "src/broker/broker.h"
#include "src/broker/broker_preset.h"
#include "src/conf/conf.h"
#include "src/daemon/args.h"
#include "src/daemon/ctl.h"
#include "src/daemon/daemon.h"
#include "src/daemon/ipc.h"
#include "src/daemon/pidfile.h"
#include "src/daemon/sd_notify.h"
#include "src/events/events_rest.h"
#include "src/events/http_authn.h"
#include "src/events/sys_stats.h"
#include "src/events/webhook.h"
#include "src/http/http_server.h"
#include "src/http/rest_api.h"
#include "src/log/log.h"
#ifdef NMQ_HAVE_STORE
#include "src/broker/broker_store.h"
#include "src/store/store_conf.h"
#endif

#define TIMER_TICK_MS    20
#define DRAIN_TIMEOUT_MS 5000
#define WILL_DRAIN_MS    2000 // wait for connections with a will to close
#define WILL_FLUSH_MS    100 // then for their wills to reach subscribers
#define STOP_ACK_WAIT_MS 5000 // for the acks waiting for the store (a slow disk)
// `nanomq reload`: how long to wait for the broker to answer "pid", and for
// the outcome of the reload itself.
#define RELOAD_PROBE_TIMEOUT_MS 5000
#define RELOAD_IPC_TIMEOUT_MS   30000
// Sent by the command channel's thread to the main thread when a request
// waits in the server's ctl_request. Any other sender is harmless: with
// nothing pending the main thread ignores it.
#define CTL_WAKE_SIGNAL SIGUSR2

// A request of the command channel on its way to the main thread, which
// owns reload. The channel's thread (ipc.h) fills it in under mtx, wakes the
// main thread with CTL_WAKE_SIGNAL and waits on cv until the main thread
// has answered (done) or the broker is stopping (closing). One request at a
// time: the channel's thread handles requests in order.
typedef struct ctl_request {
	pthread_mutex_t mtx;
	pthread_cond_t  cv;
	pthread_t       main_thread;
	bool            pending; // a request waits for the main thread
	bool            done; // the main thread has answered it
	bool            closing; // shutting down: no request is served any more
	char           *path; // configuration file to switch to, or NULL
	bool            old; // path is in the legacy flat format
	int             status; // 0: reloaded; 1: failed
	char           *reply; // report for `nanomq reload` (malloc'ed)
} ctl_request;

typedef struct server {
	nmq_conf          conf; // the configuration applied last
	nmq_conf          boot; // as started: what restart-only keys run with
	bool              have_boot;
	bool              conf_old; // conf.path is in the legacy flat format
	timer_wheel      *tw;
	workq            *wq;
	nmq_broker       *broker;
	nmq_proto        *proto;
	nmq_bridges      *bridges;
	struct nmq_store *store; // NULL when nothing asks for one
	nmq_listener     *listeners[CONF_MAX_LISTENERS];
	int               n_listeners;
	ipc_server       *ipc; // the command channel, NULL when off
	sys_stats        *sys; // $SYS/broker statistics
	webhook          *hook; // NULL when the webhook section is off
	http_authn       *hauth; // NULL when auth.http_auth is off
	ctl_request       ctl;
	http_server      *http; // the REST API, NULL when off
	rest_api         *rest;
	char             *http_conf_path; // the file the REST API may rewrite
} server;

// Sleeps ms milliseconds (nng_msleep() would start NNG's threads on the
// way out of a broker that never used NNG). Returns nothing.
static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { }
}

// Prints collected configuration problems to stderr.
static void print_conf_errors(const conf_errors *errs)
{
	for (int i = 0; i < errs->n_warnings; i++) {
		fprintf(stderr, "nanomq: warning: %s\n", errs->warnings[i]);
	}
	for (int i = 0; i < errs->n_errors; i++) {
		fprintf(stderr, "nanomq: error: %s\n", errs->errors[i]);
	}
	if (errs->n_dropped_errors > 0) {
		fprintf(stderr, "nanomq: ... and %d more errors\n", errs->n_dropped_errors);
	}
}

// POST /api/v4/ctrl/stop and /ctrl/restart (on the HTTP thread, after the
// reply was sent): the main thread stops as on SIGTERM; for a restart,
// main() then starts the program again with the same arguments.
static volatile sig_atomic_t restart_requested;

static void rest_stop(void *arg)
{
	(void)arg;
	kill(getpid(), SIGTERM);
}

static void rest_restart(void *arg)
{
	(void)arg;
	restart_requested = 1;
	kill(getpid(), SIGTERM);
}

// The counters of src/events for /metrics and /prometheus: HTTP
// authentication, then the webhook (HTTP thread).
static size_t rest_counters(void *arg, rest_counter *v, size_t cap)
{
	server *srv = arg;
	size_t  n   = events_rest_http_auth_counters(srv->hauth, v, cap);
	return n + events_rest_webhook_counters(srv->hook, v + n, cap - n);
}

// Starts the REST API when the configuration enables it. Returns 0, or -1
// with a message in err.
static int start_http(
    server *srv, const cli_args *args, const char *argv0, char *err, size_t errlen)
{
	const nmq_conf *c = &srv->conf;
	if (!c->http_enable) {
		return 0;
	}
	http_server_opts o = {
		.ip_addr            = c->http_ip_addr,
		.port               = c->http_port,
		.limit_conn         = c->http_limit_conn,
		.max_body           = c->http_max_body,
		.auth               = c->http_auth_type == CONF_HTTP_AUTH_JWT ? HTTP_AUTH_JWT
		                  : c->http_auth_type == CONF_HTTP_AUTH_NONE  ? HTTP_AUTH_NONE
		                                                              : HTTP_AUTH_BASIC,
		.username           = c->http_username,
		.password           = c->http_password,
		.jwt_keyfile        = c->http_jwt_public_keyfile,
		.request_timeout_ms = c->http_request_timeout_ms,
	};
	tls_pem_spec tls = {
		.name                 = "http_server.ssl",
		.certfile             = c->http_ssl_certfile,
		.keyfile              = c->http_ssl_keyfile,
		.cacertfile           = c->http_ssl_cacertfile,
		.key_password         = c->http_ssl_key_password,
		.verify_peer          = c->http_ssl_verify_peer,
		.fail_if_no_peer_cert = c->http_ssl_fail_if_no_peer_cert,
	};
	if (c->http_ssl_enable) {
		o.tls = &tls;
	}
	srv->http = http_server_alloc(&o, err, errlen);
	if (srv->http == NULL) {
		return -1;
	}
	if (c->path != NULL && !srv->conf_old) {
		srv->http_conf_path = strdup(c->path);
	}
	rest_env env = {
		.broker        = srv->broker,
		.proto         = srv->proto,
		.bridges       = srv->bridges,
		.store         = srv->store,
		.conf_path     = srv->http_conf_path,
		.cli           = &args->cli,
		.argv0         = argv0,
		.started       = time(NULL),
		.property_size = c->property_size,
		.listeners     = srv->listeners,
		.n_listeners   = srv->n_listeners,
		.stop          = rest_stop,
		.restart       = rest_restart,
		.counters      = rest_counters,
		.counters_arg  = srv,
	};
	srv->rest = rest_api_alloc(srv->http, &env);
	if (srv->rest == NULL || events_rest_routes(srv->http, srv->hook) != NMQ_OK
	    || events_rest_http_auth_route(srv->http, srv->hauth) != NMQ_OK
	    || http_server_start(srv->http) != NMQ_OK) {
		snprintf(err, errlen, "http_server: cannot start the REST API");
		return -1;
	}
	return 0;
}

// Stops the REST API (no request is being served afterwards).
static void stop_http(server *srv)
{
	http_server_free(srv->http);
	srv->http = NULL;
	rest_api_free(srv->rest);
	srv->rest = NULL;
	free(srv->http_conf_path);
	srv->http_conf_path = NULL;
}

// Logs collected configuration problems (after the log is open) and, when
// report is not NULL, writes them there too, one "warning: " or "error: "
// line each, for `nanomq reload`.
static void log_conf_errors(const conf_errors *errs, FILE *report)
{
	for (int i = 0; i < errs->n_warnings; i++) {
		log_warn("conf", "%s", errs->warnings[i]);
		if (report != NULL) {
			fprintf(report, "warning: %s\n", errs->warnings[i]);
		}
	}
	for (int i = 0; i < errs->n_errors; i++) {
		log_error("conf", "%s", errs->errors[i]);
		if (report != NULL) {
			fprintf(report, "error: %s\n", errs->errors[i]);
		}
	}
	if (report != NULL && errs->n_dropped_errors > 0) {
		fprintf(report, "error: ... and %d more errors\n", errs->n_dropped_errors);
	}
}

// Builds the NNG URL of a listener.
static void listener_url(const conf_listener *cl, char *buf, size_t len)
{
	static const char *const schemes[] = { "tcp", "tls+tcp", "ws", "wss" };
	const char *host = cl->host != NULL && cl->host[0] != '\0' ? cl->host : "0.0.0.0";
	bool        v6   = strchr(host, ':') != NULL;
	const char *path
	    = (cl->kind == CONF_LISTENER_WS || cl->kind == CONF_LISTENER_WSS) && cl->path != NULL
	    ? cl->path
	    : "";
	snprintf(buf, len, "%s://%s%s%s:%d%s", schemes[cl->kind & 3], v6 ? "[" : "", host,
	    v6 ? "]" : "", cl->port, path);
}

// The configuration's check of a TLS listener's groups and ciphers: the
// TLS engine's own parser, so that a bad name is reported with its file
// and line before anything starts.
static int tls_params_ok(const char *groups, const char *ciphers, char *why, size_t whylen)
{
	tls_engine_params p = { .groups = groups, .ciphers = ciphers };
	return tls_engine_params_check(&p, why, whylen);
}

// Fills the transport's view of a configured listener; url must outlive lo.
static void listener_opts_from_conf(const conf_listener *cl, const char *url, listener_opts *lo)
{
	memset(lo, 0, sizeof(*lo));
	lo->name                 = cl->name;
	lo->url                  = url;
	lo->certfile             = cl->certfile;
	lo->keyfile              = cl->keyfile;
	lo->cacertfile           = cl->cacertfile;
	lo->key_password         = cl->key_password;
	lo->verify_peer          = cl->verify_peer;
	lo->fail_if_no_peer_cert = cl->fail_if_no_peer_cert;
	lo->groups               = cl->groups;
	lo->ciphers              = cl->ciphers;
	lo->max_connections      = cl->max_connections;
	lo->handshake_timeout_ms = cl->handshake_timeout_ms;
}

// Checks the TLS files of every listener without opening sockets (for
// --test). Returns the number of problems, each printed to stderr.
static int check_listener_files(const nmq_conf *conf)
{
	int bad = 0;
	for (int i = 0; i < conf->n_listeners; i++) {
		const conf_listener *cl = &conf->listeners[i];
		char                 url[300];
		char                 err[512];
		listener_opts        lo;
		listener_url(cl, url, sizeof(url));
		listener_opts_from_conf(cl, url, &lo);
		if (listener_tls_check(&lo, err, sizeof(err)) != NMQ_OK) {
			fprintf(stderr, "nanomq: error: listeners.%s: %s\n", cl->name, err);
			bad++;
		}
	}
	return bad;
}

// Opens every configured listener. Returns 0, or -1 with a message in err.
static int start_listeners(server *srv, char *err, size_t errlen)
{
	for (int i = 0; i < srv->conf.n_listeners; i++) {
		const conf_listener *cl = &srv->conf.listeners[i];
		char                 url[300];
		listener_opts        lo;
		listener_url(cl, url, sizeof(url));
		listener_opts_from_conf(cl, url, &lo);
		nmq_err e = listener_start(&srv->listeners[srv->n_listeners], &lo,
		    proto_conn_env(srv->proto), (listener_accept_fn)proto_accept, srv->proto, err,
		    errlen);
		if (e != NMQ_OK) {
			return -1;
		}
		srv->n_listeners++;
		log_info("main", "listener=%s url=%s event=listening", cl->name, url);
		if (cl->kind == CONF_LISTENER_SSL || cl->kind == CONF_LISTENER_WSS) {
			log_info("main", "listener=%s tls=\"%s%s%s%s%s\"", cl->name,
			    cl->groups != NULL ? "groups=" : "",
			    cl->groups != NULL ? cl->groups : "",
			    cl->ciphers != NULL ? " ciphers=" : "",
			    cl->ciphers != NULL ? cl->ciphers : "",
			    cl->groups == NULL && cl->ciphers == NULL ? tls_engine_defaults_text()
			                                              : "");
		}
	}
	return 0;
}

// Re-reads the TLS files of every running ssl/wss listener (certificates are
// usually renewed in place, so an unchanged path says nothing). Listeners
// are matched by name; added or removed ones need a restart (conf_diff says so).
static void reload_listeners(server *srv, const nmq_conf *nc)
{
	for (int i = 0; i < srv->n_listeners; i++) {
		nmq_listener        *l  = srv->listeners[i];
		const conf_listener *cl = NULL;
		for (int j = 0; j < nc->n_listeners; j++) {
			if (strcmp(nc->listeners[j].name, listener_name(l)) == 0) {
				cl = &nc->listeners[j];
				break;
			}
		}
		if (cl == NULL) {
			continue;
		}
		if (cl->kind != CONF_LISTENER_SSL && cl->kind != CONF_LISTENER_WSS) {
			continue;
		}
		listener_opts lo;
		char          err[512];
		listener_opts_from_conf(cl, NULL, &lo);
		if (listener_reload_tls(l, &lo, err, sizeof(err)) != NMQ_OK) {
			log_error("main", "listener=%s event=tls_reload_failed reason=\"%s\"",
			    cl->name, err);
		} else {
			log_info("main", "listener=%s event=tls_reloaded", cl->name);
		}
	}
}

// Raises the soft limit on open files to the hard limit: every client is a
// descriptor, and running out makes NNG's HTTP accept loop spin.
static void raise_nofile_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rlim_t soft = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
			log_warn("main", "event=nofile_limit_kept limit=%llu reason=\"%s\"",
			    (unsigned long long)soft, strerror(errno));
		}
	}
}

// Returns the number of work contexts: the configured value, or 2 x cores.
static int worker_count(const nmq_conf *conf)
{
	if (conf->parallel > 0) {
		return conf->parallel;
	}
	if (conf->num_taskq_thread > 0) {
		return conf->num_taskq_thread;
	}
	// One event loop per CPU the process may run on (taskset and cgroup
	// cpusets included): more only adds context switches (measured in
	// docs/benchmarks.md).
	cpu_set_t set;
	int       n = 0;
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		n = CPU_COUNT(&set);
	}
	if (n < 1) {
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	}
	if (n < 1) {
		n = 1;
	}
	return n > 64 ? 64 : n;
}

// Re-reads the configuration: path (an absolute path, in the legacy flat
// format when old), or the running file when path is NULL. Applies the
// reloadable part if all of it is valid. Writes the errors and warnings for
// `nanomq reload` to report when it is not NULL. Returns 0 when the new
// configuration was applied, -1 when the running one stays untouched.
static int reload(
    server *srv, const cli_args *args, const char *argv0, const char *path, bool old, FILE *report)
{
	nmq_conf    nc;
	conf_errors errs;
	sd_notify_reloading();
	conf_cli cli = args->cli;
	if (path == NULL) {
		// The same file (made absolute at startup), in the same format.
		path = srv->conf.path;
		old  = srv->conf_old;
	}
	if (path != NULL) {
		cli.conf_path     = old ? NULL : path;
		cli.old_conf_path = old ? path : NULL;
	}
	if (conf_load(&nc, &cli, argv0, &errs) != 0) {
		log_conf_errors(&errs, report);
		log_error("main", "event=reload_failed reason=configuration_errors errors=%d",
		    errs.n_errors);
		conf_errors_free(&errs);
		sd_notify_ready();
		return -1;
	}
	log_conf_errors(&errs, report);
	conf_errors_free(&errs);
	// Reloadable keys are compared with what was applied last; keys that
	// need a restart with what the broker started with, since those never
	// change while it runs.
	conf_changes ch;
	if (conf_diff(&srv->conf, &nc, &ch) == NMQ_OK) {
		for (int i = 0; i < ch.n; i++) {
			if (!ch.v[i].restart) {
				log_info(
				    "main", "key=%s event=changed action=applied", ch.v[i].key);
			}
		}
		conf_changes_free(&ch);
	}
	if (conf_diff(srv->have_boot ? &srv->boot : &srv->conf, &nc, &ch) == NMQ_OK) {
		for (int i = 0; i < ch.n; i++) {
			if (ch.v[i].restart) {
				log_warn("main", "key=%s event=changed action=needs_restart",
				    ch.v[i].key);
				if (report != NULL) {
					fprintf(report,
					    "warning: %s changed; the change needs a restart\n",
					    ch.v[i].key);
				}
			}
		}
		conf_changes_free(&ch);
	}
	char err[256];
	// Everything that can fail is checked before anything changes.
	if (broker_reconfigure(srv->broker, &nc, err, sizeof(err)) != 0) {
		log_error("main", "event=reload_failed reason=\"%s\"", err);
		if (report != NULL) {
			fprintf(report, "error: %s\n", err);
		}
		conf_free(&nc);
		sd_notify_ready();
		return -1;
	}
	if (log_open(&nc, err, sizeof(err)) != 0) {
		// The running log targets stay; the rest of the reload goes on.
		log_error("main", "event=reload_log_failed reason=\"%s\"", err);
		if (report != NULL) {
			fprintf(report, "warning: log: %s; the old log targets stay\n", err);
		}
	}
	proto_limits lim;
	broker_limits_from_conf(&nc, &lim);
	proto_set_limits(srv->proto, &lim);
	sys_stats_set_interval(srv->sys, nc.sys_interval_s);
	http_authn_reload(srv->hauth, &nc);
	reload_listeners(srv, &nc);
	if (srv->bridges != NULL) {
		bridges_reconfigure(srv->bridges, &nc);
	}
	log_set_level(nc.log_level);
	// Keep the values that need a restart from the running configuration:
	// swap in the new one only for what was applied above.
	conf_free(&srv->conf);
	srv->conf     = nc;
	srv->conf_old = old;
	log_warn("main", "event=reloaded");
	sd_notify_ready();
	return 0;
}

// Handles one request of the command channel, on the channel's own thread:
// "pid" is answered here; "reload" and "reload_old_conf" (with an optional
// path) are handed to the main thread, and this call waits for its answer.
// Returns 0 or 1 with the report in *reply, as ipc_handler says.
static int ctl_handle(void *arg, const char *verb, const char *path, char **reply)
{
	ctl_request *c = arg;
	if (strcmp(verb, "pid") == 0) {
		if (asprintf(reply, "%ld", (long)getpid()) < 0) {
			*reply = NULL;
			return 1;
		}
		return 0;
	}
	bool old = strcmp(verb, "reload_old_conf") == 0;
	if (!old && strcmp(verb, "reload") != 0) {
		if (asprintf(reply, "error: unknown command \"%s\"", verb) < 0) {
			*reply = NULL;
		}
		return 1;
	}
	pthread_mutex_lock(&c->mtx);
	if (c->closing) {
		pthread_mutex_unlock(&c->mtx);
		*reply = strdup("error: nanomq is stopping; the configuration was not reloaded");
		return 1;
	}
	c->path = path != NULL ? strdup(path) : NULL;
	if (path != NULL && c->path == NULL) {
		pthread_mutex_unlock(&c->mtx);
		*reply = strdup("error: out of memory");
		return 1;
	}
	c->old     = old;
	c->pending = true;
	c->done    = false;
	pthread_kill(c->main_thread, CTL_WAKE_SIGNAL);
	while (!c->done && !c->closing) {
		pthread_cond_wait(&c->cv, &c->mtx);
	}
	int status;
	if (c->done) {
		status   = c->status;
		*reply   = c->reply;
		c->reply = NULL;
	} else {
		status = 1;
		*reply = strdup("error: nanomq is stopping; the configuration was not reloaded");
	}
	c->pending = false;
	c->done    = false;
	free(c->path);
	c->path = NULL;
	pthread_mutex_unlock(&c->mtx);
	return status;
}

// Serves the request that the command channel's thread left in srv->ctl,
// if any (main thread, on CTL_WAKE_SIGNAL): runs the reload and hands the
// outcome back. Returns nothing.
static void ctl_serve(server *srv, const cli_args *args, const char *argv0)
{
	ctl_request *c = &srv->ctl;
	pthread_mutex_lock(&c->mtx);
	if (!c->pending || c->done) {
		pthread_mutex_unlock(&c->mtx);
		return;
	}
	// The requester waits until done, so path and old stay as they are.
	const char *path = c->path;
	bool        old  = c->old;
	pthread_mutex_unlock(&c->mtx);

	char  *text = NULL;
	size_t len  = 0;
	FILE  *f    = open_memstream(&text, &len);
	if (f == NULL) {
		log_warn("main", "event=reload_report_lost reason=\"%s\"", strerror(errno));
	}
	log_info("main", "event=reload_requested by=command_channel conf=%s",
	    path != NULL ? path : "(running file)");
	int rc = reload(srv, args, argv0, path, old, f);
	if (f != NULL) {
		fclose(f);
	}
	pthread_mutex_lock(&c->mtx);
	c->status = rc == 0 ? 0 : 1;
	c->reply  = text;
	c->done   = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
}

// Starts the command channel when system.enable_ipc_internal is set. A
// channel that cannot be opened is logged and the broker runs without it
// (`nanomq reload` then falls back to SIGHUP). Returns nothing.
static void ctl_start(server *srv)
{
	if (!srv->conf.enable_ipc_internal) {
		return;
	}
	char err[512];
	srv->ipc = ipc_server_start(srv->conf.cmd_ipc_url, ctl_handle, &srv->ctl, err, sizeof(err));
	if (srv->ipc == NULL) {
		log_warn("main",
		    "event=command_channel_failed reason=\"%s\": nanomq reload will use SIGHUP",
		    err);
	} else {
		log_info("main", "url=%s event=command_channel_listening", srv->conf.cmd_ipc_url);
	}
}

// Stops the command channel: a request still waiting is answered with an
// error, then the channel's thread is joined (main thread). Returns nothing.
static void ctl_stop_channel(server *srv)
{
	pthread_mutex_lock(&srv->ctl.mtx);
	srv->ctl.closing = true;
	pthread_cond_broadcast(&srv->ctl.cv);
	pthread_mutex_unlock(&srv->ctl.mtx);
	ipc_server_stop(srv->ipc);
	srv->ipc = NULL;
}

#ifdef NMQ_HAVE_STORE
// The store's evicted callback (store thread): a bridge's cached forward
// or a persistent session's queued message.
static void store_evicted(void *arg, const char *client_id, uint64_t seq)
{
	if (nmq_bridge_client_id(client_id, strlen(client_id))) {
		bridges_store_evicted(NULL, client_id, seq);
	} else {
		broker_store_evicted(arg, client_id, seq);
	}
}
#endif

#ifdef NMQ_HAVE_STORE
// The store's measure of the broker's work (store_set_activity): messages
// received and sent.
static uint64_t store_activity(void *arg)
{
	proto_metrics *m = proto_metrics_get(arg);
	return (uint64_t)atomic_load_explicit(&m->msgs_received, memory_order_relaxed)
	    + (uint64_t)atomic_load_explicit(&m->msgs_sent, memory_order_relaxed);
}
#endif

// Opens the durable store the configuration asks for (the sqlite section,
// the bridges' offline cache)
// and restores what it holds into the broker, before any listener opens.
// A damaged file does not stop the broker (the store moves it aside and
// starts empty); nor does a directory or a database file that cannot be
// written (read-only file system, no permission): the broker then runs
// without the store, logged at error. A directory that cannot be created for another reason
// does stop it. Returns 0 or -1 with a message in err.
static int open_store(server *srv, char *err, size_t errlen)
{
#ifdef NMQ_HAVE_STORE
	if (!store_conf_wanted(&srv->conf)) {
		return 0;
	}
	char    why[256] = "";
	nmq_err e        = store_conf_open(
	           &srv->store, &srv->conf, store_evicted, srv->broker, why, sizeof(why));
	if (e == NMQ_EACCES) {
		srv->store = NULL;
		log_error("store",
		    "event=store_disabled reason=\"%s\" key=%s: running without the durable store; "
		    "nothing is persisted (sessions, queued and retained messages, the bridges' "
		    "cache are kept in memory only) until the directory and the file can be "
		    "written and the broker is restarted",
		    why,
		    srv->conf.sqlite_enable ? "sqlite.mounted_file_path"
		                            : "bridges.mqtt.cache.mounted_file_path");
		return 0;
	}
	if (e != NMQ_OK) {
		snprintf(err, errlen, "cannot open the durable store: %s", why);
		return -1;
	}
	store_set_activity(srv->store, store_activity, srv->proto);
	if (broker_store_attach(srv->broker, srv->proto, srv->store, store_conf_persist(&srv->conf))
	    != NMQ_OK) {
		snprintf(err, errlen, "sqlite: cannot restore the store %s (see the log)",
		    store_path(srv->store));
		return -1;
	}
	return 0;
#else
	if (srv->conf.sqlite_enable) {
		snprintf(err, errlen,
		    "sqlite: this broker was built without the durable store (ENABLE_SQLITE=OFF)");
		return -1;
	}
	if (srv->conf.bridge_cache_enable) {
		log_warn(
		    "main", "key=bridges.mqtt.cache event=ignored reason=built_without_sqlite");
	}
	return 0;
#endif
}

// Frees the protocol layer; the store, still open, stops reading its
// message counters first (store_set_activity).
static void free_proto(server *srv)
{
#ifdef NMQ_HAVE_STORE
	if (srv->store != NULL) {
		store_set_activity(srv->store, NULL, NULL);
	}
#endif
	proto_free(srv->proto);
}

// Commits what the store still has queued and closes it (after the
// protocol layer is gone: its last changes are written).
static void close_store(server *srv)
{
#ifdef NMQ_HAVE_STORE
	if (srv->store != NULL) {
		store_close(srv->store);
		srv->store = NULL;
	}
#else
	(void)srv;
#endif
}

// Runs the broker until SIGTERM/SIGINT. Returns the exit status.
static int run(const cli_args *args, nmq_conf *conf, const char *argv0, int ready_fd, pidfile *pf)
{
	server srv;
	char   err[512];
	memset(&srv, 0, sizeof(srv));
	srv.conf     = *conf;
	srv.conf_old = args->cli.old_conf_path != NULL;
	{
		// A second copy of the startup configuration, kept unchanged for
		// reload's "needs a restart" comparison.
		conf_errors berrs;
		conf_cli    bcli = args->cli;
		if (conf->path != NULL) {
			bcli.conf_path     = srv.conf_old ? NULL : conf->path;
			bcli.old_conf_path = srv.conf_old ? conf->path : NULL;
		}
		srv.have_boot = conf_load(&srv.boot, &bcli, argv0, &berrs) == 0;
		conf_errors_free(&berrs);
	}
	pthread_mutex_init(&srv.ctl.mtx, NULL);
	pthread_cond_init(&srv.ctl.cv, NULL);
	srv.ctl.main_thread = pthread_self();

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, CTL_WAKE_SIGNAL);
	// Block before any thread exists so that every thread inherits it and
	// the main thread alone takes these signals.
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	// A write past RLIMIT_FSIZE (ulimit -f) fails with EFBIG instead of
	// killing the broker: the store's commit fails like one on a full
	// disk, and what it held is not acknowledged.
	signal(SIGXFSZ, SIG_IGN);
	raise_nofile_limit();

	// The ring of recent drops and refusals, before anything can record.
	(void)droplog_init(srv.conf.drop_log_size);
	proto_limits lim;
	broker_limits_from_conf(&srv.conf, &lim);
	srv.tw     = timer_wheel_alloc(TIMER_TICK_MS);
	srv.wq     = workq_alloc(worker_count(&srv.conf));
	srv.broker = broker_alloc(&srv.conf);
	if (srv.tw == NULL || srv.wq == NULL || srv.broker == NULL) {
		snprintf(err, sizeof(err), "cannot initialise the broker (see the log)");
		goto fail;
	}
	srv.proto = proto_alloc(&lim, srv.tw, srv.wq, &broker_proto_ops, srv.broker);
	if (srv.proto == NULL) {
		snprintf(err, sizeof(err), "out of memory at startup");
		goto fail;
	}
	broker_set_proto(srv.broker, srv.proto);
	if (open_store(&srv, err, sizeof(err)) != 0) {
		goto fail;
	}
	if (broker_preset_sessions(srv.broker, srv.proto, srv.conf.preset_sessions) != NMQ_OK) {
		snprintf(err, sizeof(err), "out of memory at startup (preset.session)");
		goto fail;
	}
	if (webhook_start(&srv.conf, srv.broker, &srv.hook, err, sizeof(err)) != NMQ_OK) {
		goto fail;
	}
	if (http_authn_start(&srv.conf, srv.broker, &srv.hauth, err, sizeof(err)) != NMQ_OK) {
		goto fail;
	}
	if (sys_stats_start(srv.broker, srv.proto, srv.conf.sys_interval_s, &srv.sys) != NMQ_OK) {
		snprintf(err, sizeof(err), "cannot start the $SYS statistics (see the log)");
		goto fail;
	}
	if (start_listeners(&srv, err, sizeof(err)) != 0) {
		goto fail;
	}
	bridge_env benv = { srv.broker, proto_conn_env(srv.proto), srv.store };
	if ((srv.bridges = bridges_start(&srv.conf, &benv)) == NULL) {
		snprintf(err, sizeof(err), "out of memory at startup (bridges)");
		goto fail;
	}
	if (start_http(&srv, args, argv0, err, sizeof(err)) != 0) {
		goto fail;
	}
	ctl_start(&srv);
	log_info("main",
	    "event=started version=%s workers=%d listeners=%d pid_file=%s cmd_ipc_url=%s",
	    NMQ_VERSION, workq_size(srv.wq), srv.n_listeners, srv.conf.pid_file,
	    srv.conf.enable_ipc_internal ? srv.conf.cmd_ipc_url : "off");
	daemon_ready(ready_fd, 0, NULL);
	sd_notify_ready();
	// Hand back what parsing the configuration used and freed (the file,
	// the HOCON tree): it sits below the heap's trim threshold otherwise.
	malloc_trim(0);

	uint64_t wd_us = sd_notify_watchdog_interval_us();
	for (;;) {
		struct timespec ts;
		ts.tv_sec  = wd_us > 0 ? (time_t)(wd_us / 1000000) : 3600;
		ts.tv_nsec = wd_us > 0 ? (long)(wd_us % 1000000) * 1000 : 0;
		int sig    = sigtimedwait(&set, NULL, &ts);
		if (sig < 0) {
			if (errno == EAGAIN && wd_us > 0) {
				sd_notify_watchdog();
			}
			continue;
		}
		if (wd_us > 0) {
			sd_notify_watchdog();
		}
		if (sig == SIGHUP) {
			(void)reload(&srv, args, argv0, NULL, false, NULL);
		} else if (sig == CTL_WAKE_SIGNAL) {
			ctl_serve(&srv, args, argv0);
		} else if (sig == SIGUSR1) {
			log_reopen();
		} else {
			log_info("main", "event=stopping signal=%s",
			    sig == SIGINT ? "SIGINT" : "SIGTERM");
			break;
		}
	}
	sd_notify_stopping();
	stop_http(&srv);
	ctl_stop_channel(&srv);

	// Drain: stop accepting; close the connections that have a will first
	// (their wills are published as for any server-side close, to
	// subscribers that are still connected), give that output a moment to
	// leave, then close the rest, wait for the connections to go away, stop
	// the workers and free the state.
	for (int i = 0; i < srv.n_listeners; i++) {
		listener_stop(srv.listeners[i]);
	}
	sys_stats_stop(srv.sys);
	srv.sys = NULL;
	// What clients send is no longer handled; the acks already waiting
	// for the store's commit go out before the DISCONNECTs (a slow disk
	// gets STOP_ACK_WAIT_MS).
	uint64_t t0   = nmq_clock_ms();
	size_t   left = proto_quiesce(srv.proto, STOP_ACK_WAIT_MS);
	if (left > 0) {
		log_warn("main", "event=stop_acks_not_sent acks=%zu waited_ms=%llu", left,
		    (unsigned long long)(nmq_clock_ms() - t0));
	}
	proto_shutdown_wills(srv.proto);
	for (int waited = 0; waited < WILL_DRAIN_MS && proto_links_with_will(srv.proto) > 0;
	     waited += 10) {
		sleep_ms(10);
	}
	sleep_ms(WILL_FLUSH_MS);
	bridges_stop(srv.bridges);
	srv.bridges = NULL;
	// Parked CONNECTs are refused while the workers still run.
	http_authn_shutdown(srv.hauth);
	proto_shutdown_all(srv.proto);
	for (int waited = 0; waited < DRAIN_TIMEOUT_MS && conn_live_count() > 0; waited += 10) {
		sleep_ms(10);
	}
	if (conn_live_count() > 0) {
		log_warn("main", "event=drain_timeout connections=%ld", conn_live_count());
	} else {
#ifdef NMQ_HAVE_STORE
		if (srv.store != NULL) {
			// Acks waiting on the store post back to the workers.
			store_conf_drain(srv.store);
		}
#endif
		workq_free(srv.wq);
		srv.wq = NULL;
		free_proto(&srv);
		close_store(&srv);
		broker_free(srv.broker);
		timer_wheel_free(srv.tw);
		close_store(&srv);
		// Nothing reports events any more: release what the webhook
		// queue still holds.
		webhook_stop(srv.hook);
		srv.hook = NULL;
		http_authn_free(srv.hauth);
		srv.hauth = NULL;
		droplog_fini(); // no thread records any more
		// Everything that held messages is gone: the memory accountant
		// must be back at zero (a drift would make
		// mqtt.max_message_memory bite early). Debug builds (the test
		// suite) stop on it.
		if (nmq_mem_in_use() != 0) {
			log_warn("main", "event=memory_accounting_drift bytes=%llu",
			    (unsigned long long)nmq_mem_in_use());
#ifdef NMQ_DEBUG
			abort();
#endif
		}
	}
	log_info("main", "event=stopped");
	*conf = srv.conf;
	if (srv.have_boot) {
		conf_free(&srv.boot);
	}
	pthread_mutex_destroy(&srv.ctl.mtx);
	pthread_cond_destroy(&srv.ctl.cv);
	pidfile_release(pf);
	return 0;

fail:
	log_fatal("main", "event=start_failed reason=\"%s\"", err);
	fprintf(stderr, "nanomq: %s\n", err);
	stop_http(&srv);
	for (int i = 0; i < srv.n_listeners; i++) {
		listener_stop(srv.listeners[i]);
	}
	sys_stats_stop(srv.sys);
	http_authn_shutdown(srv.hauth);
	if (srv.proto != NULL) {
		proto_shutdown_all(srv.proto);
	}
	if (srv.wq != NULL) {
		workq_free(srv.wq);
	}
	free_proto(&srv);
	close_store(&srv);
	broker_free(srv.broker);
	if (srv.tw != NULL) {
		timer_wheel_free(srv.tw);
	}
	close_store(&srv);
	webhook_stop(srv.hook);
	http_authn_free(srv.hauth);
	daemon_ready(ready_fd, 1, err);
	droplog_fini();
	*conf = srv.conf;
	if (srv.have_boot) {
		conf_free(&srv.boot);
	}
	pthread_mutex_destroy(&srv.ctl.mtx);
	pthread_cond_destroy(&srv.ctl.cv);
	pidfile_release(pf);
	return 1;
}

// Writes each non-empty line of text to stderr after "nanomq: ". Returns
// nothing.
static void print_report(const char *text)
{
	while (text != NULL && *text != '\0') {
		const char *nl  = strchr(text, '\n');
		int         len = nl != NULL ? (int)(nl - text) : (int)strlen(text);
		if (len > 0) {
			fprintf(stderr, "nanomq: %.*s\n", len, text);
		}
		text = nl != NULL ? nl + 1 : NULL;
	}
}

// Asks the broker on conf's command channel to reload and prints its
// answer. The channel is first asked for its pid, which must be that of the
// broker holding the pid file (when one does), so that a channel address
// shared by mistake never reloads another broker. Returns the exit status
// (0 or 1) once the broker answered, or -1 with a message in msg when the
// caller should fall back to SIGHUP.
static int reload_by_ipc(const cli_args *args, const nmq_conf *conf, char *msg, size_t msglen)
{
	char  err[256];
	char *reply = NULL;
	bool  ok;
	pid_t holder;
	if (pidfile_read(conf->pid_file, &holder, err, sizeof(err)) != NMQ_OK) {
		// The channel's pid cannot be checked against the file's.
		fprintf(stderr, "nanomq: warning: %s\n", err);
	}
	if (ipc_request(
	        conf->cmd_ipc_url, "pid", NULL, RELOAD_PROBE_TIMEOUT_MS, &ok, &reply, msg, msglen)
	    != NMQ_OK) {
		return -1;
	}
	long served = ok ? strtol(reply, NULL, 10) : 0;
	free(reply);
	if (holder > 0 && served != (long)holder) {
		snprintf(msg, msglen,
		    "the command channel %s belongs to nanomq pid %ld, not to pid %ld named by %s",
		    conf->cmd_ipc_url, served, (long)holder, conf->pid_file);
		return -1;
	}
	bool        given = args->cli.conf_path != NULL || args->cli.old_conf_path != NULL;
	const char *verb  = args->cli.old_conf_path != NULL ? "reload_old_conf" : "reload";
	nmq_err     r     = ipc_request(conf->cmd_ipc_url, verb, given ? conf->path : NULL,
	            RELOAD_IPC_TIMEOUT_MS, &ok, &reply, err, sizeof(err));
	printf("%s\n", r == NMQ_OK && ok ? "reload succeed!" : "reload failed!");
	fflush(stdout);
	if (r != NMQ_OK) {
		fprintf(stderr, "nanomq: %s\n", err);
		return 1;
	}
	print_report(reply);
	free(reply);
	return ok ? 0 : 1;
}

// `nanomq reload`: conf is the configuration validated here, whose path the
// broker switches to when it was given on the command line. Uses the command
// channel when enable_ipc_internal is set, else (or when the channel cannot
// be reached) SIGHUP through the pid file, whose outcome only the broker's
// log tells. Returns the exit status.
static int reload_command(const cli_args *args, const nmq_conf *conf)
{
	char msg[512];
	if (conf->enable_ipc_internal) {
		int r = reload_by_ipc(args, conf, msg, sizeof(msg));
		if (r >= 0) {
			return r;
		}
		fprintf(stderr, "nanomq: %s; sending SIGHUP instead\n", msg);
	}
	nmq_err r = ctl_reload(conf->pid_file, msg, sizeof(msg));
	printf("%s\n", r == NMQ_OK ? "reload succeed!" : "reload failed!");
	fflush(stdout);
	if (r != NMQ_OK) {
		fprintf(stderr, "nanomq: %s\n", msg);
		return 1;
	}
	fprintf(stderr, "nanomq: %s; the outcome is in the broker's log\n", msg);
	if (args->cli.conf_path != NULL || args->cli.old_conf_path != NULL) {
		fprintf(stderr,
		    "nanomq: warning: by SIGHUP the broker re-reads its own file; %s was only "
		    "checked here\n",
		    conf->path);
	}
	return 0;
}

int main(int argc, char **argv)
{
	cli_args args;
	char     err[512];
	log_init();
	if (argc >= 2 && strcmp(argv[1], "passwd") == 0) {
		// nanomq passwd [-c] [-b|-D] file user [password]
		return auth_passwd_main(argc - 1, argv + 1);
	}
	if (cli_args_parse(&args, argc, argv, err, sizeof(err)) != NMQ_OK) {
		fprintf(stderr, "nanomq: %s\nTry 'nanomq --help'.\n", err);
		return 1;
	}
	if (args.help) {
		cli_usage(stdout);
		return 0;
	}
	if (args.version) {
		cli_version(stdout);
		return 0;
	}
	char msg[512];
	if (args.verb == CLI_VERB_STOP) {
		char pid_path[PATH_MAX];
		if (conf_pid_file(&args.cli, argv[0], pid_path, sizeof(pid_path)) != NMQ_OK) {
			fprintf(stderr, "nanomq: $NANOMQ_PID_FILE is too long\n");
			return 1;
		}
		nmq_err r = ctl_stop(pid_path, CTL_STOP_TIMEOUT_MS, false, msg, sizeof(msg));
		fprintf(r == NMQ_OK ? stdout : stderr, "%s\n", msg);
		if (r == NMQ_ENOENT && args.cli.conf_path == NULL
		    && args.cli.old_conf_path == NULL) {
			fprintf(stderr,
			    "nanomq: a broker started with --conf FILE has its own pid file: "
			    "use nanomq stop --conf FILE\n");
		}
		return r == NMQ_OK ? 0 : 1;
	}

	nmq_conf    conf;
	conf_errors errs;
	conf_set_tls_params_check(tls_params_ok);
	int  rc        = conf_load(&conf, &args.cli, argv[0], &errs);
	bool reloading = args.verb == CLI_VERB_RELOAD && !args.test;
	if (rc != 0 && reloading) {
		printf("reload failed!\n");
		fflush(stdout);
	}
	print_conf_errors(&errs);
	conf_errors_free(&errs);
	if (rc != 0) {
		if (!reloading) {
			fprintf(stderr, "nanomq: configuration has errors; not starting\n");
		}
		return 1;
	}
	if (conf.path != NULL && conf.path[0] != '/') {
		// Reload re-reads this path after daemonize() changed to "/".
		char *abs = realpath(conf.path, NULL);
		if (abs != NULL) {
			free(conf.path);
			conf.path = abs;
		}
	}
	if (args.test) {
		if (check_listener_files(&conf) > 0) {
			fprintf(stderr, "nanomq: configuration has errors\n");
			conf_free(&conf);
			return 1;
		}
		printf("nanomq: configuration %s is valid\n",
		    conf.path != NULL ? conf.path : "(defaults)");
		conf_free(&conf);
		return 0;
	}
	if (args.verb == CLI_VERB_RELOAD) {
		int r = reload_command(&args, &conf);
		conf_free(&conf);
		return r;
	}
	if (args.verb == CLI_VERB_RESTART) {
		nmq_err r = ctl_stop(conf.pid_file, CTL_STOP_TIMEOUT_MS, true, msg, sizeof(msg));
		if (r != NMQ_OK && r != NMQ_ENOENT) {
			fprintf(stderr, "%s\n", msg);
			conf_free(&conf);
			return 1;
		}
	}

	pidfile pf;
	if (pidfile_acquire(&pf, conf.pid_file, err, sizeof(err)) != NMQ_OK) {
		fprintf(stderr, "nanomq: %s\n", err);
		conf_free(&conf);
		return 1;
	}
	int ready_fd = -1;
	if (conf.daemon) {
		if (daemonize(&ready_fd, err, sizeof(err)) != NMQ_OK) {
			fprintf(stderr, "nanomq: %s\n", err);
			return 1;
		}
		if (pidfile_update(&pf, err, sizeof(err)) != NMQ_OK) {
			// The file would name the original process, which exits:
			// `stop` could not find the daemon. The original process
			// prints err (stderr is /dev/null here).
			daemon_ready(ready_fd, 1, err);
			pidfile_release(&pf);
			conf_free(&conf);
			return 1;
		}
	}
	if (log_open(&conf, err, sizeof(err)) != NMQ_OK) {
		fprintf(stderr, "nanomq: %s\n", err);
		daemon_ready(ready_fd, 1, err);
		pidfile_release(&pf);
		conf_free(&conf);
		return 1;
	}
	rc = run(&args, &conf, argv[0], ready_fd, &pf);
	log_close();
	conf_free(&conf);
	if (rc == 0 && restart_requested) {
		// POST /api/v4/ctrl/restart: everything is stopped and released;
		// start again as this program was started.
		execv("/proc/self/exe", argv);
		fprintf(stderr, "nanomq: restart failed: %s\n", strerror(errno));
		return 1;
	}
	return rc;
}
