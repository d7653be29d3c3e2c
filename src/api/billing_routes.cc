// Billing (docs/billing.md): reservations, usage and invoices. A billing read takes a snapshot on
// the core thread (the ledger's last seq, and what running instances accrued up to that instant)
// and scans the ledger up to that seq on a billing-read thread (core::LedgerReads): what an
// answer sums is what one instant held, and no scan ever runs on the core thread.
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "billing/invoice.h"
#include "billing/meter.h"
#include "billing/recommend.h"
#include "billing/report.h"
#include "common/text.h"
#include "core/core.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// Query parameter `name` as a time: "YYYY-MM-DD" (UTC midnight) or RFC 3339; unchanged when
// absent. InvalidArgument naming the parameter.
Status TimeParam(const Target& target, const char* name, int64_t& out) {
  const std::string* text = target.Param(name);
  if (!text) return Status::Ok();
  if (text->size() == 10) {
    if (auto month = billing::ParseMonth(text->substr(0, 7)); month && (*text)[7] == '-') {
      const std::string& t = *text;
      const bool digits = t[8] >= '0' && t[8] <= '9' && t[9] >= '0' && t[9] <= '9';
      const int day = digits ? (t[8] - '0') * 10 + (t[9] - '0') : 0;
      const int64_t at = *month + (day - 1) * billing::kSecondsPerDay;
      if (day >= 1 && at < billing::NextMonthStart(*month)) {
        out = at;
        return Status::Ok();
      }
    }
  } else if (auto t = ParseRfc3339(*text); t.ok()) {
    out = billing::UnixSeconds(*t);
    return Status::Ok();
  }
  return Status::InvalidArgument(
      fmt::format("query parameter '{}': '{}' is not a date (YYYY-MM-DD) or an RFC 3339 time", name,
                  Quote(*text, 40)));
}

// The most items one usage answer lists; `limit` and `page_token` page through more.
constexpr int64_t kMaxItems = 10'000;

// The longest period one billing read covers: a year and a day (a leap year's whole).
constexpr int64_t kMaxPeriodDays = 366;

// The period [from, to) of `from` and `to` query parameters: by default from the start of the
// month to now; at most kMaxPeriodDays. InvalidArgument naming the parameter.
Status PeriodParams(const Target& target, int64_t now, int64_t& from, int64_t& to) {
  from = billing::MonthStart(now);
  to = now + 1;
  TESSERA_RETURN_IF_ERROR(TimeParam(target, "from", from));
  TESSERA_RETURN_IF_ERROR(TimeParam(target, "to", to));
  if (to <= from) return Status::InvalidArgument("query parameter 'to': must be after 'from'");
  if (to - from > kMaxPeriodDays * billing::kSecondsPerDay) {
    return Status::InvalidArgument(
        fmt::format("query parameter 'to': a period is at most {} days; ask for a longer one in "
                    "parts",
                    kMaxPeriodDays));
  }
  return Status::Ok();
}

// The period as an answer states it: `from` and `to` in RFC 3339.
void PutPeriod(json& body, int64_t from, int64_t to) {
  body["from"] = FormatRfc3339(Time(std::chrono::seconds(from)));
  body["to"] = FormatRfc3339(Time(std::chrono::seconds(to)));
}

// The tenant a billing read is about: a tenant's own; the admin's `?tenant=` (or every tenant
// when `all_allowed`). NotFound for an unknown tenant.
Result<std::string> BilledTenant(const core::State& s, const core::Tenant& caller,
                                 const std::string& asked, bool all_allowed) {
  if (!caller.admin) {
    if (!asked.empty() && asked != caller.id.str()) {
      return Status::NotFound(fmt::format("tenant '{}' not found", Quote(asked)));
    }
    return caller.id.str();
  }
  if (asked.empty()) {
    if (all_allowed) return std::string();
    return Status::InvalidArgument("query parameter 'tenant': the admin names the tenant");
  }
  if (!s.tenants().Find(asked)) {
    return Status::NotFound(fmt::format("tenant '{}' not found", Quote(asked)));
  }
  return asked;
}

