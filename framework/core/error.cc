#include <graphtensor/core/error.h>

#include <algorithm>

namespace gt {
namespace {
// A message is one line of text: control bytes that come from the input (a NUL in a config or a
// binary file named as one) are written as \xNN, so that nothing after them is lost when what()
// is printed as a C string. Newlines and tabs are kept.
bool is_control(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f; }

std::string printable(std::string s) {
  if (std::none_of(s.begin(), s.end(), [](char c) { return is_control(static_cast<unsigned char>(c)); })) return s;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (is_control(c)) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string render(const std::string& what, const std::string& where, const std::string& hint) {
  std::string s = what;
  if (!where.empty()) s += " [at " + where + "]";
  if (!hint.empty()) s += " (hint: " + hint + ")";
  return s;
}
}  // namespace

Error::Error(std::string what, std::string where, std::string hint)
    : std::runtime_error(render(printable(what), printable(where), printable(hint))),
      what_(printable(std::move(what))), where_(printable(std::move(where))), hint_(printable(std::move(hint))) {}

void throw_built_without_cuda(const char* op) {
  throw Error("this build of GraphTensor has no CUDA backend", op,
              "reconfigure with -DGT_WITH_CUDA=ON on a machine with the CUDA Toolkit, or use device: cpu");
}

}  // namespace gt
