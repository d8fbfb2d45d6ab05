/*
 * text.h - text from elsewhere (a peer's ERROR reason, an address in a
 * message, a user's value) made safe to log or hand back: one line of
 * printable ASCII, bounded, so it cannot forge log lines or drive a terminal.
 */
#ifndef INC_TEXT_H
#define INC_TEXT_H

#include <stddef.h>

/*
 * Copies at most INCMOE_WIRE_MAX_TEXT bytes of src (up to its first NUL) into
 * dst: printable ASCII as is, every other byte (control bytes, newlines, ESC,
 * non-ASCII) as \xNN.  Truncated, never mid-escape, to fit dst_len (which
 * must be > 0); always NUL-terminated.  Returns dst.  Sanitising twice (the
 * switch, then the client) changes nothing more.
 */
char *inc_text_sanitize(char *dst, size_t dst_len, const void *src, size_t src_len);

#endif
