// capi: the one way an opening function reports its error, into the
// caller's buffer (always NUL-terminated, truncated to fit).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>

namespace fmstack::capi {

inline void CopyError(std::string_view what, char* err, size_t len) {
  if (err == nullptr || len == 0) return;
  const size_t n = std::min(what.size(), len - 1);
  std::memcpy(err, what.data(), n);
  err[n] = '\0';
}

}  // namespace fmstack::capi
