/*
 * config_table.c - the table of every INCMOE_* setting and its lookup.  Below
 * logging (log.c reads INCMOE_LOG_LEVEL here) and so logs nothing itself;
 * config.c parses the numbers and logs a bad one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* Numbers: kind, then the allowed range (bounds that keep every product the code forms in range).
 */
#define TEXT INC_CONFIG_TEXT, 0, 0
const inc_config_entry_t inc_config_table[] = {
    {"INCMOE_LOG_LEVEL", "warn", "log level: error, warn, info, debug, trace", TEXT},
    {"INCMOE_SWITCH", NULL, "host:port of incmoe-switchd (NCCL plugin, tools)", TEXT},
    {"INCMOE_ALGO", "inc",
     "torch backend: the algorithm of its communicators: inc (in-network), ring, or a2a (the "
     "ring's collectives, every rank connected to every other; all_to_all_single on ring and "
     "a2a)",
     TEXT},
    {"INCMOE_AUTH_KEY", NULL, "shared key proven to the switch, never sent (1..64 bytes)", TEXT},
    {"INCMOE_AUTH_KEY_FILE", NULL, "file holding the shared secret (first line, 1..64 bytes)",
     TEXT},
    {"INCMOE_TIMEOUT_MS", "10000",
     "bound on joining, and the liveness timeout this rank asks of the switch (the job uses the "
     "largest asked, never below the switch's --timeout-ms)",
     INC_CONFIG_INT, 1, INC_TIMEOUT_MS_MAX},
    {"INCMOE_CHUNK_SIZE", "131072",
     "switch: bytes of one data chunk (a multiple of 8); the switch stores and forwards whole "
     "chunks, so each collective pays about two chunk times of one-way traffic",
     INC_CONFIG_SIZE, 64, 1ll << 30},
    {"INCMOE_CREDITS", "64", "switch: chunks a rank may have in flight per stream", INC_CONFIG_INT,
     1, 4096},
    {"INCMOE_RNDV_THRESH", "0",
     "payloads from this size go rendezvous, landing zero-copy (good on RDMA); 0 = always eager "
     "(best on TCP, where rendezvous requests queue behind bulk data in the same socket)",
     INC_CONFIG_SIZE, 0, 1ll << 40},
    {"INCMOE_JOB_ID", NULL, "NCCL plugin: job id override (default: derived from commId)", TEXT},
    {"INCMOE_SWITCHD", NULL, "tools: incmoe-switchd to start for embedded runs", TEXT},
    {"INCMOE_NCCL_ADDR", NULL,
     "NCCL plugin: IP its point-to-point net listens on (default: the route to INCMOE_SWITCH)",
     TEXT},
    {"INCMOE_MOE_BANDS", NULL, "MoE layer: bands per layer (default: chosen for the token count)",
     INC_CONFIG_INT, 1, 1 << 20},
    {"INCMOE_MOE_WORKERS", NULL, "MoE layer: gather,compute,reduce worker threads, e.g. 1,2,1",
     TEXT},
    {"INCMOE_MOE_TAIL", NULL, "MoE layer: last bands the gather workers help reduce (0 = off)",
     INC_CONFIG_INT, 0, 1 << 20},
    {"INCMOE_MOE_ROUTING", "full",
     "MoE layer: routing of a forward that does not name one: full (AllGather and "
     "ReduceScatter), masked (dispatch and combine) or auto",
     TEXT},
    {"INCMOE_MOE_DEPTH", "4",
     "MoE layer: collectives each poster keeps in flight (AllGathers, each reduce worker's "
     "ReduceScatters)",
     INC_CONFIG_INT, 1, 8},
    {"INCMOE_MOE_CALIBRATE", "1",
     "MoE layer: measure the link and band costs below at create where unset (0 = defaults)",
     INC_CONFIG_INT, 0, 1},
    {"INCMOE_MOE_LINK_MBPS", "1000",
     "MoE layer config model: per-rank link bandwidth, Mbit/s (unset: measured; slowest rank's)",
     INC_CONFIG_INT, 1, 1 << 30},
    {"INCMOE_MOE_GFLOPS", "20",
     "MoE layer config model: GEMM rate of one compute worker (unset: timed at create by the "
     "CPU backend; slowest rank's)",
     INC_CONFIG_INT, 1, 1 << 30},
    {"INCMOE_MOE_BAND_US", "4000",
     "MoE layer config model: fixed cost of one band, microseconds (unset: measured; slowest "
     "rank's)",
     INC_CONFIG_INT, 0, 1 << 30},
    {"INCMOE_MOE_SYNC_US", "2000",
     "MoE layer config model: one all-rank synchronisation, which a masked band's dispatch "
     "adds to the band's cost, microseconds (unset: measured; slowest rank's)",
     INC_CONFIG_INT, 0, 1 << 30},
};
#undef TEXT
const size_t inc_config_table_size = sizeof(inc_config_table) / sizeof(inc_config_table[0]);

const inc_config_entry_t *inc_config_entry(const char *name)
{
    for (size_t i = 0; i < inc_config_table_size; i++)
        if (strcmp(inc_config_table[i].name, name) == 0)
            return &inc_config_table[i];
    fprintf(stderr, "incmoe: internal error: setting %s is not in the table\n", name);
    abort();
}

const char *inc_config_get_str(const char *name)
{
    const inc_config_entry_t *e = inc_config_entry(name);
    const char *v = getenv(name);
    return (v != NULL && *v != '\0') ? v : e->default_val;
}
