/*
 * ref_half.h - IEEE binary16 through the compiler's own _Float16: the
 * reference the suites check base/dtype.h's conversions and a switch's
 * float16 reductions against, so written without base/.
 */
#ifndef INCMOE_TEST_REF_HALF_H
#define INCMOE_TEST_REF_HALF_H

#include <stdint.h>
#include <string.h>

namespace ref_half
{

/* The value of fp16 bits u. */
inline float to_float(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

/* The fp16 bits nearest f (ties to even), as the compiler rounds. */
inline uint16_t from_float(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

} // namespace ref_half

#endif
