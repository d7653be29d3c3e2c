#include "store/memory_store.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

namespace tessera::store {

namespace {

// The ledger, shared with readers on other threads.
struct SharedLedger {
  std::mutex mu;
  std::vector<LedgerRecord> lines;  // Guarded by mu.

  Status Scan(const std::string& tenant, int64_t from, int64_t to, int64_t max_seq,
              const std::function<void(const LedgerRecord&)>& fn) {
    std::lock_guard lock(mu);
    for (const LedgerRecord& l : lines) {
      if (l.seq <= max_seq && (tenant.empty() || l.tenant == tenant) && l.start >= from &&
          l.start < to) {
        fn(l);
      }
    }
    return Status::Ok();
  }
};

class MemoryLedgerReader final : public LedgerReader {
 public:
  explicit MemoryLedgerReader(std::shared_ptr<SharedLedger> ledger) : ledger_(std::move(ledger)) {}
  Status Scan(const std::string& tenant, int64_t from, int64_t to, int64_t max_seq,
              const std::function<void(const LedgerRecord&)>& fn) override {
    return ledger_->Scan(tenant, from, to, max_seq, fn);
  }

 private:
  std::shared_ptr<SharedLedger> ledger_;
};

class MemoryStore final : public Store {
 public:
  Status Commit(const Batch& batch) override {
    // Check first, so that a refused batch applies nothing.
    for (const TenantRecord& t : batch.tenants) {
      for (const auto& [id, other] : tenants_) {
        if (id != t.id && other.name == t.name) {
          return Status::DataLoss(
              fmt::format("writing tenant {}: name '{}' is taken", t.id, t.name));
        }
      }
    }
    for (const TenantRecord& t : batch.tenants) tenants_[t.id] = t;
    for (const InstanceRecord& i : batch.instances) instances_[i.id] = i;
    for (AuditRecord a : batch.audit) {
      a.seq = next_seq_++;
      audit_.push_back(std::move(a));
    }
    for (const auto& [k, v] : batch.settings) settings_[k] = v;
    for (const std::string& k : batch.deleted_settings) settings_.erase(k);
    std::lock_guard lock(ledger_->mu);
    for (LedgerRecord l : batch.ledger) {
      l.seq = static_cast<int64_t>(ledger_->lines.size()) + 1;
      ledger_->lines.push_back(std::move(l));
    }
    return Status::Ok();
  }

  Result<std::vector<TenantRecord>> LoadTenants() override {
    std::vector<TenantRecord> out;
    for (const auto& [id, t] : tenants_) out.push_back(t);
    return out;
  }

  Result<std::vector<InstanceRecord>> LoadInstances(const std::string& ended_since) override {
    std::vector<InstanceRecord> out;
    for (const auto& [id, i] : instances_) {
      if (i.ended_at.empty() || i.ended_at >= ended_since) out.push_back(i);
    }
    return out;
  }

  Result<std::optional<InstanceRecord>> GetInstance(const std::string& id) override {
    auto it = instances_.find(id);
    if (it == instances_.end()) return std::optional<InstanceRecord>();
    return std::optional<InstanceRecord>(it->second);
  }

  Result<std::vector<AuditRecord>> ListAudit(int64_t after_seq, int limit) override {
    std::vector<AuditRecord> out;
    for (const AuditRecord& a : audit_) {
      if (a.seq <= after_seq) continue;
      if (static_cast<int>(out.size()) == limit) break;
      out.push_back(a);
    }
    return out;
  }

  Result<int64_t> PruneAudit(const std::string& before) override {
    const size_t was = audit_.size();
    std::erase_if(audit_, [&](const AuditRecord& a) { return a.at < before; });
    return static_cast<int64_t>(was - audit_.size());
  }

  Status ScanLedger(const std::string& tenant, int64_t from, int64_t to,
                    const std::function<void(const LedgerRecord&)>& fn) override {
    return ledger_->Scan(tenant, from, to, INT64_MAX, fn);
  }

  int64_t LastLedgerSeq() const override {
    std::lock_guard lock(ledger_->mu);
    return static_cast<int64_t>(ledger_->lines.size());
  }

  Result<std::unique_ptr<LedgerReader>> OpenLedgerReader() override {
    return std::unique_ptr<LedgerReader>(std::make_unique<MemoryLedgerReader>(ledger_));
  }

  Result<std::optional<std::string>> GetSetting(const std::string& key) override {
    auto it = settings_.find(key);
    if (it == settings_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }

  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) override {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = settings_.lower_bound(prefix);
         it != settings_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      out.emplace_back(it->first, it->second);
    }
    return out;
  }

 private:
  std::map<std::string, TenantRecord> tenants_;
  std::map<std::string, InstanceRecord> instances_;
  std::vector<AuditRecord> audit_;
  int64_t next_seq_ = 1;
  std::map<std::string, std::string> settings_;
  std::shared_ptr<SharedLedger> ledger_ = std::make_shared<SharedLedger>();
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace tessera::store
