// workload: named shapes of well-known models, so a spec can say
// `model = "llama3-70b"` and override single fields.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "workload/shape.h"

namespace fmstack::workload {

// The preset's shape, or nullopt for an unknown name (case-sensitive).
std::optional<TransformerShape> FindPreset(std::string_view name);

// Every preset name, in a stable order (for listings and "did you mean").
std::vector<std::string> PresetNames();

}  // namespace fmstack::workload
