// libFuzzer target: any bytes as a checkpoint's manifest.json and as a
// shard's safetensors header. Every outcome must be a parsed structure or
// fmstack::Error; anything else is a bug.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckpt/format.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) (void)fmstack::ckpt::Manifest::FromJson(j, "fuzz/manifest.json");
  } catch (const fmstack::Error&) {
  }
  try {
    if (size >= 8) {
      const int64_t need = fmstack::ckpt::SafetensorsHeaderBytes(bytes.substr(0, 8), "fuzz");
      if (need <= static_cast<int64_t>(size))
        (void)fmstack::ckpt::ParseSafetensorsHeader(bytes, "fuzz", static_cast<int64_t>(size));
    }
  } catch (const fmstack::Error&) {
  }
  return 0;
}
