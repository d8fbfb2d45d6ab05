/*
 * algo_param.h - the test name of a suite instantiated over the collective
 * algorithms (INSTANTIATE_TEST_SUITE_P's last argument): inc, ring or a2a.
 */
#ifndef INCMOE_TESTS_ALGO_PARAM_H
#define INCMOE_TESTS_ALGO_PARAM_H

#include <string>

#include <gtest/gtest.h>

#include "incmoe/incmoe.h"

inline std::string algo_param_name(const ::testing::TestParamInfo<incmoe_algo_t> &info)
{
    return info.param == INCMOE_ALGO_INC ? "inc" : info.param == INCMOE_ALGO_RING ? "ring" : "a2a";
}

#endif
