// Makes file permissions bind a test that runs as root: while a
// ScopedFilePermissions lives, the calling thread has no CAP_DAC_OVERRIDE
// and no CAP_DAC_READ_SEARCH in its effective set, so a folder without
// write permission refuses root as it refuses anyone. The capabilities stay
// permitted and come back when it goes. A process without them (not root)
// is unchanged.
//
// Only the calling thread is affected (capabilities are per thread): use it
// around code that touches the files on that thread.
#ifndef PS_TESTS_UTIL_FILE_PERMISSIONS_H_
#define PS_TESTS_UTIL_FILE_PERMISSIONS_H_

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ps {

class ScopedFilePermissions {
 public:
  ScopedFilePermissions() {
    if (::syscall(SYS_capget, &header_, saved_) != 0) {
      error_ = std::string("capget: ") + std::strerror(errno);
      return;
    }
    __user_cap_data_struct lowered[_LINUX_CAPABILITY_U32S_3];
    std::memcpy(lowered, saved_, sizeof(saved_));
    const uint32_t mask = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
    lowered[0].effective &= ~mask;
    if (::syscall(SYS_capset, &header_, lowered) != 0) {
      error_ = std::string("capset: ") + std::strerror(errno);
      return;
    }
    lowered_ = true;
  }
  ~ScopedFilePermissions() {
    if (lowered_) ::syscall(SYS_capset, &header_, saved_);
  }
  ScopedFilePermissions(const ScopedFilePermissions&) = delete;
  ScopedFilePermissions& operator=(const ScopedFilePermissions&) = delete;

  // Empty when permissions now bind this thread; else why not.
  const std::string& error() const { return error_; }

 private:
  __user_cap_header_struct header_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[_LINUX_CAPABILITY_U32S_3] = {};
  bool lowered_ = false;
  std::string error_;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_FILE_PERMISSIONS_H_
