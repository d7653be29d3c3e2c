#include "common/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <cctype>

namespace tessera {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 0xf];
  }
  return s;
}

}  // namespace

Result<std::string> GenerateToken() {
  std::array<unsigned char, 32> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return Status::Internal("the system random generator failed");
  }
  return "tsr_" + Hex(bytes.data(), bytes.size());
}

std::string HashToken(std::string_view token) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), digest.data(), &len, EVP_sha256(), nullptr);
  return Hex(digest.data(), len);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() + 1 || header[kScheme.size()] != ' ') return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return {};
  }
  std::string_view t = header.substr(kScheme.size() + 1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t;
}

bool IsFullStrengthToken(std::string_view token) {
  if (token.size() != 68 || token.substr(0, 4) != "tsr_") return false;
  return token.substr(4).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace tessera
