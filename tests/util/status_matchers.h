// Test helper: ASSERT_OK / EXPECT_OK for a Status or a StatusOr<T>. On
// failure the message is the status text, and more can be streamed in:
//   ASSERT_OK(client->Wait(ticket)) << "pull of clock " << c;
#ifndef PS_TESTS_UTIL_STATUS_MATCHERS_H_
#define PS_TESTS_UTIL_STATUS_MATCHERS_H_

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "common/status.h"

namespace ps::status_matchers {

// Success when `s` is OK. `s` is a Status, a StatusOr<T> (its status), or
// any status type with ok() and ToString() (RocksDB's, in tests that make a
// database by hand).
template <typename S>
::testing::AssertionResult IsOk(const char* expr, const S& s) {
  if constexpr (requires { s.status(); }) {
    return IsOk(expr, s.status());
  } else {
    if (s.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << expr << " is " << s.ToString();
  }
}

}  // namespace ps::status_matchers

namespace ps {

// Success when `status` is InvalidArgument and its message contains every
// one of `parts` (the loader's and Validate()'s errors):
//   EXPECT_TRUE(InvalidWith(LoadJobString(text), {"tables[0].rows", "line 3"}));
inline ::testing::AssertionResult InvalidWith(const Status& status,
                                              std::initializer_list<std::string> parts) {
  if (status.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "expected InvalidArgument, got " << status.ToString();
  }
  for (const std::string& part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message lacks \"" << part << "\": " << status.message();
    }
  }
  return ::testing::AssertionSuccess() << status.message();
}

// Success when loading the job file `path` failed with InvalidArgument
// whose message starts with the path and contains every one of `parts`:
//   EXPECT_TRUE(RejectedNamingFile(LoadJobFile(path), path, {"tables[0].rows"}));
template <typename Job>
::testing::AssertionResult RejectedNamingFile(const StatusOr<Job>& loaded, const std::string& path,
                                              std::initializer_list<std::string> parts) {
  if (loaded.ok()) return ::testing::AssertionFailure() << path << " loaded without error";
  if (loaded.status().message().rfind(path + ": ", 0) != 0) {
    return ::testing::AssertionFailure() << "message does not start with \"" << path
                                         << ": \": " << loaded.status().message();
  }
  return InvalidWith(loaded.status(), parts);
}

}  // namespace ps

#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::ps::status_matchers::IsOk, expr)
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::ps::status_matchers::IsOk, expr)

#endif  // PS_TESTS_UTIL_STATUS_MATCHERS_H_
