// Internal to the library (not installed): the kinds of config field the key table
// (framework/config/config_keys.cc) is written with. Each builder takes the key, an accessor of
// the Config member (GT_GET), the bounds or choices and the description, and returns a Field
// that reads the key from YAML (with the value's file:line in errors), checks a value a Config
// holds with the same bounds, and prints it so that it reads back the same.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/config/config_keys.h"

namespace gt::config_detail {

// The place of one entry of a list whose place is `where` ("file:line", or "--set key"): the
// entry's own line when both are known (a long flow list, or a block list, spans lines).
std::string entry_where(const std::string& where, const YAML::Node& item);
// "config key 'KEY' expects EXPECTED, got ..." at `where`.
[[noreturn]] void type_error(const std::string& key, const std::string& expected, const YAML::Node& n,
                             const std::string& where);
// A YAML double-quoted scalar that reads back as `s` (found by fuzz_config: a path holding a
// quote made to_yaml write YAML that parse_config rejects).
std::string yaml_quote(const std::string& s);
// model.type among model_types() (the built-in models, then gt::register_model's), else a one-line error.
void check_model_type(const std::string& v, const std::string& where);
// train.select_by: a node metric (auto, accuracy, roc_auc, micro_f1, macro_f1) or a link metric
// (framework/core/link_metrics.h: recall@K, ndcg@K, precision@K, mrr, hits@K), checked by name.
void check_select_by(const std::string& v, const std::string& where);
// A snapshot of the model type names (built-in, then registered).
std::vector<std::string> model_types_snapshot();

template <typename T>
T scalar_as(const std::string& key, const std::string& expected, const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) type_error(key, expected, n, where);
  if constexpr (std::is_same_v<T, int64_t>) {
    // Decimal only: yaml-cpp reads "010" as octal 8 and "0x10" as 16, which nobody means in a config.
    const std::string& text = n.Scalar();
    const char* b = text.data();
    const char* e = b + text.size();
    if (b != e && *b == '+') ++b;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || end != e || b == e) type_error(key, expected, n, where);
    return v;
  }
  T v{};
  try {
    v = n.as<T>();
  } catch (const YAML::Exception&) {
    type_error(key, expected, n, where);
  }
  if constexpr (std::is_same_v<T, double>) {
    // yaml-cpp refuses 1e400 but reads 1e-400 as 0 (and 1e-310 as a subnormal): a value the
    // user wrote that a double cannot hold is refused either way.
    errno = 0;
    (void)std::strtod(n.Scalar().c_str(), nullptr);
    if (errno == ERANGE)
      GT_THROW(where, "", "config key '", key, "': ", n.Scalar(), " is outside the range of a double (",
               std::numeric_limits<double>::min(), " to ", std::numeric_limits<double>::max(), " in magnitude)");
  }
  return v;
}

// An integer in [lo, hi], decimal only.
template <typename Get>
Field int_field(std::string key, Get get, int64_t lo, int64_t hi, std::string desc) {
  Field f{key, "int", std::move(desc), {}, {}, {}};
  auto in_range = [=](int64_t v, const std::string& where) {
    if (v < lo || v > hi)
      GT_THROW(where, "", "config key '", key, "' must be in [", lo, ", ", hi, "], got ", v);
  };
  f.set = [=](Config& c, const YAML::Node& n, const std::string& where) {
    auto v = scalar_as<int64_t>(key, "an integer", n, where);
    in_range(v, where);
    get(c) = v;
  };
  f.check = [=](const Config& c, const std::string& where) { in_range(get(const_cast<Config&>(c)), where); };
  f.show = [=](const Config& c) { return std::to_string(get(const_cast<Config&>(c))); };
  return f;
}

// A number in [lo, hi] (an end open with lo_open / hi_open; NaN refused), printed shortest
// round-trip.
template <typename Get>
Field real_field(std::string key, Get get, double lo, double hi, std::string desc, bool lo_open = false,
                 bool hi_open = false) {
  Field f{key, "float", std::move(desc), {}, {}, {}};
  auto in_range = [=](double v, const std::string& where) {
    if (!((lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi)))  // NaN fails too
      GT_THROW(where, "", "config key '", key, "' must be in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]",
               ", got ", v);
  };
  f.set = [=](Config& c, const YAML::Node& n, const std::string& where) {
    auto v = scalar_as<double>(key, "a number", n, where);
    in_range(v, where);
    get(c) = v;
  };
  f.check = [=](const Config& c, const std::string& where) { in_range(get(const_cast<Config&>(c)), where); };
  f.show = [=](const Config& c) {
    // Shortest text that reads back as the same double (to_yaml must round-trip exactly).
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, get(const_cast<Config&>(c)));
    return std::string(buf, res.ptr);
  };
  return f;
}

// true or false.
template <typename Get>
Field bool_field(std::string key, Get get, std::string desc) {
  Field f{key, "bool", std::move(desc), {}, {}, {}};
  f.set = [=](Config& c, const YAML::Node& n, const std::string& where) {
    get(c) = scalar_as<bool>(key, "true or false", n, where);
  };
  f.check = [](const Config&, const std::string&) {};
  f.show = [=](const Config& c) { return std::string(get(const_cast<Config&>(c)) ? "true" : "false"); };
  return f;
}

