// Internal to preprocess/dataset.cc (the reader and Dataset::validate) and
// preprocess/dataset_writer.cc (DatasetWriter): the checks that both apply, defined in dataset.cc,
// so that a dataset is held to the same rules when it is written as when it is read.
// Not installed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gt::detail {

// Each throws gt::Error naming `where` and the first bad entry. n is the number of nodes.
void check_graph(const std::vector<int64_t>& indptr, const std::vector<int32_t>& indices, int64_t n,
                 const std::string& where);
void check_labels(const std::vector<int32_t>& labels, int64_t n, int64_t num_classes, const std::string& where);
void check_split(const std::string& name, const std::vector<int64_t>& ids, int64_t n, const std::string& where);

}  // namespace gt::detail
