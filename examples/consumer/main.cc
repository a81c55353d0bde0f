// gt-consumer: the smallest complete use of the installed library. Generates a tiny synthetic
// dataset, trains a GCN for one epoch on the CPU with gt::Trainer (a batch callback counting the
// steps), checks that the test accuracy beats chance, saves the weights (Trainer::save) and serves
// a prediction from them through gt::InferenceSession. Prints "OK" and exits 0 on success; anything else exits 1 with the reason.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include <graphtensor/serve/inference.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/synth.h>

int main() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gt_consumer_" + std::to_string(::getpid()));
  try {
    fs::create_directories(dir);
    gt::SynthOptions data;
    data.num_nodes = 2000;
    data.avg_degree = 10;
    data.feature_dim = 16;
    data.num_classes = 4;
    data.seed = 1;
    gt::generate_synthetic(data, (dir / "data.h5").string());

    gt::Config cfg;
    cfg.model.type = "gcn";
    cfg.model.hidden = 32;
    cfg.dataset.path = (dir / "data.h5").string();
    cfg.sampling.fanouts = {10, 10};
    cfg.sampling.batch_size = 128;
    cfg.train.epochs = 1;
    cfg.train.device = "cpu";
    cfg.train.progress = false;
    cfg.train.metrics = "";
    cfg.train.save_best = "";
    gt::Trainer trainer(cfg);
    int64_t steps = 0;
    gt::FitCallbacks callbacks;
    callbacks.on_batch = [&](const gt::BatchInfo& b) {
      steps = b.step;
      return true;  // go on
    };
    gt::TrainResult r = trainer.fit(nullptr, callbacks);
    if (steps != r.epochs.back().batches) {
      std::cerr << "gt-consumer: the batch callback saw " << steps << " steps of " << r.epochs.back().batches << "\n";
      fs::remove_all(dir);
      return 1;
    }
    const double chance = 1.0 / static_cast<double>(data.num_classes);
    std::cout << "test accuracy after 1 epoch: " << r.test_acc_at_best << " (chance " << chance << ")\n";
    if (!(r.test_acc_at_best > chance)) {
      std::cerr << "gt-consumer: accuracy is not above chance\n";
      fs::remove_all(dir);
      return 1;
    }
    const std::string model_file = (dir / "model.h5").string();
    trainer.save(model_file);
    gt::InferenceSession session(model_file, "", {.device = "cpu"});
    gt::Tensor logits = session.predict({0, 1, 2});
    if (logits.size(0) != 3 || logits.size(1) != data.num_classes) {
      std::cerr << "gt-consumer: unexpected logits " << logits.str() << "\n";
      fs::remove_all(dir);
      return 1;
    }
    fs::remove_all(dir);
    std::cout << "OK\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gt-consumer: error: " << e.what() << "\n";
    fs::remove_all(dir);
    return 1;
  }
}
