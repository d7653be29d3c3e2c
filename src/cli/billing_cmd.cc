// `tessera usage|invoices|reservations|budgets|reports|recommend ...`: what tenants spend and
// what to rent (docs/billing.md).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/client_cmd.h"
#include "cli/table.h"
#include "common/json.h"
#include "common/server_list.h"
#include "common/text.h"

namespace tessera::cli {

namespace {

using nlohmann::json;

void PrintReport(const json& body) {
  static const std::vector<std::pair<const char*, const char*>> kColumns = {
      {"instance", "INSTANCE"},       {"instance_type", "TYPE"}, {"billing", "BILLING"},
      {"reservation", "RESERVATION"}, {"user", "USER"},          {"day", "DAY"},
      {"rate_usd_per_hour", "RATE/H"}};
  const json& items = body["items"];
  if (items.empty()) {
    // An empty table with a total of 0 reads as a broken report: say what it means.
    std::cout << "nothing was billed"
              << (body.contains("month")  ? " in " + Str(body, "month")
                  : body.contains("from") ? " from " + Str(body, "from") + " to " + Str(body, "to")
                                          : std::string())
              << " (total " << Str(body, "total_usd") << " USD)\n";
    return;
  }
  std::vector<std::string> header;
  std::vector<const char*> keys;
  for (const auto& [key, title] : kColumns) {
    if (!items.empty() && items[0].contains(key)) {
      header.emplace_back(title);
      keys.push_back(key);
    }
  }
  // Seconds of use; a reservation's term, used or not, in a column of its own where there is one.
  const bool reserved = std::any_of(items.begin(), items.end(), [](const json& i) {
    return i.contains("reserved_unit_seconds");
  });
  header.emplace_back("SECONDS USED");
  if (reserved) header.emplace_back("RESERVED UNIT-SECONDS");
  header.emplace_back("AMOUNT (USD)");
  Table t(header);
  for (const json& i : items) {
    std::vector<std::string> row;
    for (const char* key : keys) row.push_back(Str(i, key));
    row.push_back(std::to_string(i["seconds"].get<int64_t>()));
    if (reserved) row.push_back(std::to_string(i.value("reserved_unit_seconds", int64_t{0})));
    row.push_back(Str(i, "amount_usd") + (i.value("open", false) ? " (running)" : ""));
    t.AddRow(std::move(row));
  }
  std::vector<std::string> total(header.size(), "");
  total[0] = "TOTAL";
  total.back() = Str(body, "total_usd");
  t.AddRow(std::move(total));
  t.Print(std::cout);
}

// A billing report: a table, the JSON, or the server's CSV as it is.
int ShowReport(const ClientFlags& f, const std::string& path) {
  if (f.output == "csv") {
    auto r = Call(f, "GET", path, nullptr, "text/csv");
    if (!r) return kExitFailure;
    std::cout << r->text;
    return kExitOk;
  }
  return Show(f, Call(f, "GET", path), PrintReport);
}

void PrintReservations(const json& list) {
  Table t({"ID", "TYPE", "COUNT", "USED", "TERM", "START", "END", "RATE/H", "COMMITMENT (USD)",
           "CANCELLABLE UNTIL"});
  for (const json& r : list) {
    t.AddRow({r.value("dry_run", false) ? "(dry run)" : Str(r, "id"), Str(r, "instance_type"),
              std::to_string(r.value("count", 0)), std::to_string(r.value("used", 0)),
              Str(r, "term"), Str(r, "start"), Str(r, "end"), Str(r, "rate_usd_per_hour"),
              Str(r, "commitment_usd"), Str(r, "cancellable_until")});
  }
  t.Print(std::cout);
}

void PrintBudgets(const json& list) {
  Table t({"TENANT", "MONTH", "BUDGET (USD)", "SPENT (USD)", "USED", "HARD STOP"});
  for (const json& b : list) {
    t.AddRow({Str(b, "tenant"), Str(b, "month"), Str(b, "monthly_usd"), Str(b, "spent_usd"),
              fmt::format("{:.2f}%", b["used_percent"].get<double>()),
              b["hard_stop"].get<bool>() ? "yes" : "no"});
  }
  t.Print(std::cout);
}

// GET /v1/reports/cost as tables: per tenant (by name, for the admin), per instance type with the
// reservation that would have paid, and the admin's idle capacity per GPU model.
void PrintCostReport(const json& r, const std::map<std::string, std::string>& names) {
  std::cout << fmt::format(
      "cost report from {} to {}{}\n", Str(r, "from"), Str(r, "to"),
      r.value("clamped_start", false) ? " (from the fleet's first start)" : "");
  auto util = [](const json& row) {
    const json& v = row.value("mean_gpu_util_percent", json());
    return v.is_number() ? fmt::format("{:.1f}%", v.get<double>()) : std::string("-");
  };
  const json tenants = r.value("tenants", json::array()),
             types = r.value("instance_types", json::array());
  if (tenants.empty()) {
    std::cout << "nothing was billed in this period\n";
  } else {
    std::cout << "\nby tenant\n";
    Table t({"TENANT", "GPU-HOURS", "COST (USD)", "MEAN UTIL", "USD/UTILIZED GPU-H",
             "SPOT WOULD SAVE"});
    for (const json& row : tenants) {
      t.AddRow({TenantName(names, Str(row, "tenant")), Str(row, "gpu_hours"), Str(row, "cost_usd"),
                util(row), Str(row, "cost_per_utilized_gpu_hour_usd"),
                Str(row, "spot_would_save_usd")});
    }
    t.Print(std::cout);
    std::cout << "\nby instance type\n";
    Table k({"TYPE", "GPU-HOURS", "COST (USD)", "MEAN UTIL", "USD/UTILIZED GPU-H",
             "SPOT WOULD SAVE", "1Y RESERVATION"});
    for (const json& row : types) {
      const json& resv = row.value("reservation_1y", json());
      k.AddRow({Str(row, "instance_type"), Str(row, "gpu_hours"), Str(row, "cost_usd"), util(row),
                Str(row, "cost_per_utilized_gpu_hour_usd"), Str(row, "spot_would_save_usd"),
                resv.is_object() ? fmt::format("{} units: {} USD, saves {}", resv.value("units", 0),
                                               Str(resv, "cost_usd"), Str(resv, "saves_usd"))
                                 : "-"});
    }
    k.Print(std::cout);
  }
  if (r.contains("idle")) {
    std::cout << "\nidle capacity\n";
    Table i({"GPU MODEL", "GPUS", "IDLE GPU-HOURS", "IDLE COST (USD)"});
    for (const json& row : r["idle"]) {
      i.AddRow({Str(row, "gpu_model"), Gpus(row.value("gpus", json())), Str(row, "idle_gpu_hours"),
                Str(row, "idle_cost_usd")});
    }
    i.Print(std::cout);
  }
}

}  // namespace

void RegisterBilling(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct UsageFlags {
    std::string from, to, group_by = "instance", tenant;
  };
  auto u = std::make_shared<UsageFlags>();
  CLI::App* usage = app.add_subcommand("usage", "What was billed over a period (docs/billing.md)");
  AddCommon(usage, *f, /*csv=*/true);
  usage->add_option("--from", u->from, "YYYY-MM-DD or RFC 3339 (default: this month's start)");
  usage->add_option("--to", u->to, "YYYY-MM-DD or RFC 3339, excluded (default: now)");
  usage->add_option("--group-by", u->group_by, "instance, type, billing, day or user")
      ->check(CLI::IsMember({"instance", "type", "billing", "day", "user"}));
  usage->add_option("--tenant", u->tenant, "The tenant's id (admin; default: every tenant)");
  usage->callback([f, u, &ctx] {
    std::string path = "/v1/usage?group_by=" + Encode(u->group_by);
    if (!u->from.empty()) path += "&from=" + Encode(u->from);
    if (!u->to.empty()) path += "&to=" + Encode(u->to);
    if (!u->tenant.empty()) path += "&tenant=" + Encode(u->tenant);
    ctx.exit_code = ShowReport(*f, path);
  });

  auto period = std::make_shared<UsageFlags>();
  CLI::App* reports = app.add_subcommand("reports", "Reports over a period (docs/billing.md)");
  reports->require_subcommand(1);
  CLI::App* cost = reports->add_subcommand(
      "cost",
      "Cost, utilization and savings per tenant and instance type (the admin's: idle GPUs)");
  AddCommon(cost, *f);
  cost->add_option("--from", period->from, "YYYY-MM-DD or RFC 3339 (default: this month's start)");
  cost->add_option("--to", period->to, "YYYY-MM-DD or RFC 3339, excluded (default: now)");
  cost->callback([f, period, &ctx] {
    std::string path = "/v1/reports/cost";
    std::string sep = "?";
    for (const auto& [key, value] : {std::pair{"from", period->from}, {"to", period->to}}) {
      if (value.empty()) continue;
      path += sep + key + "=" + Encode(value);
      sep = "&";
    }
    const auto answer = Call(*f, "GET", path);
    const auto names = answer && f->output == "table" ? TenantNamesForAdmin(*f)
                                                      : std::map<std::string, std::string>{};
    ctx.exit_code = Show(*f, answer, [&names](const json& j) { PrintCostReport(j, names); });
  });

  CLI::App* invoices = app.add_subcommand("invoices", "Monthly invoices");
  invoices->require_subcommand(1);
  auto month = std::make_shared<std::string>();
  auto tenant = std::make_shared<std::string>();
  CLI::App* show = invoices->add_subcommand("show", "Show a month's invoice");
  AddCommon(show, *f, /*csv=*/true);
  show->add_option("MONTH", *month, "YYYY-MM")->required();
  show->add_option("--tenant", *tenant, "The tenant's id (admin)");
  show->callback([f, month, tenant, &ctx] {
    ctx.exit_code = ShowReport(*f, "/v1/invoices/" + Encode(*month) +
                                       (tenant->empty() ? "" : "?tenant=" + Encode(*tenant)));
  });

  CLI::App* resv = app.add_subcommand("reservations", "Reserve capacity for 1 or 3 years");
  resv->require_subcommand(1);
  struct ReserveFlags {
    std::string type, term, start;
    int count = 0;
    bool dry_run = false;
  };
  auto r = std::make_shared<ReserveFlags>();
  CLI::App* create = resv->add_subcommand("create", "Reserve units of an instance type");
  AddCommon(create, *f);
  create->add_option("--type", r->type, "Instance type, e.g. gpu.1xh100")->required();
  create->add_option("--count", r->count, "Units")->required()->check(CLI::Range(1, 10'000));
  create->add_option("--term", r->term, "1y or 3y")->required()->check(CLI::IsMember({"1y", "3y"}));
  create->add_option("--start", r->start, "RFC 3339 (default: now)");
  create->add_flag("--dry-run", r->dry_run,
                   "Show the price and the whole term's commitment; reserve nothing");
  create->callback([f, r, &ctx] {
    json body = {{"instance_type", r->type}, {"count", r->count}, {"term", r->term}};
    if (!r->start.empty()) body["start"] = r->start;
    if (r->dry_run) body["dry_run"] = true;
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/reservations", &body),
                         [](const json& j) { PrintReservations(json::array({j})); });
  });
  CLI::App* list = resv->add_subcommand("list", "List reservations");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/reservations"),
                         [](const json& j) { PrintReservations(j["reservations"]); });
  });
  auto id = std::make_shared<std::string>();
  CLI::App* del = resv->add_subcommand("delete", "Cancel a reservation before its start");
  AddCommon(del, *f);
  del->add_option("ID", *id, "The reservation's id")->required();
  del->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "DELETE", "/v1/reservations/" + Encode(*id)),
                         [](const json& j) { std::cout << "cancelled " << Str(j, "id") << "\n"; });
  });

  CLI::App* budget = app.add_subcommand("budgets", "Monthly budgets and their spend");
  budget->require_subcommand(1);
  CLI::App* blist = budget->add_subcommand("list", "Budgets and this month's spend");
  AddCommon(blist, *f);
  blist->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/budgets"), [](const json& j) { PrintBudgets(j["budgets"]); });
  });
  struct BudgetFlags {
    std::string tenant, monthly;
    bool hard_stop = false;
  };
  auto b = std::make_shared<BudgetFlags>();
  CLI::App* set = budget->add_subcommand("set", "Set a tenant's monthly budget");
  AddCommon(set, *f);
  set->add_option("TENANT", b->tenant, "The tenant's id")->required();
  set->add_option("--monthly-usd", b->monthly, "e.g. 250 or 250.50")->required();
  set->add_flag("--hard-stop", b->hard_stop, "Refuse new on-demand and spot work once spent");
  set->callback([f, b, &ctx] {
    json body = {{"monthly_usd", b->monthly}, {"hard_stop", b->hard_stop}};
    ctx.exit_code = Show(*f, Call(*f, "PUT", "/v1/tenants/" + Encode(b->tenant) + "/budget", &body),
                         [](const json& j) { PrintBudgets(json::array({j})); });
  });
  CLI::App* unset = budget->add_subcommand("delete", "Remove a tenant's monthly budget");
  AddCommon(unset, *f);
  unset->add_option("TENANT", b->tenant, "The tenant's id")->required();
  unset->callback([f, b, &ctx] {
    ctx.exit_code = Show(
        *f, Call(*f, "DELETE", "/v1/tenants/" + Encode(b->tenant) + "/budget"), [&b](const json&) {
          std::cout << "budget of " << EscapeForTerminal(b->tenant) << " removed\n";
        });
  });
}

