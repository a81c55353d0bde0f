// gt-train: the config-driven trainer.
//
//   gt-train CONFIG.yaml [--set section.key=value]... [--resume CKPT] [--trace FILE.json] [--print-config]
//   gt-train --print-config-keys | --version | --help
//   gt-train CONFIG.yaml --print-graph   (per layer: ops, output shapes on the first training
//                                         batch, and the kernel placement chosen; docs/dkp.md)
//
// Loads the YAML config (every key is documented in docs/configs.md; unknown keys are errors),
// applies the --set overrides in order, trains on the configured device (cpu, cuda or auto),
// evaluates valid and test after every epoch (train.eval_every), writes one JSON line of
// metrics per epoch to train.metrics, saves the weights of the best validation epoch to
// train.save_best, writes a checkpoint to train.checkpoint every train.checkpoint_every epochs,
// and prints the test accuracy at that epoch. --resume CKPT restores a checkpoint (weights,
// optimizer state, step, best-validation bookkeeping) and continues with the next epoch; the
// losses are those of an uninterrupted run (docs/serving.md). It checks its own result: the exit
// status is 0 only when training finished with a finite loss.
//
// Errors (a missing file, a bad key, a malformed dataset) are printed as one line,
// "gt-train: error: ...", with exit status 1; a usage error exits with 2. SIGINT, SIGTERM or SIGHUP
// stop the run as before (the files written so far stay: metrics lines, the best weights, the
// last checkpoint), and a file being written when the signal came is not left half-written as a
// temporary file (framework/core/temp_files.h).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <unordered_set>
#include <vector>

#include "cli.h"
#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "framework/core/temp_files.h"
#include <graphtensor/core/version.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/sampler.h>

// The CPU GEMMs' OpenBLAS pool is process-wide; the Trainer leaves it alone (trainer.h, "Threads").
// gt-train's process is its own, so train.threads bounds the pool too. Weak: another BLAS keeps its
// own setting.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace {

