// Fault behaviour of the file stores: a writer killed with SIGKILL in the middle of a write
// leaves the previous file loadable; hostile or damaged files and NaN/Inf features give one
// clear gt::Error instead of a crash, a huge allocation or a poisoned training run.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"
#include <graphtensor/train/model_io.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/gz_reader.h"
#include "preprocess/ogb_import.h"
#include "tests/preprocess/temp_dir.h"
#include "tests/temp_files.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// This file's test folders.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("crash_safety") {}
};

using test::error_of;

// n nodes on a directed cycle, F features of value `tag` (so versions can be told apart).
Dataset cycle_dataset(int64_t n, int64_t f, float tag) {
  Dataset ds;
  ds.info.num_nodes = n;
  ds.info.feature_dim = f;
  ds.info.num_classes = 2;
  ds.info.directed = true;
  ds.info.source = "crash safety test";
  for (int64_t v = 0; v <= n; ++v) ds.indptr.push_back(v);
  for (int64_t v = 0; v < n; ++v) ds.indices.push_back(static_cast<int32_t>((v + n - 1) % n));
  ds.info.num_edges = n;
  ds.features = Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(n * f), tag), {n, f});
  for (int64_t v = 0; v < n; ++v) ds.labels.push_back(static_cast<int32_t>(v % 2));
  ds.splits["train"] = {0, 1};
  return ds;
}

// Forks a child that runs `work` and reports on `pipe` when it is in the middle of its write;
// the parent waits for that report (and a little more), kills the child with SIGKILL and reaps
// it. Returns false when the child ended before it could be killed.
template <typename Work>
bool kill_mid_write(Work&& work, int settle_ms) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    try {
      work(fds[1]);
    } catch (...) {
    }
    _exit(3);  // never return into the test runner in the child
  }
  close(fds[1]);
  char byte = 0;
  const bool reported = read(fds[0], &byte, 1) == 1;
  close(fds[0]);
  if (reported && settle_ms > 0) usleep(static_cast<useconds_t>(settle_ms) * 1000);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return reported && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

TEST(CrashSafety, DatasetWriterKilledMidWriteKeepsPreviousFile) {
  TempDir dir;
  const std::string path = dir.file("data.h5");
  const Dataset before = cycle_dataset(100, 4, 1.0f);
  save_dataset(before, path);

  // The child streams a 32 MB feature table in 2 MB blocks and stops half way (as if slow); it
  // is killed once its first block reached the temporary file, with HDF5 metadata unflushed.
  constexpr int64_t kRows = 1 << 17, kF = 64, kBlock = 1 << 13;
  const bool killed = kill_mid_write(
      [&](int report) {
        DatasetWriter w(path, kRows, kF);
        Tensor block = Tensor::from_vector(std::vector<float>(kBlock * kF, 2.0f), {kBlock, kF});
        for (int64_t b = 0; b < kRows; b += kBlock) {
          w.write_feature_rows(b, block);
          if (b == 0 && write(report, "x", 1) != 1) return;
          if (b == kRows / 2) pause();  // stay mid-write until killed, on any machine speed
        }
      },
      /*settle_ms=*/50);
  ASSERT_TRUE(killed) << "the writer child ended before it was killed";
  EXPECT_GT(test::temp_files_of(path), 0) << "the killed writer was writing somewhere else";

  const Dataset after = load_dataset(path);  // loads and validates
  EXPECT_EQ(after.info.num_nodes, 100);
  EXPECT_EQ(after.features.to_vector<float>(), before.features.to_vector<float>());
  EXPECT_EQ(after.indices, before.indices);

  // The stale temporary file (named after the killed process) does not stop the next write,
  // which removes it (its process is gone: framework/core/temp_files.h) and leaves none of its own.
  save_dataset(cycle_dataset(10, 2, 3.0f), path);
  EXPECT_EQ(load_dataset(path).info.num_nodes, 10);
  EXPECT_EQ(test::temp_files_of(path), 0);
}

