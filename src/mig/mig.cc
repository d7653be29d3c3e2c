// Names, parsing and the layout rules. The rules are checked in a fixed order (valid start,
// overlap, +me, per-profile maximum, compute total) and the first one broken is reported, so a
// given bad layout always gets the same message.
#include "mig/mig.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

namespace tessera::mig {
namespace {

std::string ProfileNames(const Table& table) {
  std::vector<std::string_view> names;
  names.reserve(table.profiles.size());
  for (const Profile& p : table.profiles) names.push_back(p.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool InTable(const Table& table, const Profile* p) {
  for (const Profile& q : table.profiles) {
    if (&q == p) return true;
  }
  return false;
}

bool Overlap(const Placement& a, const Placement& b) {
  return a.start < b.start + b.profile->memory_slices &&
         b.start < a.start + a.profile->memory_slices;
}

Status CheckStarts(const Table& table, const std::vector<Placement>& layout) {
  for (const Placement& p : layout) {
    if (p.profile == nullptr || !InTable(table, p.profile)) {
      return Status::InvalidArgument(
          fmt::format("placement at start {} names no profile of {}", p.start, table.model));
    }
    const std::vector<int>& starts = p.profile->starts;
    if (std::find(starts.begin(), starts.end(), p.start) == starts.end()) {
      return Status::FailedPrecondition(fmt::format("start {} is not valid for {} (valid: {})",
                                                    p.start, p.profile->name,
                                                    fmt::join(starts, ", ")));
    }
  }
  return Status::Ok();
}

Status CheckOverlap(const std::vector<Placement>& layout) {
  for (size_t i = 0; i < layout.size(); ++i) {
    for (size_t k = i + 1; k < layout.size(); ++k) {
      if (Overlap(layout[i], layout[k])) {
        return Status::FailedPrecondition(fmt::format("memory slices overlap: {} and {}",
                                                      layout[i].ToString(), layout[k].ToString()));
      }
    }
  }
  return Status::Ok();
}

// The media engines (NVJPG, OFA) exist once per GPU, so only one instance can hold them.
Status CheckMediaExtensions(const std::vector<Placement>& layout) {
  std::vector<Placement> me;
  for (const Placement& p : layout) {
    if (p.profile->media_extensions) me.push_back(p);
  }
  if (me.size() <= 1) return Status::Ok();
  return Status::FailedPrecondition(
      fmt::format("more than one +me instance: {}", FormatLayout(me)));
}

Status CheckMaxCount(const Table& table, const std::vector<Placement>& layout) {
  for (const Profile& profile : table.profiles) {
    std::vector<Placement> same;
    for (const Placement& p : layout) {
      if (p.profile == &profile) same.push_back(p);
    }
    if (static_cast<int>(same.size()) > profile.max_count) {
      return Status::FailedPrecondition(fmt::format(
          "more than {} {} instances: {}", profile.max_count, profile.name, FormatLayout(same)));
    }
  }
  return Status::Ok();
}

Status CheckCompute(const Table& table, const std::vector<Placement>& layout) {
  int sum = 0;
  for (const Placement& p : layout) sum += p.profile->compute_slices;
  if (sum <= table.compute_slices) return Status::Ok();
  return Status::FailedPrecondition(fmt::format("compute slices sum to {}, more than {}: {}", sum,
                                                table.compute_slices, FormatLayout(layout)));
}

}  // namespace

const Profile* Table::Find(std::string_view name) const {
  for (const Profile& p : profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const Profile* Table::FindById(int id) const {
  for (const Profile& p : profiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

std::string Placement::ToString() const {
  return fmt::format("{}@{}", profile ? std::string_view(profile->name) : "?", start);
}

std::string FormatLayout(const std::vector<Placement>& layout) {
  std::string out;
  for (const Placement& p : layout) {
    if (!out.empty()) out += ' ';
    out += p.ToString();
  }
  return out;
}

Result<const Profile*> LookupProfile(const Table& table, std::string_view name) {
  if (const Profile* p = table.Find(name)) return p;
  return Status::NotFound(fmt::format("unknown MIG profile '{}' on {}; valid: {}", name,
                                      table.model, ProfileNames(table)));
}

Result<Placement> ParsePlacement(const Table& table, std::string_view text) {
  const size_t at = text.find('@');
  if (at == std::string_view::npos || at == 0 || at + 1 == text.size()) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not PROFILE@START (for example {}@0)", text,
        table.profiles.empty() ? std::string_view("1g.10gb") : table.profiles.front().name));
  }
  const std::string_view start_text = text.substr(at + 1);
  int start = 0;
  const auto [ptr, ec] =
      std::from_chars(start_text.data(), start_text.data() + start_text.size(), start);
  // from_chars accepts a leading '-'; a start is a slice index, so only digits are allowed.
  if (start_text.front() == '-' || ec != std::errc() ||
      ptr != start_text.data() + start_text.size()) {
    return Status::InvalidArgument(fmt::format(
        "'{}': start '{}' is not a memory-slice index (0, 1, 2, ...)", text, start_text));
  }
  TESSERA_ASSIGN_OR_RETURN(const Profile* profile, LookupProfile(table, text.substr(0, at)));
  return Placement{profile, start};
}

Result<PlanRequest> ParsePlanTokens(const Table& table, const std::vector<std::string>& tokens,
                                    bool existing_allowed) {
  PlanRequest request;
  for (const std::string& token : tokens) {
    if (token.find('@') != std::string::npos) {
      if (!existing_allowed) {
        return Status::InvalidArgument(
            fmt::format("'{}' names a start; list existing instances after --existing", token));
      }
      TESSERA_ASSIGN_OR_RETURN(const Placement p, ParsePlacement(table, token));
      request.existing.push_back(p);
    } else {
      TESSERA_ASSIGN_OR_RETURN(const Profile* p, LookupProfile(table, token));
      request.add.push_back(p);
    }
  }
  if (request.add.empty()) {
    return Status::InvalidArgument("no profiles to add; name at least one PROFILE");
  }
  return request;
}

Status CheckLayout(const Table& table, const std::vector<Placement>& layout) {
  TESSERA_RETURN_IF_ERROR(CheckStarts(table, layout));
  TESSERA_RETURN_IF_ERROR(CheckOverlap(layout));
  TESSERA_RETURN_IF_ERROR(CheckMediaExtensions(layout));
  TESSERA_RETURN_IF_ERROR(CheckMaxCount(table, layout));
  return CheckCompute(table, layout);
}

}  // namespace tessera::mig
