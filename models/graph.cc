#include <graphtensor/models/graph.h>

#include <algorithm>

#include <graphtensor/core/error.h>
#include "kernels/elementwise.h"
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/ops.h>

namespace gt {

// ---- GradSlot ----
GradSlot GradSlot::rows_of(Tensor* whole, Shape whole_shape, int64_t rows, Device device, Stream s) {
  GradSlot g(whole, true, {rows, whole_shape.size() > 1 ? whole_shape[1] : 1}, device);
  g.rows_view_ = true;
  g.whole_shape_ = std::move(whole_shape);
  g.rows_ = rows;
  g.stream_ = s;
  return g;
}

Tensor& GradSlot::target() {
  GT_CHECK_ARG(dest_ != nullptr, "GradSlot: no gradient wanted");
  if (rows_view_) {
    if (!dest_->defined()) *dest_ = Tensor::zeros(whole_shape_, DType::kFloat32, device_, stream_);
    view_ = dest_->rows(0, rows_);
    return view_;
  }
  if (!dest_->defined()) *dest_ = Tensor::empty(shape_, DType::kFloat32, device_);
  return *dest_;
}

void GradSlot::give(const Context& ctx, const Tensor& g, float alpha) {
  GT_CHECK_ARG(dest_ != nullptr, "GradSlot: no gradient wanted");
  GT_CHECK_ARG(g.shape() == shape_, "GradSlot: gradient of shape ", shape_str(g.shape()), " for a value of shape ",
           shape_str(shape_));
  if (accumulate_) {
    axpy(alpha, g, target(), ctx.stream());
  } else if (dest_->defined()) {  // a parameter's gradient: overwrite its storage
    dest_->copy_from(g, ctx.stream());
    if (alpha != 1.0f) scale(alpha, *dest_, ctx.stream());
  } else if (alpha != 1.0f) {
    *dest_ = g.clone(ctx.stream());
    scale(alpha, *dest_, ctx.stream());
  } else {
    *dest_ = g;
  }
}

// ---- building ----
int Graph::new_value(Value v) {
  finalized_ = false;
  values_.push_back(std::move(v));
  return static_cast<int>(values_.size()) - 1;
}

int Graph::add_input(std::string name, Rows rows, int64_t cols, bool requires_grad) {
  Value v;
  v.name = std::move(name);
  v.kind = Kind::kInput;
  v.rows = rows;
  v.cols = cols;
  v.requires_grad = requires_grad;
  v.kept = requires_grad;  // otherwise dropped after its last reader, like any value
  return new_value(std::move(v));
}

int Graph::add_param(Param p, int64_t layer) {
  GT_CHECK_ARG(p.value.dim() == 2 || p.value.dim() == 1, "parameter ", p.name, " must be 1- or 2-dimensional");
  Value v;
  v.name = p.name;
  v.kind = Kind::kParam;
  v.rows = Rows::fixed(p.value.size(0));
  v.cols = p.value.dim() == 2 ? p.value.size(1) : 1;
  v.param = static_cast<int>(params_.size());
  v.kept = true;
  params_.push_back(std::move(p));
  param_layer_.push_back(layer);
  num_layers_ = std::max(num_layers_, layer + 1);
  return new_value(std::move(v));
}

int Graph::add_constant(std::string name, Tensor t) {
  Value v;
  v.name = std::move(name);
  v.kind = Kind::kConstant;
  v.rows = Rows::fixed(t.size(0));
  v.cols = t.dim() == 2 ? t.size(1) : 1;
  v.constant = std::move(t);
  v.kept = true;
  return new_value(std::move(v));
}

std::vector<int> Graph::add(std::unique_ptr<Op> op, std::vector<Input> inputs, std::vector<OutSpec> outputs,
                            int64_t layer) {
  GT_CHECK_ARG(op != nullptr && !outputs.empty(), "Graph::add: an op with at least one output");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    GT_CHECK_ARG(inputs[i].value >= 0 && inputs[i].value < static_cast<int>(values_.size()), "Graph::add: ", op->kind(),
             " reads value ", inputs[i].value, " which does not exist (yet)");
    for (std::size_t j = 0; j < i; ++j)
      GT_CHECK_ARG(inputs[j].value != inputs[i].value, "Graph::add: ", op->kind(), " reads value ", inputs[i].value,
               " twice");
  }
  Node n;
  n.layer = layer;
  n.inputs = std::move(inputs);
  const int node = static_cast<int>(nodes_.size());
  for (OutSpec& o : outputs) {
    Value v;
    v.name = std::move(o.name);
    v.rows = o.rows;
    v.cols = o.cols;
    v.producer = node;
    n.outputs.push_back(new_value(std::move(v)));
  }
  n.op = std::move(op);
  nodes_.push_back(std::move(n));
  num_layers_ = std::max(num_layers_, layer + 1);
  return nodes_.back().outputs;
}

