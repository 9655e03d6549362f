// The project's error type. Functions that can fail across a module
// boundary return nmq_err: NMQ_OK (0) on success, otherwise one of the
// codes below, and say in their comment which codes they return. MQTT
// reason codes (mqtt_codec.h) are a separate type: they are what a client
// is told, while nmq_err is what a caller in this process is told; the
// protocol layer maps one to the other at its boundary.
//
// Threading: the functions below are pure and may be called from any
// thread; nmq_strerror returns a static string.
#ifndef NMQ_ERR_H
#define NMQ_ERR_H

typedef enum nmq_err {
	NMQ_OK = 0,
	NMQ_ENOMEM, // an allocation failed
	NMQ_EINVAL, // an argument or a value read is invalid
	NMQ_ENOENT, // no such object (file, session, client, key)
	NMQ_EEXIST, // the object exists already, or the address is in use
	NMQ_EBUSY, // a limit on concurrent use was reached; try again later
	NMQ_ECLOSED, // the object is closing or closed
	NMQ_ETIMEDOUT, // a deadline passed
	NMQ_EPROTO, // the peer broke a protocol (MQTT, HTTP, SP)
	NMQ_ELIMIT, // a configured bound was reached (queue, size, count)
	NMQ_EACCES, // not authorized, or a file could not be opened for lack of rights
	NMQ_EIO, // an I/O or system call failed (errno was logged by the callee)
	NMQ_ECORRUPT, // stored data is damaged or of an unknown format
	NMQ_ENOTSUP, // the feature is not built in or not supported
	NMQ_ETLS, // a TLS handshake, certificate or key failed
	NMQ_ERR_COUNT_
} nmq_err;

// A short English description of e ("out of memory", ...); "unknown
// error" for a value outside the enum.
const char *nmq_strerror(nmq_err e);

// Maps an errno value to the closest nmq_err (ENOMEM -> NMQ_ENOMEM,
// ENOENT -> NMQ_ENOENT, EADDRINUSE -> NMQ_EEXIST, ...; anything else is
// NMQ_EIO).
nmq_err nmq_err_from_errno(int errnum);

#endif // NMQ_ERR_H
