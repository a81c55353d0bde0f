// A one-line progress bar on stderr ("epoch 3/10 [=====>    ] 12/40 loss 1.234 5.1k seeds/s").
// Drawn only when stderr is a terminal (and enabled), redrawn at most 10 times a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace gt {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, int64_t total);
  void update(int64_t done, double loss, double items_per_s);
  void finish();  // clears the line

 private:
  bool enabled_;
  std::string label_;
  int64_t total_;
  std::chrono::steady_clock::time_point last_{};
};

// "12.3k", "4.56M": compact rates for humans.
std::string human_count(double v);

}  // namespace gt
