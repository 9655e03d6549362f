// nanomq: the broker daemon's entry point. Parses the command line, loads
// and validates the configuration, then either controls a running broker
// (stop, reload) or runs one: pid file, daemonize (before any NNG call),
// logging, the timer wheel, the worker pool, the protocol layer, the
// broker, the listeners; then the main thread waits for signals.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "nng/protocol/proto.h"
#include "nng/transport/listener.h"
#include "src/auth/auth_passwd.h"
#include "src/broker/broker.h"
#include "src/cli/args.h"
#include "src/cli/ctl.h"
#include "src/cli/daemon.h"
#include "src/cli/pidfile.h"
#include "src/cli/sd_notify.h"
#include "src/conf/conf.h"
#include "src/log/log.h"

#define TIMER_TICK_MS    20
#define DRAIN_TIMEOUT_MS 5000

typedef struct server {
	nmq_conf      conf;
	timer_wheel  *tw;
	workq        *wq;
	nmq_broker   *broker;
	nmq_proto    *proto;
	nmq_listener *listeners[CONF_MAX_LISTENERS];
	int           n_listeners;
} server;

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

// Logs collected configuration problems (after the log is open).
static void log_conf_errors(const conf_errors *errs)
{
	for (int i = 0; i < errs->n_warnings; i++) {
		log_warn("conf", "%s", errs->warnings[i]);
	}
	for (int i = 0; i < errs->n_errors; i++) {
		log_error("conf", "%s", errs->errors[i]);
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
		if (listener_tls_check(&lo, err, sizeof(err)) != 0) {
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
		int rv = listener_start(&srv->listeners[srv->n_listeners], &lo,
		    proto_conn_env(srv->proto), (listener_accept_fn)proto_accept, srv->proto, err,
		    errlen);
		if (rv != 0) {
			return -1;
		}
		nmq_listener *l = srv->listeners[srv->n_listeners++];
		log_info("main", "listener=%s url=%s event=listening", cl->name, url);
		if (listener_host_filtered(l)) {
			log_warn("main",
			    "listener=%s url=%s: WebSocket clients must send this address as their "
			    "Host header; bind 0.0.0.0 to accept any Host",
			    cl->name, url);
		}
	}
	return 0;
}

// Re-reads the TLS files of every running ssl/wss listener (certificates are
// usually renewed in place, so an unchanged path says nothing) and applies
// the new maximum packet size to the ws/wss frame limit. Listeners are
// matched by name; added or removed ones need a restart (conf_diff says so).
static void reload_listeners(server *srv, const nmq_conf *nc, uint32_t max_packet_size)
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
		(void)listener_set_max_packet_size(l, max_packet_size);
		if (cl->kind != CONF_LISTENER_SSL && cl->kind != CONF_LISTENER_WSS) {
			continue;
		}
		listener_opts lo;
		char          err[512];
		listener_opts_from_conf(cl, NULL, &lo);
		if (listener_reload_tls(l, &lo, err, sizeof(err)) != 0) {
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
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

// Returns the number of work contexts: the configured value, or 2 x cores.
static int worker_count(const nmq_conf *conf)
{
	if (conf->parallel > 0) {
		return conf->parallel;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1) {
		n = 1;
	}
	return (int)(n * 2 > 64 ? 64 : n * 2);
}

// Re-reads the configuration; applies the reloadable part if all of it is
// valid.
static void reload(server *srv, const cli_args *args, const char *argv0)
{
	nmq_conf    nc;
	conf_errors errs;
	sd_notify_reloading();
	conf_cli cli = args->cli;
	if (srv->conf.path != NULL) {
		// The same file (made absolute at startup), in the same format.
		if (cli.old_conf_path != NULL) {
			cli.old_conf_path = srv->conf.path;
		} else {
			cli.conf_path = srv->conf.path;
		}
	}
	if (conf_load(&nc, &cli, argv0, &errs) != 0) {
		log_conf_errors(&errs);
		log_error("main", "event=reload_failed reason=configuration_errors errors=%d",
		    errs.n_errors);
		conf_errors_free(&errs);
		sd_notify_ready();
		return;
	}
	log_conf_errors(&errs);
	conf_errors_free(&errs);
	conf_changes ch;
	if (conf_diff(&srv->conf, &nc, &ch) == 0) {
		for (int i = 0; i < ch.n; i++) {
			if (ch.v[i].restart) {
				log_warn("main", "key=%s event=changed action=needs_restart",
				    ch.v[i].key);
			} else {
				log_info(
				    "main", "key=%s event=changed action=applied", ch.v[i].key);
			}
		}
		conf_changes_free(&ch);
	}
	char err[256];
	// Everything that can fail is checked before anything changes.
	if (broker_reconfigure(srv->broker, &nc, err, sizeof(err)) != 0) {
		log_error("main", "event=reload_failed reason=\"%s\"", err);
		conf_free(&nc);
		sd_notify_ready();
		return;
	}
	if (log_open(&nc, err, sizeof(err)) != 0) {
		// The running log targets stay; the rest of the reload goes on.
		log_error("main", "event=reload_log_failed reason=\"%s\"", err);
	}
	proto_limits lim;
	broker_limits_from_conf(&nc, &lim);
	proto_set_limits(srv->proto, &lim);
	reload_listeners(srv, &nc, lim.max_packet_size);
	log_set_level(nc.log_level);
	// Keep the values that need a restart from the running configuration:
	// swap in the new one only for what was applied above.
	conf_free(&srv->conf);
	srv->conf = nc;
	log_warn("main", "event=reloaded");
	sd_notify_ready();
}

// Runs the broker until SIGTERM/SIGINT. Returns the exit status.
static int run(const cli_args *args, nmq_conf *conf, const char *argv0, int ready_fd, pidfile *pf)
{
	server srv;
	char   err[512];
	memset(&srv, 0, sizeof(srv));
	srv.conf = *conf;

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	// Block before any thread exists so that every thread inherits it and
	// the main thread alone takes these signals.
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile_limit();

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
	if (start_listeners(&srv, err, sizeof(err)) != 0) {
		goto fail;
	}
	log_warn("main", "event=started version=%s workers=%d listeners=%d", NMQ_VERSION,
	    workq_size(srv.wq), srv.n_listeners);
	daemon_ready(ready_fd, 0, NULL);
	sd_notify_ready();

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
			reload(&srv, args, argv0);
		} else if (sig == SIGUSR1) {
			log_reopen();
		} else {
			log_warn("main", "event=stopping signal=%s",
			    sig == SIGINT ? "SIGINT" : "SIGTERM");
			break;
		}
	}
	sd_notify_stopping();

	// Drain: stop accepting, close every connection (wills go out as for
	// any server-side close), wait for the connections to go away, then
	// stop the workers and free the state.
	for (int i = 0; i < srv.n_listeners; i++) {
		listener_stop(srv.listeners[i]);
	}
	proto_shutdown_all(srv.proto);
	for (int waited = 0; waited < DRAIN_TIMEOUT_MS && conn_live_count() > 0; waited += 10) {
		nng_msleep(10);
	}
	if (conn_live_count() > 0) {
		log_warn("main", "event=drain_timeout connections=%ld", conn_live_count());
	} else {
		workq_free(srv.wq);
		srv.wq = NULL;
		proto_free(srv.proto);
		broker_free(srv.broker);
		timer_wheel_free(srv.tw);
	}
	log_warn("main", "event=stopped");
	*conf = srv.conf;
	pidfile_release(pf);
	return 0;

fail:
	log_fatal("main", "event=start_failed reason=\"%s\"", err);
	fprintf(stderr, "nanomq: %s\n", err);
	for (int i = 0; i < srv.n_listeners; i++) {
		listener_stop(srv.listeners[i]);
	}
	if (srv.proto != NULL) {
		proto_shutdown_all(srv.proto);
	}
	if (srv.wq != NULL) {
		workq_free(srv.wq);
	}
	proto_free(srv.proto);
	broker_free(srv.broker);
	if (srv.tw != NULL) {
		timer_wheel_free(srv.tw);
	}
	daemon_ready(ready_fd, 1, err);
	*conf = srv.conf;
	pidfile_release(pf);
	return 1;
}

