#include <graphtensor/config/config.h>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "framework/config/config_keys.h"
#include "framework/config/yaml_load.h"
#include <graphtensor/core/error.h>
#include "framework/core/temp_files.h"

namespace gt {

using namespace config_detail;

namespace {

// The text of a map key; a list or map used as a key is an error (found by fuzz_config:
// yaml-cpp's own conversion error escaped as a non-gt::Error exception).
std::string key_text(const YAML::Node& key, const std::string& source) {
  if (!key.IsScalar())
    GT_THROW(where_of(source, key), "keys are plain names such as 'model' or 'hidden'",
             "a config key must be a name, not ", key.IsSequence() ? "a list" : key.IsMap() ? "a map" : "empty");
  return key.Scalar();
}

// yaml-cpp reads a quote that is never closed as a string running to the end of the file: the
// sections after it vanish into one value (`metrics: "out/m.jsonl` then `model: ...` trained the
// default model and wrote a file named after the rest of the config). YAML lets a quoted value
// span lines, but no config value does, so each one must close on the line it opens.
void check_quotes_close(const std::string& text, const YAML::Node& n, const std::string& source) {
  if (n.IsSequence() || n.IsMap()) {
    for (const auto& item : n) {
      if (n.IsMap()) {
        check_quotes_close(text, item.first, source);
        check_quotes_close(text, item.second, source);
      } else {
        check_quotes_close(text, item, source);
      }
    }
    return;
  }
  if (!n.IsScalar() || n.Mark().is_null()) return;
  const auto pos = static_cast<std::size_t>(n.Mark().pos);
  if (pos >= text.size() || (text[pos] != '"' && text[pos] != '\'')) return;
  const char q = text[pos];
  for (std::size_t i = pos + 1; i < text.size() && text[i] != '\n' && text[i] != '\r'; ++i) {
    if (q == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character is not the closing quote
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside a single-quoted value
        continue;
      }
      return;
    }
  }
  GT_THROW(where_of(source, n), std::string("close it on the same line: ") + q + "..." + q,
           "the quoted value that starts here (", q, ") does not end on its line");
}

}  // namespace

Config file_config_defaults() {
  Config cfg;
  cfg.dataset.path = "data/synth-default.h5";
  cfg.train.metrics = "out/metrics.jsonl";
  cfg.train.save_best = "out/best-model.h5";
  cfg.train.dkp_cache = "out/dkp-cache";
  return cfg;
}

namespace {

// What the lines of a YAML text hold: `second` is the 1-based line where a second document
// starts (a "---" after content, or content after "..."), 0 when there is one document;
// `content` is whether any line holds content. Blank lines, comments and directives ("%YAML")
// are not content; a "---" before any content opens the first document.
struct DocumentScan {
  int64_t second = 0;
  bool content = false;
};
DocumentScan scan_documents(const std::string& text) {
  bool content = false, ended = false;
  int64_t line = 0;
  for (std::size_t pos = 0; pos <= text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view l(text.data() + pos, eol - pos);
    ++line;
    pos = eol + 1;
    auto marker = [&](std::string_view m) {
      return l.substr(0, 3) == m && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
    };
    const std::size_t first = l.find_first_not_of(" \t\r");
    const bool blank = first == std::string_view::npos || l[first] == '#';
    if (marker("---")) {
      if (content || ended) return {line, true};
      // "--- value" on the marker line is content of the first document.
      const std::size_t after = l.find_first_not_of(" \t\r", 3);
      content = after != std::string_view::npos && l[after] != '#';
    } else if (marker("...")) {
      ended = true;
    } else if (!blank && !(l[0] == '%' && !content)) {
      if (ended) return {line, true};
      content = true;
    }
    if (eol == text.size()) break;
  }
  return {0, content};
}

}  // namespace

