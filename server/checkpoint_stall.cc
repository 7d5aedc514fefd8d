#include "server/checkpoint_stall.h"

#include <charconv>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "common/logging.h"

namespace ps {

StatusOr<StallPoint> ParseStallPoint(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return InvalidArgumentError("expected <stage>:<clock>, e.g. records:4");
  }
  const std::string_view name = text.substr(0, colon);
  const std::string_view number = text.substr(colon + 1);
  StallPoint point;
  bool known = false;
  for (const CheckpointStage stage : kCheckpointStages) {
    if (name == CheckpointStageName(stage)) {
      point.stage = stage;
      known = true;
    }
  }
  if (!known) {
    return InvalidArgumentError(
        "unknown stage \"" + std::string(name) +
        "\"; expected created, records, flushed, synced, published or pruning");
  }
  const char* last = number.data() + number.size();
  const auto [ptr, ec] = std::from_chars(number.data(), last, point.clock);
  if (number.empty() || ec != std::errc() || ptr != last || point.clock < 0) {
    return InvalidArgumentError("the clock \"" + std::string(number) +
                                "\" is not an integer >= 0");
  }
  return point;
}

CheckpointStageHook TestStallHook(std::string_view source, std::string_view text) {
  if (text.empty()) return nullptr;
  StatusOr<StallPoint> point = ParseStallPoint(text);
  if (!point.ok()) {
    PS_LOG_WARN("checkpoint: {}=\"{}\" ignored: {}", source, text, point.status().message());
    return nullptr;
  }
  PS_LOG_WARN("checkpoint: {} is set: a write of a generation of clock >= {} will stall at {} "
              "until the process is killed (a test hook)",
              source, point->clock, CheckpointStageName(point->stage));
  return [stall = *point, source = std::string(source)](CheckpointStage stage, int64_t clock,
                                                        const std::string& tmp) {
    if (stage != stall.stage || clock < stall.clock) return;
    PS_LOG_WARN("checkpoint: stalled at {} writing gen-{} in {} ({})", CheckpointStageName(stage),
                clock, std::filesystem::path(tmp).parent_path().string(), source);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  };
}

}  // namespace ps
