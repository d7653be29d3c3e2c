// Client commands for people, their tokens, secrets and keys (docs/users.md, docs/secrets.md):
//   tessera users create|list|get|set|delete
//   tessera tokens create|list|revoke
//   tessera secrets create|set|list|delete
//   tessera keys status|rotate
// A secret's value and a new token are never taken from argv (every user of the machine reads
// /proc/PID/cmdline): values come from a file or stdin, and a token is printed once.
#include <fmt/format.h>
#include <openssl/crypto.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/envelope.h"
#include "common/files.h"
#include "common/text.h"

namespace tessera::cli {

namespace {

using nlohmann::json;

// The tenant a command acts on: --tenant, else the caller's own (GET /v1/whoami). Empty after
// saying why.
std::string TenantOf(const ClientFlags& f, const std::string& flag) {
  if (!flag.empty()) return flag;
  auto me = Call(f, "GET", "/v1/whoami");
  if (!me) return "";
  if (me->body.value("admin", false)) {
    std::cerr << "tessera: the admin token acts for no tenant: give --tenant ID\n";
    return "";
  }
  return me->body["tenant"].value("id", "");
}

// The user a token command acts for: --user, else the caller itself.
std::string SelfUser(const ClientFlags& f, const std::string& flag) {
  if (!flag.empty()) return flag;
  auto me = Call(f, "GET", "/v1/whoami");
  if (!me) return "";
  if (!me->body.contains("user")) {
    std::cerr << "tessera: this token acts for no user: give --user\n";
    return "";
  }
  return me->body["user"].value("id", "");
}

void PrintUsers(const json& list) {
  Table t({"ID", "NAME", "ROLE", "DISABLED", "QUOTA GPUS", "GPUS IN USE", "TOKENS"});
  for (const json& u : list) {
    t.AddRow({Str(u, "id"), Str(u, "name"), Str(u, "role"),
              u.value("disabled", false) ? "yes" : "no",
              u["quota"].is_object() ? Gpus(u["quota"]["gpus"]) : "-",
              u.contains("usage") ? Gpus(u["usage"]["gpus"]) : "-",
              std::to_string(u.value("tokens", json::array()).size()) +
                  (u.value("tenant_token", false) ? " + the tenant's" : "")});
  }
  t.Print(std::cout);
}

void PrintTokens(const json& list) {
  Table t({"ID", "NAME", "CREATED", "EXPIRES", "READ-ONLY"});
  for (const json& k : list) {
    t.AddRow({Str(k, "id"), Str(k, "name"), Str(k, "created_at"), Str(k, "expires_at"),
              k.value("read_only", false) ? "yes" : "no"});
  }
  t.Print(std::cout);
}

// "90s", "30m", "12h", "30d" in seconds; -1 (after saying why) otherwise.
int64_t Seconds(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  const int64_t per = unit == "s"   ? 1
                      : unit == "m" ? 60
                      : unit == "h" ? 3600
                      : unit == "d" ? 86400
                                    : 0;
  if (digits == 0 || digits > 9 || per == 0) {
    std::cerr << "tessera: --expires-in '" << EscapeForTerminal(text)
              << "' is not a duration such as 90s, 30m, 12h or 30d\n";
    return -1;
  }
  return std::stoll(text.substr(0, digits)) * per;
}

// A secret's value from `file` ("-": stdin), its one trailing newline dropped; nullopt after
// saying why.
std::optional<std::string> ReadValue(const std::string& file) {
  std::string value;
  if (file == "-") {
    value.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::cerr << "tessera: --from-file: cannot read '" << EscapeForTerminal(file) << "'\n";
      return std::nullopt;
    }
    value.assign(std::istreambuf_iterator<char>(in), {});
  }
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (!value.empty() && value.back() == '\r') value.pop_back();
  return value;
}

void RegisterUsers(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct UserFlags {
    std::string tenant, name, role;
    double quota_gpus = -1;
    bool disable = false, enable = false, no_quota = false;
  };
  auto u = std::make_shared<UserFlags>();
  CLI::App* group = app.add_subcommand("users", "A tenant's users and their roles");
  group->require_subcommand(1);
  auto tenant_flag = [&](CLI::App* cmd) {
    AddCommon(cmd, *f);
    cmd->add_option("--tenant", u->tenant, "The tenant's id (default: the caller's)");
  };

  CLI::App* create = group->add_subcommand("create", "Add a user to a tenant");
  tenant_flag(create);
  create->add_option("NAME", u->name, "The user's name (a-z, 0-9, '.', '_', '-')")->required();
  create->add_option("--role", u->role, "viewer, member (default) or owner")
      ->check(CLI::IsMember({"viewer", "member", "owner"}));
  create->add_option("--quota-gpus", u->quota_gpus,
                     "The user's own GPU quota, inside the tenant's");
  create->callback([f, u, &ctx] {
    const std::string tenant = TenantOf(*f, u->tenant);
    if (tenant.empty()) return void(ctx.exit_code = kExitFailure);
    json body = {{"name", u->name}};
    if (!u->role.empty()) body["role"] = u->role;
    if (u->quota_gpus >= 0) body["quota"] = {{"gpus", u->quota_gpus}};
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/tenants/" + Encode(tenant) + "/users", &body),
                         [](const json& j) { PrintUsers(json::array({j})); });
  });

