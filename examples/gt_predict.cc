// gt-predict: a trained model's predictions (and embeddings) for the nodes of a split, or of the
// whole graph, written to a file; the accuracy on the labelled ones is printed.
//
//   gt-predict MODEL.h5 OUT.{h5,csv} [--dataset DATA.h5] [--split test | --all | --ids 0,5,7] [--embeddings]
//              [--device auto] [--fanouts 10,10 | --fanouts all] [--batch 4096] [--threads 0]
//              [--inference auto|layerwise|sampled] [--table-dtype float32|bfloat16|float16]
//
// MODEL.h5 is a best-model weights file (train.save_best) or a checkpoint (train.checkpoint); the
// dataset defaults to the one its stored config names. The model runs as the trainer evaluates it
// (gt::InferenceSession): no dropout, the stored config's sampling.eval_fanouts and
// eval_batch_size unless --fanouts / --batch say otherwise. Sampled neighbours are drawn by node
// (seed, layer, node), as the trainer's evaluation draws them, so the accuracy printed for the test
// split of a train.save_best file is the run's "test at best", whatever the batch size.
// With full neighbourhoods the logits may come from layer-wise inference instead (framework/
// train/layerwise.h: every layer's rows computed once, over node chunks), chosen as the trainer chooses
// for its evaluation (--inference, default the model's sampling.eval_inference; auto = layer-wise
// when the batches would compute more than twice the rows); the output says which and why.
// --embeddings always runs the batches.
//
// OUT by its extension: .h5 / .hdf5 -> HDF5 with int64 `node_ids` and `predictions` [n], float32
// `logits` [n, classes] and, with --embeddings, `embeddings` [n, dim] (the last hidden layer), root
// attributes `format` ("graphtensor-predictions"), `format_version`, `model`, `dataset`, `nodes`
// (the split's name, or "all"), `labelled` and, when labelled > 0, `accuracy`; .csv -> a header
// `node_id,prediction,logit_0,...[,emb_0,...]` and one line per node. Binary and multi-label
// models (docs/tasks.md) predict each target positive when its logit is > 0 and add
// `probabilities` (sigmoid of the logits; CSV prob_j columns) and the `task` attribute;
// multi-label `predictions` are [n, T] (CSV pred_j columns), and the accuracy counts labelled
// targets. OUT is written atomically
// (a temporary file renamed over it; none is left by Ctrl-C or SIGTERM), never over the model or
// the dataset.
//
// A link model (a recommender: model.embedding_dim > 0, e.g. LightGCN) has no classes: gt-predict
// writes the representation InferenceSession computes for every node (the full-graph forward's
// read-out, the vectors whose dot products rank items) for every node (the default) or the nodes of
// --ids: .h5 with `node_ids` and `embeddings` [n, dim] and the attributes above (`nodes` "all" or
// "ids", `task` "link", `labelled` 0); .csv with `node_id,emb_0,...`. So does a link encoder (a
// feature model, model.embedding_dim 0, on a link dataset: InferenceSession's encoder outputs,
// with --fanouts or the stored sampling.eval_fanouts).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"
#include "framework/core/temp_files.h"
#include <graphtensor/core/version.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/serve/inference.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/preprocess/dataset.h>

