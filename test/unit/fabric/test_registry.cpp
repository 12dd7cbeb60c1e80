// Provider registry: built-in/static registrar, external plugins (good and
// broken ones reported and skipped), SHUNT_PROVIDER selection, utility
// provider stacking.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/api.h"
#include "fabric/provider.h"
#include "fabric/util_provider.h"
#include "loop_prov.h"
#include "test_util.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {

const provider_status *find(const std::vector<provider_status> &v, const std::string &name)
{
    for (auto &s : v)
        if (s.name == name)
            return &s;
    return nullptr;
}

struct env_guard {
    ~env_guard()
    {
        ::unsetenv("SHUNT_PROVIDER_PATH");
        ::unsetenv("SHUNT_PROVIDER");
        rescan_providers();
    }
};

std::string plugin_dir()
{
    std::string dir = "/tmp/" + test::unique_name("shunt_plugins");
    ::mkdir(dir.c_str(), 0700);
    for (const char *n : {"plugin_good", "plugin_badabi", "plugin_nosym"}) {
        std::string src = std::string(SHUNT_TEST_PLUGIN_DIR) + "/lib" + n + ".so";
        std::string dst = dir + "/lib" + n + ".so";
        EXPECT_EQ(::symlink(src.c_str(), dst.c_str()), 0) << src;
    }
    FILE *f = std::fopen((dir + "/libgarbage.so").c_str(), "w");
    std::fputs("this is not an ELF file\n", f);
    std::fclose(f);
    return dir;
}

} // namespace

TEST(FabricRegistry, StaticRegistrarProviderIsListed)
{
    auto v = providers();
    const provider_status *s = find(v, "loop");
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->usable);
    EXPECT_EQ(s->origin, "registrar");
    EXPECT_NE(find_provider("loop"), nullptr);
    EXPECT_EQ(find_provider("nosuch"), nullptr);
}

TEST(FabricRegistry, RegisterRejectsMalformedAndDuplicateProviders)
{
    EXPECT_EQ(register_provider(nullptr), -FI_EINVAL);
    provider p;
    EXPECT_EQ(register_provider(&p), -FI_EINVAL); // no name, no entry points
    p.name = "a;b";
    p.getinfo = [](std::uint32_t, const char *, const char *, std::uint64_t, const info *, info **) { return 0; };
    p.fabric = [](fabric_attr *, fid_fabric **, void *) { return 0; };
    EXPECT_EQ(register_provider(&p), -FI_EINVAL); // ';' is for stacked names
    p.name = "loop";
    EXPECT_EQ(register_provider(&p), -FI_EALREADY);
    p.name = "other";
    p.abi_version = SHUNT_PROVIDER_ABI + 1;
    EXPECT_EQ(register_provider(&p), -FI_EINVAL);
}

TEST(FabricRegistry, ExternalPluginsLoadAndBrokenOnesAreSkipped)
{
    env_guard g;
    std::string dir = plugin_dir();
    ASSERT_EQ(::setenv("SHUNT_PROVIDER_PATH", (dir + ":/nonexistent_dir").c_str(), 1), 0);
    rescan_providers();
    auto v = providers();
    const provider_status *good = find(v, "plugin_good");
    ASSERT_NE(good, nullptr);
    EXPECT_TRUE(good->usable);
    EXPECT_EQ(good->version, FI_VERSION(3, 1));
    EXPECT_NE(good->origin.find("libplugin_good.so"), std::string::npos);
    const provider_status *abi = find(v, "libplugin_badabi.so");
    ASSERT_NE(abi, nullptr);
    EXPECT_FALSE(abi->usable);
    EXPECT_NE(abi->note.find("ABI"), std::string::npos) << abi->note;
    const provider_status *nosym = find(v, "libplugin_nosym.so");
    ASSERT_NE(nosym, nullptr);
    EXPECT_FALSE(nosym->usable);
    EXPECT_NE(nosym->note.find("shunt_provider_ini"), std::string::npos) << nosym->note;
    const provider_status *garbage = find(v, "libgarbage.so");
    ASSERT_NE(garbage, nullptr);
    EXPECT_FALSE(garbage->usable);
    EXPECT_NE(garbage->note.find("dlopen"), std::string::npos) << garbage->note;
    // the good plugin answers getinfo; the rest of the registry still works
    info *h = allocinfo();
    h->fabric_attr->prov_name = ::strdup("plugin_good");
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    EXPECT_STREQ(out->fabric_attr->prov_name, "plugin_good");
    EXPECT_EQ(out->fabric_attr->prov_version, FI_VERSION(3, 1));
    freeinfo(out);
    freeinfo(h);
    EXPECT_NE(find_provider("loop"), nullptr);
}

