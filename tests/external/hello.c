/*
 * hello.c - a program built outside the source tree against an installed
 * incmoe, the way a user builds one:
 *
 *   cc hello.c $(pkg-config --cflags --libs incmoe incmoe-moe)
 *
 * It includes every installed header by its installed name, links both
 * libraries and prints the version the headers and the library report
 * (tools/quickstart install-check builds and runs it).
 */
#include <stdio.h>

#include <incmoe/incmoe.h>
#include <incmoe/incmoe_fifo.h>
#include <incmoe/incmoe_moe.h>

int main(void)
{
    unsigned major, minor, patch;
    incmoe_get_version(&major, &minor, &patch);
    printf("incmoe headers %d.%d.%d, library %u.%u.%u\n", INCMOE_VERSION_MAJOR,
           INCMOE_VERSION_MINOR, INCMOE_VERSION_PATCH, major, minor, patch);

    /* A call into libincmoe_moe, so the program needs both libraries. */
    incmoe_moe_params_t params;
    incmoe_moe_params_init(&params);
    printf("incmoe_strerror(INCMOE_OK): %s\n", incmoe_strerror(INCMOE_OK));
    return major == INCMOE_VERSION_MAJOR && minor == INCMOE_VERSION_MINOR &&
                   patch == INCMOE_VERSION_PATCH
               ? 0
               : 1;
}
