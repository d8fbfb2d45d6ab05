/*
 * settings.h - what incmoe-switchd is told on its command line and what it
 * counts while it runs.  switchd.c fills the settings once; every room of
 * the switch reads them and adds to the counters from the event loop.
 */
#ifndef INCMOE_SWITCH_SETTINGS_H
#define INCMOE_SWITCH_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "base/wire.h"

typedef struct {
    uint64_t chunk_size;
    uint32_t credits;
    /* --link-window: below a parent, the chunks of each stream the parent may send this switch
       ahead of its CREDITs (tree.c); what this switch holds from its parent. */
    uint32_t link_window;
    size_t max_memory;
    int timeout_ms;
    /* A posted collective's laggards, or one every rank posted that stops moving here, fail
       the job after this; 0: never. */
    int progress_timeout_ms;
    char secret[INCMOE_MAX_SECRET];
    size_t secret_len;
    int have_secret;
    size_t rndv_thresh;
    size_t egress_limit; /* payload bytes in flight per destination */
    int nthreads;        /* --threads: 1 reduces in the event loop itself */
    /* --parent HOST:PORT: this switch is a child in a tree (tree.c); "" for a root. */
    char parent[256];
    char parent_secret[INCMOE_MAX_SECRET]; /* the key for that link */
    size_t parent_secret_len;              /* 0: keyless */
} switch_settings_t;

/* Counters printed at exit. */
typedef struct {
    uint64_t jobs_started, jobs_failed, jobs_refused;
    uint64_t bad_messages; /* malformed, out of range, mismatched, unauthenticated */
    uint64_t peers_lost;
    uint64_t bytes_in, bytes_out;
    size_t mem_peak;
} switch_stats_t;

#endif
