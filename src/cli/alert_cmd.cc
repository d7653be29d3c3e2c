// `tessera alerts ...`: alert rules and the alerts they raise (docs/alerts.md).
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

void PrintAlerts(const json& alerts) {
  Table t({"STATE", "ALERT", "SEVERITY", "NODE", "GPU", "INSTANCE", "VALUE", "SINCE", "SUMMARY"});
  for (const json& a : alerts) {
    const json& l = a["labels"];
    t.AddRow({Str(a, "state"), Str(l, "alertname"), Str(l, "severity"), Str(l, "Hostname"),
              Str(l, "gpu"), Str(l, "tessera_instance"),
              a["value"].is_number() ? fmt::format("{:g}", a["value"].get<double>()) : "-",
              a["fired_at"].is_string() ? Str(a, "fired_at") : Str(a, "active_at"),
              Str(a["annotations"], "summary")});
  }
  t.Print(std::cout);
}

void PrintRules(const json& rules) {
  Table t({"ID", "NAME", "CONDITION", "FOR", "SEVERITY", "MATCHERS", "NOTIFY"});
  for (const json& r : rules) {
    std::vector<std::string> matchers, notify;
    for (const auto& [k, v] : r["matchers"].items())
      matchers.push_back(k + "=" + v.get<std::string>());
    for (const json& n : r["notify"])
      notify.push_back(n.begin().key() + ":" + n.begin()->get<std::string>());
    t.AddRow(
        {Str(r, "id"), Str(r, "name"),
         fmt::format("{} {} {:g}", Str(r, "metric"), Str(r, "op"), r["threshold"].get<double>()),
         fmt::format("{}s", r["for_seconds"].get<int64_t>()), Str(r, "severity"),
         matchers.empty() ? "-" : fmt::format("{}", fmt::join(matchers, ",")),
         notify.empty() ? "-" : fmt::format("{}", fmt::join(notify, " "))});
  }
  t.Print(std::cout);
}

// A billing report's items as a table: the columns its grouping gave.

}  // namespace

void RegisterAlerts(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* group = app.add_subcommand("alerts", "Alerts and alert rules (docs/alerts.md)");
  group->require_subcommand(1);
  CLI::App* list = group->add_subcommand("list", "List alerts (a tenant sees its own)");
  AddCommon(list, *f);
  auto state = std::make_shared<std::string>();
  list->add_option("--state", *state, "pending, firing or resolved");
  list->callback([f, state, &ctx] {
    const std::string path = "/v1/alerts" + (state->empty() ? "" : "?state=" + Encode(*state));
    ctx.exit_code =
        Show(*f, Call(*f, "GET", path), [](const json& j) { PrintAlerts(j["alerts"]); });
  });

  CLI::App* rules = group->add_subcommand("rules", "Create, list and delete alert rules");
  rules->require_subcommand(1);
  CLI::App* rlist = rules->add_subcommand("list", "List alert rules");
  AddCommon(rlist, *f);
  rlist->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/alert-rules"), [](const json& j) { PrintRules(j["rules"]); });
  });
  struct RuleFlags {
    std::string name, metric, op, severity = "warning", summary;
    double threshold = 0;
    std::string for_text = "0", keep_firing_for_text = "0";
    std::vector<std::string> matchers, webhooks, emails;
  };
  auto r = std::make_shared<RuleFlags>();
  CLI::App* create = rules->add_subcommand("create", "Create an alert rule");
  AddCommon(create, *f);
  create->add_option("--name", r->name, "The alertname")->required();
  create->add_option("--metric", r->metric, "A series name, e.g. DCGM_FI_DEV_GPU_TEMP")->required();
  create->add_option("--op", r->op, "> >= < <= == !=")->required();
  create->add_option("--threshold", r->threshold, "The value compared with")->required();
  create->add_option("--for", r->for_text,
                     "How long the condition must hold before firing: 90s, 5m, 1h (a bare number "
                     "is seconds)");
  create->add_option("--keep-firing-for", r->keep_firing_for_text,
                     "How long an alert keeps firing after the condition stops holding (90s, 5m)");
  create->add_option("--severity", r->severity, "critical, warning or info");
  create->add_option("--summary", r->summary,
                     "Annotation; may use {{ $value }}, {{ $labels.gpu }}");
  create->add_option("-m,--match", r->matchers, "LABEL=VALUE the series must carry (repeatable)");
  create->add_option("--webhook", r->webhooks, "Webhook URL to notify (repeatable)");
  create->add_option("--email", r->emails, "Address to email (repeatable; needs server --smtp)");
  create->callback([f, r, &ctx] {
    auto matchers = KeyValues(r->matchers, "--match");
    auto for_s = WholeSeconds(r->for_text, "--for");
    auto keep_s = WholeSeconds(r->keep_firing_for_text, "--keep-firing-for");
    for (const Status& s : {for_s.status(), keep_s.status()}) {
      if (!s.ok()) std::cerr << "tessera: " << EscapeForTerminal(s.message()) << "\n";
    }
    if (!matchers || !for_s.ok() || !keep_s.ok()) {
      ctx.exit_code = kExitUsage;
      return;
    }
    json notify = json::array();
    for (const std::string& w : r->webhooks) notify.push_back({{"webhook", w}});
    for (const std::string& e : r->emails) notify.push_back({{"email", e}});
    json body = {
        {"name", r->name},           {"metric", r->metric},   {"op", r->op},
        {"threshold", r->threshold}, {"for_seconds", *for_s}, {"keep_firing_for_seconds", *keep_s},
        {"severity", r->severity},   {"matchers", *matchers}, {"notify", notify}};
    if (!r->summary.empty()) body["annotations"] = {{"summary", r->summary}};
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/alert-rules", &body),
                         [](const json& j) { PrintRules(json::array({j})); });
  });
  auto id = std::make_shared<std::string>();
  CLI::App* del = rules->add_subcommand("delete", "Delete an alert rule (its alerts resolve)");
  AddCommon(del, *f);
  del->add_option("ID", *id, "The rule's id")->required();
  del->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "DELETE", "/v1/alert-rules/" + Encode(*id)),
                         [](const json& j) { std::cout << "deleted " << Str(j, "id") << "\n"; });
  });
}

// A duration flag in whole seconds: "90s", "5m", "1h", or a bare number of seconds (as these
// flags always took).
Result<int64_t> WholeSeconds(const std::string& text, const std::string& flag) {
  if (!text.empty() && text.size() <= 9 &&
      text.find_first_not_of("0123456789") == std::string::npos) {
    return std::stoll(text);
  }
  TESSERA_ASSIGN_OR_RETURN(Duration d, ParseDuration(text, flag));
  if (d % std::chrono::seconds(1) != Duration::zero()) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a whole number of seconds", flag, text));
  }
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace tessera::cli