Config parse_config(const std::string& text, const std::string& source) {
  YAML::Node root;
  // A config is one document: a second (after "---" or "...") would be ignored without a word.
  // Found in the text (a marker starts a line: inside block scalars such lines end the scalar
  // anyway), not by YAML::LoadAll, which loops forever on some malformed streams (fuzz_config).
  const DocumentScan scan = scan_documents(text);
  if (scan.second > 0)
    GT_THROW(source + ":" + std::to_string(scan.second), "merge the documents into one (one config per file)",
             "a config is one YAML document, this file has another from line ", scan.second);
  try {
    root = load_yaml(text, source);
  } catch (const YAML::DeepRecursion& e) {  // its message is yaml-cpp's "bad file"
    GT_THROW(source + ":" + std::to_string(e.mark.line + 1), "a config is a map of sections of plain values",
             "YAML syntax error: lists or maps nested more than ", e.depth(), " deep");
  } catch (const YAML::ParserException& e) {
    GT_THROW(source + ":" + std::to_string(e.mark.line + 1), "", "YAML syntax error: ", e.msg);
  }
  check_quotes_close(text, root, source);
  Config cfg = file_config_defaults();
  cfg.source = source;
  if (root.IsNull()) {
    // Nothing but comments is an empty config; content that yaml-cpp read as no document at all
    // (control characters can do that) is not one.
    if (scan.content && !(text.find_first_not_of(" \t\r\n~null") == std::string::npos))
      GT_THROW(source, "a config is a YAML map of sections (model, dataset, sampling, optimizer, train, link)",
               "the file holds text but no YAML document could be read from it");
    return cfg;
  }
  if (!root.IsMap()) GT_THROW(source, "", "a config must be a map of sections (model, dataset, sampling, optimizer, train, link)");
  static const char* kSections[] = {"model", "dataset", "sampling", "optimizer", "train", "link"};
  std::set<std::string> seen;  // sections and keys: a second one would silently replace the first
  for (const auto& sec : root) {
    std::string name = key_text(sec.first, source);
    if (!seen.insert(name).second)
      GT_THROW(where_of(source, sec.first), "merge the two", "config section '", name, "' appears twice");
    bool known = false;
    for (auto* s : kSections) known |= (name == s);
    if (!known)
      GT_THROW(where_of(source, sec.first), "sections are model, dataset, sampling, optimizer, train, link",
               "unknown config section '", name, "'");
    if (sec.second.IsNull()) continue;
    if (!sec.second.IsMap()) GT_THROW(where_of(source, sec.second), "", "config section '", name, "' must be a map");
    for (const auto& kv : sec.second) {
      std::string key = name + "." + key_text(kv.first, source);
      const Field* f = find_field(key);
      if (!f) {
        const std::string near = nearest_key(key);
        GT_THROW(where_of(source, kv.first), "known keys of '" + name + "': " + known_keys(name),
                 "unknown config key '", key, "'", near.empty() ? "" : " (did you mean '" + near + "'?)");
      }
      if (!seen.insert(key).second)
        GT_THROW(where_of(source, kv.first), "keep one of them", "config key '", key, "' appears twice");
      // An empty value's mark is the next token's (often the next line): name the key's line.
      f->set(cfg, kv.second, where_of(source, kv.second.IsNull() ? kv.first : kv.second));
      cfg.where[key] = where_of(source, kv.first);
    }
  }
  return cfg;
}

Config load_config(const std::string& path) {
  YAML::Node probe;
  std::string text;
  {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      GT_THROW(path, "give the path of a YAML file", "config '", path, "' is a directory");
    check_input_file(path, "config");  // a FIFO: fopen would wait for a writer for ever
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (!fp) GT_THROW(path, "check the path", "cannot open config file '", path, "'");
    constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20;  // a config is a few KiB
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0 && text.size() <= kMaxConfigBytes) text.append(buf, n);
    const bool failed = std::ferror(fp) != 0;
    std::fclose(fp);
    if (failed) GT_THROW(path, "", "cannot read config file '", path, "'");
    if (text.size() > kMaxConfigBytes)
      GT_THROW(path, "is it a config?", "config file '", path, "' is larger than 16 MiB");
  }
  return parse_config(text, path);
}