void RegisterRecommend(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct Flags {
    std::string workload = "training", memory, params, gpus, hours, months, budget;
    bool interruptible = false, nvlink = false;
  };
  auto r = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "recommend", "Which instance type and billing mode to rent for a workload (docs/billing.md)");
  AddCommon(cmd, *f);
  cmd->add_option("--workload", r->workload, "training, fine-tuning, inference, rendering or hpc")
      ->check(CLI::IsMember({"training", "fine-tuning", "inference", "rendering", "hpc"}));
  cmd->add_option("--gpu-memory-gib", r->memory, "Memory a GPU needs, in GiB");
  cmd->add_option("--model-params-b", r->params, "The model's size, in billions of parameters");
  cmd->add_option("--gpus", r->gpus, "GPUs (default: as many as the memory needs)");
  cmd->add_option("--hours-per-month", r->hours, "Hours of use a month (default 730)");
  cmd->add_option("--months", r->months, "The horizon, in months (default 1)");
  cmd->add_option("--budget-usd", r->budget, "The most to pay a month");
  cmd->add_flag("--interruptible", r->interruptible, "The work survives preemption (spot)");
  cmd->add_flag("--nvlink", r->nvlink, "All GPUs on one NVLink island");
  cmd->callback([f, r, &ctx] {
    std::string path = "/v1/recommend?workload=" + Encode(r->workload);
    for (const auto& [name, value] : {std::pair{"gpu_memory_gib", r->memory},
                                      {"model_params_b", r->params},
                                      {"gpus", r->gpus},
                                      {"hours_per_month", r->hours},
                                      {"months", r->months},
                                      {"budget_usd", r->budget}}) {
      if (!value.empty()) path += fmt::format("&{}={}", name, Encode(value));
    }
    if (r->interruptible) path += "&interruptible=true";
    if (r->nvlink) path += "&nvlink=true";
    auto answer = Call(*f, "GET", path);
    if (!answer) {
      ctx.exit_code = kExitFailure;
      return;
    }
    const json& offers = answer->body["offers"];
    if (offers.empty()) {
      std::cerr << "tessera: nothing fits: " << EscapeForTerminal(Str(answer->body, "why_none"))
                << "\n";
      ctx.exit_code = kExitFailure;
      return;
    }
    ctx.exit_code = Show(*f, answer, [](const json& j) {
      Table t({"TYPE", "BILLING", "GPUS", "MONTHLY (USD)", "PER TFLOPS-H", "NOW", "WHY"});
      for (const json& o : j["offers"]) {
        t.AddRow({Str(o, "instance_type"), Str(o, "billing"), std::to_string(o["gpus"].get<int>()),
                  Str(o, "monthly_usd"), Str(o, "per_tflops_hour_usd"),
                  !o.value("offered_here", true)   ? "not here"
                  : o["placeable_now"].get<bool>() ? "yes"
                                                   : "waits",
                  Str(o, "reason")});
      }
      t.Print(std::cout);
    });
  });
}

}  // namespace tessera::cli
