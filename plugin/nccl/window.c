/* window.c - see window.h. */
#include "window.h"

#include <stdint.h>

size_t window_block_bytes(size_t bytes_per_rank, size_t win_offset, size_t win_bytes, int r)
{
    size_t lo = (size_t)r * bytes_per_rank;
    size_t hi = lo + bytes_per_rank;
    size_t wlo = win_offset, whi = win_offset + win_bytes;
    size_t a = lo > wlo ? lo : wlo;
    size_t b = hi < whi ? hi : whi;
    return b > a ? b - a : 0;
}

int window_split(int nranks, size_t bytes_per_rank, size_t win_offset, size_t win_bytes,
                 window_piece_t pieces[WINDOW_MAX_PIECES])
{
    if (win_bytes == 0)
        return 0;
    if (nranks <= 0 || bytes_per_rank == 0 || win_offset > SIZE_MAX - win_bytes ||
        bytes_per_rank > SIZE_MAX / (size_t)nranks ||
        win_offset + win_bytes > (size_t)nranks * bytes_per_rank)
        return -1;

    size_t end = win_offset + win_bytes;
    int first = (int)(win_offset / bytes_per_rank);
    int last = (int)((end - 1) / bytes_per_rank);
    int n = 0;

    /* Head: the first block when the window starts inside it or ends inside it. */
    size_t head_off = win_offset - (size_t)first * bytes_per_rank;
    size_t head_end = first == last ? end - (size_t)first * bytes_per_rank : bytes_per_rank;
    int full_lo = first;
    if (head_off != 0 || head_end != bytes_per_rank) {
        pieces[n++] = (window_piece_t){first, first, head_off, head_end - head_off};
        full_lo = first + 1;
    }
    if (first == last && n == 1)
        return n;

    /* Tail: the last block when the window ends inside it. */
    size_t tail_len = end - (size_t)last * bytes_per_rank;
    int full_hi = tail_len != bytes_per_rank ? last - 1 : last;
    if (full_lo <= full_hi)
        pieces[n++] = (window_piece_t){full_lo, full_hi, 0, bytes_per_rank};
    if (tail_len != bytes_per_rank && last > first)
        pieces[n++] = (window_piece_t){last, last, 0, tail_len};
    return n;
}
