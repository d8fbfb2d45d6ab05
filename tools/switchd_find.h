/* switchd_find.h - where the tools find incmoe-switchd for an embedded run. */
#ifndef INCMOE_TOOLS_SWITCHD_FIND_H
#define INCMOE_TOOLS_SWITCHD_FIND_H

#include <stddef.h>

/*
 * $INCMOE_SWITCHD when set; else incmoe-switchd beside the running program
 * (installed: both in bindir); else the build tree, relative to the program:
 * <dir>/../switch and <dir>/../../switch (libtool keeps the real programs in
 * tools/.libs/).  Nothing absolute is baked in at build time.  Returns the
 * path (static storage), or NULL with what was tried written to why.
 */
const char *inc_switchd_find(char *why, size_t why_len);

#endif
