// TLS through a real server (docs/http.md): TLS 1.3 by default and 1.2 only when allowed; a
// certificate swapped on disk and SIGHUP'd is served to new connections while open ones keep
// theirs; with --client-ca the agent routes take a node token only with a client certificate
// naming that node. The client side is OpenSSL itself, so versions and certificates are exact.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// One TLS connection from OpenSSL to 127.0.0.1:port.
class TlsClient {
 public:
  // `max_version`: 0 for any, else TLS1_2_VERSION and so on. A client certificate when given.
  TlsClient(int port, int max_version, const std::string& cert = "", const std::string& key = "") {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (max_version != 0) SSL_CTX_set_max_proto_version(ctx_, max_version);
    if (!cert.empty()) {
      SSL_CTX_use_certificate_file(ctx_, cert.c_str(), SSL_FILETYPE_PEM);
      SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM);
    }
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    connected_ = SSL_connect(ssl_) == 1;
  }
  ~TlsClient() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
    SSL_CTX_free(ctx_);
  }
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  bool connected() const { return connected_; }
  std::string version() const { return ssl_ ? SSL_get_version(ssl_) : ""; }

  // The SHA-256 of the certificate the server presented.
  std::string ServerCert() const {
    X509* cert = ssl_ ? SSL_get1_peer_certificate(ssl_) : nullptr;
    if (!cert) return "";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    X509_digest(cert, EVP_sha256(), md, &n);
    X509_free(cert);
    std::string out;
    for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }

  // One HTTP/1.1 request on this connection (kept alive); the status, or 0.
  int Request(const std::string& method, const std::string& path, const std::string& token = "",
              const std::string& body = "") {
    if (!connected_) return 0;
    std::string req = fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, path);
    if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
    if (!body.empty() || method == "POST") {
      req += fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n", body.size());
    }
    req += "\r\n" + body;
    if (SSL_write(ssl_, req.data(), static_cast<int>(req.size())) <= 0) return 0;
    last_ = ReadResponse();
    return last_.size() >= 12 ? std::atoi(last_.substr(9, 3).c_str()) : 0;
  }
  const std::string& last() const { return last_; }

 private:
  // Reads one response: its head, then as many bytes as Content-Length says.
  std::string ReadResponse() {
    std::string got;
    char buf[4096];
    size_t want = std::string::npos;
    while (want == std::string::npos || got.size() < want) {
      const int n = SSL_read(ssl_, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      const size_t end = got.find("\r\n\r\n");
      if (want == std::string::npos && end != std::string::npos) {
        const size_t cl = got.find("Content-Length: ");
        want =
            end + 4 + (cl != std::string::npos && cl < end ? std::stoul(got.substr(cl + 16)) : 0);
      }
    }
    return got;
  }

  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
  std::string last_;
};

// Runs a shell command line; true on exit 0.
bool Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

class TlsTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--data", dir_.File("data"), "--fleet",
                                     dir_.Write("fleet.json", kSmallFleet)};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>();
    ASSERT_TRUE(server_->Start(args, kAdminToken)) << server_->output();
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(TlsTest, TlsOnePointTwoIsRefusedByDefaultAndAcceptedWhenAllowedWithAWarning) {
  std::string cert, key;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir_, cert, key));
  Start({"--tls-cert", cert, "--tls-key", key});
  {
    TlsClient modern(server_->port(), 0);
    ASSERT_TRUE(modern.connected());
    EXPECT_EQ(modern.version(), "TLSv1.3");
    EXPECT_EQ(modern.Request("GET", "/healthz"), 200);
  }
  TlsClient old(server_->port(), TLS1_2_VERSION);
  EXPECT_FALSE(old.connected()) << "TLS 1.2 is refused unless --tls-min-version 1.2";
  server_->Stop(SIGTERM);
  Start({"--tls-cert", cert, "--tls-key", key, "--tls-min-version", "1.2"});
  TlsClient allowed(server_->port(), TLS1_2_VERSION);
  ASSERT_TRUE(allowed.connected());
  EXPECT_EQ(allowed.version(), "TLSv1.2");
  EXPECT_EQ(allowed.Request("GET", "/healthz"), 200);
  EXPECT_NE(server_->output().find("WARNING: tessera server accepts TLS 1.2"), std::string::npos)
      << server_->output();
}