  CLI::App* list = group->add_subcommand("list", "List a tenant's users");
  tenant_flag(list);
  list->callback([f, u, &ctx] {
    const std::string tenant = TenantOf(*f, u->tenant);
    if (tenant.empty()) return void(ctx.exit_code = kExitFailure);
    ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/tenants/" + Encode(tenant) + "/users"),
                         [](const json& j) { PrintUsers(j["users"]); });
  });

  CLI::App* get = group->add_subcommand("get", "Show one user");
  tenant_flag(get);
  get->add_option("USER", u->name, "The user's name or id")->required();
  get->callback([f, u, &ctx] {
    const std::string tenant = TenantOf(*f, u->tenant);
    if (tenant.empty()) return void(ctx.exit_code = kExitFailure);
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/tenants/" + Encode(tenant) + "/users/" + Encode(u->name)),
             [](const json& j) {
               PrintUsers(json::array({j}));
               if (!j["tokens"].empty()) {
                 std::cout << "\n";
                 PrintTokens(j["tokens"]);
               }
             });
  });

  CLI::App* set = group->add_subcommand("set", "Change a user's role, quota or state");
  tenant_flag(set);
  set->add_option("USER", u->name, "The user's name or id")->required();
  set->add_option("--role", u->role, "viewer, member or owner")
      ->check(CLI::IsMember({"viewer", "member", "owner"}));
  set->add_option("--quota-gpus", u->quota_gpus, "The user's own GPU quota");
  set->add_flag("--no-quota", u->no_quota, "Remove the user's own quota");
  set->add_flag("--disable", u->disable, "Disable the user: its tokens stop at once");
  set->add_flag("--enable", u->enable, "Enable the user again");
  set->callback([f, u, &ctx] {
    const std::string tenant = TenantOf(*f, u->tenant);
    if (tenant.empty()) return void(ctx.exit_code = kExitFailure);
    json body = json::object();
    if (!u->role.empty()) body["role"] = u->role;
    if (u->disable || u->enable) body["disabled"] = u->disable;
    if (u->quota_gpus >= 0) body["quota"] = {{"gpus", u->quota_gpus}};
    if (u->no_quota) body["quota"] = nullptr;
    ctx.exit_code = Show(
        *f, Call(*f, "PATCH", "/v1/tenants/" + Encode(tenant) + "/users/" + Encode(u->name), &body),
        [](const json& j) { PrintUsers(json::array({j})); });
  });

  CLI::App* del = group->add_subcommand("delete", "Delete a user and its tokens");
  tenant_flag(del);
  del->add_option("USER", u->name, "The user's name or id")->required();
  del->callback([f, u, &ctx] {
    const std::string tenant = TenantOf(*f, u->tenant);
    if (tenant.empty()) return void(ctx.exit_code = kExitFailure);
    ctx.exit_code =
        Show(*f, Call(*f, "DELETE", "/v1/tenants/" + Encode(tenant) + "/users/" + Encode(u->name)),
             [](const json& j) { std::cout << "deleted " << Str(j, "id") << "\n"; });
  });
}

