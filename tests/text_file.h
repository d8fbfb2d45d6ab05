/* text_file.h - a file's whole text in and out, for the suites that check the tree's sources
   by planting text in a copy of them (test_layers, test_length). */
#ifndef INCMOE_TESTS_TEXT_FILE_H
#define INCMOE_TESTS_TEXT_FILE_H

#include <fstream>
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

} // namespace text_file

#endif
