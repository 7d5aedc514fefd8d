// Logging: spdlog, set up once per process by InitLogging. Every process
// writes to stderr with its role in each line, so ps_launch can interleave
// the logs of many processes and a user can still tell them apart.
#ifndef PS_COMMON_LOGGING_H_
#define PS_COMMON_LOGGING_H_

#include <string>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace ps {

// Sets the default logger's pattern to "<time> <level> <role>: <message>"
// and its level. `level` is one of trace, debug, info, warn, error, off;
// anything else is InvalidArgument. Call once at the start of main().
Status InitLogging(const std::string& role, const std::string& level = "info");

}  // namespace ps

#define PS_LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define PS_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define PS_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define PS_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define PS_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)

#endif  // PS_COMMON_LOGGING_H_
