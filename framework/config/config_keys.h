// Internal to the library (not installed): the table of config keys
// (framework/config/config_keys.cc) that parse_config, apply_override, validate_config and to_yaml
// (framework/config/config.cc) work from.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include <graphtensor/config/config.h>

namespace gt::config_detail {

// A declared field: how to read it from YAML, how to check the value a Config holds (the same
// bounds and choices whether it came from YAML, --set or code: validate_config runs every check)
// and how to print it.
struct Field {
  std::string key;   // "section.name"
  std::string type;  // for docs and messages
  std::string desc;
  std::function<void(Config&, const YAML::Node&, const std::string& where)> set;
  std::function<void(const Config&, const std::string& where)> check;
  std::function<std::string(const Config&)> show;
};

// Every key, in the order files, --print-config-keys and to_yaml show them.
const std::vector<Field>& fields();
const Field* find_field(const std::string& key);  // nullptr when there is no such key
// The keys of one section ("model"), without the section, comma-separated; all keys for "".
std::string known_keys(const std::string& section);
// The known key nearest to an unknown one by edit distance (a key of another section with the same
// name counts as one edit), or "" when none is close (at most a third of the key's length, at
// least 2, edits away).
std::string nearest_key(const std::string& key);
// Adds a name to model_types() (gt::register_model, which checks it first). Thread-safe.
void add_model_type(const std::string& name);
bool is_model_type(const std::string& name);
// "source:line" of a YAML node (just source when the node has no mark).
std::string where_of(const std::string& source, const YAML::Node& n);

}  // namespace gt::config_detail
