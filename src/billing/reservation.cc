#include "billing/reservation.h"

#include <fmt/format.h>

#include <algorithm>

#include "billing/meter.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::billing {

using nlohmann::json;

std::optional<int64_t> TermSeconds(std::string_view term) {
  if (term == "1y") return 365 * kSecondsPerDay;
  if (term == "3y") return 3 * 365 * kSecondsPerDay;
  return std::nullopt;
}

namespace {

std::string Timestamp(int64_t t) { return FormatRfc3339(Time(std::chrono::seconds(t))); }

}  // namespace

Result<ReservationRequest> ParseReservationRequest(const json& body) {
  if (!body.is_object()) return Status::InvalidArgument("body: expected a JSON object");
  JsonFields f(body, "body");
  f.RejectUnknown({"instance_type", "count", "term", "start", "dry_run"});
  ReservationRequest r;
  r.instance_type = f.String("instance_type");
  r.count = static_cast<int>(f.Int("count", 1, kMaxReservationUnits));
  r.term = f.String("term");
  if (f.Get("term", false) && f.ok() && !TermSeconds(r.term)) {
    f.Fail("term", fmt::format("'{}' is not 1y or 3y", Quote(r.term, 16)));
  }
  const std::string start = f.String("start", false);
  if (!start.empty()) {
    auto t = ParseRfc3339(start);
    if (t.ok()) {
      r.start = UnixSeconds(*t);
    } else {
      f.Fail("start", fmt::format("'{}' is not an RFC 3339 time", Quote(start, 40)));
    }
  }
  r.dry_run = f.Bool("dry_run", false);
  TESSERA_RETURN_IF_ERROR(f.body_error());
  return r;
}

Money Reservation::commitment() const {
  return rate.MulDiv(static_cast<int64_t>(count) * (end - start), 3600);
}

json ToApiJson(const Reservation& r) {
  json j = ToJson(r);
  j["commitment_usd"] = r.commitment().RoundedToCents().ToString(2);
  j["cancellable_until"] = Timestamp(r.created_at + kCancelWindowSeconds);
  return j;
}

json ToJson(const Reservation& r) {
  json j = {{"id", r.id},
            {"tenant", r.tenant},
            {"instance_type", r.instance_type},
            {"count", r.count},
            {"term", r.term},
            {"start", Timestamp(r.start)},
            {"end", Timestamp(r.end)},
            {"rate_usd_per_hour", r.rate.ToString(2)},
            {"created_at", Timestamp(r.created_at)}};
  if (!r.created_by.empty()) j["created_by"] = r.created_by;
  return j;
}

Result<Reservation> ReservationFromJson(const json& j, const std::string& where) {
  JsonFields f(j, where);
  Reservation r;
  r.id = f.String("id");
  r.tenant = f.String("tenant");
  r.instance_type = f.String("instance_type");
  r.count = static_cast<int>(f.Int("count", 1, kMaxReservationUnits));
  r.term = f.String("term");
  auto time = [&](const char* key) -> int64_t {
    const std::string text = f.String(key);
    auto t = ParseRfc3339(text);
    if (!text.empty() && !t.ok()) f.Fail(key, "not an RFC 3339 time");
    return t.ok() ? UnixSeconds(*t) : 0;
  };
  r.start = time("start");
  r.end = time("end");
  r.created_at = time("created_at");
  r.created_by = f.String("created_by", false);
  auto rate = Money::Parse(f.String("rate_usd_per_hour"));
  if (rate.ok()) {
    r.rate = *rate;
  } else if (f.ok()) {
    f.Fail("rate_usd_per_hour", rate.status().message());
  }
  if (f.ok() && (!TermSeconds(r.term) || r.end <= r.start)) f.Fail("term", "inconsistent term");
  if (!f.ok()) return Status::DataLoss(f.first_error().message());
  return r;
}

void ReservationLines(const Reservation& r, int64_t from, int64_t to,
                      std::vector<store::LedgerRecord>& out, int64_t until) {
  for (int64_t month = MonthStart(std::max(r.start, from)); month < std::min(r.end, to);
       month = NextMonthStart(month)) {
    const int64_t start = std::max(month, r.start);
    const int64_t end = std::min({NextMonthStart(month), r.end, until});
    if (start < from || start >= to || end <= start) continue;
    store::LedgerRecord l;
    l.tenant = r.tenant;
    l.instance_type = r.instance_type;
    l.billing = "reserved";
    l.reservation = r.id;
    l.start = start;
    l.end = end;
    l.seconds = (end - start) * r.count;
    l.rate_micros = r.rate.micros();
    l.amount_micros = Amount(r.rate, l.seconds).micros();
    l.note = fmt::format("reservation: {} x {} for {}", r.count, r.instance_type, r.term);
    l.user = r.created_by;
    out.push_back(std::move(l));
  }
}

}  // namespace tessera::billing