// A full disk (here a file-size limit) mid-write: the writer reports the error in one line,
// removes its temporary file, keeps the previous file, and the process then exits normally (it
// crashed at exit: HDF5 closed the file it could not close a second time).
TEST(CrashSafety, FullDiskIsAnErrorAndACleanExit) {
  TempDir dir;
  const std::string path = dir.file("full.h5");
  save_dataset(cycle_dataset(10, 2, 1.0f), path);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
    rlimit lim{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &lim);
    int status = 3;
    try {
      save_dataset(cycle_dataset(100000, 2, 1.0f), path);  // 100000 x 2 floats and more: past 64 KiB
    } catch (const Error& e) {
      const std::string m = e.what();
      status = m.find('\n') == std::string::npos && m.find("cannot write dataset file '" + path + "'") == 0 &&
                       m.find("nothing was replaced") != std::string::npos && m.find(".tmp.") == std::string::npos
                   ? 0
                   : 4;
    }
    std::exit(status);  // runs the exit handlers, where the crash was
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no error; 4: not one line naming the file (not its temporary one)";
  EXPECT_EQ(load_dataset(path).info.num_nodes, 10);
  EXPECT_EQ(test::temp_files_of(path), 0);
}

// Runs body() in a child process whose files may not grow past `limit` bytes (a write past it
// fails with EFBIG, as on a full disk) and returns its result as the child's exit status, or
// -1 when the child died of a signal.
template <typename F>
int exit_status_with_file_limit(int64_t limit, F body) {
  const pid_t pid = fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::_Exit(body());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A metrics file on a disk that fills up at any byte (a file-size limit): each write either adds
// a whole record or fails with a one-line error naming the file, and the file then holds whole
// lines only (a record cut mid-way was left before, which JSON-lines readers reject).
TEST(CrashSafety, MetricsOnAFillingDiskKeepWholeLines) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  int failed = 0;
  for (int limit = 40; limit <= 400; limit += 17) {
    const int status = exit_status_with_file_limit(limit, [&] {
      try {
        MetricsWriter w(path);
        for (int epoch = 1; epoch <= 20; ++epoch)
          w.write(JsonRecord().add("epoch", static_cast<int64_t>(epoch)).add("loss", 0.125 * epoch));
      } catch (const Error& e) {
        const std::string m = e.what();
        return m.find('\n') == std::string::npos && m.find("'" + path + "'") != std::string::npos &&
                       m.find("whole records") != std::string::npos
                   ? 0
                   : 4;
      }
      return 3;  // every record fitted
    });
    ASSERT_GE(status, 0) << "limit " << limit;
    ASSERT_NE(status, 4) << "limit " << limit << ": the error is not one line naming the file";
    failed += status == 0;
    std::string text;
    {
      std::FILE* fp = std::fopen(path.c_str(), "rb");
      ASSERT_NE(fp, nullptr);
      char buf[4096];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) text.append(buf, n);
      std::fclose(fp);
    }
    ASSERT_LE(text.size(), static_cast<std::size_t>(limit)) << "limit " << limit;
    ASSERT_TRUE(text.empty() || text.back() == '\n') << "limit " << limit << ": a cut line: " << text;
    int records = 0;
    for (std::size_t pos = 0; pos < text.size(); ++records) {
      const std::size_t nl = text.find('\n', pos);
      const std::string line = text.substr(pos, nl - pos);
      const JsonRecord want =
          JsonRecord().add("epoch", static_cast<int64_t>(records + 1)).add("loss", 0.125 * (records + 1));
      ASSERT_EQ(line, want.str()) << "limit " << limit;
      pos = nl + 1;
    }
  }
  EXPECT_GT(failed, 10);
}

// Six parameters (three layers' weights of `weight_len` values and biases of 8) whose values
// depend on `tag`, so that a loaded file shows which write it holds.
std::vector<Param> tagged_weights(float tag, std::size_t weight_len) {
  std::vector<Param> ps(6);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    ps[i].name = "layer" + std::to_string(i / 2) + (i % 2 ? ".bias" : ".weight");
    std::vector<float> v(i % 2 ? 8 : weight_len);
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = tag + 0.001f * static_cast<float>(j + 1);
    ps[i].value = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  }
  return ps;
}

std::vector<Param*> param_ptrs(std::vector<Param>& ps) {
  std::vector<Param*> out;
  for (Param& p : ps) out.push_back(&p);
  return out;
}