// A usage error is one line on stderr (exit 2), in the words of examples/cli.h's rules.
int usage(const std::string& msg) {
  std::cerr << "gt-train: " << msg << " (see gt-train --help)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  gt::install_temp_file_signal_cleanup("gt-train");
  std::string config_path;
  std::vector<std::string> overrides, resumes, traces;
  bool print_config = false, print_graph = false, print_keys = false, version = false;
  CLI::App app{"Trains the model a YAML config describes (every key: --print-config-keys, docs/configs.md),\n"
               "evaluating, saving the best weights and checkpoints as its train section says.\n"
               "Exit status: 0 when training finished with a finite loss, 1 on an error, 2 on a usage error.",
               "gt-train"};
  gt_cli::configure(app);
  app.add_option("config", config_path, "the YAML config (CONFIG.yaml)");
  // Repeatable, the last of a key wins; --resume and --trace are collected to say "given once".
  app.add_option("--set", overrides, "override one config key: section.key=value (a YAML value; repeatable, "
                 "the last one of a key wins)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("KEY=VALUE")->expected(1);
  app.add_option("--resume", resumes, "continue from a checkpoint written by train.checkpoint, as an uninterrupted run")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("CKPT")->expected(1);
  app.add_option("--trace", traces, "write a Chrome/Perfetto timeline of the pipeline's stages and the GPU's work")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("FILE.json")->expected(1);
  auto* pc = app.add_flag("--print-config", print_config, "print the config after the overrides, as YAML, and exit");
  auto* pg = app.add_flag("--print-graph", print_graph, "print the model's dataflow graph on the first training batch and exit");
  pc->excludes(pg);
  app.add_flag("--print-config-keys", print_keys, "print every key with its type, default and meaning (Markdown) and exit");
  app.add_flag("--version", version, "print the library's version and backends and exit");
  if (int rc = gt_cli::parse(app, argc, argv); rc >= 0) return rc;
  if (print_keys || version) {
    // Each prints and exits: anything else on the line would be ignored without a word.
    if (argc > 2) return usage(std::string(print_keys ? "--print-config-keys" : "--version") + " takes no other arguments");
    if (version)
      std::cout << "gt-train (graphtensor) " << gt::version() << "\n";
    else
      std::cout << gt::config_keys_markdown();
    return 0;
  }
  // "--resume --set ..." (the file forgotten): an option, not a checkpoint's name.
  for (const std::string& r : resumes)
    if (r.rfind("--", 0) == 0) return usage("--resume needs a checkpoint file before the next option, got '" + r + "'");
  if (resumes.size() > 1) return usage("--resume may be given once");
  if (traces.size() > 1) return usage("--trace may be given once");
  const std::string resume = resumes.empty() ? "" : resumes[0];
  // A file name as given, not YAML (so "#" or "null" stay part of it).
  const std::string trace = traces.empty() ? "" : traces[0];
  // An empty name (an unset shell variable) would start from scratch and overwrite the outputs.
  if (!resumes.empty() && resume.empty()) return usage("--resume needs a checkpoint file, got an empty name");
  if (!traces.empty() && trace.empty()) return usage("--trace needs a file name");
  if (config_path.empty()) return usage("no config file given");

  try {
    gt::Config cfg = gt::load_config(config_path);
    // The last --set of a key wins: earlier ones of it are not applied and their values' ranges
    // not checked, but each must still be a well-formed override of a known key.
    auto key_of = [](const std::string& o) { return o.substr(0, o.find('=')); };
    for (std::size_t i = 0; i < overrides.size(); ++i) {
      bool later = false;
      for (std::size_t j = i + 1; j < overrides.size() && !later; ++j)
        later = overrides[j].find('=') != std::string::npos && key_of(overrides[j]) == key_of(overrides[i]) &&
                !key_of(overrides[i]).empty();
      if (later)
        gt::check_override_syntax(overrides[i]);
      else
        gt::apply_override(cfg, overrides[i]);
    }
    if (!trace.empty()) {
      cfg.train.trace = trace;
      cfg.where["train.trace"] = "--trace";
    }
    gt::validate_config(cfg);
    if (print_config) {
      std::cout << gt::to_yaml(cfg);
      return 0;
    }
    // An inspection: the run's outputs are neither checked nor created. The DKP cache is read
    // (the graph shows a cached cost model's predictions), never written: nothing trains.
    const std::string dkp_cache = cfg.train.dkp_cache;
    if (print_graph) {
      for (std::string* out : {&cfg.train.metrics, &cfg.train.save_best, &cfg.train.checkpoint, &cfg.train.trace,
                               &cfg.train.dkp_cache})
        out->clear();
    }
    if (cfg.train.threads > 0 && openblas_set_num_threads)
      openblas_set_num_threads(static_cast<int>(cfg.train.threads));
    gt::Trainer trainer(cfg);
    if (print_graph) {
      if (gt::DkpPlanner* dkp = trainer.model().dkp(); dkp && !dkp_cache.empty())
        dkp->configure(dkp_cache, cfg.train.dkp_warmup,
                       gt::dkp_device_key(gt::Context::parse_device(cfg.train.device), cfg.train.threads));
      // The first batch of epoch 1, sampled as the trainer samples it (shapes only).
      const gt::Dataset& ds = trainer.dataset();
      const bool self_loops = gt::samples_self_loops(cfg.model);
      const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
      gt::NeighborSampler sampler({ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, cfg.sampling.fanouts,
                                  self_loops, seed);
      if (ds.is_link()) {
        // A link run: an embedding model propagates over the whole train graph; an encoder over
        // the blocks of the first train pairs' endpoints (the trainer also excludes the batch's
        // own pairs from them, which changes no shape's kind).
        const std::vector<gt::EdgePair>& pairs = ds.link_split(cfg.dataset.train_split);
        if (cfg.model.embedding_dim > 0) {
          const gt::FullGraph g = gt::full_link_graph(ds.info.num_nodes, pairs);
          const std::vector<gt::Block> blocks(static_cast<std::size_t>(cfg.model.layers), g.block);
          std::cout << "model " << cfg.model.type << " (link), full-graph propagation over " << ds.info.num_nodes
                    << " nodes\n"
                    << trainer.model().describe(blocks);
          return 0;
        }
        std::vector<int64_t> seeds;
        std::unordered_set<int64_t> seen;
        for (std::size_t i = 0; i < pairs.size() && static_cast<int64_t>(i) < cfg.sampling.batch_size; ++i)
          for (int64_t v : {pairs[i].src, pairs[i].dst})
            if (seen.insert(v).second) seeds.push_back(v);
        if (seeds.empty()) throw gt::Error("the link split '" + cfg.dataset.train_split + "' is empty", cfg.source, "");
        gt::SampledBatch b = sampler.sample(seeds, uint64_t{1} << 20);
        std::cout << "model " << cfg.model.type << " (link encoder), kernel placement " << cfg.model.dkp
                  << ", endpoints of the first " << std::min<int64_t>(cfg.sampling.batch_size, pairs.size())
                  << " train pairs: " << seeds.size() << " seeds\n"
                  << trainer.model().describe(b.blocks);
        return 0;
      }
      auto batches = gt::make_batches(ds.split(cfg.dataset.train_split), cfg.sampling.batch_size, true, seed, 1);
      if (batches.empty()) throw gt::Error("the training split is empty", cfg.source, "");
      gt::SampledBatch b = sampler.sample(batches[0], uint64_t{1} << 20);
      std::cout << "model " << cfg.model.type << ", kernel placement " << cfg.model.dkp << ", first batch of "
                << batches[0].size() << " seeds\n"
                << trainer.model().describe(b.blocks);
      return 0;
    }
    if (!resume.empty()) trainer.resume(resume);
    gt::TrainResult r = trainer.fit(&std::cout);
    if (r.epochs.empty()) return 1;
    return 0;
  } catch (const gt::Error& e) {
    std::cerr << "gt-train: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gt-train: error: " << e.what() << "\n";
    return 1;
  }
}
