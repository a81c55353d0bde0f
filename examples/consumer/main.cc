// gt-consumer: a complete program against the installed library, the one README.md's "Use as a
// library" shows. It builds a small graph in memory (no data file), trains a GCN from a gt::Config
// built in code with a per-epoch callback, saves the weights (Trainer::save), registers a model of
// its own made of the public layer ops (docs/extending.md) and trains it for an epoch, then serves
// predictions from 8 threads through two InferenceSessions sharing the one dataset, checking that
// every answer agrees with the same request answered alone. Prints "OK" and exits 0 on success;
// anything else exits 1 with the reason. CPU only, a few seconds.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/core/init.h>
#include <graphtensor/models/model.h>
#include <graphtensor/models/ops.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/serve/inference.h>
#include <graphtensor/train/trainer.h>

// A graph in memory: n nodes in 4 classes, each with 8 random undirected edges and 16 features
// that carry its class. make_dataset checks the arrays (gt::Error naming the first bad entry).
std::shared_ptr<const gt::Dataset> build_graph(int64_t n) {
  std::mt19937_64 rng(1);
  std::vector<std::set<int32_t>> nbrs(n);
  for (int64_t e = 0; e < n * 4; ++e) {
    const int32_t u = rng() % n, v = rng() % n;
    if (u != v) nbrs[u].insert(v), nbrs[v].insert(u);
  }
  std::vector<int64_t> indptr{0};  // in-neighbour CSR: row v lists the sources of v's edges
  std::vector<int32_t> indices;
  for (const auto& s : nbrs) {
    indices.insert(indices.end(), s.begin(), s.end());
    indptr.push_back(indices.size());
  }
  std::vector<int32_t> labels(n);
  std::vector<float> features(n * 16);
  std::normal_distribution<float> noise;
  std::map<std::string, std::vector<int64_t>> splits;
  for (int64_t v = 0; v < n; ++v) {
    labels[v] = rng() % 4;
    for (int f = 0; f < 16; ++f) features[v * 16 + f] = noise(rng) + (f == labels[v] ? 2.5f : 0.0f);
    splits[v % 10 < 6 ? "train" : v % 10 < 8 ? "valid" : "test"].push_back(v);
  }
  return std::make_shared<const gt::Dataset>(gt::make_dataset(
      indptr, indices, gt::Tensor::from_vector(features, {n, 16}), labels, splits));
}

// A model of one's own from the public layer ops: y = act(sum_{u in N(v)} x_u W + b).
int sum_gcn_layer(gt::Graph& g, const gt::LayerOptions& o, gt::Device d, int x) {
  using namespace gt;
  const std::string name = "layer" + std::to_string(o.index);
  Param w{name + ".weight", Tensor::empty({o.in, o.out}, DType::kFloat32, d),
          Tensor::zeros({o.in, o.out}, DType::kFloat32, d)};
  glorot_uniform(w.value, o.seed, /*tensor_id=*/o.index);
  Param b{name + ".bias", Tensor::zeros({o.out}, DType::kFloat32, d), Tensor::zeros({o.out}, DType::kFloat32, d)};
  const int wv = g.add_param(std::move(w), o.index), bv = g.add_param(std::move(b), o.index);
  const Rows dst = Rows::dst(o.index);
  const int sum = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{x}}, {"sum", dst, o.in}, o.index);
  const int xw = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{sum}, {wv}}, {"xw", dst, o.out}, o.index);
  const Activation act = o.activation ? Activation::kRelu : Activation::kNone;
  return g.add1(std::make_unique<BiasActOp>(true, act, 0.0f), {{xw}, {bv}}, {"y", dst, o.out}, o.index);
}

// --- readme begin ---
int run(const std::string& dir) {
  auto data = build_graph(2000);  // shared by the Trainers and the sessions below, never copied

  gt::Config cfg;  // every key as in YAML (docs/configs.md); dataset.path is not read
  cfg.model.type = "gcn";
  cfg.model.hidden = 32;
  cfg.sampling.fanouts = {10, 10};
  cfg.sampling.batch_size = 128;
  cfg.train.epochs = 5;
  cfg.train.device = "cpu";
  cfg.train.threads = 2;  // this Trainer's task arena; the process's other threads are unaffected
  cfg.train.progress = false;
  gt::Trainer trainer(cfg, data);
  gt::FitCallbacks callbacks;
  callbacks.on_epoch = [](const gt::EpochStats& e) {
    std::cout << "epoch " << e.epoch << ": loss " << e.loss << ", valid accuracy " << e.valid_acc << "\n";
    return true;  // false stops training
  };
  const gt::TrainResult r = trainer.fit(nullptr, callbacks);
  std::cout << "test accuracy at the best epoch: " << r.test_acc_at_best << " (chance 0.25)\n";
  if (!(r.test_acc_at_best > 0.4)) throw std::runtime_error("the GCN learned nothing");
  trainer.save(dir + "/gcn.h5");  // what InferenceSession and gt-predict load

  gt::register_model("sum_gcn", sum_gcn_layer, {.self_loops = true});  // then model.type: sum_gcn
  gt::Config custom = cfg;
  custom.model.type = "sum_gcn";
  custom.train.epochs = 1;
  gt::Trainer custom_trainer(custom, data);
  std::cout << "sum_gcn, 1 epoch: loss " << custom_trainer.fit(nullptr).epochs[0].loss << "\n";

  // Serving: any number of threads may call predict(); two sessions share the one dataset.
  gt::InferenceSession a(dir + "/gcn.h5", data, {.device = "cpu"});
  gt::InferenceSession b(dir + "/gcn.h5", data, {.device = "cpu"});
  std::vector<std::vector<float>> alone;  // each request answered on its own first
  for (int64_t v = 0; v < 64; ++v) alone.push_back(a.predict({v, (v * 31) % 2000}).to_vector<float>());
  std::vector<int> mismatches(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      gt::InferenceSession& s = t % 2 ? a : b;
      for (int64_t v = t; v < 64; v += 8) {
        const std::vector<float> got = s.predict({v, (v * 31) % 2000}).to_vector<float>();
        for (std::size_t i = 0; i < got.size(); ++i)  // micro-batches may round differently
          if (!(std::abs(got[i] - alone[v][i]) <= 1e-5f * (1 + std::abs(alone[v][i])))) ++mismatches[t];
      }
    });
  for (std::thread& t : threads) t.join();
  for (int m : mismatches)
    if (m) throw std::runtime_error("concurrent answers differ from the ones given alone");
  return 0;
}
// --- readme end ---

int main() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gt_consumer_" + std::to_string(::getpid()));
  int rc = 1;
  try {
    fs::create_directories(dir);
    rc = run(dir.string());
    std::cout << "OK\n";
  } catch (const std::exception& e) {  // gt::Error included: what, where and a hint
    std::cerr << "gt-consumer: error: " << e.what() << "\n";
  }
  fs::remove_all(dir);
  return rc;
}