namespace {

// apply_override's parse: the key's field and its value, or throws naming the --set.
std::pair<const Field*, YAML::Node> parse_override(const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    GT_THROW("--set " + assignment, "write --set section.key=value", "malformed override");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  const Field* f = find_field(key);
  if (!f) {
    const std::string near = nearest_key(key);
    if (near.empty())
      GT_THROW("--set " + assignment, "gt-train --print-config-keys lists the keys", "unknown config key '", key, "'");
    GT_THROW("--set " + assignment, "", "unknown config key '", key, "' (did you mean '", near, "'?)");
  }
  // A value is YAML, where " #" starts a comment: "--set train.metrics=run #2.jsonl" would write
  // to "run". A comment on a command line is never meant: refused, naming where it starts.
  {
    bool single = false, dbl = false;
    for (std::size_t i = 0; i < value.size(); ++i) {
      const char c = value[i];
      if (c == '\'' && !dbl) single = !single;
      else if (c == '"' && !single && (i == 0 || value[i - 1] != '\\')) dbl = !dbl;
      else if (c == '#' && !single && !dbl && i > 0 && (value[i - 1] == ' ' || value[i - 1] == '\t'))
        GT_THROW("--set " + assignment, "put the value in YAML quotes to keep the '#': --set '" + key + "=\"...\"'",
                 "config key '", key, "': '", value.substr(i), "' in '", value,
                 "' is a YAML comment, so the value would be cut short");
    }
  }
  YAML::Node n;
  try {
    n = load_yaml(value, "--set " + key);
  } catch (const YAML::Exception&) {
    GT_THROW("--set " + assignment, "", "config key '", key, "': cannot parse value '", value, "'");
  }
  if (n.IsNull()) {
    // "--set train.metrics=" means the empty string; "~" or "null" is no value, as in a file.
    if (!value.empty()) GT_THROW("--set " + assignment, "write --set " + key + "= for an empty string",
                                 "config key '", key, "' needs a value, got '", value, "'");
    n = YAML::Node(value);
  }
  return {f, n};
}

}  // namespace

void check_override_syntax(const std::string& assignment) { (void)parse_override(assignment); }

void apply_override(Config& cfg, const std::string& assignment) {
  const auto [f, n] = parse_override(assignment);
  const std::string key = assignment.substr(0, assignment.find('='));
  f->set(cfg, n, "--set " + key);
  cfg.where[key] = "--set " + key;
}

std::string config_place(const Config& cfg, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto it = cfg.where.find(k); it != cfg.where.end()) return it->second;
  return cfg.source.empty() ? std::string("gt::Config") : cfg.source;
}

int64_t hidden_width(const ModelConfig& m, int64_t l) {
  GT_CHECK_ARG(l >= 0 && l < m.layers - 1, "hidden layer ", l, " of a model of ", m.layers, " layers");
  if (m.hidden_sizes.empty()) return m.hidden;
  GT_CHECK_ARG(static_cast<int64_t>(m.hidden_sizes.size()) == m.layers - 1, "model.hidden_sizes has ",
               m.hidden_sizes.size(), " entries for ", m.layers - 1, " hidden layers");
  return m.hidden_sizes[static_cast<std::size_t>(l)];
}

