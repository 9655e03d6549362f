#include "nng/core/nmq_err.h"

#include <errno.h>
#include <stddef.h>

static const char *const nmq_err_text[NMQ_ERR_COUNT_] = {
	[NMQ_OK]        = "success",
	[NMQ_ENOMEM]    = "out of memory",
	[NMQ_EINVAL]    = "invalid argument",
	[NMQ_ENOENT]    = "not found",
	[NMQ_EEXIST]    = "already exists or in use",
	[NMQ_EBUSY]     = "busy",
	[NMQ_ECLOSED]   = "closed",
	[NMQ_ETIMEDOUT] = "timed out",
	[NMQ_EPROTO]    = "protocol error",
	[NMQ_ELIMIT]    = "limit reached",
	[NMQ_EACCES]    = "permission denied",
	[NMQ_EIO]       = "input/output error",
	[NMQ_ECORRUPT]  = "damaged or unknown data",
	[NMQ_ENOTSUP]   = "not supported",
	[NMQ_ETLS]      = "TLS failure",
};

const char *nmq_strerror(nmq_err e)
{
	if ((unsigned)e >= NMQ_ERR_COUNT_ || nmq_err_text[e] == NULL) {
		return "unknown error";
	}
	return nmq_err_text[e];
}

nmq_err nmq_err_from_errno(int errnum)
{
	switch (errnum) {
	case 0:
		return NMQ_OK;
	case ENOMEM:
		return NMQ_ENOMEM;
	case EINVAL:
	case ERANGE:
		return NMQ_EINVAL;
	case ENOENT:
	case ESRCH:
		return NMQ_ENOENT;
	case EEXIST:
	case EADDRINUSE:
		return NMQ_EEXIST;
	case EAGAIN:
	case EBUSY:
	case EMFILE:
	case ENFILE:
		return NMQ_EBUSY;
	case EPIPE:
	case ECONNRESET:
	case ENOTCONN:
	case EBADF:
		return NMQ_ECLOSED;
	case ETIMEDOUT:
		return NMQ_ETIMEDOUT;
	case EACCES:
	case EPERM:
		return NMQ_EACCES;
	case ENOTSUP:
		return NMQ_ENOTSUP;
	default:
		return NMQ_EIO;
	}
}
