// gt-serve's request bodies and answers (examples/service/gt_serve.cc serves them): the readers of
// the JSON bodies of /v1/predict and /v1/embed (NodesReader, streaming), /v1/recommend and
// /v1/score (read_recommend, read_pairs: "" or the one-line reason for a 400, too_many for a 413),
// the text of the answers, the status of a refused request and the memory bound of an answer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <graphtensor/serve/inference.h>

namespace gt_serve {

using json = nlohmann::json;
// Floats written as the shortest text that reads back to the same float32 ("0.1", not the
// 17-digit double "0.10000000149011612").
using fjson = nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t, std::uint64_t, float>;

// Reads {"nodes": [id, ...]} with nlohmann-json's SAX interface, straight into a vector of ids:
// no document tree (a 1 MiB body of small ids would be ~8 MB as a tree), and the id count is
// checked as the ids arrive, so a request over --max-request-ids stops being read at the limit.
class NodesReader : public nlohmann::json_sax<json> {
 public:
  explicit NodesReader(int64_t max_ids) : max_ids_(max_ids) {}
  std::vector<int64_t> ids;
  std::string error;       // set when the body is refused
  bool too_many = false;   // refused for its size (413)
  bool saw_nodes = false;

  bool null() override { return value("null"); }
  bool boolean(bool) override { return value("a boolean"); }
  bool number_integer(number_integer_t v) override { return id(v); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<number_unsigned_t>(INT64_MAX)) return fail(at() + ": " + std::to_string(v) + " is out of range");
    return id(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t& s) override { return value("'" + cut(s) + "' (not an integer)"); }
  bool string(string_t& s) override { return value("the string \"" + cut(s) + "\""); }
  bool binary(binary_t&) override { return value("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ != 0) return value("an object");
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (k != "nodes") return fail("unknown key \"" + cut(k) + "\" (the body is {\"nodes\": [id, ...]})");
    if (saw_nodes) return fail("key \"nodes\" is given twice");
    saw_nodes = true;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ != 1) return value("an array");
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    if (error.empty()) {
      std::string what = e.what();
      const std::size_t colon = what.rfind(": ");  // "[json.exception.parse_error.101] parse error at ...: why"
      error = "the body is not valid JSON (byte " + std::to_string(pos) + "): " +
              (colon == std::string::npos ? what : what.substr(colon + 2));
    }
    return false;
  }

 private:
  std::string at() const { return "\"nodes\"[" + std::to_string(ids.size()) + "]"; }
  static std::string cut(const std::string& s) {
    std::string out = s.substr(0, 64);
    for (char& c : out)
      if (c < 0x20 || c > 0x7e) c = '?';
    return s.size() > 64 ? out + "..." : out;
  }
  bool fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  // A value where a node id or the body's object belongs.
  bool value(const std::string& what) {
    if (depth_ == 2) return fail(at() + " is " + what + ", not a node id");
    if (depth_ == 1) return fail("\"nodes\" is " + what + ", not an array of node ids");
    return fail("the body is " + what + ", not {\"nodes\": [id, ...]}");
  }
  bool id(int64_t v) {
    if (depth_ != 2) return value("a number");
    if (static_cast<int64_t>(ids.size()) >= max_ids_) {
      too_many = true;
      return fail("more than the server's --max-request-ids " + std::to_string(max_ids_) +
                  " node ids in one request (split the request)");
    }
    ids.push_back(v);
    return true;
  }
  int64_t max_ids_;
  int depth_ = 0;
};

// The bodies of /v1/recommend and /v1/score, read as a JSON tree (a body is at most
// --max-request-bytes; its ids are counted against --max-request-ids before anything is queued).
// Each reader returns "" or the one-line reason for a 400 (too_many: a 413).
struct RecommendBody {
  std::vector<int64_t> users;
  bool batch = false;  // {"users": [...]}: the answer is {"recommendations": [...]}
  int64_t k = 20;
  bool exclude_seen = true;
};

// What a JSON value is, for messages: "a string", "the number 1.5", "an array", ...
std::string what_is(const json& v);
// Reads a node id; "" or why not.
std::string as_id(const json& v, const std::string& where, int64_t& out);
// {"user": id, "k": K} or {"users": [id, ...], "k": K}, optionally "exclude_seen".
std::string read_recommend(const std::string& text, int64_t max_ids, RecommendBody& b, bool& too_many);
// {"pairs": [[user, item], ...]}.
std::string read_pairs(const std::string& text, int64_t max_ids, std::vector<gt::EdgePair>& pairs, bool& too_many);

// The text of an answer: {"predictions": [..], "logits": [[..], ..]} or {"embeddings": [[..], ..]}.
std::string answer_text(gt::InferenceOutput what, const gt::Tensor& t);
// The answer to /v1/recommend: one user's {"user", "items", "scores"}, or a list of them.
std::string recommend_text(const RecommendBody& b, const std::vector<gt::Recommendation>& r);
// A request refused by the session (bad ids, k, a model of the other kind) is the client's error.
int error_status(const std::string& msg);
// An upper bound on the bytes one answer holds while it is made and written: its text (at most 16
// characters a float32 with its comma, 21 a class id), a second copy in case the client asked for
// a compressed answer, the result tensor and the request's ids.
int64_t answer_bound(int64_t n, int64_t width, bool logits);

}  // namespace gt_serve
