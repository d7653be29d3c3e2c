// The state's secrets (docs/secrets.md): a tenant's named values, what refers to them, and how a
// workload's environment is resolved for the agent that runs it. The values themselves are
// TenantSecrets' (secrets.h).
#include <fmt/format.h>

#include "common/text.h"
#include "core/state.h"

namespace tessera::core {

namespace {

// The names of the secrets an instance or a template refers to: its env's, and its registry
// password's.
std::vector<std::string> RefsOf(const Env& env, const ImageSpec& image) {
  std::vector<std::string> refs = SecretRefs(env);
  if (image.auth && !image.auth->password_secret.empty()) {
    refs.push_back(image.auth->password_secret);
  }
  return refs;
}

bool Refers(const Env& env, const ImageSpec& image, const std::string& name) {
  for (const std::string& r : RefsOf(env, image)) {
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
  instances_.ForEach([&](const Instance& inst) {
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
    Instance* inst = instances_.Find(id);
    if (inst &&
        (inst->state == InstanceState::kPending || inst->state == InstanceState::kScheduled)) {
      Stop(*inst, fmt::format("its secret '{}' was deleted", name), batch);
    }
  }
  return Status::Ok();
}

Status State::CheckSecretRefs(const Tenant& caller, const CreateInstanceRequest& req,
                              std::string_view field) const {
  for (const auto& [var, v] : req.env) {
    if (v.is_secret() && !secrets_.Find(caller.id.str(), v.secret)) {
      return Status::InvalidArgument(
          fmt::format("field '{}env.{}': secret '{}' does not exist (POST /v1/secrets makes it)",
                      field, var, v.secret));
    }
  }
  if (req.image.auth && !req.image.auth->password_secret.empty() &&
      !secrets_.Find(caller.id.str(), req.image.auth->password_secret)) {
    return Status::InvalidArgument(fmt::format(
        "field '{}registry_auth.password': secret '{}' does not exist (POST /v1/secrets makes it)",
        field, req.image.auth->password_secret));
  }
  return Status::Ok();
}

std::string State::MissingSecret(const Instance& inst) const {
  for (const std::string& name : RefsOf(inst.env, inst.image)) {
    if (!secrets_.Find(inst.tenant.str(), name)) return name;
  }
  return "";
}

void State::AddUserEnv(const Instance& inst, std::map<std::string, std::string>& env) const {
  for (const auto& [name, v] : inst.env) {
    if (env.contains(name) || v.dropped) continue;  // Tessera's own variables win.
    if (!v.is_secret()) {
      env[name] = v.value;
    } else if (const Secret* s = secrets_.Find(inst.tenant.str(), v.secret)) {
      env[name] = s->value;
    }
    // A secret deleted by force after the instance started: the instance runs already, and
    // a new attempt fails before it asks for the value (Requeue).
  }
}

std::string State::InstanceRecord(std::string_view id) { return fmt::format("instance/{}", id); }

std::string State::TemplateRecord(std::string_view group) {
  return fmt::format("group/{}/template", group);
}

Status State::SealValues(std::string_view record, Env& env, ImageSpec& image) const {
  TESSERA_RETURN_IF_ERROR(SealEnv(options_.sealer, record, env));
  return SealImageAuth(options_.sealer, record, image);
}

Result<bool> State::OpenValues(std::string_view record, bool ended, Env& env,
                               ImageSpec& image) const {
  TESSERA_RETURN_IF_ERROR(OpenEnv(options_.sealer, record, env));
  TESSERA_RETURN_IF_ERROR(OpenImageAuth(options_.sealer, record, image));
  if (!HoldsPlainPassword(image)) return false;
  if (ended) {
    DropValues(env, image);
    return true;
  }
  if (options_.sealer == nullptr) return false;  // Sealed at the first start with a keyring.
  TESSERA_RETURN_IF_ERROR(SealImageAuth(options_.sealer, record, image));
  return true;
}

void State::DropValues(Env& env, ImageSpec& image) {
  DropEnvValues(env);
  if (image.auth) {
    image.auth->password.clear();
    image.auth->sealed.clear();
  }
}

}  // namespace tessera::core
