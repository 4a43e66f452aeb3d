// Small JSON files that tools and the supervisor hand each other (run.json,
// nodes.json, request files): written atomically, read with a size bound.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace fmstack {

// Writes `j` (indented) to `path` atomically; throws Error naming the path.
void WriteJsonFile(const std::string& path, const nlohmann::json& j);

// Reads a JSON object of at most `max_bytes`; throws Error naming the path
// and what is wrong (missing, too large, not an object).
nlohmann::json ReadJsonFile(const std::string& path, size_t max_bytes);

}  // namespace fmstack
