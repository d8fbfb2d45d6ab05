/* status.c - text for every incmoe_status_t. */
#include "incmoe/incmoe.h"

const char *incmoe_strerror(incmoe_status_t status)
{
    switch (status) {
    case INCMOE_OK:
        return "success";
    case INCMOE_IN_PROGRESS:
        return "operation in progress";
    case INCMOE_ERR_INVALID_ARG:
        return "invalid argument";
    case INCMOE_ERR_NO_MEMORY:
        return "out of memory";
    case INCMOE_ERR_UNREACHABLE:
        return "switch or peer unreachable";
    case INCMOE_ERR_AUTH:
        return "authentication failed";
    case INCMOE_ERR_PEER_FAILED:
        return "peer failed";
    case INCMOE_ERR_TIMEOUT:
        return "timed out";
    case INCMOE_ERR_PROTOCOL:
        return "protocol error";
    case INCMOE_ERR_MISMATCH:
        return "ranks disagree";
    case INCMOE_ERR_OUT_OF_RANGE:
        return "byte range out of bounds";
    case INCMOE_ERR_UNSUPPORTED:
        return "unsupported";
    case INCMOE_ERR_JOB:
        return "job refused the rank";
    case INCMOE_ERR_TRANSPORT:
        return "transport error";
    case INCMOE_ERR_CLOSED:
        return "communicator closed or failed";
    case INCMOE_ERR_BUSY:
        return "still in use by a collective in flight";
    }
    return "unknown status";
}