void RegisterTokens(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct TokenFlags {
    std::string tenant, user, name, expires_in, id;
    bool read_only = false;
  };
  auto k = std::make_shared<TokenFlags>();
  CLI::App* group = app.add_subcommand("tokens", "A user's own tokens");
  group->require_subcommand(1);
  auto common = [&](CLI::App* cmd) {
    AddCommon(cmd, *f);
    cmd->add_option("--tenant", k->tenant, "The tenant's id (default: the caller's)");
    cmd->add_option("--user", k->user, "The user's name or id (default: the caller)");
  };
  auto base = [f, k]() -> std::string {
    const std::string tenant = TenantOf(*f, k->tenant);
    const std::string user = tenant.empty() ? "" : SelfUser(*f, k->user);
    if (tenant.empty() || user.empty()) return "";
    return "/v1/tenants/" + Encode(tenant) + "/users/" + Encode(user) + "/tokens";
  };

  CLI::App* create = group->add_subcommand("create", "Make a token (printed once)");
  common(create);
  create->add_option("--name", k->name, "A label, e.g. ci");
  create->add_option("--expires-in", k->expires_in, "90s, 30m, 12h or 30d (default: never)");
  create->add_flag("--read-only", k->read_only, "It may read, never change anything");
  create->callback([f, k, base, &ctx] {
    const std::string path = base();
    if (path.empty()) return void(ctx.exit_code = kExitFailure);
    json body = {{"read_only", k->read_only}};
    if (!k->name.empty()) body["name"] = k->name;
    if (!k->expires_in.empty()) {
      const int64_t s = Seconds(k->expires_in);
      if (s < 0) return void(ctx.exit_code = kExitUsage);
      body["expires_in_seconds"] = s;
    }
    ctx.exit_code = Show(*f, Call(*f, "POST", path, &body), [](const json& j) {
      PrintTokens(json::array({j}));
      std::cout << "\ntoken (shown once, stored only as a hash): " << Str(j, "token") << "\n";
    });
  });

  CLI::App* list = group->add_subcommand("list", "List a user's tokens (never the tokens)");
  common(list);
  list->callback([f, base, &ctx] {
    const std::string path = base();
    if (path.empty()) return void(ctx.exit_code = kExitFailure);
    ctx.exit_code =
        Show(*f, Call(*f, "GET", path), [](const json& j) { PrintTokens(j["tokens"]); });
  });

  CLI::App* revoke = group->add_subcommand("revoke", "Revoke a token: it stops at once");
  common(revoke);
  revoke->add_option("TOKEN_ID", k->id, "tok-...")->required();
  revoke->callback([f, k, base, &ctx] {
    const std::string path = base();
    if (path.empty()) return void(ctx.exit_code = kExitFailure);
    ctx.exit_code = Show(*f, Call(*f, "DELETE", path + "/" + Encode(k->id)),
                         [](const json& j) { std::cout << "revoked " << Str(j, "id") << "\n"; });
  });
}

void PrintSecrets(const json& list) {
  Table t({"NAME", "VERSION", "UPDATED", "UPDATED BY", "USED BY"});
  for (const json& s : list) {
    std::string used;
    if (s.contains("used_by")) {
      for (const json& u : s["used_by"]) {
        if (!used.empty()) used += ',';
        used += u.get<std::string>();
      }
    }
    t.AddRow({Str(s, "name"), Str(s, "version"), Str(s, "updated_at"), Str(s, "updated_by"),
              used.empty() ? "-" : used});
  }
  t.Print(std::cout);
}

