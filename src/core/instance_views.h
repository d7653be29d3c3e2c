// What a tenant is shown of its instances (GET /v1/instances..., docs/api.md): an instance as the
// API shows it, a pending one with the reason it waits (the batch window; else the room the fleet
// lacks, what spot victims would free, and how many nodes are closed to it while they host another
// tenant's work, never naming that tenant); pages of the caller's instances by state and labels;
// and an instance's log as its agent shipped it. Another tenant's instance reads as an unknown one.
// It only reads.
// Thread-safety: none; the core thread calls it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "core/admission.h"
#include "core/batch_window.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/labels.h"
#include "core/log_tails.h"
#include "core/preemptor.h"
#include "core/tenants.h"
#include "sched/plugins/sole_tenant.h"

namespace tessera::core {

// Whose work `inst` is, as the scheduler knows sources (sched::Request::source).
uint32_t SourceOf(const Instance& inst);

// A page of instances, and where the next one starts.
struct InstancePage {
  std::vector<Instance> items;
  std::optional<int64_t> next_after;  // The seq to pass as ListQuery::after_seq; none at the end.
};

struct ListQuery {
  // The state as GET shows it: with kScheduled, `pulling` picks those whose image is being pulled
  // (shown as "pulling") or, false, the others.
  std::optional<InstanceState> state;
  bool pulling = false;
  LabelSelector selector;
  int64_t after_seq = 0;
  size_t limit = 100;
};

class InstanceViews {
 public:
  // The parts must outlive this.
  InstanceViews(const InstanceTable* instances, const BatchWindow* window,
                const Admission* admission, const Preemptor* preemptor,
                const sched::SoleTenantFilter* sole_tenant, const LogTails* logs)
      : instances_(instances),
        window_(window),
        admission_(admission),
        preemptor_(preemptor),
        sole_tenant_(sole_tenant),
        logs_(logs) {}

  // `inst` as the API shows it: a pending one with the reason it waits, after its own reason.
  Instance Shown(const Instance& inst) const;
  // NotFound for an unknown id and for another tenant's instance alike.
  Result<Instance> Get(const Tenant& caller, std::string_view id) const;
  // The caller's instances (the admin's: all) in creation order, one page.
  InstancePage List(const Tenant& caller, const ListQuery& query) const;

  // The instance's log as its agent shipped it: the last `tail` lines, or with `after` the bytes
  // after that offset (as a previous slice's `end` gave it) that are still kept. NotFound as Get.
  struct LogSlice {
    std::string text;
    int64_t end = 0;  // The offset after the last byte: pass it as `after` to follow.
    InstanceState state = InstanceState::kPending;
  };
  Result<LogSlice> Log(const Tenant& caller, std::string_view id, size_t tail,
                       std::optional<int64_t> after) const;

 private:
  const InstanceTable* instances_;
  const BatchWindow* window_;
  const Admission* admission_;
  const Preemptor* preemptor_;
  const sched::SoleTenantFilter* sole_tenant_;
  const LogTails* logs_;
};

}  // namespace tessera::core