void validate_config(const Config& cfg) {
  // A Config filled in by code never went through the parser's checks: run them all here.
  const std::string src = cfg.source.empty() ? std::string("gt::Config") : cfg.source;
  for (const auto& f : fields()) f.check(cfg, src);
  // The rules below concern keys whose values each passed: point at the first of `keys` the file
  // (or a --set) gave, the one to change, else at the config as a whole.
  auto at = [&](std::initializer_list<const char*> keys) { return config_place(cfg, keys); };
  {
    // The device's form here (whether it exists is for the Trainer to find): cpu, auto, cuda, cuda:N.
    const std::string& d = cfg.train.device;
    bool ok = d == "cpu" || d == "auto" || d == "cuda";
    if (!ok && d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() < 10)
      ok = d.find_first_not_of("0123456789", 5) == std::string::npos;
    if (!ok)
      GT_THROW(at({"train.device"}), "use cpu, cuda, cuda:N or auto", "train.device must be cpu, cuda, cuda:N or auto, got '",
               d, "'");
  }
  // GPU-only settings on a run that can only be on the CPU would be ignored without a word.
  // (With train.device: auto they apply when a GPU is found.)
  if (cfg.train.device == "cpu") {
    if (cfg.train.gpu_cache_mb > 0)
      GT_THROW(at({"train.gpu_cache_mb", "train.device"}), "set train.gpu_cache_mb: 0, or train.device: cuda or auto",
               "train.gpu_cache_mb is ", cfg.train.gpu_cache_mb, " but train.device is cpu: the cache is GPU memory");
    if (cfg.train.feature_store == "sharded")
      GT_THROW(at({"train.feature_store", "train.device"}), "set train.feature_store: auto or replicated, or train.device: cuda",
               "train.feature_store is sharded but train.device is cpu: the shards are GPU memory");
    if (cfg.train.precision == "tf32")
      GT_THROW(at({"train.precision", "train.device"}), "set train.precision: float32, or train.device: cuda or auto",
               "train.precision is tf32 but train.device is cpu: TF32 is a GPU tensor-core format");
  }
  if (!cfg.model.hidden_sizes.empty()) {
    if (static_cast<int64_t>(cfg.model.hidden_sizes.size()) != cfg.model.layers - 1)
      GT_THROW(at({"model.hidden_sizes", "model.layers"}),
               "give one width per hidden layer (model.layers - 1), or [] for model.hidden each",
               "model.hidden_sizes has ", cfg.model.hidden_sizes.size(), " entries but model.layers is ",
               cfg.model.layers, " (", cfg.model.layers - 1, " hidden layer", cfg.model.layers == 2 ? "" : "s", ")");
    for (int64_t w : cfg.model.hidden_sizes)
      if (w > (1 << 16))
        GT_THROW(at({"model.hidden_sizes"}), "", "model.hidden_sizes entries must be <= 65536, got ", w);
  }
  if (static_cast<int64_t>(cfg.sampling.fanouts.size()) != cfg.model.layers)
    GT_THROW(at({"sampling.fanouts", "model.layers"}), "give one fanout per layer, input side first",
             "sampling.fanouts has ", cfg.sampling.fanouts.size(), " entries but model.layers is ", cfg.model.layers);
  if (!cfg.sampling.eval_fanouts.empty() &&
      static_cast<int64_t>(cfg.sampling.eval_fanouts.size()) != cfg.model.layers)
    GT_THROW(at({"sampling.eval_fanouts", "model.layers"}), "give one fanout per layer, or [] for all neighbours",
             "sampling.eval_fanouts has ", cfg.sampling.eval_fanouts.size(), " entries but model.layers is ",
             cfg.model.layers);
  for (auto f : cfg.sampling.fanouts)
    if (f == 0)
      GT_THROW(at({"sampling.fanouts"}), "use -1 for all neighbours", "sampling.fanouts entries must be >= 1 or -1");
  for (auto f : cfg.sampling.eval_fanouts)
    if (f == 0)
      GT_THROW(at({"sampling.eval_fanouts"}), "use -1 for all neighbours",
               "sampling.eval_fanouts entries must be >= 1 or -1");
  const auto& ef = cfg.sampling.eval_fanouts;
  if (cfg.sampling.eval_inference == "layerwise" && std::any_of(ef.begin(), ef.end(), [](int64_t k) { return k > 0; }))
    GT_THROW(at({"sampling.eval_inference", "sampling.eval_fanouts"}),
             "set sampling.eval_fanouts: [] or sampling.eval_inference: sampled",
             "sampling.eval_inference layerwise computes full neighbourhoods, but sampling.eval_fanouts samples");
  // An empty path a file or --set gave is a mistake here; a Config built in code starts with none
  // and the Trainer, which needs one, says so (an InferenceSession may be given the dataset).
  if (cfg.dataset.path.empty() && cfg.where.count("dataset.path"))
    GT_THROW(at({"dataset.path"}), "", "dataset.path is empty");
  const int64_t ra = cfg.dataset.row_alignment;
  if (ra != 16 && ra != 32 && ra != 64 && ra != 128)
    GT_THROW(at({"dataset.row_alignment"}), "use 16, 32, 64 or 128",
             "dataset.row_alignment must be a power of two from 16 to 128 bytes, got ", ra);
  if (cfg.dataset.features == "mmap" && cfg.dataset.normalize != "none")
    GT_THROW(at({"dataset.normalize", "dataset.features"}), "set dataset.normalize=none, or dataset.features=memory",
             "a memory-mapped feature table is read-only: dataset.normalize=", cfg.dataset.normalize,
             " needs dataset.features=memory");
  if (cfg.train.patience > 0 && cfg.train.eval_every == 0)
    GT_THROW(at({"train.patience", "train.eval_every"}), "set train.eval_every >= 1, or train.patience: 0",
             "train.patience is ", cfg.train.patience,
             " but train.eval_every is 0: early stopping watches the validation accuracy");
  if (cfg.optimizer.schedule == "cosine" && cfg.optimizer.min_lr > cfg.optimizer.lr)
    GT_THROW(at({"optimizer.min_lr", "optimizer.lr"}), "set optimizer.min_lr <= optimizer.lr",
             "optimizer.min_lr is ", cfg.optimizer.min_lr, " but optimizer.lr is ", cfg.optimizer.lr,
             ": the cosine schedule decays from lr to min_lr");
  // The rules on model.type below concern the built-in models; a registered one (gt::register_model)
  // reads what it uses from LayerOptions, and its Model says when a setting cannot apply.
  const bool builtin = cfg.model.type == "gcn" || cfg.model.type == "sage" || cfg.model.type == "ngcf" ||
                       cfg.model.type == "gin" || cfg.model.type == "gat";
  if (builtin && cfg.model.dkp == "combine-first" && cfg.model.type != "gcn" && cfg.model.type != "sage" &&
      cfg.model.type != "gin")
    GT_THROW(at({"model.dkp", "model.type"}),
             "kernel placement applies to gcn, sage and gin; set model.dkp=aggregate-first", "model.dkp is '",
             cfg.model.dkp, "' but model.type is '", cfg.model.type, "'");
  if (builtin && cfg.model.activation != "relu" && cfg.model.type != "gcn" && cfg.model.type != "sage" &&
      cfg.model.type != "gin")
    GT_THROW(at({"model.activation", "model.type"}), "leave model.activation out (relu) for " + cfg.model.type,
             "model.activation is ", cfg.model.activation, " but model.type is '", cfg.model.type, "': ",
             cfg.model.type == "ngcf" ? "NGCF's layers end in LeakyReLU (model.negative_slope)"
                                      : "GAT's hidden layers end in ELU");
  if (cfg.model.type == "gcn" && cfg.model.normalization == "symmetric" && cfg.model.aggregation != "mean")
    GT_THROW(at({"model.aggregation", "model.normalization"}),
             "set model.normalization: mean to aggregate GCN's neighbours by " + cfg.model.aggregation,
             "model.aggregation is ", cfg.model.aggregation,
             " but model.normalization is symmetric, which weights GCN's neighbours by 1 / sqrt(d_u d_v) itself");
  if (cfg.model.type == "lightgcn" && cfg.model.embedding_dim <= 0)
    GT_THROW(at({"model.embedding_dim", "model.type"}), "set model.embedding_dim (64 in the LightGCN paper)",
             "model.type is lightgcn but model.embedding_dim is 0: LightGCN learns its node embeddings");
  if (cfg.model.embedding_dim > 0 && cfg.model.type != "lightgcn" && cfg.model.type != "ngcf")
    GT_THROW(at({"model.embedding_dim", "model.type"}), "use model.type lightgcn or ngcf, or model.embedding_dim 0",
             "model.embedding_dim is ", cfg.model.embedding_dim, " but model.type is '", cfg.model.type,
             "': learnable node embeddings apply to lightgcn and ngcf");
  if (cfg.model.node_dropout > 0 && (cfg.model.type != "ngcf" || cfg.model.embedding_dim <= 0))
    GT_THROW(at({"model.node_dropout", "model.type", "model.embedding_dim"}),
             "set model.node_dropout 0, or use model.type ngcf with model.embedding_dim > 0", "model.node_dropout is ",
             cfg.model.node_dropout, " but the model is ", cfg.model.type,
             cfg.model.embedding_dim > 0 ? "" : " without model.embedding_dim",
             ": node dropout applies to NGCF as a recommender only");
  if (cfg.model.ngcf_form != "paper" && (cfg.model.type != "ngcf" || cfg.model.embedding_dim <= 0))
    GT_THROW(at({"model.ngcf_form", "model.type", "model.embedding_dim"}),
             "leave model.ngcf_form paper, or use model.type ngcf with model.embedding_dim > 0", "model.ngcf_form is ",
             cfg.model.ngcf_form, " but the model is ", cfg.model.type,
             cfg.model.embedding_dim > 0 ? "" : " without model.embedding_dim",
             ": the form applies to NGCF as a recommender only");
  if (cfg.model.ngcf_form == "reference" && cfg.model.node_dropout > 0)
    GT_THROW(at({"model.ngcf_form", "model.node_dropout"}), "set model.node_dropout 0 with model.ngcf_form reference",
             "model.node_dropout is ", cfg.model.node_dropout,
             " but model.ngcf_form is reference, whose row-normalised aggregate has no node dropout here");
  if (cfg.train.select_by == "roc_auc" && cfg.model.task == "multiclass")
    GT_THROW(at({"train.select_by", "model.task"}), "select a multiclass model by accuracy, micro_f1 or macro_f1",
             "train.select_by is roc_auc but model.task is multiclass: ROC-AUC is defined for binary and multilabel "
             "tasks");
  parse_class_weights(cfg.train.class_weights, at({"train.class_weights"}));
  if (cfg.model.aggregation == "max") {
    if (builtin && cfg.model.type != "gcn" && cfg.model.type != "sage")
      GT_THROW(at({"model.aggregation", "model.type"}),
               cfg.model.type == "ngcf" ? "NGCF aggregates with mean or sum" : "use model.type gcn or sage for max",
               "model.aggregation is max but model.type is '", cfg.model.type, "': ",
               cfg.model.type == "gin"   ? "GIN always sums its neighbours"
               : cfg.model.type == "gat" ? "GAT weights its neighbours by attention"
                                         : "max applies to gcn and sage");
    if (cfg.model.dkp == "combine-first")
      GT_THROW(at({"model.dkp", "model.aggregation"}), "set model.dkp=aggregate-first, or aggregation mean or sum",
               "model.dkp is '", cfg.model.dkp,
               "' but model.aggregation is max: a product can move before a sum or a mean of rows, not a max");
  }
}

std::vector<double> parse_class_weights(const std::string& text, const std::string& where) {
  if (text == "none" || text == "balanced") return {};
  std::vector<double> w;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end == item.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
      GT_THROW(where, "give none, balanced, or positive numbers separated by commas, e.g. \"1,3\"",
               "train.class_weights '", text, "': '", item, "' is not a positive number");
    w.push_back(v);
    pos = comma + 1;
  }
  return w;
}

}  // namespace gt
