/*
 * small.h - the small form of a collective (coll_form.h; base/wire.h, "Small
 * collectives"): one SMALL in from every port, one SMALL_FWD out to each.
 */
#ifndef INCMOE_SWITCH_SMALL_H
#define INCMOE_SWITCH_SMALL_H

#include "coll_form.h"

extern const coll_form_t small_form;

#endif