TEST(FabricRegistry, ShuntProviderSelectsAndExcludes)
{
    env_guard g;
    ASSERT_EQ(::setenv("SHUNT_PROVIDER", "^loop", 1), 0);
    rescan_providers();
    EXPECT_EQ(find_provider("loop"), nullptr);
    auto all = providers();
    const provider_status *s = find(all, "loop");
    ASSERT_NE(s, nullptr);
    EXPECT_FALSE(s->usable);
    EXPECT_NE(s->note.find("SHUNT_PROVIDER"), std::string::npos);
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    info *out = nullptr;
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA);
    ASSERT_EQ(::setenv("SHUNT_PROVIDER", "nosuch,loop", 1), 0);
    rescan_providers();
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    freeinfo(out);
    freeinfo(h);
}

namespace {

int stack_fabric_calls = 0;

int ustack_to_core(std::uint32_t, const info *hints, info **core)
{
    // The utility offers RDM over the core's DGRAM endpoints.
    info *c = dupinfo(hints);
    if (!c)
        return -FI_ENOMEM;
    c->ep_attr->type = FI_EP_DGRAM;
    std::free(c->fabric_attr->prov_name);
    c->fabric_attr->prov_name = nullptr;
    *core = c;
    return 0;
}

int ustack_to_util(std::uint32_t, const info *, const info *core, info **out)
{
    info *u = dupinfo(core);
    if (!u)
        return -FI_ENOMEM;
    u->ep_attr->type = FI_EP_RDM;
    u->ep_attr->protocol = FI_PROTO_RXD;
    *out = u;
    return 0;
}

int ustack_fabric(const provider *core, fabric_attr *attr, fid_fabric **f, void *ctx)
{
    stack_fabric_calls++;
    fabric_attr ca = *attr;
    ca.prov_name = const_cast<char *>(core->name);
    return core->fabric(&ca, f, ctx);
}

const util_provider ustack = [] {
    util_provider u;
    u.name = "ustack";
    u.version = FI_VERSION(0, 7);
    u.ep_types = 1u << FI_EP_RDM;
    u.info_to_core = ustack_to_core;
    u.info_to_util = ustack_to_util;
    u.fabric = ustack_fabric;
    return u;
}();

SHUNT_REGISTER_UTIL_PROVIDER(ustack);

} // namespace

TEST(FabricRegistry, UtilityProvidersStackAsCoreSemicolonUtil)
{
    char core[16], util[16];
    EXPECT_TRUE(split_stacked_name("loop;ustack", core, sizeof core, util, sizeof util));
    EXPECT_STREQ(core, "loop");
    EXPECT_STREQ(util, "ustack");
    EXPECT_FALSE(split_stacked_name("loop", core, sizeof core, util, sizeof util));
    EXPECT_FALSE(split_stacked_name("a;b;c", core, sizeof core, util, sizeof util));
    EXPECT_FALSE(split_stacked_name(";b", core, sizeof core, util, sizeof util));

    info *h = allocinfo();
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG;
    h->mode = FI_CONTEXT;
    h->fabric_attr->prov_name = ::strdup("loop;ustack");
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    ASSERT_NE(out, nullptr);
    for (info *i = out; i; i = i->next) {
        EXPECT_STREQ(i->fabric_attr->prov_name, "loop;ustack");
        EXPECT_EQ(i->ep_attr->protocol, FI_PROTO_RXD);
        EXPECT_EQ(i->fabric_attr->prov_version, FI_VERSION(0, 7));
    }
    fid_fabric *f = nullptr;
    ASSERT_EQ(fabric_open(out->fabric_attr, &f, nullptr), 0);
    EXPECT_EQ(stack_fabric_calls, 1);
    EXPECT_EQ(close(&f->fid), 0);
    freeinfo(out);
    // the util name alone selects every stack of it
    std::free(h->fabric_attr->prov_name);
    h->fabric_attr->prov_name = ::strdup("ustack");
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    EXPECT_STREQ(out->fabric_attr->prov_name, "loop;ustack");
    freeinfo(out);
    freeinfo(h);
    fabric_attr bad;
    bad.prov_name = const_cast<char *>("loop;nosuch");
    EXPECT_EQ(fabric_open(&bad, &f, nullptr), -FI_ENODATA);
}

