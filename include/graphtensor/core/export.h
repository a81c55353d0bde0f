/// \file
/// GT_API marks the public API: the library is compiled with -fvisibility=hidden and
/// -fvisibility-inlines-hidden, so libgraphtensor.so exports only the classes (their members,
/// vtables and type information) and free functions declared with GT_API in these headers.
/// docs/library.md lists what that makes public; tests/cli/symbols.sh checks it.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define GT_API __attribute__((visibility("default")))
#else
#define GT_API
#endif
