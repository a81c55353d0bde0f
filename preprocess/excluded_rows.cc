// The packed form of an EdgeExclusion (preprocess/excluded_rows.h).
#include "preprocess/excluded_rows.h"

namespace gt {

std::vector<int64_t> pack_excluded_rows(const EdgeExclusion& x) {
  const std::vector<int64_t>& dsts = x.destinations();
  const std::vector<int64_t>& ptr = x.position_ptr();
  const std::vector<int64_t>& pos = x.positions();
  std::vector<int64_t> out;
  out.reserve(dsts.size() + ptr.size() + pos.size());
  out.insert(out.end(), dsts.begin(), dsts.end());
  out.insert(out.end(), ptr.begin(), ptr.end());
  out.insert(out.end(), pos.begin(), pos.end());
  return out;
}

}  // namespace gt
