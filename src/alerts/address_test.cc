#include "alerts/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::alerts {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* ip;
  AddressClass want;
};

TEST(ClassifyIp, EachRange) {
  const Case cases[] = {
      // IPv4.
      {"8.8.8.8", AddressClass::kPublic},
      {"1.1.1.1", AddressClass::kPublic},
      {"127.0.0.1", AddressClass::kLoopback},
      {"127.255.255.254", AddressClass::kLoopback},
      {"10.0.0.1", AddressClass::kPrivate},
      {"10.255.255.255", AddressClass::kPrivate},
      {"172.16.0.1", AddressClass::kPrivate},
      {"172.31.255.255", AddressClass::kPrivate},
      {"172.15.255.255", AddressClass::kPublic},
      {"172.32.0.1", AddressClass::kPublic},
      {"192.168.1.1", AddressClass::kPrivate},
      {"192.169.0.1", AddressClass::kPublic},
      {"169.254.169.254", AddressClass::kLinkLocal},
      {"100.64.0.1", AddressClass::kCgnat},
      {"100.127.255.255", AddressClass::kCgnat},
      {"100.63.255.255", AddressClass::kPublic},
      {"100.128.0.1", AddressClass::kPublic},
      {"0.0.0.0", AddressClass::kUnspecified},
      {"0.1.2.3", AddressClass::kThisNetwork},
      {"224.0.0.1", AddressClass::kMulticast},
      {"239.255.255.250", AddressClass::kMulticast},
      {"240.0.0.1", AddressClass::kReserved},
      {"255.255.255.255", AddressClass::kReserved},
      {"192.0.0.8", AddressClass::kSpecialPurpose},
      {"192.0.1.1", AddressClass::kPublic},
      {"198.18.0.1", AddressClass::kSpecialPurpose},
      {"198.19.255.255", AddressClass::kSpecialPurpose},
      {"198.20.0.1", AddressClass::kPublic},
      {"198.17.255.255", AddressClass::kPublic},
      // IPv6.
      {"2001:4860::8888", AddressClass::kPublic},
      {"2001:4860:4860::8888", AddressClass::kPublic},
      {"::1", AddressClass::kLoopback},
      {"::", AddressClass::kUnspecified},
      {"fc00::1", AddressClass::kPrivate},
      {"fd12:3456:789a::1", AddressClass::kPrivate},
      {"fe80::1", AddressClass::kLinkLocal},
      {"febf:ffff::1", AddressClass::kLinkLocal},
      {"fec0::1", AddressClass::kPrivate},
      {"ff02::1", AddressClass::kMulticast},
      {"2001::1", AddressClass::kSpecialPurpose},
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", AddressClass::kSpecialPurpose},
      {"2001:1::1", AddressClass::kPublic},
      {"64:ff9b:1::a00:1", AddressClass::kSpecialPurpose},
      {"64:ff9b:2::1", AddressClass::kPublic},
      // IPv6 that carries IPv4.
      {"::ffff:127.0.0.1", AddressClass::kLoopback},
      {"::ffff:7f00:1", AddressClass::kLoopback},
      {"::ffff:10.0.0.1", AddressClass::kPrivate},
      {"::ffff:169.254.169.254", AddressClass::kLinkLocal},
      {"::ffff:100.64.0.1", AddressClass::kCgnat},
      {"::ffff:0.0.0.0", AddressClass::kUnspecified},
      {"::ffff:224.0.0.1", AddressClass::kMulticast},
      {"::ffff:8.8.8.8", AddressClass::kPublic},
      {"::127.0.0.1", AddressClass::kLoopback},
      {"64:ff9b::192.168.0.1", AddressClass::kPrivate},
      {"64:ff9b::8.8.8.8", AddressClass::kPublic},
      {"2002:a9fe:a9fe::1", AddressClass::kLinkLocal},
      {"2002:0808:0808::1", AddressClass::kPublic},
      // Not numeric addresses.
      {"", AddressClass::kInvalid},
      {"example.com", AddressClass::kInvalid},
      {"[::1]", AddressClass::kInvalid},
      {"127.1", AddressClass::kInvalid},
      {"1.2.3.4.5", AddressClass::kInvalid},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClassifyIp(c.ip), c.want)
        << c.ip << " classified " << AddressClassName(ClassifyIp(c.ip)) << ", want "
        << AddressClassName(c.want);
  }
}

TEST(ResolveAllowedAddress, RefusesLoopbackNamingHostAndAddress) {
  const Result<std::string> v4 = ResolveAllowedAddress("127.0.0.1");
  ASSERT_FALSE(v4.ok());
  EXPECT_EQ(v4.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(v4.status().message(), HasSubstr("'127.0.0.1' resolves to 127.0.0.1"));
  EXPECT_THAT(v4.status().message(), HasSubstr("loopback"));

  const Result<std::string> v6 = ResolveAllowedAddress("::ffff:169.254.169.254");
  ASSERT_FALSE(v6.ok());
  EXPECT_EQ(v6.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(v6.status().message(), HasSubstr("link-local"));
}

TEST(ResolveAllowedAddress, RefusesLocalhostByName) {
  // /etc/hosts answers; no DNS server is needed.
  const Result<std::string> r = ResolveAllowedAddress("localhost");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(r.status().message(), HasSubstr("host 'localhost' resolves to"));
}

TEST(ResolveAllowedAddress, AllowsPublicNumericAddresses) {
  // Numeric hosts resolve without the network.
  const Result<std::string> v4 = ResolveAllowedAddress("8.8.8.8");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(*v4, "8.8.8.8");
  const Result<std::string> v6 = ResolveAllowedAddress("2001:4860::8888");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(*v6, "2001:4860::8888");
}

}  // namespace
}  // namespace tessera::alerts
