// Internal to the library (not installed: it includes <yaml-cpp/yaml.h>, a private dependency):
// the one way the library turns YAML text into a YAML::Node. Configs (load_config,
// parse_config), --set values (apply_override) and the configs stored in model and checkpoint
// files (inference.cc, checkpoint.cc, gt-predict through parse_config) all come through here.
//
// Why a guard: yaml-cpp keeps an alias (*a) as a second reference to the anchored node (&a), so
// a few hundred bytes of nested anchors ("a1: &a1 [*a0, *a0, ...]", nine levels) load at once
// into a graph whose every walk (the quote check, the key checks) visits 10^9 nodes: minutes of
// CPU with flat memory ("billion laughs"). An alias inside the node it names (&a [*a]) makes a
// cycle that a walk never leaves. Before anything is built, the text is parsed once as events,
// counting the nodes of the document with every alias expanded; more than kMaxYamlNodes, or an
// alias of a node that is not complete yet, is a gt::Error naming <source>:<line> of the alias.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace gt {

// The most nodes (scalars, lists, maps) a YAML document may hold with its aliases expanded. A
// config holds about a hundred; a 10,000-node bound costs microseconds to walk.
inline constexpr int64_t kMaxYamlNodes = 10000;

// YAML::Load(text) after the alias check above. `source` names the text in messages ("a.yaml",
// "--set model.hidden", "best.h5 (stored config)"). yaml-cpp's own exceptions (syntax errors,
// YAML::DeepRecursion) pass through unchanged for the caller to word.
YAML::Node load_yaml(const std::string& text, const std::string& source);

}  // namespace gt
