/*
 * dc_form.h - dispatch and combine, the third form of a collective
 * (coll_form.h; base/wire.h, "Dispatch and combine" and "Switch trees").
 */
#ifndef INCMOE_SWITCH_DC_FORM_H
#define INCMOE_SWITCH_DC_FORM_H

#include "coll_form.h"

extern const coll_form_t dc_form;

#endif
