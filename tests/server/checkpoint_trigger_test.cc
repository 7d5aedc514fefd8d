#include "server/checkpoint_trigger.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/restore.h"
#include "store/shard_store.h"
#include "tests/util/fake_clock.h"
#include "tests/util/faulty_filesystem.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using Answer = CheckpointTrigger::Answer;

// A Filesystem whose every call waits while the gate is closed: a write
// held there is "in progress" for as long as the test needs.
class GateFilesystem final : public Filesystem {
 public:
  // `inner` must outlive this one.
  explicit GateFilesystem(Filesystem* inner) : inner_(inner) {}

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    opened_.notify_all();
  }

  StatusOr<Type> TypeOf(const std::string& path) override {
    Pass();
    return inner_->TypeOf(path);
  }
  StatusOr<std::vector<Entry>> List(const std::string& dir) override {
    Pass();
    return inner_->List(dir);
  }
  Status CreateDirs(const std::string& path) override {
    Pass();
    return inner_->CreateDirs(path);
  }
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    Pass();
    return inner_->NewWritableFile(path);
  }
  Status SyncFile(const std::string& path) override {
    Pass();
    return inner_->SyncFile(path);
  }
  Status SyncDir(const std::string& path) override {
    Pass();
    return inner_->SyncDir(path);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    Pass();
    return inner_->Rename(from, to);
  }
  Status Exchange(const std::string& a, const std::string& b) override {
    Pass();
    return inner_->Exchange(a, b);
  }
  Status RemoveFile(const std::string& path) override {
    Pass();
    return inner_->RemoveFile(path);
  }
  Status RemoveTree(const std::string& path) override {
    Pass();
    return inner_->RemoveTree(path);
  }

 private:
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    opened_.wait(lock, [this] { return open_; });
  }

  Filesystem* const inner_;
  std::mutex mu_;
  std::condition_variable opened_;
  bool open_ = true;  // guarded by mu_
};

// A CheckpointStageHook that holds the writer at one stage until the test
// lets it go, so the test can act while a generation is half written.
class StageHold {
 public:
  explicit StageHold(CheckpointStage stage) : stage_(stage) {}

  CheckpointStageHook Hook() {
    return [this](CheckpointStage stage, int64_t, const std::string&) {
      if (stage != stage_) return;
      std::unique_lock<std::mutex> lock(mu_);
      reached_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return let_go_; });
    };
  }
  // Whether the writer reached the stage within 60 s.
  bool AwaitReached() {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [this] { return reached_; });
  }
  void LetGo() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      let_go_ = true;
    }
    changed_.notify_all();
  }

 private:
  const CheckpointStage stage_;
  std::mutex mu_;
  std::condition_variable changed_;
  bool reached_ = false;  // guarded by mu_
  bool let_go_ = false;   // guarded by mu_
};

class CheckpointTriggerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = TestJob().Table("w", 300, 4, OptimizerKind::kAdam).Table("b", 7).Build();
    auto store = ShardStore::Create(job_, 0);
    ASSERT_OK(store);
    store_ = std::move(*store);
    // On tmpfs, where there is one, fsyncs cost nothing: the fault test
    // writes hundreds of generations.
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm")
                                                       : fs::temp_directory_path();
    root_ = base / ("ps_checkpoint_trigger_test_" + std::to_string(::getpid()) + "_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override {
    if (hold_ != nullptr) hold_->LetGo();  // also when the test failed holding it
    trigger_.reset();
    dir_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // A trigger over `folder` (written through gate_, then faulty_) whose
  // answers land in answers_, counting boundaries from clock 0.
  void StartTrigger(const std::string& folder, int64_t every_clocks = 1000,
                    size_t max_waiting = 1000) {
    trigger_.reset();
    auto opened = CheckpointDir::Open((root_ / folder).string(), &gate_);
    ASSERT_OK(opened);
    dir_ = std::move(*opened);
    CheckpointTriggerOptions options;
    options.every_clocks = every_clocks;
    options.write.keep = 10;
    if (hold_ != nullptr) options.write.at_stage = hold_->Hook();
    options.max_waiting = max_waiting;
    // The snapshot a shard takes: shared with the store's blocks.
    trigger_ = std::make_unique<CheckpointTrigger>(
        options, *dir_,
        [this](int64_t clock, const DeltaSince* since) {
          return store_->CheckpointSnapshot(job_, 0, clock, since);
        },
        clock_, [this](Answer& answer) { answers_.push_back(std::move(answer)); },
        /*last_clock=*/0);
  }

  // A CHECKPOINT request with id `id` at minimum clock `clock`.
  void Request(uint64_t id, int64_t clock) {
    MessageHeader request;
    request.op = Op::kCheckpoint;
    request.request_id = id;
    Frame routing_id = Frame::CopyOf("control-" + std::to_string(id));
    trigger_->Request(routing_id, request, clock);
  }

  // Waits for the write in progress to end, then polls at `clock`.
  void AwaitWrite(int64_t clock) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (trigger_->writing()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the write did not end";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    trigger_->Poll(clock);
  }

  // Sets every value and optimizer state of the store to numbers of
  // `seed`, and returns the store's copy.
  ShardSnapshot SetStore(int64_t seed) {
    ShardSnapshot s = store_->Snapshot(job_, 0, seed).value();
    for (TableSnapshot& t : s.tables) {
      for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = seed + 0.25f * i;
      for (std::vector<float>& slot : t.slots) {
        for (size_t i = 0; i < slot.size(); ++i) slot[i] = -seed - 0.5f * i;
      }
    }
    store_->Restore(s);
    return s;
  }

  // Generation `clock` of dir_, restored into a new store, holds exactly
  // the values and optimizer state of `expected`.
  void ExpectRestores(int64_t clock, const ShardSnapshot& expected) {
    auto restored = ShardStore::Create(job_, 0, /*initialize=*/false);
    ASSERT_OK(restored);
    ASSERT_OK(RestoreStore(*dir_, clock, job_, 0, restored->get()).status());
    for (uint32_t t = 0; t < expected.tables.size(); ++t) {
      EXPECT_EQ((*restored)->CopyValues(t), expected.tables[t].values) << "table " << t;
      for (uint32_t k = 0; k < expected.tables[t].slots.size(); ++k) {
        EXPECT_EQ((*restored)->CopySlot(t, k), expected.tables[t].slots[k])
            << "table " << t << " slot " << k;
      }
    }
  }

  // answers_[i] is request `id`'s: generation `clock` of dir_.
  void ExpectGeneration(size_t i, uint64_t id, int64_t clock) {
    ASSERT_LT(i, answers_.size());
    EXPECT_EQ(answers_[i].request.request_id, id);
    EXPECT_OK(answers_[i].status);
    EXPECT_EQ(answers_[i].clock, clock);
    EXPECT_EQ(answers_[i].path, dir_->GenerationPath(clock));
  }

  std::vector<int64_t> Generations() const { return dir_->Generations().value(); }

  JobOptions job_;
  std::unique_ptr<ShardStore> store_;
  // When set before StartTrigger, holds each write at its stage.
  std::unique_ptr<StageHold> hold_;
  fs::path root_;
  FakeClock clock_;
  OsFilesystem os_;
  FaultyFilesystem faulty_{&os_};
  GateFilesystem gate_{&faulty_};
  std::unique_ptr<CheckpointDir> dir_;
  std::vector<Answer> answers_;
  std::unique_ptr<CheckpointTrigger> trigger_;
};

TEST_F(CheckpointTriggerTest, WritesAGenerationAtEveryBoundaryOfEveryClocks) {
  StartTrigger("boundaries", /*every_clocks=*/5);
  trigger_->ClockAdvanced(4);
  EXPECT_FALSE(trigger_->writing());
  EXPECT_EQ(trigger_->started(), 0u);

  trigger_->ClockAdvanced(5);
  EXPECT_EQ(trigger_->started(), 1u);
  EXPECT_EQ(trigger_->last_clock(), 5);
  AwaitWrite(5);
  trigger_->ClockAdvanced(9);  // the same interval
  EXPECT_EQ(trigger_->started(), 1u);
  trigger_->ClockAdvanced(12);  // crossed 10: generation of the clock it is at
  EXPECT_EQ(trigger_->started(), 2u);
  EXPECT_EQ(trigger_->last_clock(), 12);
  AwaitWrite(12);
  EXPECT_EQ(Generations(), (std::vector<int64_t>{5, 12}));
  EXPECT_TRUE(answers_.empty());
}

// A table of dim 3 in four blocks of 87381 rows (the last of 1000), with
// adam: its run records of 5461 rows do not divide a block, so some run
// spans two blocks. And a small table in one block.
constexpr uint64_t kBlockRows = 87381;
constexpr uint64_t kBlocks = 4;
JobOptions BlocksJob() {
  TableOptions emb = TestTable("emb", (kBlocks - 1) * kBlockRows + 1000, 3, OptimizerKind::kAdam);
  emb.init.kind = InitKind::kUniform;
  emb.init.value = 0.5f;
  return TestJob().Table(emb).Table("b", 7).Build();
}

