// The private-address guard for tenant-owned webhooks: a tenant must not be able to make the
// server POST to its own loopback, to the cloud's metadata service (169.254.169.254) or to
// anything else on the operator's private networks. ClassifyIp sorts one numeric address into
// the ranges refused; ResolveAllowedAddress resolves a host name and returns the first address
// outside them, which the caller then connects to (never resolving the name again, so DNS
// cannot answer differently between the check and the connection).
// Thread-safety: pure functions; ResolveAllowedAddress blocks on DNS.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera::alerts {

enum class AddressClass {
  kPublic,       // Allowed.
  kLoopback,     // 127.0.0.0/8, ::1.
  kPrivate,      // 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10 (site-local).
  kLinkLocal,    // 169.254/16, fe80::/10.
  kCgnat,        // 100.64.0.0/10.
  kThisNetwork,  // 0.0.0.0/8 (other than 0.0.0.0 itself).
  kMulticast,    // 224.0.0.0/4, ff00::/8.
  kUnspecified,  // 0.0.0.0, ::.
  kReserved,     // 240.0.0.0/4 and the broadcast address 255.255.255.255.
  // IANA special-purpose ranges a public service never uses: 192.0.0.0/24 (IETF protocol
  // assignments), 198.18.0.0/15 (benchmarking), 2001::/32 (Teredo, which tunnels to an
  // obfuscated IPv4 address), 64:ff9b:1::/48 (local-use NAT64).
  kSpecialPurpose,
  kInvalid,  // Not a numeric IPv4 or IPv6 address.
};

// "loopback", "private", ...: the words error messages use.
std::string_view AddressClassName(AddressClass c);

// The class of a numeric IPv4 ("10.0.0.1") or IPv6 ("fe80::1", without brackets) address. An
// IPv6 address that embeds an IPv4 one (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d,
// NAT64 64:ff9b::/96, 6to4 2002::/16) takes the class of the IPv4 address it carries.
AddressClass ClassifyIp(std::string_view ip);

// Resolves `host` (a name or a numeric address, IPv6 without brackets) and returns the first of
// its addresses whose class is kPublic, as numeric text. PermissionDenied naming the host and a
// refused address when every address is refused; Unavailable when the name does not resolve.
Result<std::string> ResolveAllowedAddress(const std::string& host);

}  // namespace tessera::alerts
