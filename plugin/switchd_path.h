/* switchd_path.h - where the tools find incmoe-switchd to start an embedded switch. */
#ifndef INCMOE_SWITCHD_PATH_H
#define INCMOE_SWITCHD_PATH_H

/* INCMOE_SWITCHD if set, else incmoe-switchd beside the running program, else the build tree's. */
const char *switchd_path(void);

#endif
