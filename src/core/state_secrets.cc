// The state's secrets (docs/secrets.md): a tenant's named values, what refers to them, and how a
// workload's environment is resolved for the agent that runs it. The values themselves are
// TenantSecrets' (secrets.h).
#include <fmt/format.h>

#include "common/text.h"
#include "core/state.h"

namespace tessera::core {

namespace {

bool Refers(const Env& env, const ImageSpec& image, const std::string& name) {
  for (const std::string& r : TenantSecrets::RefsOf(env, image)) {
    if (r == name) return true;
  }
  return false;
}

}  // namespace

Result<Secret> State::PutSecret(const Tenant& caller, const std::string& name, std::string value,
                                const std::string& user, bool replace, store::Batch& batch) {
  return secrets_.Put(caller.id.str(), name, std::move(value), user, replace, batch);
}

Result<Secret> State::GetSecret(const Tenant& caller, std::string_view name) const {
  const Secret* s = caller.admin ? nullptr : secrets_.Find(caller.id.str(), name);
  if (!s) return Status::NotFound(fmt::format("secret '{}' not found", Quote(name)));
  return *s;
}

std::vector<std::string> State::SecretUsers(const std::string& tenant,
                                            const std::string& name) const {
  std::vector<std::string> out;
  instances_.table().ForEach([&](const Instance& inst) {
    if (IsActive(inst.state) && inst.tenant.str() == tenant && Refers(inst.env, inst.image, name)) {
      out.push_back(inst.id.str());
    }
  });
  for (const auto& [id, g] : groups_.all()) {
    if (g.tenant.str() == tenant && !Ended(g.state) &&
        Refers(g.spec.member.env, g.spec.member.image, name)) {
      out.push_back(id);
    }
  }
  return out;
}

Status State::DeleteSecret(const Tenant& caller, const std::string& name, bool force,
                           store::Batch& batch) {
  TESSERA_RETURN_IF_ERROR(GetSecret(caller, name).status());
  const std::vector<std::string> users = SecretUsers(caller.id.str(), name);
  if (!users.empty() && !force) {
    const size_t shown = std::min<size_t>(users.size(), 10);
    return Status::FailedPrecondition(fmt::format(
        "secret '{}' is referred to by {} ({}{}); delete them first, or delete with force=true "
        "(what waits then fails; what runs keeps its environment)",
        name, fmt::join(users.begin(), users.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        users.size() == 1 ? "1 instance or group" : fmt::format("{} in all", users.size()),
        shown < users.size() ? ", ..." : ""));
  }
  TESSERA_RETURN_IF_ERROR(secrets_.Delete(caller.id.str(), name, batch));
  // Nothing waits for a secret that is gone: work not yet started stops, saying why.
  for (const std::string& id : users) {
    Instance* inst = instances_.table().Find(id);
    if (inst &&
        (inst->state == InstanceState::kPending || inst->state == InstanceState::kScheduled)) {
      instances_.Stop(*inst, fmt::format("its secret '{}' was deleted", name), batch,
                      billing::Ending::kCustomer);
    }
  }
  return Status::Ok();
}

}  // namespace tessera::core
