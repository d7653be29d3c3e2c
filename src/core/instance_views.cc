#include "core/instance_views.h"

#include <fmt/format.h>

namespace tessera::core {

uint32_t SourceOf(const Instance& inst) {
  return static_cast<uint32_t>(TenantNumber(inst.tenant.str()));
}

Instance InstanceViews::Shown(const Instance& inst) const {
  Instance shown = inst;
  if (inst.state == InstanceState::kPending && window_->Holds(inst.id.str())) {
    // It waits for the batch window, not for room.
    shown.reason = window_->Reason();
  } else if (inst.state == InstanceState::kPending) {
    const size_t preemptible =
        inst.billing == Billing::kSpot
            ? 0
            : preemptor_->CountFor(admission_->RequestFor(inst.shape, inst.billing));
    std::string waiting = admission_->PendingReason(inst, preemptible);
    if (const size_t closed = sole_tenant_->ClosedTo(SourceOf(inst)); closed > 0) {
      // Counts nodes, as the rest of the reason does; it names no other tenant or its work.
      waiting += fmt::format(
          "; {} node(s) that cannot isolate tenants from each other host another tenant's work",
          closed);
    }
    shown.reason = inst.reason.empty() ? waiting : inst.reason + "; " + waiting;
  }
  return shown;
}

Result<Instance> InstanceViews::Get(const Tenant& caller, std::string_view id) const {
  Result<const Instance*> inst = instances_->FindFor(caller, id);
  if (!inst.ok()) return inst.status();
  return Shown(**inst);
}

InstancePage InstanceViews::List(const Tenant& caller, const ListQuery& query) const {
  bool more = false;
  const auto page = instances_->Page(
      caller.admin ? "" : caller.id.str(), query.after_seq, query.limit,
      [&](const Instance& inst) {
        const bool state =
            !query.state ||
            (inst.state == *query.state &&
             (inst.state != InstanceState::kScheduled || inst.pull.has_value() == query.pulling));
        return state && Matches(query.selector, inst.labels);
      },
      &more);
  InstancePage out;
  for (const Instance* inst : page) out.items.push_back(Shown(*inst));
  if (more && !page.empty()) out.next_after = page.back()->seq;
  return out;
}

Result<InstanceViews::LogSlice> InstanceViews::Log(const Tenant& caller, std::string_view id,
                                                   size_t tail,
                                                   std::optional<int64_t> after) const {
  Result<const Instance*> inst = instances_->FindFor(caller, id);
  if (!inst.ok()) return inst.status();
  LogTails::Slice read = logs_->Read(id, tail, after);
  return LogSlice{std::move(read.text), read.end, (*inst)->state};
}

}  // namespace tessera::core
