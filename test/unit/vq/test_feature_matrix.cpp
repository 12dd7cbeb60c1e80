// The operation/QP-type table of doc/guides/vq.md matches the code: the spec
// columns match ops_allowed(), the shm column matches what the driver reports.
#include <fstream>
#include <map>
#include <string>

#include "md_table.h"
#include "vq_op_names.h"
#include "vq_fixture.h"

namespace shunt::test {
namespace {

TEST(FeatureMatrix, GuideTableMatchesTheCode)
{
    std::ifstream in(SHUNT_SOURCE_ROOT "/doc/guides/vq.md");
    ASSERT_TRUE(in) << "cannot read doc/guides/vq.md";
    const auto &ops = vq_ops_by_name();
    const vq::qp_type spec_cols[] = {vq::qp_type::rc, vq::qp_type::uc, vq::qp_type::ud, vq::qp_type::raw_packet,
                                     vq::qp_type::xrc_send};
    vq_env e;
    vq::device_attr da;
    ASSERT_EQ(vq::query_device(e.ctx, &da), 0);
    std::string line;
    int rows = 0;
    while (std::getline(in, line)) {
        auto c = md_cells(line);
        if (c.size() < 8)
            continue;
        const std::string &name = c[0];
        if (!ops.count(name))
            continue;
        std::uint64_t op = ops.at(name);
        rows++;
        SCOPED_TRACE(name);
        for (int k = 0; k < 5; k++)
            EXPECT_EQ(c[2 + k] == "✓", (vq::ops_allowed(spec_cols[k]) & op) != 0) << "spec column " << k;
        std::string shm = c[7];
        auto has = [&](const char *t) { return (" " + shm + " ").find(std::string(" ") + t + " ") != std::string::npos; };
        EXPECT_EQ(has("RC"), (da.ops[static_cast<unsigned>(vq::qp_type::rc)] & op) != 0);
        EXPECT_EQ(has("UC"), (da.ops[static_cast<unsigned>(vq::qp_type::uc)] & op) != 0);
        EXPECT_EQ(has("UD"), (da.ops[static_cast<unsigned>(vq::qp_type::ud)] & op) != 0);
    }
    EXPECT_EQ(rows, 12) << "every operation has a row";
}

} // namespace
} // namespace shunt::test
