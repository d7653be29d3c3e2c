#include "core/principal_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

namespace tessera::core {

namespace {

// Where a hash lives: its table in the root, and its bucket in that table.
struct Path {
  size_t table, bucket;
};

template <size_t kFanout>
Path PathOf(std::string_view hash) {
  const size_t h = std::hash<std::string_view>()(hash);
  return {h % kFanout, (h / kFanout) % kFanout};
}

template <typename Bucket>
auto LowerBound(Bucket& b, std::string_view hash) {
  return std::lower_bound(b.begin(), b.end(), hash,
                          [](const auto& entry, std::string_view h) { return entry.first < h; });
}

}  // namespace

const Principal* PrincipalIndex::Find(std::string_view hash) const {
  const Path p = PathOf<kFanout>(hash);
  const Table* table = root_[p.table].get();
  const Bucket* bucket = table ? (*table)[p.bucket].get() : nullptr;
  if (!bucket) return nullptr;
  auto it = LowerBound(*bucket, hash);
  return it != bucket->end() && it->first == hash ? &it->second : nullptr;
}

std::shared_ptr<const PrincipalIndex> PrincipalIndex::With(std::span<const Change> changes) const {
  auto next = std::make_shared<PrincipalIndex>(*this);  // The root: kFanout pointers.
  // What this call copied already, so two changes on one path copy it once. Changes are few (a
  // tenant's tokens), or many only when an index is built whole at start-up.
  std::array<Table*, kFanout> own_tables{};
  std::unordered_map<size_t, Bucket*> own_buckets;  // table * kFanout + bucket -> its copy.
  for (const Change& c : changes) {
    const Path p = PathOf<kFanout>(c.hash);
    Table*& table = own_tables[p.table];
    if (!table) {
      const auto& old = next->root_[p.table];
      auto copy = old ? std::make_shared<Table>(*old) : std::make_shared<Table>();
      table = copy.get();
      next->root_[p.table] = std::move(copy);
    }
    const size_t key = p.table * kFanout + p.bucket;
    Bucket*& bucket = own_buckets[key];
    if (!bucket) {
      const auto& old = (*table)[p.bucket];
      auto copy = old ? std::make_shared<Bucket>(*old) : std::make_shared<Bucket>();
      bucket = copy.get();
      (*table)[p.bucket] = std::move(copy);
    }
    auto it = LowerBound(*bucket, c.hash);
    const bool found = it != bucket->end() && it->first == c.hash;
    if (c.principal) {
      if (found) {
        it->second = *c.principal;
      } else {
        bucket->emplace(it, c.hash, *c.principal);
        ++next->size_;
      }
    } else if (found) {
      bucket->erase(it);
      --next->size_;
    }
  }
  return next;
}

Result<Principal> Authenticate(const PrincipalIndex& index, std::string_view token_hash, Time now) {
  // The lookup is keyed by the token's SHA-256: its timing can tell nothing about the token.
  const Principal* p = index.Find(token_hash);
  if (!p) return Status::Unauthenticated("invalid token");
  if (p->expires_at && *p->expires_at <= now) {
    return Status::Unauthenticated(
        p->user_token ? fmt::format("this token expired at {}", FormatRfc3339(*p->expires_at))
                      : std::string("this token was replaced and its grace period has ended"));
  }
  if (p->disabled) {
    return Status::PermissionDenied(fmt::format("tenant '{}' is disabled", p->tenant.str()));
  }
  if (p->user_disabled) {
    return Status::PermissionDenied(
        fmt::format("user '{}' of tenant '{}' is disabled", p->user_name, p->tenant.str()));
  }
  return *p;
}

Status Authorize(const Principal& p, Role need, bool write) {
  if (p.admin || !p.node.empty()) return Status::Ok();
  if (write && p.read_only) {
    return Status::PermissionDenied(
        "this token is read-only: it may read, but not change anything (make a token without "
        "read_only to write)");
  }
  if (static_cast<int>(p.role) < static_cast<int>(need)) {
    return Status::PermissionDenied(
        fmt::format("this needs role {}; user '{}' has role {}", RoleName(need),
                    p.user_name.empty() ? p.user : p.user_name, RoleName(p.role)));
  }
  return Status::Ok();
}

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kViewer:
      return "viewer";
    case Role::kMember:
      return "member";
    case Role::kOwner:
      return "owner";
  }
  return "?";
}

std::optional<Role> ParseRole(std::string_view s) {
  for (Role r : {Role::kViewer, Role::kMember, Role::kOwner}) {
    if (RoleName(r) == s) return r;
  }
  return std::nullopt;
}

}  // namespace tessera::core
