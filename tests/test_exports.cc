/*
 * test_exports.cc - each installed library's dynamic symbol table holds
 * exactly the functions its public headers declare (libincmoe: incmoe.h and
 * incmoe_fifo.h, libincmoe_moe: incmoe_moe.h, all in include/incmoe/, where
 * every header belongs to one library), so an internal name cannot leak out and a declared
 * function cannot go missing.  The headers are parsed, so the test follows
 * the API as it grows.  Also: the library reports the headers' version.
 */
#include <dirent.h>
#include <stdio.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

extern "C" {
#include "incmoe/incmoe.h"
}

static const std::string kLibIncmoe = TOP_BUILDDIR "/plugin/.libs/libincmoe.so";
static const std::string kLibMoe = TOP_BUILDDIR "/moe/.libs/libincmoe_moe.so";

/* Names `nm -D --defined-only` lists for a shared library. */
static std::set<std::string> exported(const std::string &lib)
{
    std::string cmd = "nm -D --defined-only " + lib;
    std::set<std::string> syms;
    FILE *p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
        ADD_FAILURE() << "cannot run " << cmd;
        return syms;
    }
    char line[512];
    while (fgets(line, sizeof(line), p) != nullptr) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) == 3)
            syms.insert(name);
    }
    EXPECT_EQ(pclose(p), 0) << cmd;
    return syms;
}

/* The text of a header without comments and preprocessor lines. */
static std::string declarations_text(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string src = ss.str();
    std::string out;
    bool line_start = true;
    for (size_t i = 0; i < src.size(); i++) {
        if (src.compare(i, 2, "/*") == 0) {
            size_t end = src.find("*/", i + 2);
            i = end == std::string::npos ? src.size() : end + 1;
            out += ' ';
        } else if (src.compare(i, 2, "//") == 0 || (line_start && src[i] == '#')) {
            /* To the end of the line, following backslash continuations. */
            while (i < src.size() && src[i] != '\n')
                i += src[i] == '\\' ? 2 : 1;
            out += '\n';
            line_start = true;
        } else {
            out += src[i];
            if (src[i] == '\n')
                line_start = true;
            else if (src[i] != ' ' && src[i] != '\t')
                line_start = false;
        }
    }
    /* An extern "C" block opens no scope for declarations: mark it with \1. */
    return std::regex_replace(out, std::regex(R"(extern\s+"C"\s*\{)"), "\1");
}

/*
 * Functions a header declares: top-level declarations (outside any braces, so
 * not a call inside an inline body nor a struct member), neither static nor
 * typedef, whose first "(" follows an incmoe_ name, ending in ";" -- a
 * function defined in the header (an inline helper, whatever macro spells its
 * "static inline") is not the library's to export.
 */
static std::set<std::string> declared_in(const std::string &path)
{
    static const std::regex name_paren(R"(\b(incmoe_\w+)\s*\($)");
    static const std::regex not_exported(R"(\bstatic\b|\btypedef\b)");
    std::string s = declarations_text(path);
    std::set<std::string> names;
    int depth = 0;
    int extern_c = 0;    /* open extern "C" blocks */
    size_t stmt = 0;     /* where the current top-level declaration starts */
    bool seen = false;   /* its first "(" was looked at */
    std::string pending; /* the incmoe_ function it names, until ";" shows it is a declaration */
    for (size_t i = 0; i < s.size(); i++) {
        char c = s[i];
        if (c == '\1') {
            extern_c++;
            stmt = i + 1;
        } else if (c == '{') {
            if (depth == 0)
                pending.clear(); /* a body: defined in the header */
            depth++;
        } else if (c == '}' && depth == 0 && extern_c > 0) {
            extern_c--;
            stmt = i + 1;
            seen = false;
        } else if (c == '}') {
            if (--depth == 0) {
                stmt = i + 1;
                seen = false;
            }
        } else if (c == ';' && depth == 0) {
            if (!pending.empty())
                names.insert(pending);
            pending.clear();
            stmt = i + 1;
            seen = false;
        } else if (c == '(' && depth == 0 && !seen) {
            seen = true;
            std::string head = s.substr(stmt, i + 1 - stmt);
            std::smatch m;
            if (std::regex_search(head, m, name_paren) && !std::regex_search(head, not_exported))
                pending = m[1];
        }
    }
    EXPECT_TRUE(depth == 0 && extern_c == 0) << path << ": unbalanced braces";
    return names;
}

