#include "common/subprocess.h"
#include "tests/util/status_matchers.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ps {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Subprocess> SpawnOrDie(std::vector<std::string> argv,
                                       bool capture = true) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.capture_output = capture;
  StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(options);
  EXPECT_OK(child);
  return child.ok() ? std::move(child).value() : nullptr;
}

std::unique_ptr<Subprocess> Shell(const std::string& script) {
  return SpawnOrDie({"/bin/sh", "-c", script});
}

// Reads `child`'s output until EOF or `timeout`.
std::vector<std::string> ReadLines(Subprocess& child,
                                   milliseconds timeout = milliseconds(2000)) {
  std::vector<std::string> lines;
  LineReader reader;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    StatusOr<bool> eof = reader.ReadFrom(child.output_fd(), &lines);
    EXPECT_OK(eof);
    if (!eof.ok() || *eof) return lines;
    pollfd pfd{child.output_fd(), POLLIN, 0};
    ::poll(&pfd, 1, 50);
  }
  ADD_FAILURE() << "no EOF on the output of " << child.program();
  return lines;
}

// Reads `child`'s output until a line equal to `want` (or EOF or timeout).
bool WaitForLine(Subprocess& child, const std::string& want,
                 std::vector<std::string>* lines,
                 milliseconds timeout = milliseconds(2000)) {
  LineReader reader;
  const auto deadline = Clock::now() + timeout;
  size_t seen = 0;
  while (Clock::now() < deadline) {
    StatusOr<bool> eof = reader.ReadFrom(child.output_fd(), lines);
    for (; seen < lines->size(); ++seen) {
      if ((*lines)[seen] == want) return true;
    }
    if (!eof.ok() || *eof) return false;
    pollfd pfd{child.output_fd(), POLLIN, 0};
    ::poll(&pfd, 1, 50);
  }
  return false;
}

// True while `pid` exists and is not a zombie (an orphan is reaped by
// whatever init the test runs under, which may be slow or never do it).
bool IsRunning(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno != ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  std::getline(stat, content);  // one line: "<pid> (<comm>) <state> ..."
  size_t paren = content.rfind(')');
  if (paren == std::string::npos || paren + 2 >= content.size()) return false;
  char state = content[paren + 2];
  return state != 'Z' && state != 'X';
}

bool StopsRunningWithin(pid_t pid, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (IsRunning(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

TEST(SubprocessTest, CapturesOutputOfEcho) {
  auto child = SpawnOrDie({"/bin/echo", "hello", "world"});
  ASSERT_NE(child, nullptr);
  EXPECT_GT(child->pid(), 0);
  EXPECT_EQ(ReadLines(*child), std::vector<std::string>{"hello world"});
  StatusOr<int> status = child->WaitFor(milliseconds(2000));
  ASSERT_OK(status);
  EXPECT_TRUE(ExitedSuccessfully(*status));
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with code 0");
}

TEST(SubprocessTest, MergesStderrIntoOutputInOrder) {
  auto child = Shell("echo out1; echo err1 >&2; echo out2");
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(ReadLines(*child),
            (std::vector<std::string>{"out1", "err1", "out2"}));
}

TEST(SubprocessTest, ReportsExitCode) {
  auto child = Shell("exit 3");
  ASSERT_NE(child, nullptr);
  StatusOr<int> status = child->WaitFor(milliseconds(2000));
  ASSERT_OK(status);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);
  EXPECT_FALSE(ExitedSuccessfully(*status));
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with code 3");
}

TEST(SubprocessTest, AddsEnvironmentVariables) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", "echo \"$PS_SUBPROCESS_TEST_VAR\""};
  options.env = {{"PS_SUBPROCESS_TEST_VAR", "forty two"}};
  options.capture_output = true;
  auto child = Subprocess::Spawn(options);
  ASSERT_OK(child);
  EXPECT_EQ(ReadLines(**child), std::vector<std::string>{"forty two"});
}

