// YAML alias bombs at every door YAML comes in by (issue 47, docs/reliability.md): a config text,
// a config file, a --set value and a config stored in a model file all go through gt::load_yaml
// (framework/config/yaml_load.h), which refuses them in one line.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include <graphtensor/train/model_io.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/test_util.h"

namespace gt {
namespace {

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("yaml_guard") {}
};

using test::error_of;

// Nine levels of nine aliases each: 9^9 (387 million) nodes for a walk, in a few hundred bytes,
// as the value after `prefix`. yaml-cpp loads it at once; every walk of the loaded node took
// minutes before the guard.
std::string alias_bomb(const std::string& prefix) {
  std::string s = prefix + "[&a0 [x, x, x, x, x, x, x, x, x]";
  for (int level = 1; level < 9; ++level) {
    s += ", &a" + std::to_string(level) + " [";
    for (int k = 0; k < 9; ++k) s += std::string(k ? ", " : "") + "*a" + std::to_string(level - 1);
    s += "]";
  }
  return s + "]";
}

// Each door YAML comes in by: a config text, a config file, a --set value, and a config stored in
// a model file (gt-predict, gt-serve, InferenceSession and --resume read it with parse_config).
// Each ends in one line naming where the alias is, in well under a second.
TEST(YamlGuard, AliasExpansionBombIsRefusedAtEveryDoor) {
  const auto start = std::chrono::steady_clock::now();
  const std::string bomb = alias_bomb("model:\n  hidden_sizes: ");
  std::string e = error_of([&] { parse_config(bomb, "bomb.yaml"); });
  EXPECT_NE(e.find("the YAML document holds more than 10000 values with its aliases expanded"), std::string::npos) << e;
  EXPECT_NE(e.find("[at bomb.yaml:2]"), std::string::npos) << e;

  TempDir t;
  std::ofstream(t.file("bomb.yaml")) << bomb;
  e = error_of([&] { load_config(t.file("bomb.yaml")); });
  EXPECT_NE(e.find("[at " + t.file("bomb.yaml") + ":2]"), std::string::npos) << e;

  Config c;
  e = error_of([&] { apply_override(c, alias_bomb("sampling.fanouts=")); });
  EXPECT_NE(e.find("more than 10000 values"), std::string::npos) << e;
  EXPECT_NE(e.find("[at --set sampling.fanouts:1]"), std::string::npos) << e;

  // A model file whose stored config is the bomb: reading it is one line too.
  {
    TensorFileWriter w(t.file("model.h5"), "model file");
    w.attr("config", bomb);
    w.commit();
  }
  e = error_of([&] {
    TensorFileReader r(t.file("model.h5"), "model file");
    parse_config(r.attr_string("config"), t.file("model.h5") + " (stored config)");
  });
  EXPECT_NE(e.find("more than 10000 values"), std::string::npos) << e;
  EXPECT_NE(e.find("model.h5 (stored config):2]"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// An alias inside the node it names is a cycle: a walk never ends (before: a stack overflow in the
// quote check). A few anchors and aliases within the bound still load as YAML says.
TEST(YamlGuard, RecursiveAliasIsRefusedAndSmallAliasesStillWork) {
  std::string e = error_of([] { parse_config("model:\n  hidden_sizes: &a [8, *a]\n", "cyc.yaml"); });
  EXPECT_NE(e.find("YAML alias of a node that contains it"), std::string::npos) << e;
  EXPECT_NE(e.find("[at cyc.yaml:2]"), std::string::npos) << e;
  const Config c = parse_config("sampling:\n  fanouts: &f [5, 4]\n  eval_fanouts: *f\nmodel: {hidden: &h 16}\n", "ok.yaml");
  EXPECT_EQ(c.sampling.eval_fanouts, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(c.model.hidden, 16);
}

}  // namespace
}  // namespace gt
