#include "sched/plugins/sole_tenant.h"

#include <algorithm>
#include <cstdlib>

#include "sched/fit.h"

namespace tessera::sched {

size_t SoleTenantFilter::Filter(const Need& need, const NodeTable& /*nodes*/,
                                std::span<const uint32_t> in, uint32_t* out) const {
  if (need.source == 0 || in_use_ == 0) {  // Nothing to refuse: the usual case, kept cheap.
    if (out != in.data()) std::copy(in.begin(), in.end(), out);
    return in.size();
  }
  size_t kept = 0;
  for (uint32_t n : in) {
    out[kept] = n;
    kept += Admits(n, need.source) ? 1 : 0;
  }
  return kept;
}

bool SoleTenantFilter::NeedsEveryNode(const Need& need) const {
  return need.source != 0 && in_use_ > 0;
}

SoleTenantFilter::Node& SoleTenantFilter::At(fleet::NodeIndex n) {
  if (n.value >= nodes_.size()) nodes_.resize(n.value + 1);
  return nodes_[n.value];
}

void SoleTenantFilter::Count(const Node& n, bool was) {
  if (n.closing() && !was) ++in_use_;
  if (!n.closing() && was) --in_use_;
}

void SoleTenantFilter::SetShared(fleet::NodeIndex n, bool shared) {
  if (!n.valid()) return;
  Node& node = At(n);
  const bool was = node.closing();
  if (shared && !node.shared) ++shared_nodes_;
  if (!shared && node.shared) --shared_nodes_;
  node.shared = shared;
  Count(node, was);
}

bool SoleTenantFilter::shared(fleet::NodeIndex n) const {
  return n.valid() && n.value < nodes_.size() && nodes_[n.value].shared;
}

void SoleTenantFilter::Hold(fleet::NodeIndex n, uint32_t source) {
  if (!n.valid()) return;
  Node& node = At(n);
  const bool was = node.closing();
  auto it = std::find_if(node.holders.begin(), node.holders.end(),
                         [&](const auto& h) { return h.first == source; });
  if (it == node.holders.end()) {
    node.holders.push_back({source, 1});
  } else {
    ++it->second;
  }
  Count(node, was);
}

void SoleTenantFilter::Release(fleet::NodeIndex n, uint32_t source) {
  if (!n.valid() || n.value >= nodes_.size()) std::abort();  // No matching Hold: a caller bug.
  Node& node = nodes_[n.value];
  auto it = std::find_if(node.holders.begin(), node.holders.end(),
                         [&](const auto& h) { return h.first == source; });
  // A release without its hold would open a node to a second tenant while the first still runs
  // there: stop rather than go on.
  if (it == node.holders.end()) std::abort();
  const bool was = node.closing();
  if (--it->second == 0) node.holders.erase(it);
  Count(node, was);
}

bool SoleTenantFilter::Admits(uint32_t n, uint32_t source) const {
  if (source == 0 || n >= nodes_.size() || !nodes_[n].shared) return true;
  return std::all_of(nodes_[n].holders.begin(), nodes_[n].holders.end(),
                     [&](const auto& h) { return h.first == source; });
}

size_t SoleTenantFilter::ClosedTo(uint32_t source) const {
  if (source == 0 || in_use_ == 0) return 0;
  size_t closed = 0;
  for (uint32_t n = 0; n < nodes_.size(); ++n) closed += Admits(n, source) ? 0 : 1;
  return closed;
}

}  // namespace tessera::sched
