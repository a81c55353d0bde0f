// libFuzzer target: training configs (scripts/fuzz.sh runs it).
//
// The bytes are parsed as a YAML config (parse_config, then validate_config). A config that
// parses must survive to_yaml -> parse_config unchanged (the YAML saved beside model weights is
// read back this way). Every line of the input that looks like "key=value" is also tried as a
// --set override. gt::Error is the expected outcome of a bad config; anything else (another
// exception, a sanitizer report, a crash) is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    gt::Config cfg = gt::parse_config(text, "fuzz.yaml");
    const std::string yaml = gt::to_yaml(cfg);
    gt::Config again;
    try {
      again = gt::parse_config(yaml, "round-trip.yaml");
    } catch (const gt::Error&) {
      std::abort();  // to_yaml wrote YAML that parse_config rejects
    }
    if (gt::to_yaml(again) != yaml) std::abort();  // a value changed on the way
    // The text comparison above cannot see a double rounded the same way twice.
    const gt::OptimizerConfig &a = cfg.optimizer, &b = again.optimizer;
    if (a.lr != b.lr || a.weight_decay != b.weight_decay || a.momentum != b.momentum || a.beta1 != b.beta1 ||
        a.beta2 != b.beta2 || a.eps != b.eps || cfg.model.dropout != again.model.dropout)
      std::abort();
    gt::validate_config(cfg);
  } catch (const gt::Error&) {
    // The expected outcome of a malformed config.
  }

  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.find('=') == std::string_view::npos || line.size() > 1024) continue;
    gt::Config cfg;
    try {
      gt::apply_override(cfg, std::string(line));
    } catch (const gt::Error&) {
    }
  }
  return 0;
}
