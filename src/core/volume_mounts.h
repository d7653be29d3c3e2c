// Which instances mount which volumes (docs/volumes.md): the active instances that mount any; who
// may mount a volume (one of its own tenant's, not being deleted, by one instance at a time unless
// it is shared, all of an instance's volumes on one node); the node an instance's volumes hold it
// to; a volume's node taken from its first instance's; and what a node's agent says of the
// volumes it holds. Creating, billing and deleting volumes is the state's (state_volumes.cc).
// Thread-safety: none; the core thread calls it.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/volumes.h"
#include "store/store.h"

namespace tessera::core {

class VolumeMounts {
 public:
  // The parts must outlive this.
  VolumeMounts(Volumes* volumes, const InstanceTable* instances)
      : volumes_(volumes), instances_(instances) {}

  // `inst` changed state (or came to be): while it is active it holds the volumes it mounts.
  void Track(const Instance& inst);
  // The active instances of `tenant` that mount volume `name`.
  std::vector<std::string> Users(const std::string& tenant, std::string_view name) const;
  // OK, or why `count` instances of `req` of `tenant` (members of `group`, or "") cannot mount its
  // volumes: one the tenant lacks (InvalidArgument naming the field), one being deleted, one not
  // shared that another instance or more than one of these would mount (a member of `group`
  // restarting does not count as another), or two volumes on different nodes
  // (FailedPrecondition).
  Status Check(const std::string& tenant, const CreateInstanceRequest& req, int count,
               std::string_view group) const;
  // The node `inst`'s volumes hold it to: "" when none has a node yet.
  std::string NodeOf(const Instance& inst) const;
  // After `inst` was placed: its volumes without a node take the node it went to.
  void Settle(const Instance& inst, store::Batch& batch);
  // What `node`'s agent says of the volumes it holds: their use, and the end of those being
  // deleted that it no longer holds. A volume of another node is not this one's to report.
  void ApplyReport(const std::string& node, const VolumeReport& report, store::Batch& batch);

 private:
  // The active instances of `tenant` that mount volume `name`, once for each mount.
  std::vector<const Instance*> Holders(const std::string& tenant, std::string_view name) const;

  Volumes* volumes_;
  const InstanceTable* instances_;
  std::set<std::string> holders_;  // Active instances that mount volumes.
};

}  // namespace tessera::core
