// `tessera server`: the control plane's main job.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "agent/agent.h"
#include "agent/sim_backend.h"
#include "agent/workload_uids.h"
#include "alerts/notifier.h"
#include "api/api.h"
#include "api/server.h"
#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/server_agents.h"
#include "cli/server_keys.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/memory.h"
#include "common/secret_env.h"
#include "core/core.h"
#include "core/replica.h"
#include "store/postgres.h"

namespace tessera::cli {

namespace {

struct ServerFlags {
  std::string listen = "127.0.0.1:8080";
  std::string data = "./tessera-data";
  std::string store;
  std::string fleet;
  std::string policy = "guarded-fgd";
  std::string catalog_dir;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_min_version = "1.3";
  std::string client_ca;
  size_t max_connections = api::HttpLimits{}.max_connections;
  size_t max_connections_per_address = api::HttpLimits{}.max_connections_per_address;
  std::string instance_retention = "1h";
  std::string audit_retention = "90d";
  std::string node_timeout = "10s";
  std::string report_period = "2s";
  std::string outage_bound = "5m";
  std::string spot_notice = "30s";
  bool sim_agents = false;
  bool demo = false;
  std::string alertmanager;
  std::string smtp;
  std::string smtp_from;
  int tenant_emails_per_hour = 60;
  bool allow_private_receivers = false;
  std::string alert_interval = "5s";
  std::string autoscale_interval = "15s";
  std::string external_url;
  std::string advertise_url;
  std::string lease = "3s";
  int64_t max_pending_per_tenant = core::kDefaultMaxPending;
  int batch_window = 1;
  std::string batch_wait = "200ms";
  bool repack = false;
  std::string repack_cooldown = "1h";
  std::string repack_max_run = "6h";
  KeyringFlags keys;
};

// Decides the operator's token: `from_env` (TESSERA_ADMIN_TOKEN, taken at start) when set; it
// must be of full strength; otherwise the stored hash, or a new token printed once. In demo mode
// the token is shown at every start: the one kept in `data_dir` when it still matches, else a new
// one kept there.
Result<std::string> SetUpAdminToken(core::Core& core, bool demo,
                                    const std::optional<std::string>& env,
                                    const std::string& data_dir) {
  std::string token = env.value_or("");
  const bool from_env = !token.empty();
  if (from_env && !IsFullStrengthToken(token)) {
    return Status::InvalidArgument(
        "TESSERA_ADMIN_TOKEN is not a token of full strength: it must be 'tsr_' and 64 "
        "lower-case hex digits (256 random bits). Make one with `tessera token new`");
  }
  auto stored = core.Run<std::string>([](core::State& s, store::Batch&) -> Result<std::string> {
    return s.tenants().admin_token_hash();
  });
  if (!stored.ok()) return stored.status();
  if (!from_env && !stored->empty() && !demo) return std::string();
  // The demo keeps the token it made first in the data directory (0600), so a restart shows the
  // same one and the console stays signed in.
  const std::string kept = data_dir + "/demo-admin-token";
  if (!from_env && demo && !stored->empty()) {
    std::ifstream in(kept);
    std::string line;
    if (std::getline(in, line) && IsFullStrengthToken(line) &&
        ConstantTimeEquals(HashToken(line), *stored)) {
      return line;
    }
  }
  if (!from_env) {
    TESSERA_ASSIGN_OR_RETURN(token, GenerateToken());
    if (demo) TESSERA_RETURN_IF_ERROR(WritePrivateFile(kept, token + "\n"));
  }
  const std::string hash = HashToken(token);
  auto set = core.Run<bool>([&](core::State& s, store::Batch& b) -> Result<bool> {
    if (s.tenants().admin_token_hash() != hash) s.tenants().SetAdminTokenHash(hash, b);
    return true;
  });
  if (!set.ok()) return set.status();
  return from_env ? std::string() : token;
}

// Thousands of connections need thousands of descriptors: take the hard limit.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The data directory, made when missing, 0711: a workload may traverse it to its own directory
// below (DATA/sim-agents/...) but no other user may list it. The files in it are the umask's
// (077) and the store's (0600).
Status PrepareDataDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Status::FailedPrecondition(
        fmt::format("--data {}: cannot create the directory: {}", dir, ec.message()));
  }
  if (chmod(dir.c_str(), 0711) != 0) {
    return Status::FailedPrecondition(
        fmt::format("--data {}: cannot make it 0711: {}", dir, std::strerror(errno)));
  }
  return Status::Ok();
}