void RegisterSecrets(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct SecretFlags {
    std::string name, file;
    bool force = false;
  };
  auto s = std::make_shared<SecretFlags>();
  CLI::App* group = app.add_subcommand("secrets", "A tenant's secrets for its workloads");
  group->require_subcommand(1);
  for (const bool replace : {false, true}) {
    CLI::App* put = group->add_subcommand(
        replace ? "set" : "create",
        replace ? "Replace a secret's value" : "Store a secret (its value from a file or stdin)");
    AddCommon(put, *f);
    put->add_option("NAME", s->name, "The secret's name")->required();
    put->add_option("--from-file", s->file, "A file holding the value; - reads stdin")->required();
    put->callback([f, s, replace, &ctx] {
      auto value = ReadValue(s->file);
      if (!value) return void(ctx.exit_code = kExitFailure);
      json body = {{"value", *value}};
      if (!replace) body["name"] = s->name;
      OPENSSL_cleanse(value->data(), value->size());
      auto r = replace ? Call(*f, "PUT", "/v1/secrets/" + Encode(s->name), &body)
                       : Call(*f, "POST", "/v1/secrets", &body);
      std::string& held = body["value"].get_ref<std::string&>();
      OPENSSL_cleanse(held.data(), held.size());
      ctx.exit_code = Show(*f, r, [](const json& j) { PrintSecrets(json::array({j})); });
    });
  }
  CLI::App* list = group->add_subcommand("list", "List secrets (names and metadata only)");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/secrets"), [](const json& j) { PrintSecrets(j["secrets"]); });
  });
  CLI::App* del = group->add_subcommand("delete", "Delete a secret");
  AddCommon(del, *f);
  del->add_option("NAME", s->name, "The secret's name")->required();
  del->add_flag("--force", s->force,
                "Even while work refers to it: what waits stops; what runs keeps its environment");
  del->callback([f, s, &ctx] {
    ctx.exit_code = Show(
        *f, Call(*f, "DELETE", "/v1/secrets/" + Encode(s->name) + (s->force ? "?force=true" : "")),
        [](const json& j) { std::cout << "deleted " << Str(j, "name") << "\n"; });
  });
}

void PrintKeys(const json& j) {
  std::cout << "keyring:     " << Str(j, "keyring") << "\n";
  std::cout << "current key: " << Str(j, "current_key") << "\n";
  const std::string current = j.value("current_key", "");
  static const json kNone = json::object();
  const json& by_key = j.contains("records_by_key") ? j["records_by_key"] : kNone;
  Table t({"KEY", "RECORDS"});
  for (auto it = by_key.begin(); it != by_key.end(); ++it) {
    std::string key = it.key();
    if (key == current) key += " (current)";
    t.AddRow({key, it.value().dump()});
  }
  std::cout << "\n";
  t.Print(std::cout);
  if (j.contains("rotation") && j["rotation"].is_object()) {
    const json& r = j["rotation"];
    std::cout << "\nrotation to " << Str(r, "key") << ": " << Str(r, "state") << ", "
              << Str(r, "examined") << " records looked at, " << Str(r, "resealed") << " re-sealed";
    if (r.contains("seconds")) {
      std::cout << " in " << fmt::format("{:.2f}", r["seconds"].get<double>()) << " s";
    }
    if (r.contains("error")) std::cout << " (" << Str(r, "error") << ")";
    std::cout << "\n";
  }
  for (auto it = by_key.begin(); it != by_key.end(); ++it) {
    if (it.key() != current && it.value().get<int64_t>() > 0) {
      std::cout << "\nkey " << it.key() << " still seals " << it.value().dump()
                << " record(s): keep it in the keyring until a rotation leaves none\n";
    }
  }
}