TEST(SubprocessTest, RejectsBadEnvironmentName) {
  SubprocessOptions options;
  options.argv = {"/bin/true"};
  options.env = {{"A=B", "c"}};
  auto child = Subprocess::Spawn(options);
  EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, EmptyArgvIsInvalidArgument) {
  auto child = Subprocess::Spawn(SubprocessOptions{});
  EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, MissingBinaryFailsInSpawn) {
  SubprocessOptions options;
  options.argv = {"/nonexistent/ps_no_such_program", "--flag"};
  options.capture_output = true;
  auto child = Subprocess::Spawn(options);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), StatusCode::kNotFound);
  EXPECT_NE(child.status().message().find("/nonexistent/ps_no_such_program"),
            std::string::npos)
      << child.status().ToString();
  EXPECT_NE(child.status().message().find("No such file"), std::string::npos)
      << child.status().ToString();
}

TEST(SubprocessTest, NonExecutableFileFailsInSpawn) {
  char path[] = "/tmp/ps_subprocess_test_XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ::chmod(path, 0600);
  SubprocessOptions options;
  options.argv = {path};
  auto child = Subprocess::Spawn(options);
  ::unlink(path);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), StatusCode::kPermissionDenied)
      << child.status().ToString();
}

TEST(SubprocessTest, SignalTerminatesChild) {
  auto child = SpawnOrDie({"/bin/sleep", "10"});
  ASSERT_NE(child, nullptr);
  ASSERT_OK(child->Signal(SIGTERM));
  StatusOr<int> status = child->WaitFor(milliseconds(2000));
  ASSERT_OK(status);
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
  EXPECT_EQ(DescribeWaitStatus(*status), "killed by signal 15 (Terminated)");
}

TEST(SubprocessTest, TryWaitReturnsNulloptWhileRunningThenTheSameStatus) {
  auto child = Shell("read line; exit 4");  // stdin is /dev/null: EOF
  ASSERT_NE(child, nullptr);
  StatusOr<int> status = child->WaitFor(milliseconds(2000));
  ASSERT_OK(status);
  EXPECT_EQ(child->TryWait(), *status);
  EXPECT_EQ(child->TryWait(), *status);
  EXPECT_EQ(child->wait_status(), *status);
  EXPECT_EQ(WEXITSTATUS(*status), 4);

  auto sleeper = SpawnOrDie({"/bin/sleep", "10"});
  ASSERT_NE(sleeper, nullptr);
  EXPECT_EQ(sleeper->TryWait(), std::nullopt);
  EXPECT_EQ(sleeper->wait_status(), std::nullopt);
  // Signalling a reaped child is a harmless no-op.
  EXPECT_OK(child->Signal(SIGKILL));
}

