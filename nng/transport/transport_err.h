// Maps NNG's error codes to nmq_err, for transport functions that wrap an
// NNG call. Pure; any thread.
#ifndef NMQ_TRANSPORT_ERR_H
#define NMQ_TRANSPORT_ERR_H

#include <nng/nng.h>

#include "nng/core/nmq_err.h"

// Returns the nmq_err closest to the NNG error rv (0 -> NMQ_OK; an address
// in use -> NMQ_EEXIST; a bad address -> NMQ_EINVAL; anything without a
// closer match -> NMQ_EIO).
static inline nmq_err transport_err_from_nng(int rv)
{
	switch (rv) {
	case 0:
		return NMQ_OK;
	case NNG_ENOMEM:
		return NMQ_ENOMEM;
	case NNG_EINVAL:
	case NNG_EADDRINVAL:
	case NNG_EBADTYPE:
		return NMQ_EINVAL;
	case NNG_ENOENT:
		return NMQ_ENOENT;
	case NNG_EEXIST:
	case NNG_EADDRINUSE:
		return NMQ_EEXIST;
	case NNG_EBUSY:
	case NNG_EAGAIN:
	case NNG_ENOFILES:
		return NMQ_EBUSY;
	case NNG_ECLOSED:
	case NNG_ECONNRESET:
	case NNG_ECONNSHUT:
	case NNG_ECONNABORTED:
		return NMQ_ECLOSED;
	case NNG_ETIMEDOUT:
		return NMQ_ETIMEDOUT;
	case NNG_EPROTO:
		return NMQ_EPROTO;
	case NNG_EPERM:
		return NMQ_EACCES;
	case NNG_ENOTSUP:
		return NMQ_ENOTSUP;
	case NNG_ECRYPTO:
	case NNG_EPEERAUTH:
		return NMQ_ETLS;
	default:
		return NMQ_EIO;
	}
}

#endif // NMQ_TRANSPORT_ERR_H