// Adds a new first key, `id`, to keyring file `path` (0600), keeping the others: the new key
// seals from the server's next reading of the file on. Returns false after saying why.
bool AddKeyToFile(const std::string& path, const std::string& id) {
  auto ring = LoadKeyringFile(path);  // Checks the mode and every line first.
  if (!ring.ok()) {
    std::cerr << "tessera: " << EscapeForTerminal(ring.status().message()) << "\n";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  std::string old((std::istreambuf_iterator<char>(in)), {});
  auto line = NewKeyLine(id);
  if (!line.ok()) {
    std::cerr << "tessera: " << EscapeForTerminal(line.status().message()) << "\n";
    return false;
  }
  std::string text = *line + "\n" + old;
  const Status written = WritePrivateFile(path, text, 0600, /*sync=*/true);
  OPENSSL_cleanse(text.data(), text.size());
  OPENSSL_cleanse(old.data(), old.size());
  if (!written.ok()) {
    std::cerr << "tessera: " << EscapeForTerminal(written.message()) << "\n";
    return false;
  }
  // Its new key must be checkable before the server is asked to use it.
  if (auto again = LoadKeyringFile(path); !again.ok()) {
    std::cerr << "tessera: " << EscapeForTerminal(again.status().message()) << "\n";
    return false;
  }
  std::cout << "added key " << id << " to " << path << " as the current key\n";
  return true;
}

void RegisterKeys(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct KeyFlags {
    std::string kek_file, id;
    bool wait = false;
  };
  auto k = std::make_shared<KeyFlags>();
  CLI::App* group = app.add_subcommand("keys", "The keys that seal values at rest (admin)");
  group->require_subcommand(1);
  CLI::App* status = group->add_subcommand("status", "The current key, and what each key seals");
  AddCommon(status, *f);
  status->callback([f, &ctx] { ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/keys"), PrintKeys); });
  CLI::App* rotate = group->add_subcommand(
      "rotate", "Make a new current key and re-seal every record under it, online");
  AddCommon(rotate, *f);
  rotate->add_option("--kek-file", k->kek_file,
                     "The server's keyring file: a new key is added first in it (with a KMS "
                     "plugin, leave it out: the plugin's current key is taken)");
  rotate->add_option("--id", k->id, "The new key's id (default: key-<UTC time>)");
  rotate->add_flag("--wait", k->wait, "Wait until every record is re-sealed, showing progress");
  rotate->callback([f, k, &ctx] {
    if (!k->kek_file.empty()) {
      std::string id = k->id;
      if (id.empty()) {
        const std::time_t now = std::time(nullptr);
        char buf[32];
        std::strftime(buf, sizeof buf, "key-%Y%m%dT%H%M%SZ", std::gmtime(&now));
        id = buf;
      }
      if (!AddKeyToFile(k->kek_file, id)) return void(ctx.exit_code = kExitFailure);
    }
    auto started = Call(*f, "POST", "/v1/keys/rotate");
    if (!started) return void(ctx.exit_code = kExitFailure);
    if (!k->wait) {
      ctx.exit_code = Show(*f, started, PrintKeys);
      return;
    }
    std::optional<Response> last;
    for (;;) {
      last = Call(*f, "GET", "/v1/keys");
      if (!last) return void(ctx.exit_code = kExitFailure);
      const json& r = last->body["rotation"];
      if (!r.is_object() || r.value("state", "") != "running") break;
      if (f->output == "table") {
        std::cerr << "re-sealing: " << Str(r, "examined") << " records looked at, "
                  << Str(r, "resealed") << " re-sealed\n";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    ctx.exit_code = Show(*f, last, PrintKeys);
    const json& r = last->body["rotation"];
    if (r.is_object() && r.value("state", "") == "failed") ctx.exit_code = kExitFailure;
  });
}

}  // namespace

void RegisterIdentityCommands(CLI::App& app, Context& ctx) {
  RegisterUsers(app, ctx);
  RegisterTokens(app, ctx);
  RegisterSecrets(app, ctx);
  RegisterKeys(app, ctx);
}

}  // namespace tessera::cli
