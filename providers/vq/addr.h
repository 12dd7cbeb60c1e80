/* vq provider (private): endpoint addresses, and how node and service names
 * (fi_getinfo(3), fi_av_insertsvc, FI_ADDR_STR) resolve to them.
 *
 * An ep_addr is either an endpoint's own address (qpn != 0: its device
 * context's address and its UD QP) or a *service address* (qpn == 0): the
 * host part of a node (as its device kind writes it) and a service name,
 * "<host>:<service>" in `name`. A service address names whatever endpoint a
 * server bound to that service, on that host: endpoints and passive
 * endpoints opened with one as source address bind it (two servers cannot
 * bind the same one), and inserting one in an AV or connecting to one
 * resolves it to the endpoint bound now. With an empty service it is the
 * wildcard source address of the host ("any endpoint address"), which getinfo
 * fills when no service is named.
 *
 * What a node names and where bindings live depends on the device: one
 * addr_resolver per kind. Host-local devices (shm) resolve any name of this
 * host (its host name, localhost, an address of one of its interfaces) and
 * keep bindings in per-user files in /dev/shm; a device whose peers are on
 * other hosts (an Ethernet driver: node is an IP address) supplies its own. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "prov.h"

namespace shunt::prov::vqprov {

/** Longest service name (it must fit an ep_addr with its host part). */
inline constexpr std::size_t service_max = 48;

/** A binding of a service address to an endpoint (addr_resolver::bind). */
struct service_binding;

/** How names resolve on one kind of device. Every slot is set. */
struct addr_resolver {
    const char *scheme; ///< FI_ADDR_STR scheme ("fi_shm")
    /** The host part of service addresses for @p node (null: this host).
     *  @param flags FI_NUMERICHOST: @p node must be a numeric address.
     *  @param local the node must be this host (a source address).
     *  @return 0; -FI_ENODATA the node does not resolve (or, @p local, is
     *  another host); -FI_EINVAL malformed. */
    int (*host)(const char *node, std::uint64_t flags, bool local, std::string &out);
    /** The host part as text for a string address (empty host part: this
     *  host's name). */
    std::string (*host_text)(const std::string &host);
    /** Bind service address @p svc to endpoint address @p ep until unbind().
     *  @return 0 and *out; -FI_EADDRINUSE another live endpoint has it;
     *  -FI_ENOSYS the device kind has no service bindings; -errno. */
    int (*bind)(const ep_addr &svc, const ep_addr &ep, service_binding **out);
    void (*unbind)(service_binding *b);
    /** The endpoint bound to @p svc now. @return 0 and @p ep;
     *  -FI_ECONNREFUSED nothing is bound to it. */
    int (*lookup)(const ep_addr &svc, ep_addr &ep);
};

/** The resolver of a device kind: host-local devices or not. */
const addr_resolver &resolver_for(bool host_local);

/** A service address (qpn 0)? */
inline bool is_service(const ep_addr &a) { return a.qpn == 0; }

/** Service address for @p node / @p service (either may be null), or the
 *  endpoint address an FI_ADDR_STR @p node spells (then @p service is null).
 *  @param local the address is a source address (FI_SOURCE, or a server's
 *  service-only request): the node must be this host.
 *  @return 0; -FI_ENODATA the node does not resolve; -FI_EINVAL malformed
 *  node, service or string. */
int resolve_names(const addr_resolver &r, const char *node, const char *service, std::uint64_t flags, bool local,
                  ep_addr &out);

/** The endpoint address to use for @p a: @p a itself if it is one
 *  (checked), the endpoint bound to it if it is a service address.
 *  @return 0; -FI_EINVAL malformed or a wildcard; -FI_ECONNREFUSED nobody
 *  is bound to the service. */
int resolve_endpoint(const addr_resolver &r, const ep_addr &a, ep_addr &out);

/** Text form: "<scheme>://<name>/<qpn>" for an endpoint address (the name as
 *  text when printable, else 0x and hex), "<scheme>://<host>:<service>" for a
 *  service address. */
std::string addr_text(const addr_resolver &r, const ep_addr &a);
/** Parse a text form (as addr_text writes it; "<name>/<qpn>" without the
 *  scheme is accepted too). @return 0; -FI_ENODATA a host that does not
 *  resolve; -FI_EINVAL malformed. */
int addr_parse(const addr_resolver &r, const char *text, ep_addr &out);

/** An address in an info's format (@p addr_format FI_ADDR_STR: the text,
 *  NUL terminated; else the 64 binary bytes) as a malloc'ed buffer.
 *  @return 0 and @p buf / @p len; -FI_ENOMEM. */
int addr_encode(const addr_resolver &r, std::uint32_t addr_format, const ep_addr &a, void *&buf, std::size_t &len);
/** An address given in format @p addr_format (@p len bytes at @p buf).
 *  @return 0; -FI_EINVAL malformed. */
int addr_decode(const addr_resolver &r, std::uint32_t addr_format, const void *buf, std::size_t len, ep_addr &out);

/** getname / getpeer: @p a into the caller's buffer in format @p addr_format.
 *  @return 0; -FI_ETOOSMALL (*len set to the size needed). */
int addr_out(const addr_resolver &r, std::uint32_t addr_format, const ep_addr &a, void *addr, std::size_t *len);

/** The addresses getinfo's node, service and flags name (fi_getinfo(3)):
 *  with FI_SOURCE they are the source; otherwise a node (with or without a
 *  service) is the destination, and a service alone the source of a server;
 *  the host's wildcard is the source when nothing names one. */
struct info_addrs {
    ep_addr src{};
    ep_addr dest{};
    bool src_named = false; ///< src comes from node/service (else the wildcard, unless the hints have one)
    bool dest_named = false;
};
/** Resolve them once per device kind. @return 0; -FI_ENODATA the node does
 *  not resolve; -FI_EINVAL malformed names. */
int resolve_info_addrs(const addr_resolver &r, const char *node, const char *service, std::uint64_t flags,
                       info_addrs &out);
/** Put them into getinfo answer @p ans in its address format; addresses
 *  from the hints stay where the rules leave them (they must be ours).
 *  @return 0; -FI_EINVAL a hint address that is not; -FI_ENOMEM. */
int fill_info_addrs(const addr_resolver &r, const info_addrs &a, info *ans);

/** Bind the source address of @p in (if it names a service) to endpoint
 *  address @p ep. @return 0 and *out (null when there is nothing to bind);
 *  -FI_EADDRINUSE; -FI_EADDRNOTAVAIL the source is another endpoint's
 *  address (endpoint addresses are assigned, not chosen); -FI_EINVAL. */
int bind_source(const addr_resolver &r, const info *in, const ep_addr &ep, service_binding **out);

/** getname of active endpoints (RDM, MSG, DGRAM), in their info's format. */
int ep_getname(fid *f, void *addr, std::size_t *len);

/** AV hooks of the domain (util::domain_hooks). */
int addr_check(const void *a);
std::size_t addr_to_text_hook(util::domain_obj *d, const void *a, char *buf, std::size_t len);
int addr_from_names_hook(util::domain_obj *d, const char *node, const char *service, void *out);
int addr_from_str_hook(util::domain_obj *d, const char *str, void *out);
int addr_resolve_hook(util::domain_obj *d, const void *in, void *out);

} // namespace shunt::prov::vqprov