// A weights file written to a disk that fills up at any byte: the write either succeeds and the
// file holds the new weights, or it fails with a one-line error naming the file and the previous
// file is left exactly as it was. (HDF5 lost some writes it made while closing a dataset without
// failing the call: gt-train replaced a good best-model file with one of zero weights, exit 0.)
TEST(CrashSafety, SaveWeightsOnAFillingDiskKeepsTheOldFileOrWritesTheNewOne) {
  TempDir dir;
  const std::string path = dir.file("best.h5");
  auto make_params = [](float tag) { return tagged_weights(tag, 8 * 40); };
  std::vector<Param> old_params = make_params(1.0f);
  save_weights(path, param_ptrs(old_params), "model: {}\n", 1);
  const auto full_size = static_cast<int64_t>(fs::file_size(path));
  int failed = 0, written = 0;
  for (int64_t limit = 1024; limit <= full_size + 4096; limit += 512) {
    const int status = exit_status_with_file_limit(limit, [&] {
      std::vector<Param> ps = make_params(2.0f);
      try {
        save_weights(path, param_ptrs(ps), "model: {}\n", 2);
      } catch (const Error& e) {
        const std::string m = e.what();
        return m.find('\n') == std::string::npos && m.find("'" + path + "'") != std::string::npos ? 10 : 11;
      }
      return 0;
    });
    ASSERT_GE(status, 0) << "limit " << limit;
    ASSERT_NE(status, 11) << "limit " << limit << ": the error is not one line naming the file";
    std::vector<Param> loaded = make_params(-1.0f);
    ASSERT_EQ(error_of([&] { load_weights(path, param_ptrs(loaded)); }), "") << "limit " << limit;
    const float want = status == 0 ? 2.0f : 1.0f;
    (status == 0 ? written : failed)++;
    std::vector<Param> expect = make_params(want);
    for (std::size_t i = 0; i < loaded.size(); ++i)
      ASSERT_EQ(loaded[i].value.to_vector<float>(), expect[i].value.to_vector<float>())
          << "limit " << limit << ", " << loaded[i].name << (want == 2.0f ? ": the new file" : ": the old file")
          << " does not hold its weights";
    EXPECT_EQ(test::temp_files_of(path), 0) << "limit " << limit;
    if (status == 0) save_weights(path, param_ptrs(old_params), "model: {}\n", 1);  // back to the old
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(written, 0);
}

// The same on a really full file system (a small tmpfs, mounted in a private mount namespace of a
// child process, where the test may mount one; skipped elsewhere). A full tmpfs fails a write
// that needs a new page wherever it lands in the file, unlike a file-size limit: this is how
// HDF5 lost raw data it wrote while closing a dataset, with every call succeeding.
TEST(CrashSafety, SaveWeightsOnAFullTmpfsKeepsTheOldFileOrWritesTheNewOne) {
  TempDir dir;
  const std::string mnt = dir.file("mnt");
  fs::create_directories(mnt);
  auto make_params = [](float tag) { return tagged_weights(tag, 8 * 200); };
  int ran = 0, failed = 0, written = 0;
  for (int64_t free_kb = 0; free_kb <= 48; free_kb += 4) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Exit codes: 0 new file written, 10 refused with the old file kept, 77 no tmpfs here,
      // 20+ a broken promise.
      if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          mount("gt_test", mnt.c_str(), "tmpfs", 0, "size=256k") != 0)
        std::_Exit(77);
      const std::string path = mnt + "/best.h5";
      std::vector<Param> old_params = make_params(1.0f);
      try {
        save_weights(path, param_ptrs(old_params), "model: {}\n", 1);
      } catch (const Error&) {
        std::_Exit(21);
      }
      struct statvfs st {};
      if (statvfs(mnt.c_str(), &st) != 0) std::_Exit(22);
      const int64_t avail = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
      const int64_t fill = avail - free_kb * 1024;
      if (fill > 0) {
        std::FILE* f = std::fopen((mnt + "/filler").c_str(), "wb");
        std::vector<char> zeros(4096, 1);
        for (int64_t done = 0; f && done < fill; done += 4096)
          std::fwrite(zeros.data(), 1, static_cast<std::size_t>(std::min<int64_t>(4096, fill - done)), f);
        if (f) std::fclose(f);
      }
      std::vector<Param> ps = make_params(2.0f);
      bool ok = true;
      try {
        save_weights(path, param_ptrs(ps), "model: {}\n", 2);
      } catch (const Error& e) {
        const std::string m = e.what();
        if (m.find('\n') != std::string::npos || m.find("'" + path + "'") == std::string::npos) std::_Exit(23);
        ok = false;
      }
      std::vector<Param> loaded = make_params(-1.0f);
      try {
        load_weights(path, param_ptrs(loaded));
      } catch (const Error&) {
        std::_Exit(24);
      }
      std::vector<Param> expect = make_params(ok ? 2.0f : 1.0f);
      for (std::size_t i = 0; i < loaded.size(); ++i)
        if (loaded[i].value.to_vector<float>() != expect[i].value.to_vector<float>()) std::_Exit(ok ? 25 : 26);
      if (test::temp_files_of(path) != 0) std::_Exit(27);
      std::_Exit(ok ? 0 : 10);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << free_kb << " KiB free";
    const int code = WEXITSTATUS(status);
    if (code == 77) GTEST_SKIP() << "no tmpfs can be mounted here (needs CAP_SYS_ADMIN)";
    ++ran;
    EXPECT_TRUE(code == 0 || code == 10)
        << free_kb << " KiB free: exit " << code
        << " (23: the error is not one line naming the file; 24: the file does not load; 25: the write "
           "succeeded but the file does not hold the new weights; 26: the write failed and the old weights "
           "are gone; 27: a temporary file was left)";
    (code == 0 ? written : failed) += code == 0 || code == 10;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(written, 0);
  EXPECT_EQ(ran, 13);
}

