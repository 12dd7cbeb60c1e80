// The vq provider's feature matrix in doc/guides/fabric.md matches what
// getinfo offers, and what it offers per vq device.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fabric/api.h"
#include "fab_common.h"
#include "vq/vq.h"

#include <cctype>
#include <cstring>

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
        if (std::string(i->fabric_attr->prov_name) == "vq")
            offered[i->ep_attr->type] |= i->caps;
    freeinfo(all);
    ASSERT_EQ(offered.size(), 3u) << "vq offers RDM, MSG and DGRAM";
    while (std::getline(doc, line)) {
        if (line.rfind("### vq feature matrix", 0) == 0)
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

namespace {

info *shm_only(ep_type t)
{
    info *h = allocinfo();
    h->ep_attr->type = t;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    h->fabric_attr->prov_name = ::strdup("shm");
    return h;
}

} // namespace

// fi_domain(3): getinfo reports the MR modes the provider requires, not every
// mode the hints would accept (each one is work for the application).
TEST(ShmInfo, MrModeIsWhatShmRequiresNotWhatTheHintsAccept)
{
    for (ep_type t : {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM}) {
        info *h = shm_only(t);
        h->domain_attr->mr_mode =
            FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RAW;
        info *out = nullptr;
        ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0) << t;
        EXPECT_EQ(out->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY) << t;
        freeinfo(out);
        out = nullptr;
        // Without FI_MR_PROV_KEY shm cannot be an RMA target: hints asking
        // for RMA get nothing, hints asking for no capability in particular
        // get RMA as initiator only (libfabric's ofi_get_info_caps).
        h->domain_attr->mr_mode = FI_MR_VIRT_ADDR;
        if (t != FI_EP_DGRAM) {
            h->caps = FI_RMA;
            EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA) << t;
            h->caps = 0;
        }
        ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0) << t;
        EXPECT_FALSE(out->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) << t;
        EXPECT_EQ(out->domain_attr->mr_mode, 0) << t;
        freeinfo(out);
        freeinfo(h);
    }
}

// ep_attr::protocol carries libfabric's value of FI_PROTO_SHM (16 since
// libfabric 1.x: PSMX2 and MRAIL keep their slots), and hints naming another
// protocol do not select shm.
TEST(ShmInfo, ProtocolIsLibfabricsShmValue)
{
    static_assert(FI_PROTO_PSMX2 == 15 && FI_PROTO_SHM == 16 && FI_PROTO_MRAIL == 17 && FI_PROTO_XNET == 25,
                  "libfabric's protocol values (rdma/fabric.h) are stable");
    info *h = shm_only(FI_EP_RDM);
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    EXPECT_EQ(out->ep_attr->protocol, 16u);
    freeinfo(out);
    out = nullptr;
    h->ep_attr->protocol = FI_PROTO_MRAIL;
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA);
    freeinfo(h);
}

// shm addresses are 64 binary bytes, so the address format is provider
// specific (FI_FORMAT_UNSPEC) unless the hints ask for FI_ADDR_STR (their
// text, test_fab_addr.cpp). av_straddr prints them, av_insertsvc takes the
// printed form back, and av_lookup returns the bytes that were inserted.
TEST(ShmInfo, AddressFormatIsProviderSpecificAndStraddrRoundTrips)
{
    info *h = shm_only(FI_EP_RDM);
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    EXPECT_EQ(out->addr_format, FI_FORMAT_UNSPEC);
    freeinfo(out);
    out = nullptr;
    h->addr_format = FI_ADDR_STR;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    EXPECT_EQ(out->addr_format, FI_ADDR_STR) << "the text form when asked for";
    freeinfo(out);
    out = nullptr;
    h->addr_format = FI_SOCKADDR_IN;
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA);
    freeinfo(h);

    shunt::test::fab::node n;
    ASSERT_EQ(n.open(FI_EP_RDM, false), 0);
    EXPECT_EQ(n.fi->addr_format, FI_FORMAT_UNSPEC);
    std::uint8_t raw[64];
    std::size_t len = sizeof raw;
    ASSERT_EQ(getname(&n.ep->fid, raw, &len), 0);
    EXPECT_EQ(len, 64u);
    fi_addr_t a = FI_ADDR_NOTAVAIL, b = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, raw, 1, &a, 0, nullptr), 1);
    char text[128];
    std::size_t tlen = sizeof text;
    ASSERT_NE(av_straddr(n.av, raw, text, &tlen), nullptr);
    ASSERT_LE(tlen, sizeof text);
    EXPECT_EQ(std::strlen(text) + 1, tlen);
    EXPECT_EQ(std::string(text).rfind("fi_shm://", 0), 0u) << text;
    for (const char *c = text; *c; c++)
        EXPECT_TRUE(std::isprint(static_cast<unsigned char>(*c))) << text;
    ASSERT_EQ(av_insertsvc(n.av, text, nullptr, &b, 0, nullptr), 1) << text;
    std::uint8_t back[64] = {};
    std::size_t blen = sizeof back;
    ASSERT_EQ(av_lookup(n.av, b, back, &blen), 0);
    EXPECT_EQ(blen, 64u);
    EXPECT_EQ(std::memcmp(back, raw, 64), 0) << "the printed address names the same endpoint";
    n.close();
}

