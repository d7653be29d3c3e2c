// `tessera plan`, `tessera apply`, `tessera destroy` and `tessera stacks ...`: declarative stacks
// (docs/stacks.md). The file is read here (cli/stack_file.h); the server plans and applies.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/client_cmd.h"
#include "cli/stack_file.h"
#include "cli/table.h"
#include "common/files.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::cli {

namespace {

using nlohmann::json;

// Terraform's -detailed-exitcode: 0 nothing to do, 2 changes; 1 is an error.
constexpr int kExitChanges = 2;

struct StackFlags {
  ClientFlags client;
  std::string file, stack, plan_out, plan_in;
  std::vector<std::string> vars;
  bool yes = false, adopt = false;
};

// The stack's name: --stack, else the file's.
std::string NameOf(const StackFlags& f) {
  return !f.stack.empty() ? f.stack : DefaultStackName(f.file);
}

std::string Sign(const std::string& action) {
  if (action == "create") return "+";
  if (action == "update" || action == "adopt") return "~";
  if (action == "replace") return "-/+";
  if (action == "delete" || action == "forget") return "-";
  return " ";
}

// One line of a plan: what happens to the object, and why.
std::string Describe(const json& o) {
  const std::string action = o.value("action", "");
  std::string what;
  if (action == "create") {
    what = "create";
  } else if (action == "update") {
    what = "update in place";
    std::vector<std::string> fields;
    if (o.contains("changed")) fields = o["changed"].get<std::vector<std::string>>();
    for (const json& d : o.value("drift", json::array())) {
      const std::string field = Str(d, "field");
      if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
        fields.push_back(field + " (set back)");
      }
    }
    if (!fields.empty()) what += fmt::format(": {}", fmt::join(fields, ", "));
  } else if (action == "replace") {
    what = fmt::format("replace ('{}' forces it)", o.value("forces", "?"));
  } else if (action == "adopt") {
    what = fmt::format("adopt {}", o.value("id", ""));
  } else if (action == "delete") {
    what = "delete";
  } else if (action == "forget") {
    what = "forget (already gone)";
  } else {
    what = "no change";
  }
  if (o.contains("note")) what += fmt::format(" [{}]", o.value("note", ""));
  if (o.contains("known_after_apply")) {
    what += fmt::format(" (known after apply: {})",
                        fmt::join(o["known_after_apply"].get<std::vector<std::string>>(), ", "));
  }
  return what;
}

void PrintPlan(const json& plan) {
  std::cout << fmt::format("Stack '{}' (serial {}):\n", EscapeForTerminal(Str(plan, "stack")),
                           plan.value("serial", 0));
  Table t({"", "OBJECT", "ID", "ACTION", "$/MONTH BEFORE", "AFTER"});
  for (const json& o : plan["objects"]) {
    t.AddRow({Sign(o.value("action", "")), Str(o, "kind") + "/" + Str(o, "name"), Str(o, "id"),
              Describe(o), Str(o, "monthly_usd_before"), Str(o, "monthly_usd_after")});
  }
  t.Print(std::cout);
  // What changes, field by field, as Terraform shows it (hidden values stay digests).
  for (const json& o : plan["objects"]) {
    for (const json& d : o.value("diff", json::array())) {
      std::cout << fmt::format("  {} {}/{}.{}: {} -> {}\n", Sign(Str(o, "action")),
                               EscapeForTerminal(Str(o, "kind")), EscapeForTerminal(Str(o, "name")),
                               EscapeForTerminal(Str(d, "field")),
                               EscapeForTerminal(CutUtf8(d["from"].dump(), 200)),
                               EscapeForTerminal(CutUtf8(d["to"].dump(), 200)));
    }
  }
  if (!plan["drift"].empty()) {
    std::cout << "\nChanged outside the stack (the apply sets them back):\n";
    for (const json& d : plan["drift"]) {
      const std::string who = Str(d, "kind") + "/" + Str(d, "name");
      if (!Str(d, "note").empty() && Str(d, "note") != "-") {
        std::cout << fmt::format("  {}: {}\n", EscapeForTerminal(who),
                                 EscapeForTerminal(Str(d, "note")));
      }
      for (const json& f : d["fields"]) {
        std::cout << fmt::format("  {}: {} was {}, is now {}\n", EscapeForTerminal(who),
                                 EscapeForTerminal(Str(f, "field")),
                                 EscapeForTerminal(f["applied"].dump()),
                                 EscapeForTerminal(f["live"].dump()));
      }
    }
  }
  const json counts = plan.value("counts", json::object());
  auto n = [&](const char* k) { return counts.value(k, 0); };
  std::cout << fmt::format("\nMonthly cost at the catalog's prices: ${} -> ${} ({})\n",
                           Str(plan, "monthly_usd_before"), Str(plan, "monthly_usd_after"),
                           Str(plan, "monthly_usd_change"));
  if (!plan.value("changes", false)) {
    std::cout << "No changes: the stack matches what the server holds.\n";
  } else {
    std::cout << fmt::format(
        "Plan: {} to create, {} to update, {} to replace, {} to delete, {} to adopt.\n",
        n("create"), n("update"), n("replace"), n("delete") + n("forget"), n("adopt"));
  }
}