TEST(CrashSafety, SaveWeightsKilledAtAnyMomentLeavesALoadableFile) {
  TempDir dir;
  const std::string path = dir.file("best.h5");
  auto make_params = [](float tag) {
    std::vector<Param> ps(8);
    for (std::size_t i = 0; i < ps.size(); ++i) {
      ps[i].name = "layer" + std::to_string(i) + ".weight";
      ps[i].value = Tensor::from_vector(std::vector<float>(256 * 256, tag), {256, 256});
    }
    return ps;
  };
  std::vector<Param> first = make_params(0.0f);
  save_weights(path, param_ptrs(first), "model: {}\n", 0);

  // The child saves versions 1, 2, 3, ... as fast as it can (2 MB each); killed at whatever
  // point it has reached, every version the path can hold is complete.
  for (int settle_ms : {0, 3, 17, 41}) {
    const bool killed = kill_mid_write(
        [&](int report) {
          if (write(report, "x", 1) != 1) return;
          for (int version = 1;; ++version) {
            std::vector<Param> ps = make_params(static_cast<float>(version));
            save_weights(path, param_ptrs(ps), "model: {}\n", version);
          }
        },
        settle_ms);
    ASSERT_TRUE(killed);
    std::vector<Param> loaded = make_params(-1.0f);
    ASSERT_EQ(error_of([&] { load_weights(path, param_ptrs(loaded)); }), "") << "after a kill at " << settle_ms << " ms";
    const std::vector<float> w0 = loaded[0].value.to_vector<float>();
    for (Param& p : loaded) {
      const std::vector<float> w = p.value.to_vector<float>();
      EXPECT_EQ(w, w0) << p.name << " comes from another version than layer0";
      EXPECT_GE(w[0], 0.0f);
    }
  }
}

// HDF5 ids closed at the end of a scope.
struct H5 {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5() {
    if (id >= 0) close(id);
  }
};

