#include "common/status.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  PS_ASSIGN_OR_RETURN(int h, Half(x));
  PS_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, OkIsFreeAndEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorsCarryCodeMessageAndContext) {
  Status s = DeadlineExceededError("no reply").WithContext("server 1");
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.ToString(), "DeadlineExceeded: server 1: no reply");
  EXPECT_TRUE(s.IsRetryable());
  EXPECT_TRUE(UnavailableError("x").IsRetryable());
  EXPECT_FALSE(InvalidArgumentError("x").IsRetryable());
}

TEST(StatusTest, MacrosPropagateTheFirstError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "3 is odd");
}

TEST(StatusTest, StatusOrFromOkStatusIsAnInternalError) {
  StatusOr<int> v(Status::Ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

TEST(StatusDeathTest, ValueOfAnErrorAbortsWithTheStatusText) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  StatusOr<int> odd = Half(3);
  EXPECT_DEATH((void)odd.value(), "StatusOr::value\\(\\) on an error status: InvalidArgument: 3 is odd");
  EXPECT_DEATH((void)*odd, "operator\\* on an error status: InvalidArgument: 3 is odd");
  StatusOr<std::string> missing = NotFoundError("no such table 'w'");
  EXPECT_DEATH((void)missing->size(), "operator-> on an error status: NotFound: no such table 'w'");
  EXPECT_DEATH((void)std::move(missing).value(), "NotFound: no such table 'w'");
}

}  // namespace
}  // namespace ps