// A string among `choices` (empty = any string without control characters), printed quoted.
template <typename Get>
Field string_field(std::string key, Get get, std::vector<std::string> choices, std::string desc) {
  std::string type = "string";
  if (!choices.empty()) {
    type.clear();
    for (auto& ch : choices) type += (type.empty() ? "" : " \\| ") + ch;
  }
  Field f{key, type, std::move(desc), {}, {}, {}};
  auto allowed = [=](const std::string& v, const std::string& where) {
    // A path or name ends at a NUL for the system ("best.h5\0.bak" would write best.h5), and a
    // line break or other control character makes a file name nobody can type and splits error
    // messages over lines; a block scalar (| or >) ends with one.
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto ch = static_cast<unsigned char>(v[i]);
      if (ch >= 0x20 && ch != 0x7f) continue;
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", ch);
      GT_THROW(where, ch == '\n' ? "write the value on the key's line (a block scalar, | or >, keeps a line break)" : "remove it",
               "config key '", key, "' holds ", ch == 0 ? "a NUL byte" : ch == '\n' ? "a line break" : "a control character",
               " (", esc, ") at offset ", i);
    }
    if (choices.empty()) return;
    bool ok = false;
    std::string list;
    for (auto& ch : choices) {
      ok |= (v == ch);
      list += (list.empty() ? "" : ", ") + ch;
    }
    if (!ok) GT_THROW(where, "", "config key '", key, "' must be one of ", list, ", got '", v, "'");
  };
  f.set = [=](Config& c, const YAML::Node& n, const std::string& where) {
    auto v = scalar_as<std::string>(key, "a string", n, where);
    allowed(v, where);
    get(c) = v;
  };
  f.check = [=](const Config& c, const std::string& where) { allowed(get(const_cast<Config&>(c)), where); };
  f.show = [=](const Config& c) { return yaml_quote(get(const_cast<Config&>(c))); };
  return f;
}

// A list of integers, each >= lo (lo -1: each >= 1 or -1, as fanouts), an error naming the entry's line.
template <typename Get>
Field int_list_field(std::string key, Get get, int64_t lo, std::string desc) {
  Field f{key, "list of int", std::move(desc), {}, {}, {}};
  // lo = -1: counts where -1 means "all" (fanouts), so 0 is out too.
  auto in_range = [=](int64_t v, const std::string& where) {
    if (lo == -1 && (v == 0 || v < -1))
      GT_THROW(where, "use -1 for all neighbours", key, " entries must be >= 1 or -1 (all neighbours), got ", v);
    if (v < lo) GT_THROW(where, "", "config key '", key, "' entries must be >= ", lo, ", got ", v);
  };
  f.set = [=](Config& c, const YAML::Node& n, const std::string& where) {
    if (!n.IsSequence()) type_error(key, "a list of integers", n, where);
    std::vector<int64_t> out;
    for (const auto& item : n) {
      const std::string at = entry_where(where, item);
      auto v = scalar_as<int64_t>(key, "a list of integers", item, at);
      in_range(v, at);
      out.push_back(v);
    }
    get(c) = out;
  };
  f.check = [=](const Config& c, const std::string& where) {
    for (auto v : get(const_cast<Config&>(c))) in_range(v, where);
  };
  f.show = [=](const Config& c) {
    std::string s = "[";
    for (auto v : get(const_cast<Config&>(c))) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
    return s + "]";
  };
  return f;
}

// string_field's checks (control characters), then `check_value(value, where)` (a free-form
// string with its own rule), documented as `type`.
template <typename Get>
Field checked_string_field(std::string key, Get get, std::string type, std::string desc,
                           void (*check_value)(const std::string&, const std::string&)) {
  Field f = string_field(std::move(key), get, {}, std::move(desc));
  f.type = std::move(type);
  f.set = [set = f.set, get, check_value](Config& c, const YAML::Node& n, const std::string& where) {
    set(c, n, where);
    check_value(get(c), where);
  };
  f.check = [check = f.check, get, check_value](const Config& c, const std::string& where) {
    check(c, where);
    check_value(get(const_cast<Config&>(c)), where);
  };
  return f;
}

// model.type: a built-in or registered model (check_model_type).
template <typename Get>
Field model_type_field(Get get, std::string desc) {
  return checked_string_field("model.type", get, "gcn \\| sage \\| ngcf \\| gin \\| gat \\| lightgcn \\| registered name",
                              std::move(desc), check_model_type);
}

// train.select_by: a node or link metric name (check_select_by).
template <typename Get>
Field select_by_field(Get get, std::string desc) {
  return checked_string_field("train.select_by", get,
                              "auto \\| accuracy \\| roc_auc \\| micro_f1 \\| macro_f1 \\| recall@K \\| ndcg@K \\| "
                              "precision@K \\| mrr \\| hits@K",
                              std::move(desc), check_select_by);
}

}  // namespace gt::config_detail
