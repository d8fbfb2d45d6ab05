/*
 * band.h - the band arithmetic of the padded layout, in one place.
 *
 * Every role on every rank derives band boundaries from this function only:
 * an off-by-one between the gather, compute and reduce roles would make one
 * role read rows another has not written, or make ranks disagree on a
 * collective.  Plain C with no library calls, so a CUDA kernel can include it.
 */
#ifndef INCMOE_MOE_BAND_H
#define INCMOE_MOE_BAND_H

#include <stddef.h>

#if defined(__CUDACC__)
#define BAND_FN static inline __host__ __device__
#else
#define BAND_FN static inline
#endif

/* Rows [start, start + rows) of every block belong to band j. */
typedef struct {
    size_t start;
    size_t rows;
} band_t;

/*
 * Band j of nb over blocks of tmax rows: beta = ceil(tmax / nb) rows per band,
 * band j = rows [j*beta, min((j+1)*beta, tmax)).  Bands past the end of the
 * block (nb > tmax, or tmax = 0) are empty but still exist: they keep every
 * counter and every collective stream in step.  nb must be >= 1.
 */
BAND_FN band_t band_get(size_t tmax, size_t nb, size_t j)
{
    band_t b;
    size_t beta = (tmax + nb - 1) / nb;
    size_t start = j * beta;
    size_t end = start + beta;
    if (start > tmax)
        start = tmax;
    if (end > tmax)
        end = tmax;
    b.start = start;
    b.rows = end - start;
    return b;
}

/* Rows of band b that hold data in a block whose owner has t rows (t <= tmax). */
BAND_FN size_t band_valid_rows(band_t b, size_t t)
{
    if (t <= b.start)
        return 0;
    return (t - b.start < b.rows) ? t - b.start : b.rows;
}

/* Sub-range `part` of `parts` of a row range, split as evenly as possible (for
   spreading one band's rows over several workers). */
BAND_FN band_t band_split(band_t b, size_t parts, size_t part)
{
    band_t s;
    size_t q = b.rows / parts, r = b.rows % parts;
    s.start = b.start + part * q + (part < r ? part : r);
    s.rows = q + (part < r ? 1 : 0);
    return s;
}

#endif