const Op& Graph::op(std::size_t i) const {
  GT_CHECK_ARG(i < nodes_.size(), "Graph::op: no node ", i, " (", nodes_.size(), " nodes)");
  return *nodes_[i].op;
}

void Graph::keep(int value) {
  GT_CHECK_ARG(value >= 0 && value < static_cast<int>(values_.size()), "Graph::keep: no value ", value);
  values_[value].kept = true;
  finalized_ = false;
}

void Graph::set_layer_note(int64_t layer, std::string note) {
  if (static_cast<int64_t>(layer_notes_.size()) <= layer) layer_notes_.resize(static_cast<std::size_t>(layer) + 1);
  layer_notes_[static_cast<std::size_t>(layer)] = std::move(note);
}

void Graph::finalize() {
  for (Value& v : values_) {
    v.readers = 0;
    if (v.kind == Kind::kNode) v.requires_grad = false;
    if (v.kind == Kind::kParam) v.requires_grad = true;
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    bool grad = false;
    for (const Input& in : n.inputs) {
      ++values_[in.value].readers;
      grad = grad || values_[in.value].requires_grad;
      GT_CHECK_ARG(values_[in.value].kind != Kind::kNode || values_[in.value].producer < static_cast<int>(i),
               "Graph: node ", i, " (", n.op->kind(), ") reads a value produced later");
    }
    for (int o : n.outputs) {
      values_[o].requires_grad = grad;
      values_[o].producer = static_cast<int>(i);
    }
  }
  finalized_ = true;
}

// ---- passes ----
int Graph::rewrite_placement(const std::shared_ptr<DkpPlanner>& planner) {
  if (!finalized_) finalize();
  std::vector<char> remove(nodes_.size(), 0);
  int rewritten = 0;
  // A value read only by the node `reader` (and not kept) can disappear into a fused node.
  auto private_to = [&](int value, int reader) {
    const Value& v = values_[value];
    if (v.kept || v.readers != 1 || v.kind != Kind::kNode) return false;
    for (const Input& in : nodes_[static_cast<std::size_t>(reader)].inputs)
      if (in.value == value) return !in.dst_rows;
    return false;
  };
  auto node_of = [&](int value) -> const Node& { return nodes_[static_cast<std::size_t>(values_[value].producer)]; };
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto* mm = dynamic_cast<MatMulOp*>(nodes_[i].op.get());
    if (!mm || nodes_[i].inputs[0].dst_rows) continue;
    const int a = nodes_[i].inputs[0].value;
    if (values_[a].kind != Kind::kNode || !private_to(a, static_cast<int>(i))) continue;
    int producer = values_[a].producer;
    float self = 0.0f;
    int add_node = -1;
    if (auto* add = dynamic_cast<AddDstRowsOp*>(node_of(a).op.get())) {
      const Node& an = node_of(a);
      const int pulled = an.inputs[0].value;
      if (an.inputs[0].dst_rows || values_[pulled].kind != Kind::kNode || !private_to(pulled, producer)) continue;
      add_node = producer;
      self = add->alpha();
      producer = values_[pulled].producer;
      // The self term must read the same input as the Pull.
      if (node_of(pulled).inputs.size() != 1 || node_of(pulled).inputs[0].value != an.inputs[1].value) continue;
    }
    const Node& pn = nodes_[static_cast<std::size_t>(producer)];
    auto* pull = dynamic_cast<PullOp*>(pn.op.get());
    // Only linear aggregations: sum and mean of the source rows (max would change results).
    if (!pull || pull->reduce() == Reduce::kMax || pn.inputs.size() != 1 || pn.inputs[0].dst_rows) continue;
    const Input x = pn.inputs[0];
    std::vector<Input> inputs = {x, nodes_[i].inputs[1]};
    if (mm->has_addend()) inputs.push_back(nodes_[i].inputs[2]);
    // GraphSAGE: the addend is a root product x_r W_r read only here; absorbing it lets the node
    // run that product beside the Pull (CostDkpOp, "root").
    int root_node = -1;
    if (mm->has_addend()) {
      const int c = nodes_[i].inputs[2].value;
      if (values_[c].kind == Kind::kNode && private_to(c, static_cast<int>(i))) {
        const int rp = values_[c].producer;
        auto* root = dynamic_cast<MatMulOp*>(node_of(c).op.get());
        if (root && !root->has_addend() && !root->has_grad_mask() && root->out() == mm->out() &&
            node_of(c).outputs.size() == 1 && !remove[static_cast<std::size_t>(rp)])
          root_node = rp;
      }
    }
    if (root_node >= 0) {
      const Node& rn = nodes_[static_cast<std::size_t>(root_node)];
      inputs.pop_back();
      inputs.push_back(rn.inputs[0]);
      inputs.push_back(rn.inputs[1]);
      const int64_t root_in = dynamic_cast<MatMulOp*>(rn.op.get())->in();
      nodes_[i].op = std::make_unique<CostDkpOp>(planner, pull->reduce(), self, mm->in(), mm->out(), false,
                                                 values_[x.value].requires_grad, true, root_in);
      remove[static_cast<std::size_t>(root_node)] = 1;
    } else {
      nodes_[i].op = std::make_unique<CostDkpOp>(planner, pull->reduce(), self, mm->in(), mm->out(), mm->has_addend(),
                                                 values_[x.value].requires_grad);
    }
    nodes_[i].inputs = std::move(inputs);
    remove[static_cast<std::size_t>(producer)] = 1;
    if (add_node >= 0) remove[static_cast<std::size_t>(add_node)] = 1;
    ++rewritten;
  }
  if (rewritten > 0) {
    std::vector<Node> kept;
    kept.reserve(nodes_.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (remove[i]) {
        for (int o : nodes_[i].outputs) values_[o].producer = -1;  // orphaned: no reader is left
        continue;
      }
      kept.push_back(std::move(nodes_[i]));
    }
    nodes_ = std::move(kept);
  }
  finalize();
  return rewritten;
}

