// SignalCatcher: SIGINT and SIGTERM arrive in its pipe, in order; only one
// exists at a time; the previous handlers come back when it goes.
#include "tools/signal_catcher.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <cstring>
#include <vector>

#include "tests/util/status_matchers.h"

namespace ps {
namespace {

extern "C" void PreviousHandler(int) {}

TEST(SignalCatcherTest, SignalsArriveInThePipeInOrder) {
  StatusOr<std::unique_ptr<SignalCatcher>> catcher = SignalCatcher::Install();
  ASSERT_OK(catcher);
  EXPECT_TRUE((*catcher)->Drain().empty());
  ASSERT_EQ(::raise(SIGTERM), 0);
  ASSERT_EQ(::raise(SIGINT), 0);
  pollfd fd{(*catcher)->read_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&fd, 1, 1000), 1);
  EXPECT_EQ((*catcher)->Drain(), (std::vector<int>{SIGTERM, SIGINT}));
  EXPECT_TRUE((*catcher)->Drain().empty());
}

TEST(SignalCatcherTest, OnlyOneAtATime) {
  StatusOr<std::unique_ptr<SignalCatcher>> first = SignalCatcher::Install();
  ASSERT_OK(first);
  StatusOr<std::unique_ptr<SignalCatcher>> second = SignalCatcher::Install();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("handle_signals = false"), std::string::npos);
  first->reset();
  EXPECT_OK(SignalCatcher::Install().status());  // free again
}

TEST(SignalCatcherTest, ThePreviousHandlersComeBack) {
  struct sigaction previous;
  std::memset(&previous, 0, sizeof(previous));
  previous.sa_handler = PreviousHandler;
  sigemptyset(&previous.sa_mask);
  struct sigaction saved_int, saved_term;
  ASSERT_EQ(::sigaction(SIGINT, &previous, &saved_int), 0);
  ASSERT_EQ(::sigaction(SIGTERM, &previous, &saved_term), 0);
  {
    StatusOr<std::unique_ptr<SignalCatcher>> catcher = SignalCatcher::Install();
    ASSERT_OK(catcher);
    struct sigaction now;
    ::sigaction(SIGINT, nullptr, &now);
    EXPECT_NE(now.sa_handler, PreviousHandler);
  }
  struct sigaction after_int, after_term;
  ::sigaction(SIGINT, nullptr, &after_int);
  ::sigaction(SIGTERM, nullptr, &after_term);
  EXPECT_EQ(after_int.sa_handler, PreviousHandler);
  EXPECT_EQ(after_term.sa_handler, PreviousHandler);
  ::sigaction(SIGINT, &saved_int, nullptr);
  ::sigaction(SIGTERM, &saved_term, nullptr);
}

}  // namespace
}  // namespace ps
