/// \file
/// The dataflow graph every model compiles to (paper §V-A; ../shared/ARCHITECTURE.md, "DKP").
///
/// Nodes are ops (Dropout, Pull, NeighborApply-based fused aggregations, MatMul, bias and
/// activation, loss, ...; graphtensor/models/ops.h); edges are values, each a tensor whose rows are the
/// sources or destinations of one layer's block, or a fixed count (parameters, constants).
/// A model is built once (models/model.cc) and run per batch:
///   forward   the nodes in the order they were added (a topological order: a node's inputs are
///             values added before it), each value freed after its last consumer unless kept;
///   backward  the nodes in reverse, each turning the gradients of its outputs into gradients of
///             its inputs. A value read by several nodes sums their contributions: the first
///             contributor in backward order stores its gradient, later ones add to it (a GEMM
///             with beta = 1 where the op can, an axpy otherwise). Gradients of parameters go to
///             Param::grad (overwritten each backward; zero when no path reaches them).
/// An input may be read as its first num_dst rows only (Input::dst_rows: destinations are the
/// first sources of a block), a view in forward, an accumulation into those rows in backward.
/// An op may overwrite one input in place (Op::in_place_input) when that value has no other
/// reader, is not kept, and its producer neither saves its outputs nor may alias its input.
///
/// Passes rewrite the graph after it is built: rewrite_placement() (graphtensor/models/dkp.h) replaces
/// every linear Pull -> MatMul pair with one Cost-DKP node that picks the order per batch.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>

namespace gt {

class DkpPlanner;  // graphtensor/models/dkp.h

struct GT_API Param {
  std::string name;
  Tensor value, grad;
};

/// Rows of a value: the sources or destinations of layer `n`'s block, or `n` rows.
struct GT_API Rows {
  enum Kind : uint8_t { kSrc, kDst, kFixed };
  Kind kind = kFixed;
  int64_t n = 0;
  static Rows src(int64_t layer) { return {kSrc, layer}; }
  static Rows dst(int64_t layer) { return {kDst, layer}; }
  static Rows fixed(int64_t rows) { return {kFixed, rows}; }
};

/// One input of a node: a value, whole or only its first num_dst rows (of the node's block).
struct GT_API Input {
  int value = -1;
  bool dst_rows = false;
};

/// What an op sees while it runs: the block of its layer, and whether it may write its
/// in_place_input() (forward only).
struct GT_API OpRun {
  const Context& ctx;
  const Block& block;
  bool training = false;
  uint64_t step = 0;
  bool in_place = false;
};

/// Where the gradient of one input goes.
class GT_API GradSlot {
 public:
  GradSlot() = default;  ///< no gradient wanted
  GradSlot(Tensor* dest, bool accumulate, Shape shape, Device device)
      : dest_(dest), accumulate_(accumulate), shape_(std::move(shape)), device_(device) {}
  /// An input read as the first `rows` rows of a value (Input::dst_rows): the slot adds into those
  /// rows of the value's gradient `*whole` (of shape whole_shape), which it creates, zero on
  /// stream s, only if no gradient of the value exists when the op first reaches for it. So an op
  /// that reads a value whole and as its first rows can give() the whole gradient first (stored,
  /// not added) and then add the rows' part.
  static GradSlot rows_of(Tensor* whole, Shape whole_shape, int64_t rows, Device device, Stream s);
  bool wanted() const { return dest_ != nullptr; }
  /// true: another reader's gradient is already there, add to it.
  bool accumulating() const { return accumulate_; }
  const Shape& shape() const { return shape_; }
  /// Not accumulating: a tensor of the input's shape to overwrite (new, or the parameter's grad).
  /// Accumulating: the existing gradient, for ops that add in place (a GEMM with beta = 1).
  Tensor& target();
  /// Stores g as the gradient (sharing its storage; the op must not write g afterwards), or adds
  /// it to the existing gradient, scaled by alpha (alpha must be 1 when not accumulating).
  void give(const Context& ctx, const Tensor& g, float alpha = 1.0f);

 private:
  Tensor* dest_ = nullptr;
  bool accumulate_ = false;
  Shape shape_;
  Device device_;
  /// rows_of() slots: dest_ is the whole value's gradient, view_ its first rows_ rows.
  bool rows_view_ = false;
  Shape whole_shape_;
  int64_t rows_ = 0;
  Stream stream_ = nullptr;
  Tensor view_;
};

class GT_API Op {
 public:
  virtual ~Op() = default;
  /// The op's kind, which passes match on ("Pull", "MatMul", ...), and its --print-graph label.
  virtual const char* kind() const = 0;
  virtual std::string label() const = 0;
  /// in: one tensor per input (dst_rows inputs already sliced); out: one per output, the op
  /// allocates them (or reuses in[in_place_input()] when run.in_place). Saves what backward needs.
  virtual void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) = 0;
  /// dout: the gradient of each output; din: one slot per input (see GradSlot).
  virtual void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) = 0;
  /// Drops what forward saved (after backward, or when a forward is not followed by one).
  virtual void release() {}
  virtual int in_place_input() const { return -1; }
  /// Backward reads the outputs: no later op may overwrite them in place.
  virtual bool saves_outputs() const { return false; }
  /// An output may share storage with an input (a pass-through): not overwritable either.
  virtual bool may_alias_input() const { return false; }
  /// --print-graph: lines printed before the node (a placement node's order and predictions).
  virtual std::string plan(const Block& block) const {
    (void)block;
    return "";
  }
};

