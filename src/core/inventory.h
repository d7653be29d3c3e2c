// A joined node's inventory, as its agent registers it (POST /v1/agent/register, docs/agent.md)
// and as the node's record stores it: the hardware the node joins the fleet with. The stored form
// is the registered JSON itself, so the server reads it here at a registration and again at every
// start (AgentHub::Restore), against the catalog of the day.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "catalog/catalog.h"
#include "common/result.h"
#include "core/agents.h"
#include "fleet/fleet.h"

namespace tessera::core {

// The longest GPU or MIG device UUID an inventory may carry.
inline constexpr size_t kMaxUuid = 96;

// The node `inventory` describes for joined node `node`, checked field by field against the
// catalog: one known GPU model, GPUs listed by index with distinct UUIDs, MIG devices and NVLink
// islands well formed, words short and printable. A GPU not in MIG mode takes the mode the
// operator gave it (AgentNode::SharingOf). InvalidArgument naming the field
// ("inventory: gpus[1]": ...) when it is not.
Result<fleet::NodeSpec> NodeSpecOf(const catalog::Catalog& catalog, const AgentNode& node,
                                   const nlohmann::json& inventory);

// Whether `spec` is the hardware fleet node `n` has: its CPU, memory, GPU model, count and UUIDs.
bool SameHardware(const fleet::NodeSpec& spec, const fleet::Node& n,
                  const catalog::Catalog& catalog);

// "8 x H100-80GB, 96 vCPUs, 1048576 MiB", for logs and errors.
std::string DescribeNode(const fleet::NodeSpec& spec);

}  // namespace tessera::core