bool WantsCsv(const Call& call) {
  const std::string* accept = call.request.Header("accept");
  return accept && accept->find("text/csv") != std::string::npos;
}

HttpResponse CsvResponse(std::string body) {
  HttpResponse out;
  out.content_type = "text/csv; charset=utf-8";
  out.body = std::move(body);
  return out;
}

// What a billing read takes from the core: the snapshot of its lines, and what else its answer
// needs of that instant.
struct BillingRead {
  core::BillingSnapshot snap;
  int64_t now = 0;                       // Unix seconds at the snapshot.
  std::map<std::string, int64_t> fleet;  // The admin's cost report: milli-GPUs per GPU model.
};

// Runs a billing read: `take` on the core thread as the caller (unless `refusal` answers first),
// then `finish` on a billing-read thread, whose answer is sent. A tenant whose earlier reads are
// still waiting gets 503 rather than a longer queue.
void ReadBilling(
    Api& api, std::shared_ptr<Call> call, Status refusal,
    std::function<Result<BillingRead>(core::State&, store::Store&, const core::Tenant&)> take,
    std::function<Result<HttpResponse>(store::LedgerReader&, const BillingRead&)> finish) {
  if (!refusal.ok()) return api.ReplyError(*call, refusal);
  Api* a = &api;
  core::Core* core = &api.core();
  core->Submit<BillingRead>(
      [call, take = std::move(take), core](core::State& s, store::Batch&) -> Result<BillingRead> {
        auto caller = s.tenants().Authenticate(call->token_hash);
        if (!caller.ok()) return caller.status();
        return take(s, core->store(), **caller);
      },
      [a, call, finish = std::move(finish), core](Result<BillingRead> r) {
        // On the core thread: the scan goes to a billing-read thread.
        if (!r.ok()) return a->ReplyError(*call, r.status());
        auto read = std::make_shared<const BillingRead>(std::move(*r));
        const bool queued = core->ReadLedger(
            read->snap.tenant, [a, call, finish, read](store::LedgerReader& reader) {
              Result<HttpResponse> out = Status::Internal("the billing read did not run");
              try {
                out = finish(reader, *read);
              } catch (const std::exception& e) {
                out = Status::Internal(fmt::format("the billing read failed: {}", e.what()));
              }
              if (!out.ok()) return a->ReplyError(*call, out.status());
              a->Reply(*call, std::move(*out));
            });
        if (!queued) {
          a->ReplyError(*call, Status::Unavailable(
                                   "this tenant's earlier billing reads are still running: retry "
                                   "once they are answered"));
        }
      });
}

// The read's lines summed by `by`.
Result<billing::Summary> Summarize(store::LedgerReader& reader, const BillingRead& read,
                                   billing::GroupBy by) {
  billing::Summary sum(by);
  TESSERA_RETURN_IF_ERROR(
      read.snap.Scan(reader, [&](const store::LedgerRecord& l, bool open) { sum.Add(l, open); }));
  return sum;
}

// Keeps the page of `body`'s items after position `after`, at most `limit`, and says where the
// next page starts. The total stays the whole period's.
void PageItems(json& body, int64_t after, size_t limit) {
  json& items = body["items"];
  const size_t begin = std::min(items.size(), static_cast<size_t>(after));
  const size_t end = std::min(items.size(), begin + limit);
  if (begin > 0 || end < items.size()) {
    json page(json::value_t::array);
    for (size_t i = begin; i < end; ++i) page.push_back(std::move(items[i]));
    if (end < items.size()) body["next_page_token"] = PageToken(static_cast<int64_t>(end));
    body["items_total"] = items.size();
    items = std::move(page);
  }
}

