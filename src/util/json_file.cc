#include "util/json_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack {

void WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  AtomicFileWriter w(path);
  w.Write(text.data(), text.size());
  w.Commit();
}

nlohmann::json ReadJsonFile(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(fmt::format("{}: {}", path, ec.message()));
  if (size > max_bytes)
    throw Error(fmt::format("{}: {} bytes, expected at most {}", path, size, max_bytes));
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  return j;
}

}  // namespace fmstack
