// Hostile conditions (issue 47, docs/reliability.md): a thread the system refuses, a file-size
// limit under the atomic writers. (YAML alias bombs: tests/framework/config/yaml_guard_test.cc.)
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "framework/core/temp_files.h"
#include "framework/core/thread_group.h"
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/temp_files.h"
#include "tests/test_util.h"

namespace gt {
namespace {

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("reliability") {}
};

using test::error_of;

// Makes std::thread's constructor fail (as under a thread or memory limit) while alive: the
// default stack of threads made without attributes is set larger than the address space, so the
// stack cannot be mapped and pthread_create fails with EAGAIN. oneTBB's workers set their own
// stack size and are not affected.
class RefuseNewThreads {
 public:
  RefuseNewThreads() {
    pthread_attr_t a;
    pthread_getattr_default_np(&a);
    pthread_attr_getstacksize(&a, &old_);
    pthread_attr_setstacksize(&a, std::size_t{1} << 47);
    ok_ = pthread_setattr_default_np(&a) == 0;
    pthread_attr_destroy(&a);
  }
  ~RefuseNewThreads() {
    pthread_attr_t a;
    pthread_getattr_default_np(&a);
    pthread_attr_setstacksize(&a, old_);
    pthread_setattr_default_np(&a);
    pthread_attr_destroy(&a);
  }
  bool ok() const { return ok_; }

 private:
  std::size_t old_ = 0;
  bool ok_ = false;
};

// A group whose second thread cannot start: the first, blocked until released, is released by
// on_failure and joined, and the failure is a gt::Error (before, with a vector of std::thread:
// std::system_error, and std::terminate when the vector was destroyed holding the first).
TEST(ThreadGroup, AThreadThatCannotStartIsAnErrorAndTheOthersAreJoined) {
  std::atomic<bool> released{false}, finished{false};
  std::string e;
  {
    ThreadGroup g;
    g.start([&] {
      while (!released) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      finished = true;
    }, "worker 0");
    RefuseNewThreads refuse;
    ASSERT_TRUE(refuse.ok());
    e = error_of([&] { g.start([] {}, "worker 1", [&] { released = true; }); });
    EXPECT_TRUE(finished) << "the started thread was not joined before the error left start()";
  }
  EXPECT_NE(e.find("cannot start a thread for worker 1: Resource temporarily unavailable"), std::string::npos) << e;
  EXPECT_NE(e.find("ulimit -u"), std::string::npos) << e;
}

// The trainer's replica threads: refused threads end setup with that error, not std::system_error
// or std::terminate.
TEST(ThreadGroup, TrainerReplicaThreadThatCannotStartIsAnError) {
  TempDir t;
  SynthOptions o;
  o.num_nodes = 200;
  o.avg_degree = 4;
  o.feature_dim = 4;
  o.num_classes = 3;
  o.threads = 1;
  generate_synthetic(o, t.file("d.h5"));
  Config c;
  c.dataset.path = t.file("d.h5");
  c.sampling.fanouts = {3, 3};
  c.sampling.batch_size = 32;
  c.model.hidden = 8;
  c.train.epochs = 1;
  c.train.device = "cpu";
  c.train.threads = 1;
  c.train.progress = false;
  // OpenBLAS starts its own threads at its first use (without attributes): they must exist before
  // new threads are refused, as they do in a process that trained before.
  Trainer(c).fit(nullptr);
  c.train.replicas = 2;
  std::string e;
  {
    RefuseNewThreads refuse;
    ASSERT_TRUE(refuse.ok());
    e = error_of([&] {
      Trainer tr(c);
      tr.fit(nullptr);
    });
  }
  EXPECT_NE(e.find("cannot start a thread for data-parallel replica"), std::string::npos) << e;
}

// Runs `work` in a child process under a file-size limit of `limit` bytes; returns the child's
// wait status. The child exits 0 when `work` returns true, 1 when false, 2 on a gt::Error (its
// message comes back in `message`), 3 on anything else.
template <typename F>
int under_file_size_limit(rlim_t limit, F&& work, std::string& message) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    struct rlimit rl {limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    int code = 3;
    try {
      code = work() ? 0 : 1;
    } catch (const Error& e) {
      const std::string m = e.what();
      const ssize_t written = ::write(fds[1], m.data(), m.size());
      code = written >= 0 ? 2 : 3;
    } catch (...) {
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Past `ulimit -f` a write raised SIGXFSZ, whose default action killed the writer with no message
// and left its temporary file. Now the write fails with EFBIG: write_file_atomically returns it,
// an HDF5 writer (model, checkpoint) throws "File too large", and no temporary file is left.
TEST(TempFiles, FileSizeLimitIsAnErrorNotASignal) {
  TempDir t;
  const std::string text_path = t.file("big.json");
  std::string message;
  int status = under_file_size_limit(4096, [&] {
    return write_file_atomically(text_path, std::string(1 << 20, 'x')) == EFBIG;
  }, message);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << message;
  EXPECT_EQ(test::temp_files_of(text_path), 0);
  EXPECT_FALSE(std::filesystem::exists(text_path));

  const std::string model = t.file("w.h5");
  message.clear();
  status = under_file_size_limit(64 << 10, [&] {
    TensorFileWriter w(model, "weights file");
    w.tensor("w", Tensor::from_vector(std::vector<float>(1 << 18, 1.0f), {1 << 18}));
    w.commit();
    return true;
  }, message);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2);
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_NE(message.find(model), std::string::npos) << message;
  EXPECT_EQ(test::temp_files_of(model), 0);
  EXPECT_FALSE(std::filesystem::exists(model));
}

}  // namespace
}  // namespace gt