bool IsLoopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

int Fail(const Status& s) {
  std::cerr << "tessera server: " << s.message() << "\n";
  return kExitFailure;
}

// The notifier's options from the alerting flags; InvalidArgument naming the flag.
Status NotifierFlags(const ServerFlags& flags, alerts::NotifierOptions& notify) {
  notify.alertmanager_url = flags.alertmanager;
  while (!notify.alertmanager_url.empty() && notify.alertmanager_url.back() == '/') {
    notify.alertmanager_url.pop_back();
  }
  if (!flags.alertmanager.empty()) {
    alerts::Receiver am{alerts::Receiver::Kind::kWebhook, notify.alertmanager_url, false};
    TESSERA_RETURN_IF_ERROR(alerts::ValidateReceiver(am, "--alertmanager"));
  }
  if (!flags.smtp.empty()) {
    auto smtp = ParseListen(flags.smtp, "--smtp");
    if (!smtp.ok() || smtp->second == 0) {
      return Status::InvalidArgument(
          fmt::format("--smtp: '{}' is not HOST:PORT (e.g. mail.example.com:25)", flags.smtp));
    }
    notify.smtp_host = smtp->first;
    notify.smtp_port = smtp->second;
    if (flags.smtp_from.empty()) {
      return Status::InvalidArgument("--smtp-from: the sender address is needed with --smtp");
    }
  }
  if (!flags.smtp_from.empty()) {
    alerts::Receiver from{alerts::Receiver::Kind::kEmail, flags.smtp_from, false};
    TESSERA_RETURN_IF_ERROR(alerts::ValidateReceiver(from, "--smtp-from"));
  }
  notify.smtp_from = flags.smtp_from;
  notify.tenant_emails_per_hour = flags.tenant_emails_per_hour;
  notify.allow_private = flags.allow_private_receivers;
  notify.external_url = flags.external_url;
  while (!notify.external_url.empty() && notify.external_url.back() == '/') {
    notify.external_url.pop_back();
  }
  return Status::Ok();
}

