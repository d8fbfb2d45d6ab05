/*
 * keyfile.h - the shared secret's file, read the same way by the switch
 * (--auth-key-file), the client (INCMOE_AUTH_KEY_FILE) and the NCCL plugin.
 */
#ifndef INC_KEYFILE_H
#define INC_KEYFILE_H

#include <stddef.h>

#include "incmoe/incmoe.h"

/*
 * The secret is the file's first line (without its "\n" or "\r\n"), 1 to
 * INCMOE_MAX_SECRET bytes, no NUL byte.  Writes it to secret (room for
 * INCMOE_MAX_SECRET bytes, not NUL-terminated) and its length to *len.
 * INCMOE_ERR_AUTH when the file cannot be read, INCMOE_ERR_INVALID_ARG when
 * its key is empty or too long; why then names the file and what is wrong.
 */
incmoe_status_t inc_keyfile_read(const char *path, char *secret, size_t *len, char *why,
                                 size_t why_len);

#endif
