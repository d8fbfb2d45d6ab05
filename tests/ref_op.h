/*
 * ref_op.h - a reduction operator applied to two elements as plain C++, in
 * the element's own type: the reference the suites check base/reduce.c and
 * a switch's folds against, so written without base/.
 */
#ifndef INCMOE_TEST_REF_OP_H
#define INCMOE_TEST_REF_OP_H

#include "incmoe/incmoe.h"

namespace ref_op
{

/* op(a, b) in T (integers as C++ computes them: the caller wraps signed sums itself). */
template <typename T> T apply(int op, T a, T b)
{
    switch (op) {
    case INCMOE_SUM:
        return (T)(a + b);
    case INCMOE_PROD:
        return (T)(a * b);
    case INCMOE_MAX:
        return a > b ? a : b;
    default:
        return a < b ? a : b;
    }
}

} // namespace ref_op

#endif
