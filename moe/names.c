/*
 * names.c - the names of the layer's public enums (pure; every file of the layer
 * may use them).
 */
#include "incmoe/incmoe_moe.h"

const char *incmoe_moe_mode_name(incmoe_moe_mode_t mode)
{
    switch (mode) {
    case INCMOE_MOE_BASELINE:
        return "baseline";
    case INCMOE_MOE_PIPELINED:
        return "pipelined";
    case INCMOE_MOE_AUTO:
        return "auto";
    case INCMOE_MOE_DECODE:
        return "decode";
    }
    return "unknown";
}

const char *incmoe_moe_routing_name(incmoe_moe_routing_t routing)
{
    switch (routing) {
    case INCMOE_MOE_ROUTING_FULL:
        return "full";
    case INCMOE_MOE_ROUTING_MASKED:
        return "masked";
    case INCMOE_MOE_ROUTING_AUTO:
        return "auto";
    }
    return "unknown";
}