namespace {

int usage(const std::string& msg) {
  std::cerr << "gt-predict: " << msg << " (see gt-predict --help)\n";
  return 2;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The CSV file: written to a temporary file that is renamed over `path` when complete.
// Its folders exist: main() makes them (and removes them again when the write fails).
// pred: one per node, or `targets` per node (multi-label: pred_j columns); probs: sigmoid tasks'
// probabilities (prob_j columns), else null.
void write_csv(const std::string& path, const std::vector<int64_t>& ids, const std::vector<int64_t>& pred,
               const gt::Tensor& logits, const gt::Tensor* emb, const gt::Tensor* probs, int64_t targets) {
  gt::TempFile tmp(path);
  std::FILE* fp = std::fopen(tmp.c_str(), "w");
  if (!fp) GT_THROW(path, "check the folder and its permissions", "cannot write '", path, "': ", std::strerror(errno));
  const int64_t c = logits.shape()[1];
  const int64_t d = emb ? emb->shape()[1] : 0;
  const float* l = logits.data<float>();
  const float* e = emb ? emb->data<float>() : nullptr;
  const float* p = probs ? probs->data<float>() : nullptr;
  const bool with_pred = !pred.empty();  // a link model's file has embeddings only
  bool ok = std::fputs(targets > 1 || !with_pred ? "node_id" : "node_id,prediction", fp) >= 0;
  for (int64_t j = 0; j < c && ok && targets > 1; ++j) ok = std::fprintf(fp, ",pred_%lld", static_cast<long long>(j)) > 0;
  for (int64_t j = 0; j < c && ok; ++j) ok = std::fprintf(fp, ",logit_%lld", static_cast<long long>(j)) > 0;
  for (int64_t j = 0; j < c && ok && p; ++j) ok = std::fprintf(fp, ",prob_%lld", static_cast<long long>(j)) > 0;
  for (int64_t j = 0; j < d && ok; ++j) ok = std::fprintf(fp, ",emb_%lld", static_cast<long long>(j)) > 0;
  ok = ok && std::fputc('\n', fp) != EOF;
  for (std::size_t i = 0; i < ids.size() && ok; ++i) {
    ok = std::fprintf(fp, "%lld", static_cast<long long>(ids[i])) > 0;
    for (int64_t j = 0; j < targets && ok && with_pred; ++j)
      ok = std::fprintf(fp, ",%lld", static_cast<long long>(pred[i * static_cast<std::size_t>(targets) + j])) > 0;
    for (int64_t j = 0; j < c && ok; ++j) ok = std::fprintf(fp, ",%.9g", static_cast<double>(l[i * c + j])) > 0;
    for (int64_t j = 0; j < c && ok && p; ++j) ok = std::fprintf(fp, ",%.9g", static_cast<double>(p[i * c + j])) > 0;
    for (int64_t j = 0; j < d && ok; ++j) ok = std::fprintf(fp, ",%.9g", static_cast<double>(e[i * d + j])) > 0;
    ok = ok && std::fputc('\n', fp) != EOF;
  }
  ok = std::fflush(fp) == 0 && ok;
  ok = ::fsync(::fileno(fp)) == 0 && ok;
  const int err = errno;
  ok = std::fclose(fp) == 0 && ok;
  if (!ok)
    GT_THROW(path, err == ENOSPC ? "the disk is full" : "check the free space of its folder", "cannot write '", path,
             "': ", std::strerror(err), "; nothing was replaced");
  if (std::rename(tmp.c_str(), tmp.target().c_str()) != 0)  // through a link
    GT_THROW(path, "", "cannot rename '", tmp.path(), "' to '", tmp.target(), "': ", std::strerror(errno));
  tmp.renamed();
}

// The link-model form (file comment): embeddings of every node or of `ids`.
int write_link_embeddings(const std::string& model, const std::string& dataset, const std::string& data_path,
                          const std::string& out, bool csv, const std::string& split, std::vector<int64_t> ids,
                          gt::InferenceOptions opt, bool encoder) {
  const char* kind = encoder ? "link encoder" : "link model";
  if (!split.empty())
    GT_THROW("--split", "leave it out (every node) or give --ids", "--split applies to node models; '", model,
             "' is a ", kind, ", whose embeddings are written for every node or for --ids");
  if (!encoder && !opt.fanouts.empty())
    GT_THROW("--fanouts", "leave it out", "--fanouts applies to node models; a link model propagates over the whole "
             "training graph");
  const auto t0 = std::chrono::steady_clock::now();
  opt.max_wait_us = 0;
  gt::InferenceSession session(model, dataset, opt);
  const bool all = ids.empty();
  if (all) {
    ids.resize(static_cast<std::size_t>(session.num_nodes()));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  }
  const gt::Tensor emb = session.embed(ids);
  std::vector<std::string> made;
  struct RemoveUnlessDone {
    std::vector<std::string>& dirs;
    bool done = false;
    ~RemoveUnlessDone() {
      if (!done) gt::remove_empty_dirs(dirs);
      gt::release_made_dirs(dirs);
    }
  } made_guard{made};
  gt::make_parent_dirs_noted(gt::write_target(out), made);
  gt::register_made_dirs(made);
  if (csv) {
    const gt::Tensor none = gt::Tensor::empty({static_cast<int64_t>(ids.size()), 0}, gt::DType::kFloat32);
    write_csv(out, ids, {}, none, &emb, nullptr, 1);
  } else {
    gt::TensorFileWriter w(out, "predictions file");
    w.attr("format", std::string("graphtensor-predictions"));
    w.attr("format_version", int64_t{1});
    w.attr("model", model);
    w.attr("dataset", data_path);
    w.attr("nodes", all ? std::string("all") : std::string("ids"));
    w.attr("labelled", int64_t{0});
    w.attr("task", std::string("link"));
    w.tensor("node_ids", gt::Tensor::from_vector<int64_t>(ids));
    w.tensor("embeddings", emb);
    w.commit();
  }
  made_guard.done = true;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%zu nodes (%s) of %s on %s, %s %s (dim %lld)\n", ids.size(), all ? "all" : "--ids", data_path.c_str(),
              session.device().c_str(), kind, model.c_str(), static_cast<long long>(session.embedding_dim()));
  std::printf("wrote %s (node ids, embeddings) in %.2f s\n", out.c_str(), seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string model, out, dataset, split;
  bool all = false, embeddings = false, fanouts_given = false, batch_given = false;
  std::string inference, table_dtype;
  gt::InferenceOptions opt;
  std::string fanouts, threads_text, ids_text;
  bool version = false;
  CLI::App app{"Writes the predictions of a trained model (train.save_best or train.checkpoint) for the nodes of\n"
               "a split (default: its test split) or of every node (--all), and prints the accuracy on the\n"
               "labelled ones. OUT: .h5/.hdf5 (node_ids, predictions, logits[, embeddings]) or .csv\n"
               "(node_id,prediction,logit_*[,emb_*]).",
               "gt-predict"};
  gt_cli::configure(app);
  app.add_option("model", model, "a train.save_best weights file or a train.checkpoint (MODEL.h5)");
  app.add_option("out", out, "the output: OUT.h5, OUT.hdf5 or OUT.csv");
  auto* o_dataset = app.add_option("--dataset", dataset, "graph to predict on (default: the dataset.path stored in MODEL)");
  auto* o_split = app.add_option("--split", split, "nodes of this split of the dataset (default: the model's dataset.test_split)");
  app.add_flag("--all", all, "every node of the graph instead of a split (not with --split)");
  app.add_flag("--embeddings", embeddings, "also write each node's embedding (the last hidden layer's output)");
  auto* o_ids = app.add_option("--ids", ids_text, "a link model or encoder: the node ids to write embeddings of, e.g. 0,5,7 "
                               "(default: every node)");
  auto* o_device = app.add_option("--device", opt.device, "cpu, cuda, cuda:N or auto (auto: the GPU when there is one)");
  auto* o_fanouts = app.add_option("--fanouts", fanouts, "neighbours sampled per layer, input side first, or all "
                                   "(default: the model's sampling.eval_fanouts, as its training evaluated)");
  auto* o_batch = app.add_option("--batch", opt.max_batch_nodes, "seed nodes per batch (default: the model's "
                                 "sampling.eval_batch_size)")->check(gt_cli::integer(1, INT64_MAX, "a number of nodes"));
  app.add_option("--threads", opt.threads, "CPU threads (0 = all cores)")->check(gt_cli::integer(0, 4096));
  app.add_option("--inference", inference, "auto, layerwise or sampled (per-batch): how full-neighbourhood logits "
                 "are computed (default: the model's sampling.eval_inference; --embeddings: per-batch)")
      ->check(CLI::IsMember({"auto", "layerwise", "sampled"}));
  app.add_option("--table-dtype", table_dtype, "layer-wise hidden tables: float32, bfloat16 or float16 (default: "
                 "the model's sampling.eval_table_dtype)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_flag("--version", version, "print the library's version and backends and exit");
  o_batch->default_str("");
  o_fanouts->default_str("");
  if (int rc = gt_cli::parse(app, argc, argv); rc >= 0) return rc;
  if (version) {
    if (argc > 2) return usage("--version takes no other arguments");
    std::cout << "gt-predict (graphtensor) " << gt::version() << "\n";
    return 0;
  }
  if (o_dataset->count() && dataset.empty()) return usage("--dataset needs a file");
  if (o_split->count() && split.empty()) return usage("--split needs a split name (train, valid, test, ...)");
  if (o_device->count() && opt.device.empty()) return usage("--device needs cpu, cuda, cuda:N or auto");
  batch_given = o_batch->count() > 0;
  if (o_fanouts->count()) {
    fanouts_given = true;
    if (fanouts.empty()) return usage("--fanouts needs a list like 10,10, or all");
    if (fanouts != "all") {
      bool ok;
      opt.fanouts = gt_cli::int_list(fanouts, ok);
      for (int64_t f : opt.fanouts) ok = ok && (f >= 1 || f == -1);
      if (!ok) return usage("--fanouts needs positive integers (or -1 for all neighbours) like 10,10, got '" + fanouts + "'");
    }
  }
  if (model.empty() || out.empty()) return usage("give a model file and an output file");
  if (all && !split.empty()) return usage("--all and --split exclude each other");
  if (embeddings && inference == "layerwise")
    return usage("--embeddings comes from per-batch inference: use --inference sampled or auto");
  const bool csv = ends_with(out, ".csv");
  if (!csv && !ends_with(out, ".h5") && !ends_with(out, ".hdf5"))
    return usage("the output '" + out + "' must end in .h5, .hdf5 or .csv (its format)");

  std::vector<int64_t> given_ids;
  if (o_ids->count()) {
    bool ok;
    given_ids = gt_cli::int_list(ids_text, ok);
    if (!ok || given_ids.empty()) return usage("--ids needs a list of node ids like 0,5,7, got '" + ids_text + "'");
  }
  // Ctrl-C or SIGTERM while the output is written leaves no temporary file.
  gt::install_temp_file_signal_cleanup("gt-predict");
  try {
    // The output is checked before anything is loaded: never an input, never a folder, and its
    // folder takes a new file (missing folders are made only when the output is written).
    gt::check_output_file(out, "the output", out);
    if (gt::same_file(out, model))
      GT_THROW(out, "name another output file", "the output '", out, "' is the model file: it would be overwritten");
    // Read before the session: its defaults (evaluation fanouts and batch size) and its dataset.
    gt::Config stored;
    {
      gt::TensorFileReader r(model, "model file");
      stored = gt::parse_config(r.attr_string("config"), model + " (stored config)");
    }
    const std::string data_path = dataset.empty() ? stored.dataset.path : dataset;
    if (gt::same_file(out, data_path))
      GT_THROW(out, "name another output file", "the output '", out, "' is the dataset: it would be overwritten");
    if (stored.model.embedding_dim > 0)
      return write_link_embeddings(model, dataset, data_path, out, csv, split, given_ids, opt, /*encoder=*/false);
    if (gt::read_dataset_info(data_path).is_link()) {  // a link encoder over node features
      if (!fanouts_given) opt.fanouts = stored.sampling.eval_fanouts;
      if (!batch_given) opt.max_batch_nodes = stored.sampling.eval_batch_size;
      return write_link_embeddings(model, dataset, data_path, out, csv, split, given_ids, opt, /*encoder=*/true);
    }
    if (!given_ids.empty())
      GT_THROW("--ids", "use --split or --all for a node model", "--ids applies to link models (model.embedding_dim > 0) "
               "and link encoders");
    if (!all && split.empty()) split = stored.dataset.test_split;  // the split the run reported as test
    if (!fanouts_given) opt.fanouts = stored.sampling.eval_fanouts;
    if (!batch_given) opt.max_batch_nodes = stored.sampling.eval_batch_size;
    opt.max_wait_us = 0;  // one caller: nothing to wait for

    const auto t0 = std::chrono::steady_clock::now();
    gt::InferenceSession session(model, dataset, opt);
    const gt::Dataset& data = session.dataset();
    std::vector<int64_t> ids;
    if (all) {
      ids.resize(static_cast<std::size_t>(session.num_nodes()));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    } else {
      auto it = data.splits.find(split);
      if (it == data.splits.end()) {
        std::string have;
        for (const auto& [name, _] : data.splits) have += (have.empty() ? "" : ", ") + name;
        GT_THROW("--split " + split, "use one of its splits (" + (have.empty() ? std::string("none") : have) + ") or --all",
                 "dataset '", data_path, "' has no split '", split, "'");
      }
      ids = it->second;
    }
    if (ids.empty()) GT_THROW("--split " + split, "use --all, or another split", "split '", split, "' is empty");

    if (inference.empty()) inference = embeddings ? "sampled" : stored.sampling.eval_inference;
    if (table_dtype.empty()) table_dtype = stored.sampling.eval_table_dtype;
    bool full = true;
    for (int64_t f : opt.fanouts) full &= f == -1;
    const gt::InferencePlan plan = gt::plan_inference(inference, "--inference", session.graph(), false,
                                                      stored.model.layers, ids, opt.max_batch_nodes, full);
    std::printf("inference: %s (%s)\n", plan.layerwise ? "layer-wise" : "per-batch",
                embeddings && inference == "sampled" ? "--embeddings: per-batch" : plan.reason.c_str());
    gt::LayerwiseOptions lo;
    lo.table_dtype = table_dtype == "bfloat16"  ? gt::DType::kBFloat16
                     : table_dtype == "float16" ? gt::DType::kFloat16
                                                : gt::DType::kFloat32;
    const gt::Tensor logits =
        plan.layerwise ? session.predict_layerwise(all ? std::vector<int64_t>{} : ids, lo) : session.predict(ids);
    gt::Tensor emb;
    if (embeddings) emb = session.embed(ids);
    const int64_t c = session.num_classes();
    const float* l = logits.data<float>();
    // Multiclass: the first maximal logit; binary and multi-label: each target positive when its
    // logit is > 0, and its probability sigmoid(logit) (written beside the logits).
    const bool sigmoid = session.task() != gt::Task::kMulticlass;
    const int64_t targets = sigmoid ? c : 1;
    std::vector<int64_t> pred(ids.size() * static_cast<std::size_t>(targets));
    gt::Tensor probs;
    if (sigmoid) {
      probs = gt::Tensor::empty(logits.shape(), gt::DType::kFloat32);
      for (int64_t k = 0; k < logits.numel(); ++k) probs.data<float>()[k] = 1.0f / (1.0f + std::exp(-l[k]));
    }
    int64_t labelled = 0, correct = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto row = static_cast<int64_t>(i);
      if (sigmoid) {
        for (int64_t j = 0; j < c; ++j) {
          const int64_t p = l[row * c + j] > 0.0f ? 1 : 0;
          pred[i * static_cast<std::size_t>(c) + j] = p;
          const int32_t label = data.labels[static_cast<std::size_t>(ids[i] * c + j)];
          if (label >= 0) {
            ++labelled;
            correct += label == p;
          }
        }
        continue;
      }
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j)
        if (l[row * c + j] > l[row * c + best]) best = j;
      pred[i] = best;
      const int32_t label = data.labels[static_cast<std::size_t>(ids[i])];
      if (label >= 0) {
        ++labelled;
        correct += label == best;
      }
    }
    bool sampled = false;
    for (int64_t f : opt.fanouts) sampled |= f != -1;
    const double accuracy = labelled ? static_cast<double>(correct) / static_cast<double>(labelled) : 0.0;

    // The missing folders of the output are made here and removed again if the write fails.
    std::vector<std::string> made;
    struct RemoveUnlessDone {
      std::vector<std::string>& dirs;
      bool done = false;
      ~RemoveUnlessDone() {
        if (!done) gt::remove_empty_dirs(dirs);
        gt::release_made_dirs(dirs);
      }
    } made_guard{made};
    gt::make_parent_dirs_noted(gt::write_target(out), made);
    gt::register_made_dirs(made);  // a signal removes them with the temporary file
    if (csv) {
      write_csv(out, ids, pred, logits, embeddings ? &emb : nullptr, sigmoid ? &probs : nullptr, targets);
    } else {
      gt::TensorFileWriter w(out, "predictions file");
      w.attr("format", std::string("graphtensor-predictions"));
      w.attr("format_version", int64_t{1});
      w.attr("model", model);
      w.attr("dataset", data_path);
      w.attr("nodes", all ? std::string("all") : split);
      w.attr("labelled", labelled);
      if (labelled) w.attr("accuracy", accuracy);
      w.tensor("node_ids", gt::Tensor::from_vector<int64_t>(ids));
      w.attr("task", std::string(gt::task_name(session.task())));
      w.tensor("predictions", targets > 1 ? gt::Tensor::from_vector<int64_t>(pred, {static_cast<int64_t>(ids.size()), targets})
                                          : gt::Tensor::from_vector<int64_t>(pred));
      w.tensor("logits", logits);
      if (sigmoid) w.tensor("probabilities", probs);
      if (embeddings) w.tensor("embeddings", emb);
      w.commit();
    }
    made_guard.done = true;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::printf("%zu nodes (%s) of %s on %s, model %s: ", ids.size(),
                all ? "all" : ("split '" + split + "'").c_str(), data_path.c_str(), session.device().c_str(),
                model.c_str());
    // Where --fanouts replaced the model's evaluation fanouts, the accuracy is not the one
    // training reported: say which neighbourhoods it is on.
    std::string on;
    if (fanouts_given) {
      for (int64_t f : opt.fanouts) on += (on.empty() ? "" : ",") + (f == -1 ? std::string("all") : std::to_string(f));
      if (on.empty()) on = "all";  // --fanouts all: no list, every neighbour of every layer
      on = std::string(" (") + (sampled ? "sampled" : "full") + " neighbourhoods of --fanouts " + on +
           ", not the model's evaluation fanouts)";
    } else if (sampled) {
      on = " (sampled neighbourhoods, drawn as training's evaluation drew them)";
    }
    if (labelled)
      std::printf("accuracy %.4f on %lld labelled%s%s\n", accuracy, static_cast<long long>(labelled),
                  sigmoid ? " targets" : "", on.c_str());
    else
      std::printf("no labelled node, no accuracy\n");
    std::printf("wrote %s (%s%s) in %.2f s\n", out.c_str(),
                sigmoid ? "node ids, predictions, logits, probabilities" : "node ids, predictions, logits",
                embeddings ? ", embeddings" : "", seconds);
    return 0;
  } catch (const gt::Error& e) {
    std::cerr << "gt-predict: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gt-predict: error: " << e.what() << "\n";
    return 1;
  }
}
