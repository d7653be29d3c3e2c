#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace tessera {

void InitLogging() {
  if (spdlog::get("tessera")) return;
  auto logger = spdlog::stderr_logger_mt("tessera");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  spdlog::set_default_logger(logger);
}

}  // namespace tessera