TEST(SubprocessTest, WaitForTimesOutWhileChildRuns) {
  auto child = SpawnOrDie({"/bin/sleep", "10"});
  ASSERT_NE(child, nullptr);
  const auto start = Clock::now();
  StatusOr<int> status = child->WaitFor(milliseconds(50));
  EXPECT_GE(Clock::now() - start, milliseconds(50));
  EXPECT_EQ(status.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(child->TryWait(), std::nullopt);
}

TEST(SubprocessTest, TerminateStopsChildWithSigterm) {
  auto child = SpawnOrDie({"/bin/sleep", "10"});
  ASSERT_NE(child, nullptr);
  const auto start = Clock::now();
  int status = child->Terminate(milliseconds(2000));
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  // Terminate on a reaped child returns the same status.
  EXPECT_EQ(child->Terminate(milliseconds(1)), status);
}

TEST(SubprocessTest, TerminateEscalatesToSigkillWhenSigtermIsIgnored) {
  // The ignored disposition is inherited by `sleep` too, so the whole
  // group ignores SIGTERM.
  auto child = Shell("trap '' TERM; echo ready; sleep 10");
  ASSERT_NE(child, nullptr);
  std::vector<std::string> lines;
  ASSERT_TRUE(WaitForLine(*child, "ready", &lines));
  const auto start = Clock::now();
  int status = child->Terminate(milliseconds(100));
  EXPECT_GE(Clock::now() - start, milliseconds(100));
  ASSERT_TRUE(WIFSIGNALED(status)) << DescribeWaitStatus(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(DescribeWaitStatus(status), "killed by signal 9 (Killed)");
}

TEST(SubprocessTest, DestructorKillsAndReapsRunningChild) {
  auto child = SpawnOrDie({"/bin/sleep", "10"});
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  ASSERT_EQ(::kill(pid, 0), 0);
  child.reset();
  // Reaped by the destructor: not even a zombie is left.
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(SubprocessTest, DestructorReapsExitedChild) {
  auto child = SpawnOrDie({"/bin/true"}, /*capture=*/false);
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  ASSERT_TRUE(StopsRunningWithin(pid, milliseconds(2000)));  // now a zombie
  child.reset();
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(SubprocessTest, ChildRunsInItsOwnProcessGroup) {
  auto child = Shell("echo ready; sleep 10");
  ASSERT_NE(child, nullptr);
  std::vector<std::string> lines;
  ASSERT_TRUE(WaitForLine(*child, "ready", &lines));
  EXPECT_EQ(::getpgid(child->pid()), child->pid());
  EXPECT_NE(::getpgid(child->pid()), ::getpgrp());
}

TEST(SubprocessTest, GrandchildrenLeftInTheGroupAreKilledAtReap) {
  auto child = Shell("sleep 10 & echo $!");
  ASSERT_NE(child, nullptr);
  StatusOr<int> status = child->WaitFor(milliseconds(2000));
  ASSERT_OK(status);
  EXPECT_TRUE(ExitedSuccessfully(*status));
  // EOF comes only because reaping killed `sleep`, which held the pipe.
  std::vector<std::string> lines = ReadLines(*child);
  ASSERT_EQ(lines.size(), 1u);
  pid_t grandchild = static_cast<pid_t>(std::stol(lines[0]));
  EXPECT_TRUE(StopsRunningWithin(grandchild, milliseconds(2000)));
}

TEST(SubprocessTest, ChildrenDoNotInheritEachOthersDescriptors) {
  auto first = SpawnOrDie({"/bin/sleep", "10"});
  ASSERT_NE(first, nullptr);
  auto second = Shell("cd /proc/$$/fd && echo *");
  ASSERT_NE(second, nullptr);
  std::vector<std::string> lines = ReadLines(*second);
  ASSERT_EQ(lines.size(), 1u);
  std::istringstream fds(lines[0]);
  std::string fd;
  while (fds >> fd) {
    EXPECT_NE(fd, std::to_string(first->output_fd())) << lines[0];
    EXPECT_NE(fd, std::to_string(first->exit_fd())) << lines[0];
    EXPECT_NE(fd, std::to_string(second->output_fd())) << lines[0];
  }
}

TEST(SubprocessTest, ChildStartsWithDefaultSignalsEvenIfParentIgnoresThem) {
  struct sigaction ignore {};
  struct sigaction saved {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGTERM, &ignore, &saved), 0);
  auto child = SpawnOrDie({"/bin/sleep", "10"});
  ::sigaction(SIGTERM, &saved, nullptr);
  ASSERT_NE(child, nullptr);
  ASSERT_OK(child->Signal(SIGTERM));
  StatusOr<int> status = child->WaitFor(milliseconds(2000));
  ASSERT_OK(status);
  EXPECT_TRUE(WIFSIGNALED(*status));
}

TEST(SubprocessTest, ChildDiesWhenItsParentDies) {
  // In a forked helper that becomes a subreaper, so that the orphaned
  // grandchild is reparented to it and its fate can be read with waitpid.
  pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) ::_exit(10);
    int report[2];
    if (::pipe(report) != 0) ::_exit(11);
    pid_t middle = ::fork();
    if (middle == 0) {
      SubprocessOptions options;
      options.argv = {"/bin/sleep", "5"};
      auto child = Subprocess::Spawn(options);
      if (!child.ok()) ::_exit(12);
      pid_t pid = (*child)->pid();
      if (::write(report[1], &pid, sizeof(pid)) != sizeof(pid)) ::_exit(13);
      ::_exit(0);  // dies without running the Subprocess destructor
    }
    ::close(report[1]);
    pid_t orphan = 0;
    if (::read(report[0], &orphan, sizeof(orphan)) != sizeof(orphan)) {
      ::_exit(14);
    }
    ::waitpid(middle, nullptr, 0);
    int status = 0;
    if (::waitpid(orphan, &status, 0) != orphan) ::_exit(15);
    ::_exit(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : 16);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(helper, &status, 0), helper);
  EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status);
}