void int_attr(hid_t file, const char* name, int64_t v) {
  H5 space{H5Screate(H5S_SCALAR), H5Sclose};
  H5 attr{H5Acreate2(file, name, H5T_STD_I64LE, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5Awrite(attr.id, H5T_NATIVE_INT64, &v);
}

// A few-KB file whose attributes and dataset headers declare a 2^31-node graph with 2^40 edges:
// reading it as declared would allocate terabytes.
TEST(CrashSafety, FileDeclaringHugeArraysIsAnErrorNotAnAllocation) {
  TempDir dir;
  const std::string path = dir.file("huge.h5");
  const int64_t n = std::numeric_limits<int32_t>::max(), e = int64_t{1} << 40;
  {
    H5 file{H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(file.id, 0);
    int_attr(file.id, "format_version", kDatasetFormatVersion);
    int_attr(file.id, "num_nodes", n);
    int_attr(file.id, "num_edges", e);
    int_attr(file.id, "feature_dim", 100);
    int_attr(file.id, "num_classes", 2);
    int_attr(file.id, "directed", 1);
    {
      H5 type{H5Tcopy(H5T_C_S1), H5Tclose};
      H5Tset_size(type.id, 2);
      H5 space{H5Screate(H5S_SCALAR), H5Sclose};
      H5 attr{H5Acreate2(file.id, "source", type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
      H5Awrite(attr.id, type.id, "x");
    }
    H5 graph{H5Gcreate2(file.id, "/graph", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
    auto declare = [&](const char* name, hid_t type, std::vector<hsize_t> dims) {
      H5 space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
      H5 ds{H5Dcreate2(file.id, name, type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
      ASSERT_GE(ds.id, 0) << name;  // never written: HDF5 allocates no storage
    };
    declare("/graph/indptr", H5T_STD_I64LE, {static_cast<hsize_t>(n + 1)});
    declare("/graph/indices", H5T_STD_I32LE, {static_cast<hsize_t>(e)});
    declare("/labels", H5T_STD_I32LE, {static_cast<hsize_t>(n)});
    declare("/features", H5T_IEEE_F32LE, {static_cast<hsize_t>(n), 100});
  }
  const std::string err = error_of([&] { load_dataset(path); });
  EXPECT_NE(err.find("/graph/indptr declares"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  const std::string feat = error_of([&] { FeatureReader reader(path); });
  EXPECT_NE(feat.find("/features declares"), std::string::npos) << feat;
}

// Replaces attribute `name` of `path` by an array of three values (int64, or fixed strings).
void make_attr_an_array(const std::string& path, const char* name, bool strings) {
  H5 file{H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(H5Adelete(file.id, name), 0) << name;
  const hsize_t three = 3;
  H5 space{H5Screate_simple(1, &three, nullptr), H5Sclose};
  if (strings) {
    H5 type{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(type.id, 4);
    H5 attr{H5Acreate2(file.id, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    ASSERT_GE(H5Awrite(attr.id, type.id, "abcdefghijkl"), 0);
  } else {
    const int64_t v[3] = {1, 2, 3};
    H5 attr{H5Acreate2(file.id, name, H5T_STD_I64LE, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    ASSERT_GE(H5Awrite(attr.id, H5T_NATIVE_INT64, v), 0);
  }
}

// Every attribute is read as one value: an array in its place (a crafted file) is named, not
// written past the one value's buffer (it was: a stack overflow whose bytes the file chose).
TEST(CrashSafety, AttributeArraysAreErrorsNotOverflows) {
  TempDir dir;
  for (const char* name : {"format_version", "num_nodes", "num_classes", "source"}) {
    const std::string path = dir.file(std::string(name) + ".h5");
    save_dataset(cycle_dataset(6, 3, 0.5f), path);
    make_attr_an_array(path, name, std::string(name) == "source");
    const std::string err = error_of([&] { load_dataset(path); });
    EXPECT_NE(err.find(std::string("attribute '") + name + "' of '" + path + "' holds 3 values, not one"),
              std::string::npos) << err;
  }
  const std::string weights = dir.file("w.h5");
  Param p;
  p.name = "layer0.weight";
  p.value = Tensor::from_vector(std::vector<float>{1.0f, 2.0f});
  save_weights(weights, {&p}, "model: {}\n", 4);
  make_attr_an_array(weights, "epoch", false);
  make_attr_an_array(weights, "config", true);
  TensorFileReader r(weights, "weights file");
  EXPECT_NE(error_of([&] { r.attr_int("epoch"); }).find("holds 3 values"), std::string::npos);
  EXPECT_NE(error_of([&] { r.attr_string("config"); }).find("holds 3 values"), std::string::npos);
}

TEST(CrashSafety, NanOrInfFeaturesAreRejectedNamingRowAndColumn) {
  TempDir dir;
  Dataset ds = cycle_dataset(6, 3, 0.5f);
  ds.features.data<float>()[4 * 3 + 2] = std::numeric_limits<float>::quiet_NaN();
  std::string err = error_of([&] { ds.validate("mem"); });
  EXPECT_NE(err.find("feature row 4, column 2 is nan"), std::string::npos) << err;
  ds.features.data<float>()[4 * 3 + 2] = 0.0f;
  ds.features.data<float>()[1] = -std::numeric_limits<float>::infinity();
  err = error_of([&] { save_dataset(ds, dir.file("inf.h5")); });
  EXPECT_NE(err.find("feature row 0, column 1 is -inf"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir.file("inf.h5")));

  // The streaming writer refuses them too (gt-data synth --signal 1e39: finite as a double,
  // infinite as a float).
  const std::string path = dir.file("nan.h5");
  {
    Dataset bad = cycle_dataset(6, 3, 0.5f);
    bad.features.data<float>()[5 * 3] = std::numeric_limits<float>::infinity();
    DatasetWriter w(path, 6, 3);
    err = error_of([&] { w.write_feature_rows(0, bad.features); });
    EXPECT_NE(err.find("feature row 5, column 0 is inf"), std::string::npos) << err;
  }
  EXPECT_FALSE(fs::exists(path));

  // A file changed by another tool: written good, then one value overwritten through HDF5.
  save_dataset(cycle_dataset(6, 3, 0.5f), path);
  {
    H5 file{H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
    H5 features{H5Dopen2(file.id, "/features", H5P_DEFAULT), H5Dclose};
    H5 fspace{H5Dget_space(features.id), H5Sclose};
    hsize_t start[2] = {5, 0}, count[2] = {1, 1};
    ASSERT_GE(H5Sselect_hyperslab(fspace.id, H5S_SELECT_SET, start, nullptr, count, nullptr), 0);
    H5 mspace{H5Screate_simple(2, count, nullptr), H5Sclose};
    const float inf = std::numeric_limits<float>::infinity();
    ASSERT_GE(H5Dwrite(features.id, H5T_NATIVE_FLOAT, mspace.id, fspace.id, H5P_DEFAULT, &inf), 0);
  }
  err = error_of([&] { load_dataset(path); });
  EXPECT_NE(err.find("feature row 5, column 0 is inf"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;

  // Row reads apply the same rule to the rows they read, and name the row by its node id.
  FeatureReader reader(path);
  Tensor good = reader.read_rows(1, 5);
  EXPECT_EQ(good.size(0), 4);
  EXPECT_EQ(good.data<float>()[0], 0.5f);
  err = error_of([&] { reader.read_rows(3, 6); });
  EXPECT_NE(err.find("feature row 5, column 0 is inf"), std::string::npos) << err;
  err = error_of([&] { read_feature_rows(path, 5, 6); });
  EXPECT_NE(err.find("feature row 5, column 0 is inf"), std::string::npos) << err;

  // check_dataset (gt-data check) reads every value: the bad one is found although the file
  // can be mapped, where rows are checked only as they are gathered.
  err = error_of([&] { check_dataset(path); });
  EXPECT_NE(err.find("feature row 5, column 0 is inf"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
}

TEST(CrashSafety, CheckDatasetReadsEveryValueAndSaysWhetherTheTableMaps) {
  TempDir dir;
  const std::string path = dir.file("good.h5");
  save_dataset(cycle_dataset(1000, 7, 0.25f), path);
  std::vector<std::pair<int64_t, int64_t>> calls;
  const DatasetCheck c = check_dataset(path, [&](int64_t done, int64_t total) { calls.emplace_back(done, total); });
  EXPECT_EQ(c.info.num_nodes, 1000);
  EXPECT_EQ(c.values_checked, 7000);
  EXPECT_EQ(c.features.type, "float32");
  EXPECT_TRUE(c.mappable) << c.not_mappable;
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), (std::pair<int64_t, int64_t>{1000, 1000}));

  // A graph error is found before any feature is read.
  Dataset bad = cycle_dataset(1000, 7, 0.25f);
  const std::string bad_path = dir.file("bad.h5");
  save_dataset(bad, bad_path);
  {
    H5 file{H5Fopen(bad_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
    H5 indices{H5Dopen2(file.id, "/graph/indices", H5P_DEFAULT), H5Dclose};
    H5 fspace{H5Dget_space(indices.id), H5Sclose};
    hsize_t start[1] = {10}, count[1] = {1};
    ASSERT_GE(H5Sselect_hyperslab(fspace.id, H5S_SELECT_SET, start, nullptr, count, nullptr), 0);
    H5 mspace{H5Screate_simple(1, count, nullptr), H5Sclose};
    const int32_t out_of_range = 5000;
    ASSERT_GE(H5Dwrite(indices.id, H5T_NATIVE_INT32, mspace.id, fspace.id, H5P_DEFAULT, &out_of_range), 0);
  }
  const std::string err = error_of([&] { check_dataset(bad_path); });
  EXPECT_NE(err.find(bad_path), std::string::npos) << err;
  EXPECT_NE(err.find("5000"), std::string::npos) << err;
}

TEST(CrashSafety, ImporterRejectsNanFeaturesNamingTheLine) {
  TempDir dir;
  const std::string root = dir.file("ogb");
  fs::create_directories(root + "/raw");
  fs::create_directories(root + "/split/s");
  write_gzip_file(root + "/raw/num-node-list.csv.gz", "3\n");
  write_gzip_file(root + "/raw/edge.csv.gz", "0,1\n1,2\n");
  write_gzip_file(root + "/raw/node-label.csv.gz", "0\n1\n0\n");
  write_gzip_file(root + "/raw/node-feat.csv.gz", "1,2\n3,nan\n5,6\n");
  write_gzip_file(root + "/split/s/train.csv.gz", "0\n");
  const std::string out = dir.file("out.h5");
  std::string err = error_of([&] { import_ogb(root, out); });
  EXPECT_NE(err.find("feature value 1 of the row is NaN"), std::string::npos) << err;
  EXPECT_NE(err.find("node-feat.csv.gz:2"), std::string::npos) << err;
  write_gzip_file(root + "/raw/node-feat.csv.gz", "1,2\n3,4\n-1e39,6\n");  // overflows float
  err = error_of([&] { import_ogb(root, out); });
  EXPECT_NE(err.find("feature value 0 of the row is infinite"), std::string::npos) << err;
  EXPECT_NE(err.find("node-feat.csv.gz:3"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
}

// A node count far beyond what the other files hold (fuzz_csv found these asking for terabytes).
TEST(CrashSafety, ImporterCountsBeyondTheFilesAreMismatchErrors) {
  TempDir dir;
  const std::string root = dir.file("ogb");
  fs::create_directories(root + "/raw");
  fs::create_directories(root + "/split/s");
  write_gzip_file(root + "/raw/num-node-list.csv.gz", "3\n");
  write_gzip_file(root + "/raw/num-edge-list.csv.gz", "900000000000000\n");
  write_gzip_file(root + "/raw/edge.csv.gz", "0,1\n1,2\n");
  write_gzip_file(root + "/raw/node-label.csv.gz", "0\n1\n0\n");
  write_gzip_file(root + "/raw/node-feat.csv.gz", "1,2\n3,4\n5,6\n");
  write_gzip_file(root + "/split/s/train.csv.gz", "0\n");
  std::string err = error_of([&] { import_ogb(root, dir.file("out.h5")); });
  EXPECT_NE(err.find("num-edge-list.csv.gz says 900000000000000"), std::string::npos) << err;
  write_gzip_file(root + "/raw/num-edge-list.csv.gz", "2\n");
  write_gzip_file(root + "/raw/num-node-list.csv.gz", "2000000000\n");
  err = error_of([&] { import_ogb(root, dir.file("out.h5")); });
  EXPECT_NE(err.find("has 3 label rows, but the graph has 2000000000 nodes"), std::string::npos) << err;
}

}  // namespace
}  // namespace gt