// A push of `count` rows of table "emb" from `first`, every value `g`.
void PushRows(ShardStore& store, uint64_t first, uint64_t count, float g, int64_t clock) {
  const std::vector<float> values(count * 3, g);
  Request r;
  r.header.op = Op::kPush;
  r.header.table = 0;
  r.header.first_row = first;
  r.header.count = count;
  r.header.dim = 3;
  r.header.flags = kFlagDenseRange;
  r.values = values;
  ASSERT_OK(store.ApplyPush(r, clock));
}

// The generation's snapshot shares the store's blocks: pushes during its
// write-out copy each block they change (once), land in the store as they
// would without a checkpoint, and the generation holds the state of its
// clock bit for bit, values and optimizer state.
TEST_F(CheckpointTriggerTest, PushesDuringTheWriteCopyTheBlocksAndTheGenerationHoldsItsClock) {
  job_ = BlocksJob();
  store_ = ShardStore::Create(job_, 0).value();
  auto twin = ShardStore::Create(job_, 0).value();  // the same pushes, no checkpoint
  for (ShardStore* s : {store_.get(), twin.get()}) PushRows(*s, 0, s->layouts()[0].rows, 0.5f, 4);
  const ShardSnapshot at5 = store_->Snapshot(job_, 0, 5).value();
  hold_ = std::make_unique<StageHold>(CheckpointStage::kCreated);
  StartTrigger("pushes_during_write", /*every_clocks=*/5);
  const uint64_t copies = store_->copy_on_write_count();
  trigger_->ClockAdvanced(5);
  ASSERT_TRUE(hold_->AwaitReached());

  // Every block changes while none is written yet.
  for (ShardStore* s : {store_.get(), twin.get()}) {
    PushRows(*s, 0, s->layouts()[0].rows, -1.25f, 5);
    PushRows(*s, 10, 2 * kBlockRows, 3.0f, 5);
  }
  EXPECT_EQ(store_->copy_on_write_count(), copies + kBlocks);
  ASSERT_TRUE(trigger_->writing());
  hold_->LetGo();
  // And again while the writer reads the blocks.
  for (ShardStore* s : {store_.get(), twin.get()}) PushRows(*s, 0, s->layouts()[0].rows, 0.75f, 6);
  AwaitWrite(6);

  EXPECT_EQ(Generations(), (std::vector<int64_t>{5}));
  ExpectRestores(5, at5);
  EXPECT_EQ(store_->Checksum(0), twin->Checksum(0));
  EXPECT_EQ(store_->Checksum(1), twin->Checksum(1));
}

// The writer gives each block back once its records are made: halfway
// through, a push into a written block changes it in place and one into a
// block still to be written copies it; once the write is over, no push
// copies a block.
TEST_F(CheckpointTriggerTest, TheWriterGivesEachBlockBackOnceItIsWritten) {
  job_ = BlocksJob();
  store_ = ShardStore::Create(job_, 0).value();
  const ShardSnapshot at5 = store_->Snapshot(job_, 0, 5).value();
  hold_ = std::make_unique<StageHold>(CheckpointStage::kRecords);
  StartTrigger("release_as_written", /*every_clocks=*/5);
  trigger_->ClockAdvanced(5);
  // Half of the 50 run records are made: the rows below 25 x 5461, all
  // of block 0 and part of block 1.
  ASSERT_TRUE(hold_->AwaitReached());
  uint64_t copies = store_->copy_on_write_count();
  PushRows(*store_, 0, kBlockRows, 1.0f, 5);
  EXPECT_EQ(store_->copy_on_write_count(), copies) << "block 0, written, was copied";
  PushRows(*store_, 3 * kBlockRows, 10, 1.0f, 5);
  EXPECT_EQ(store_->copy_on_write_count(), copies + 1) << "block 3, not written, was not copied";
  hold_->LetGo();
  AwaitWrite(5);
  ExpectRestores(5, at5);

  copies = store_->copy_on_write_count();
  PushRows(*store_, 0, store_->layouts()[0].rows, 1.0f, 6);
  EXPECT_EQ(store_->copy_on_write_count(), copies) << "a block is still held after the write";
}

TEST_F(CheckpointTriggerTest, ABoundaryWaitsForTheWriteInProgress) {
  StartTrigger("boundary_waits", /*every_clocks=*/5);
  const ShardSnapshot at5 = SetStore(5);
  gate_.Close();
  trigger_->ClockAdvanced(5);
  ASSERT_TRUE(trigger_->writing());
  const ShardSnapshot at10 = SetStore(10);
  std::thread opener([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate_.Open();
  });
  trigger_->ClockAdvanced(10);  // waits for generation 5, then starts 10
  opener.join();
  EXPECT_EQ(trigger_->started(), 2u);
  AwaitWrite(10);
  EXPECT_EQ(Generations(), (std::vector<int64_t>{5, 10}));
  ExpectRestores(5, at5);
  ExpectRestores(10, at10);
}

