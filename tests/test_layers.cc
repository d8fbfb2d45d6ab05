/*
 * test_layers.cc - tools/check-layers, the check that no #include crosses a
 * layer upward or sideways and that the files of one directory call each other
 * only downward (README.md, "Architecture"): both pass on this tree, and on a
 * copy of the tree each fails on every kind of crossing or cycle planted in it,
 * naming the file and line or the files of the cycle.
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
const std::string kCheck = kTop + "/tools/check-layers";

TEST(Layers, TheTreeKeepsItsLayers)
{
    EXPECT_EQ(failed_run(run_cmd({kCheck, "--includes", kTop}, 120)), "");
}

TEST(Layers, TheTreeCallsOnlyDownward)
{
    EXPECT_EQ(failed_run(run_cmd({kCheck, "--calls", kTop}, 120)), "");
}

struct Plant {
    const char *file;    /* tree-relative, in the copy */
    const char *include; /* the line added at its end */
};

/* A copy of the tree's checked directories in a fresh folder; "" when it could not be made. */
std::string copy_tree()
{
    return text_file::copy_tree(
        kTop, "layers",
        {"base", "include", "plugin", "switch", "moe", "tools", "bindings/python/incmoe"});
}

/* The check's output on the copy with text added at the end of file; the file is put back. */
perf_test::RunResult run_planted(const std::string &copy, const std::string &mode,
                                 const std::string &file, const std::string &text)
{
    const std::string path = copy + "/" + file;
    const std::string before = text_file::read(path);
    EXPECT_FALSE(before.empty()) << file << " is not in the tree any more: plant elsewhere";
    text_file::write(path, before + text + "\n");
    auto r = run_cmd({kCheck, mode, copy}, 120);
    text_file::write(path, before);
    return r;
}

TEST(Layers, EachCrossingPlantedInACopyFails)
{
    const std::string copy = copy_tree();
    ASSERT_NE(copy, "");
    ASSERT_EQ(run_cmd({kCheck, "--includes", copy}, 120).status, 0)
        << "the unchanged copy must pass";

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
        const std::string before = text_file::read(copy + "/" + p.file);
        auto r = run_planted(copy, "--includes", p.file, p.include);
        EXPECT_EQ(r.status, 1) << p.file << ": " << p.include << " was not caught\n" << r.out;
        std::string where = std::string(p.file) + ":" + std::to_string(count_lines(before) + 1);
        EXPECT_NE(r.out.find(where), std::string::npos) << where << " not named in:\n" << r.out;
    }
    EXPECT_EQ(system(("rm -rf '" + copy + "'").c_str()), 0);
}

struct Cycle {
    const char *file;  /* tree-relative, in the copy */
    const char *text;  /* added at its end */
    const char *named; /* the cycle's line must hold this */
};

/* Each planted call or import closes a cycle with a call the tree already makes the other way;
   the check must name it, and only it beyond what the unchanged copy reports. */
TEST(Layers, EachCyclePlantedInACopyFails)
{
    const std::string copy = copy_tree();
    ASSERT_NE(copy, "");
    auto base = run_cmd({kCheck, "--calls", copy}, 120);
    ASSERT_FALSE(base.timed_out);

    const std::vector<Cycle> cycles = {
        /* config.c logs through text.c's sanitizer: text.c parsing a number closes it */
        {"base/text.c",
         "int inc_planted(long long *v) { return inc_parse_int(\"1\", 0, 1, 0, v, 0, 0); }",
         "base/: config.c text.c in a cycle"},
        /* a call through a macro of a header: log.c under a function of config_table.c */
        {"base/config_table.c",
         "#define PLANTED_WARN(...) log_warn(\"p\", __VA_ARGS__)\n"
         "void inc_planted(void) { PLANTED_WARN(\"x\"); }",
         "base/: config_table.c log.c in a cycle"},
        /* a variable, not a function, across an extern "C" definition (CUDA) */
        {"moe/cuda/kernel.cu",
         "extern \"C\" const void *planted(void) { return "
         "&moe_cuda_backend; }",
         "moe/cuda/: backend.c kernel.cu in a cycle"},
        /* a lazy import inside a function, relative */
        {"bindings/python/incmoe/_lib.py", "def _planted():\n    from . import switch",
         "bindings/python/incmoe/: incmoe._lib incmoe.switch in a cycle"},
        /* the second of two modules one from-import names */
        {"bindings/python/incmoe/_buffers.py",
         "def _planted():\n    from . import switch, _registry",
         "bindings/python/incmoe/: incmoe._buffers incmoe._registry in a cycle"},
        /* the other package: the cost model's */
        {"tools/incmoe_model/presets.py", "def _planted():\n    from .units import parse_size",
         "tools/incmoe_model/: incmoe_model.presets incmoe_model.units in a cycle"},
        /* an absolute import in a subpackage */
        {"bindings/python/incmoe/hf/step.py", "import incmoe.hf.shard",
         "incmoe.hf.experts incmoe.hf.shard incmoe.hf.sharding incmoe.hf.step in a cycle"},
    };
    for (const Cycle &c : cycles) {
        auto r = run_planted(copy, "--calls", c.file, c.text);
        EXPECT_EQ(r.status, 1) << c.file << ": the planted cycle was not caught\n" << r.out;
        EXPECT_NE(r.out.find(c.named), std::string::npos) << "'" << c.named << "' not in:\n"
                                                          << r.out;
        EXPECT_EQ(base.out.find(c.named), std::string::npos)
            << "'" << c.named << "' was there before the plant:\n"
            << base.out;
    }
    /* a call that goes downward is not a cycle: text.c is below config.c already */
    auto down =
        run_planted(copy, "--calls", "base/config.c",
                    "size_t inc_planted(const char *s) { return inc_text_sanitize(0, 0, s, 0) "
                    "!= 0; }");
    EXPECT_EQ(down.out, base.out) << "a downward call was reported";
    EXPECT_EQ(system(("rm -rf '" + copy + "'").c_str()), 0);
}

} // namespace
