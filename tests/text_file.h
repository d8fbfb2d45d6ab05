/* text_file.h - a file's whole text in and out, and a copy of the tree, for the suites that check
   the tree's sources by planting text in a copy of them (test_layers, test_length). */
#ifndef INCMOE_TESTS_TEXT_FILE_H
#define INCMOE_TESTS_TEXT_FILE_H

#include <stdlib.h>

#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

namespace text_file
{

/* The file's text; "" when it cannot be read. */
inline std::string read(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/* Replaces the file's text with text. */
inline void write(const std::string &path, const std::string &text)
{
    std::ofstream out(path, std::ios::trunc);
    out << text;
}

/* The lines of text: its newlines. */
inline int count_lines(const std::string &text)
{
    int n = 0;
    for (char c : text)
        n += c == '\n';
    return n;
}

/* A copy of dirs of the tree top (tree-relative, each at its own path in the copy) in a fresh
   folder /tmp/incmoe-<name>-XXXXXX; "" when it could not be made. */
inline std::string copy_tree(const std::string &top, const std::string &name,
                             std::initializer_list<std::string> dirs)
{
    std::string dir = "/tmp/incmoe-" + name + "-XXXXXX";
    if (mkdtemp(&dir[0]) == nullptr)
        return "";
    std::string cmd = "true";
    for (const std::string &d : dirs) {
        const size_t slash = d.rfind('/');
        const std::string into = dir + (slash == std::string::npos ? "" : "/" + d.substr(0, slash));
        cmd += " && mkdir -p '" + into + "' && cp -r '" + top + "/" + d + "' '" + into + "/'";
    }
    return system(cmd.c_str()) == 0 ? dir : "";
}

} // namespace text_file

#endif
