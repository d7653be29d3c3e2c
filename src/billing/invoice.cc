#include "billing/invoice.h"

#include <fmt/format.h>

#include <chrono>

namespace tessera::billing {

using nlohmann::json;

std::optional<GroupBy> ParseGroupBy(std::string_view s) {
  if (s == "instance") return GroupBy::kInstance;
  if (s == "type") return GroupBy::kType;
  if (s == "billing") return GroupBy::kBilling;
  if (s == "day") return GroupBy::kDay;
  if (s == "user") return GroupBy::kUser;
  return std::nullopt;
}

namespace {

std::string DayName(int64_t t) {
  const std::chrono::year_month_day d(
      std::chrono::floor<std::chrono::days>(std::chrono::sys_seconds(std::chrono::seconds(t))));
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(d.year()),
                     static_cast<unsigned>(d.month()), static_cast<unsigned>(d.day()));
}

// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

}  // namespace

void Summary::Add(const store::LedgerRecord& l, bool open) {
  std::string day;
  KeyView key;
  switch (by_) {
    case GroupBy::kInstance:
      key = {l.instance, l.instance_type, l.billing, l.reservation, "", l.user, l.rate_micros};
      break;
    case GroupBy::kType:
      key = {"", l.instance_type, "", "", "", "", 0};
      break;
    case GroupBy::kBilling:
      key = {"", "", l.billing, "", "", "", 0};
      break;
    case GroupBy::kDay:
      day = DayName(l.start);
      key = {"", "", "", "", day, "", 0};
      break;
    case GroupBy::kUser:
      key = {"", "", "", "", "", l.user, 0};
      break;
  }
  auto it = items_.find(key);
  const bool fresh = it == items_.end();
  if (fresh) {
    it = items_
             .emplace(Key{std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key),
                          std::get<4>(key), std::get<5>(key), std::get<6>(key)},
                      Item{})
             .first;
  }
  Item& item = it->second;
  if (fresh) {
    item.instance = std::get<0>(key);
    item.instance_type = std::get<1>(key);
    item.billing = std::get<2>(key);
    item.reservation = std::get<3>(key);
    item.day = std::get<4>(key);
    item.user = std::get<5>(key);
    if (by_ == GroupBy::kInstance) item.rate = Money::FromMicros(l.rate_micros);
  }
  // A reservation's own line names no instance.
  (l.instance.empty() && !l.reservation.empty() ? item.reserved_unit_seconds : item.seconds) +=
      l.seconds;
  item.amount += Money::FromMicros(l.amount_micros);
  item.open = item.open || open;
  total_ += Money::FromMicros(l.amount_micros);
  ++lines_;
}

std::vector<Item> Summary::Items() const {
  std::vector<Item> out;
  out.reserve(items_.size());
  for (const auto& [key, item] : items_) out.push_back(item);
  return out;
}

json Summary::ToJson() const {
  json items = json::array();
  for (const auto& [key, i] : items_) {
    json j;
    switch (by_) {
      case GroupBy::kInstance:
        j = {{"instance", i.instance}, {"instance_type", i.instance_type},
             {"billing", i.billing},   {"reservation", i.reservation},
             {"user", i.user},         {"rate_usd_per_hour", Usd(*i.rate)}};
        break;
      case GroupBy::kUser:
        j = {{"user", i.user}};
        break;
      case GroupBy::kType:
        j = {{"instance_type", i.instance_type}};
        break;
      case GroupBy::kBilling:
        j = {{"billing", i.billing}};
        break;
      case GroupBy::kDay:
        j = {{"day", i.day}};
        break;
    }
    j["seconds"] = i.seconds;
    if (i.reserved_unit_seconds > 0) j["reserved_unit_seconds"] = i.reserved_unit_seconds;
    j["amount_usd"] = Usd(i.amount);
    if (i.open) j["open"] = true;
    items.push_back(std::move(j));
  }
  return {{"items", std::move(items)}, {"total_usd", Usd(total_)}};
}

std::string Summary::ToCsv() const {
  std::string out;
  switch (by_) {
    case GroupBy::kInstance:
      out =
          "instance,instance_type,billing,reservation,user,rate_usd_per_hour,seconds,reserved_unit_"
          "seconds,amount_usd\n";
      break;
    case GroupBy::kUser:
      out = "user,seconds,reserved_unit_seconds,amount_usd\n";
      break;
    case GroupBy::kType:
      out = "instance_type,seconds,reserved_unit_seconds,amount_usd\n";
      break;
    case GroupBy::kBilling:
      out = "billing,seconds,reserved_unit_seconds,amount_usd\n";
      break;
    case GroupBy::kDay:
      out = "day,seconds,reserved_unit_seconds,amount_usd\n";
      break;
  }
  for (const auto& [key, i] : items_) {
    switch (by_) {
      case GroupBy::kInstance:
        out += fmt::format("{},{},{},{},{},{},", CsvField(i.instance), CsvField(i.instance_type),
                           CsvField(i.billing), CsvField(i.reservation), CsvField(i.user),
                           Usd(*i.rate));
        break;
      case GroupBy::kUser:
        out += CsvField(i.user) + ",";
        break;
      case GroupBy::kType:
        out += CsvField(i.instance_type) + ",";
        break;
      case GroupBy::kBilling:
        out += CsvField(i.billing) + ",";
        break;
      case GroupBy::kDay:
        out += i.day + ",";
        break;
    }
    out += fmt::format("{},{},{}\n", i.seconds, i.reserved_unit_seconds, Usd(i.amount));
  }
  const size_t columns = by_ == GroupBy::kInstance ? 9 : 4;
  out += "total" + std::string(columns - 1, ',') + Usd(total_) + "\n";
  return out;
}

}  // namespace tessera::billing
