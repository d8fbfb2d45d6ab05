/*
 * ext.h - reading incmoe_moe_params_ext_t: which of its fields are set, and
 * each one's checks.  A new parameter is one bit, one field of the public
 * struct and one reader here.
 */
#ifndef INCMOE_MOE_EXT_H
#define INCMOE_MOE_EXT_H

#include "layer.h"

/* This rank's verdict on ext (NULL: no field set); fills L->has_path, L->path and
   L->decode_tokens. */
incmoe_status_t ext_read(incmoe_moe_t *L, const incmoe_moe_params_ext_t *ext);

#endif