// A shard that stops answers the requests still waiting for its write:
// with that generation when it is of the clock they were made at, and
// otherwise saying none of their clock was written.
TEST_F(CheckpointTriggerTest, StopAnswersTheRequestsStillWaiting) {
  StartTrigger("stop_same_clock");
  gate_.Close();
  Request(1, 3);  // starts generation 3
  Request(2, 3);  // waits for it
  ASSERT_EQ(answers_.size(), 1u);
  gate_.Open();
  trigger_->Stop(3);
  ASSERT_EQ(answers_.size(), 2u);
  ExpectGeneration(1, 2, 3);
  EXPECT_EQ(trigger_->requests_waiting(), 0u);

  answers_.clear();
  StartTrigger("stop_clock_moved");
  gate_.Close();
  Request(3, 3);
  Request(4, 3);
  gate_.Open();
  trigger_->Stop(4);  // the clock moved on: generation 3 no longer holds the state
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[1].request.request_id, 4u);
  EXPECT_EQ(answers_[1].status.code(), StatusCode::kUnavailable);
  EXPECT_NE(answers_[1].status.message().find("before it wrote a checkpoint of clock 4"),
            std::string::npos)
      << answers_[1].status.ToString();
  EXPECT_NE(answers_[1].status.message().find(dir_->GenerationPath(3)), std::string::npos);
  EXPECT_EQ(Generations(), (std::vector<int64_t>{3}));
}

TEST_F(CheckpointTriggerTest, RequestsDuringAWriteWaitAndGetItsGeneration) {
  StartTrigger("requests_wait");
  gate_.Close();
  Request(1, 3);  // starts generation 3: answered at once
  ASSERT_EQ(answers_.size(), 1u);
  ExpectGeneration(0, 1, 3);
  Request(2, 3);
  Request(3, 3);
  EXPECT_EQ(answers_.size(), 1u);
  EXPECT_EQ(trigger_->requests_waiting(), 2u);
  trigger_->Poll(3);  // still writing: nothing to answer
  EXPECT_EQ(answers_.size(), 1u);

  gate_.Open();
  AwaitWrite(3);
  ASSERT_EQ(answers_.size(), 3u);
  ExpectGeneration(1, 2, 3);
  ExpectGeneration(2, 3, 3);
  EXPECT_EQ(trigger_->requests_waiting(), 0u);
  EXPECT_EQ(trigger_->started(), 1u);  // one generation for all three
  EXPECT_EQ(Generations(), (std::vector<int64_t>{3}));
}

TEST_F(CheckpointTriggerTest, RequestsThatWaitedGetANewGenerationOnceTheClockMoved) {
  StartTrigger("clock_moved");
  gate_.Close();
  Request(1, 3);
  Request(2, 3);
  gate_.Open();
  AwaitWrite(4);  // the minimum clock is 4 by the time generation 3 is done
  ASSERT_EQ(answers_.size(), 2u);
  ExpectGeneration(1, 2, 4);
  EXPECT_EQ(trigger_->started(), 2u);
  AwaitWrite(4);
  EXPECT_EQ(Generations(), (std::vector<int64_t>{3, 4}));
}

TEST_F(CheckpointTriggerTest, ABoundaryAnswersTheWaitingRequestsWithItsGeneration) {
  StartTrigger("boundary_answers", /*every_clocks=*/5);
  gate_.Close();
  Request(1, 3);
  Request(2, 3);
  std::thread opener([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate_.Open();
  });
  trigger_->ClockAdvanced(5);
  opener.join();
  ASSERT_EQ(answers_.size(), 2u);
  ExpectGeneration(1, 2, 5);
  AwaitWrite(5);
  EXPECT_EQ(answers_.size(), 2u);
  EXPECT_EQ(Generations(), (std::vector<int64_t>{3, 5}));
}

