// Reservations (docs/billing.md): a tenant commits to `count` units of an instance type for a
// 1- or 3-year term at the catalog's reserved rate, and pays for the whole term, used or not, in
// monthly lines. Instances created with `billing: reserved` draw on a free unit of a matching
// active reservation; their own usage lines are then at rate zero.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/money.h"
#include "common/result.h"
#include "store/store.h"

namespace tessera::billing {

inline constexpr int kMaxReservationUnits = 10'000;
// A reservation may be cancelled at no cost for this long after it was made, even once begun.
inline constexpr int64_t kCancelWindowSeconds = 300;

struct Reservation {
  std::string id;      // "resv-000001".
  std::string tenant;  // Tenant id.
  std::string instance_type;
  int count = 0;
  std::string term;   // "1y" or "3y".
  int64_t start = 0;  // Unix seconds; the term is [start, end).
  int64_t end = 0;
  Money rate;  // Per unit-hour, the catalog's reserved rate for the term when it was made.
  int64_t created_at = 0;
  std::string created_by = "";  // The user who made it; "" when not known.
  // Derived from the catalog, not stored: the GPU model and milli-GPU one unit holds.
  std::string gpu_model;
  int64_t unit_milli = 0;

  bool active(int64_t now) const { return start <= now && now < end; }
  // What the whole term costs: every unit-hour of it at the rate.
  Money commitment() const;
};

// A term's length: 365 days a year, as the clouds count a reservation's term.
std::optional<int64_t> TermSeconds(std::string_view term);

// What POST /v1/reservations takes: {instance_type, count, term, start?, dry_run?} (count and
// term required; start: RFC 3339, default now; dry_run: price it, make nothing). Errors name the
// field.
struct ReservationRequest {
  std::string instance_type;
  int count = 0;
  std::string term;
  std::optional<int64_t> start;
  bool dry_run = false;
  std::string user = "";  // Who asks (not in the body: the caller's user).
};
Result<ReservationRequest> ParseReservationRequest(const nlohmann::json& body);

// Its stored form. The API's adds commitment_usd and cancellable_until (ToApiJson).
nlohmann::json ToJson(const Reservation& r);
nlohmann::json ToApiJson(const Reservation& r);
// DataLoss naming `where` when the stored form is malformed.
Result<Reservation> ReservationFromJson(const nlohmann::json& j, const std::string& where);

// Appends the reservation's monthly lines whose start lies in [from, to): for each calendar month
// of the term, the unit-seconds of the term inside it (count x seconds) at the unit-hour rate,
// counted only up to `until` (now, for what is owed: a term is billed as it passes).
void ReservationLines(const Reservation& r, int64_t from, int64_t to,
                      std::vector<store::LedgerRecord>& out, int64_t until = INT64_MAX);

}  // namespace tessera::billing
