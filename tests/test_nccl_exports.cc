/*
 * test_nccl_exports.cc - the plugin's dynamic symbol table holds the plugin
 * structs and nothing else, NCCL's newest-first lookup finds v11, and the
 * plugin names no CUDA runtime (it never copies GPU memory itself).
 */
#include <dlfcn.h>
#include <stdio.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "nccl_loader.h"

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

/*
 * GPU bytes are moved by NCCL (into its host buffers) or by UCX, never by a
 * copy of ours on NCCL's proxy thread: the library neither links nor names a
 * CUDA runtime or any of its copy calls.
 */
TEST(NcclExports, NamesNoCudaRuntime)
{
    std::ifstream f(kPluginPath, std::ios::binary);
    ASSERT_TRUE(f.good()) << kPluginPath;
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 4096u);
    for (const char *name : {"libcudart", "libcuda.so", "cudaMemcpy", "cuMemcpy", "cudaHostAlloc"})
        EXPECT_EQ(bytes.find(name), std::string::npos) << kPluginPath << " names " << name;
}
