#include "framework/core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace gt {

std::string human_count(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

ProgressBar::ProgressBar(bool enabled, std::string label, int64_t total)
    : enabled_(enabled && isatty(STDERR_FILENO)), label_(std::move(label)), total_(total) {}

void ProgressBar::update(int64_t done, double loss, double items_per_s) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int kWidth = 30;
  int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld loss %.4f %s seeds/s ", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), loss, human_count(items_per_s).c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace gt
