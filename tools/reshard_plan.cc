#include "tools/reshard_plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ps {

std::string ReshardPlanPath(const std::string& checkpoint_dir, int64_t epoch) {
  return checkpoint_dir + "/reshard-" + std::to_string(epoch) + ".plan";
}

Status WriteReshardPlan(const std::string& checkpoint_dir, const ReshardPlan& plan) {
  const std::string path = ReshardPlanPath(checkpoint_dir, plan.epoch);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# written by ps_ctl reshard: ps_launch starts the servers of this map\n"
        << "epoch " << plan.epoch << "\nclock " << plan.clock << "\nconfig " << plan.config
        << "\nfollow " << (plan.follow ? 1 : 0) << "\n";
    out.flush();
    if (!out) {
      return InternalError("cannot write the reshard plan " + tmp + ": " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return InternalError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status RemoveReshardPlan(const std::string& checkpoint_dir, int64_t epoch) {
  const std::string path = ReshardPlanPath(checkpoint_dir, epoch);
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return InternalError("cannot remove the reshard plan " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> RemoveReshardPlans(const std::string& checkpoint_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(checkpoint_dir, ec);
  if (ec) return removed;  // no folder yet: no plans
  std::vector<std::filesystem::path> plans;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("reshard-", 0) == 0 && name.ends_with(".plan")) plans.push_back(entry.path());
  }
  std::sort(plans.begin(), plans.end());
  for (const std::filesystem::path& plan : plans) {
    if (!std::filesystem::remove(plan, ec) && ec) {
      return InternalError("cannot remove the reshard plan " + plan.string() + ": " +
                           ec.message());
    }
    removed.push_back(plan.string());
  }
  return removed;
}

StatusOr<ReshardPlan> ReadReshardPlan(const std::string& checkpoint_dir, int64_t epoch) {
  const std::string path = ReshardPlanPath(checkpoint_dir, epoch);
  std::ifstream in(path);
  if (!in) return NotFoundError("no reshard plan " + path);
  ReshardPlan plan;
  bool has_epoch = false, has_clock = false;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    bool ok = true;
    if (key == "epoch") {
      ok = static_cast<bool>(fields >> plan.epoch);
      has_epoch = ok;
    } else if (key == "clock") {
      ok = static_cast<bool>(fields >> plan.clock);
      has_clock = ok;
    } else if (key == "follow") {
      int follow = 0;
      ok = static_cast<bool>(fields >> follow) && (follow == 0 || follow == 1);
      plan.follow = follow == 1;
    } else if (key == "config") {
      std::getline(fields >> std::ws, plan.config);
      ok = !plan.config.empty();
    } else {
      ok = false;
    }
    if (!ok) {
      return DataLossError(path + ":" + std::to_string(number) + ": '" + line +
                           "' is not a reshard plan line (epoch N, clock N, config PATH, "
                           "follow 0|1)");
    }
  }
  if (!has_epoch || plan.epoch != epoch || !has_clock || plan.config.empty()) {
    return DataLossError(path + " is not the whole plan of map " + std::to_string(epoch) +
                         " (epoch, clock and config lines); ps_ctl reshard writes it");
  }
  return plan;
}

}  // namespace ps
