// Config parsing: defaults, every type, unknown keys and wrong types named with file:line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "framework/config.h"
#include "framework/error.h"

namespace gt {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "test.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesAllSections) {
  Config c = parse_config(R"(
model: {type: sage, hidden: 32, layers: 3, dropout: 0.25}
dataset: {path: x.h5, normalize: row}
sampling: {fanouts: [15, 10, -1], batch_size: 256}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
train: {epochs: 7, device: cpu, seed: 42, progress: false}
)",
                          "t.yaml");
  EXPECT_EQ(c.model.type, "sage");
  EXPECT_EQ(c.model.hidden, 32);
  EXPECT_EQ(c.sampling.fanouts, (std::vector<int64_t>{15, 10, -1}));
  EXPECT_EQ(c.optimizer.momentum, 0.9);
  EXPECT_EQ(c.train.seed, 42);
  EXPECT_FALSE(c.train.progress);
  EXPECT_NO_THROW(validate_config(c));
}

TEST(Config, EmptyFileGivesDefaults) {
  Config c = parse_config("", "empty.yaml");
  EXPECT_EQ(c.model.type, "gcn");
  EXPECT_NO_THROW(validate_config(c));
}

TEST(Config, UnknownKeyIsNamedWithLine) {
  std::string e = error_of("model:\n  type: gcn\n  hiden: 3\n");
  EXPECT_NE(e.find("model.hiden"), std::string::npos) << e;
  EXPECT_NE(e.find("test.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden"), std::string::npos) << e;  // the hint lists the known keys
  EXPECT_NE(error_of("modle: {}\n").find("modle"), std::string::npos);
}

TEST(Config, WrongTypesAndRanges) {
  EXPECT_NE(error_of("model: {hidden: abc}").find("model.hidden' expects an integer, got 'abc'"), std::string::npos);
  EXPECT_NE(error_of("model: {hidden: 1.5}").find("model.hidden"), std::string::npos);
  EXPECT_NE(error_of("model: {dropout: 2}").find("model.dropout' must be in"), std::string::npos);
  EXPECT_NE(error_of("model: {type: gatv2}").find("must be one of gcn, sage, ngcf, gin, gat"), std::string::npos);
  EXPECT_NE(error_of("sampling: {fanouts: 5}").find("a list of integers"), std::string::npos);
  EXPECT_NE(error_of("train: {progress: maybe}").find("true or false"), std::string::npos);
  EXPECT_NE(error_of("model: [1, 2]").find("must be a map"), std::string::npos);
  EXPECT_NE(error_of("model: {type: gcn").find("YAML syntax error"), std::string::npos);
}

TEST(Config, OverridesAndCrossChecks) {
  Config c;
  apply_override(c, "model.layers=3");
  apply_override(c, "sampling.fanouts=[5, 5, 5]");
  apply_override(c, "train.metrics=");
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.train.metrics, "");
  EXPECT_NO_THROW(validate_config(c));
  apply_override(c, "model.layers=2");
  EXPECT_THROW(validate_config(c), Error);
  EXPECT_THROW(apply_override(c, "model.nope=1"), Error);
  EXPECT_THROW(apply_override(c, "model.hidden"), Error);
  EXPECT_THROW(apply_override(c, "model.hidden=x"), Error);
}

