// Shared by the core's tests: the embedded catalog, loaded once.
#pragma once

#include <utility>

#include "catalog/catalog.h"

namespace tessera::core {

inline const catalog::Catalog& TestCatalog() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

}  // namespace tessera::core