// A budget as GET /v1/budgets shows it: its limit, and this month's spend against it.
json BudgetJson(const core::BudgetStatus& st) {
  json j = billing::ToJson(st.budget);
  j["tenant"] = st.tenant;
  j["month"] = st.month;
  j["spent_usd"] = st.use.spent.ToString(2);
  j["used_percent"] = static_cast<double>(st.use.basis_points) / 100;
  json crossed = json::array();
  for (int level : {80, 100}) {
    if (st.use.basis_points >= level * 100) crossed.push_back(level);
  }
  j["thresholds_crossed"] = std::move(crossed);
  j["stopping_new_instances"] = st.use.stopping;
  return j;
}

json ReservationView(const core::State& s, const billing::Reservation& r) {
  json j = billing::ToApiJson(r);
  j["used"] = s.accounts().ReservationUnitsUsed(r.id);
  return j;
}

}  // namespace

void AddBillingRoutes(Api& table) {
  table.Add(
      "POST", "/v1/reservations", Access::kTenant, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<billing::ReservationRequest> req =
            call->body_status.ok() ? billing::ParseReservationRequest(call->body)
                                   : Result<billing::ReservationRequest>(call->body_status);
        if (req.ok()) req->user = call->principal.user;
        // A dry run answers 200 with what would be made, without an id.
        const bool dry_run = req.ok() && req->dry_run;
        api.Run<json>(
            call, req.status(),
            {[req](core::State& s, store::Batch& b, const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(billing::Reservation r,
                                        s.accounts().CreateReservation(caller, *req, b));
               if (!req->dry_run) return ReservationView(s, r);
               json j = billing::ToApiJson(r);
               j.erase("id");
               j["dry_run"] = true;
               return j;
             },
             dry_run ? 200 : 201, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kOwner);
  table.Add("GET", "/v1/reservations", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     json list = json::array();
                     for (const auto& r : s.accounts().ListReservations(caller)) {
                       list.push_back(ReservationView(s, r));
                     }
                     return json{{"reservations", std::move(list)}};
                   },
                   200, Passthrough, nullptr});
            });
  table.Add(
      "GET", "/v1/reservations/{id}", Access::kAnyToken, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        api.Run<json>(
            call, Status::Ok(),
            {[call](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(billing::Reservation r,
                                        s.accounts().GetReservation(caller, call->params[0]));
               return ReservationView(s, r);
             },
             200, Passthrough, nullptr});
      });
  table.Add(
      "DELETE", "/v1/reservations/{id}", Access::kAnyToken, BodyKind::kNone, true,
      [](Api& api, std::shared_ptr<Call> call) {
        api.Run<json>(
            call, Status::Ok(),
            {[call](core::State& s, store::Batch& b, const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(billing::Reservation r,
                                        s.accounts().GetReservation(caller, call->params[0]));
               TESSERA_RETURN_IF_ERROR(s.accounts().DeleteReservation(caller, r.id, b));
               return ReservationView(s, r);
             },
             200, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kOwner);

  // Budgets: a tenant's own, or the admin's for any tenant.
  table.Add(
      "PUT", "/v1/tenants/{id}/budget", Access::kAnyToken, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<billing::Budget> budget = call->body_status.ok()
                                             ? billing::ParseBudget(call->body)
                                             : Result<billing::Budget>(call->body_status);
        api.Run<json>(call, budget.status(),
                      {[call, budget](core::State& s, store::Batch& b,
                                      const core::Tenant& caller) -> Result<json> {
                         TESSERA_RETURN_IF_ERROR(
                             s.accounts().SetBudget(caller, call->params[0], *budget, b).status());
                         for (const core::BudgetStatus& st : s.accounts().Budgets(caller)) {
                           if (st.tenant == call->params[0]) return BudgetJson(st);
                         }
                         return Status::Internal("the budget just set is not listed");
                       },
                       200, Passthrough, [call](const json&) { return call->params[0]; }});
      },
      core::Role::kOwner);
  table.Add(
      "DELETE", "/v1/tenants/{id}/budget", Access::kAnyToken, BodyKind::kNone, true,
      [](Api& api, std::shared_ptr<Call> call) {
        api.Run<json>(
            call, Status::Ok(),
            {[call](core::State& s, store::Batch& b, const core::Tenant& caller) -> Result<json> {
               TESSERA_RETURN_IF_ERROR(s.accounts().DeleteBudget(caller, call->params[0], b));
               return json{{"tenant", call->params[0]}, {"deleted", true}};
             },
             200, Passthrough, [call](const json&) { return call->params[0]; }});
      },
      core::Role::kOwner);
  table.Add("GET", "/v1/budgets", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     json list = json::array();
                     for (const core::BudgetStatus& st : s.accounts().Budgets(caller)) {
                       list.push_back(BudgetJson(st));
                     }
                     return json{{"budgets", std::move(list)}};
                   },
                   200, Passthrough, nullptr});
            });

  // Usage over [from, to): lines are counted where they start, and never cross a UTC day, so
  // day-aligned periods are exact.
  table.Add(
      "GET", "/v1/usage?from&to&group_by&tenant&limit&page_token", Access::kAnyToken,
      BodyKind::kNone, false, [](Api& api, std::shared_ptr<Call> call) {
        int64_t from = 0, to = 0, after = 0;
        size_t limit = 0;
        Status refusal =
            PeriodParams(call->request.parsed, billing::UnixSeconds(api.clock().Now()), from, to);
        if (refusal.ok()) {
          refusal = PageParams(call->request.parsed, after, limit, kMaxItems, kMaxItems);
        }
        billing::GroupBy by = billing::GroupBy::kInstance;
        if (const std::string* g = call->request.parsed.Param("group_by"); g && refusal.ok()) {
          if (auto parsed = billing::ParseGroupBy(*g)) {
            by = *parsed;
          } else {
            refusal = Status::InvalidArgument(fmt::format(
                "query parameter 'group_by': '{}' is not instance, type, billing, day or user",
                Quote(*g, 32)));
          }
        }
        const std::string* tenant_param = call->request.parsed.Param("tenant");
        const std::string asked = tenant_param ? *tenant_param : "";
        const bool csv = WantsCsv(*call);
        ReadBilling(
            api, call, refusal,
            [from, to, asked](core::State& s, store::Store& store,
                              const core::Tenant& caller) -> Result<BillingRead> {
              TESSERA_ASSIGN_OR_RETURN(std::string tenant, BilledTenant(s, caller, asked, true));
              return BillingRead{s.accounts().Snapshot(store, tenant, from, to), 0, {}};
            },
            [by, csv, after, limit](store::LedgerReader& reader,
                                    const BillingRead& read) -> Result<HttpResponse> {
              TESSERA_ASSIGN_OR_RETURN(billing::Summary sum, Summarize(reader, read, by));
              if (csv) return CsvResponse(sum.ToCsv());
              json body = sum.ToJson();
              PageItems(body, after, limit);
              body["tenant"] = read.snap.tenant.empty() ? json(nullptr) : json(read.snap.tenant);
              PutPeriod(body, read.snap.from, read.snap.to);
              return JsonResponse(200, body);
            });
      });

  // The cost report: per tenant and instance type, with utilization and what spot or a
  // reservation would have saved; the admin's also has the idle capacity per GPU model.
  table.Add("GET", "/v1/reports/cost?from&to", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              int64_t from = 0, to = 0;
              Status refusal = PeriodParams(call->request.parsed,
                                            billing::UnixSeconds(api.clock().Now()), from, to);
              const catalog::Catalog* catalog = &api.catalog();
              ReadBilling(
                  api, call, refusal,
                  [from, to](core::State& s, store::Store& store,
                             const core::Tenant& caller) -> Result<BillingRead> {
                    // Nothing is counted before the fleet's first start: not a line, not an
                    // idle GPU-hour, not a reservation's term.
                    const int64_t start = std::max(from, std::min(s.accounts().fleet_since(), to));
                    BillingRead read{s.accounts().Snapshot(
                                         store, caller.admin ? "" : caller.id.str(), start, to),
                                     billing::UnixSeconds(s.clock().Now()),
                                     {}};
                    if (caller.admin) {
                      // Capacity nobody paid for, over the period up to now.
                      for (const catalog::GpuModel& g : s.catalog().gpus()) {
                        if (int64_t milli = s.accounts().FleetMilliOf(g.id); milli > 0)
                          read.fleet[g.id] = milli;
                      }
                    }
                    return read;
                  },
                  [catalog, from](store::LedgerReader& reader,
                                  const BillingRead& read) -> Result<HttpResponse> {
                    // Idle capacity and reservation sizing count the period up to now.
                    billing::CostReport report(catalog, read.snap.from,
                                               std::min(read.snap.to, read.now + 1));
                    TESSERA_RETURN_IF_ERROR(read.snap.Scan(
                        reader, [&](const store::LedgerRecord& l, bool) { report.Add(l); }));
                    if (!read.fleet.empty()) report.SetFleet(read.fleet);
                    json j = report.ToJson();
                    PutPeriod(j, read.snap.from, read.snap.to);
                    j["clamped_start"] = read.snap.from != from;  // `from` is the start counted.
                    return JsonResponse(200, j);
                  });
            });

  // The recommender: ranked offers for a workload, and whether the fleet could place each now.
  table.Add("GET",
            "/v1/recommend?workload&gpu_memory_gib&model_params_b&gpus&hours_per_month&months&"
            "budget_usd&interruptible&nvlink",
            Access::kAnyToken, BodyKind::kNone, false, [](Api& api, std::shared_ptr<Call> call) {
              auto query = billing::ParseRecommendQuery(
                  [call](std::string_view name) { return call->request.parsed.Param(name); });
              api.Run<json>(
                  call, query.status(),
                  {[query](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
                     return billing::ToJson(billing::Recommend(
                         s.catalog(), *query,
                         [&s](const catalog::InstanceType& t, int units) {
                           return s.PlaceableNow(t, units);
                         },
                         [&s](const catalog::InstanceType& t) { return s.OfferedHere(t); }));
                   },
                   200, Passthrough, nullptr});
            });

  // A month's invoice. A closed month's is final: the same lines, so the same bytes, every time.
  table.Add(
      "GET", "/v1/invoices/{month}?tenant", Access::kAnyToken, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::optional<int64_t> month = billing::ParseMonth(call->params[0]);
        Status refusal = month ? Status::Ok()
                               : Status::InvalidArgument(fmt::format("month '{}' is not YYYY-MM",
                                                                     Quote(call->params[0], 16)));
        const std::string* tenant_param = call->request.parsed.Param("tenant");
        const std::string asked = tenant_param ? *tenant_param : "";
        const bool csv = WantsCsv(*call);
        const int64_t from = month.value_or(0);
        ReadBilling(
            api, call, refusal,
            [from, asked](core::State& s, store::Store& store,
                          const core::Tenant& caller) -> Result<BillingRead> {
              TESSERA_ASSIGN_OR_RETURN(std::string tenant, BilledTenant(s, caller, asked, false));
              const int64_t now = billing::UnixSeconds(s.clock().Now());
              if (from > now) {
                return Status::FailedPrecondition(
                    fmt::format("the invoice for {} does not exist yet: the month has not begun",
                                billing::MonthName(from)));
              }
              return BillingRead{
                  s.accounts().Snapshot(store, tenant, from, billing::NextMonthStart(from)),
                  now,
                  {}};
            },
            [csv](store::LedgerReader& reader, const BillingRead& read) -> Result<HttpResponse> {
              TESSERA_ASSIGN_OR_RETURN(billing::Summary sum,
                                       Summarize(reader, read, billing::GroupBy::kInstance));
              if (csv) return CsvResponse(sum.ToCsv());
              json body = sum.ToJson();
              body["tenant"] = read.snap.tenant;
              body["month"] = billing::MonthName(read.snap.from);
              body["status"] = read.snap.to <= read.now ? "final" : "open";
              body["lines"] = sum.lines();
              return JsonResponse(200, body);
            });
      });
}

}  // namespace tessera::api
