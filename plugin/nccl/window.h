/*
 * window.h - NCCL's CollNet window onto the padded layout of the client API.
 *
 * NCCL's AllGather / ReduceScatter calls cover the byte window
 * [win_offset, win_offset + win_bytes) of a logical buffer of nranks blocks of
 * bytes_per_rank bytes.  The client API moves the SAME in-block range of every
 * block.  So the window is cut at block boundaries into at most three pieces
 * that each have one in-block range: a partial head block, the run of full
 * blocks, a partial tail block.  A piece names the blocks it covers; the
 * caller posts one collective per piece with valid[] = 0 outside them.  The
 * cut depends only on the window, so every rank posts the same pieces.
 */
#ifndef INCMOE_NCCL_WINDOW_H
#define INCMOE_NCCL_WINDOW_H

#include <stddef.h>

#define WINDOW_MAX_PIECES 3

typedef struct {
    int first_block, last_block; /* blocks covered, inclusive */
    size_t offset;               /* in-block start of the range */
    size_t length;               /* in-block length of the range */
} window_piece_t;

/*
 * Cut a window into pieces.  Returns the number of pieces (0 for an empty
 * window), or -1 when the window does not fit in nranks * bytes_per_rank or
 * bytes_per_rank is 0 with a non-empty window.
 */
int window_split(int nranks, size_t bytes_per_rank, size_t win_offset, size_t win_bytes,
                 window_piece_t pieces[WINDOW_MAX_PIECES]);

/* Bytes of block r inside the window (0 when the window misses it). */
size_t window_block_bytes(size_t bytes_per_rank, size_t win_offset, size_t win_bytes, int r);

#endif
