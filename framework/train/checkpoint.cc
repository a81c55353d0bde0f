#include <graphtensor/train/checkpoint.h>

#include <map>
#include <set>
#include <tuple>
#include <sstream>

#include <graphtensor/core/error.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/optimizer.h>

namespace gt {
namespace {

constexpr const char* kFormatName = "graphtensor-checkpoint";
constexpr const char* kMismatchHint =
    "was it saved from the same model config and dataset? (checkpoints written before dataset.align_rows existed need "
    "dataset.align_rows: false, those written before dataset.row_alignment existed dataset.row_alignment: 16)";

// "key: value" lines of one section of to_yaml's output, in declaration order.
std::vector<std::pair<std::string, std::string>> section_lines(const std::string& yaml, const std::string& section) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(yaml);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ') {
      inside = line == section + ":";
      continue;
    }
    auto colon = line.find(':');
    if (!inside || colon == std::string::npos) continue;
    std::size_t b = line.find_first_not_of(' ');
    std::string key = section + "." + line.substr(b, colon - b);
    if (key == "model.dkp") continue;  // kernel placement does not change the function computed
    out.emplace_back(key, line.substr(colon + 2));
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const std::string& config_yaml, const TrainingState& st, Model& model,
                     Optimizer& optimizer, const Context& ctx, const DataShape& data) {
  // Weights and state are updated asynchronously on ctx's stream, and the state may have just been
  // created with an asynchronous memset: settle both before the host copies.
  std::vector<Param*> params = model.params();
  auto state = optimizer.state(ctx, params);
  ctx.synchronize();
  TensorFileWriter w(path, "checkpoint");
  w.attr("format", std::string(kFormatName));
  w.attr("format_version", kCheckpointFormatVersion);
  w.attr("config", config_yaml);
  w.attr("epoch", st.epoch);
  w.attr("step", st.step);
  w.attr("seed", st.seed);
  w.attr("best_epoch", st.best_epoch);
  w.attr("best_valid_acc", st.best_valid_acc);
  w.attr("test_acc_at_best", st.test_acc_at_best);
  w.attr("stopped_early", static_cast<int64_t>(st.stopped_early ? 1 : 0));
  w.attr("optimizer_type", std::string(optimizer.type()));
  w.attr("optimizer_step", optimizer.steps());
  write_data_shape(w, data);
  for (Param* p : params) w.tensor("params/" + p->name, p->value);
  for (auto& [name, t] : state) w.tensor("optimizer/" + name, *t);
  w.commit();
}