// Sends one stack request; an error is printed at the file's line when it names an object.
std::optional<json> Send(const StackFlags& f, const StackSource* source, const std::string& method,
                         const std::string& path, const json* body) {
  Response refused;
  auto r = Call(f.client, method, path, body, "", &refused);
  if (r) return r->body;
  if (refused.status == 0) return std::nullopt;  // Not reached: Call said why.
  std::string message = refused.text;
  if (refused.body.is_object() && refused.body.contains("error")) {
    message = refused.body["error"].value("message", refused.text);
  }
  const std::string where = source ? source->Locate(message) : "";
  std::cerr << "tessera: " << EscapeForTerminal(where + message) << " (HTTP " << refused.status
            << ")\n";
  return std::nullopt;
}

// Asks on the terminal; true only for "yes".
bool Confirm(const std::string& question) {
  std::cout << question << " Only 'yes' is accepted: " << std::flush;
  std::string answer;
  if (!std::getline(std::cin, answer)) answer.clear();
  return answer == "yes";
}

int PrintApplied(const json& result) {
  for (const json& d : result["done"]) {
    std::cout << fmt::format("{} {}/{}: {} {}\n", Sign(Str(d, "action")),
                             EscapeForTerminal(Str(d, "kind")), EscapeForTerminal(Str(d, "name")),
                             EscapeForTerminal(Str(d, "action")), EscapeForTerminal(Str(d, "id")));
  }
  for (const json& d : result["failed"]) {
    std::cerr << fmt::format("failed: {}/{} ({}): {}\n", EscapeForTerminal(Str(d, "kind")),
                             EscapeForTerminal(Str(d, "name")), EscapeForTerminal(Str(d, "action")),
                             EscapeForTerminal(Str(d, "error")));
  }
  for (const json& d : result.value("skipped", json::array())) {
    std::cerr << fmt::format("not applied: {}/{}: {}\n", EscapeForTerminal(Str(d, "kind")),
                             EscapeForTerminal(Str(d, "name")), EscapeForTerminal(Str(d, "why")));
  }
  if (!result.value("complete", false)) {
    std::cerr << "tessera: the apply was not complete: what was done stays done; apply again to "
                 "continue from there\n";
    return kExitFailure;
  }
  std::cout << fmt::format("Applied: stack '{}' is at serial {}.\n",
                           EscapeForTerminal(Str(result, "stack")), result.value("serial", 0));
  return kExitOk;
}

std::string PlanPath(const std::string& stack, const char* verb) {
  return fmt::format("/v1/stacks/{}/{}", Encode(stack), verb);
}

// A stack file read and planned by the server.
struct Planned {
  StackSource source;
  std::string stack;
  json body;  // The request: the file's objects, after variables.
  json plan;
};

// Reads the file and asks the server for its plan; nullopt after saying why not.
std::optional<Planned> PlanFile(const StackFlags& f) {
  auto source = LoadStack(f.file, f.vars);
  if (!source.ok()) {
    std::cerr << "tessera: " << EscapeForTerminal(source.status().message()) << "\n";
    return std::nullopt;
  }
  Planned p{std::move(*source), NameOf(f), json::object(), json::object()};
  p.body = {{"objects", p.source.objects}, {"adopt", f.adopt}};
  auto plan = Send(f, &p.source, "POST", PlanPath(p.stack, "plan"), &p.body);
  if (!plan) return std::nullopt;
  p.plan = std::move(*plan);
  return p;
}

int RunPlan(const StackFlags& f) {
  auto p = PlanFile(f);
  if (!p) return kExitFailure;
  if (!PrintDocument(f.client, p->plan)) PrintPlan(p->plan);
  if (!f.plan_out.empty()) {
    // The exact request the plan answered, with its digest: `apply --plan` sends it as it is.
    // It may hold the file's secrets (env values), so only its owner reads it.
    p->body["plan_digest"] = p->plan["digest"];
    const json saved = {{"stack", p->stack}, {"request", p->body}};
    Status st = WritePrivateFile(f.plan_out, DumpJson(saved, 2) + "\n");
    if (!st.ok()) {
      std::cerr << "tessera: --plan-out: " << EscapeForTerminal(st.message()) << "\n";
      return kExitFailure;
    }
    std::cout << fmt::format(
        "Saved the plan to {}: `tessera apply --plan {}` applies exactly it.\n",
        EscapeForTerminal(f.plan_out), EscapeForTerminal(f.plan_out));
  }
  return p->plan.value("changes", false) ? kExitChanges : kExitOk;
}

