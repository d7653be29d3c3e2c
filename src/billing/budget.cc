#include "billing/budget.h"

#include <fmt/format.h>

#include "common/json.h"
#include "common/text.h"

namespace tessera::billing {

using nlohmann::json;

namespace {

// The budget's fields from `j` into `b`, errors into `f`.
// The API's form, or with `stored` the store's, which also says who set it.
void Read(JsonFields& f, Budget& b, bool stored) {
  if (stored) {
    f.RejectUnknown({"monthly_usd", "hard_stop", "set_by"});
    const std::string by = f.String("set_by", false);
    if (!by.empty() && by != "operator" && by != "tenant") f.Fail("set_by", "operator or tenant");
    b.by_operator = by == "operator";
  } else {
    f.RejectUnknown({"monthly_usd", "hard_stop"});
  }
  b.hard_stop = f.Bool("hard_stop", false, false);
  const json* amount = f.Get("monthly_usd");
  if (!amount) return;
  Result<Money> m = Status::InvalidArgument("");
  if (amount->is_string()) {
    m = Money::Parse(amount->get<std::string>());
  } else if (amount->is_number_integer() || amount->is_number_unsigned()) {
    m = amount->is_number_unsigned() && amount->get<uint64_t>() > 1'000'000'000
            ? Result<Money>(Status::InvalidArgument("too large"))
            : Money::Parse(std::to_string(amount->get<int64_t>()));
  }
  if (!m.ok()) {
    f.Fail("monthly_usd",
           amount->is_number_float()
               ? "a fraction of a dollar is given as a decimal string, e.g. \"250.50\""
               : "expected US dollars as a decimal string (\"250.50\") or a whole number");
  } else if (*m <= Money() || *m > Money::FromMicros(int64_t{1'000'000'000} * 1'000'000)) {
    f.Fail("monthly_usd", "must be more than 0 and at most 1000000000");
  } else {
    b.monthly = *m;
  }
}

}  // namespace

Result<Budget> ParseBudget(const json& body) {
  if (!body.is_object()) return Status::InvalidArgument("body: expected a JSON object");
  JsonFields f(body, "body");
  Budget b;
  Read(f, b, false);
  TESSERA_RETURN_IF_ERROR(f.body_error());
  return b;
}

json ToJson(const Budget& b) {
  return {{"monthly_usd", b.monthly.ToString(2)},
          {"hard_stop", b.hard_stop},
          {"set_by", b.by_operator ? "operator" : "tenant"}};
}

Result<Budget> BudgetFromJson(const json& j, const std::string& where) {
  JsonFields f(j, where);
  Budget b;
  Read(f, b, true);
  if (!f.ok()) return Status::DataLoss(f.first_error().message());
  return b;
}

}  // namespace tessera::billing
