/*
 * ll_form.h - the low-latency form of dispatch and combine, a form of a
 * collective (coll_form.h; base/wire.h, "The low-latency form of dispatch
 * and combine").
 */
#ifndef INCMOE_SWITCH_LL_FORM_H
#define INCMOE_SWITCH_LL_FORM_H

#include "coll_form.h"

extern const coll_form_t ll_form;

#endif
