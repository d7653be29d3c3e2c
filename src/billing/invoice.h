// Usage reports and invoices: ledger lines summed into line items (docs/billing.md). An item's
// amount is the exact sum of its lines' amounts, and the total the exact sum of the items', so
// nothing is rounded twice. Items come in a fixed order, so the same lines always give the same
// bytes.
// Thread-safety: a Summary is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/money.h"
#include "common/result.h"
#include "store/store.h"

namespace tessera::billing {

enum class GroupBy { kInstance, kType, kBilling, kDay, kUser };
// instance, type, billing, day, user.
std::optional<GroupBy> ParseGroupBy(std::string_view s);

struct Item {
  std::string instance;       // kInstance (reservation lines: "").
  std::string instance_type;  // kInstance, kType.
  std::string billing;        // kInstance, kBilling.
  std::string reservation;    // kInstance.
  std::string day;            // kDay: "YYYY-MM-DD" (UTC).
  std::string user;           // kInstance, kUser: the user who made it ("" when not known).
  std::optional<Money> rate;  // kInstance: per hour (per unit-hour for a reservation).
  int64_t seconds = 0;        // Billed seconds of instances' use.
  // A reservation's term as it passes: units x seconds, used or not. Never in `seconds`, so a
  // sum of seconds is time that ran.
  int64_t reserved_unit_seconds = 0;
  Money amount;
  bool open = false;  // Holds time of an interval still running, so it grows.
};

class Summary {
 public:
  explicit Summary(GroupBy by) : by_(by) {}
  // Adds a line; `open` marks time accrued by an interval still running (not yet in the ledger).
  void Add(const store::LedgerRecord& line, bool open = false);

  std::vector<Item> Items() const;
  Money total() const { return total_; }
  int64_t lines() const { return lines_; }

  // {"items": [...], "total_usd": "..."} plus what the caller adds; money as decimal strings
  // with six decimals.
  nlohmann::json ToJson() const;
  // One header row, one row per item, and a last row "total" with the total; money with six
  // decimals, so the rows add up to the total exactly.
  std::string ToCsv() const;

 private:
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string,
                         std::string, int64_t>;
  // A key's fields as views into a line: looked up without copying a string.
  using KeyView = std::tuple<std::string_view, std::string_view, std::string_view, std::string_view,
                             std::string_view, std::string_view, int64_t>;
  // Orders keys and views alike, so a line's key is looked up as views.
  struct KeyLess {
    using is_transparent = void;
    static KeyView View(const KeyView& k) { return k; }
    static KeyView View(const Key& k) {
      return {std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k),
              std::get<4>(k), std::get<5>(k), std::get<6>(k)};
    }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return View(a) < View(b);
    }
  };
  GroupBy by_;
  std::map<Key, Item, KeyLess> items_;
  Money total_;
  int64_t lines_ = 0;
};

// Money as the reports show it: six decimals, so a sum of shown amounts is the shown total.
inline std::string Usd(Money m) { return m.ToString(6); }

}  // namespace tessera::billing
