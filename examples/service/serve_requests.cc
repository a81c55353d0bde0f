// gt-serve's request bodies and answers (examples/service/serve_requests.h).
#include "service/serve_requests.h"

#include <cstdint>

namespace gt_serve {

// Each row goes through nlohmann-json on its own, so a 65,536-row answer never exists as a tree
// (16 bytes a value and a vector a row: several times its text).
std::string answer_text(gt::InferenceOutput what, const gt::Tensor& t) {
  const int64_t n = t.size(0), d = t.size(1);
  const float* v = t.data<float>();
  std::string out;
  out.reserve(static_cast<std::size_t>(n * (d * 12 + 8) + 64));
  fjson row = fjson::array();
  auto rows = [&] {
    for (int64_t i = 0; i < n; ++i) {
      row.get_ref<fjson::array_t&>().assign(v + i * d, v + (i + 1) * d);
      out += i == 0 ? "" : ",";
      out += row.dump();
    }
  };
  if (what == gt::InferenceOutput::kLogits) {
    std::vector<int64_t> pred(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float* r = v + i * d;
      int64_t best = 0;
      for (int64_t k = 1; k < d; ++k)
        if (r[k] > r[best]) best = k;
      pred[static_cast<std::size_t>(i)] = best;
    }
    out += "{\"predictions\":" + json(pred).dump() + ",\"logits\":[";
  } else {
    out += "{\"embeddings\":[";
  }
  rows();
  out += "]}\n";
  return out;
}

std::string what_is(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_number_float()) return "the number " + v.dump() + " (not an integer)";
  if (v.is_number()) return "the number " + v.dump();
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  return v.is_array() ? "an array" : v.is_object() ? "an object" : v.type_name();
}

std::string as_id(const json& v, const std::string& where, int64_t& out) {
  if (!v.is_number_integer()) return where + " is " + what_is(v) + ", not a node id";
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return where + " = " + v.dump() + " is out of range";
  out = v.get<int64_t>();
  return "";
}

std::string read_recommend(const std::string& text, int64_t max_ids, RecommendBody& b, bool& too_many) {
  const json body = json::parse(text, nullptr, false);
  const std::string form = " (the body is {\"user\": id, \"k\": K} or {\"users\": [id, ...], \"k\": K}, "
                           "optionally \"exclude_seen\": false)";
  if (body.is_discarded()) return "the body is not valid JSON" + form;
  if (!body.is_object()) return "the body is " + what_is(body) + ", not an object" + form;
  for (const auto& [key, v] : body.items()) {
    if (key == "user") {
      int64_t u = 0;
      if (std::string e = as_id(v, "\"user\"", u); !e.empty()) return e;
      b.users.push_back(u);
    } else if (key == "users") {
      if (!v.is_array()) return "\"users\" is " + what_is(v) + ", not an array of node ids";
      if (static_cast<int64_t>(v.size()) > max_ids) {
        too_many = true;
        return "more than the server's --max-request-ids " + std::to_string(max_ids) +
               " users in one request (split the request)";
      }
      b.batch = true;
      for (std::size_t i = 0; i < v.size(); ++i) {
        int64_t u = 0;
        if (std::string e = as_id(v[i], "\"users\"[" + std::to_string(i) + "]", u); !e.empty()) return e;
        b.users.push_back(u);
      }
    } else if (key == "k") {
      if (!v.is_number_integer()) return "\"k\" is " + what_is(v) + ", not an integer";
      b.k = v.get<int64_t>();
    } else if (key == "exclude_seen") {
      if (!v.is_boolean()) return "\"exclude_seen\" is " + what_is(v) + ", not true or false";
      b.exclude_seen = v.get<bool>();
    } else {
      return "unknown key \"" + key.substr(0, 64) + "\"" + form;
    }
  }
  if (body.contains("user") && body.contains("users")) return "give \"user\" or \"users\", not both";
  if (!body.contains("user") && !body.contains("users")) return "the body has no key \"user\" or \"users\"" + form;
  return "";
}

std::string read_pairs(const std::string& text, int64_t max_ids, std::vector<gt::EdgePair>& pairs, bool& too_many) {
  const json body = json::parse(text, nullptr, false);
  const std::string form = " (the body is {\"pairs\": [[user, item], ...]})";
  if (body.is_discarded()) return "the body is not valid JSON" + form;
  if (!body.is_object() || body.size() != 1 || !body.contains("pairs")) return "the body is not an object with the one key \"pairs\"" + form;
  const json& v = body["pairs"];
  if (!v.is_array()) return "\"pairs\" is " + what_is(v) + ", not an array" + form;
  if (static_cast<int64_t>(v.size()) * 2 > max_ids) {
    too_many = true;
    return "more than the server's --max-request-ids " + std::to_string(max_ids) +
           " node ids in one request (split the request)";
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string at = "\"pairs\"[" + std::to_string(i) + "]";
    if (!v[i].is_array() || v[i].size() != 2) return at + " is not a pair [user, item]";
    gt::EdgePair p;
    if (std::string e = as_id(v[i][0], at + "[0]", p.src); !e.empty()) return e;
    if (std::string e = as_id(v[i][1], at + "[1]", p.dst); !e.empty()) return e;
    pairs.push_back(p);
  }
  return "";
}

std::string recommend_text(const RecommendBody& b, const std::vector<gt::Recommendation>& r) {
  std::string out;
  auto one = [&](std::size_t i) {
    fjson o = fjson::object();
    o["user"] = b.users[i];
    o["items"] = r[i].items;
    o["scores"] = r[i].scores;
    return o.dump();
  };
  if (!b.batch) return one(0) + "\n";
  out = "{\"recommendations\":[";
  for (std::size_t i = 0; i < r.size(); ++i) out += (i ? "," : "") + one(i);
  return out + "]}\n";
}

int error_status(const std::string& msg) {
  for (const char* s : {"out of range", "empty list", "is an item", "is not a user", "is not an item",
                        "is a link model", "is a link encoder", "is a node model"})
    if (msg.find(s) != std::string::npos) return 400;
  return msg.find("shutting down") != std::string::npos ? 503 : 500;
}

int64_t answer_bound(int64_t n, int64_t width, bool logits) {
  const int64_t text = n * (width * 16 + 4 + (logits ? 21 : 0)) + 64;
  return 2 * text + n * width * 4 + n * 8;
}

}  // namespace gt_serve
