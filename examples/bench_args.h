// Command-line value parsers of gt-bench's subcommands: anything malformed is a gt::Error that
// names the flag and the value (never a bare std::stoi exception).
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/error.h"

namespace gt_bench {

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// A comma-separated list of integers for `flag`; anything else is a gt::Error naming the flag.
inline std::vector<int64_t> int_list(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t pos = 0;
      out.push_back(std::stoll(item, &pos));
      if (pos != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw gt::Error(std::string("bad value '") + s + "' for " + flag, "gt-bench", "give a comma-separated list of integers");
    }
  }
  if (out.empty()) throw gt::Error(std::string("empty list for ") + flag, "gt-bench", "");
  return out;
}

// One integer in [lo, hi] for `flag`.
inline int64_t int_value(const std::string& s, const char* flag, int64_t lo, int64_t hi) {
  int64_t v = 0;
  try {
    std::size_t pos = 0;
    v = std::stoll(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    throw gt::Error(std::string("bad value '") + s + "' for " + flag, "gt-bench", "give one integer");
  }
  if (v < lo || v > hi)
    throw gt::Error(std::string(flag) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s,
                    "gt-bench", "");
  return v;
}

// One finite number > 0 for `flag`.
inline double positive_value(const std::string& s, const char* flag) {
  double v = 0.0;
  try {
    std::size_t pos = 0;
    v = std::stod(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    throw gt::Error(std::string("bad value '") + s + "' for " + flag, "gt-bench", "give a number");
  }
  if (!std::isfinite(v) || v <= 0.0)
    throw gt::Error(std::string(flag) + " must be a finite number > 0, got " + s, "gt-bench", "");
  return v;
}

}  // namespace gt_bench
