// The web console (docs/console.md): the static files of web/ and Debian's Chart.js, compiled into
// the binary at build time (cmake/embed.cmake) and served at / and /console/ with a strict
// Content-Security-Policy. The page talks only to the /v1 API, with the user's bearer token.
// Thread-safety: the files are constant; every function may be called from any thread.
#pragma once

#include <string_view>
#include <vector>

#include "catalog/embedded.h"

namespace tessera::api {

using EmbeddedFile = catalog::EmbeddedFile;

// Every file of the console, sorted by path ("index.html", "pages/fleet.js", "chart.min.js").
const std::vector<EmbeddedFile>& EmbeddedFiles();

}  // namespace tessera::api