// ---- running ----
const Block& Graph::block_of(int64_t layer, const std::vector<Block>& blocks) const {
  return blocks[static_cast<std::size_t>(layer)];
}

int64_t Graph::rows_of(const Rows& r, const std::vector<Block>& blocks) const {
  switch (r.kind) {
    case Rows::kSrc: return block_of(r.n, blocks).num_src;
    case Rows::kDst: return block_of(r.n, blocks).num_dst;
    case Rows::kFixed: return r.n;
  }
  return 0;
}

bool Graph::overwritable(int value) const {
  const Value& v = values_[value];
  if (v.kind != Kind::kNode || v.kept || v.readers != 1 || v.producer < 0) return false;
  const Op& p = *nodes_[static_cast<std::size_t>(v.producer)].op;
  return !p.saves_outputs() && !p.may_alias_input();
}

void Graph::forward(const Context& ctx, const std::vector<Block>& blocks,
                    const std::vector<std::pair<int, Tensor>>& inputs, bool training, uint64_t step) {
  if (!finalized_) finalize();
  GT_CHECK_ARG(static_cast<int64_t>(blocks.size()) == num_layers_, "model has ", num_layers_,
               " layers but the batch has ", blocks.size(), " blocks");
  for (Node& n : nodes_) n.op->release();
  have_forward_ = false;
  live_.assign(values_.size(), Tensor());
  grads_.assign(values_.size(), Tensor());
  uses_left_.assign(values_.size(), 0);
  for (std::size_t v = 0; v < values_.size(); ++v) {
    uses_left_[v] = values_[v].readers;
    if (values_[v].kind == Kind::kParam) live_[v] = params_[static_cast<std::size_t>(values_[v].param)].value;
    if (values_[v].kind == Kind::kConstant) live_[v] = values_[v].constant;
  }
  for (const auto& [v, t] : inputs) {
    GT_CHECK_ARG(v >= 0 && v < static_cast<int>(values_.size()) && values_[v].kind == Kind::kInput,
             "Graph::forward: value ", v, " is not an input");
    if (!t.defined()) continue;  // optional (labels at inference)
    const int64_t rows = rows_of(values_[v].rows, blocks);
    GT_CHECK_ARG(t.dim() >= 1 && t.size(0) == rows, values_[v].name, " has ", t.dim() ? t.size(0) : 0,
                 " rows, its block has ", rows);
    if (values_[v].cols > 0)
      GT_CHECK_ARG(t.dim() == 2 && t.size(1) == values_[v].cols, values_[v].name, " has shape ",
                   shape_str(t.shape()), ", the model expects ", values_[v].cols, " columns");
    live_[v] = t;
  }
  training_ = training;
  step_ = step;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    const Block& b = block_of(n.layer, blocks);
    std::vector<Tensor> in(n.inputs.size());
    bool skip = false;
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const Input& x = n.inputs[j];
      const Tensor& t = live_[x.value];
      if (!t.defined()) {
        // Only an input the caller left out (labels) may be missing: its readers are skipped.
        GT_CHECK_ARG(values_[x.value].kind == Kind::kInput, "Graph: ", n.op->kind(), " reads ", values_[x.value].name,
                 " which was not computed");
        skip = true;
        continue;
      }
      in[j] = x.dst_rows ? t.rows(0, b.num_dst) : t;
    }
    std::vector<Tensor> out(n.outputs.size());
    if (!skip) {
      const int ip = n.op->in_place_input();
      OpRun run{ctx, b, training, step, ip >= 0 && !n.inputs[static_cast<std::size_t>(ip)].dst_rows &&
                                            overwritable(n.inputs[static_cast<std::size_t>(ip)].value)};
      n.op->forward(run, in, out);
      for (std::size_t k = 0; k < out.size(); ++k) {
        const Value& v = values_[n.outputs[k]];
        const int64_t rows = rows_of(v.rows, blocks);
        GT_CHECK_ARG(out[k].defined() && out[k].dim() == 2 && out[k].size(0) == rows && out[k].size(1) == v.cols,
                 "Graph: ", n.op->label(), " produced ", out[k].defined() ? shape_str(out[k].shape()) : "nothing",
                 " for ", v.name, ", expected [", rows, ", ", v.cols, "]");
        live_[n.outputs[k]] = out[k];
      }
    }
    in.clear();
    for (const Input& x : n.inputs)
      if (--uses_left_[x.value] == 0 && !values_[x.value].kept) live_[x.value] = Tensor();
  }
  // Saved tensors stay until backward or the next forward: an evaluation-mode forward may be
  // differentiated too (the gradient of the function without dropout).
  have_forward_ = true;
}