TEST_F(CheckpointTriggerTest, RequestsBeyondSocketHwmAreRefusedWhileAWriteRuns) {
  StartTrigger("bounded", /*every_clocks=*/1000, /*max_waiting=*/2);
  gate_.Close();
  Request(1, 3);
  Request(2, 3);
  Request(3, 3);
  Request(4, 3);  // a third waiting request: over the bound
  ASSERT_EQ(answers_.size(), 2u);
  const Answer& refused = answers_[1];
  EXPECT_EQ(refused.request.request_id, 4u);
  EXPECT_EQ(refused.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.status.message(),
            "shard 0: 2 CHECKPOINT requests wait already for the generation of clock 3 being "
            "written (server.socket_hwm); try again when it is done");
  EXPECT_EQ(trigger_->requests_waiting(), 2u);

  gate_.Open();
  AwaitWrite(3);
  ASSERT_EQ(answers_.size(), 4u);
  ExpectGeneration(2, 2, 3);
  ExpectGeneration(3, 3, 3);
  Request(5, 3);  // the write is over: a new one starts
  ASSERT_EQ(answers_.size(), 5u);
  ExpectGeneration(4, 5, 3);
  AwaitWrite(3);
}

// For each write call N of a generation in turn and each fault a disk
// makes there: a CHECKPOINT request waiting for that write is answered with
// an error naming what failed, the generation written before still
// restores exactly, and the next request gets a generation that does.
TEST_F(CheckpointTriggerTest, AFaultAtAnyWriteCallIsAnsweredAndTheNextRequestSucceeds) {
  // The write calls of one generation, with one written before it.
  const ShardSnapshot before = SetStore(10);
  const ShardSnapshot after = SetStore(20);
  uint64_t calls = 0;
  uint64_t appends = 0;
  {
    auto counting = CheckpointDir::Open((root_ / "count").string(), &faulty_);
    ASSERT_OK(counting);
    CheckpointWriteOptions options;
    options.keep = 10;
    ASSERT_OK((*counting)->Write(before, options));
    const uint64_t calls_before = faulty_.write_calls();
    const uint64_t appends_before = faulty_.appends();
    ASSERT_OK((*counting)->Write(after, options));
    calls = faulty_.write_calls() - calls_before;
    appends = faulty_.appends() - appends_before;
  }
  ASSERT_GT(appends, 1u);
  ASSERT_LT(calls, 300u) << "a generation makes more write calls than this test should loop over";

  using Fault = FaultyFilesystem::Fault;
  struct Case {
    Fault fault;
    uint64_t calls;  // the write calls it applies to
    StatusCode code;
  };
  const Case cases[] = {
      {Fault::kNoSpace, calls, StatusCode::kResourceExhausted},
      {Fault::kIoError, calls, StatusCode::kInternal},
      {Fault::kShortWrite, appends, StatusCode::kResourceExhausted},
  };
  uint64_t failed_writes = 0;
  for (const Case& c : cases) {
    for (uint64_t n = 1; n <= c.calls; ++n) {
      SCOPED_TRACE("fault " + std::to_string(static_cast<int>(c.fault)) + " at write call " +
                   std::to_string(n));
      answers_.clear();
      trigger_.reset();
      fs::remove_all(root_ / "faulty");
      StartTrigger("faulty", /*every_clocks=*/10);
      store_->Restore(before);
      trigger_->ClockAdvanced(10);  // the generation written before the fault
      AwaitWrite(10);
      store_->Restore(after);

      // Request 1 starts generation 17; request 2 waits for it and hears
      // how it went.
      gate_.Close();
      faulty_.FailNth(n, c.fault);
      Request(1, 17);
      Request(2, 17);
      gate_.Open();
      AwaitWrite(17);
      EXPECT_TRUE(faulty_.fired());
      faulty_.Clear();
      ASSERT_EQ(answers_.size(), 2u);
      ExpectGeneration(0, 1, 17);  // answered once the write started
      const Answer& heard = answers_[1];
      EXPECT_EQ(heard.request.request_id, 2u);
      if (heard.status.ok()) {
        // The fault hit a step whose failure is only logged (removing an
        // older generation, RocksDB's own cleanup).
        ExpectRestores(17, after);
      } else {
        ++failed_writes;
        EXPECT_EQ(heard.status.code(), c.code) << heard.status.ToString();
        EXPECT_NE(heard.status.message().find(dir_->path()), std::string::npos)
            << heard.status.ToString();
        EXPECT_NE(heard.status.message().find("injected"), std::string::npos)
            << heard.status.ToString();
      }
      ExpectRestores(10, before);

      // The trigger takes the next request, and its generation is whole.
      gate_.Close();
      Request(3, 17);
      Request(4, 17);
      gate_.Open();
      AwaitWrite(17);
      ASSERT_EQ(answers_.size(), 4u);
      ExpectGeneration(2, 3, 17);
      ExpectGeneration(3, 4, 17);
      ExpectRestores(17, after);
      ExpectRestores(10, before);
      if (HasFatalFailure()) return;
    }
  }
  // Most write calls are ones whose failure fails the generation.
  EXPECT_GT(failed_writes, (2 * calls + appends) / 2);
}

}  // namespace
}  // namespace ps
