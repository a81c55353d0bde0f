/// \file
/// Errors. One exception type for everything a user can cause (bad input, config, I/O) and for
/// failed CUDA / cuBLAS / HDF5 calls. The library never calls exit() or abort().
///
/// A message has three parts: what went wrong, where (file:line, config key, op name) and a hint.
/// what() renders them on one line: "<what> [at <where>] (hint: <hint>)".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include <graphtensor/core/export.h>

namespace gt {

class GT_API Error : public std::runtime_error {
 public:
  Error(std::string what, std::string where = {}, std::string hint = {});
  const std::string& message() const { return what_; }
  const std::string& where() const { return where_; }
  const std::string& hint() const { return hint_; }

 private:
  std::string what_, where_, hint_;
};

/// Thrown by CUDA entry points of a build made without the CUDA backend.
[[noreturn]] GT_API void throw_built_without_cuda(const char* op);

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace gt

/// GT_THROW(where, hint, message parts...): message parts are streamed together.
#define GT_THROW(where, hint, ...) throw ::gt::Error(::gt::detail::concat(__VA_ARGS__), where, hint)

/// Argument checks at API boundaries (user-reachable): throws gt::Error naming the function.
#define GT_CHECK_ARG(cond, ...)                                                                  \
  do {                                                                                           \
    if (!(cond)) throw ::gt::Error(::gt::detail::concat(__VA_ARGS__), __func__, {});            \
  } while (0)
