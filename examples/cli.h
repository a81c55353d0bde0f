// The command-line rules every GraphTensor program follows, on CLI11:
//   - `--help` (and `-h`) print a help generated from the declarations, with each option's default,
//     to stdout, and exit 0;
//   - a usage error is one line on stderr, "PROGRAM: --option needs WHAT, got 'VALUE' (see
//     PROGRAM --help)", exit status 2; it names the option (CLI11's own errors do too);
//   - an option given twice is an error, "--option is given twice" (the last would win without a
//     word); an unknown one is "unknown option '--x'";
//   - numbers are checked whole ("10x", "nan", "1e999" are refused) against a stated range.
// The validators below say what they want in words ("needs a number >= 1"), so that a message is
// the same whichever program prints it.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

namespace gt_cli {

// Help layout and defaults shown by --help. Call before adding options.
inline void configure(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(40);
  // A single-valued option given twice is refused (CLI11's default for a scalar; stated here so a
  // change of default cannot drop it).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
}

// A CLI11 error in the words every GraphTensor program uses (one line).
inline std::string message(const CLI::ParseError& e) {
  std::string msg = e.what();
  for (char& c : msg)
    if (c == '\n') c = ' ';
  // CLI11's words, said as every GraphTensor program says them.
  if (const auto p = msg.find(": At Most 1 required but received "); p != std::string::npos) {
    const std::string n = msg.substr(p + 34);
    msg = msg.substr(0, p) + " is given " + (n == "2" ? "twice" : n + " times");
  } else if (const auto q = msg.find(": needs "); q != std::string::npos && msg.rfind("-", 0) == 0) {
    msg = msg.substr(0, q) + msg.substr(q + 1);  // "--port: needs ..." -> "--port needs ..."
  } else if (const std::string x = "The following argument was not expected: "; msg.rfind(x, 0) == 0) {
    const std::string arg = msg.substr(x.size());
    msg = (arg.rfind("-", 0) == 0 ? "unknown option '" : "unexpected argument '") + arg + "'";
  } else if (const std::string y = "The following arguments were not expected: "; msg.rfind(y, 0) == 0) {
    // Several: an unknown option among them is the likely cause (its value follows it).
    std::string rest = msg.substr(y.size()), first_option;
    for (std::size_t b = 0; b < rest.size() && first_option.empty();) {
      std::size_t e = std::min(rest.find(' ', b), rest.size());
      if (rest[b] == '-') first_option = rest.substr(b, e - b);
      b = e + 1;
    }
    msg = first_option.empty() ? "unexpected arguments: " + rest : "unknown option '" + first_option + "'";
  }
  return msg;
}

// Parses argv. Returns -1 when the program should go on, else the status to exit with: 0 after
// --help or --version, 2 after a usage error (printed as one line naming the option).
inline int parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    const std::string msg = message(e);
    // A subcommand's error points at its own help ("see gt-bench dkp --help").
    std::string see = app.get_name();
    if (const auto subs = app.get_subcommands(); !subs.empty()) see += " " + subs.front()->get_name();
    std::cerr << app.get_name() << ": " << msg << " (see " << see << " --help)\n";
    return 2;
  }
}

inline bool parse_int64(const std::string& s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

inline bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == '\0' && std::isfinite(out);
}

// An integer in [lo, hi]; the message is "needs WHAT in [lo, hi]" (or ">= lo" without an upper end).
inline CLI::Validator integer(int64_t lo, int64_t hi = INT64_MAX, const std::string& what = "a number") {
  const std::string want = hi == INT64_MAX ? what + " >= " + std::to_string(lo)
                                           : what + " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        int64_t v;
        if (!parse_int64(s, v) || v < lo || v > hi) return "needs " + want + ", got '" + s + "'";
        return "";
      },
      "", "integer");
}

// A finite real number in [lo, hi], or (lo, hi] when lo_open; "needs WHAT in [lo, hi]".
inline CLI::Validator real(double lo, double hi, bool lo_open, const std::string& what) {
  auto fmt = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  const std::string want = what + " in " + (lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]";
  return CLI::Validator(
      [lo, hi, lo_open, want](std::string& s) -> std::string {
        double v;
        if (!parse_double(s, v) || (lo_open ? v <= lo : v < lo) || v > hi) return "needs " + want + ", got '" + s + "'";
        return "";
      },
      "", "real");
}

// One of the given words; "needs a, b or c".
inline CLI::Validator one_of(const std::vector<std::string>& words) {
  std::string list;
  for (std::size_t i = 0; i < words.size(); ++i)
    list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return CLI::Validator(
      [words, list](std::string& s) -> std::string {
        for (const std::string& w : words)
          if (s == w) return "";
        return "needs " + list + ", got '" + s + "'";
      },
      "{" + list + "}", "one_of");
}

// A comma-separated list of integers, each >= lo or equal to `also` ("10,10", "-1,5").
inline std::vector<int64_t> int_list(const std::string& s, bool& ok) {
  std::vector<int64_t> out;
  ok = !s.empty();
  for (std::size_t b = 0; ok && b <= s.size();) {
    std::size_t e = std::min(s.find(',', b), s.size());
    int64_t v;
    ok = parse_int64(s.substr(b, e - b), v);
    out.push_back(v);
    b = e + 1;
  }
  return out;
}

}  // namespace gt_cli
