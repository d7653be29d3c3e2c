// Budgets (docs/billing.md): a tenant's monthly spending limit. At 80% and 100% of it the alert
// engine notifies (the built-in BudgetAlmostSpent and BudgetSpent rules, over the series
// tessera_tenant_budget_used_percent); with hard_stop, new on-demand and spot instances are
// refused once it is spent, and running work is left alone.
// Thread-safety: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/money.h"
#include "common/result.h"

namespace tessera::billing {

struct Budget {
  Money monthly;  // > 0.
  bool hard_stop = false;
  // Set by the operator: its tenant may lower it or make it stricter, never raise, soften or
  // delete it.
  bool by_operator = false;
};

// PUT /v1/tenants/{id}/budget: {monthly_usd, hard_stop?}. monthly_usd is a decimal string
// ("250.50") or a whole number, never a binary fraction; errors name the field.
Result<Budget> ParseBudget(const nlohmann::json& body);

// With "set_by": "operator" or "tenant".
nlohmann::json ToJson(const Budget& b);
// DataLoss naming `where` when the stored form is malformed.
Result<Budget> BudgetFromJson(const nlohmann::json& j, const std::string& where);

}  // namespace tessera::billing
