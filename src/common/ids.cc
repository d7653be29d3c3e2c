#include "common/ids.h"

namespace tessera {

bool IsValidIdBody(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(s.front())) return false;
  for (char c : s) {
    if (!alnum(c) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

}  // namespace tessera
