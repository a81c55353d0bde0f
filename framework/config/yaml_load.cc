#include "framework/config/yaml_load.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

// Counts the nodes of the expanded document as the parser reports them. Sizes saturate at
// kMaxYamlNodes + 1, so that nine levels of ten aliases cannot overflow the count.
class ExpansionCounter : public YAML::EventHandler {
 public:
  explicit ExpansionCounter(const std::string& source) : source_(source) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    leaf(mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = size_.find(anchor);
    if (it == size_.end())
      GT_THROW(where(mark), "a config needs no anchors or aliases: write the values out",
               "YAML alias of a node that contains it (a cycle without end)");
    add(mark, it->second);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    int64_t size;  // expanded nodes so far, this one included
  };

  std::string where(const YAML::Mark& mark) const { return source_ + ":" + std::to_string(mark.line + 1); }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) size_[anchor] = 1;
    add(mark, 1);
  }
  // A list or map: counted as one node now; its parent counts its whole size when it closes.
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    total_ = std::min(total_ + 1, kMaxYamlNodes + 1);
    check(mark);
    open_.push_back({anchor, 1});
  }
  void close() {
    Open o = open_.back();
    open_.pop_back();
    if (o.anchor != YAML::NullAnchor) size_[o.anchor] = o.size;
    if (!open_.empty()) open_.back().size = std::min(open_.back().size + o.size, kMaxYamlNodes + 1);
  }
  // A node of `n` expanded nodes placed here: counted in the document and in its parent.
  void add(const YAML::Mark& mark, int64_t n) {
    total_ = std::min(total_ + n, kMaxYamlNodes + 1);
    if (!open_.empty()) open_.back().size = std::min(open_.back().size + n, kMaxYamlNodes + 1);
    check(mark);
  }
  void check(const YAML::Mark& mark) const {
    if (total_ > kMaxYamlNodes)
      GT_THROW(where(mark), "a config needs no anchors or aliases: write the values out",
               "the YAML document holds more than ", kMaxYamlNodes,
               " values with its aliases expanded (an alias-expansion bomb?)");
  }

  std::string source_;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, int64_t> size_;  // complete anchored nodes, expanded
  int64_t total_ = 0;
};

}  // namespace

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  {
    std::istringstream in(text);
    YAML::Parser parser(in);
    ExpansionCounter counter(source);
    parser.HandleNextDocument(counter);
  }
  return YAML::Load(text);
}

}  // namespace gt