// The vq provider offers every vq device: the domain name is the device, the
// fabric name its driver, and every limit derives from the device's
// attributes (none restates a driver constant).
TEST(VqDevices, EveryDeviceIsADomainWithLimitsFromItsAttributes)
{
    std::vector<vq::device *> devs;
    ASSERT_GT(vq::get_device_list(devs), 0);
    for (vq::device *dev : devs) {
        vq::context *ctx = nullptr;
        vq::device_attr a;
        ASSERT_EQ(vq::open_device(dev, &ctx), 0) << dev->name;
        ASSERT_EQ(vq::query_device(ctx, &a), 0);
        ASSERT_EQ(vq::close_device(ctx), 0);
        for (ep_type t : {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM}) {
            info *h = shm_only(t);
            std::free(h->fabric_attr->prov_name);
            h->fabric_attr->prov_name = ::strdup("vq");
            h->domain_attr->name = ::strdup(dev->name);
            info *out = nullptr;
            ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0) << dev->name << " " << t;
            EXPECT_EQ(out->next, nullptr) << "one answer per device and endpoint type";
            EXPECT_STREQ(out->domain_attr->name, dev->name);
            EXPECT_STREQ(out->fabric_attr->name, vq::device_driver_name(dev));
            EXPECT_EQ(out->tx_attr->size, std::min<std::size_t>(1024, a.max_qp_wr));
            EXPECT_EQ(out->domain_attr->mr_cnt, a.max_mr);
            const std::size_t dgram_hdr = 8 + 64 + 16; // op/flags, sender address, tag, data
            if (t == FI_EP_DGRAM) {
                // one UD message (the UD MTU) minus the header; inject: one
                // inline send, at most 1 KiB
                const std::size_t inl = std::min<std::size_t>(1024, a.max_inline_data);
                EXPECT_EQ(out->ep_attr->max_msg_size, std::max<std::size_t>(a.ud_mtu, inl) - dgram_hdr);
                EXPECT_EQ(out->tx_attr->inject_size, inl - dgram_hdr);
            } else {
                // one inline send on an RC QP minus the largest head (an RMA
                // write's), within one lent receive, at most 4 KiB
                std::size_t want = std::min<std::size_t>(4096, a.max_inline_data - 40);
                if (a.lend_qp_types & (1u << unsigned(vq::qp_type::rc)) && a.max_lend_msg)
                    want = std::min<std::size_t>(want, std::min<std::size_t>(16384 + 32, a.max_lend_msg) - 40);
                EXPECT_EQ(out->tx_attr->inject_size, want);
            }
            EXPECT_EQ(bool(out->caps & FI_REMOTE_COMM), !a.host_local);
            EXPECT_TRUE(out->caps & FI_LOCAL_COMM);
            // the answer opens a domain on that very device: an endpoint's
            // address carries the device context's address
            fid_fabric *f = nullptr;
            fid_domain *d = nullptr;
            fid_av *av = nullptr;
            fid_ep *ep = nullptr;
            fid_cq *cq = nullptr;
            ASSERT_EQ(fabric_open(out->fabric_attr, &f, nullptr), 0);
            ASSERT_EQ(domain_open(f, out, &d, nullptr), 0);
            if (t != FI_EP_MSG) {
                av_attr aa;
                cq_attr ca;
                ca.format = FI_CQ_FORMAT_CONTEXT;
                ASSERT_EQ(av_open(d, &aa, &av, nullptr), 0);
                ASSERT_EQ(cq_open(d, &ca, &cq, nullptr), 0);
                ASSERT_EQ(endpoint(d, out, &ep, nullptr), 0);
                ASSERT_EQ(ep_bind(ep, &av->fid, 0), 0);
                ASSERT_EQ(ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
                ASSERT_EQ(enable(ep), 0);
                std::uint8_t addr[64];
                std::size_t len = sizeof addr;
                ASSERT_EQ(getname(&ep->fid, addr, &len), 0);
                EXPECT_EQ(len, 64u);
                EXPECT_GT(addr[4], 0u) << "the device address is in the endpoint's";
                EXPECT_EQ(close(&ep->fid), 0);
                EXPECT_EQ(close(&cq->fid), 0);
                EXPECT_EQ(close(&av->fid), 0);
            }
            EXPECT_EQ(close(&d->fid), 0);
            EXPECT_EQ(close(&f->fid), 0);
            freeinfo(out);
            freeinfo(h);
        }
    }
}

// A domain or fabric name that names no device matches nothing and opens
// nothing.
TEST(VqDevices, UnknownDeviceOrFabricNamesAreRefused)
{
    info *h = shm_only(FI_EP_RDM);
    h->domain_attr->name = ::strdup("nosuch0");
    info *out = nullptr;
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA);
    std::free(h->domain_attr->name);
    h->domain_attr->name = nullptr;
    h->fabric_attr->name = ::strdup("nosuch");
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA);
    freeinfo(h);
    fabric_attr fa;
    fa.prov_name = const_cast<char *>("vq");
    fa.name = const_cast<char *>("nosuch");
    fid_fabric *f = nullptr;
    EXPECT_EQ(fabric_open(&fa, &f, nullptr), -FI_ENODATA);
    // a hand-built info naming an unknown device: the domain is refused
    h = shm_only(FI_EP_RDM);
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    ASSERT_EQ(fabric_open(out->fabric_attr, &f, nullptr), 0);
    std::free(out->domain_attr->name);
    out->domain_attr->name = ::strdup("nosuch0");
    fid_domain *d = nullptr;
    EXPECT_NE(domain_open(f, out, &d, nullptr), 0);
    EXPECT_EQ(d, nullptr);
    EXPECT_EQ(close(&f->fid), 0);
    freeinfo(out);
    freeinfo(h);
}
