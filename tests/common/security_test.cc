// The job's key files (common/security.h): what ps_ctl keygen writes, what
// each role reads, the mode a secret must have, and which identity may send
// which request.
#include "common/security.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

class SecurityKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ps-keys-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/keys";
    job_ = TestJob().Workers(3).Table("w", 4).Build();
    job_.security.mode = SecurityMode::kCurve;
    job_.security.keys_dir = dir_;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static mode_t Mode(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 0777;
  }

  std::string root_, dir_;
  JobOptions job_;
};

TEST_F(SecurityKeysTest, KeygenWritesOnePairPerIdentityWithPrivateSecrets) {
  ASSERT_OK(WriteJobKeys(dir_, 3, /*overwrite=*/false));
  EXPECT_EQ(Mode(dir_), 0700u);
  std::set<std::string> keys;
  for (const std::string& name : std::vector<std::string>{"server", "worker-0", "worker-1",
                                                          "worker-2", "evaluator", "admin"}) {
    EXPECT_EQ(Mode(Path(name + ".secret")), 0600u) << name;
    EXPECT_EQ(Mode(Path(name + ".public")), 0644u) << name;
    auto secret = ReadKeyFile(Path(name + ".secret"), true);
    auto pub = ReadKeyFile(Path(name + ".public"), false);
    ASSERT_OK(secret);
    ASSERT_OK(pub);
    // The files of a pair belong together.
    auto derived = CurvePublicKey(*secret);
    ASSERT_OK(derived);
    EXPECT_EQ(*derived, *pub) << name;
    keys.insert(*pub);
  }
  EXPECT_EQ(keys.size(), 6u) << "every identity has a key of its own";
  // A second keygen does not silently replace a job's keys.
  Status again = WriteJobKeys(dir_, 3, false);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("--force"), std::string::npos) << again.message();
  EXPECT_OK(WriteJobKeys(dir_, 3, true));
  EXPECT_NE(*ReadKeyFile(Path("worker-0.public"), false), *keys.begin());
}

