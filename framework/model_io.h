// Saving and loading model weights (HDF5): /params/<name> float32 datasets plus root attributes
// "config" (the training config as YAML), "epoch" and "format_version". Written atomically
// (temporary file, fsync, rename), so an interrupted save leaves the previous file intact.
#pragma once

#include <string>
#include <vector>

#include "models/layers.h"

namespace gt {

void save_weights(const std::string& path, const std::vector<Param*>& params, const std::string& config_yaml,
                  int64_t epoch);
// Loads into existing parameters (same names and shapes, any device); throws naming the file
// and the parameter on a mismatch.
void load_weights(const std::string& path, const std::vector<Param*>& params);

}  // namespace gt