int RunServer(const ServerFlags& flags) {
  // The server holds the admin token and every tenant's data, and under --sim-agents tenants'
  // commands run as its user: not dumpable, no process of that user may ptrace it or read its
  // /proc/PID/environ, mem or fds. Shims forked from it inherit this.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Everything it writes (tessera.db and its -wal and -shm, LOCK, keys) is private to its user.
  umask(077);
  // Taken before any thread starts, and gone from /proc/PID/environ from here on.
  const std::optional<std::string> admin_token_env = TakeSecretEnv("TESSERA_ADMIN_TOKEN");
  auto listen = ParseListen(flags.listen, "--listen");
  if (!listen.ok()) {
    std::cerr << "tessera server: " << listen.status().message() << "\n";
    return kExitUsage;
  }
  auto instance_retention = ParseDuration(flags.instance_retention, "--instance-retention");
  auto audit_retention = ParseDuration(flags.audit_retention, "--audit-retention");
  auto node_timeout = ParseDuration(flags.node_timeout, "--node-timeout");
  auto spot_notice = ParseDuration(flags.spot_notice, "--spot-notice");
  auto alert_interval = ParseDuration(flags.alert_interval, "--alert-interval");
  if (alert_interval.ok() && *alert_interval < std::chrono::milliseconds(100)) {
    alert_interval = Status::InvalidArgument("--alert-interval: at least 100ms");
  }
  auto autoscale_interval = ParseDuration(flags.autoscale_interval, "--autoscale-interval");
  if (autoscale_interval.ok() && *autoscale_interval < std::chrono::milliseconds(100)) {
    autoscale_interval = Status::InvalidArgument("--autoscale-interval: at least 100ms");
  }
  auto batch_wait = ParseDuration(flags.batch_wait, "--batch-wait");
  if (batch_wait.ok() &&
      (*batch_wait < std::chrono::milliseconds(1) || *batch_wait > std::chrono::seconds(10))) {
    batch_wait = Status::InvalidArgument("--batch-wait: from 1ms to 10s");
  }
  auto repack_cooldown = ParseDuration(flags.repack_cooldown, "--repack-cooldown");
  auto repack_max_run = ParseDuration(flags.repack_max_run, "--repack-max-run");
  auto report_period = ParseDuration(flags.report_period, "--report-period");
  auto outage_bound = ParseDuration(flags.outage_bound, "--outage-bound");
  if (node_timeout.ok() && report_period.ok() && outage_bound.ok()) {
    Status timing = core::CheckAgentTiming({*report_period, *node_timeout, *outage_bound});
    if (!timing.ok()) node_timeout = std::move(timing);
  }
  alerts::NotifierOptions notify;
  Status notify_flags = NotifierFlags(flags, notify);
  for (const Status& s :
       {instance_retention.status(), audit_retention.status(), report_period.status(),
        outage_bound.status(), node_timeout.status(), spot_notice.status(), alert_interval.status(),
        autoscale_interval.status(), batch_wait.status(), repack_cooldown.status(),
        repack_max_run.status(), notify_flags}) {
    if (!s.ok()) {
      std::cerr << "tessera server: " << s.message() << "\n";
      return kExitUsage;
    }
  }
  RaiseDescriptorLimit();
  KeepLargeBuffersMapped();
  auto catalog = flags.catalog_dir.empty() ? catalog::Catalog::LoadEmbedded()
                                           : catalog::Catalog::LoadDir(flags.catalog_dir);
  if (!catalog.ok()) return Fail(catalog.status());
  // Block the stop signals before any thread starts, so only the waiter below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);  // Reloads the TLS certificate and the keyring; never stops.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // The address first: a server that cannot listen stops before it touches the data.
  api::ServerOptions server_options;
  server_options.http.host = listen->first;
  server_options.http.port = listen->second;
  server_options.http.tls_cert_file = flags.tls_cert;
  server_options.http.tls_key_file = flags.tls_key;
  server_options.http.tls_min_version = flags.tls_min_version;
  server_options.http.client_ca_file = flags.client_ca;
  server_options.http.limits.max_connections = flags.max_connections;
  server_options.http.limits.max_connections_per_address = flags.max_connections_per_address;
  server_options.allow_private_receivers = flags.allow_private_receivers;
  core::CoreOptions options;
  options.catalog = &*catalog;
  options.fleet_file = flags.demo ? "" : flags.fleet;
  // Neither a fleet file nor the demo: an empty fleet, which joining agents fill.
  options.empty_fleet = !flags.demo && flags.fleet.empty();
  options.node_timeout = *node_timeout;
  options.report_period = *report_period;
  options.outage_bound = *outage_bound;
  options.spot_notice = *spot_notice;
  options.data_dir = flags.data;
  options.store = flags.store;
  options.replicated = !flags.store.empty();
  options.policy = flags.policy;
  // Simulated agents are real agents in this process (SimAgents), not the core's stand-in.
  options.sim_agents = false;
  options.instance_retention = *instance_retention;
  options.audit_retention = *audit_retention;
  options.alert_interval = *alert_interval;
  options.autoscale_interval = *autoscale_interval;
  options.max_pending_per_tenant = flags.max_pending_per_tenant;
  options.batch_window = flags.batch_window;
  options.batch_wait = *batch_wait;
  options.repack = flags.repack;
  options.repack_cooldown = *repack_cooldown;
  options.repack_max_run = *repack_max_run;
  std::unique_ptr<alerts::Notifier> notifier;  // Outlives the core, which hands it alerts.
  std::unique_ptr<Sealer> sealer;              // Outlives the core, which seals with it.
  std::unique_ptr<core::Core> core;
  api::ApiServer server(&*catalog, server_options);
  if (Status s = server.Bind(); !s.ok()) return Fail(s);
  // Alerts link back to this server, and go out through a notifier that outlives the core.
  if (notify.external_url.empty()) {
    notify.external_url =
        fmt::format("{}://{}:{}", server.tls() ? "https" : "http", listen->first, server.port());
  }
  options.alerts.external_url = notify.external_url;
  options.alerts.alertmanager = !notify.alertmanager_url.empty();
  notifier = std::make_unique<alerts::Notifier>(notify, &SystemClock::Get());
  options.notifier = notifier.get();
  if (Status s = PrepareDataDir(flags.data); !s.ok()) return Fail(s);
  // Values at rest are sealed with this keyring; a store holding a value under a key it lacks
  // stops the start below, naming the key.
  auto keyring = OpenServerKeyring(flags.keys, flags.data, flags.store.empty());
  if (!keyring.ok()) return Fail(keyring.status());
  if (keyring->keyring) {
    sealer = std::make_unique<Sealer>(keyring->keyring);
    sealer->SetReload(keyring->reload);
    options.sealer = sealer.get();
  }
  spdlog::info("values at rest are sealed with: {}", keyring->description);
  server.set_keyring(sealer.get(), keyring->description);

  const std::string url =
      fmt::format("{}://{}:{}", server.tls() ? "https" : "http", listen->first, server.port());
  // Several replicas on one database: the lease is read before the state is built, so that a
  // replica taking it with no commit since need not read the store twice.
  std::unique_ptr<store::Leadership> leadership;
  std::optional<store::LeaseView> built_from;
  core::ReplicaOptions ro;
  if (options.replicated) {
    auto lease = ParseDuration(flags.lease, "--lease");
    if (!lease.ok()) return Fail(lease.status());
    ro.lease_s = std::max(Seconds(*lease), 0.5);
    ro.renew_s = ro.lease_s / 3;
    ro.poll_s = std::min(0.25, ro.lease_s / 8);
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    auto nonce = GenerateToken();
    if (!nonce.ok()) return Fail(nonce.status());
    const std::string id = fmt::format("{}:{}:{}", host, getpid(), nonce->substr(4, 8));
    auto opened = store::OpenLeadership(flags.store, id,
                                        flags.advertise_url.empty() ? url : flags.advertise_url);
    if (!opened.ok()) return Fail(opened.status());
    leadership = std::move(*opened);
    if (auto seen = leadership->Read(); seen.ok()) built_from = *seen;  // Not on a new database.
  }
  auto started = core::Core::Start(options);
  if (!started.ok()) return Fail(started.status());
  core = std::move(*started);
  // Take the lease or learn who holds it before serving.
  std::unique_ptr<core::Replica> replica;
  const double lease_s = ro.lease_s;
  if (options.replicated) {
    replica = std::make_unique<core::Replica>(core.get(), std::move(leadership), ro, built_from);
    replica->Start();
    if (!replica->AwaitSettled(2 * ro.lease_s + 5)) {
      return Fail(Status::Unavailable(
          "neither took the leadership lease nor found a live leader; is the database up?"));
    }
    server.set_replica(replica.get());
    spdlog::info("replica {} starts as {}", replica->view().id,
                 replica->view().leader ? "leader" : "follower");
  }
  auto token = SetUpAdminToken(*core, flags.demo, admin_token_env, flags.data);
  if (!token.ok() && replica && core->follower()) {
    return Fail(Status::FailedPrecondition(
        "a following replica cannot set the admin token: give every replica the "
        "TESSERA_ADMIN_TOKEN the first one was started with"));
  }
  if (!token.ok()) return Fail(token.status());
  // In-process agents serve the leader's nodes: a lone server restarted at once after a crash
  // finds its predecessor's lease still live, and waits for it to lapse.
  if (replica && (flags.sim_agents || flags.demo) && !replica->view().leader) {
    spdlog::info("--sim-agents: waiting to lead (another replica's lease is live)");
    replica->AwaitLeader(2 * lease_s + 5);
  }
  if (replica && core->follower() && (flags.sim_agents || flags.demo)) {
    return Fail(Status::FailedPrecondition(
        "--sim-agents and --demo run the nodes' agents inside the leading server; this replica "
        "follows (run `tessera agent` processes with every replica's URL instead)"));
  }
  if (server.tls() && flags.tls_min_version == "1.2") {
    std::cerr << "WARNING: tessera server accepts TLS 1.2 (--tls-min-version 1.2): TLS 1.3 "
                 "removes the older version's weaker handshakes and cipher suites; allow 1.2 "
                 "only for clients that cannot speak 1.3.\n";
    spdlog::warn("TLS 1.2 is accepted (--tls-min-version 1.2)");
  }
  if (!server.tls() && !IsLoopback(listen->first)) {
    std::cerr << "WARNING: tessera server listens on " << listen->first
              << " without TLS: bearer tokens will cross the network in clear text. Give "
                 "--tls-cert and --tls-key, or listen on 127.0.0.1 behind a TLS proxy.\n";
  }
  server.Start(core.get());
  InProcessAgents agents;
  if (flags.sim_agents || flags.demo) {
    if (Status st = StartSimAgents(agents, *core, server, *catalog, flags.data); !st.ok()) {
      return Fail(st);
    }
  }
  std::unique_ptr<DemoLoad> demo_load;
  if (flags.demo) {
    if (Status st = StartDemoAgent(agents, *core, *catalog, url, flags.data); !st.ok()) {
      return Fail(st);
    }
    auto group = DemoLoad::SetUp(*core);
    if (!group.ok()) return Fail(group.status());
    demo_load = std::make_unique<DemoLoad>(core.get(), *group);
  }
  // Announced once the simulated agents serve their nodes, so what is listed can run.
  std::string state_in = flags.data;
  if (!flags.store.empty()) {
    auto parsed = store::ParsePostgresUrl(flags.store);
    state_in = parsed.ok() ? parsed->display : flags.store;
  }
  std::cout << "tessera server listening on " << url << " (data in " << state_in << ")\n";
  if (!token->empty() && !flags.demo) {
    std::cout << "admin token (shown once, stored only as a hash): " << *token << "\n";
  }
  if (flags.demo) {
    const std::string t = token->empty() ? "$TESSERA_ADMIN_TOKEN" : *token;
    std::error_code ec;
    const std::string bin = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    const std::string tessera = ec ? "tessera" : bin;
    // A block of its own, ruled off from the log lines around it.
    const std::string rule(78, '=');
    std::cout << "\n" << rule << "\n  tessera demo\n" << rule << "\n";
    std::cout << "\nadmin token: " << t << "\n  (kept in " << flags.data
              << "/demo-admin-token, mode 0600: the same after a restart)\n";
    std::cout << "\nThe web console: open " << url << "/ in a browser and sign in with the admin "
              << "token (or a tenant's)\n";
    std::cout << "\nIn another terminal, try:\n"
              << "  export TESSERA_URL=" << url << " TESSERA_TOKEN=" << t << "\n"
              << "  " << tessera << " tenants create acme --quota-gpus 16   # prints acme's token\n"
              << "  TESSERA_TOKEN=<acme's token> " << tessera
              << " instances create --type gpu.1xh100 --billing on_demand\n"
              << "  " << tessera << " nodes list\n"
              << "  " << tessera << " groups get " << demo_load->group()
              << "   # autoscaled on a daily load curve, a day every "
              << DemoLoad::kSecondsPerDay / 60 << " minutes\n";
    std::cout << rule << "\n\n";
  }
  std::cout.flush();
  int sig = 0;
  for (sigwait(&signals, &sig); sig == SIGHUP; sigwait(&signals, &sig)) {
    // New connections get the new certificate; open ones keep theirs. A file that does not load
    // leaves everything as it was.
    if (server.tls()) {
      const Status s = server.ReloadTls();
      if (s.ok()) {
        spdlog::info("SIGHUP: the TLS certificate and key were read again");
      } else {
        spdlog::error("SIGHUP: kept the TLS certificate served: {}", s.message());
      }
    }
    if (sealer) {
      const Status s = sealer->ReloadKeyring();
      if (s.ok()) {
        auto current = sealer->CurrentKeyId();
        spdlog::info("SIGHUP: the keyring was read again; current key {}",
                     current.ok() ? *current : current.status().message());
      } else if (s.code() != StatusCode::kFailedPrecondition) {
        spdlog::error("SIGHUP: kept the keyring: {}", s.message());
      }
    }
  }
  spdlog::info("stopping on signal {}", sig);
  demo_load.reset();
  agents.StopAll();
  server.Stop();
  replica.reset();  // A leader hands its lease over at once.
  return kExitOk;
}

}  // namespace