Tensor Graph::forward_layer(const Context& ctx, int64_t layer, const Block& block, int input, const Tensor& x,
                            int output, const std::vector<std::pair<int, Tensor>>& extra) {
  if (!finalized_) finalize();
  GT_CHECK_ARG(layer >= 0 && layer < num_layers_, "Graph::forward_layer: layer ", layer, " of ", num_layers_);
  GT_CHECK_ARG(input >= 0 && input < static_cast<int>(values_.size()) && output >= 0 &&
                   output < static_cast<int>(values_.size()),
               "Graph::forward_layer: bad input or output value");
  GT_CHECK_ARG(x.dim() == 2 && x.size(0) == block.num_src && x.size(1) == values_[input].cols, "Graph::forward_layer: ",
               values_[input].name, " is ", shape_str(x.shape()), ", layer ", layer, " reads [", block.num_src, ", ",
               values_[input].cols, "]");
  for (Node& n : nodes_) n.op->release();
  have_forward_ = false;
  // Every layer's rows are this block's: only layer `layer`'s values are made.
  const std::vector<Block> blocks(static_cast<std::size_t>(num_layers_), block);
  live_.assign(values_.size(), Tensor());
  grads_.assign(values_.size(), Tensor());
  uses_left_.assign(values_.size(), 0);
  for (std::size_t v = 0; v < values_.size(); ++v) {
    uses_left_[v] = values_[v].readers;
    if (values_[v].kind == Kind::kParam) live_[v] = params_[static_cast<std::size_t>(values_[v].param)].value;
    if (values_[v].kind == Kind::kConstant) live_[v] = values_[v].constant;
  }
  live_[input] = x;
  for (const auto& [v, t] : extra) {
    GT_CHECK_ARG(v >= 0 && v < static_cast<int>(values_.size()) && values_[v].kind == Kind::kInput && v != input,
                 "Graph::forward_layer: extra value ", v, " is not another input of the graph");
    live_[v] = t;
  }
  training_ = false;
  step_ = 0;
  for (Node& n : nodes_) {
    if (n.layer != layer) continue;
    std::vector<Tensor> in(n.inputs.size());
    bool skip = false;
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const Input& i = n.inputs[j];
      const Tensor& t = live_[i.value];
      if (!t.defined()) {
        GT_CHECK_ARG(values_[i.value].kind == Kind::kInput, "Graph::forward_layer: ", n.op->kind(), " of layer ", layer,
                     " reads ", values_[i.value].name, ", which is neither its input nor a parameter");
        skip = true;  // the loss node without labels
        continue;
      }
      in[j] = i.dst_rows ? t.rows(0, block.num_dst) : t;
    }
    if (skip) continue;
    std::vector<Tensor> out(n.outputs.size());
    const int ip = n.op->in_place_input();
    const bool in_place = ip >= 0 && !n.inputs[static_cast<std::size_t>(ip)].dst_rows &&
                          n.inputs[static_cast<std::size_t>(ip)].value != input &&
                          overwritable(n.inputs[static_cast<std::size_t>(ip)].value);
    OpRun run{ctx, block, false, 0, in_place};
    n.op->forward(run, in, out);
    for (std::size_t k = 0; k < out.size(); ++k) {
      const Value& v = values_[n.outputs[k]];
      const int64_t rows = rows_of(v.rows, blocks);
      GT_CHECK_ARG(out[k].defined() && out[k].dim() == 2 && out[k].size(0) == rows && out[k].size(1) == v.cols,
                   "Graph: ", n.op->label(), " produced ", out[k].defined() ? shape_str(out[k].shape()) : "nothing",
                   " for ", v.name, ", expected [", rows, ", ", v.cols, "]");
      live_[n.outputs[k]] = out[k];
    }
    in.clear();
    for (const Input& i : n.inputs)
      if (--uses_left_[i.value] == 0 && !values_[i.value].kept && i.value != output) live_[i.value] = Tensor();
  }
  for (Node& n : nodes_) n.op->release();  // nothing to differentiate
  GT_CHECK_ARG(live_[output].defined(), "Graph::forward_layer: layer ", layer, " did not compute ",
               values_[output].name);
  Tensor y = live_[output];
  live_.assign(values_.size(), Tensor());
  return y;
}

