// The systemd notify protocol (sd_notify(3)) without libsystemd: one
// datagram of "KEY=value" lines sent to the AF_UNIX socket named by
// $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace).
//
// Contract:
// - Every function is a no-op returning NMQ_OK when NOTIFY_SOCKET is
//   unset, so the broker calls them unconditionally. A failure is logged
//   here (warn, rate-limited), so a caller may ignore the result.
// - Each call opens a socket, sends one datagram and closes it; it never
//   blocks for long (the socket is non-blocking) and may be called from any
//   thread. The watchdog ping must come from the loop whose liveness it
//   proves (the main loop), not from a thread of its own.
// - Sequence: sd_notify_ready() once the listeners accept; around a
//   reload, sd_notify_reloading() then sd_notify_ready(); at shutdown
//   sd_notify_stopping(); sd_notify_watchdog() every
//   sd_notify_watchdog_interval_us().
#ifndef NMQ_SD_NOTIFY_H
#define NMQ_SD_NOTIFY_H

#include <stdint.h>

#include "nng/core/nmq_err.h"

// Sends state (one or more "KEY=value" lines separated by '\n'). Returns
// NMQ_OK when sent or when NOTIFY_SOCKET is unset; NMQ_EINVAL when it is
// not an absolute path or "@name", or the error of the send (NMQ_ENOENT
// when nobody listens there, ...), logged.
nmq_err sd_notify_send(const char *state);

// "READY=1". Returns as sd_notify_send().
nmq_err sd_notify_ready(void);

// "RELOADING=1" with "MONOTONIC_USEC=<now>" (as Type=notify-reload wants).
// Returns as sd_notify_send().
nmq_err sd_notify_reloading(void);

// "STOPPING=1". Returns as sd_notify_send().
nmq_err sd_notify_stopping(void);

// "WATCHDOG=1". Returns as sd_notify_send().
nmq_err sd_notify_watchdog(void);

// "STATUS=<printf result>" (one line; a newline in it is replaced by a
// space). Returns as sd_notify_send().
nmq_err sd_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Returns the interval at which to call sd_notify_watchdog(), in
// microseconds: half of $WATCHDOG_USEC. Returns 0 (no watchdog) when
// WATCHDOG_USEC is unset or invalid, or when WATCHDOG_PID is set to a pid
// other than the caller's.
uint64_t sd_notify_watchdog_interval_us(void);

#endif // NMQ_SD_NOTIFY_H
