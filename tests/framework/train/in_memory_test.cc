// Datasets in memory (Trainer(Config, shared_ptr<const Dataset>), make_dataset) and train.threads
// as a task arena of the Trainer's own (trainer.h, "Threads").
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/dataset.h>

// The process's OpenBLAS thread count, which a Trainer must leave as it is (weak: another BLAS has none).
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

namespace gt {
namespace {

namespace fs = std::filesystem;

// A random undirected graph of n nodes in 4 classes whose features carry the class (so training
// learns something), built from vectors: CSR rows sorted, no self-loops or duplicates.
Dataset random_dataset(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::set<int32_t>> nbrs(static_cast<std::size_t>(n));
  for (int64_t e = 0; e < n * 4; ++e) {
    const auto u = static_cast<int32_t>(rng() % n), v = static_cast<int32_t>(rng() % n);
    if (u == v) continue;
    nbrs[static_cast<std::size_t>(u)].insert(v);
    nbrs[static_cast<std::size_t>(v)].insert(u);
  }
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (const auto& s : nbrs) {
    indices.insert(indices.end(), s.begin(), s.end());
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  constexpr int64_t kF = 8;
  std::vector<int32_t> labels(static_cast<std::size_t>(n));
  std::vector<float> feats(static_cast<std::size_t>(n * kF));
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (int64_t v = 0; v < n; ++v) {
    labels[static_cast<std::size_t>(v)] = static_cast<int32_t>(rng() % 4);
    for (int64_t f = 0; f < kF; ++f)
      feats[static_cast<std::size_t>(v * kF + f)] =
          1.0f + noise(rng) + (f == labels[static_cast<std::size_t>(v)] ? 6.0f : 0.0f);
  }
  std::map<std::string, std::vector<int64_t>> splits;
  for (int64_t v = 0; v < n; ++v) splits[v % 5 < 3 ? "train" : v % 5 == 3 ? "valid" : "test"].push_back(v);
  return make_dataset(std::move(indptr), std::move(indices), Tensor::from_vector(feats, {n, kF}), std::move(labels),
                      std::move(splits));
}

Config small_config(const std::string& path) {
  Config c;
  c.model.type = "sage";
  c.model.hidden = 16;
  c.dataset.path = path;
  c.dataset.normalize = "row";  // the Trainer must normalise a copy, not the shared table
  c.sampling.fanouts = {5, 5};
  c.sampling.batch_size = 64;
  c.optimizer.lr = 0.05;
  c.train.epochs = 4;
  c.train.seed = 7;
  c.train.device = "cpu";
  c.train.progress = false;
  return c;
}

class InMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gt_in_memory_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(InMemoryTest, TrainingFromMemoryEqualsTrainingFromTheFile) {
  auto data = std::make_shared<const Dataset>(random_dataset(600, 3));
  const std::vector<float> before = data->features.to_vector<float>();
  save_dataset(*data, path("d.h5"));

  Trainer from_file(small_config(path("d.h5")));
  const TrainResult a = from_file.fit(nullptr);
  // dataset.path names nothing: it is not read.
  Trainer in_memory(small_config(path("missing.h5")), data);
  EXPECT_EQ(in_memory.config().dataset.path, kInMemoryDataset);
  const TrainResult b = in_memory.fit(nullptr);

  ASSERT_EQ(a.epochs.size(), b.epochs.size());
  for (std::size_t e = 0; e < a.epochs.size(); ++e) {
    EXPECT_EQ(a.epochs[e].loss, b.epochs[e].loss) << "epoch " << e + 1;  // the same bits
    EXPECT_EQ(a.epochs[e].train_acc, b.epochs[e].train_acc) << "epoch " << e + 1;
    EXPECT_EQ(a.epochs[e].valid_acc, b.epochs[e].valid_acc) << "epoch " << e + 1;
  }
  EXPECT_EQ(a.test_acc_at_best, b.test_acc_at_best);
  EXPECT_GT(b.test_acc_at_best, 0.5) << "loss " << b.epochs.back().loss;  // chance is 0.25
  // dataset.normalize normalised the Trainer's copy; the shared table is as it was.
  EXPECT_EQ(data->features.to_vector<float>(), before);
  EXPECT_EQ(data.use_count(), 2);  // the caller's and the Trainer's: no copy of the dataset
}

TEST_F(InMemoryTest, TwoTrainersShareOneDatasetAtOnce) {
  auto data = std::make_shared<const Dataset>(random_dataset(400, 5));
  Trainer alone(small_config(""), data);
  const TrainResult ref = alone.fit(nullptr);
  Trainer t1(small_config(""), data), t2(small_config(""), data);
  TrainResult r1, r2;
  std::thread th([&] { r1 = t1.fit(nullptr); });
  r2 = t2.fit(nullptr);
  th.join();
  ASSERT_EQ(r1.epochs.size(), ref.epochs.size());
  for (std::size_t e = 0; e < ref.epochs.size(); ++e) {
    EXPECT_EQ(r1.epochs[e].loss, ref.epochs[e].loss);
    EXPECT_EQ(r2.epochs[e].loss, ref.epochs[e].loss);
  }
}

TEST_F(InMemoryTest, BadInputIsRefused) {
  EXPECT_THROW(Trainer(small_config(""), nullptr), Error);
  auto data = std::make_shared<const Dataset>(random_dataset(100, 1));
  Config mmap = small_config("");
  mmap.dataset.normalize = "none";
  mmap.dataset.features = "mmap";
  EXPECT_THROW(Trainer(mmap, data), Error);
  // make_dataset holds the arrays to check_dataset's rules.
  const Tensor f = Tensor::zeros({3, 2}, DType::kFloat32);
  EXPECT_NO_THROW(make_dataset({0, 1, 2, 2}, {1, 0}, f, {0, 1, -1}, {{"train", {0, 1}}}));
  EXPECT_THROW(make_dataset({0, 1, 2, 2}, {1, 7}, f, {0, 1, -1}, {{"train", {0}}}), Error);     // id >= N
  EXPECT_THROW(make_dataset({0, 1, 2}, {1, 0}, f, {0, 1, -1}, {{"train", {0}}}), Error);        // 2 rows, 3 features
  EXPECT_THROW(make_dataset({0, 1, 2, 2}, {1, 0}, f, {0, 1, -1}, {{"train", {0, 1}}, {"test", {1}}}),
               Error);  // node 1 in two splits
  try {
    make_dataset({0, 1, 2, 2}, {1, 0}, f, {0, 1, -1}, {{"train", {0, 1}}, {"test", {1}}});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two splits"), std::string::npos) << e.what();
  }
}

// Threads (in oneTBB's parallel_for) that run bodies of a loop started from this thread, each body
// waiting briefly so that idle workers have time to join.
// Threads that ran the tasks of one parallel_for of 64 short sleeps: the most seen in up to five
// tries (on a loaded 2-core machine the one worker may not be scheduled within one try, which
// would read as a limit of one thread).
int observed_concurrency() {
  int most = 0;
  for (int attempt = 0; attempt < 5 && most < 2; ++attempt) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    tbb::parallel_for(0, 64, 1, [&](int) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    most = std::max(most, static_cast<int>(ids.size()));
  }
  return most;
}

TEST_F(InMemoryTest, ThreadsLimitStaysInTheTrainersArena) {
  const int arena = tbb::this_task_arena::max_concurrency();
  const auto allowed = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  const int blas = openblas_get_num_threads ? openblas_get_num_threads() : -1;
  const int before = observed_concurrency();

  auto data = std::make_shared<const Dataset>(random_dataset(400, 2));
  Config c = small_config("");
  c.train.threads = 1;
  Trainer trainer(c, data);
  // While the Trainer lives and trains, another thread of the process sees the same oneTBB.
  std::mutex mu;
  std::condition_variable cv;
  bool go = false, done = false;
  int other_arena = 0, other_seen = 0;
  std::size_t other_allowed = 0;
  std::thread other([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return go; });
    other_arena = tbb::this_task_arena::max_concurrency();
    other_allowed = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
    other_seen = observed_concurrency();
    done = true;
    cv.notify_all();
  });
  int blas_inside = -1;
  FitCallbacks cb;
  cb.on_batch = [&](const BatchInfo& b) {
    if (b.step != 1) return true;
    blas_inside = openblas_get_num_threads ? openblas_get_num_threads() : -1;
    std::unique_lock<std::mutex> lock(mu);
    go = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; });  // training waits here: the other thread measures meanwhile
    return true;
  };
  trainer.fit(nullptr, cb);
  other.join();
  EXPECT_EQ(other_arena, arena);
  EXPECT_EQ(other_allowed, allowed);
  EXPECT_EQ(blas_inside, blas);
  if (before > 1) EXPECT_GT(other_seen, 1) << "the other thread's parallel_for ran on one thread";
  // After it, nothing changed either.
  EXPECT_EQ(tbb::this_task_arena::max_concurrency(), arena);
  EXPECT_EQ(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism), allowed);
  if (openblas_get_num_threads) EXPECT_EQ(openblas_get_num_threads(), blas);
}

}  // namespace
}  // namespace gt
