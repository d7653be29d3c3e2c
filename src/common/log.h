// The process's log: spdlog's default logger, writing to standard error (never standard output,
// which commands keep for their results) with UTC timestamps. Call InitLogging once, early.
// Thread-safety: spdlog's loggers are thread-safe; InitLogging is not.
#pragma once

namespace tessera {

void InitLogging();

}  // namespace tessera
