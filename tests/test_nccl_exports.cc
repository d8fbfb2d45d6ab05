/*
 * test_nccl_exports.cc - the plugin's dynamic symbol table holds the plugin
 * structs and nothing else, and NCCL's newest-first lookup finds v11.
 */
#include "nccl_loader.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <stdio.h>

#include <set>
#include <string>

using nccltest::kPluginPath;

TEST(NcclExports, OnlyThePluginStructs)
{
    std::string cmd = std::string("nm -D --defined-only ") + kPluginPath;
    FILE *p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::set<std::string> syms;
    char line[512];
    while (fgets(line, sizeof(line), p) != nullptr) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) == 3)
            syms.insert(name);
    }
    ASSERT_EQ(pclose(p), 0) << cmd;
    std::set<std::string> expect = {"ncclNetPlugin_v9",      "ncclNetPlugin_v10",
                                    "ncclNetPlugin_v11",     "ncclCollNetPlugin_v9",
                                    "ncclCollNetPlugin_v10", "ncclCollNetPlugin_v11"};
    EXPECT_EQ(syms, expect);
}

TEST(NcclExports, NewestFirstLookupFindsV11AndInternalsAreHidden)
{
    nccltest::Plugin pl;
    ASSERT_EQ(pl.load_newest(), "");
    EXPECT_EQ(pl.version, 11);
    EXPECT_STREQ(((ncclNet_v11_t *)pl.net)->name, "incmoe");
    EXPECT_STREQ(((ncclCollNet_v11_t *)pl.coll)->name, "incmoe");
    EXPECT_EQ(dlsym(pl.lib, "incmoe_comm_create"), nullptr);
    EXPECT_EQ(dlsym(pl.lib, "net_init"), nullptr);
    EXPECT_EQ(dlsym(pl.lib, "ncclNetPlugin_v8"), nullptr);
}
