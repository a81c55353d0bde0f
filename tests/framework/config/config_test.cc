// Config parsing: defaults, every type, unknown keys and wrong types named with file:line; and
// the files a run writes: defaults in code and in files, the output check, cross-field errors,
// the epoch report without evaluation, the atomic writers' temporary files on signals and kills.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>

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
  EXPECT_NE(e.find("(did you mean 'model.hidden'?)"), std::string::npos) << e;
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

// An unknown --set key names the nearest known one, on one line, instead of listing every key.
TEST(Config, UnknownOverrideNamesTheNearestKey) {
  auto error_of_set = [](const std::string& assignment) {
    Config c;
    try {
      apply_override(c, assignment);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = error_of_set("train.epoch=3");
  EXPECT_NE(e.find("unknown config key 'train.epoch' (did you mean 'train.epochs'?)"), std::string::npos) << e;
  EXPECT_EQ(e.find("model.hidden"), std::string::npos) << "no list of every key: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  e = error_of_set("model.epochs=3");  // the right name in another section
  EXPECT_NE(e.find("did you mean 'train.epochs'?"), std::string::npos) << e;
  e = error_of_set("sampling.fanout=[5,5]");
  EXPECT_NE(e.find("did you mean 'sampling.fanouts'?"), std::string::npos) << e;
  e = error_of_set("zzzzzz.qqqqq=1");  // nothing close: where to find the keys instead
  EXPECT_NE(e.find("unknown config key 'zzzzzz.qqqqq'"), std::string::npos) << e;
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  EXPECT_NE(e.find("--print-config-keys"), std::string::npos) << e;
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
  // GPU-only settings on a CPU run are refused (they were ignored); with device auto they apply
  // when a GPU is found.
  c = Config();
  c.dataset.path = "d.h5";
  c.train.device = "cpu";
  c.train.precision = "tf32";
  EXPECT_NE(validate_error(c).find("train.precision is tf32 but train.device is cpu"), std::string::npos)
      << validate_error(c);
  c.train.precision = "float32";
  c.train.gpu_cache_mb = 10;
  EXPECT_NE(validate_error(c).find("train.gpu_cache_mb is 10 but train.device is cpu"), std::string::npos)
      << validate_error(c);
  c.train.device = "auto";
  EXPECT_EQ(validate_error(c), "");
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

// An empty value names its key's line (its mark is the next token's), and a bad list entry its
// own line.
TEST(Config, ErrorsNameTheLineOfTheValue) {
  std::string e = error_of("model:\n  type: gcn\n  hidden:\n  layers: 2\n");
  EXPECT_NE(e.find("model.hidden' expects an integer, got nothing [at test.yaml:3]"), std::string::npos) << e;
  e = error_of("sampling:\n  fanouts:\n    - 5\n    - 99999999999999999999\n");
  EXPECT_NE(e.find("[at test.yaml:4]"), std::string::npos) << e;
  e = error_of("sampling:\n  fanouts:\n    - 5\n    - -3\n");
  EXPECT_NE(e.find("[at test.yaml:4]"), std::string::npos) << e;
  Config c;
  e = "";
  try {
    apply_override(c, "sampling.fanouts=[5, x]");
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("[at --set sampling.fanouts]"), std::string::npos) << e;
}

// " #" in a --set value starts a YAML comment: refused rather than cutting the value short.
TEST(Config, OverrideWithACommentIsRefused) {
  Config c;
  try {
    apply_override(c, "train.metrics=out dir/m #1.jsonl");
    ADD_FAILURE() << "accepted as " << c.train.metrics;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'#1.jsonl' in 'out dir/m #1.jsonl' is a YAML comment"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(apply_override(c, "optimizer.lr=0.01 # faster"), Error);
  // A '#' that is not a comment, or inside quotes, stays part of the value.
  apply_override(c, "train.metrics=run#1.jsonl");
  EXPECT_EQ(c.train.metrics, "run#1.jsonl");
  apply_override(c, "train.metrics=\"m #1.jsonl\"");
  EXPECT_EQ(c.train.metrics, "m #1.jsonl");
  apply_override(c, "train.metrics='it''s #2'");
  EXPECT_EQ(c.train.metrics, "it's #2");
}

// A NUL byte in a config (a binary file named as one, or a "\0" escape) keeps the message whole:
// it is written as \x00, so the file:line after it is not lost when what() is printed. A string
// value that holds one is refused: the system would cut a path there.
TEST(Config, NulBytesAreShownAndRefused) {
  const std::string binary = std::string("model:\n  type: sa") + '\0' + "ge\n\x89HDF\n";
  std::string e = error_of(binary);
  EXPECT_NE(e.find("[at test.yaml:"), std::string::npos) << e;
  EXPECT_EQ(e.find('\0'), std::string::npos) << "a raw NUL in the message";
  e = error_of("train:\n  save_best: \"best.h5\\0.bak\"\n");
  EXPECT_NE(e.find("config key 'train.save_best' holds a NUL byte (\\x00) at offset 7 [at test.yaml:2]"),
            std::string::npos)
      << e;
  e = error_of("model:\n  type: \"sa\\0ge\"\n");
  EXPECT_NE(e.find("'model.type' holds a NUL byte"), std::string::npos) << e;
  Config c;
  c.train.save_best = std::string("best.h5\0.bak", 12);
  try {
    validate_config(c);
    ADD_FAILURE() << "a NUL in train.save_best was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("'train.save_best' holds a NUL byte"), std::string::npos) << err.what();
  }
  const Error direct(std::string("a\0b\x1b[31m\n", 9), "f.yaml:3", "");
  EXPECT_EQ(std::string(direct.what()), "a\\x00b\\x1b[31m\n [at f.yaml:3]");
  EXPECT_EQ(direct.message(), "a\\x00b\\x1b[31m\n");
}

// A quote that is never closed would swallow the rest of the file into one value (yaml-cpp reads
// it to the end of the file): refused at its line. Quotes that close, escaped quotes and '' pass.
// Block scalars end with a line break, which no path or name can hold.
TEST(Config, QuotesCloseOnTheirLineAndValuesHoldNoLineBreaks) {
  std::string e = error_of("dataset:\n  path: d.h5\ntrain:\n  metrics: \"out/m.jsonl\nmodel:\n  type: sage\n");
  EXPECT_NE(e.find("the quoted value that starts here (\") does not end on its line [at test.yaml:4]"),
            std::string::npos)
      << e;
  e = error_of("model:\n  type: 'sage\ntrain:\n  epochs: 3\n");
  EXPECT_NE(e.find("(') does not end on its line [at test.yaml:2]"), std::string::npos) << e;
  e = error_of("sampling:\n  fanouts: [5, \"10\n  ]\n");  // refused, by yaml-cpp or the check
  EXPECT_NE(e.find("[at test.yaml:"), std::string::npos) << e;
  e = error_of("train:\n  metrics: \"m.jsonl\n  epochs: 2\n");  // a value in the middle of a map
  EXPECT_NE(e.find("does not end on its line [at test.yaml:2]"), std::string::npos) << e;
  const Config ok = parse_config("model: {type: \"sage\"}\ntrain: {metrics: 'it''s.jsonl', save_best: \"a\\\"b.h5\"}\n",
                                 "test.yaml");
  EXPECT_EQ(ok.model.type, "sage");
  EXPECT_EQ(ok.train.metrics, "it's.jsonl");
  EXPECT_EQ(ok.train.save_best, "a\"b.h5");
  e = error_of("train:\n  metrics: |\n    out/m.jsonl\n  epochs: 1\n");
  EXPECT_NE(e.find("config key 'train.metrics' holds a line break (\\x0a) at offset 11 [at test.yaml:2]"),
            std::string::npos)
      << e;
  e = error_of("model:\n  type: >\n    sage\n");
  EXPECT_NE(e.find("config key 'model.type' holds a line break"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "the message spans lines: " << e;
  e = error_of("dataset:\n  path: \"data/c\\tora.h5\"\n");
  EXPECT_NE(e.find("config key 'dataset.path' holds a control character (\\x09) at offset 6"), std::string::npos)
      << e;
  Config c = parse_config("", "test.yaml");
  EXPECT_THROW(apply_override(c, "dataset.path=\"a\\nb.h5\""), Error);
}

// Lists nested past yaml-cpp's depth guard: said so, not yaml-cpp's "bad file".
TEST(Config, DeepNestingIsNamed) {
  const std::string e = error_of("model: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  EXPECT_NE(e.find("YAML syntax error: lists or maps nested more than"), std::string::npos) << e;
  EXPECT_NE(e.find("[at test.yaml:1]"), std::string::npos) << e;
}

// yaml-cpp refuses 1e400 but would read 1e-400 as 0; both are refused. A learning rate of 0 is
// allowed, as in PyTorch (a run that freezes the weights; the trainer warns of it).
TEST(Config, NumbersOutsideADoubleAreRefused) {
  std::string e = error_of("optimizer:\n  lr: 1e-400\n");
  EXPECT_NE(e.find("config key 'optimizer.lr': 1e-400 is outside the range of a double"), std::string::npos) << e;
  e = error_of("optimizer:\n  lr: 1e400\n");
  EXPECT_NE(e.find("config key 'optimizer.lr' expects a number"), std::string::npos) << e;
  e = error_of("optimizer:\n  weight_decay: 1e-310\n");
  EXPECT_NE(e.find("outside the range of a double"), std::string::npos) << e;
  EXPECT_EQ(parse_config("optimizer:\n  lr: 0\n", "test.yaml").optimizer.lr, 0.0);
  e = error_of("optimizer:\n  lr: -0.1\n");
  EXPECT_NE(e.find("config key 'optimizer.lr' must be in [0, 100], got -0.1 [at test.yaml:2]"), std::string::npos) << e;
  EXPECT_EQ(parse_config("optimizer:\n  lr: 1e-30\n  weight_decay: 0\n", "test.yaml").optimizer.lr, 1e-30);
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

// --- The files a run writes: defaults, the output check, temporary files, the epoch report -------

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iterator>

#include "framework/core/temp_files.h"
#include "framework/core/trace.h"
#include "framework/train/epoch_report.h"
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/temp_files.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("config_outputs") {}
};

// A small synthetic dataset (4 classes, splits train/valid/test) at `path`.
void write_small_dataset(const std::string& path) {
  SynthOptions o;
  o.num_nodes = 400;
  o.avg_degree = 5;
  o.feature_dim = 8;
  o.num_classes = 4;
  o.threads = 1;
  generate_synthetic(o, path);
}

// A 2-epoch CPU run on `data` built in code (no output set).
Config small_run(const std::string& data) {
  Config c;
  c.dataset.path = data;
  c.sampling.fanouts = {3, 3};
  c.sampling.batch_size = 64;
  c.model.hidden = 8;
  c.train.epochs = 2;
  c.train.device = "cpu";
  c.train.threads = 1;
  c.train.progress = false;
  return c;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `f` in the folder `dir` and goes back (relative default outputs land in the working folder).
template <typename F>
void in_folder(const std::string& dir, F&& f) {
  const fs::path before = fs::current_path();
  fs::current_path(dir);
  try {
    f();
  } catch (...) {
    fs::current_path(before);
    throw;
  }
  fs::current_path(before);
}

// A Config built in code writes nothing it does not name; a config file keeps gt-train's outputs.
TEST(ConfigOutputs, CodeConfigWritesNoFilesUnlessAsked) {
  Config c;
  EXPECT_EQ(c.train.metrics, "");
  EXPECT_EQ(c.train.save_best, "");
  EXPECT_EQ(c.train.dkp_cache, "");
  const Config f = parse_config("model: {hidden: 8}\n", "f.yaml");
  EXPECT_EQ(f.train.metrics, "out/metrics.jsonl");
  EXPECT_EQ(f.train.save_best, "out/best-model.h5");
  EXPECT_EQ(f.train.dkp_cache, "out/dkp-cache");
  EXPECT_EQ(parse_config("train: {metrics: m.jsonl}\n", "f.yaml").train.metrics, "m.jsonl");

  TempDir data, work;
  write_small_dataset(data.file("d.h5"));
  in_folder(work.file(""), [&] {
    Config run = small_run(data.file("d.h5"));
    run.model.dkp = "auto";  // would write the DKP cost model to train.dkp_cache
    run.train.dkp_warmup = 2;
    Trainer t(run);
    EXPECT_EQ(t.fit(nullptr).epochs.size(), 2u);
  });
  EXPECT_EQ(names_in(work.file("")), std::vector<std::string>{}) << "a Config built in code wrote files";

  // The same run from a config file writes out/metrics.jsonl and out/best-model.h5, as gt-train did.
  in_folder(work.file(""), [&] {
    Config run = parse_config("dataset: {path: \"" + data.file("d.h5") +
                                  "\"}\nsampling: {fanouts: [3, 3], batch_size: 64}\nmodel: {hidden: 8}\n"
                                  "train: {epochs: 1, device: cpu, threads: 1, progress: false}\n",
                              "run.yaml");
    Trainer t(run);
    t.fit(nullptr);
  });
  EXPECT_TRUE(fs::exists(work.file("out/metrics.jsonl")));
  EXPECT_TRUE(fs::exists(work.file("out/best-model.h5")));
}

// A failed output check removes the folders it made (only those, only when empty).
TEST(ConfigOutputs, FailedOutputCheckRemovesTheFoldersItMade) {
  TempDir t;
  fs::create_directories(t.file("keep"));
  fs::create_directories(t.file("adir"));
  Config c;
  c.dataset.path = t.file("data.h5");
  c.train.metrics = t.file("new/a/b/metrics.jsonl");
  c.train.save_best = t.file("keep/x/best.h5");
  c.train.checkpoint = t.file("adir");  // a directory: the check fails after the two above
  try {
    check_output_paths(c);
    FAIL() << "a directory was accepted as train.checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(t.file("new"))) << "the failed check left the folder it made";
  EXPECT_FALSE(fs::exists(t.file("keep/x")));
  EXPECT_TRUE(fs::exists(t.file("keep"))) << "a folder that was there before was removed";
  EXPECT_TRUE(fs::exists(t.file("adir")));

  // On success it returns what it made; remove_empty_dirs takes back the empty ones only.
  c.train.checkpoint = "";
  const std::vector<std::string> made = check_output_paths(c);
  EXPECT_EQ(made.size(), 4u);  // new, new/a, new/a/b, keep/x
  std::FILE* fp = std::fopen(t.file("new/a/b/metrics.jsonl").c_str(), "w");
  ASSERT_NE(fp, nullptr);
  std::fclose(fp);
  remove_empty_dirs(made);
  EXPECT_TRUE(fs::exists(t.file("new/a/b/metrics.jsonl")));
  EXPECT_FALSE(fs::exists(t.file("keep/x")));

  // A Trainer that fails after the check (here: no dataset) removes the folders too.
  Config run = small_run(t.file("missing.h5"));
  run.train.metrics = t.file("run/out/metrics.jsonl");
  EXPECT_THROW(Trainer{run}, Error);
  EXPECT_FALSE(fs::exists(t.file("run"))) << "a failed Trainer left an empty output folder";
}

// Outputs that are not files the writers may replace, and the DKP cache folder, fail before any
// data is read; a Trainer that never trains leaves no folder behind.
TEST(ConfigOutputs, NonRegularOutputsFolderNamesAndTheDkpCacheAreCheckedFirst) {
  TempDir t;
  auto output_error = [](const Config& c) {
    try {
      check_output_paths(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Config c;
  c.dataset.path = t.file("data.h5");
  // A FIFO (as a device would be) is refused, and stays a FIFO.
  ASSERT_EQ(::mkfifo(t.file("pipe").c_str(), 0644), 0);
  c.train.save_best = t.file("pipe");
  std::string e = output_error(c);
  EXPECT_NE(e.find("train.save_best '" + t.file("pipe") + "' exists and is not a regular file"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_fifo(t.file("pipe")));
  // A name ending in '/' names a folder; nothing is created for it.
  c.train.save_best = t.file("later/");
  e = output_error(c);
  EXPECT_NE(e.find("names a folder, not a file"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(t.file("later")));
  c.train.save_best = "";
  // The DKP cache, a folder, when kernel placement is on: a file there is an error before training.
  std::ofstream(t.file("cache-file")) << "x";
  c.model.dkp = "auto";
  c.train.dkp_cache = t.file("cache-file");
  e = output_error(c);
  EXPECT_NE(e.find("train.dkp_cache '" + t.file("cache-file") + "' exists and is not a folder"), std::string::npos) << e;
  c.train.dkp_cache = t.file("dkp/cache");
  const std::vector<std::string> made = check_output_paths(c);
  EXPECT_TRUE(fs::is_directory(t.file("dkp/cache")));
  EXPECT_EQ(made.size(), 2u);
  EXPECT_EQ(names_in(t.file("dkp/cache")), std::vector<std::string>{}) << "the probe file was left";
  remove_empty_dirs(made);
  EXPECT_FALSE(fs::exists(t.file("dkp")));
  c.model.dkp = "aggregate-first";  // no placement, no cache: not checked
  c.train.dkp_cache = t.file("cache-file");
  EXPECT_EQ(output_error(c), "");

  // A Trainer built and dropped without training takes its empty output folders with it.
  TempDir data;
  write_small_dataset(data.file("d.h5"));
  {
    Config run = small_run(data.file("d.h5"));
    run.train.metrics = t.file("unused/metrics.jsonl");
    Trainer tr(run);
    EXPECT_TRUE(fs::is_directory(t.file("unused")));
  }
  EXPECT_FALSE(fs::exists(t.file("unused")));
}

// Config files are one YAML document; a device name is checked where the file gives it; Adam's
// epsilon is positive.
TEST(Config, OneDocumentDeviceFormAndPositiveEpsilon) {
  std::string e = error_of("model:\n  type: gcn\n---\nmodel:\n  type: sage\n");
  EXPECT_NE(e.find("a config is one YAML document, this file has another from line 3 [at test.yaml:3]"),
            std::string::npos)
      << e;
  e = error_of("model: {type: gcn}\n...\n# done\nmodel: {type: [\n");
  EXPECT_NE(e.find("another from line 4"), std::string::npos) << e;
  // One document: a leading "---", a directive, "..." at the end, comments after it.
  EXPECT_EQ(error_of("%YAML 1.2\n---\nmodel: {type: sage}\n...\n# end\n"), "");
  EXPECT_EQ(error_of("# c\n--- # first\nmodel:\n  type: gcn\n"), "");
  // yaml-cpp's LoadAll never returned on this input (fuzz_config timeout): now one line, at once.
  // yaml-cpp reads it as no document at all: that is not an empty config.
  e = error_of(std::string(",odel:\x05\nmodel:\x05\n  ? [a,1\n"));
  EXPECT_NE(e.find("the file holds text but no YAML document could be read from it [at test.yaml]"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of("# only a comment\n"), "");
  EXPECT_EQ(error_of("~\n"), "");
  e = validate_error(parse_config("train:\n  epochs: 2\n  device: gpu0\n", "d.yaml"));
  EXPECT_NE(e.find("train.device must be cpu, cuda, cuda:N or auto, got 'gpu0' [at d.yaml:3]"), std::string::npos) << e;
  for (const char* ok : {"cpu", "auto", "cuda", "cuda:0", "cuda:12"}) {
    Config c;
    c.train.device = ok;
    EXPECT_EQ(validate_error(c), "") << ok;
  }
  for (const char* bad : {"cuda:", "cuda:x", "cuda0", "GPU", ""}) {
    Config c;
    c.train.device = bad;
    EXPECT_NE(validate_error(c), "") << bad;
  }
  e = error_of("optimizer: {eps: 0}\n");
  EXPECT_NE(e.find("config key 'optimizer.eps' must be in (0, 1], got 0"), std::string::npos) << e;
  EXPECT_EQ(error_of("optimizer: {eps: 1.0e-30}\n"), "");
}

// Rules between two keys name the file and line of the key to change; --set names the override;
// a Config built in code keeps "gt::Config".
TEST(ConfigOutputs, CrossFieldErrorsNameFileAndLine) {
  auto has = [](const std::string& e, const std::string& s) { return e.find(s) != std::string::npos; };
  std::string e = validate_error(parse_config("model:\n  hidden: 8\n  layers: 3\n", "c.yaml"));
  EXPECT_TRUE(has(e, "sampling.fanouts has 2 entries but model.layers is 3 [at c.yaml:3]")) << e;
  e = validate_error(parse_config("model: {layers: 3}\nsampling:\n  batch_size: 8\n  fanouts: [5, 5]\n", "c.yaml"));
  EXPECT_TRUE(has(e, "[at c.yaml:4]")) << e;  // both set: the fanouts
  e = validate_error(parse_config("sampling:\n  eval_fanouts: [5]\n", "c.yaml"));
  EXPECT_TRUE(has(e, "sampling.eval_fanouts has 1 entries") && has(e, "[at c.yaml:2]")) << e;
  e = error_of("\nsampling: {fanouts: [0, 5]}\n");  // refused as it is read, 0 like -2
  EXPECT_TRUE(has(e, "sampling.fanouts entries must be >= 1 or -1 (all neighbours), got 0 [at test.yaml:2]")) << e;
  e = error_of("sampling:\n  eval_fanouts: [5, -2]\n");
  EXPECT_TRUE(has(e, "sampling.eval_fanouts entries must be >= 1 or -1 (all neighbours), got -2 [at test.yaml:2]")) << e;
  // dkp auto (the default) runs a model with nothing to place in its fixed order; combine-first
  // there is refused.
  EXPECT_NO_THROW(validate_config(parse_config("model:\n  type: gat\n  dkp: auto\n", "c.yaml")));
  e = validate_error(parse_config("model:\n  type: gat\n  dkp: combine-first\n", "c.yaml"));
  EXPECT_TRUE(has(e, "model.dkp is 'combine-first' but model.type is 'gat' [at c.yaml:3]")) << e;
  e = validate_error(parse_config("model:\n  dkp: combine-first\n\n  type: gat\n", "c.yaml"));
  EXPECT_TRUE(has(e, "[at c.yaml:2]")) << e;
  // model.aggregation max: GCN and GraphSAGE only, and never moved by kernel placement.
  EXPECT_NO_THROW(validate_config(parse_config("model:\n  type: sage\n  aggregation: max\n", "c.yaml")));
  e = validate_error(parse_config("model:\n  type: gin\n  aggregation: max\n", "c.yaml"));
  EXPECT_TRUE(has(e, "model.aggregation is max but model.type is 'gin': GIN always sums its neighbours [at c.yaml:3]"))
      << e;
  e = validate_error(parse_config("model:\n  type: ngcf\n  aggregation: max\n", "c.yaml"));
  EXPECT_TRUE(has(e, "NGCF aggregates with mean or sum")) << e;
  EXPECT_NO_THROW(validate_config(parse_config("model:\n  type: sage\n  aggregation: max\n  dkp: auto\n", "c.yaml")));
  e = validate_error(parse_config("model:\n  type: gcn\n  aggregation: max\n  normalization: mean\n  dkp: combine-first\n",
                                  "c.yaml"));
  EXPECT_TRUE(has(e, "model.dkp is 'combine-first' but model.aggregation is max") && has(e, "[at c.yaml:5]")) << e;
  // GCN's symmetric normalisation (the default) weights the neighbours itself: another
  // aggregation needs normalization mean; select_by roc_auc needs a sigmoid task; class weights
  // are none, balanced or positive numbers.
  e = validate_error(parse_config("model:\n  type: gcn\n  aggregation: sum\n", "c.yaml"));
  EXPECT_TRUE(has(e, "model.aggregation is sum but model.normalization is symmetric") && has(e, "[at c.yaml:3]") &&
              has(e, "set model.normalization: mean"))
      << e;
  EXPECT_NO_THROW(validate_config(parse_config("model:\n  aggregation: sum\n  normalization: mean\n", "c.yaml")));
  EXPECT_NO_THROW(validate_config(parse_config("model:\n  type: sage\n  aggregation: sum\n", "c.yaml")));
  e = validate_error(parse_config("model:\n  task: multiclass\ntrain:\n  select_by: roc_auc\n", "c.yaml"));
  EXPECT_TRUE(has(e, "train.select_by is roc_auc but model.task is multiclass") && has(e, "[at c.yaml:4]")) << e;
  e = error_of("train:\n  select_by: auc\n");
  EXPECT_TRUE(has(e, "train.select_by") && has(e, "roc_auc") && has(e, "test.yaml:2")) << e;
  e = error_of("model:\n  task: regression\n");
  EXPECT_TRUE(has(e, "model.task") && has(e, "multilabel") && has(e, "test.yaml:2")) << e;
  for (const char* bad : {"1,0", "1,,2", "x", "1,-3", "inf,1", "balance"}) {
    e = validate_error(parse_config(std::string("train:\n  class_weights: \"") + bad + "\"\n", "c.yaml"));
    EXPECT_TRUE(has(e, "train.class_weights") && has(e, "[at c.yaml:2]")) << bad << ": " << e;
  }
  EXPECT_NO_THROW(validate_config(parse_config("train:\n  class_weights: \"0.5,2.5\"\n", "c.yaml")));
  EXPECT_NO_THROW(validate_config(parse_config("train:\n  class_weights: balanced\n", "c.yaml")));
  // model.activation: gcn, sage and gin; NGCF and GAT keep their own.
  EXPECT_NO_THROW(validate_config(parse_config("model:\n  type: gin\n  activation: leaky_relu\n", "c.yaml")));
  e = validate_error(parse_config("model:\n  type: ngcf\n  activation: elu\n", "c.yaml"));
  EXPECT_TRUE(has(e, "model.activation is elu but model.type is 'ngcf'") && has(e, "[at c.yaml:3]")) << e;
  e = validate_error(parse_config("model:\n  activation: none\n  type: gat\n", "c.yaml"));
  EXPECT_TRUE(has(e, "GAT's hidden layers end in ELU") && has(e, "[at c.yaml:2]")) << e;
  e = error_of("model:\n  activation: tanh\n");
  EXPECT_TRUE(has(e, "model.activation") && has(e, "leaky_relu") && has(e, "test.yaml:2")) << e;
  e = error_of("model:\n  aggregation: min\n");
  EXPECT_TRUE(has(e, "model.aggregation") && has(e, "max") && has(e, "test.yaml:2")) << e;
  e = validate_error(parse_config("dataset:\n  features: mmap\n  normalize: row\n", "c.yaml"));
  EXPECT_TRUE(has(e, "needs dataset.features=memory [at c.yaml:3]")) << e;
  e = validate_error(parse_config("dataset:\n  path: \"\"\n", "c.yaml"));
  EXPECT_TRUE(has(e, "dataset.path is empty [at c.yaml:2]")) << e;
  e = validate_error(parse_config("dataset:\n  row_alignment: 48\n", "c.yaml"));
  EXPECT_TRUE(has(e, "[at c.yaml:2]")) << e;

  Config c = parse_config("train: {epochs: 2}\n", "c.yaml");
  apply_override(c, "model.layers=3");
  e = validate_error(c);
  EXPECT_TRUE(has(e, "[at --set model.layers]")) << e;

  Config code;
  code.model.layers = 3;
  e = validate_error(code);
  EXPECT_TRUE(has(e, "sampling.fanouts has 2 entries but model.layers is 3 [at gt::Config]")) << e;
}

// Epochs without evaluation: "-" in the log, null in the metrics, never -1.
TEST(ConfigOutputs, NoEvaluationIsNotMinusOne) {
  TempDir t;
  write_small_dataset(t.file("d.h5"));
  Config c = small_run(t.file("d.h5"));
  c.train.eval_every = 0;
  c.train.metrics = t.file("m.jsonl");
  std::ostringstream log;
  Trainer tr(c);
  TrainResult r = tr.fit(&log);
  ASSERT_EQ(r.epochs.size(), 2u);
  EXPECT_EQ(log.str().find("-1.0"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("valid -"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("best valid -, test -"), std::string::npos) << log.str();
  std::ifstream in(t.file("m.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    EXPECT_NE(line.find("\"valid_acc\": null, \"test_acc\": null, \"eval_s\": null"), std::string::npos) << line;
    EXPECT_EQ(line.find("_acc\": -1"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 2);

  // An evaluated epoch keeps its figures.
  EpochStats st;
  st.epoch = 3;
  st.valid_acc = 0.5;
  st.test_acc = 0.25;
  const std::string rec = epoch_record(st, EpochReportInfo{}).str();
  EXPECT_NE(rec.find("\"valid_acc\": 0.5, \"test_acc\": 0.25"), std::string::npos) << rec;
  EXPECT_NE(rec.find("\"h2d_bytes\": null"), std::string::npos) << "nothing crosses to a device on the CPU: " << rec;
  EpochReportInfo gpu;
  gpu.cuda = true;
  st.h2d_bytes = 4096;
  EXPECT_NE(epoch_record(st, gpu).str().find("\"h2d_bytes\": 4096"), std::string::npos);
  std::ostringstream one;
  log_epoch(one, st, EpochReportInfo{});
  EXPECT_NE(one.str().find("valid 0.5000  test 0.2500"), std::string::npos) << one.str();
  EXPECT_EQ(one.str().find("evaluation"), std::string::npos) << "no evaluation time given: " << one.str();
  st.eval_seconds = 0.0125;
  EXPECT_NE(epoch_record(st, EpochReportInfo{}).str().find("\"eval_s\": 0.0125"), std::string::npos);
  std::ostringstream timed;
  log_epoch(timed, st, EpochReportInfo{});
  EXPECT_NE(timed.str().find("overlap 0.00x  evaluation 12.5\n"), std::string::npos) << timed.str();

  // A run that evaluates every second epoch times those epochs' evaluations only.
  c.train.eval_every = 2;
  c.train.epochs = 3;
  c.train.metrics = "";
  TrainResult timed_run = Trainer(c).fit(nullptr);
  ASSERT_EQ(timed_run.epochs.size(), 3u);
  EXPECT_EQ(timed_run.epochs[0].eval_seconds, -1.0);
  EXPECT_GT(timed_run.epochs[1].eval_seconds, 0.0);
  EXPECT_GT(timed_run.epochs[2].eval_seconds, 0.0) << "the last epoch evaluates";
}

// Every atomic writer gives its temporary name back, on success and on failure (the registry
// a signal handler reads must not fill up).
TEST(TempFiles, WritersReleaseTheirNames) {
  TempDir t;
  const std::size_t before = live_temp_path_count();
  TraceRecorder().write(t.file("trace.json"));
  EXPECT_EQ(live_temp_path_count(), before) << "trace";
  fs::create_directories(t.file("adir"));
  EXPECT_THROW(TraceRecorder().write(t.file("adir")), Error);  // the rename fails
  EXPECT_EQ(live_temp_path_count(), before) << "failed trace";
  save_dkp_cache(t.file("dkp.txt"), DkpCoefficients{}, "cpu", "gcn", 1);
  EXPECT_EQ(live_temp_path_count(), before) << "dkp cache";
  {
    TensorFileWriter w(t.file("w.h5"));
    w.attr("x", int64_t{1});
    w.commit();
  }
  EXPECT_EQ(live_temp_path_count(), before) << "weights";
  { TensorFileWriter w(t.file("w2.h5")); }
  EXPECT_EQ(live_temp_path_count(), before) << "abandoned weights";
  { DatasetWriter w(t.file("d.h5"), 4, 2); }
  EXPECT_EQ(live_temp_path_count(), before) << "abandoned dataset";
  write_small_dataset(t.file("d2.h5"));
  EXPECT_EQ(live_temp_path_count(), before) << "dataset";
  Config c;
  c.dataset.path = t.file("d2.h5");
  c.train.metrics = t.file("m/metrics.jsonl");
  check_output_paths(c);
  EXPECT_EQ(live_temp_path_count(), before) << "output check";
  for (const char* f : {"trace.json", "adir", "dkp.txt", "w.h5", "w2.h5", "d.h5", "d2.h5", "m/metrics.jsonl"})
    EXPECT_EQ(test::temp_files_of(t.file(f)), 0) << f;
}

// write_target: where an atomic write of a path lands. A plain path is itself; a chain of
// symbolic links (relative to each link's folder, or absolute) is followed to its end, which
// need not exist yet; a loop is an error naming the path. The writers rename onto it, so the
// links stay and the files they name are replaced (weights and traces here; predict.sh covers
// the programs).
TEST(TempFiles, WritesGoThroughSymbolicLinks) {
  TempDir t;
  fs::create_directories(t.file("store"));
  EXPECT_EQ(write_target(t.file("plain.h5")), t.file("plain.h5"));
  fs::create_symlink("store/real.h5", t.file("a.h5"));  // relative
  fs::create_symlink(t.file("a.h5"), t.file("b.h5"));   // absolute, to another link
  EXPECT_EQ(fs::path(write_target(t.file("b.h5"))).lexically_normal(), fs::path(t.file("store/real.h5")));
  fs::create_symlink("loop2", t.file("loop1"));
  fs::create_symlink("loop1", t.file("loop2"));
  std::string err;
  try {
    write_target(t.file("loop1"));
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("too many levels of symbolic links"), std::string::npos) << err;
  EXPECT_NE(err.find(t.file("loop1")), std::string::npos) << err;

  {
    TensorFileWriter w(t.file("b.h5"));
    w.attr("x", int64_t{7});
    w.commit();
  }
  EXPECT_TRUE(fs::is_symlink(t.file("b.h5")) && fs::is_symlink(t.file("a.h5")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(t.file("store/real.h5"))));
  EXPECT_EQ(TensorFileReader(t.file("b.h5"), "weights file").attr_int("x"), 7);
  fs::create_symlink("store/trace.json", t.file("trace.json"));
  TraceRecorder().write(t.file("trace.json"));
  EXPECT_TRUE(fs::is_symlink(t.file("trace.json")));
  EXPECT_GT(fs::file_size(t.file("store/trace.json")), 0u);
  EXPECT_EQ(test::temp_files_of(t.file("store/real.h5")), 0);
}

// write_file_atomically: the whole text or nothing. It replaces a file (through a link), returns
// the errno of a failed step with the old file and no temporary file left, and a failed write
// into a dkp cache or a metrics rewrite, which use it, names the cause.
TEST(TempFiles, WriteFileAtomicallyReplacesWholeOrNothing) {
  TempDir t;
  const std::size_t before = live_temp_path_count();
  const auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(write_file_atomically(t.file("a.txt"), "first\n"), 0);
  EXPECT_EQ(slurp(t.file("a.txt")), "first\n");
  std::string big(3 << 20, 'x');  // more than one write() may take
  big.back() = '\n';
  EXPECT_EQ(write_file_atomically(t.file("a.txt"), big), 0);
  EXPECT_EQ(slurp(t.file("a.txt")), big);
  EXPECT_EQ(write_file_atomically(t.file("a.txt"), ""), 0);
  EXPECT_EQ(fs::file_size(t.file("a.txt")), 0u);

  fs::create_symlink("a.txt", t.file("link.txt"));
  EXPECT_EQ(write_file_atomically(t.file("link.txt"), "via link\n"), 0);
  EXPECT_TRUE(fs::is_symlink(t.file("link.txt")));
  EXPECT_EQ(slurp(t.file("a.txt")), "via link\n");

  fs::create_directories(t.file("adir/inside"));
  EXPECT_NE(write_file_atomically(t.file("adir"), "text"), 0) << "a rename over a folder fails";
  EXPECT_TRUE(fs::is_directory(t.file("adir/inside")));
  EXPECT_EQ(write_file_atomically(t.file("missing/b.txt"), "text"), ENOENT) << "folders are not made";
  EXPECT_FALSE(fs::exists(t.file("missing")));
  EXPECT_EQ(live_temp_path_count(), before);
  for (const char* f : {"a.txt", "adir", "missing/b.txt"}) EXPECT_EQ(test::temp_files_of(t.file(f)), 0) << f;

  std::string err;
  try {
    save_dkp_cache(t.file("adir"), DkpCoefficients{}, "cpu", "gcn", 1);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("cannot write the DKP cost-model cache: Is a directory"), std::string::npos) << err;
}

// Forks a child that runs install_temp_file_signal_cleanup(), names a temporary file for `target`
// with temp_path_for and creates it, reports through a pipe and waits; returns its pid.
pid_t child_writing(const std::string& target) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    install_temp_file_signal_cleanup();
    const std::string tmp = temp_path_for(target);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    char c = fd >= 0 ? 'y' : 'n';
    [[maybe_unused]] ssize_t n = ::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  const bool ok = ::read(ready[0], &c, 1) == 1 && c == 'y';
  ::close(ready[0]);
  if (!ok && pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

// SIGINT and SIGTERM (gt-train, gt-data): the file being written is removed, and the process
// still dies of the signal.
TEST(TempFiles, SignalRemovesTheFilesBeingWritten) {
  TempDir t;
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string target = t.file("out-" + std::to_string(sig) + ".h5");
    const pid_t pid = child_writing(target);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(test::temp_files_of(target), 1);
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    EXPECT_EQ(test::temp_files_of(target), 0) << "signal " << sig << " left the temporary file";
  }
}

// With a stop note (gt-train, gt-predict) the handler says on stderr which signal ended the run
// before the process dies of it.
TEST(TempFiles, SignalWritesTheStopNote) {
  TempDir t;
  const std::string log = t.file("stderr.log");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) ::_exit(3);
    install_temp_file_signal_cleanup("gt-test");
    char c = 'y';
    [[maybe_unused]] ssize_t n = ::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "gt-test: stopped by SIGTERM\n");
}

// An ignored signal stays ignored (nohup, background jobs) and a handler of the program's own
// (a graceful stop) is kept.
void own_handler(int) {}
TEST(TempFiles, IgnoredAndHandledSignalsAreLeftAlone) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, own_handler);
    install_temp_file_signal_cleanup();
    struct sigaction a {}, b {}, c {};
    ::sigaction(SIGINT, nullptr, &a);
    ::sigaction(SIGHUP, nullptr, &b);
    ::sigaction(SIGTERM, nullptr, &c);
    const bool ok = a.sa_handler == SIG_IGN && b.sa_handler == own_handler && c.sa_handler != SIG_DFL;
    ::_exit(ok ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// After a SIGKILL nothing runs: the next writer of the path removes the temporary files of
// processes that no longer exist, and never those of a live process or other names.
TEST(TempFiles, NextWriterRemovesTheFilesOfKilledProcesses) {
  TempDir t;
  const std::string target = t.file("trace.json");
  const pid_t pid = child_writing(target);
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  ASSERT_EQ(test::temp_files_of(target), 1) << "the killed writer's temporary file";

  const std::string dead = std::to_string(pid);
  auto touch = [&](const std::string& name) {
    std::FILE* fp = std::fopen(t.file(name).c_str(), "w");
    ASSERT_NE(fp, nullptr) << name;
    std::fclose(fp);
  };
  const std::vector<std::string> kept = {"trace.json.tmp." + std::to_string(::getppid()) + ".3",  // live
                                         "trace.json.tmp.1.0",                                    // init: live
                                         "trace.json.tmp." + std::to_string(::getpid()) + ".900000",  // ours
                                         "trace.json.tmp",
                                         "trace.json.tmp." + dead + ".x",
                                         "trace.json.tmp.0.1",
                                         "other.json.tmp." + dead + ".0"};
  for (const auto& name : kept) touch(name);
  touch("trace.json.tmp." + dead + ".17");
  TraceRecorder().write(target);
  EXPECT_TRUE(fs::exists(target));
  EXPECT_FALSE(fs::exists(t.file("trace.json.tmp." + dead + ".17")));
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(t.file(name))) << name << " was removed";
  EXPECT_EQ(test::temp_files_of(target), 5);  // the kept ones named "trace.json.tmp.*"
  EXPECT_EQ(remove_stale_temp_files(target), 0);
}

}  // namespace
}  // namespace gt
