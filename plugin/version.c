/* version.c - the version of the library a program runs with. */
#include "incmoe/incmoe.h"

void incmoe_get_version(unsigned *major_p, unsigned *minor_p, unsigned *patch_p)
{
    if (major_p != NULL)
        *major_p = INCMOE_VERSION_MAJOR;
    if (minor_p != NULL)
        *minor_p = INCMOE_VERSION_MINOR;
    if (patch_p != NULL)
        *patch_p = INCMOE_VERSION_PATCH;
}
