// The non-template parts of the config field kinds (framework/config/config_field_kinds.h): list
// entries' places, type errors, YAML quoting, the registry of model type names and the checks of
// model.type and train.select_by.
#include "framework/config/config_field_kinds.h"

#include <algorithm>
#include <mutex>

#include "framework/core/link_metrics.h"

namespace gt::config_detail {

std::string where_of(const std::string& source, const YAML::Node& n) {
  if (n.Mark().is_null()) return source;
  return source + ":" + std::to_string(n.Mark().line + 1);
}

std::string entry_where(const std::string& where, const YAML::Node& item) {
  const auto colon = where.rfind(':');
  if (item.Mark().is_null() || colon == std::string::npos || colon + 1 == where.size() ||
      where.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    return where;
  return where.substr(0, colon + 1) + std::to_string(item.Mark().line + 1);
}

[[noreturn]] void type_error(const std::string& key, const std::string& expected, const YAML::Node& n,
                             const std::string& where) {
  std::string found = n.IsScalar() ? "'" + n.Scalar() + "'" : n.IsSequence() ? "a list" : n.IsMap() ? "a map" : "nothing";
  GT_THROW(where, "", "config key '", key, "' expects ", expected, ", got ", found);
}

std::string yaml_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", ch);
      out += esc;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

namespace {

// model.type: the built-in models, then the registered ones (gt::register_model).
std::mutex& model_types_mutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::string>& model_type_list() {
  static std::vector<std::string> types{"gcn", "sage", "ngcf", "gin", "gat", "lightgcn"};
  return types;
}

}  // namespace

void check_model_type(const std::string& v, const std::string& where) {
  if (is_model_type(v)) return;
  std::string list;
  for (const std::string& t : model_types()) list += (list.empty() ? "" : ", ") + t;
  GT_THROW(where, "a custom model is registered with gt::register_model before its config is read (docs/extending.md)",
           "config key 'model.type' must be one of ", list, ", got '", v, "'");
}

void check_select_by(const std::string& v, const std::string& where) {
  if (v == "auto" || v == "accuracy" || v == "roc_auc" || v == "micro_f1" || v == "macro_f1") return;
  try {
    (void)parse_link_metric(v, where);
  } catch (const Error&) {
    GT_THROW(where, "link datasets also take recall@K, ndcg@K, precision@K, mrr and hits@K",
             "config key 'train.select_by' must be one of auto, accuracy, roc_auc, micro_f1, macro_f1 or a link metric, "
             "got '", v, "'");
  }
}

std::vector<std::string> model_types_snapshot() {
  std::lock_guard<std::mutex> lock(model_types_mutex());
  return model_type_list();
}

void add_model_type(const std::string& name) {
  std::lock_guard<std::mutex> lock(model_types_mutex());
  auto& types = model_type_list();
  if (std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
}

bool is_model_type(const std::string& name) {
  std::lock_guard<std::mutex> lock(model_types_mutex());
  const auto& types = model_type_list();
  return std::find(types.begin(), types.end(), name) != types.end();
}

}  // namespace gt::config_detail
