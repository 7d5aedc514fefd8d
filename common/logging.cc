#include "common/logging.h"

#include <memory>

#include <spdlog/sinks/stdout_sinks.h>

namespace ps {

Status InitLogging(const std::string& role, const std::string& level) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return InvalidArgumentError("log level '" + level +
                                "' is not one of trace, debug, info, warn, error, off");
  }
  auto logger = std::make_shared<spdlog::logger>(
      role, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %n: %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::trace);  // logs are read line by line by ps_launch
  spdlog::set_default_logger(std::move(logger));
  spdlog::set_level(lvl);
  return Status::Ok();
}

}  // namespace ps