const Tensor& Graph::value(int v) const {
  GT_CHECK_ARG(v >= 0 && v < static_cast<int>(live_.size()), "Graph::value: no value ", v, " (run forward first)");
  return live_[v];
}

void Graph::backward(const Context& ctx, const std::vector<Block>& blocks,
                     const std::vector<std::pair<int, Tensor>>& seeds, const std::function<void(int64_t)>& layer_done) {
  GT_CHECK_ARG(have_forward_, "Graph::backward: no forward to differentiate (one backward per forward)");
  have_forward_ = false;
  for (const auto& [v, g] : seeds) {
    GT_CHECK_ARG(v >= 0 && v < static_cast<int>(values_.size()), "Graph::backward: no value ", v);
    grads_[v] = g;
  }
  param_written_.assign(params_.size(), 0);
  auto finish_layer = [&](int64_t l) {
    for (std::size_t p = 0; p < params_.size(); ++p)
      if (param_layer_[p] == l && !param_written_[p]) {  // no path from the loss: zero, not stale
        params_[p].grad.fill_bytes(0, ctx.stream());
        param_written_[p] = 1;
      }
    if (layer_done) layer_done(l);
  };
  int64_t layer = num_layers_ - 1;
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    Node& n = nodes_[i];
    while (layer > n.layer) finish_layer(layer--);
    const Block& b = block_of(n.layer, blocks);
    bool any = false;
    for (int o : n.outputs) any = any || grads_[o].defined();
    if (!any) {
      n.op->release();
      continue;
    }
    std::vector<Tensor> dout(n.outputs.size());
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      dout[k] = grads_[o].defined()
                    ? grads_[o]
                    : Tensor::zeros({rows_of(values_[o].rows, blocks), values_[o].cols}, DType::kFloat32, ctx.device(),
                                    ctx.stream());
    }
    std::vector<GradSlot> din(n.inputs.size());
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const Input& x = n.inputs[j];
      Value& v = values_[x.value];
      if (!v.requires_grad) continue;
      if (v.kind == Kind::kParam) {
        Param& p = params_[static_cast<std::size_t>(v.param)];
        din[j] = GradSlot(&p.grad, param_written_[static_cast<std::size_t>(v.param)] != 0, p.grad.shape(),
                          p.grad.device());
        param_written_[static_cast<std::size_t>(v.param)] = 1;
        continue;
      }
      const Shape full = {rows_of(v.rows, blocks), v.cols};
      if (x.dst_rows) {
        din[j] = GradSlot::rows_of(&grads_[x.value], full, b.num_dst, ctx.device(), ctx.stream());
      } else {
        din[j] = GradSlot(&grads_[x.value], grads_[x.value].defined(), full, ctx.device());
      }
    }
    OpRun run{ctx, b, training_, step_, false};
    n.op->backward(run, dout, din);
    for (int o : n.outputs) grads_[o] = Tensor();
    n.op->release();
  }
  while (layer >= 0) finish_layer(layer--);
  // Only the gradients of requires_grad inputs stay.
  for (std::size_t v = 0; v < values_.size(); ++v)
    if (values_[v].kind != Kind::kInput) grads_[v] = Tensor();
}