int RunSavedPlan(const StackFlags& f) {
  std::ifstream in(f.plan_in);
  if (!in) {
    std::cerr << "tessera: --plan " << EscapeForTerminal(f.plan_in) << ": cannot be read\n";
    return kExitFailure;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto saved = ParseJson(text.str(), "--plan " + f.plan_in);
  if (!saved.ok() || !saved->is_object() || !(*saved)["stack"].is_string() ||
      !(*saved)["request"].is_object()) {
    std::cerr << "tessera: --plan " << EscapeForTerminal(f.plan_in)
              << ": is not a plan saved by `tessera plan --plan-out`\n";
    return kExitFailure;
  }
  const json& body = (*saved)["request"];
  auto result =
      Send(f, nullptr, "POST", PlanPath((*saved)["stack"].get<std::string>(), "apply"), &body);
  if (!result) return kExitFailure;
  return PrintDocument(f.client, *result)
             ? (result->value("complete", false) ? kExitOk : kExitFailure)
             : PrintApplied(*result);
}

int RunApply(const StackFlags& f) {
  if (!f.plan_in.empty()) return RunSavedPlan(f);
  auto p = PlanFile(f);
  if (!p) return kExitFailure;
  const bool documents = f.client.output == "json" || f.client.output == "yaml";
  if (!documents) PrintPlan(p->plan);
  if (!p->plan.value("changes", false)) {
    if (documents) PrintDocument(f.client, p->plan);
    return kExitOk;
  }
  if (!f.yes && !Confirm("\nApply these changes?")) {
    std::cerr << "tessera: apply cancelled; nothing changed\n";
    return kExitFailure;
  }
  // The server applies only the plan shown: if what it holds changed since, it refuses.
  p->body["plan_digest"] = p->plan["digest"];
  auto result = Send(f, &p->source, "POST", PlanPath(p->stack, "apply"), &p->body);
  if (!result) return kExitFailure;
  if (documents) {
    PrintDocument(f.client, *result);
    return result->value("complete", false) ? kExitOk : kExitFailure;
  }
  std::cout << "\n";
  return PrintApplied(*result);
}

// Whether all that a destroy left is volumes still attached to instances it is stopping.
bool OnlyAttachedVolumesLeft(const json& result) {
  const json& failed = result["failed"];
  return !failed.empty() && std::all_of(failed.begin(), failed.end(), [](const json& d) {
    return Str(d, "kind") == "volume" &&
           Str(d, "error").find("is attached to") != std::string::npos;
  });
}

int RunDestroy(const StackFlags& f) {
  if (f.file.empty() && f.stack.empty()) {
    std::cerr << "tessera: destroy: give the stack's file (-f) or its name (--stack)\n";
    return kExitUsage;
  }
  const std::string stack = NameOf(f);
  auto state = Send(f, nullptr, "GET", "/v1/stacks/" + Encode(stack), nullptr);
  if (!state) return kExitFailure;
  std::cout << fmt::format("Stack '{}' owns:\n", EscapeForTerminal(stack));
  Table t({"", "OBJECT", "ID", "EXISTS"});
  for (const json& o : (*state)["objects"]) {
    t.AddRow({"-", Str(o, "kind") + "/" + Str(o, "name"), Str(o, "id"),
              o.value("exists", false) ? "yes" : "no (" + Str(o, "note") + ")"});
  }
  t.Print(std::cout);
  if (!f.yes && !Confirm("\nDelete all of it? Nothing else is touched.")) {
    std::cerr << "tessera: destroy cancelled; nothing changed\n";
    return kExitFailure;
  }
  auto result = Send(f, nullptr, "DELETE", "/v1/stacks/" + Encode(stack), nullptr);
  // A volume is deleted once the instances that mount it stopped, which their agents take a
  // moment to report: what waits only on that is deleted again, for up to a minute.
  for (int tries = 0; result && OnlyAttachedVolumesLeft(*result) && tries < 60; ++tries) {
    if (tries == 0) std::cout << "Waiting for the instances that mount its volumes to stop...\n";
    std::this_thread::sleep_for(std::chrono::seconds(1));
    auto again = Send(f, nullptr, "DELETE", "/v1/stacks/" + Encode(stack), nullptr);
    if (!again) break;
    for (const json& d : (*result)["done"]) (*again)["done"].push_back(d);
    result = std::move(again);
  }
  if (!result) return kExitFailure;
  for (const json& d : (*result)["done"]) {
    std::cout << fmt::format("- {}/{}: {} {}\n", EscapeForTerminal(Str(d, "kind")),
                             EscapeForTerminal(Str(d, "name")), EscapeForTerminal(Str(d, "action")),
                             EscapeForTerminal(Str(d, "id")));
  }
  for (const json& d : (*result)["failed"]) {
    std::cerr << fmt::format("failed: {}/{} ({}): {}\n", EscapeForTerminal(Str(d, "kind")),
                             EscapeForTerminal(Str(d, "name")), EscapeForTerminal(Str(d, "id")),
                             EscapeForTerminal(Str(d, "error")));
  }
  if (!result->value("complete", false)) return kExitFailure;
  std::cout << fmt::format("Destroyed stack '{}'.\n", EscapeForTerminal(stack));
  return kExitOk;
}

void AddStackOptions(CLI::App* cmd, StackFlags& f, bool file_required) {
  AddCommon(cmd, f.client);
  auto* file =
      cmd->add_option("-f,--file", f.file, "The stack: a YAML file or a directory of them");
  if (file_required) file->required();
  cmd->add_option("--stack", f.stack, "The stack's name (default: the file's name)");
  cmd->add_option("--var", f.vars, "NAME=VALUE for ${NAME} (over the file's default)");
}

}  // namespace

