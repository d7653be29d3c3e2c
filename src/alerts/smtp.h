// A small SMTP client (RFC 5321) for alert email: one connection, one message, no TLS and no
// authentication (the SMTP host is the operator's relay, as --smtp names it). The session is
// EHLO (HELO when EHLO is refused), MAIL FROM, RCPT TO for each recipient, DATA with CRLF line
// ends and dot-stuffing, QUIT; every step, connect included, must finish before one deadline.
// Errors name the step and quote the server's reply, e.g.
//   "SMTP RCPT TO:<ops@example.com>: server replied 550 5.1.1 no such user".
// Thread-safety: one Send at a time per SmtpClient; Cancel may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::alerts {

struct SmtpMessage {
  std::string from;             // The envelope sender, a bare address (no angle brackets).
  std::vector<std::string> to;  // The envelope recipients, bare addresses.
  std::string data;             // Headers, a blank line and the body; any line ends.
};

class SmtpClient {
 public:
  SmtpClient();
  ~SmtpClient();
  SmtpClient(const SmtpClient&) = delete;
  SmtpClient& operator=(const SmtpClient&) = delete;

  // Delivers `message` through host:port, all within `timeout`. OK once the server accepts the
  // data (250). FailedPrecondition when the server refuses for good (a 5xx reply) or the message
  // is malformed: retrying cannot help. Unavailable for everything worth retrying: no
  // connection, a timeout, a 4xx reply, a broken connection, or Cancel.
  Status Send(const std::string& host, int port, const SmtpMessage& message,
              std::chrono::milliseconds timeout);

  // Makes a Send in progress (or the next one) return Unavailable promptly.
  void Cancel();

 private:
  int cancel_fd_ = -1;  // An eventfd every wait also polls; Cancel makes it readable.
  std::atomic<bool> cancelled_{false};
};

// `data` as DATA sends it: every line end CRLF, a line that starts with '.' given a second one,
// and the terminating "\r\n.\r\n".
std::string SmtpDataForWire(const std::string& data);

}  // namespace tessera::alerts
