/*
 * test_layers.cc - tools/check-layers, the check that no #include crosses a
 * layer upward or sideways (README.md, "Architecture"): it passes on this
 * tree, and on a copy of the tree it fails on each kind of crossing planted
 * in it, naming the file and line.
 */
#include <gtest/gtest.h>

#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "perf_run.h"

using perf_test::run_cmd;

namespace
{

const std::string kTop = TOP_SRCDIR;
const std::string kCheck = kTop + "/tools/check-layers";

TEST(Layers, TheTreeKeepsItsLayers)
{
    auto r = run_cmd({kCheck, kTop}, 120);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
}

std::string read_file(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string &path, const std::string &text)
{
    std::ofstream out(path, std::ios::trunc);
    out << text;
}

int count_lines(const std::string &text)
{
    int n = 0;
    for (char c : text)
        n += c == '\n';
    return n;
}

struct Plant {
    const char *file;    /* tree-relative, in the copy */
    const char *include; /* the line added at its end */
};

TEST(Layers, EachCrossingPlantedInACopyFails)
{
    char dir[] = "/tmp/incmoe-layers-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string copy = dir;
    std::string cmd = "cp -r";
    for (const char *d : {"base", "include", "plugin", "switch", "moe", "tools"})
        cmd += " '" + kTop + "/" + d + "'";
    cmd += " '" + copy + "/'";
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
    ASSERT_EQ(run_cmd({kCheck, copy}, 120).status, 0) << "the unchanged copy must pass";

    const std::vector<Plant> plants = {
        {"base/log.c", "#include \"plugin/client.h\""},          /* upward */
        {"base/wire.h", "#include \"../moe/layer.h\""},          /* upward, relative */
        {"switch/engine.c", "#include \"../plugin/client.h\""},  /* sideways, relative */
        {"plugin/comm.c", "#include \"switch/engine.h\""},       /* sideways */
        {"plugin/send.c", "#include <incmoe/../../moe/plan.h>"}, /* through an -I path */
        {"plugin/nccl/net.c", "#include \"moe/layer.h\""},       /* sideways at the top */
        {"moe/cuda/kernel.cu", "#include \"switch/engine.h\""},  /* a CUDA file */
        {"moe/cpu/cpu.h", "#include \"../../plugin/nccl/plugin.h\""},
        {"plugin/mr.c", "#include \"tools/launch.h\""}, /* a tool from below */
    };
    for (const Plant &p : plants) {
        const std::string path = copy + "/" + p.file;
        const std::string before = read_file(path);
        ASSERT_FALSE(before.empty()) << p.file << " is not in the tree any more: plant elsewhere";
        write_file(path, before + p.include + "\n");
        auto r = run_cmd({kCheck, copy}, 120);
        write_file(path, before);
        EXPECT_EQ(r.status, 1) << p.file << ": " << p.include << " was not caught\n" << r.out;
        std::string where = std::string(p.file) + ":" + std::to_string(count_lines(before) + 1);
        EXPECT_NE(r.out.find(where), std::string::npos) << where << " not named in:\n" << r.out;
    }
    EXPECT_EQ(system(("rm -rf '" + copy + "'").c_str()), 0);
}

} // namespace