static const std::string kIncludeDir = TOP_SRCDIR "/include/incmoe";
/* The public headers of each library; incmoe_version.h declares no function. */
static const std::set<std::string> kIncmoeHeaders = {"incmoe.h", "incmoe_fifo.h"};
static const std::set<std::string> kMoeHeaders = {"incmoe_moe.h"};
static const std::set<std::string> kMacroHeaders = {"incmoe_version.h"};

/* Every function the named headers of include/incmoe/ declare. */
static std::set<std::string> declared_by(const std::set<std::string> &headers)
{
    std::set<std::string> names;
    for (const std::string &h : headers) {
        std::set<std::string> in = declared_in(kIncludeDir + "/" + h);
        names.insert(in.begin(), in.end());
    }
    return names;
}

/* The *.h files of include/incmoe/ (incmoe_version.h lives in the build tree). */
static std::set<std::string> public_headers()
{
    std::set<std::string> names = {"incmoe_version.h"};
    DIR *d = opendir(kIncludeDir.c_str());
    if (d == nullptr) {
        ADD_FAILURE() << "cannot open " << kIncludeDir;
        return names;
    }
    while (struct dirent *e = readdir(d)) {
        std::string f = e->d_name;
        if (f.size() > 2 && f.compare(f.size() - 2, 2, ".h") == 0)
            names.insert(f);
    }
    closedir(d);
    return names;
}

TEST(Exports, EveryPublicHeaderBelongsToOneLibrary)
{
    std::set<std::string> listed = kIncmoeHeaders;
    listed.insert(kMoeHeaders.begin(), kMoeHeaders.end());
    listed.insert(kMacroHeaders.begin(), kMacroHeaders.end());
    EXPECT_EQ(public_headers(), listed)
        << "a header in " << kIncludeDir << " that this test does not assign to a library";
}

TEST(Exports, ParserFindsDeclarationsOnly)
{
    std::set<std::string> names = declared_by(kIncmoeHeaders);
    EXPECT_EQ(names.count("incmoe_comm_create"), 1u);
    EXPECT_EQ(names.count("incmoe_get_version"), 1u);
    for (const std::string &n : names)
        EXPECT_EQ(n.rfind("incmoe_", 0), 0u) << n;
}

TEST(Exports, LibincmoeExportsExactlyItsHeaders)
{
    std::set<std::string> syms = exported(kLibIncmoe);
    std::set<std::string> decl = declared_by(kIncmoeHeaders);
    EXPECT_EQ(syms, decl);
}

TEST(Exports, LibincmoeMoeExportsExactlyItsHeader)
{
#ifndef HAVE_MOE_LIB
    GTEST_SKIP() << "libincmoe_moe is not built (configure found no OpenBLAS)";
#endif
    std::set<std::string> syms = exported(kLibMoe);
    std::set<std::string> decl = declared_by(kMoeHeaders);
    EXPECT_FALSE(decl.empty());
    EXPECT_EQ(syms, decl);
}

TEST(Exports, LibraryVersionIsTheHeadersVersion)
{
    unsigned major = 99, minor = 99, patch = 99;
    incmoe_get_version(&major, &minor, &patch);
    EXPECT_EQ(major, (unsigned)INCMOE_VERSION_MAJOR);
    EXPECT_EQ(minor, (unsigned)INCMOE_VERSION_MINOR);
    EXPECT_EQ(patch, (unsigned)INCMOE_VERSION_PATCH);
    incmoe_get_version(nullptr, nullptr, nullptr); /* every output is optional */
}