void RegisterStacks(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<StackFlags>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Show what applying a stack would change (exit 0: nothing, 2: changes, 1: error)");
  AddStackOptions(plan, *f, true);
  plan->add_flag("--adopt", f->adopt, "Take over existing objects of the stack's names");
  plan->add_option("--plan-out", f->plan_out, "Save the plan, for `apply --plan`");
  plan->callback([f, &ctx] { ctx.exit_code = RunPlan(*f); });

  CLI::App* apply = app.add_subcommand("apply", "Converge a stack: show its plan, confirm, apply");
  AddStackOptions(apply, *f, false);
  apply->add_flag("--yes,-y", f->yes, "Apply without asking");
  apply->add_flag("--adopt", f->adopt, "Take over existing objects of the stack's names");
  apply->add_option("--plan", f->plan_in, "Apply exactly a plan saved by `plan --plan-out`");
  apply->callback([f, &ctx] {
    if (f->file.empty() && f->plan_in.empty()) {
      std::cerr << "tessera: apply: give the stack's file (-f) or a saved plan (--plan)\n";
      ctx.exit_code = kExitUsage;
      return;
    }
    ctx.exit_code = RunApply(*f);
  });

  CLI::App* destroy =
      app.add_subcommand("destroy", "Delete everything a stack made, and nothing else");
  AddStackOptions(destroy, *f, false);
  destroy->add_flag("--yes,-y", f->yes, "Destroy without asking");
  destroy->callback([f, &ctx] { ctx.exit_code = RunDestroy(*f); });

  CLI::App* stacks = app.add_subcommand("stacks", "The caller's stacks");
  stacks->require_subcommand(1);
  CLI::App* list = stacks->add_subcommand("list", "List the caller's stacks");
  AddCommon(list, f->client);
  list->callback([f, &ctx] {
    ctx.exit_code = Show(f->client, Call(f->client, "GET", "/v1/stacks"), [](const json& j) {
      Table t({"STACK", "OBJECTS", "SERIAL", "UPDATED"});
      for (const json& s : j["stacks"]) {
        t.AddRow({Str(s, "stack"), Str(s, "objects"), Str(s, "serial"), Str(s, "updated_at")});
      }
      t.Print(std::cout);
    });
  });
  CLI::App* show = stacks->add_subcommand("show", "What a stack owns");
  AddCommon(show, f->client);
  show->add_option("name", f->stack, "The stack's name")->required();
  show->callback([f, &ctx] {
    ctx.exit_code = Show(
        f->client, Call(f->client, "GET", "/v1/stacks/" + Encode(f->stack)), [](const json& j) {
          Table t({"OBJECT", "ID", "EXISTS", "DIGEST"});
          for (const json& o : j["objects"]) {
            t.AddRow({Str(o, "kind") + "/" + Str(o, "name"), Str(o, "id"),
                      o.value("exists", false) ? "yes" : "no", Str(o, "digest").substr(0, 12)});
          }
          t.Print(std::cout);
        });
  });
}

}  // namespace tessera::cli
