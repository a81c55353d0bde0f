// Reading a memory-mapped file that may shrink under the reader.
//
// A mapped file that another process truncates (or rewrites in place: `gt-data synth` over the
// dataset of a running job, a copy onto it, a full disk's cleanup) has pages that no longer exist;
// touching them raises SIGBUS, whose default action kills the process with no message. The row
// copies of FeatureTable::gather (dataset.features: mmap) go through copy_from_mapping, which
// catches the fault of its own copy and returns false, so the gather can throw a gt::Error naming
// the file and the row. (A file replaced by renaming a new one over it is no danger: the mapping
// keeps the old file.)
//
// How: a SIGBUS handler, installed on the first copy, jumps back to a recovery point that each
// copy sets in a thread-local variable (sigsetjmp without the signal mask, so the cost is a few
// stores per row, no system call; the handler is SA_NODEFER, so no mask needs restoring). A SIGBUS
// raised anywhere else goes to the handler that was there before (or the default action) as if
// this one did not exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gt {

// memcpy(dst, src, n) from a mapping; false when a page of src could not be read (SIGBUS): dst
// then holds part of the bytes. Thread-safe.
bool copy_from_mapping(void* dst, const void* src, std::size_t n) noexcept;

// The gt::Error for a row that could not be read from the mapped dataset file `path`.
[[noreturn]] void throw_mapped_row_unreadable(const std::string& path, int64_t row);

}  // namespace gt