void RegisterServerCommands(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ServerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "server", "Run the control plane: the REST API, the scheduler and the durable store");
  cmd->add_option("--listen", flags->listen, "Address to serve on, HOST:PORT")
      ->capture_default_str();
  cmd->add_option("--store", flags->store,
                  "Keep the state in PostgreSQL, postgres://USER@HOST/DB (several replicas: "
                  "docs/ha.md); default: SQLite in --data")
      ->check([](const std::string& v) {
        return store::IsPostgresUrl(v) ? "" : "--store takes a postgres:// URL";
      });
  cmd->add_option("--advertise-url", flags->advertise_url,
                  "With --store: the URL other replicas send clients to while this one leads "
                  "(default: the --listen address)");
  cmd->add_option("--lease", flags->lease,
                  "With --store: how long the leader's lease lasts unrenewed; a dead leader is "
                  "replaced about this long after its last renewal (docs/ha.md)")
      ->capture_default_str();
  cmd->add_option("--data", flags->data, "Directory of the SQLite store (created when missing)")
      ->capture_default_str();
  cmd->add_option("--fleet", flags->fleet,
                  "Fleet file (JSON, see docs/fleet.md) or openb node-list CSV; without it (and "
                  "--demo) the fleet starts empty and joining agents fill it");
  cmd->add_option("--policy", flags->policy, "Placement policy")->capture_default_str();
  cmd->add_option("--catalog", flags->catalog_dir, "Catalog directory (default: built in)");
  cmd->add_option("--tls-cert", flags->tls_cert,
                  "PEM certificate (chain) to serve HTTPS with; needs --tls-key");
  cmd->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-min-version", flags->tls_min_version,
                  "The oldest TLS version served: 1.3, or 1.2 for clients that lack 1.3")
      ->check(CLI::IsMember({"1.2", "1.3"}))
      ->capture_default_str();
  cmd->add_option("--client-ca", flags->client_ca,
                  "PEM of the authority that signs agents' client certificates: the agent routes "
                  "then take a node token only over a connection whose certificate names the "
                  "node (CN or a DNS name), mutual TLS (docs/http.md)");
  cmd->add_option("--kek-file", flags->keys.kek_file,
                  "Keyring of key-encryption keys that seal secrets and other values at rest "
                  "(docs/secrets.md): 'ID BASE64_OF_32_BYTES' a line, the first current; 0600. "
                  "Default with the SQLite store: DATA/keyring, made at the first start");
  cmd->add_option("--kms-command", flags->keys.kms_command,
                  "A KMS plugin that wraps and unwraps data keys instead of --kek-file: "
                  "'PROGRAM ARGS', run as PROGRAM ARGS wrap|unwrap KEY_ID (docs/secrets.md)");
  cmd->add_option("--max-connections", flags->max_connections,
                  "Connections held at once; more are answered 503")
      ->capture_default_str();
  cmd->add_option("--max-connections-per-address", flags->max_connections_per_address,
                  "Connections from one client address; more are answered 429")
      ->capture_default_str();
  cmd->add_option("--instance-retention", flags->instance_retention,
                  "How long ended instances stay in memory and in lists (the store keeps them)")
      ->capture_default_str();
  cmd->add_option("--audit-retention", flags->audit_retention,
                  "How long audit entries are kept; 0 keeps them for ever")
      ->capture_default_str();
  cmd->add_option("--node-timeout", flags->node_timeout,
                  "A joined node that has not reported for this long is not_ready; its work "
                  "moves once its lease has run out (at least two report periods)")
      ->capture_default_str();
  cmd->add_option("--report-period", flags->report_period,
                  "The longest an agent waits at the server between reports (100ms to 30s)")
      ->capture_default_str();
  cmd->add_option("--outage-bound", flags->outage_bound,
                  "How long the server may be down with no workload stopped: agents' leases "
                  "cover it plus the node timeout, and a silent node's work moves only then "
                  "(0 to 7 days)")
      ->capture_default_str();
  cmd->add_option("--spot-notice", flags->spot_notice,
                  "Notice a preempted spot instance gets before its agent stops it (e.g. 30s, 2m)")
      ->capture_default_str();
  cmd->add_flag("--sim-agents", flags->sim_agents,
                "Serve every node of the fleet file with an agent in this process: the same agent "
                "code as `tessera agent --backend sim`, commands run as real processes "
                "(docs/agent.md)");
  cmd->add_option("--alertmanager", flags->alertmanager,
                  "Alertmanager to post the operator's alerts to (its v2 API), e.g. "
                  "http://127.0.0.1:9093");
  cmd->add_option("--smtp", flags->smtp, "SMTP server for email receivers, HOST:PORT");
  cmd->add_option("--smtp-from", flags->smtp_from, "Sender address of alert emails");
  cmd->add_option("--tenant-emails-per-hour", flags->tenant_emails_per_hour,
                  "Alert emails each tenant may send through the relay an hour (0: no limit)")
      ->check(CLI::Range(0, 100'000))
      ->capture_default_str();
  cmd->add_flag("--allow-private-receivers", flags->allow_private_receivers,
                "Let tenants' webhooks reach loopback, link-local and private addresses (off: "
                "refused, after DNS, at send time)");
  cmd->add_option("--alert-interval", flags->alert_interval,
                  "How often alert rules are evaluated (e.g. 5s)")
      ->capture_default_str();
  cmd->add_option("--autoscale-interval", flags->autoscale_interval,
                  "How often autoscaled groups are evaluated (e.g. 15s)")
      ->capture_default_str();
  cmd->add_option("--max-pending-per-tenant", flags->max_pending_per_tenant,
                  "The most instances a tenant may have pending, members of waiting groups "
                  "included, unless its quota.max_pending says otherwise (429 beyond)")
      ->check(CLI::Range(int64_t{0}, core::kMaxMaxPending))
      ->capture_default_str();
  cmd->add_option("--batch-window", flags->batch_window,
                  "Place creates together, up to this many at once, the largest first; 1 places "
                  "each as it comes (docs/core.md, \"A batch window\")")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--batch-wait", flags->batch_wait,
                  "With --batch-window: the longest a create waits for others (1ms to 10s)")
      ->capture_default_str();
  cmd->add_flag("--repack", flags->repack,
                "A one-GPU create that finds no room may move up to two running migratable "
                "shares to other GPUs, with notice, and take their GPU (docs/core.md, "
                "\"Repacking\")");
  cmd->add_option("--repack-cooldown", flags->repack_cooldown,
                  "With --repack: how long a moved instance is not moved again")
      ->capture_default_str();
  cmd->add_option("--repack-max-run", flags->repack_max_run,
                  "With --repack: an instance whose run has lasted longer is not moved (a move "
                  "throws its run's work away)")
      ->capture_default_str();
  cmd->add_option("--external-url", flags->external_url,
                  "The server's URL as people reach it, for links in alerts (default: the "
                  "--listen address)");
  cmd->add_flag("--demo", flags->demo,
                "Demo fleet with simulated agents; prints a fresh admin token");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunServer(*flags); });

  CLI::App* token = app.add_subcommand("token", "Make bearer tokens");
  token->require_subcommand(1);
  token->add_subcommand("new", "Print a new token of full strength (e.g. for TESSERA_ADMIN_TOKEN)")
      ->callback([&ctx] {
        auto t = GenerateToken();
        if (!t.ok()) {
          std::cerr << "tessera token new: " << t.status().message() << "\n";
          ctx.exit_code = kExitFailure;
          return;
        }
        std::cout << *t << "\n";
      });
}

}  // namespace tessera::cli