std::string validate_error(const Config& c) {
  try {
    validate_config(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A Config filled in by code gets the parser's bounds and choices from validate_config.
TEST(Config, ValuesSetInCodeAreChecked) {
  Config c;
  c.train.checkpoint_every = 0;  // was a division by zero in Trainer::fit
  EXPECT_NE(validate_error(c).find("train.checkpoint_every' must be in [1, "), std::string::npos) << validate_error(c);
  EXPECT_NE(validate_error(c).find("gt::Config"), std::string::npos) << validate_error(c);
  c = Config();
  c.train.replicas = 0;
  EXPECT_NE(validate_error(c).find("train.replicas"), std::string::npos);
  c = Config();
  c.model.hidden = 0;
  EXPECT_NE(validate_error(c).find("model.hidden"), std::string::npos);
  c = Config();
  c.train.precision = "fp8";
  EXPECT_NE(validate_error(c).find("train.precision' must be one of float32, tf32, got 'fp8'"), std::string::npos)
      << validate_error(c);
  c = Config();
  c.model.dropout = std::nan("");
  EXPECT_NE(validate_error(c).find("model.dropout"), std::string::npos);
  c = Config();
  c.sampling.eval_fanouts = {0, 5};
  EXPECT_NE(validate_error(c).find("sampling.eval_fanouts entries must be >= 1 or -1"), std::string::npos)
      << validate_error(c);
  EXPECT_EQ(validate_error(Config()), "");
}

TEST(Config, IntegersAreDecimal) {
  EXPECT_EQ(parse_config("model: {hidden: 064}", "t.yaml").model.hidden, 64);  // not octal 52
  EXPECT_EQ(parse_config("model: {hidden: +8}", "t.yaml").model.hidden, 8);
  EXPECT_NE(error_of("model: {hidden: 0x10}").find("expects an integer, got '0x10'"), std::string::npos);
  Config c;
  apply_override(c, "sampling.fanouts=[010, 015]");
  EXPECT_EQ(c.sampling.fanouts, (std::vector<int64_t>{10, 15}));
  EXPECT_THROW(apply_override(c, "train.epochs=1e3"), Error);
}

TEST(Config, RepeatedKeysAndSectionsAreErrors) {
  std::string e = error_of("train:\n  epochs: 3\n  epochs: 4\n");
  EXPECT_NE(e.find("config key 'train.epochs' appears twice"), std::string::npos) << e;
  EXPECT_NE(e.find("test.yaml:3"), std::string::npos) << e;
  e = error_of("model: {hidden: 8}\ntrain: {epochs: 2}\nmodel: {layers: 1}\n");
  EXPECT_NE(e.find("config section 'model' appears twice"), std::string::npos) << e;
}

TEST(Config, OverrideNeedsAValue) {
  Config c;
  for (const char* v : {"train.metrics=~", "train.metrics=null"}) {
    try {
      apply_override(c, v);
      ADD_FAILURE() << v << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs a value"), std::string::npos) << e.what();
    }
  }
  apply_override(c, "train.metrics=");
  EXPECT_EQ(c.train.metrics, "");
}

TEST(Config, DirectoryIsNotAConfig) {
  const std::string dir = ::testing::TempDir();
  try {
    load_config(dir);
    FAIL() << "a directory loaded as a config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// dataset.row_alignment: a power of two from 16 to 128 bytes, named when it is not.
TEST(Config, RowAlignmentIsAPowerOfTwo) {
  Config c;
  EXPECT_EQ(c.dataset.row_alignment, 128);
  for (const char* ok : {"16", "32", "64", "128"}) {
    apply_override(c, std::string("dataset.row_alignment=") + ok);
    EXPECT_NO_THROW(validate_config(c)) << ok;
  }
  apply_override(c, "dataset.row_alignment=48");
  try {
    validate_config(c);
    FAIL() << "row_alignment 48 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dataset.row_alignment must be a power of two"), std::string::npos) << e.what();
  }
  EXPECT_NE(error_of("dataset: {row_alignment: 256}").find("dataset.row_alignment' must be in [16, 128]"),
            std::string::npos);
  EXPECT_NE(error_of("dataset: {row_alignment: 8}").find("dataset.row_alignment"), std::string::npos);
}

TEST(Config, YamlRoundTripAndDocs) {
  Config c;
  c.model.type = "sage";
  c.sampling.fanouts = {3, 4};
  c.optimizer.lr = 0.125;
  Config back = parse_config(to_yaml(c), "roundtrip");
  EXPECT_EQ(back.model.type, "sage");
  EXPECT_EQ(back.sampling.fanouts, c.sampling.fanouts);
  EXPECT_EQ(back.optimizer.lr, 0.125);
  std::string md = config_keys_markdown();
  EXPECT_NE(md.find("`sampling.fanouts`"), std::string::npos);
}

}  // namespace
}  // namespace gt

namespace gt {
namespace {

// docs/configs.md embeds the generated table; regenerate it with `gt-train --print-config-keys`.
TEST(Config, DocsTableIsCurrent) {
  std::ifstream in(std::string(GT_SOURCE_DIR) + "/docs/configs.md");
  ASSERT_TRUE(in) << "docs/configs.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(config_keys_markdown()), std::string::npos)
      << "docs/configs.md is out of date: regenerate its table with gt-train --print-config-keys";
}

}  // namespace
}  // namespace gt
