// A real SMTP server on 127.0.0.1 for tests: it speaks enough of RFC 5321 (EHLO with a
// multi-line reply, HELO, MAIL FROM, RCPT TO, DATA with dot-stuffing, RSET, NOOP, QUIT) to take
// mail from a real client, and records every message it accepts. It can be told to answer
// slowly (a delay before every reply) or to refuse at one step, so tests see how a client copes.
// It listens on its own thread and serves each connection on another; the destructor stops them
// all promptly, even in the middle of a slow reply.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tessera::testing {

class SmtpSink {
 public:
  struct Message {
    std::string from;                     // The MAIL FROM address, without angle brackets.
    std::vector<std::string> recipients;  // The RCPT TO addresses, in order.
    std::string data;                     // As sent, CRLF line ends, dot-stuffing undone.

    // The value of the first header called `name` (case-insensitive), unfolded; "" if none.
    std::string Header(std::string_view name) const;
    // Everything after the blank line that ends the headers.
    std::string Body() const;
  };

  // The steps a sink can refuse at.
  enum class Step { kNone, kGreeting, kHelo, kMailFrom, kRcptTo, kData, kEndOfData };

  // Listens on 127.0.0.1:`port` (0: any free port). port() is 0 when listening failed.
  explicit SmtpSink(int port = 0);
  ~SmtpSink();
  SmtpSink(const SmtpSink&) = delete;
  SmtpSink& operator=(const SmtpSink&) = delete;

  int port() const { return port_; }

  // Waits `delay` before every reply (greeting included) from now on.
  void SetReplyDelay(std::chrono::milliseconds delay);
  // Answers `reply` (e.g. "550 5.1.1 no such user") at `step` from now on; kNone accepts all.
  // Refusing the greeting closes the connection after the reply, as RFC 5321 3.1 allows.
  void RefuseAt(Step step, std::string reply = "550 5.7.1 refused by the test sink");

  // The messages accepted so far, oldest first.
  std::vector<Message> messages() const;
  // Waits until at least `n` messages were accepted; false after `timeout`.
  bool WaitForMessages(size_t n, std::chrono::milliseconds timeout) const;
  // Connections accepted so far.
  int connections() const;

 private:
  void AcceptLoop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int stop_fd_ = -1;  // An eventfd; readable once the destructor runs.
  int port_ = 0;
  std::thread acceptor_;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<std::thread> servers_;  // Guarded by mu_.
  std::vector<Message> messages_;     // Guarded by mu_.
  std::chrono::milliseconds delay_{0};
  Step refuse_at_ = Step::kNone;
  std::string refusal_;
  int connections_ = 0;
};

}  // namespace tessera::testing
