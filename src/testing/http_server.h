// A test's own HTTP server (a webhook receiver, a registry) on a thread of its own.
#pragma once

#include <httplib.h>

#include <chrono>
#include <thread>

namespace tessera::testing {

// Serves `server`, already bound, on a new thread, returned once its accept loop runs (or after
// 5 s if it never does): httplib's stop() before that is lost, and the join then waits for ever.
inline std::thread ServeInBackground(httplib::Server& server) {
  std::thread thread([&server] { server.listen_after_bind(); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!server.is_running() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return thread;
}

}  // namespace tessera::testing