namespace {

// What a run can have written: a resumed run would otherwise go on from a NaN best accuracy (no
// later epoch is ever "better", so no best model is saved again), or from a step counter that
// keys the dropout masks and the schedule far outside anything trained. A batch holds at least
// one node and node ids are int32, so an epoch has fewer than 2^31 steps; train.epochs is at most
// 10^6.
void validate_training_state(const CheckpointInfo& info) {
  constexpr int64_t kMaxEpochs = 1000000, kMaxStepsPerEpoch = int64_t{1} << 31;
  const TrainingState& st = info.state;
  auto bad = [&](const char* field, const auto& value, const std::string& expected) {
    GT_THROW(info.path + ":" + field, "the file is corrupt or was not written by train.checkpoint; resume from another",
             "checkpoint '", info.path, "' has ", field, " = ", value, ", expected ", expected);
  };
  if (st.epoch > kMaxEpochs) bad("epoch", st.epoch, "at most 1000000 (train.epochs' bound)");
  if (st.step > (st.epoch + 1) * kMaxStepsPerEpoch)
    bad("step", st.step, "below 2^31 steps per epoch (epoch " + std::to_string(st.epoch) + ")");
  if (st.best_epoch < 0 || st.best_epoch > st.epoch)
    bad("best_epoch", st.best_epoch, "0.." + std::to_string(st.epoch) + " (the last completed epoch)");
  for (auto [field, v] : {std::pair<const char*, double>{"best_valid_acc", st.best_valid_acc},
                          std::pair<const char*, double>{"test_acc_at_best", st.test_acc_at_best}})
    if (!(v == -1 || (v >= 0 && v <= 1))) bad(field, v, "an accuracy in [0, 1], or -1 (none yet)");
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& path) {
  TensorFileReader r(path, "checkpoint");
  if (!r.has_attr("format") || r.attr_string("format") != kFormatName)
    GT_THROW(path, "a checkpoint is written by train.checkpoint (a train.save_best weights file is not one)",
             "'", path, "' is not a GraphTensor checkpoint");
  CheckpointInfo info;
  info.path = path;
  int64_t version = r.attr_int("format_version");
  if (version != kCheckpointFormatVersion)
    GT_THROW(path, "it was written by another GraphTensor version", "checkpoint '", path, "' has format version ",
             version, ", this build reads version ", kCheckpointFormatVersion);
  info.config_yaml = r.attr_string("config");
  info.config = parse_config(info.config_yaml, path + " (stored config)");
  info.state.epoch = r.attr_int("epoch");
  info.state.step = r.attr_int("step");
  info.state.seed = r.attr_int("seed");
  info.state.best_epoch = r.attr_int("best_epoch");
  info.state.best_valid_acc = r.attr_real("best_valid_acc");
  info.state.test_acc_at_best = r.attr_real("test_acc_at_best");
  info.state.stopped_early = r.has_attr("stopped_early") && r.attr_int("stopped_early") != 0;
  info.optimizer_type = r.attr_string("optimizer_type");
  info.optimizer_step = r.attr_int("optimizer_step");
  info.data = read_data_shape(r);
  if (info.state.epoch < 0 || info.state.step < 0 || info.optimizer_step < 0)
    GT_THROW(path, "the file is corrupt", "checkpoint '", path, "' has a negative epoch or step");
  validate_training_state(info);
  return info;
}

void load_checkpoint(const CheckpointInfo& info, Model& model, Optimizer* optimizer, const Context& ctx) {
  TensorFileReader r(info.path, "checkpoint");
  std::vector<Param*> params = model.params();
  for (Param* p : params) r.read_into("params/" + p->name, p->value, kMismatchHint);
  if (!optimizer) return;
  if (info.optimizer_type != optimizer->type())
    GT_THROW(info.path, "set optimizer.type to the checkpoint's", "checkpoint '", info.path, "' holds ",
             info.optimizer_type, " state, the optimizer is ", optimizer->type());
  auto state = optimizer->state(ctx, params);
  ctx.synchronize();  // a just-created state is zeroed on ctx's stream; the loads below must come after
  for (auto& [name, t] : state) r.read_into("optimizer/" + name, *t, kMismatchHint);
  optimizer->set_steps(info.optimizer_step);
}

void check_resumable(const CheckpointInfo& info, const Config& cfg) {
  const std::string yaml = to_yaml(cfg);
  // A key the checkpoint's config lacks (a checkpoint of an older build) is not compared.
  auto compare = [&](const char* section, const std::set<std::string>& free, const std::string& what) {
    std::map<std::string, std::string> was;
    for (auto& [key, value] : section_lines(info.config_yaml, section)) was[key] = value;
    for (auto& [key, value] : section_lines(yaml, section)) {
      auto it = was.find(key);
      if (free.count(key) || it == was.end() || it->second == value) continue;
      GT_THROW(config_place(cfg, {key.c_str()}), "resume with the config the checkpoint was trained with",
               "checkpoint '", info.path, "' was ", what, key, " ", it->second, ", the config has ", value,
               ": the resumed run would not continue the same training");
    }
  };
  compare("model", {}, "saved from a model with ");
  // Checkpoints written before model.normalization existed hold a GCN that averaged (mean).
  if (cfg.model.type == "gcn" && cfg.model.normalization != "mean" &&
      info.config_yaml.find("normalization:") == std::string::npos)
    GT_THROW(config_place(cfg, {"model.normalization"}), "resume with model.normalization: mean",
             "checkpoint '", info.path, "' was trained before model.normalization existed, with GCN's mean; the config "
             "has ", cfg.model.normalization, ": the resumed run would not continue the same training");
  // The loss's class weights and the selection metric decide the training and the best epoch kept.
  for (const auto& [key, now, was] :
       {std::tuple<const char*, std::string, std::string>{"train.class_weights", cfg.train.class_weights,
                                                          info.config.train.class_weights},
        std::tuple<const char*, std::string, std::string>{"train.select_by", cfg.train.select_by,
                                                          info.config.train.select_by}})
    if (now != was && info.config_yaml.find(std::string(key).substr(6) + ":") != std::string::npos)
      GT_THROW(config_place(cfg, {key}), "resume with the config the checkpoint was trained with", "checkpoint '",
               info.path, "' was trained with ", key, " ", was, ", the config has ", now,
               ": the resumed run would not continue the same training");
  if (info.state.seed != cfg.train.seed)
    GT_THROW(info.path, "resume with the same train.seed", "checkpoint '", info.path, "' was trained with train.seed ",
             info.state.seed, ", the config has ", cfg.train.seed);
  if (info.optimizer_type != cfg.optimizer.type)
    GT_THROW(info.path, "resume with the same optimizer.type", "checkpoint '", info.path, "' holds ",
             info.optimizer_type, " state, the config has optimizer.type ", cfg.optimizer.type);
  // The rest of what decides the losses that follow: the data as the model sees it, the batches
  // and the update rule. Where the data lives (path, memory or mmap), where sampling runs (the
  // same blocks either way) and what evaluation uses may change.
  static const std::set<std::string> kFree = {"dataset.path",       "dataset.features",         "dataset.valid_split",
                                              "dataset.test_split", "sampling.device",          "sampling.eval_fanouts",
                                              "sampling.eval_batch_size", "optimizer.decay_epochs"};
  for (const char* section : {"dataset", "sampling", "optimizer", "link"}) compare(section, kFree, "trained with ");
  // The span of a cosine decay: optimizer.decay_epochs, or with 0 the epochs after the warm-up up
  // to train.epochs (a train key, free to change otherwise). Compared as a span, so a run that
  // wants more epochs may set decay_epochs to the span it had.
  if (cfg.optimizer.schedule == "cosine") {
    const int64_t was = cosine_span(info.config.optimizer, info.config.train.epochs);
    const int64_t now = cosine_span(cfg.optimizer, cfg.train.epochs);
    if (was != now)
      GT_THROW(config_place(cfg, {"optimizer.decay_epochs", "train.epochs"}),
               "set optimizer.decay_epochs: " + std::to_string(was) + " to keep its schedule (train.epochs may then change)",
               "checkpoint '", info.path, "' was trained with a cosine decay over ", was, " epochs",
               info.config.optimizer.decay_epochs == 0 ? " (optimizer.decay_epochs 0: train.epochs less the warm-up)" : "",
               ", the config's spans ", now, ": the resumed run would not continue the same training");
  }
}

}  // namespace gt
