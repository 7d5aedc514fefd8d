// Test helper: a new, empty folder of the test's own under the test
// temporary folder, so that test cases run side by side (ctest -j, each
// case its own process) never share a path.
#ifndef PS_TESTS_UTIL_TEMP_DIR_H_
#define PS_TESTS_UTIL_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace ps {

// "<TempDir>/<prefix>-XXXXXX", made by mkdtemp; the caller removes it.
inline std::string UniqueTempDir(const std::string& prefix) {
  std::string path = ::testing::TempDir();
  if (!path.empty() && path.back() != '/') path += '/';
  path += prefix + "-XXXXXX";
  EXPECT_NE(::mkdtemp(path.data()), nullptr) << path;
  return path;
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_TEMP_DIR_H_
