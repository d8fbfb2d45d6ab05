/*
 * test_length.cc - tools/check-length, the check that no function of base/,
 * plugin/, switch/, moe/ and tools/ (C, CUDA, and the bash and Python scripts
 * of tools/) is longer than 80 lines: it passes on this tree, and on a copy of
 * the tree it names each too-long function planted in it, of each kind, and
 * none of exactly 80 lines.
 */
#include <stdlib.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"
#include "text_file.h"

using perf_test::failed_run;
using perf_test::run_cmd;
using text_file::count_lines;

namespace
{

const std::string kTop = TOP_SRCDIR;
const std::string kCheck = kTop + "/tools/check-length";

TEST(Length, TheTreeKeepsItsFunctionsShort)
{
    EXPECT_EQ(failed_run(run_cmd({kCheck, kTop}, 120)), "");
}

/* n lines of body, each indented by indent and built from line. */
std::string body(int n, const std::string &indent, const std::string &line)
{
    std::string s;
    for (int i = 0; i < n; i++)
        s += indent + line + "\n";
    return s;
}

/* A function of `lines` lines in total, in the kind's own form. */
std::string planted(const std::string &kind, const std::string &name, int lines)
{
    if (kind == "c") /* signature, {, body, } */
        return "int " + name + "(int x)\n{\n" + body(lines - 4, "    ", "x += 1;") +
               "    return x;\n}\n";
    if (kind == "bash") /* name() {, body, } */
        return name + "() {\n" + body(lines - 2, "    ", "echo x") + "}\n";
    if (kind == "method") /* a method: def, body */
        return "\n\nclass Planted:\n    def " + name + "(self):\n" +
               body(lines - 2, "        ", "x = 1") + "        return x\n";
    return "\n\ndef " + name + "():\n" + body(lines - 2, "    ", "x = 1") + "    return x\n";
}

struct Plant {
    const char *file; /* tree-relative, in the copy */
    const char *kind; /* c, bash, python, method */
};

/* A copy of the checked directories in a fresh folder; "" when it could not be made. */
std::string copy_tree()
{
    return text_file::copy_tree(kTop, "length", {"base", "plugin", "switch", "moe", "tools"});
}

TEST(Length, EachLongFunctionPlantedInACopyIsNamed)
{
    const std::string copy = copy_tree();
    ASSERT_NE(copy, "");
    auto base = run_cmd({kCheck, copy}, 120);
    ASSERT_FALSE(base.timed_out);

    const std::vector<Plant> plants = {
        {"base/text.c", "c"},
        {"moe/cuda/prims.cuh", "c"},      /* a CUDA header */
        {"plugin/nccl/net_reg.c", "c"},   /* a subfolder */
        {"tools/quickstart", "bash"},     /* told by its #! line */
        {"tools/check-layers", "python"}, /* a Python script without .py */
        {"tools/incmoe_model/units.py", "method"},
    };
    for (const Plant &p : plants) {
        const std::string path = copy + "/" + p.file;
        const std::string before = text_file::read(path);
        ASSERT_FALSE(before.empty()) << p.file << " is not in the tree any more: plant elsewhere";
        const int at = count_lines(before) + 1 + (std::string(p.kind) == "method" ? 3 : 0) +
                       (std::string(p.kind) == "python" ? 2 : 0);
        for (int lines : {80, 81}) {
            text_file::write(path, before + planted(p.kind, "planted_fn", lines));
            auto r = run_cmd({kCheck, copy}, 120);
            text_file::write(path, before);
            const std::string named = std::string(p.file) + ":" + std::to_string(at) +
                                      ": planted_fn is " + std::to_string(lines) + " lines";
            if (lines == 80) {
                EXPECT_EQ(r.out, base.out) << p.file << ": 80 lines were reported\n" << r.out;
                continue;
            }
            EXPECT_EQ(r.status, 1) << p.file << ": 81 lines were not caught\n" << r.out;
            EXPECT_NE(r.out.find(named), std::string::npos) << "'" << named << "' not in:\n"
                                                            << r.out;
        }
    }
    EXPECT_EQ(system(("rm -rf '" + copy + "'").c_str()), 0);
}

TEST(Length, BadArgumentsAreRefused)
{
    auto r = run_cmd({kCheck, "--max", "0", kTop}, 60);
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("usage"), std::string::npos) << r.err;
    r = run_cmd({kCheck, "/nonexistent-tree"}, 60);
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("not the incmoe source tree"), std::string::npos) << r.err;
}

} // namespace
