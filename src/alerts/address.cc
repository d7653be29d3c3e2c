#include "alerts/address.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "common/text.h"

namespace tessera::alerts {
namespace {

// True when the top `bits` bits of `a` equal those of `prefix`.
bool InV4(uint32_t a, uint32_t prefix, int bits) {
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (a & mask) == (prefix & mask);
}

constexpr uint32_t V4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return a << 24 | b << 16 | c << 8 | d;
}

AddressClass ClassifyV4(uint32_t a) {
  if (a == 0) return AddressClass::kUnspecified;
  if (InV4(a, V4(0, 0, 0, 0), 8)) return AddressClass::kThisNetwork;
  if (InV4(a, V4(127, 0, 0, 0), 8)) return AddressClass::kLoopback;
  if (InV4(a, V4(10, 0, 0, 0), 8) || InV4(a, V4(172, 16, 0, 0), 12) ||
      InV4(a, V4(192, 168, 0, 0), 16)) {
    return AddressClass::kPrivate;
  }
  if (InV4(a, V4(169, 254, 0, 0), 16)) return AddressClass::kLinkLocal;
  if (InV4(a, V4(100, 64, 0, 0), 10)) return AddressClass::kCgnat;
  if (InV4(a, V4(224, 0, 0, 0), 4)) return AddressClass::kMulticast;
  if (InV4(a, V4(240, 0, 0, 0), 4)) return AddressClass::kReserved;  // With 255.255.255.255.
  if (InV4(a, V4(192, 0, 0, 0), 24) || InV4(a, V4(198, 18, 0, 0), 15)) {
    return AddressClass::kSpecialPurpose;
  }
  return AddressClass::kPublic;
}

uint32_t ReadV4(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

AddressClass ClassifyV6(const std::array<uint8_t, 16>& b) {
  const uint8_t* p = b.data();
  if (AllZero(p, 16)) return AddressClass::kUnspecified;
  if (AllZero(p, 15) && p[15] == 1) return AddressClass::kLoopback;
  // IPv4-mapped ::ffff:a.b.c.d: the kernel connects to the IPv4 address.
  if (AllZero(p, 10) && p[10] == 0xff && p[11] == 0xff) return ClassifyV4(ReadV4(p + 12));
  // IPv4-compatible ::a.b.c.d (deprecated, but some stacks still route it).
  if (AllZero(p, 12)) return ClassifyV4(ReadV4(p + 12));
  // NAT64 64:ff9b::/96: a NAT64 gateway would forward to the embedded IPv4 address.
  static constexpr uint8_t kNat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(p, kNat64, 12) == 0) return ClassifyV4(ReadV4(p + 12));
  // 6to4 2002:AABB:CCDD::/48 carries the IPv4 address AA.BB.CC.DD.
  if (p[0] == 0x20 && p[1] == 0x02) {
    const AddressClass c = ClassifyV4(ReadV4(p + 2));
    if (c != AddressClass::kPublic) return c;
  }
  // Teredo 2001::/32 and local-use NAT64 64:ff9b:1::/48: the IPv4 address they reach is hidden.
  if (p[0] == 0x20 && p[1] == 0x01 && p[2] == 0 && p[3] == 0) return AddressClass::kSpecialPurpose;
  if (p[0] == 0x00 && p[1] == 0x64 && p[2] == 0xff && p[3] == 0x9b && p[4] == 0 && p[5] == 1) {
    return AddressClass::kSpecialPurpose;
  }
  if ((p[0] & 0xfe) == 0xfc) return AddressClass::kPrivate;                    // fc00::/7
  if (p[0] == 0xfe && (p[1] & 0xc0) == 0x80) return AddressClass::kLinkLocal;  // fe80::/10
  if (p[0] == 0xfe && (p[1] & 0xc0) == 0xc0) return AddressClass::kPrivate;    // fec0::/10
  if (p[0] == 0xff) return AddressClass::kMulticast;                           // ff00::/8
  return AddressClass::kPublic;
}

}  // namespace

std::string_view AddressClassName(AddressClass c) {
  switch (c) {
    case AddressClass::kPublic:
      return "public";
    case AddressClass::kLoopback:
      return "loopback";
    case AddressClass::kPrivate:
      return "private";
    case AddressClass::kLinkLocal:
      return "link-local";
    case AddressClass::kCgnat:
      return "carrier-grade NAT";
    case AddressClass::kThisNetwork:
      return "this-network (0.0.0.0/8)";
    case AddressClass::kMulticast:
      return "multicast";
    case AddressClass::kUnspecified:
      return "unspecified";
    case AddressClass::kReserved:
      return "reserved";
    case AddressClass::kSpecialPurpose:
      return "special-purpose";
    case AddressClass::kInvalid:
      return "invalid";
  }
  return "invalid";
}

AddressClass ClassifyIp(std::string_view ip) {
  const std::string text(ip);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return ClassifyV4(ntohl(v4.s_addr));
  std::array<uint8_t, 16> v6{};
  if (inet_pton(AF_INET6, text.c_str(), v6.data()) == 1) return ClassifyV6(v6);
  return AddressClass::kInvalid;
}

Result<std::string> ResolveAllowedAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0 || list == nullptr) {
    return Status::Unavailable(
        fmt::format("cannot resolve host '{}': {}", Quote(host, 255), gai_strerror(rc)));
  }
  std::string refused;
  AddressClass refused_class = AddressClass::kInvalid;
  std::string allowed;
  for (const addrinfo* ai = list; ai != nullptr && allowed.empty(); ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    } else if (ai->ai_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
    } else {
      continue;
    }
    const AddressClass c = ClassifyIp(text);
    if (c == AddressClass::kPublic) {
      allowed = text;
    } else if (refused.empty()) {
      refused = text;
      refused_class = c;
    }
  }
  freeaddrinfo(list);
  if (!allowed.empty()) return allowed;
  if (refused.empty()) {
    return Status::Unavailable(fmt::format("host '{}' has no IPv4 or IPv6 address", Quote(host)));
  }
  return Status::PermissionDenied(
      fmt::format("host '{}' resolves to {}, a {} address: refused for a tenant's receiver",
                  Quote(host, 255), refused, AddressClassName(refused_class)));
}

}  // namespace tessera::alerts
