#include "framework/error.h"

namespace gt {
namespace {
std::string render(const std::string& what, const std::string& where, const std::string& hint) {
  std::string s = what;
  if (!where.empty()) s += " [at " + where + "]";
  if (!hint.empty()) s += " (hint: " + hint + ")";
  return s;
}
}  // namespace

Error::Error(std::string what, std::string where, std::string hint)
    : std::runtime_error(render(what, where, hint)),
      what_(std::move(what)), where_(std::move(where)), hint_(std::move(hint)) {}

void throw_built_without_cuda(const char* op) {
  throw Error("this build of GraphTensor has no CUDA backend", op,
              "reconfigure with -DGT_WITH_CUDA=ON on a machine with the CUDA Toolkit, or use device: cpu");
}

}  // namespace gt
