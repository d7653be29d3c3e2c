#include "core/rotation.h"

#include <fmt/format.h>

#include <set>

#include "common/envelope.h"

namespace tessera::core {

namespace {

// The key ids of an env's sealed literals.
void EnvKeys(const Env& env, std::set<std::string>& keys) {
  for (const auto& [name, v] : env) {
    if (v.sealed.empty()) continue;
    auto id = SealedKeyId(v.sealed);
    keys.insert(id.ok() ? *id : "?");
  }
}

void ImageKeys(const ImageSpec& image, std::set<std::string>& keys) {
  if (!image.auth || image.auth->sealed.empty()) return;
  auto id = SealedKeyId(image.auth->sealed);
  keys.insert(id.ok() ? *id : "?");
}

// True when some value of `env` or `image` is sealed under a key other than `key_id`; those are
// unsealed (their sealed form dropped) so that SealValues seals them anew.
bool Unseal(const std::string& key_id, Env& env, ImageSpec& image) {
  bool stale = false;
  for (auto& [name, v] : env) {
    if (v.sealed.empty()) continue;
    auto id = SealedKeyId(v.sealed);
    if (id.ok() && *id == key_id) continue;
    v.sealed.clear();
    stale = true;
  }
  if (image.auth && !image.auth->sealed.empty()) {
    auto id = SealedKeyId(image.auth->sealed);
    if (!id.ok() || *id != key_id) {
      image.auth->sealed.clear();
      stale = true;
    }
  }
  return stale;
}

}  // namespace

Result<ResealStep> KeyRotation::Step(const std::string& key_id, Cursor& cursor, size_t limit,
                                     store::Batch& batch) {
  ResealStep step;
  while (!cursor.done() && step.examined < limit) {
    const size_t left = limit - step.examined;
    switch (cursor.kind) {
      case 0: {
        TESSERA_ASSIGN_OR_RETURN(ResealStep s, secrets_->Reseal(key_id, cursor.text, left, batch));
        step.examined += s.examined;
        step.resealed += s.resealed;
        if (s.done) {
          ++cursor.kind;
          cursor.text.clear();
        }
        break;
      }
      case 1: {
        Status failed;
        bool more = false;
        instances_->ForEachAfter(cursor.seq, [&](Instance& inst) {
          if (step.examined == limit) {
            more = true;
            return false;
          }
          ++step.examined;
          cursor.seq = inst.seq;
          if (!IsActive(inst.state) || !Unseal(key_id, inst.env, inst.image)) return true;
          failed = secrets_->SealValues(TenantSecrets::InstanceRecord(inst.id.str()), inst.env,
                                        inst.image);
          if (!failed.ok()) return false;
          batch.instances.push_back(StoredRecord(inst, *fleet_, instance_documents_));
          ++step.resealed;
          return true;
        });
        TESSERA_RETURN_IF_ERROR(failed);
        if (!more) ++cursor.kind;
        break;
      }
      case 2: {
        auto& groups = groups_->all();
        auto it = cursor.text.empty() ? groups.begin() : groups.upper_bound(cursor.text);
        for (; it != groups.end() && step.examined < limit; ++it) {
          Group& g = it->second;
          ++step.examined;
          cursor.text = it->first;
          if (Ended(g.state) || !Unseal(key_id, g.spec.member.env, g.spec.member.image)) continue;
          TESSERA_RETURN_IF_ERROR(secrets_->SealValues(TenantSecrets::TemplateRecord(g.id),
                                                       g.spec.member.env, g.spec.member.image));
          GroupTable::Save(g, batch);
          ++step.resealed;
        }
        if (it == groups.end()) {
          ++cursor.kind;
          cursor.text.clear();
        }
        break;
      }
      case 3: {
        TESSERA_ASSIGN_OR_RETURN(bool end,
                                 monitoring_->Reseal(key_id, cursor.text, limit, step, batch));
        if (end) ++cursor.kind;
        break;
      }
      default:
        cursor.kind = 4;
    }
  }
  step.done = cursor.done();
  return step;
}

std::map<std::string, int64_t> KeyRotation::SealedKeys() const {
  std::map<std::string, int64_t> out;
  secrets_->CountKeys(out);
  instances_->ForEach([&](const Instance& inst) {
    std::set<std::string> keys;
    EnvKeys(inst.env, keys);
    ImageKeys(inst.image, keys);
    for (const std::string& k : keys) ++out[k];
  });
  for (const auto& [id, g] : groups_->all()) {
    std::set<std::string> keys;
    EnvKeys(g.spec.member.env, keys);
    ImageKeys(g.spec.member.image, keys);
    for (const std::string& k : keys) ++out[k];
  }
  monitoring_->CountKeys(out);
  return out;
}

}  // namespace tessera::core