TEST_F(SecurityKeysTest, SecretReadableByGroupOrOthersIsRefusedSayingChmod600) {
  ASSERT_OK(WriteJobKeys(dir_, 3, false));
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(Path("worker-1.secret").c_str(), mode), 0);
    auto key = ReadKeyFile(Path("worker-1.secret"), true);
    ASSERT_FALSE(key.ok()) << std::oct << mode;
    EXPECT_EQ(key.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(key.status().message().find("chmod 600 " + Path("worker-1.secret")),
              std::string::npos)
        << key.status().message();
    // The worker that would use it refuses to start with it.
    auto curve = ClientCurve(job_, 1);
    EXPECT_EQ(curve.status().code(), StatusCode::kPermissionDenied);
  }
  ASSERT_EQ(::chmod(Path("worker-1.secret").c_str(), 0400), 0);
  EXPECT_OK(ReadKeyFile(Path("worker-1.secret"), true));
  // A public key may be read by anyone.
  ASSERT_EQ(::chmod(Path("worker-1.public").c_str(), 0644), 0);
  EXPECT_OK(ReadKeyFile(Path("worker-1.public"), false));
  // The server's secret too.
  ASSERT_EQ(::chmod(Path("server.secret").c_str(), 0644), 0);
  EXPECT_EQ(ServerCurve(job_).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(SecurityKeysTest, MissingOrMalformedKeyFilesAreNamed) {
  ASSERT_OK(WriteJobKeys(dir_, 3, false));
  fs::remove(Path("worker-2.public"));
  auto allowed = ServerAllowlist(job_);
  ASSERT_FALSE(allowed.ok());
  EXPECT_EQ(allowed.status().code(), StatusCode::kNotFound);
  EXPECT_NE(allowed.status().message().find(Path("worker-2.public")), std::string::npos);
  EXPECT_NE(allowed.status().message().find("ps_ctl keygen"), std::string::npos);

  for (const std::string& text :
       {std::string(""), std::string("# only a comment\n"), std::string("tooshort\n"),
        std::string(40, '~') + "\n",  // 40 characters, not Z85
        *ReadKeyFile(Path("worker-0.public"), false) + "\n" +
            *ReadKeyFile(Path("worker-1.public"), false) + "\n"}) {
    std::ofstream(Path("worker-2.public"), std::ios::trunc) << text;
    auto key = ReadKeyFile(Path("worker-2.public"), false);
    EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument) << text;
  }
  // Two identities with one key would let one speak as the other.
  fs::copy_file(Path("worker-0.public"), Path("worker-2.public"),
                fs::copy_options::overwrite_existing);
  allowed = ServerAllowlist(job_);
  EXPECT_EQ(allowed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(allowed.status().message().find("same key"), std::string::npos);
}

TEST_F(SecurityKeysTest, AllowlistMapsEachKeyToItsIdentityAndEachRoleReadsItsOwn) {
  ASSERT_OK(WriteJobKeys(dir_, 3, false));
  auto allowed = ServerAllowlist(job_);
  ASSERT_OK(allowed);
  EXPECT_EQ(allowed->size(), 4u);  // three workers and the admin, not the server
  EXPECT_EQ(allowed->at(*ReadKeyFile(Path("worker-2.public"), false)), "worker 2");
  EXPECT_EQ(allowed->at(*ReadKeyFile(Path("admin.public"), false)), "admin");

  auto worker = ClientCurve(job_, 2);
  ASSERT_OK(worker);
  EXPECT_FALSE(worker->server);
  EXPECT_EQ(worker->public_key, *ReadKeyFile(Path("worker-2.public"), false));
  EXPECT_EQ(worker->server_key, *ReadKeyFile(Path("server.public"), false));
  auto admin = ClientCurve(job_, kControlWorker);
  ASSERT_OK(admin);
  EXPECT_EQ(admin->public_key, *ReadKeyFile(Path("admin.public"), false));
  auto evaluator = ClientCurve(job_, kEvaluatorWorker);
  ASSERT_OK(evaluator);
  EXPECT_EQ(evaluator->public_key, *ReadKeyFile(Path("evaluator.public"), false));
  // Its key is let in only where the job has an evaluator.
  EXPECT_EQ(allowed->count(evaluator->public_key), 0u);
  JobOptions with_evaluator = job_;
  with_evaluator.cluster.evaluator = true;
  auto with = ServerAllowlist(with_evaluator);
  ASSERT_OK(with);
  EXPECT_EQ(with->size(), 5u);
  EXPECT_EQ(with->at(evaluator->public_key), "evaluator");
  auto server = ServerCurve(job_);
  ASSERT_OK(server);
  EXPECT_TRUE(server->server);
  EXPECT_EQ(server->public_key, worker->server_key);

  // A worker host needs only its own secret.
  fs::remove(Path("worker-0.secret"));
  fs::remove(Path("admin.secret"));
  EXPECT_OK(ClientCurve(job_, 2));
  EXPECT_EQ(ClientCurve(job_, 0).status().code(), StatusCode::kNotFound);

  JobOptions plain = job_;
  plain.security = SecurityOptions();
  auto none = ClientCurve(plain, 0);
  ASSERT_OK(none);
  EXPECT_FALSE(none->enabled());
}

TEST_F(SecurityKeysTest, RotationKeepsThePreviousKeyAllowedUntilItsFileGoes) {
  ASSERT_OK(WriteJobKeys(dir_, 3, false));
  const std::string old_key = *ReadKeyFile(Path("worker-1.public"), false);
  ASSERT_OK(RotateWorkerKey(dir_, 1));
  const std::string new_key = *ReadKeyFile(Path("worker-1.public"), false);
  EXPECT_NE(new_key, old_key);
  EXPECT_EQ(Mode(Path("worker-1.secret")), 0600u);
  auto allowed = ServerAllowlist(job_);
  ASSERT_OK(allowed);
  EXPECT_EQ(allowed->at(old_key), "worker 1");
  EXPECT_EQ(allowed->at(new_key), "worker 1");
  fs::remove(Path("worker-1.previous.public"));
  allowed = ServerAllowlist(job_);
  ASSERT_OK(allowed);
  EXPECT_EQ(allowed->count(old_key), 0u);
  EXPECT_EQ(allowed->at(new_key), "worker 1");
}

TEST(SecurityIdentityTest, UserIdsRoundTripAndOthersAreRefused) {
  for (const PeerIdentity id : {PeerIdentity{PeerIdentity::Role::kWorker, 0},
                                PeerIdentity{PeerIdentity::Role::kWorker, 4095},
                                PeerIdentity{PeerIdentity::Role::kAdmin, 0},
                                PeerIdentity{PeerIdentity::Role::kEvaluator, 0}}) {
    auto back = ParseUserId(UserId(id));
    ASSERT_OK(back);
    EXPECT_EQ(back->role, id.role);
    EXPECT_EQ(back->worker, id.worker);
  }
  for (const char* bad : {"", "worker", "worker ", "worker -1", "worker 1x", "Admin", "root",
                          "worker 99999999999"}) {
    EXPECT_EQ(ParseUserId(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SecurityIdentityTest, WorkerKeySpeaksOnlyAsItsRankAndAdminOnlyControls) {
  const PeerIdentity w1{PeerIdentity::Role::kWorker, 1};
  const PeerIdentity admin{PeerIdentity::Role::kAdmin, 0};
  EXPECT_OK(CheckSender(w1, "PUSH", false, 1));
  EXPECT_EQ(CheckSender(w1, "PUSH", false, 0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckSender(w1, "CLOCK", false, kControlWorker).code(),
            StatusCode::kPermissionDenied);
  for (const char* op : {"STATS", "CHECKPOINT", "SHUTDOWN"}) {
    EXPECT_EQ(CheckSender(w1, op, true, 1).code(), StatusCode::kPermissionDenied) << op;
    EXPECT_EQ(CheckSender(w1, op, true, kControlWorker).code(), StatusCode::kPermissionDenied);
    EXPECT_OK(CheckSender(admin, op, true, kControlWorker));
  }
  EXPECT_EQ(CheckSender(admin, "PUSH", false, 0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckSender(admin, "SHUTDOWN", true, 0).code(), StatusCode::kPermissionDenied);
}

TEST(SecurityIdentityTest, TheEvaluatorKeySpeaksOnlyAsTheEvaluator) {
  const PeerIdentity evaluator{PeerIdentity::Role::kEvaluator, 0};
  const PeerIdentity w0{PeerIdentity::Role::kWorker, 0};
  EXPECT_OK(CheckSender(evaluator, "PULL", false, kEvaluatorWorker));
  EXPECT_EQ(CheckSender(evaluator, "PUSH", false, 0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckSender(evaluator, "STATS", true, kControlWorker).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckSender(evaluator, "STATS", true, kEvaluatorWorker).code(),
            StatusCode::kPermissionDenied);
  // A worker's key cannot read as the evaluator.
  const Status s = CheckSender(w0, "PULL", false, kEvaluatorWorker);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
}

TEST(CurveKeyTest, KeysAreZ85OfThirtyTwoBytes) {
  auto pair = NewCurveKeyPair();
  ASSERT_OK(pair);
  EXPECT_TRUE(IsCurveKey(pair->public_key));
  EXPECT_TRUE(IsCurveKey(pair->secret_key));
  EXPECT_FALSE(IsCurveKey(pair->public_key.substr(1)));
  EXPECT_FALSE(IsCurveKey(std::string(40, ' ')));
  EXPECT_EQ(CurvePublicKey("nope").status().code(), StatusCode::kInvalidArgument);
  auto derived = CurvePublicKey(pair->secret_key);
  ASSERT_OK(derived);
  EXPECT_EQ(*derived, pair->public_key);
}

}  // namespace
}  // namespace ps
