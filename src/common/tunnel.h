// The client side of an upgraded HTTP/1.1 connection (RFC 9110 7.8), over TCP or TLS: what
// `tessera instances exec` and the agent open to the server for an exec session (docs/volumes.md,
// "A shell"). One POST with a JSON body and `Upgrade: PROTOCOL`; a 101 hands back a byte stream,
// anything else the server's error. Among replicas (ServerList) a follower's 307 is followed to
// a listed leader, and a server that cannot be reached sends it to the next.
// Thread-safety: a Tunnel is used by one thread at a time.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera {

struct TunnelRequest {
  std::string urls;  // "URL[,URL...]": http:// or https:// with a host and port.
  std::string path;  // The request target: "/v1/instances/inst-000001/exec".
  std::string token;
  std::string body;  // Sent as application/json; empty: no body.
  std::string protocol;
  std::string ca_file;                        // PEM of a private authority; empty: the system's.
  std::string client_cert, client_key;        // PEM; both or neither (mutual TLS).
  std::chrono::milliseconds timeout{15'000};  // To connect, and then for the 101.
};

// Why a TCP connection to the host and port of `url` fails now, as the system says it
// ("Connection refused", "cannot resolve ..."); "" when one is made (and closed at once). For
// the messages of a client library that says only "Connection".
std::string ConnectProblem(std::string_view url, std::chrono::milliseconds timeout);

class Tunnel {
 public:
  // Connects and upgrades. The error of an answer other than 101 is the server's message with its
  // HTTP status ("... (HTTP 404)"); a server that cannot be reached is Unavailable.
  static Result<std::unique_ptr<Tunnel>> Open(const TunnelRequest& request);
  ~Tunnel();
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

  // The socket, to poll for reading. Check Pending() first: bytes may wait in a buffer.
  int fd() const { return fd_; }
  // Bytes are ready without reading the socket (after the 101's head, or decrypted already).
  bool Pending() const;
  // Whatever is ready, waiting for some when none is; "" once the server closed the stream.
  Result<std::string> Read();
  // Writes all of `data`.
  Status Write(std::string_view data);
  // Stops sending (the stream stays open for reading).
  void CloseWrite();

 private:
  Tunnel() = default;
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string early_;  // Read with the 101's head, not yet handed out.
};

}  // namespace tessera
