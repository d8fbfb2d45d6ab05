/*
 * post.h - what posting code inside the project needs beyond the public API:
 * whether a stream can take more collectives without the post waiting for
 * room in the window (INCMOE_STREAM_WINDOW).  Callers that must never block,
 * such as the NCCL plugin's non-blocking calls, ask first.
 */
#ifndef INCMOE_POST_H
#define INCMOE_POST_H

#include "incmoe/incmoe.h"

/*
 * Collectives the stream can take now (0 .. INCMOE_STREAM_WINDOW) without a
 * post waiting.  Room only grows while nobody else posts on the stream, so a
 * thread that is the stream's only poster may post that many without blocking.
 */
unsigned client_stream_room(incmoe_comm_t *comm, incmoe_stream_t stream);

#endif
