/* config.c - the table of every INCMOE_* setting. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const inc_config_entry_t inc_config_table[] = {
    {"INCMOE_LOG_LEVEL", "warn", "log level: error, warn, info, debug, trace"},
    {"INCMOE_SWITCH", NULL, "host:port of incmoe-switchd (NCCL plugin, tools)"},
    {"INCMOE_AUTH_KEY", NULL, "shared secret presented to the switch"},
    {"INCMOE_AUTH_KEY_FILE", NULL, "file holding the shared secret (first line)"},
    {"INCMOE_TIMEOUT_MS", "10000", "bound on noticing a dead rank or switch, and on joining"},
    {"INCMOE_CHUNK_SIZE", "262144", "switch: bytes of one data chunk"},
    {"INCMOE_CREDITS", "32", "switch: chunks a rank may have in flight per stream"},
    {"INCMOE_RNDV_THRESH", "0",
     "payloads from this size go rendezvous, landing zero-copy (good on RDMA); 0 = always eager "
     "(best on TCP, where rendezvous requests queue behind bulk data in the same socket)"},
    {"INCMOE_JOB_ID", NULL, "NCCL plugin: job id override (default: derived from commId)"},
    {"INCMOE_SWITCHD", NULL, "tools: incmoe-switchd to start for embedded runs"},
    {"INCMOE_NCCL_ADDR", NULL,
     "NCCL plugin: IP its point-to-point net listens on (default: the route to INCMOE_SWITCH)"},
    {"INCMOE_CUDART", NULL,
     "NCCL plugin: CUDA runtime library to load for GPU buffers (default libcudart.so)"},
    {"INCMOE_MOE_BANDS", NULL, "MoE layer: bands per layer (default: chosen for the token count)"},
    {"INCMOE_MOE_WORKERS", NULL, "MoE layer: gather,compute,reduce worker threads, e.g. 1,2,1"},
    {"INCMOE_MOE_TAIL", NULL, "MoE layer: last bands the gather workers help reduce (0 = off)"},
    {"INCMOE_MOE_LINK_MBPS", "1000", "MoE layer config model: per-rank link bandwidth, Mbit/s"},
    {"INCMOE_MOE_GFLOPS", "20", "MoE layer config model: GEMM rate of one compute worker"},
    {"INCMOE_MOE_BAND_US", "4000", "MoE layer config model: fixed cost of one band, microseconds"},
};
const size_t inc_config_table_size = sizeof(inc_config_table) / sizeof(inc_config_table[0]);

const char *inc_config_get_str(const char *name)
{
    for (size_t i = 0; i < inc_config_table_size; i++) {
        if (strcmp(inc_config_table[i].name, name) == 0) {
            const char *v = getenv(name);
            return (v != NULL && *v != '\0') ? v : inc_config_table[i].default_val;
        }
    }
    fprintf(stderr, "incmoe: internal error: setting %s is not in the table\n", name);
    abort();
}

long long inc_config_parse_size(const char *text)
{
    if (text == NULL)
        return -1;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (end == text || v < 0)
        return -1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        v <<= 10;
        end++;
        break;
    case 'M':
        v <<= 20;
        end++;
        break;
    case 'G':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    return *end == '\0' ? v : -1;
}

long long inc_config_get_int(const char *name)
{
    const char *v = inc_config_get_str(name);
    long long n = inc_config_parse_size(v);
    if (n < 0) {
        fprintf(stderr, "incmoe: %s=%s is not a number; using its default\n", name, v);
        for (size_t i = 0; i < inc_config_table_size; i++)
            if (strcmp(inc_config_table[i].name, name) == 0)
                return inc_config_parse_size(inc_config_table[i].default_val);
    }
    return n;
}