class GT_API Graph {
 public:
  struct OutSpec {
    std::string name;
    Rows rows;
    int64_t cols = 0;
  };

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- building (then finalize()) ----
  int add_input(std::string name, Rows rows, int64_t cols, bool requires_grad = false);
  /// The graph owns the parameter; layer keys params_of_layer() and the backward hook.
  int add_param(Param p, int64_t layer);
  int add_constant(std::string name, Tensor t);
  std::vector<int> add(std::unique_ptr<Op> op, std::vector<Input> inputs, std::vector<OutSpec> outputs,
                       int64_t layer);
  int add1(std::unique_ptr<Op> op, std::vector<Input> inputs, OutSpec output, int64_t layer) {
    return add(std::move(op), std::move(inputs), {std::move(output)}, layer)[0];
  }
  /// Kept after forward (not freed after the last reader): the outputs, values a caller reads.
  void keep(int value);
  /// A line --print-graph prints for a layer without placement nodes (why its order is fixed).
  void set_layer_note(int64_t layer, std::string note);
  /// Counts readers, marks which values need gradients. Call after building and after passes.
  void finalize();

  // ---- passes ----
  /// DKP (graphtensor/models/dkp.h): each Pull(sum | mean, no edge values) -> [AddDstRows of the same
  /// input] -> MatMul(no addend) chain whose intermediate values have no other reader becomes one
  /// Cost-DKP node sharing `planner`. Returns how many were rewritten. Calls finalize().
  int rewrite_placement(const std::shared_ptr<DkpPlanner>& planner);

  // ---- running ----
  /// inputs: (input value, tensor) for every add_input value.
  void forward(const Context& ctx, const std::vector<Block>& blocks, const std::vector<std::pair<int, Tensor>>& inputs,
               bool training, uint64_t step);
  /// Layer-wise inference (graphtensor/train/layerwise.h): runs only layer `layer`'s nodes, in eval
  /// mode, on `block`, with value `input` (the layer's input, rows = block.num_src) given as x, and
  /// returns value `output` (rows = block.num_dst). Every other value the layer's nodes read must
  /// be a parameter or a constant (a layer reads nothing of the layers before it but its input).
  /// x is never overwritten in place. Leaves no forward behind: backward() refuses until forward().
  /// extra: (input value, tensor) for other add_input values the layer reads (rows = block.num_src),
  /// such as a symmetric GCN's node scales.
  Tensor forward_layer(const Context& ctx, int64_t layer, const Block& block, int input, const Tensor& x, int output,
                       const std::vector<std::pair<int, Tensor>>& extra = {});
  /// A value after forward (kept values only; others are freed once read).
  const Tensor& value(int v) const;
  /// seeds: (value, gradient) for the values the loss reads. layer_done(l) (optional) is called,
  /// output side first, as soon as layer l's parameter gradients are final.
  void backward(const Context& ctx, const std::vector<Block>& blocks, const std::vector<std::pair<int, Tensor>>& seeds,
                const std::function<void(int64_t)>& layer_done = nullptr);
  /// The gradient of an input added with requires_grad, after backward.
  const Tensor& input_grad(int v) const;

  // ---- inspection ----
  std::vector<Param*> params();
  std::vector<Param*> params_of_layer(int64_t layer);
  int64_t num_layers() const { return num_layers_; }
  std::size_t num_nodes() const { return nodes_.size(); }
  /// The op of node i (in forward order), for tests and tools that inspect what a pass built.
  const Op& op(std::size_t i) const;
  /// Node kinds in order (tests).
  std::vector<std::string> node_kinds() const;
  /// Per layer: its block, then one line per node (output, op, inputs, output shape), with the
  /// placement's order lines.
  std::string describe(const std::vector<Block>& blocks) const;

 private:
  enum class Kind { kInput, kParam, kConstant, kNode };
  struct Value {
    std::string name;
    Kind kind = Kind::kNode;
    Rows rows;
    int64_t cols = 0;
    int producer = -1;  ///< node index (kNode)
    int param = -1;     ///< index into params_ (kParam)
    Tensor constant;    ///< kConstant
    bool requires_grad = false, kept = false;
    int readers = 0;
  };
  struct Node {
    std::unique_ptr<Op> op;
    std::vector<Input> inputs;
    std::vector<int> outputs;
    int64_t layer = 0;
    bool removed = false;
  };
  int new_value(Value v);
  int64_t rows_of(const Rows& r, const std::vector<Block>& blocks) const;
  const Block& block_of(int64_t layer, const std::vector<Block>& blocks) const;
  bool overwritable(int value) const;
  std::string value_shape(const Value& v, const std::vector<Block>& blocks) const;

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::deque<Param> params_;
  std::vector<int64_t> param_layer_;
  std::vector<std::string> layer_notes_;
  int64_t num_layers_ = 0;
  bool finalized_ = false;

  /// Per-run state.
  std::vector<Tensor> live_, grads_;
  std::vector<int> uses_left_;
  std::vector<char> param_written_;
  bool have_forward_ = false;
  bool training_ = false;
  uint64_t step_ = 0;
};

}  // namespace gt
