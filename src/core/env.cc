#include "core/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "common/text.h"
#include "core/sealing.h"

namespace tessera::core {

namespace {

using nlohmann::json;

constexpr size_t kMaxEnvNameBytes = 128;

bool IsEnvName(std::string_view name) {
  if (name.empty() || name.size() > kMaxEnvNameBytes) return false;
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!letter(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

// Why Tessera keeps `name` for itself, or "".
std::string_view Reserved(std::string_view name) {
  static constexpr std::array<std::string_view, 8> kExact = {
      "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
      "MASTER_ADDR",          "MASTER_PORT",
      "WORLD_SIZE",           "RANK",
      "LOCAL_RANK",           "LOCAL_WORLD_SIZE"};
  static constexpr std::array<std::string_view, 3> kPrefixes = {"CUDA_MPS_", "TESSERA_", "PET_"};
  // The one of Tessera's a workload sets itself: how busy it keeps a simulated GPU
  // (docs/agent-backends.md).
  if (name == "TESSERA_SIM_LOAD") return "";
  if (std::find(kExact.begin(), kExact.end(), name) != kExact.end()) return "Tessera sets it";
  for (std::string_view p : kPrefixes) {
    if (name.starts_with(p)) return "Tessera sets the variables that start so";
  }
  return "";
}

}  // namespace

bool IsValidSecretName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto ok = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  };
  return std::all_of(name.begin(), name.end(), ok) && ok(name[0]) && name[0] != '.' &&
         name[0] != '_' && name[0] != '-';
}

void ReadEnv(JsonFields& f, Env& out) {
  const json* env = f.Get("env", false);
  if (env == nullptr || env->is_null()) return;
  if (!env->is_object()) {
    f.Fail("env", fmt::format("expected an object of variables, found {}", JsonTypeName(*env)));
    return;
  }
  if (env->size() > kMaxEnvVars) {
    f.Fail("env", fmt::format("has {} variables; the most is {}", env->size(), kMaxEnvVars));
    return;
  }
  size_t total = 0;
  for (const auto& [name, value] : env->items()) {
    // A name that is not one is quoted (escaped, cut); a value never is.
    const std::string key = "env." + (IsEnvName(name) ? name : Quote(name, 64));
    if (!IsEnvName(name)) {
      f.Fail(key, "is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 bytes)");
      continue;
    }
    if (std::string_view why = Reserved(name); !why.empty()) {
      f.Fail(key, fmt::format("cannot be set: {}", why));
      continue;
    }
    EnvValue v;
    if (value.is_string()) {
      v.value = value.get<std::string>();
      if (v.value.size() > kMaxEnvValueBytes) {
        f.Fail(key, fmt::format("is {} bytes; a value may be at most {}", v.value.size(),
                                kMaxEnvValueBytes));
        continue;
      }
      if (v.value.find('\0') != std::string::npos) {
        f.Fail(key, "holds a NUL byte, which no environment can");
        continue;
      }
      if (!IsValidUtf8(v.value)) {
        f.Fail(key, "is not valid UTF-8");
        continue;
      }
      total += v.value.size();
    } else if (value.is_object()) {
      if (value.size() != 1 || !value.contains("secret") || !value["secret"].is_string()) {
        f.Fail(key, "expected a string or {\"secret\": \"NAME\"}");
        continue;
      }
      v.secret = value["secret"].get<std::string>();
      if (!IsValidSecretName(v.secret)) {
        f.Fail(key + ".secret",
               fmt::format("'{}' is not a secret's name (1 to 63 of [A-Za-z0-9_.-], starting "
                           "with a letter or digit)",
                           Quote(v.secret, 64)));
        continue;
      }
    } else {
      f.Fail(key, fmt::format("expected a string or {{\"secret\": \"NAME\"}}, found {}",
                              JsonTypeName(value)));
      continue;
    }
    out[name] = std::move(v);
  }
  if (total > kMaxEnvBytes) {
    f.Fail("env", fmt::format("its values hold {} bytes; the most is {}", total, kMaxEnvBytes));
  }
}

json EnvJson(const Env& env) {
  json out = json::object();
  for (const auto& [name, v] : env) {
    if (v.is_secret()) {
      out[name] = {{"secret", v.secret}};
    } else if (v.dropped) {
      out[name] = nullptr;
    } else {
      out[name] = v.value;
    }
  }
  return out;
}

json StoredEnvJson(const Env& env) {
  json out = json::object();
  for (const auto& [name, v] : env) {
    if (v.is_secret()) {
      out[name] = {{"secret", v.secret}};
    } else if (v.dropped) {
      out[name] = {{"dropped", true}};
    } else {
      out[name] = {{"sealed", v.sealed}};
    }
  }
  return out;
}

Result<Env> EnvFromStoredJson(const json& j, const std::string& where) {
  Env out;
  if (!j.is_object()) return Status::DataLoss(where + ": field 'env': expected an object");
  for (const auto& [name, value] : j.items()) {
    EnvValue v;
    if (value.is_object() && value.contains("secret") && value["secret"].is_string()) {
      v.secret = value["secret"].get<std::string>();
    } else if (value.is_object() && value.contains("sealed") && value["sealed"].is_string()) {
      v.sealed = value["sealed"].get<std::string>();
    } else if (value.is_object() && value.value("dropped", false)) {
      v.dropped = true;
    } else {
      return Status::DataLoss(
          fmt::format("{}: field 'env.{}': expected {{\"sealed\"}}, {{\"secret\"}} or "
                      "{{\"dropped\"}}",
                      where, Quote(name, 64)));
    }
    out[name] = std::move(v);
  }
  return out;
}

std::string EnvContext(std::string_view record, std::string_view name) {
  return fmt::format("{}/env/{}", record, name);
}

Status SealEnv(Sealer* sealer, std::string_view record, Env& env) {
  for (auto& [name, v] : env) {
    if (v.is_secret() || v.dropped || !v.sealed.empty()) continue;
    TESSERA_ASSIGN_OR_RETURN(v.sealed, SealValue(sealer, v.value, EnvContext(record, name),
                                                 fmt::format("env.{}", name)));
  }
  return Status::Ok();
}

Status OpenEnv(Sealer* sealer, std::string_view record, Env& env) {
  for (auto& [name, v] : env) {
    if (v.is_secret() || v.dropped || v.sealed.empty()) continue;
    TESSERA_ASSIGN_OR_RETURN(v.value, OpenValue(sealer, v.sealed, EnvContext(record, name),
                                                fmt::format("{}: env.{}", record, name)));
  }
  return Status::Ok();
}

void DropEnvValues(Env& env) {
  for (auto& [name, v] : env) {
    if (v.is_secret()) continue;
    v.value.clear();
    v.sealed.clear();
    v.dropped = true;
  }
}

std::vector<std::string> SecretRefs(const Env& env) {
  std::vector<std::string> out;
  for (const auto& [name, v] : env) {
    if (v.is_secret()) out.push_back(v.secret);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tessera::core