TEST_F(TlsTest, ACertificateSwappedAndSighuppedIsServedToNewConnectionsOnly) {
  testing::TempDir a, b;
  std::string cert_a, key_a, cert_b, key_b;
  ASSERT_TRUE(testing::MakeSelfSignedCert(a, cert_a, key_a));
  ASSERT_TRUE(testing::MakeSelfSignedCert(b, cert_b, key_b));
  const std::string cert = dir_.File("server.pem"), key = dir_.File("server.key");
  std::filesystem::copy_file(cert_a, cert);
  std::filesystem::copy_file(key_a, key);
  Start({"--tls-cert", cert, "--tls-key", key});
  TlsClient before(server_->port(), 0);
  ASSERT_TRUE(before.connected());
  const std::string first = before.ServerCert();
  ASSERT_EQ(before.Request("GET", "/healthz"), 200);
  // A broken pair on disk and a SIGHUP: refused, the old certificate stays.
  std::filesystem::copy_file(cert_b, cert, std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  std::this_thread::sleep_for(500ms);  // The server reads the files on its own time.
  EXPECT_EQ(TlsClient(server_->port(), 0).ServerCert(), first);
  std::filesystem::copy_file(key_b, key, std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitFor([&] { return TlsClient(server_->port(), 0).ServerCert() != first; }, 5s));
  TlsClient after(server_->port(), 0);
  ASSERT_TRUE(after.connected());
  EXPECT_NE(after.ServerCert(), first) << "a new connection gets the new certificate";
  EXPECT_EQ(after.Request("GET", "/healthz"), 200);
  // The connection opened before keeps being served, with the certificate it began with.
  EXPECT_EQ(before.Request("GET", "/healthz"), 200) << before.last();
  EXPECT_EQ(before.ServerCert(), first);
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  EXPECT_NE(server_->output().find("SIGHUP: kept the TLS certificate served"), std::string::npos)
      << server_->output();
  EXPECT_NE(server_->output().find("SIGHUP: the TLS certificate and key were read again"),
            std::string::npos);
}

// Mutual TLS for the agent routes: a node token counts only with a client certificate, signed by
// --client-ca, that names the node. Tenants and the operator need none.
TEST_F(TlsTest, WithAClientCaTheAgentRoutesNeedTheNodesCertificate) {
  std::string cert, key;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir_, cert, key));
  const std::string ca = dir_.File("ca.pem"), ca_key = dir_.File("ca.key");
  ASSERT_TRUE(
      Sh(fmt::format("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                     "-nodes -days 2 -subj /CN=tessera-agents -keyout {} -out {}",
                     ca_key, ca)));
  auto client_cert = [&](const std::string& name) {
    const std::string k = dir_.File(name + ".key"), csr = dir_.File(name + ".csr"),
                      c = dir_.File(name + ".pem");
    EXPECT_TRUE(
        Sh(fmt::format("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                       "-nodes -subj /CN={} -keyout {} -out {}",
                       name, k, csr)));
    EXPECT_TRUE(
        Sh(fmt::format("openssl x509 -req -in {} -CA {} -CAkey {} -CAcreateserial "
                       "-days 2 -out {}",
                       csr, ca, ca_key, c)));
    return std::pair{c, k};
  };
  const auto [node_cert, node_key] = client_cert("gpu-07");
  const auto [other_cert, other_key] = client_cert("gpu-08");
  Start({"--tls-cert", cert, "--tls-key", key, "--client-ca", ca});
  const json node =
      json::parse(testing::RunTessera({"nodes", "add", "gpu-07", "-o", "json", "--url",
                                       server_->url(), "--token", kAdminToken, "--ca", cert})
                      .out,
                  nullptr, false);
  ASSERT_TRUE(node.is_object());
  const std::string token = node.value("token", "");
  ASSERT_FALSE(token.empty()) << node.dump();
  const std::string sync = R"({"protocol": 1})";
  {
    TlsClient bare(server_->port(), 0);
    EXPECT_EQ(bare.Request("POST", "/v1/agent/sync", token, sync), 403);
    EXPECT_NE(bare.last().find("need a client certificate for node 'gpu-07'"), std::string::npos)
        << bare.last();
    TlsClient admin(server_->port(), 0);
    EXPECT_EQ(admin.Request("GET", "/v1/tenants", kAdminToken), 200) << "the operator needs none";
  }
  {
    TlsClient wrong(server_->port(), 0, other_cert, other_key);
    ASSERT_TRUE(wrong.connected());
    EXPECT_EQ(wrong.Request("POST", "/v1/agent/sync", token, sync), 403);
    EXPECT_NE(wrong.last().find("one for gpu-08"), std::string::npos) << wrong.last();
  }
  {
    TlsClient right(server_->port(), 0, node_cert, node_key);
    ASSERT_TRUE(right.connected());
    const int status = right.Request("POST", "/v1/agent/sync", token, sync);
    EXPECT_NE(status, 403) << right.last();
  }
  // A real agent joins with its certificate.
  testing::ChildProcess agent({testing::TesseraBinary(),
                               "agent",
                               "--server",
                               server_->url(),
                               "--token-file",
                               testing::WritePrivateFile(dir_.File("node.token"), token + "\n"),
                               "--backend",
                               "sim",
                               "--sim-gpus",
                               "H100-80GB:1",
                               "--work-dir",
                               dir_.File("work"),
                               "--cgroup-root",
                               "none",
                               "--ca",
                               cert,
                               "--client-cert",
                               node_cert,
                               "--client-key",
                               node_key},
                              dir_.File("agent.log"));
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = testing::RunTessera({"nodes", "list", "-o", "json", "--url", server_->url(),
                                      "--token", kAdminToken, "--ca", cert});
        return r.out.find("\"ready\"") != std::string::npos;
      },
      15s))
      << ReadFile(dir_.File("agent.log"));
}

}  // namespace
}  // namespace tessera
