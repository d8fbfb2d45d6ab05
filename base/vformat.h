/* vformat.h - a variadic function's own arguments, formatted into a buffer. */
#ifndef INC_VFORMAT_H
#define INC_VFORMAT_H

#include <stdarg.h>
#include <stdio.h>

/*
 * Formats the arguments after fmt, the calling function's last named
 * parameter, into buf of size bytes: truncated and NUL-terminated, as
 * vsnprintf.  A macro because va_start must run in the variadic function
 * itself.
 */
#define INC_VFORMAT(buf, size, fmt)                                                                \
    do {                                                                                           \
        va_list inc_vformat_ap;                                                                    \
        va_start(inc_vformat_ap, fmt);                                                             \
        vsnprintf(buf, size, fmt, inc_vformat_ap);                                                 \
        va_end(inc_vformat_ap);                                                                    \
    } while (0)

#endif
