// The shm feature matrix in doc/guides/fabric.md matches what getinfo offers.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fabric/api.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {

std::vector<std::string> cells(const std::string &line)
{
    std::vector<std::string> out;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, '|')) {
        auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
        out.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    return out;
}

} // namespace

TEST(ShmMatrix, FeatureMatrixMatchesGetinfo)
{
    const std::map<std::string, std::uint64_t> bits = {
        {"FI_MSG", FI_MSG},           {"FI_TAGGED", FI_TAGGED},           {"FI_RMA", FI_RMA},
        {"FI_ATOMIC", FI_ATOMIC},     {"FI_MULTI_RECV", FI_MULTI_RECV},   {"FI_DIRECTED_RECV", FI_DIRECTED_RECV},
        {"FI_SOURCE", FI_SOURCE},     {"FI_RMA_EVENT", FI_RMA_EVENT},     {"FI_HMEM", FI_HMEM},
        {"FI_MULTICAST", FI_MULTICAST}, {"FI_NAMED_RX_CTX", FI_NAMED_RX_CTX}, {"FI_COLLECTIVE", FI_COLLECTIVE},
    };
    std::ifstream doc(SHUNT_FABRIC_GUIDE);
    ASSERT_TRUE(doc.good()) << SHUNT_FABRIC_GUIDE;
    std::string line;
    bool in = false;
    int rows = 0;
    std::map<ep_type, std::uint64_t> offered;
    info *all = nullptr; // no hints: each provider's full offer
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, nullptr, &all), 0);
    for (info *i = all; i; i = i->next)
        if (std::string(i->fabric_attr->prov_name) == "shm")
            offered[i->ep_attr->type] |= i->caps;
    freeinfo(all);
    ASSERT_EQ(offered.size(), 3u) << "shm offers RDM, MSG and DGRAM";
    while (std::getline(doc, line)) {
        if (line.rfind("### shm feature matrix", 0) == 0)
            in = true;
        else if (in && line.rfind("#", 0) == 0)
            break;
        if (!in || line.rfind("| FI_", 0) != 0)
            continue;
        auto c = cells(line);
        ASSERT_EQ(c.size(), 5u) << line; // "", name, RDM, MSG, DGRAM
        auto it = bits.find(c[1]);
        ASSERT_NE(it, bits.end()) << "unknown capability in the matrix: " << c[1];
        const ep_type types[] = {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM};
        for (int t = 0; t < 3; t++) {
            bool has = offered[types[t]] & it->second;
            EXPECT_EQ(c[std::size_t(2 + t)], has ? "yes" : "no") << c[1] << " for endpoint type " << types[t];
        }
        rows++;
    }
    EXPECT_EQ(rows, int(bits.size())) << "every capability of the matrix was checked";
}
