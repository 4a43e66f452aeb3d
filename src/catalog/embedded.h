// The catalog files compiled into the binary (generated from data/catalog).
#pragma once

#include <span>
#include <string_view>

namespace fmstack::catalog {

struct EmbeddedFile {
  std::string_view name;  // "instances.toml"
  std::string_view text;
};

std::span<const EmbeddedFile> EmbeddedCatalogFiles();

}  // namespace fmstack::catalog
