// For tests only: the catalog embedded in the binary, loaded once per test process. A catalog
// that fails to load is a broken build, so the process aborts with the reason.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "catalog/catalog.h"

namespace tessera::catalog {

inline const Catalog& EmbeddedCatalogForTest() {
  static const Catalog* c = [] {
    Result<Catalog> loaded = Catalog::LoadEmbedded();
    if (!loaded.ok()) {
      std::fprintf(stderr, "the embedded catalog does not load: %s\n",
                   loaded.status().ToString().c_str());
      std::abort();
    }
    return new Catalog(std::move(*loaded));
  }();
  return *c;
}

}  // namespace tessera::catalog