const Tensor& Graph::input_grad(int v) const {
  GT_CHECK_ARG(v >= 0 && v < static_cast<int>(grads_.size()) && values_[v].kind == Kind::kInput,
           "Graph::input_grad: value ", v, " is not an input (or backward has not run)");
  return grads_[v];
}

// ---- inspection ----
std::vector<Param*> Graph::params() {
  std::vector<Param*> out;
  for (Param& p : params_) out.push_back(&p);
  return out;
}

std::vector<Param*> Graph::params_of_layer(int64_t layer) {
  std::vector<Param*> out;
  for (std::size_t p = 0; p < params_.size(); ++p)
    if (param_layer_[p] == layer) out.push_back(&params_[p]);
  return out;
}

std::vector<std::string> Graph::node_kinds() const {
  std::vector<std::string> out;
  for (const Node& n : nodes_) out.emplace_back(n.op->kind());
  return out;
}

std::string Graph::value_shape(const Value& v, const std::vector<Block>& blocks) const {
  std::string s = "[";  // appended piece by piece: g++ 12 warns (-Wrestrict) on const char* + std::string&&
  s += std::to_string(rows_of(v.rows, blocks));
  s += " x ";
  s += std::to_string(v.cols);
  return s += "]";
}

std::string Graph::describe(const std::vector<Block>& blocks) const {
  std::string out;
  auto name = [&](int v) {
    return values_[v].kind == Kind::kNode ? std::string("%").append(std::to_string(v)) : values_[v].name;
  };
  for (int64_t l = 0; l < num_layers_ && l < static_cast<int64_t>(blocks.size()); ++l) {
    const Block& b = block_of(l, blocks);
    out += "layer " + std::to_string(l) + ": block " + std::to_string(b.num_src) + " sources -> " +
           std::to_string(b.num_dst) + " destinations, " + std::to_string(b.nnz()) + " edges\n";
    bool planned = false;
    for (const Node& n : nodes_)
      if (n.layer == l && !n.op->plan(b).empty()) planned = true;
    if (!planned && static_cast<std::size_t>(l) < layer_notes_.size() && !layer_notes_[l].empty())
      out += "  order " + layer_notes_[static_cast<std::size_t>(l)] + "\n";
    for (const Node& n : nodes_) {
      if (n.layer != l) continue;
      out += n.op->plan(b);
      std::string lhs;
      for (int o : n.outputs) lhs.append(lhs.empty() ? "" : ", ").append(name(o));
      std::string args;
      for (const Input& x : n.inputs)
        args.append(args.empty() ? "" : ", ").append(name(x.value)).append(x.dst_rows ? "[dst]" : "");
      std::string line = "  ";
      line.append(lhs).append(" = ").append(n.op->label()).append(" (").append(args).append(")");
      std::string shapes;
      for (int o : n.outputs) shapes.append(shapes.empty() ? "" : " ").append(value_shape(values_[o], blocks));
      line += std::string(line.size() < 76 ? 76 - line.size() : 1, ' ') + shapes + "\n";
      out += line;
    }
  }
  return out;
}

}  // namespace gt
