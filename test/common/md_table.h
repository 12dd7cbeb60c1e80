// Reading the markdown tables of doc/ in tests that check a table against
// the code (feature matrices).
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace shunt::test {

/** The cells of one markdown table row ("| a | b |" → {"a", "b"}), trimmed;
 *  empty for a line without a leading bar. */
inline std::vector<std::string> md_cells(const std::string &line)
{
    std::vector<std::string> out;
    std::stringstream ss(line);
    std::string c;
    std::getline(ss, c, '|'); // before the first bar
    while (std::getline(ss, c, '|')) {
        auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
        out.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    return out;
}

} // namespace shunt::test
