/* text.c - see text.h. */
#include "text.h"

#include <stdio.h>

#include "wire.h"

char *inc_text_sanitize(char *dst, size_t dst_len, const void *src, size_t src_len)
{
    const unsigned char *s = src;
    size_t out = 0;
    if (src_len > INCMOE_WIRE_MAX_TEXT)
        src_len = INCMOE_WIRE_MAX_TEXT;
    for (size_t i = 0; i < src_len && s[i] != '\0'; i++) {
        int plain = s[i] >= 0x20 && s[i] < 0x7f;
        size_t need = plain ? 1 : 4;
        if (out + need >= dst_len)
            break;
        if (plain)
            dst[out] = (char)s[i];
        else
            snprintf(dst + out, 5, "\\x%02x", s[i]);
        out += need;
    }
    dst[out] = '\0';
    return dst;
}
