/* For provider writers: the shared fabric and domain objects.
 *
 * A provider embeds fabric_obj / domain_obj (first member: the public fid
 * struct) and fills the hooks; the generic layer then supplies CQs,
 * counters, AVs, EQs, MRs and the endpoint rules (util/ep.h). */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fabric/api.h"
#include "fabric/provider.h"
#include "fabric/util/lock.h"

namespace shunt::fabric::util {

struct domain_obj;
struct av_obj;
struct av_entry;
struct mr_obj;
struct eq_obj;

/** A fabric. */
struct fabric_obj {
    fid_fabric fabric;                  ///< first: the public object
    const provider *prov = nullptr;
    std::string name;
    std::atomic<int> refs{0};           ///< open domains, EQs, passive endpoints
    void *prov_data = nullptr;
};

/** What a provider adds to the generic domain. Null slots: not supported. */
struct domain_hooks {
    std::size_t size = sizeof(domain_hooks);
    std::size_t addrlen = 0;            ///< bytes of an address in the provider's format
    /** 0 if @p addr is a well-formed address, else -FI_EINVAL. */
    int (*addr_check)(const void *addr) = nullptr;
    /** insertsvc: build an address from node/service. 0, -FI_EINVAL, -FI_ENODATA. */
    int (*addr_from_svc)(const char *node, const char *service, void *addr) = nullptr;
    /** straddr: text of @p addr into buf (NUL terminated); returns the length needed with NUL. */
    std::size_t (*addr_to_str)(const void *addr, char *buf, std::size_t len) = nullptr;
    /** AV insert: attach provider peer state to an entry (may block briefly). 0 or -errno. */
    int (*av_insert)(domain_obj *d, av_entry *e) = nullptr;
    /** AV remove / close: release it. */
    void (*av_remove)(domain_obj *d, av_entry *e) = nullptr;
    /** query_atomic. */
    int (*query_atomic)(domain_obj *d, datatype dt, op o, atomic_attr *attr, std::uint64_t flags) = nullptr;
    /** MR registration: attach provider state (m->prov) and optionally choose
     *  the key (set m->key non-zero; used with FI_MR_PROV_KEY). 0 or -errno. */
    int (*mr_reg)(domain_obj *d, mr_obj *m) = nullptr;
    /** MR close: release it. */
    void (*mr_dereg)(domain_obj *d, mr_obj *m) = nullptr;
    /** Domain close: release provider state (objects are closed already). */
    void (*close)(domain_obj *d) = nullptr;
    // Slots below were added after the first version of the table: the kit
    // reads them only when `size` covers them (SHUNT_OPS_HAS).
    /** AV insert: the address to store for @p in (names resolved: a service
     *  address becomes the endpoint bound to it now). 0; -FI_EINVAL
     *  malformed; another negative code: cannot be resolved now (the insert
     *  of that address fails with it). Null: addr_check, stored as given. */
    int (*addr_resolve)(domain_obj *d, const void *in, void *out) = nullptr;
    /** FI_ADDR_STR domains: the address a text form names (what addr_to_str
     *  writes, or the provider's other spellings). 0 or -FI_EINVAL. Null:
     *  the provider's domains do not take FI_ADDR_STR. */
    int (*addr_from_str)(domain_obj *d, const char *str, void *addr) = nullptr;
    /** insertsvc with the domain at hand (its device decides what a node
     *  names): preferred over addr_from_svc. 0, -FI_EINVAL, -FI_ENODATA. */
    int (*addr_from_names)(domain_obj *d, const char *node, const char *service, void *addr) = nullptr;
    /** straddr / FI_ADDR_STR lookups with the domain at hand: preferred
     *  over addr_to_str. Text of @p addr into @p buf (NUL terminated,
     *  truncated to @p len); returns the length needed with the NUL. */
    std::size_t (*addr_to_text)(domain_obj *d, const void *addr, char *buf, std::size_t len) = nullptr;
    /** Extensions of the domain by name (open_ops). @return 0 / -FI_ENOSYS. */
    int (*ops_open)(domain_obj *d, const char *name, void **ops) = nullptr;
    /** AV insert, after the entry is published (av_get finds it) and the
     *  AV's lock is released: the provider may act on the new peer now
     *  (start connecting to it from the endpoints bound to @p av). Cannot
     *  fail the insert. */
    void (*av_inserted)(domain_obj *d, av_obj *av, av_entry *e) = nullptr;
};

/** True if hook table @p h has slot @p member (a provider built against an
 *  older table has a smaller size). */
#define SHUNT_HOOK(h, member) (SHUNT_OPS_HAS((h), ::shunt::fabric::util::domain_hooks, member) && (h)->member)

/** A domain. */
struct domain_obj {
    fid_domain domain;                  ///< first: the public object
    fabric_obj *fabric = nullptr;
    fabric::info *info = nullptr;       ///< copy of the info it was opened with
    const domain_hooks *hooks = nullptr;
    threading thread = FI_THREAD_SAFE;
    progress data_progress = FI_PROGRESS_MANUAL;
    progress control_progress = FI_PROGRESS_MANUAL;
    int mr_mode = 0;
    av_type avt = FI_AV_TABLE;
    std::uint64_t caps = 0;
    /** True when objects of this domain may be touched by two threads at
     *  once (FI_THREAD_SAFE, or auto progress): locks are enabled. */
    bool mt = true;
    /** Completions reach the CQs and counters only through the provider's
     *  progress (manual progress over queues a peer cannot signal): blocking
     *  natively on their wait objects could hang, so trywait says
     *  -FI_EAGAIN (fi_poll(3)) and waits wake up to drive progress. Set by
     *  the provider at domain open. */
    bool waits_need_progress = false;
    std::atomic<int> refs{0};           ///< open child objects
    eq_obj *eq = nullptr;               ///< bound with domain_bind
    // memory regions by key
    maybe_lock mr_lock;
    std::unordered_map<std::uint64_t, mr_obj *> mrs;
    std::uint64_t next_key = 1;
    void *prov_data = nullptr;
    /** Frees the object at close; a provider that derives from domain_obj
     *  sets one that deletes its own type. */
    void (*free_fn)(domain_obj *d) = nullptr;
};

/** Fill a fabric_obj; the provider's fabric() entry calls this.
 *  @param ops the provider's fabric ops (domain, passive_ep; eq_open and
 *  trywait default to the generic ones when left as stubs). */
void fabric_init(fabric_obj *f, const provider *prov, const fabric_attr *attr, void *context, const ops_fabric *ops);
/** Generic fabric close: -FI_EBUSY while children are open; then delete. */
int fabric_close(fid *f);

/** Fill a domain_obj from @p info; the provider's domain() calls this.
 *  @return 0; -FI_EINVAL info of another fabric or unusable attributes. */
[[nodiscard]] int domain_init(domain_obj *d, fabric_obj *f, const info *info, void *context,
                              const ops_domain *ops, const domain_hooks *hooks);
/** Generic domain close: -FI_EBUSY while children are open. */
int domain_close(fid *f);

/** Default ops tables a provider can start from: every generic object and
 *  the provider slots (endpoint, scalable_ep, passive_ep...) left as stubs. */
ops_domain default_domain_ops();
ops_fabric default_fabric_ops();
extern const ops_mr mr_ops;

/** Container of a public object. */
inline domain_obj *to_domain(fid_domain *d) { return reinterpret_cast<domain_obj *>(d); }
inline fabric_obj *to_fabric(fid_fabric *f) { return reinterpret_cast<fabric_obj *>(f); }

} // namespace shunt::fabric::util
