// Test helper: an Env whose pieces the test picks, each the real one
// unless set: the clock (a FakeClock, which SleepFor then moves), the
// channels (tests/util/faulty_channel.h's factories) and the file system
// (tests/util/faulty_filesystem.h).
//
// Set the pieces before the Env is handed to a server or client; they
// must outlive it. Thread-safe as its pieces are.
#ifndef PS_TESTS_UTIL_TEST_ENV_H_
#define PS_TESTS_UTIL_TEST_ENV_H_

#include <memory>
#include <thread>

#include "common/env.h"
#include "tests/util/fake_clock.h"

namespace ps {

class TestEnv final : public Env {
 public:
  TestEnv() = default;
  // On `clock`: SleepFor moves it by the time slept.
  explicit TestEnv(FakeClock* clock) : fake_clock_(clock) {}

  // Channels come from `factory` (null: ZmqChannel::Connect).
  void set_channels(ChannelFactory factory) { channels_ = std::move(factory); }
  // Files go through `files` (null: the OS's).
  void set_filesystem(Filesystem* files) { files_ = files; }

  const Clock& clock() override {
    if (fake_clock_ != nullptr) return *fake_clock_;
    return os_.clock();
  }
  // Sleeps in real time too (a server sleeping while the kernel releases a
  // port still gives it the time), then moves a FakeClock by `duration`.
  void SleepFor(Clock::Duration duration) override {
    os_.SleepFor(duration);
    if (fake_clock_ != nullptr) fake_clock_->Advance(duration);
  }
  StatusOr<std::unique_ptr<Channel>> Connect(Context* context,
                                             const ChannelOptions& options) override {
    if (channels_ != nullptr) return channels_(context, options);
    return os_.Connect(context, options);
  }
  Filesystem& filesystem() override { return files_ != nullptr ? *files_ : os_.filesystem(); }

 private:
  OsEnv os_;
  FakeClock* const fake_clock_ = nullptr;
  ChannelFactory channels_;
  Filesystem* files_ = nullptr;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_TEST_ENV_H_