namespace {

// A provider known by two more names: answers as the loop provider does,
// while the test that registers it runs (other tests never see it).
bool aliased_on = false;
int aliased_getinfo(std::uint32_t v, const char *node, const char *svc, std::uint64_t flags, const info *hints,
                    info **out)
{
    if (!aliased_on)
        return -FI_ENODATA;
    info *h = hints ? dupinfo(hints) : nullptr;
    if (h && h->fabric_attr) {
        std::free(h->fabric_attr->prov_name);
        h->fabric_attr->prov_name = nullptr;
    }
    int rc = find_provider("loop")->getinfo(v, node, svc, flags, h, out);
    freeinfo(h);
    return rc;
}
int aliased_fabric(fabric_attr *attr, fid_fabric **f, void *ctx) { return find_provider("loop")->fabric(attr, f, ctx); }

} // namespace

TEST(FabricRegistry, AliasesSelectTheProviderAndAnswersCarryItsName)
{
    env_guard g;
    static const provider rec{.name = "aliased", .version = FI_VERSION(1, 2), .getinfo = aliased_getinfo,
                              .fabric = aliased_fabric, .aliases = "nick,other"};
    static const int registered = register_provider(&rec); // once, also under --gtest_repeat
    ASSERT_EQ(registered, 0);
    aliased_on = true;
    struct off {
        ~off() { aliased_on = false; }
    } off_at_exit;
    // a name already taken as an alias is refused, and the alias of a new
    // record may not take an existing name
    provider dup = rec;
    dup.name = "nick";
    dup.aliases = nullptr;
    EXPECT_EQ(register_provider(&dup), -FI_EALREADY);
    dup.name = "fresh";
    dup.aliases = "loop";
    EXPECT_EQ(register_provider(&dup), -FI_EALREADY);

    EXPECT_EQ(find_provider("NICK"), &rec);
    EXPECT_EQ(find_provider("other"), &rec);
    auto all = providers();
    const provider_status *s = find(all, "aliased");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->aliases, "nick,other");

    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    std::free(h->fabric_attr->prov_name);
    h->fabric_attr->prov_name = ::strdup("nick");
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    for (info *i = out; i; i = i->next)
        EXPECT_STREQ(i->fabric_attr->prov_name, "aliased");
    fid_fabric *f = nullptr;
    fabric_attr fa = *out->fabric_attr;
    fa.prov_name = const_cast<char *>("other");
    ASSERT_EQ(fabric_open(&fa, &f, nullptr), 0);
    EXPECT_EQ(close(&f->fid), 0);
    freeinfo(out);

    // SHUNT_PROVIDER by an alias selects it; excluding an alias excludes it
    ASSERT_EQ(::setenv("SHUNT_PROVIDER", "other", 1), 0);
    rescan_providers();
    EXPECT_EQ(find_provider("aliased"), &rec);
    EXPECT_EQ(find_provider("loop"), nullptr);
    ASSERT_EQ(::setenv("SHUNT_PROVIDER", "^nick", 1), 0);
    rescan_providers();
    EXPECT_EQ(find_provider("aliased"), nullptr);
    EXPECT_NE(find_provider("loop"), nullptr);
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA);
    freeinfo(h);
}