TEST(SubprocessTest, DescribesWaitStatuses) {
  EXPECT_EQ(DescribeWaitStatus(3 << 8), "exited with code 3");
  EXPECT_EQ(DescribeWaitStatus(SIGKILL), "killed by signal 9 (Killed)");
  EXPECT_EQ(DescribeWaitStatus(SIGSEGV | 0x80),
            "killed by signal 11 (Segmentation fault), core dumped");
}

TEST(LineReaderTest, SplitsLinesAndKeepsPartialTail) {
  LineReader reader;
  std::vector<std::string> lines;
  reader.Feed("one\ntw", &lines);
  EXPECT_EQ(lines, std::vector<std::string>{"one"});
  reader.Feed("o\n\nthr", &lines);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", ""}));
  reader.Feed("ee", &lines);
  EXPECT_EQ(lines.size(), 3u);
  EXPECT_EQ(reader.Flush(), "three");
  EXPECT_EQ(reader.Flush(), std::nullopt);
}

TEST(LineReaderTest, FlushWithoutTailIsNullopt) {
  LineReader reader;
  std::vector<std::string> lines;
  reader.Feed("complete\n", &lines);
  EXPECT_EQ(lines, std::vector<std::string>{"complete"});
  EXPECT_EQ(reader.Flush(), std::nullopt);
}

TEST(LineReaderTest, SplitsOverlongLinesIntoPieces) {
  LineReader reader(4);
  std::vector<std::string> lines;
  reader.Feed("abcdefghij\n1234\n", &lines);
  EXPECT_EQ(lines, (std::vector<std::string>{"abcd", "efgh", "ij", "1234"}));
  reader.Feed("wxyz", &lines);
  EXPECT_EQ(lines.size(), 4u);
  reader.Feed("\n", &lines);
  EXPECT_EQ(lines.back(), "wxyz");
  EXPECT_EQ(lines.size(), 5u);
}

TEST(LineReaderTest, ReadFromFlushesTailAtEof) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  LineReader reader;
  std::vector<std::string> lines;
  StatusOr<bool> eof = reader.ReadFrom(fds[0], &lines);
  ASSERT_OK(eof);
  EXPECT_FALSE(*eof);  // nothing there yet: would block
  ASSERT_EQ(::write(fds[1], "a\nb\nc", 5), 5);
  eof = reader.ReadFrom(fds[0], &lines);
  ASSERT_OK(eof);
  EXPECT_FALSE(*eof);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b"}));
  ::close(fds[1]);
  eof = reader.ReadFrom(fds[0], &lines);
  ASSERT_OK(eof);
  EXPECT_TRUE(*eof);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b", "c"}));
  ::close(fds[0]);
}

TEST(LineReaderTest, ReadFromBadDescriptorIsAnError) {
  LineReader reader;
  std::vector<std::string> lines;
  EXPECT_EQ(reader.ReadFrom(-1, &lines).status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace ps