int main(int argc, char **argv)
{
	cli_args args;
	char     err[512];
	if (argc >= 2 && strcmp(argv[1], "passwd") == 0) {
		// nanomq passwd [-c] [-b|-D] file user [password]
		return auth_passwd_main(argc - 1, argv + 1);
	}
	if (cli_args_parse(&args, argc, argv, err, sizeof(err)) != 0) {
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
		int r = ctl_stop(pidfile_path(), CTL_STOP_TIMEOUT_MS, false, msg, sizeof(msg));
		fprintf(r == CTL_OK ? stdout : stderr, "%s\n", msg);
		return r == CTL_OK ? 0 : 1;
	}

	nmq_conf    conf;
	conf_errors errs;
	int         rc = conf_load(&conf, &args.cli, argv[0], &errs);
	print_conf_errors(&errs);
	conf_errors_free(&errs);
	if (rc != 0) {
		fprintf(stderr, "nanomq: configuration has errors; not starting\n");
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
		int r = ctl_reload(pidfile_path(), msg, sizeof(msg));
		printf("%s\n", r == CTL_OK ? "reload succeed!" : "reload failed!");
		if (r != CTL_OK) {
			fprintf(stderr, "%s\n", msg);
		}
		conf_free(&conf);
		return r == CTL_OK ? 0 : 1;
	}
	if (args.verb == CLI_VERB_RESTART) {
		int r = ctl_stop(pidfile_path(), CTL_STOP_TIMEOUT_MS, true, msg, sizeof(msg));
		if (r != CTL_OK && r != CTL_NOT_RUNNING) {
			fprintf(stderr, "%s\n", msg);
			conf_free(&conf);
			return 1;
		}
	}

	pidfile pf;
	if (pidfile_acquire(&pf, pidfile_path(), err, sizeof(err)) != 0) {
		fprintf(stderr, "nanomq: %s\n", err);
		conf_free(&conf);
		return 1;
	}
	int ready_fd = -1;
	if (conf.daemon) {
		if (daemonize(&ready_fd, err, sizeof(err)) != 0) {
			fprintf(stderr, "nanomq: %s\n", err);
			return 1;
		}
		pidfile_update(&pf, err, sizeof(err));
	}
	if (log_open(&conf, err, sizeof(err)) != 0) {
		fprintf(stderr, "nanomq: %s\n", err);
		daemon_ready(ready_fd, 1, err);
		return 1;
	}
	rc = run(&args, &conf, argv[0], ready_fd, &pf);
	log_close();
	conf_free(&conf);
	return rc;
}
