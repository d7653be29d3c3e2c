// Loaders that build a Fleet from files an operator or a planner has:
//   - a fleet description (JSON, schema in docs/fleet.md): counts of node shapes, each with a GPU
//     model, vCPUs, memory, NVLink islands and per-GPU sharing modes;
//   - an openb node list (CSV `sn,cpu_milli,memory_mib,gpu,model`), the fleet of the FGD
//     experiments, with every GPU in shared mode because openb pods share GPUs.
// Every error names the file and the shape and field (JSON) or the line (CSV) at fault. The
// returned Fleet points at `catalog`, which must outlive it.
// Thread-safety: these functions are pure apart from reading the file; call them from any thread.
#pragma once

#include <string>
#include <string_view>

#include "catalog/catalog.h"
#include "common/result.h"
#include "fleet/fleet.h"

namespace tessera::fleet {

// Builds a fleet from fleet-description JSON. `where` names the source in errors, e.g. the path.
// On bad input, InvalidArgument listing every problem found, one per line.
Result<Fleet> ParseFleetJson(const catalog::Catalog& catalog, std::string_view text,
                             std::string_view where);

// Builds a fleet from an openb node list. `where` names the source in errors, which read
// "where:line: what is wrong"; the first problem found is reported. cpu_milli and memory_mib are
// bounded as in fleet JSON (100,000 vCPUs, 2^24 GiB).
Result<Fleet> ParseOpenbNodeCsv(const catalog::Catalog& catalog, std::string text,
                                std::string where);

// Reads `path` and parses it as fleet JSON when it ends in ".json" or its first non-blank
// character is '{', else as an openb node list (and then sets *openb_csv when given). NotFound
// when the file cannot be read.
Result<Fleet> LoadFleetFile(const catalog::Catalog& catalog, const std::string& path,
                            bool* openb_csv = nullptr);

// The text of fleets/demo.json as embedded in the binary, so the server has a fleet without
// files: 2 x 8 H100-80GB, 2 x 8 A100-80GB (half in MIG mode), 4 x 4 L40S-48GB (half shared),
// 4 x 2 T4-16GB (one shared, one exclusive).
std::string_view DemoFleetJson();

// ParseFleetJson(catalog, DemoFleetJson(), "demo fleet").
Result<Fleet> DemoFleet(const catalog::Catalog& catalog);

}  // namespace tessera::fleet
