#include "common/process_priority.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>

namespace ps {

void LowerThisProcessPriority(int nice) {
  // Linux keeps a nice value per thread: each is set on its own.
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return;
  while (const dirent* entry = ::readdir(tasks)) {
    char* end = nullptr;
    const long tid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;  // "." and ".."
    errno = 0;
    const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno == 0 && now < nice) ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice);
  }
  ::closedir(tasks);
}

}  // namespace ps
